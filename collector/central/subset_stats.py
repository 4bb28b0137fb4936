"""Per-subset means and variances under user-level DP (baseline and clip mechanisms).

Spec: ``composition_suppression.md`` — implemented here:

* §1.2 targets (per-subset mean and *population* variance, §5 B14);
* §2.1 baseline mechanism and the exact user-level sensitivities (Prop. III.1);
* §2.2 clip mechanism and its sensitivities (Lemma III.3; one ``var_sensitivity`` serves both);
* §2.3 worst-case clipping bias (Thm IV.1 and the **corrected** Thm IV.2, §5 B3);
* §2.4 worst-case error metric (eq. 12/13) with the split of §5 B11 and weights of §5 B8;
* §2.6 release after Clip-User (the plan comes from :mod:`uldp.collector.central.clip_user`);
* §5 B1 (occupancy must be declared public), B4 (keep the *first* Γ records in input order),
  B5 (S = 0 is infeasible), B9 (per-coordinate intervals), B13 (discrete noise), B15 (clamp;
  the clamp count is logged for operators, never put in the release).

Privacy argument (pure user-level ε-DP per subset; Kε overall by Thm II.3)
-------------------------------------------------------------------------
Neighbours (§1.3) share the public occupancy array ``A`` and differ in the values of one
user. Everything that is not a value — which subsets exist, the kept counts Γ, the
sensitivities Δ, the grid steps and the noise scales — is a function of ``(A, Γ, U, ε)``
only and is recomputed here from them (never accepted as an input).

For one subset and one statistic θ with exact sensitivity Δ > 0 (§2.1/§2.2 formulas):

1. values are clamped to ``[lower, upper]`` (a per-record, data-independent map; B15) and the
   first Γ_ℓ records of each user are kept (a rule depending only on that user's own record
   order; B4), so θ of the kept records has sensitivity at most Δ;
2. the grid step is ``γ = Δ / 2^k`` (public), so the exact grid position ``θ/γ`` moves by at
   most ``2^k`` between neighbours;
3. the released integer is ``r = floor(θ̂/γ + 1/2)`` where ``θ̂`` is θ computed in floating
   point with ``math.fsum``. ``floor(x + 1/2)`` is monotone and commutes with integer shifts,
   so if the computed positions of two neighbours differ by less than ``2^k + 1`` the rounded
   integers differ by at most ``Δ_int = 2^k + 1``. The float error of a computed position is
   at most ``2^(k-48)·S`` grid units (fsum is correctly rounded; the bound is derived in
   :func:`_effective_bits`), and ``k`` is lowered from a public function of ``S`` so that
   this is ≤ 1/8; two neighbours' computed positions therefore differ by ≤ 2^k + 1/4 + tiny;
4. ``r + Z`` with ``Z ~ DLap(Δ_int/ε_r)`` (exact CKS sampler, ε_r ≤ ε rounded down to
   2^-24, :mod:`uldp.client.noise`) is ε_r-DP on integers, hence ε-DP, and the released
   float ``γ·(r + Z)`` is post-processing.

Mean and variance use budget shares ``ε_μ + ε_Var = ε`` (default ε/2 each, §2.1, B11), so one
subset is ε-DP; a subset's release reads only that subset's records, so by disjoint-subset
composition (Thm II.3) the whole release is ``max_ℓ ε·|{g: Γ_{g,ℓ} > 0}| = Kε``-DP. When
``Δ = 0`` (the variance of a single kept sample) the statistic is the constant 0 and is
released without noise.

Every released mean is clamped into ``[lower, upper]`` and every released variance into
``[0, (upper − lower)²/4]`` (post-processing; the estimands lie there). Estimands: the
per-subset mean and population variance of the kept *records* (record-weighted, not a
mean of user means).

Only sample *values* are protected: ``A`` (who is in which subset, with how many records) is
public by declaration (B1) and the caller must say so with ``public_occupancy=True``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from uldp.client.noise import discrete_laplace, laplace_scale
from uldp.client.randomness import RandomSource, as_source
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord

if TYPE_CHECKING:
    from uldp.collector.central.clip_user import ClipUserPlan

__all__ = [
    "Occupancy",
    "Statistic",
    "SubsetStatsParams",
    "expected_abs_noise",
    "grid_error",
    "grid_error_arrays",
    "kept_summary",
    "mean_bias",
    "mean_sensitivity",
    "noise_interval",
    "occupancy_from_rows",
    "require_public_occupancy",
    "subset_stats",
    "var_bias",
    "var_sensitivity",
]

Statistic = Literal["mean", "variance", "both"]
ErrorModel = Literal["release", "paper"]
Number = Any  # int, float or fractions.Fraction (formulas are exact on Fractions)
_LOG = logging.getLogger(__name__)

# Float-safety budget: the computed grid position may be off by at most 2^(k-48)·S units
# (see _effective_bits); we keep that at or below 1/8 of a unit.
_FLOAT_SAFETY_EXP = 45


# ---- §2.1–2.3: exact sensitivities and worst-case biases ------------------------------
def _check_count(name: str, value: Number, *, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def _check_upper(upper: Number) -> Number:
    if isinstance(upper, Fraction):
        ok = upper > 0
    else:
        ok = isinstance(upper, (int, float, np.integer, np.floating)) and math.isfinite(
            upper) and upper > 0
    if not ok:
        raise ValueError(f"upper (the range width U) must be a finite positive number, "
                         f"got {upper!r}")
    return upper


def mean_sensitivity(max_count: int, total: int, upper: Number) -> Number:
    """Δ_μ = U·m⋆/N (eq. 5); with (Γ⋆, S) it is the clipped Δ (eq. 9)."""
    m = _check_count("max_count", max_count, minimum=1)
    n = _check_count("total", total, minimum=1)
    if m > n:
        raise ValueError(f"max_count ({m}) cannot exceed total ({n})")
    return _check_upper(upper) * m / n


def var_sensitivity(max_count: int, total: int, upper: Number) -> Number:
    """Exact user-level sensitivity of the population variance (Prop. III.1, Lemma III.3).

    ``max_count`` = largest per-user count m⋆ (or Γ⋆), ``total`` = N (or S), ``upper`` = U.
    """
    m = _check_count("max_count", max_count, minimum=1)
    n = _check_count("total", total, minimum=1)
    if m > n:
        raise ValueError(f"max_count ({m}) cannot exceed total ({n})")
    u2 = _check_upper(upper) ** 2
    if n > 2 * m:
        return u2 * (m * (n - m)) / (n * n)
    if n % 2 == 0:
        return u2 / 4
    return u2 * (n * n - 1) / (4 * n * n)


def mean_bias(kept: int, total: int, upper: Number) -> Number:
    """Worst-case |μ − μ_clip| = U(N − S)/N (Thm IV.1)."""
    s = _check_count("kept", kept, minimum=0)
    n = _check_count("total", total, minimum=1)
    if s > n:
        raise ValueError(f"kept ({s}) cannot exceed total ({n})")
    return _check_upper(upper) * (n - s) / n


def var_bias(kept: int, total: int, upper: Number) -> Number:
    """Worst-case |Var − Var_clip| (Thm IV.2 **corrected**, spec §2.3 / §5 B3).

    0 if nothing is dropped; ``U²S(N−S)/N²`` if ``2S > N``; else ``U²/4`` (N even) or
    ``U²/4·(1 − 1/N²)`` (N odd). ``kept = 0`` is the suppressed-everything limit.
    """
    s = _check_count("kept", kept, minimum=0)
    n = _check_count("total", total, minimum=1)
    if s > n:
        raise ValueError(f"kept ({s}) cannot exceed total ({n})")
    u2 = _check_upper(upper) ** 2
    if s == n:
        return u2 * 0
    if 2 * s > n:
        return u2 * (s * (n - s)) / (n * n)
    if n % 2 == 0:
        return u2 / 4
    return u2 * (n * n - 1) / (4 * n * n)


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
    lower, upper: public value range; U = upper − lower (shift extension of §1.1).
    statistic: ``"mean"``, ``"variance"`` or ``"both"``.
    mean_share: fraction of ε spent on the mean when ``statistic == "both"`` (B11).
    weights: (w_μ, w_Var) of the error metric (B8; change the plan, never privacy).
    grid_bits: k in the fixed-point grid step γ = Δ/2^k (B13). A subset with more than
        2^29 kept records uses a smaller, public k (float safety, :func:`_effective_bits`);
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
        if self.error_model not in ("release", "paper"):
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


def _noise_factor(eps_share: float, grid_bits: int, model: str) -> float:
    """E|noise| / Δ for one statistic (0 if the statistic is not released)."""
    if eps_share <= 0:
        return 0.0
    if model == "paper":
        return 1.0 / eps_share
    return expected_abs_noise(1.0, eps_share, grid_bits=grid_bits)


def expected_abs_noise(sensitivity: float, epsilon: float, *, grid_bits: int = 16) -> float:
    """E|γ·DLap(Δ_int/ε_r)| for the release's noise: γ = Δ/2^k, Δ_int = 2^k + 1 (B13).

    ``E|DLap(t)| = 2q/(1 − q²) = 1/sinh(1/t)``; this is at most ``Δ(1 + 2^-k)/ε_r``, the
    rounded-up continuous term.
    """
    if sensitivity == 0:
        return 0.0
    scale = laplace_scale((1 << grid_bits) + 1, epsilon)
    gamma = float(sensitivity) / (1 << grid_bits)
    return gamma / math.sinh(scale.den / scale.num)


def noise_interval(sensitivity: float, epsilon: float, *, delta: float = 0.05,
                   coordinates: int = 2, grid_bits: int = 16) -> float:
    """Half-width h with P(|noise| > h) ≤ δ/coordinates for one released coordinate (B9).

    Exact for the discrete noise: P(|Z| > k) = 2q^(k+1)/(1 + q) for Z ~ DLap(t).
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if sensitivity == 0:
        return 0.0
    scale = laplace_scale((1 << grid_bits) + 1, epsilon)
    logq = -scale.den / scale.num
    q = math.exp(logq)
    target = delta / coordinates
    k = max(0, math.ceil(math.log(target * (1 + q) / 2) / logq - 1))
    while 2 * math.exp(logq * (k + 1)) / (1 + q) > target:
        k += 1
    return k * float(sensitivity) / (1 << grid_bits)


# ---- §2.4: worst-case error metric ---------------------------------------------------
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
    return _error_scalar(int(k.sum()), int(m.sum()), int(k.max()), params.width,
                         params.error_constants())


def _error_scalar(s: int, n: int, gs: int, u: float,
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
    """Vectorized :func:`_error_scalar` (S, N, Γ⋆ arrays, broadcast); +inf where S = 0."""
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


# ---- occupancy (the public array A, stored sparsely) ---------------------------------
@dataclass(frozen=True, eq=False)
class Occupancy:
    """Sparse public occupancy array: pair i = (user ``users[pair_user[i]]``, subset
    ``subsets[pair_grid[i]]``) with ``counts[i] = m_{g,ℓ} > 0`` records.

    Pairs are sorted by (grid, user); ``users`` and ``subsets`` are sorted unique labels, so
    user and grid ids are ranks (ties in Clip-User go to the smallest id).
    """

    users: np.ndarray
    subsets: np.ndarray
    pair_user: np.ndarray
    pair_grid: np.ndarray
    counts: np.ndarray

    @property
    def n_users(self) -> int:
        return int(self.users.size)

    @property
    def n_subsets(self) -> int:
        return int(self.subsets.size)

    def totals(self) -> np.ndarray:
        """N_g per subset."""
        return np.bincount(self.pair_grid, weights=self.counts,
                           minlength=self.n_subsets).astype(np.int64)

    def subsets_per_user(self) -> np.ndarray:
        """G_ℓ per user (number of subsets touched)."""
        return np.bincount(self.pair_user, minlength=self.n_users).astype(np.int64)

    def to_dense(self) -> np.ndarray:
        a = np.zeros((self.n_users, self.n_subsets), dtype=np.int64)
        a[self.pair_user, self.pair_grid] = self.counts
        return a

    @classmethod
    def from_dense(cls, counts: np.ndarray, users: np.ndarray | None = None,
                   subsets: np.ndarray | None = None) -> Occupancy:
        """From an L×G count matrix (rows: users, columns: subsets); zero rows dropped."""
        a = np.asarray(counts)
        if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"counts must be a 2-D integer array, got {a.dtype} {a.shape}")
        if (a < 0).any():
            raise ValueError("counts must be non-negative")
        users = np.arange(a.shape[0]) if users is None else np.asarray(users)
        subsets = np.arange(a.shape[1]) if subsets is None else np.asarray(subsets)
        if users.shape != (a.shape[0],) or subsets.shape != (a.shape[1],):
            raise ValueError("users/subsets labels must match the count matrix shape")
        if np.unique(users).size != users.size or np.unique(subsets).size != subsets.size:
            raise ValueError("users and subsets labels must be unique")
        uo, so = np.argsort(users, kind="stable"), np.argsort(subsets, kind="stable")
        a = a[uo][:, so]
        keep_u = a.sum(axis=1) > 0
        keep_g = a.sum(axis=0) > 0
        a = a[keep_u][:, keep_g]
        if a.size == 0:
            raise ValueError("counts has no positive entry")
        g_idx, u_idx = np.nonzero(a.T)
        return cls(users=users[uo][keep_u], subsets=subsets[so][keep_g],
                   pair_user=u_idx.astype(np.int64), pair_grid=g_idx.astype(np.int64),
                   counts=a.T[g_idx, u_idx].astype(np.int64))

    def same_as(self, other: Occupancy) -> bool:
        return (np.array_equal(self.users, other.users)
                and np.array_equal(self.subsets, other.subsets)
                and np.array_equal(self.pair_user, other.pair_user)
                and np.array_equal(self.pair_grid, other.pair_grid)
                and np.array_equal(self.counts, other.counts))


@dataclass(frozen=True, eq=False)
class _Rows:
    """Validated rows with their (grid, user) pair index and within-pair rank."""

    occupancy: Occupancy
    row_pair: np.ndarray  # pair index of each row
    row_rank: np.ndarray  # 0-based position of the row among its pair's rows (input order)


def _check_labels(name: str, arr: Any, n: int | None) -> np.ndarray:
    a = np.asarray(arr)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} must have one entry per row ({a.shape[0]} != {n})")
    if a.size == 0:
        raise ValueError(f"{name} is empty: no record was given")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinity")
    if a.dtype.kind == "O":
        try:
            np.argsort(a)
        except TypeError as exc:
            raise ValueError(f"{name} labels must be mutually comparable: {exc}") from None
    return a


def _index_rows(user_ids: Any, subsets: Any) -> _Rows:
    u = _check_labels("user_ids", user_ids, None)
    g = _check_labels("subsets", subsets, u.shape[0])
    users, u_inv = np.unique(u, return_inverse=True)
    grids, g_inv = np.unique(g, return_inverse=True)
    u_inv = u_inv.reshape(-1).astype(np.int64)
    g_inv = g_inv.reshape(-1).astype(np.int64)
    key = g_inv * np.int64(users.size) + u_inv
    order = np.argsort(key, kind="stable")  # stable: keeps input order within a pair
    sk = key[order]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    counts = np.diff(np.r_[starts, sk.size]).astype(np.int64)
    pair_of_sorted = np.repeat(np.arange(starts.size), counts)
    rank_sorted = np.arange(sk.size) - starts[pair_of_sorted]
    row_pair = np.empty(sk.size, np.int64)
    row_rank = np.empty(sk.size, np.int64)
    row_pair[order] = pair_of_sorted
    row_rank[order] = rank_sorted
    first = sk[starts]
    occ = Occupancy(users=users, subsets=grids, pair_user=(first % users.size).astype(np.int64),
                    pair_grid=(first // users.size).astype(np.int64), counts=counts)
    return _Rows(occupancy=occ, row_pair=row_pair, row_rank=row_rank)


def occupancy_from_rows(user_ids: Any, subsets: Any) -> Occupancy:
    """The public occupancy array A of record rows (reads labels only, never values)."""
    return _index_rows(user_ids, subsets).occupancy


def require_public_occupancy(public_occupancy: Any) -> None:
    """§5 B1: refuse unless the caller declares the occupancy array public."""
    if public_occupancy is not True:
        raise ValueError(
            "public_occupancy must be True: this mechanism protects sample values only and "
            "reveals who contributes to which subset and how often (spec §5 B1)")


# ---- §2.2 / §2.6: the release ---------------------------------------------------------
def _effective_bits(grid_bits: int, kept_total: np.ndarray) -> np.ndarray:
    """Per-subset k ≤ grid_bits with 2^(k-48)·S ≤ 1/8 (float safety, module docstring).

    Derivation: fsum makes the computed mean exact up to ≲ 2 ulp(U) ≤ 2^-51·U, and the
    two-pass variance up to ≲ 2^-49·U²; the division by γ adds a relative 2^-53. Since
    Δ_μ ≥ U/S and Δ_Var ≥ U²/(2S) for S ≥ 2, the error in grid units (γ = Δ/2^k) is at
    most 2^(k-48)·S. Requiring ≤ 1/8 gives k ≤ 45 − log2 S. Public (depends on S only).
    """
    s = np.maximum(np.asarray(kept_total, np.int64), 1)
    cap = _FLOAT_SAFETY_EXP - np.ceil(np.log2(s.astype(np.float64))).astype(np.int64)
    if (cap < 4).any():
        raise ValueError("a subset has too many records (> 2^41) for float-safe noise")
    return np.minimum(grid_bits, cap)


def _release_one(stat: np.ndarray, sens: np.ndarray, bits: np.ndarray, eps: float,
                 rng: RandomSource) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Snap ``stat`` to γ = Δ/2^k, add γ·DLap((2^k+1)/ε_r); Δ = 0 entries are exact."""
    out = stat.astype(np.float64).copy()
    step = np.zeros(stat.shape)
    scales: dict[int, str] = {}
    for k in np.unique(bits):
        sel = np.flatnonzero((bits == k) & (sens > 0))
        if sel.size == 0:
            continue
        gamma = sens[sel] / float(1 << int(k))
        scale = laplace_scale((1 << int(k)) + 1, eps)
        snapped = np.floor(stat[sel] / gamma + 0.5).astype(np.int64)
        z = discrete_laplace(scale, sel.size, rng)
        out[sel] = gamma * (snapped + z).astype(np.float64)
        step[sel] = gamma
        scales[int(k)] = f"{scale.num}/{scale.den}"
    return out, step, scales


def _grid_sums(values: np.ndarray, grid: np.ndarray, n_grids: int,
               ) -> tuple[np.ndarray, np.ndarray]:
    """fsum-exact per-grid mean and two-pass population variance of kept values."""
    order = np.argsort(grid, kind="stable")
    v = values[order]
    bounds = np.searchsorted(grid[order], np.arange(n_grids + 1))
    mean = np.zeros(n_grids)
    var = np.zeros(n_grids)
    for gi in range(n_grids):
        x = v[bounds[gi]:bounds[gi + 1]]
        if x.size == 0:
            continue
        mu = math.fsum(x) / x.size
        mean[gi] = mu
        var[gi] = math.fsum((x - mu) ** 2) / x.size
    return mean, var


def kept_summary(occ: Occupancy, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S_g, Γ⋆_g) per subset for kept counts ``kept`` aligned with ``occ``'s pairs."""
    s = np.bincount(occ.pair_grid, weights=kept, minlength=occ.n_subsets).astype(np.int64)
    gmax = np.zeros(occ.n_subsets, np.int64)
    np.maximum.at(gmax, occ.pair_grid, kept)
    return s, gmax


def _resolve_kept(occ: Occupancy, params: SubsetStatsParams, plan: ClipUserPlan | None,
                  ) -> np.ndarray:
    if plan is None:
        return occ.counts.copy()
    if not plan.occupancy.same_as(occ):
        raise ValueError("plan was computed for a different occupancy array (users, subsets "
                         "or per-user counts differ from these rows)")
    p = plan.params
    same = (p.epsilon == params.epsilon and p.lower == params.lower and p.upper == params.upper
            and p.statistic == params.statistic and p.epsilon_mean == params.epsilon_mean
            and p.grid_bits == params.grid_bits)
    if not same:
        raise ValueError("plan was made with different parameters (epsilon, value range, "
                         "statistic, mean_share or grid_bits); the same ones must be used "
                         f"for planning and release (plan: {p.describe()})")
    kept = np.asarray(plan.kept, np.int64)
    if kept.shape != occ.counts.shape or (kept < 0).any() or (kept > occ.counts).any():
        raise ValueError("plan.kept must satisfy 0 <= kept <= counts pairwise")
    return kept.copy()


def subset_stats(user_ids: Any, values: Any, subsets: Any, *, epsilon: float, upper: float,
                 lower: float = 0.0, statistic: Statistic = "both",
                 plan: ClipUserPlan | None = None, public_occupancy: bool = False,
                 mean_share: float = 0.5, grid_bits: int = 16,
                 rng: RandomSource | None = None) -> CentralRelease:
    """Per-subset mean and/or population variance, user-level ε-DP per subset (§2.1/§2.6).

    Without ``plan`` this is the baseline mechanism (all records kept, §2.1); with a
    :class:`~uldp.collector.central.clip_user.ClipUserPlan` it keeps the first Γ_{g,ℓ}
    records of each user in each subset (input row order, B4) and runs M_clip (§2.2).
    The whole release is Kε-DP, K = max_ℓ |{g: Γ_{g,ℓ} > 0}| (Thm II.3).

    ``estimate`` maps each subset label to its released value (a ``(mean, variance)`` tuple
    for ``"both"``). ``details`` has per-subset arrays (public counts, sensitivities, grid
    steps, worst-case errors, 95% noise half-widths) and the per-user ledger ε·G_ℓ.
    """
    if plan is not None:
        from uldp.collector.central.clip_user import ClipUserPlan

        if not isinstance(plan, ClipUserPlan):
            raise ValueError(f"plan must be a ClipUserPlan, got {type(plan).__name__}")
    params = SubsetStatsParams(epsilon=epsilon, upper=upper, lower=lower, statistic=statistic,
                               mean_share=mean_share, grid_bits=grid_bits,
                               error_model="release" if plan is None
                               else plan.params.error_model,
                               weights=(1.0, 1.0) if plan is None else plan.params.weights)
    require_public_occupancy(public_occupancy)
    rows = _index_rows(user_ids, subsets)
    n_rows = rows.row_pair.size
    try:
        vals = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"values must be numeric: {exc}") from None
    if vals.shape != (n_rows,):
        raise ValueError(f"values must have shape ({n_rows},) like user_ids, got {vals.shape}")
    if not np.isfinite(vals).all():
        bad = int(np.argmax(~np.isfinite(vals)))
        raise ValueError(f"values contains NaN or infinity (first at row {bad})")
    src = as_source(rng)
    occ = rows.occupancy
    kept = _resolve_kept(occ, params, plan)
    s, gmax = kept_summary(occ, kept)
    if (s == 0).any():
        raise ValueError("plan keeps no record in some subset (S = 0 is infeasible, B5)")
    n_tot = occ.totals()

    # B15 clamp, shift to [0, U]; B4 keep the first Γ records of each (subset, user) pair.
    n_clamped = int(((vals < params.lower) | (vals > params.upper)).sum())
    x = np.clip(vals, params.lower, params.upper) - params.lower
    keep_row = rows.row_rank < kept[rows.row_pair]
    row_grid = occ.pair_grid[rows.row_pair]
    mean, var = _grid_sums(x[keep_row], row_grid[keep_row], occ.n_subsets)

    u = params.width
    d_mu = np.array([mean_sensitivity(int(a), int(b), u) for a, b in zip(gmax, s, strict=True)])
    d_var = np.array([var_sensitivity(int(a), int(b), u) for a, b in zip(gmax, s, strict=True)])
    bits = _effective_bits(params.grid_bits, s)
    src_mu, src_var = src.spawn("subset_stats/mean"), src.spawn("subset_stats/variance")
    details: dict[str, Any] = {
        "subsets": occ.subsets, "records": n_tot, "kept_records": s, "max_kept": gmax,
        "users_per_subset": np.bincount(occ.pair_grid, weights=kept > 0,
                                        minlength=occ.n_subsets).astype(np.int64),
        "grid_bits": bits,
    }
    if n_clamped:  # B15: for operators only — a data-dependent count, never in the release
        _LOG.info("subset_stats clamped %d of %d values to [%g, %g]", n_clamped, n_rows,
                  params.lower, params.upper)
    released: dict[str, np.ndarray] = {}
    scales: dict[str, dict[int, str]] = {}
    if params.epsilon_mean > 0:
        out, step, sc = _release_one(mean, d_mu, bits, params.epsilon_mean, src_mu)
        # post-processing into the public range (issue 11): a mean of values in
        # [lower, upper] lies there
        released["mean"] = np.clip(out + params.lower, params.lower, params.upper)
        details["mean_unclamped"] = out + params.lower  # the noisy value before the clamp
        details.update(mean_sensitivity=d_mu, mean_grid_step=step)
        details["mean_half_width_95"] = _half_widths(d_mu, bits, params.epsilon_mean,
                                                     2 if statistic == "both" else 1)
        scales["mean"] = sc
    if params.epsilon_var > 0:
        out, step, sc = _release_one(var, d_var, bits, params.epsilon_var, src_var)
        # post-processing: a population variance of values in [lower, upper] lies in
        # [0, (upper - lower)^2 / 4]
        released["variance"] = np.clip(out, 0.0, float(u) ** 2 / 4)
        details["variance_unclamped"] = out
        details.update(variance_sensitivity=d_var, variance_grid_step=step)
        details["variance_half_width_95"] = _half_widths(d_var, bits, params.epsilon_var,
                                                         2 if statistic == "both" else 1)
        scales["variance"] = sc
    consts = params.error_constants()
    details["worst_case_error"] = grid_error_arrays(s, n_tot, gmax, u, consts)
    details["noise_scale_grid_units"] = scales
    g_post = np.bincount(occ.pair_user, weights=kept > 0, minlength=occ.n_users)
    details["users"] = occ.users
    details["user_loss"] = params.epsilon * g_post
    k_factor = int(g_post.max())
    details["K"] = k_factor

    labels = [lab.item() if isinstance(lab, np.generic) else lab for lab in occ.subsets]
    if statistic == "both":
        estimate: dict[Any, Any] = {
            lab: (float(a), float(b))
            for lab, a, b in zip(labels, released["mean"], released["variance"], strict=True)}
    else:
        estimate = {lab: float(a) for lab, a in zip(labels, released[statistic], strict=True)}
    record = PrivacyRecord(
        mechanism="subset_mean_variance/" + ("clip_user" if plan is not None else "baseline"),
        mode="pure",
        epsilon=params.epsilon * k_factor,
        unit="user",
        neighbouring="replace-one-user (same public occupancy array A, spec §1.3)",
        split={"mean": params.epsilon_mean / params.epsilon,
               "variance": params.epsilon_var / params.epsilon},
        public={
            "occupancy_array": "declared public (spec §5 B1)",
            "per_subset_epsilon": params.epsilon, "K": k_factor,
            "lower": params.lower, "upper": params.upper, "n_subsets": occ.n_subsets,
            "n_users": occ.n_users, "kept_counts": "Γ from the plan" if plan is not None
            else "all records", "grid_bits": params.grid_bits,
        },
        notes=("discrete Laplace on a fixed-point grid γ = Δ/2^k, Δ_int = 2^k + 1 units; "
               "each subset ε-DP (mean/variance split), Kε-DP overall by disjoint-subset "
               "composition (Thm II.3)"),
    )
    return CentralRelease(estimate=estimate, privacy=record, details=details)


def _half_widths(sens: np.ndarray, bits: np.ndarray, eps: float, coords: int) -> np.ndarray:
    """95% per-coordinate half-widths (B9): k_b·Δ/2^b, k_b computed once per grid size b."""
    out = np.zeros(sens.shape)
    for b in np.unique(bits):
        sel = bits == b
        per_unit = noise_interval(1.0, eps, delta=0.05, coordinates=coords, grid_bits=int(b))
        out[sel] = sens[sel] * per_unit
    return out

