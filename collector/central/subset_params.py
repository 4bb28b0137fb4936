"""Public parameters of the per-subset statistics and their worst-case error metric.

See ``docs/central.md`` ("subset-stats"). Reference: ``docs/central-algorithms.md`` C§2.1 (the
mean/variance budget split, C§5 B11), C§2.4 (the worst-case error E_g of eq. 12/13, with the
weights of C§5 B8) and C§5 B13 (the grid of the release, whose E|noise| the ``"release"``
error model uses).

The planner (:mod:`uldp.collector.central.clip_user`) and the release
(:mod:`uldp.collector.central.subset_release`) must use the same parameters; the error metric
reads public counts only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from uldp.collector.central.subset_bounds import Number
from uldp.collector.central.subset_noise import expected_abs_noise

__all__ = [
    "ErrorModel",
    "Statistic",
    "SubsetStatsParams",
    "error_scalar",
    "grid_error",
    "grid_error_arrays",
]

Statistic = Literal["mean", "variance", "both"]
ErrorModel = Literal["release", "paper"]


# ---- parameters -----------------------------------------------------------------------
def _finite(name: str, x: Any) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer,
                                                            np.floating)):
        raise ValueError(f"{name} must be a number, got {x!r}")
    if not math.isfinite(float(x)):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return float(x)


@dataclass(frozen=True)
class SubsetStatsParams:
    """Public parameters shared by the planner and the release (they must agree, B11).

    epsilon: pure-DP budget *per subset* (a user in K subsets spends Kε in total).
    lower, upper: public value range; U = upper − lower (shift extension of C§1.1).
    statistic: ``"mean"``, ``"variance"`` or ``"both"``.
    mean_share: fraction of ε spent on the mean when ``statistic == "both"`` (B11).
    weights: (w_μ, w_Var) of the error metric (B8; change the plan, never privacy).
    grid_bits: k in the fixed-point grid step γ = Δ/2^k (B13). A subset with more than
        2^29 kept records uses a smaller, public k (float safety,
        :func:`~uldp.collector.central.subset_noise.effective_bits`);
        the ``"release"`` error model then slightly understates its E|noise|.
    error_model: ``"release"`` — E|noise| of the discrete noise actually added (rounded-up
        sensitivity, B13); ``"paper"`` — the continuous Laplace term Δ/ε_i of eq. (13).
    """

    epsilon: float
    upper: float
    lower: float = 0.0
    statistic: Statistic = "both"
    mean_share: float = 0.5
    weights: tuple[float, float] = (1.0, 1.0)
    grid_bits: int = 16
    error_model: ErrorModel = "release"

    def __post_init__(self) -> None:
        eps = _finite("epsilon", self.epsilon)
        if eps <= 0:
            raise ValueError(f"epsilon must be positive, got {self.epsilon!r}")
        lo, hi = _finite("lower", self.lower), _finite("upper", self.upper)
        if not hi > lo:
            raise ValueError(f"upper must exceed lower, got lower={lo!r}, upper={hi!r}")
        if self.statistic not in ("mean", "variance", "both"):
            raise ValueError(f"statistic must be 'mean', 'variance' or 'both', "
                             f"got {self.statistic!r}")
        share = _finite("mean_share", self.mean_share)
        if self.statistic == "both" and not 0 < share < 1:
            raise ValueError(f"mean_share must lie strictly between 0 and 1, got {share!r}")
        if (not isinstance(self.weights, (tuple, list)) or len(self.weights) != 2):
            raise ValueError(f"weights must be a pair (w_mean, w_var), got {self.weights!r}")
        w = tuple(_finite("weights", x) for x in self.weights)
        if min(w) < 0 or max(w) == 0:
            raise ValueError(f"weights must be non-negative and not both 0, got {w!r}")
        if (isinstance(self.grid_bits, (bool, np.bool_))
                or not isinstance(self.grid_bits, (int, np.integer))
                or not 0 <= self.grid_bits <= 30):
            raise ValueError(f"grid_bits must be an integer in [0, 30], got {self.grid_bits!r}")
        if self.error_model not in NOISE_FACTORS:
            raise ValueError(f"error_model must be 'release' or 'paper', "
                             f"got {self.error_model!r}")
        for eps_i in (self.epsilon_mean, self.epsilon_var):
            if eps_i > 0 and math.floor(Fraction(eps_i) * (1 << 24)) < 1:
                raise ValueError(f"epsilon share {eps_i!r} is below the supported 2^-24")
        object.__setattr__(self, "weights", w)

    @property
    def width(self) -> float:
        """U = upper − lower."""
        return float(self.upper) - float(self.lower)

    @property
    def epsilon_mean(self) -> float:
        if self.statistic == "variance":
            return 0.0
        return float(self.epsilon) * (1.0 if self.statistic == "mean" else self.mean_share)

    @property
    def epsilon_var(self) -> float:
        if self.statistic == "mean":
            return 0.0
        if self.statistic == "variance":
            return float(self.epsilon)
        return float(self.epsilon) - self.epsilon_mean

    def error_constants(self) -> tuple[float, float, float, float]:
        """(w_μ, c_μ, w_Var, c_Var): E_g = w_μ(E_μ + c_μΔ_μ) + w_Var(E_Var + c_VarΔ_Var).

        ``c_i`` is E|noise| per unit of sensitivity; weights of unreleased statistics are 0.
        """
        w_mu = self.weights[0] if self.epsilon_mean > 0 else 0.0
        w_var = self.weights[1] if self.epsilon_var > 0 else 0.0
        c_mu = _noise_factor(self.epsilon_mean, self.grid_bits, self.error_model)
        c_var = _noise_factor(self.epsilon_var, self.grid_bits, self.error_model)
        return w_mu, c_mu, w_var, c_var

    def describe(self) -> str:
        return (f"ε={self.epsilon:g} per subset ({self.statistic}; ε_μ={self.epsilon_mean:g}, "
                f"ε_Var={self.epsilon_var:g}), values in [{self.lower:g}, {self.upper:g}], "
                f"weights={self.weights}, error model={self.error_model}")


#: E|noise| / Δ of one released statistic per error model, given (ε share, grid bits):
#: ``"paper"`` is the continuous Laplace term 1/ε_i of eq. (13), ``"release"`` the discrete
#: noise actually added (B13)
NOISE_FACTORS: dict[str, Callable[[float, int], float]] = {
    "release": lambda eps_share, grid_bits: expected_abs_noise(1.0, eps_share,
                                                               grid_bits=grid_bits),
    "paper": lambda eps_share, _grid_bits: 1.0 / eps_share,
}


def _noise_factor(eps_share: float, grid_bits: int, model: str) -> float:
    """E|noise| / Δ for one statistic (0 if the statistic is not released)."""
    if eps_share <= 0:
        return 0.0
    return NOISE_FACTORS[model](eps_share, grid_bits)


# ---- C§2.4: worst-case error metric ---------------------------------------------------
def grid_error(kept: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray, *,
               upper: Number, epsilon: float, statistic: Statistic = "both",
               mean_share: float = 0.5, weights: tuple[float, float] = (1.0, 1.0),
               error_model: ErrorModel = "paper", grid_bits: int = 16) -> float:
    """E_g(Γ) of eq. (13) for one subset: kept counts Γ_ℓ vs original counts m_ℓ.

    Default ``error_model="paper"``: ``E_μ + E_Var + Δ_μ/ε_μ + Δ_Var/ε_Var`` (2Δ/ε each for
    the even split). ``+inf`` if nothing is kept (B5).
    """
    k = np.asarray(kept)
    m = np.asarray(counts)
    if k.shape != m.shape or k.ndim != 1:
        raise ValueError(f"kept and counts must be 1-D of the same length, got {k.shape} "
                         f"and {m.shape}")
    if k.size == 0 or not np.issubdtype(m.dtype, np.integer) or not np.issubdtype(
            k.dtype, np.integer):
        raise ValueError("kept and counts must be non-empty integer arrays")
    if (m < 0).any() or (k < 0).any() or (k > m).any():
        raise ValueError("need 0 <= kept <= counts elementwise")
    if m.sum() == 0:
        raise ValueError("counts must not all be 0 (an empty subset has no statistic)")
    params = SubsetStatsParams(epsilon=epsilon, upper=float(upper), statistic=statistic,
                               mean_share=mean_share, weights=weights,
                               error_model=error_model, grid_bits=grid_bits)
    return error_scalar(int(k.sum()), int(m.sum()), int(k.max()), params.width,
                         params.error_constants())


def error_scalar(s: int, n: int, gs: int, u: float,
                  consts: tuple[float, float, float, float]) -> float:
    """E_g for kept total ``s``, original total ``n``, kept max ``gs`` (plain floats).

    Same operation order as :func:`grid_error_arrays` so both give identical floats.
    """
    if s <= 0:
        return math.inf
    w_mu, c_mu, w_var, c_var = consts
    u2 = u * u
    sf, nf = float(s), float(n)
    d = n - s
    e_mu = u * float(d) / nf
    if d == 0:
        e_var = 0.0
    elif 2 * s > n:
        e_var = u2 * float(s * d) / (nf * nf)
    elif n % 2 == 0:
        e_var = u2 / 4
    else:
        e_var = u2 * float(n * n - 1) / (4 * nf * nf)
    d_mu = u * float(gs) / sf
    if s > 2 * gs:
        d_var = u2 * float(gs * (s - gs)) / (sf * sf)
    elif s % 2 == 0:
        d_var = u2 / 4
    else:
        d_var = u2 * float(s * s - 1) / (4 * sf * sf)
    return w_mu * (e_mu + c_mu * d_mu) + w_var * (e_var + c_var * d_var)


def grid_error_arrays(s: np.ndarray, n: np.ndarray, gs: np.ndarray, u: float,
                      consts: tuple[float, float, float, float]) -> np.ndarray:
    """Vectorized :func:`error_scalar` (S, N, Γ⋆ arrays, broadcast); +inf where S = 0."""
    s, n, gs = np.broadcast_arrays(np.asarray(s, np.int64), np.asarray(n, np.int64),
                                   np.asarray(gs, np.int64))
    w_mu, c_mu, w_var, c_var = consts
    u2 = u * u
    sf = np.maximum(s, 1).astype(np.float64)
    nf = n.astype(np.float64)
    d = n - s
    e_mu = u * d.astype(np.float64) / nf
    e_var = np.where(
        d == 0, 0.0,
        np.where(2 * s > n, u2 * (s * d).astype(np.float64) / (nf * nf),
                 np.where(n % 2 == 0, u2 / 4,
                          u2 * (n * n - 1).astype(np.float64) / (4 * nf * nf))))
    d_mu = u * gs.astype(np.float64) / sf
    d_var = np.where(
        s > 2 * gs, u2 * (gs * (s - gs)).astype(np.float64) / (sf * sf),
        np.where(s % 2 == 0, u2 / 4, u2 * (s * s - 1).astype(np.float64) / (4 * sf * sf)))
    out = w_mu * (e_mu + c_mu * d_mu) + w_var * (e_var + c_var * d_var)
    return np.where(s > 0, out, np.inf)
