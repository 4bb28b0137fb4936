"""Private modified winsorized mean (PMWM) with unbounded private quantiles.

Spec: ``private_modified_winsorized_mean.md``. Implemented here:

* §2.1 projection ``phi_{a,b}`` (:func:`project`);
* §2.2 private upper quantile, the Durfee-style AboveThreshold walk on the geometric grid
  ``x_i = beta**i + ell - 1`` (:func:`upper_quantile`), with the data-independent cap
  ``I_max`` of §5 A6 and both quantile noise modes of §5 A3;
* §2.3 private lower quantile by negation (:func:`lower_quantile`);
* §2.4.1 theoretical PMWM with sample split and trimming level ``zeta``
  (:func:`pmwm_theoretical`, :func:`theoretical_trimming_level`);
* §2.4.2 practical PMWM, the default (:func:`pmwm_practical`), with the budget split of
  §2.4.2/§5 A4, crossed-quantile swap (§5 A5), the PDP warning of §2.5 and the optional
  hard bounds of §5 A6;
* §5 A14 float-safe noise: every random draw comes from :class:`RandomSource`; the
  quantile walk runs on the integer count scale with exact geometric (pure DP) or exact
  discrete Gaussian (paper-faithful zCDP) noise; the mean step uses discrete Laplace or
  discrete Gaussian noise on a power-of-two fixed-point grid;
* §6 user-level entry point :func:`pmwm_mean` (one value per user: the user's mean; vector
  values coordinate-wise with the even budget split of §5 A2).

Neighbouring relation: replace one user (all of that user's rows), number of users public.

Estimand of :func:`pmwm_mean`: the mean of user means, winsorized at the private
quantiles (``C`` users per end in the practical version); with ``hard_bounds`` (a public
range) the release is clamped into it (post-processing). Its ``interval`` is the 95 %
noise interval of the mean step given the private quantiles — it does not include the
winsorizing bias.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from uldp.client.noise import (
    discrete_gaussian,
    discrete_laplace,
    laplace_scale,
    rational_epsilon,
)
from uldp.client.randomness import RandomSource, as_source
from uldp.collector.central.data import group_by_user
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord

__all__ = [
    "MEAN_GRID_BITS",
    "PMWMAccuracyWarning",
    "PMWMParams",
    "PMWMResult",
    "QuantileRelease",
    "default_i_max",
    "discrete_gaussian_vec",
    "geometric",
    "grid_point",
    "lower_quantile",
    "mean_grid",
    "mean_step",
    "modified_winsorized_mean",
    "pmwm_mean",
    "pmwm_practical",
    "pmwm_theoretical",
    "project",
    "resolve_budget",
    "split_budget",
    "theoretical_trimming_level",
    "trimming_level",
    "upper_quantile",
]

Mode = Literal["pure", "zcdp"]
QuantileNoise = Literal["exponential", "gaussian"]

#: the mean step snaps clipped values to a grid of step 2^(floor(log2(b - a)) - MEAN_GRID_BITS)
MEAN_GRID_BITS = 24
_COUNT_SIGMA_MIN = 16.0  # gaussian quantile mode: count-scale noise sd is made >= 16 grid units


class PMWMAccuracyWarning(UserWarning):
    """The quantile budget is too small for the walk to reach the data reliably (§2.5)."""


# ---------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------
def _finite_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class PMWMParams:
    """Public parameters of the practical PMWM (§2.4.2, defaults of §2.5).

    lower, upper: loose bounds ``ell < u`` on the data (only their log-range matters).
    beta: grid ratio (> 1). C: points trimmed per end without contamination (integer >= 1).
    eta: expected contamination fraction in [0, 1/2). split: budget shares
    ``(threshold, queries, mean)`` with ``2*(s1 + s2) + s3 == 1``. quantile_noise:
    ``"exponential"`` (pure DP walk, default) or ``"gaussian"`` (paper Lemma D.1, zCDP
    only). i_max: data-independent cap on the walk (default: float64 limit). hard_bounds:
    optional public clamp of the private quantiles (§5 A6). warn: emit
    :class:`PMWMAccuracyWarning` when the quantile budget is below the §2.5 threshold.
    """

    lower: float = -50.0
    upper: float = 50.0
    beta: float = 1.001
    C: int = 1
    eta: float = 0.0
    split: tuple[float, float, float] = (1 / 16, 1 / 16, 3 / 4)
    quantile_noise: QuantileNoise = "exponential"
    i_max: int | None = None
    hard_bounds: tuple[float, float] | None = None
    warn: bool = True

    def __post_init__(self) -> None:
        lo = _finite_number("lower", self.lower)
        up = _finite_number("upper", self.upper)
        for name in ("lower", "upper", "beta", "eta"):  # normalize numpy scalars
            object.__setattr__(self, name, _finite_number(name, getattr(self, name)))
        if not lo < up:
            raise ValueError(f"lower must be < upper, got lower={lo}, upper={up}")
        beta = _finite_number("beta", self.beta)
        if not beta > 1.0:
            raise ValueError(f"beta must be > 1, got {beta}")
        if isinstance(self.C, bool) or not isinstance(self.C, (int, np.integer)) or self.C < 1:
            raise ValueError(f"C must be an integer >= 1, got {self.C!r}")
        eta = _finite_number("eta", self.eta)
        if not 0.0 <= eta < 0.5:
            raise ValueError(f"eta must lie in [0, 1/2), got {eta}")
        if len(self.split) != 3:
            raise ValueError(f"split must have three shares, got {self.split!r}")
        s = [_finite_number("split", x) for x in self.split]
        if min(s) <= 0 or abs(2 * (s[0] + s[1]) + s[2] - 1.0) > 1e-9:
            raise ValueError(
                f"split shares must be positive with 2*(s1 + s2) + s3 == 1, got {self.split!r}"
            )
        if self.quantile_noise not in ("exponential", "gaussian"):
            raise ValueError(
                f"quantile_noise must be 'exponential' or 'gaussian', got {self.quantile_noise!r}"
            )
        if self.i_max is not None and (
            isinstance(self.i_max, bool) or not isinstance(self.i_max, (int, np.integer))
            or self.i_max < 1
        ):
            raise ValueError(f"i_max must be a positive integer, got {self.i_max!r}")
        if self.hard_bounds is not None:
            if len(self.hard_bounds) != 2:
                raise ValueError(f"hard_bounds must be a pair, got {self.hard_bounds!r}")
            h0 = _finite_number("hard_bounds", self.hard_bounds[0])
            h1 = _finite_number("hard_bounds", self.hard_bounds[1])
            if not h0 < h1:
                raise ValueError(f"hard_bounds must be increasing, got {self.hard_bounds!r}")

    def cap(self) -> int:
        """The walk cap actually used (``i_max`` or the float64 default)."""
        return self.i_max if self.i_max is not None else default_i_max(
            self.beta, max(abs(self.lower), abs(self.upper)))


# ---------------------------------------------------------------------------------------
# §2.1 projection and trimming levels
# ---------------------------------------------------------------------------------------
def project(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """phi_{a,b}: clip (winsorize) onto ``[a, b]``; values are moved, never removed (§2.1)."""
    if not a <= b:
        raise ValueError(f"projection needs a <= b, got a={a}, b={b}")
    return np.clip(np.asarray(x, dtype=np.float64), a, b)


def trimming_level(n: int, C: int, eta: float) -> float:
    """Practical trimming level ``p = max(min(C, 0.025 n)/n, eta)`` (§2.4.2, §5 A12)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    p = max(min(float(C), 0.025 * n) / n, float(eta))
    if not 0.0 < p < 0.5:
        raise ValueError(f"trimming level p={p} must lie in (0, 1/2); check C and eta")
    return p


def theoretical_trimming_level(n: int, eta: float, beta: float, lower: float, upper: float,
                               delta: float) -> float:
    """zeta of Definition 3.1 (§2.4.1, step 1)."""
    if not 4.0 * math.exp(-n) < delta < 1.0:
        raise ValueError(f"delta must lie in (4 exp(-n), 1), got {delta}")
    ratio = max(beta * (upper - lower) / (beta - 1.0), 1.0)
    return 16.0 * eta + (112.0 / 3.0) * math.log(32.0 * ratio / delta) / n


# ---------------------------------------------------------------------------------------
# grid
# ---------------------------------------------------------------------------------------
def default_i_max(beta: float, ell_abs: float = 0.0) -> int:
    """Largest ``i`` with ``beta**i + |ell| + 1 <= DBL_MAX / 4`` (§2.5, §5 A6). Public.

    The spec's cap is "``beta**i + |ell|`` finite"; the extra factor 4 (about 1400 fewer
    steps for beta = 1.001, out of ~7e5) keeps ``b - a`` and the mean step finite even if
    both walks hit the cap. Data-independent, so privacy is unaffected.
    """
    limit = float(np.finfo(np.float64).max) / 4.0
    i = math.floor(math.log(limit) / math.log(beta))
    while i > 1 and not float(np.power(np.float64(beta), i)) + ell_abs + 1.0 <= limit:
        i -= 1
    return i


def grid_point(i: np.ndarray | int, ell: float, beta: float) -> np.ndarray:
    """``x_i = beta**i + ell - 1`` (float64, data-independent)."""
    return np.power(np.float64(beta), np.asarray(i, dtype=np.float64)) + (ell - 1.0)


# ---------------------------------------------------------------------------------------
# exact noise primitives (all randomness from RandomSource)
# ---------------------------------------------------------------------------------------
def geometric(epsilon: float, size: int, rng: RandomSource) -> np.ndarray:
    """``size`` iid ``Geom(1 - e^{-eps_r})`` on {0, 1, ...}: ``P(G = g) = (1-r) r^g``.

    ``eps_r = rational_epsilon(epsilon) <= epsilon``. Exact: a discrete Laplace variable
    ``Z`` with ``q = e^{-eps_r}`` conditioned on ``Z >= 0`` has pmf ``(1 - q) q^g``
    (``P(Z = g | Z >= 0) = c q^g / (c / (1 - q))``); we draw DLap and keep the non-negative
    draws (acceptance ``1/(1+q) > 1/2``).
    """
    scale = laplace_scale(1, epsilon)
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        z = discrete_laplace(scale, 2 * need + 16, rng)
        z = z[z >= 0][:need]
        out[filled : filled + z.size] = z
        filled += z.size
    return out


#: the exact vectorized discrete Gaussian lives with the other samplers in uldp.client.noise
discrete_gaussian_vec = discrete_gaussian


# ---------------------------------------------------------------------------------------
# §2.2 / §2.3 private quantiles
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuantileRelease:
    """A private quantile: the grid value, its grid index ``i`` and whether the cap hit."""

    value: float
    index: int
    capped: bool


def _check_budget_pair(budget: tuple[float, float], name: str = "budget") -> tuple[float, float]:
    if len(budget) != 2:
        raise ValueError(f"{name} must be a pair, got {budget!r}")
    b1 = _finite_number(name, budget[0])
    b2 = _finite_number(name, budget[1])
    if b1 <= 0 or b2 <= 0:
        raise ValueError(f"{name} entries must be positive, got {budget!r}")
    return b1, b2


def _count_scale(noise: QuantileNoise, budget: tuple[float, float]) -> int:
    """Gaussian mode: counts are multiplied by a power of two ``L`` so that the count-scale
    noise sd ``L/sqrt(rho_j)`` is at least 16 (a finer lattice, closer to the continuous
    noise of Lemma D.1). Exponential mode: ``L = 1``. ``L`` is public."""
    if noise == "exponential":
        return 1
    r = max(budget)
    need = _COUNT_SIGMA_MIN * math.sqrt(r)
    return 1 << max(0, math.ceil(math.log2(need))) if need > 1 else 1


def _threshold_noise(noise: QuantileNoise, budget: float, L: int, size: int,
                     rng: RandomSource) -> np.ndarray:
    if noise == "exponential":
        return geometric(budget, size, rng)
    return discrete_gaussian_vec(Fraction(L * L) / Fraction(budget), size, rng)


def upper_quantile(y: np.ndarray, q: float, ell: float, *, budget: tuple[float, float],
                   rng: RandomSource, beta: float = 1.001,
                   noise: QuantileNoise = "exponential", i_max: int | None = None,
                   presorted: bool = False) -> QuantileRelease:
    """Private upper quantile (§2.2): first grid point where a noisy count beats a noisy
    threshold.

    ``budget`` is ``(eps1, eps2)`` for ``noise="exponential"`` and ``(rho1, rho2)`` for
    ``noise="gaussian"``. Counting form (§5 A14): stop at the first ``i >= 1`` with
    ``L*c_i + N_i > L*n*q + N_0``, ``c_i = #{y_j <= x_i}`` (right-continuous, strict ``>``,
    §5 A13).

    Privacy (exponential mode, pure ``(eps1 + eps2)``-DP). ``N_0 ~ Geom(1 - e^{-eps1})`` and
    ``N_i ~ Geom(1 - e^{-eps2})`` on {0, 1, ...}. Under replace-one, the count vector moves
    by ``c'_i - c_i`` all in {0, -1} or all in {0, +1} (one point moves from ``a`` to
    ``b``). Fix an outcome "stop at k" and couple the noises: if counts go down, use
    ``N'_k = N_k + 1`` (others equal); if they go up, use ``N'_0 = N_0 + 1`` and
    ``N'_k = N_k + 1``. In both cases every query ``i < k`` stays below and query ``k``
    stays above the threshold, the map is injective and only shifts *upward*, which a
    geometric pmf allows at cost ``r^{-1} = e^{eps}`` per shifted variable; so
    ``P(k | D) <= e^{eps1 + eps2} P(k | D')``. The "no stop before ``i_max``" event is
    covered by the same argument (shift only ``N_0``). The cap and the grid are
    data-independent; mapping the index to ``x_k`` is post-processing. Geometric draws are
    exact (see :func:`geometric`) with ``eps_r <= eps``.

    Gaussian mode (``noise="gaussian"``) uses ``N_j ~ N_Z(0, L^2/rho_j)``: the discrete
    analogue of the paper's Lemma D.1, which claims ``(rho1 + rho2)``-zCDP; the spec (§5
    A3) could not verify that lemma, so this mode is for paper reproduction.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or y.size == 0:
        raise ValueError("y must be a non-empty one-dimensional array")
    q = _finite_number("q", q)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
    ell = _finite_number("ell", ell)
    beta = _finite_number("beta", beta)
    if not beta > 1.0:
        raise ValueError(f"beta must be > 1, got {beta}")
    if noise not in ("exponential", "gaussian"):
        raise ValueError(f"noise must be 'exponential' or 'gaussian', got {noise!r}")
    b1, b2 = _check_budget_pair(budget)
    cap = default_i_max(beta, abs(ell)) if i_max is None else int(i_max)
    if cap < 1:
        raise ValueError(f"i_max must be >= 1, got {i_max}")
    if cap > default_i_max(beta, abs(ell)):
        raise ValueError(f"i_max={cap} is too large: grid points would overflow float64")
    ys = y if presorted else np.sort(y)
    n = ys.size
    L = _count_scale(noise, (b1, b2))
    thr = L * n * q  # public float; comparisons against integers are exact below 2^53
    n0 = int(_threshold_noise(noise, b1, L, 1, rng)[0])
    # first block: the public number of steps to cross a range of 100 + |ell| (§2.7);
    # block sizes change how many draws are wasted, never the output distribution.
    start = 1
    block = min(cap, 64 + math.ceil(math.log1p(100.0 + abs(ell)) / math.log(beta)))
    while start <= cap:
        stop = min(start + block, cap + 1)
        idx = np.arange(start, stop, dtype=np.int64)
        counts = np.searchsorted(ys, grid_point(idx, ell, beta), side="right")
        ni = _threshold_noise(noise, b2, L, idx.size, rng)
        hit = (L * counts + ni - n0) > thr
        if hit.any():
            k = int(idx[int(np.argmax(hit))])
            return QuantileRelease(float(grid_point(k, ell, beta)), k, False)
        start = stop
        block = min(block * 2, 1 << 18)
    return QuantileRelease(float(grid_point(cap, ell, beta)), cap, True)


def lower_quantile(y: np.ndarray, q: float, u: float, *, budget: tuple[float, float],
                   rng: RandomSource, beta: float = 1.001,
                   noise: QuantileNoise = "exponential", i_max: int | None = None,
                   ) -> QuantileRelease:
    """Private lower quantile (§2.3): ``-UPPER_QUANTILE(-y, 1 - q, -u)``; same privacy."""
    r = upper_quantile(-np.asarray(y, dtype=np.float64), 1.0 - q, -u, budget=budget,
                       rng=rng, beta=beta, noise=noise, i_max=i_max)
    return QuantileRelease(-r.value, r.index, r.capped)


# ---------------------------------------------------------------------------------------
# mean step (§2.4, §5 A14)
# ---------------------------------------------------------------------------------------
def mean_grid(a: float, b: float) -> tuple[float, int]:
    """Grid step ``g`` (power of two) and sensitivity ``Delta`` in grid units for the
    clipped values on ``[a, b]``. Computed from the private ``(a, b)`` only."""
    width = b - a
    if width <= 0:
        return 1.0, 0
    g = math.ldexp(1.0, math.frexp(width)[1] - 1 - MEAN_GRID_BITS)
    delta = math.floor(width / g + 0.5)
    return g, max(delta, 1)


def mean_step(x: np.ndarray, a: float, b: float, *, budget: float, mode: Mode,
              rng: RandomSource) -> tuple[float, dict[str, float]]:
    """Noisy clipped mean ``(1/n) sum phi_{a,b}(x_i) + noise`` on a fixed-point grid.

    Each clipped value is snapped to ``v_i = floor((phi(x_i) - a)/g + 1/2)``, with ``g`` a
    power of two; every operation is monotone in float64, so ``0 <= v_i <= Delta =
    floor((b - a)/g + 1/2)`` for any input and the integer sum has replace-one sensitivity
    ``Delta`` exactly (this is the clipped-mean sensitivity ``(b - a)/n`` rounded *up* to
    the grid, §5 A14). Pure: ``Z ~ DLap(Delta/eps3)`` gives eps3-DP (Laplace mechanism).
    zCDP: ``Z ~ N_Z(0, Delta^2/(2 rho3))`` gives rho3-zCDP (Canonne-Kamath-Steinke 2020,
    Thm 4). Release ``a + g (sum v + Z)/n``: post-processing. ``(a, b)`` are the private
    quantiles, so ``g`` and ``Delta`` depend on the data only through them. If ``a == b``
    the output is the constant ``a`` (a function of private values, no noise needed).
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    g, delta = mean_grid(a, b)
    if delta == 0:
        return float(a), {"grid_step": 0.0, "sensitivity_units": 0, "noise_scale": 0.0,
                          "noise_sd": 0.0, "half_width_95": 0.0}
    v = np.floor((project(x, a, b) - a) / g + 0.5).astype(np.int64)
    total = int(v.sum())
    if mode == "pure":
        scale = laplace_scale(delta, budget)
        z = int(discrete_laplace(scale, 1, rng)[0])
        noise_scale = scale.value * g / n  # Laplace scale b of the released mean
        noise_sd = math.sqrt(2.0) * noise_scale
        from uldp.collector.central.user_mean import dlap_abs_quantile

        half = g * dlap_abs_quantile(scale, 0.05) / n
    else:
        sigma2 = Fraction(delta * delta) / (2 * Fraction(budget))
        z = int(discrete_gaussian(sigma2, 1, rng)[0])
        noise_scale = math.sqrt(float(sigma2)) * g / n  # Gaussian sd of the released mean
        noise_sd = noise_scale
        half = 1.96 * noise_sd
    est = a + g * (total + z) / n
    # 95 % half-width of the noise plus the snapping (each v_i is off by <= g/2)
    return float(est), {"grid_step": g, "sensitivity_units": delta,
                        "noise_scale": noise_scale, "noise_sd": noise_sd,
                        "half_width_95": half + g / 2}


# ---------------------------------------------------------------------------------------
# budgets
# ---------------------------------------------------------------------------------------
def split_budget(total: float, mode: Mode, split: tuple[float, float, float],
                 noise: QuantileNoise) -> tuple[tuple[float, float], float]:
    """Per-quantile budget pair (in the noise's native units) and the mean budget.

    pure: ``(s1 eps, s2 eps)``, ``s3 eps``. zCDP + gaussian (paper): ``(s1 rho, s2 rho)``,
    ``s3 rho``. zCDP + exponential (§5 A3): one quantile spends ``rho_q = (s1 + s2) rho``
    as a pure ``eps_q = sqrt(2 rho_q)`` walk (eps-DP implies eps^2/2-zCDP), split between
    threshold and queries in proportion ``s1 : s2``. Total: ``2 rho_q + s3 rho = rho``.
    """
    s1, s2, s3 = split
    if mode == "pure":
        if noise != "exponential":
            raise ValueError("quantile_noise='gaussian' is not pure DP; use rho (zCDP)")
        return (s1 * total, s2 * total), s3 * total
    if noise == "gaussian":
        return (s1 * total, s2 * total), s3 * total
    eps_q = math.sqrt(2.0 * (s1 + s2) * total)
    return (eps_q * s1 / (s1 + s2), eps_q * s2 / (s1 + s2)), s3 * total


def _walk_steps(params: PMWMParams) -> float:
    return math.log1p(params.upper - params.lower) / math.log(params.beta)


def _maybe_warn(n: int, eps2: float, params: PMWMParams) -> bool:
    """§2.5 PDP warning: ``n eps2 < ln S + 3`` (public quantities only)."""
    low = n * eps2 < math.log(_walk_steps(params)) + 3.0
    if low and params.warn:
        warnings.warn(
            f"PMWM quantile budget is small: n*eps2 = {n * eps2:.3g} < ln S + 3 = "
            f"{math.log(_walk_steps(params)) + 3.0:.3g}; the private quantiles may stop "
            "early or overshoot (spec §2.5). Consider a quantile-heavier split such as "
            "(1/8, 1/8, 1/2) or more users.", PMWMAccuracyWarning, stacklevel=3)
    return low


# ---------------------------------------------------------------------------------------
# §2.4 PMWM
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PMWMResult:
    """Output of one PMWM run: the estimate plus post-processing diagnostics."""

    estimate: float
    clip_lower: float
    clip_upper: float
    crossed: bool
    trim_level: float
    quantile_budget: tuple[float, float]
    mean_budget: float
    low_budget_warning: bool
    lower_capped: bool = False
    upper_capped: bool = False
    mean: dict[str, float] = field(default_factory=dict)


def _check_mode(mode: str) -> Mode:
    if mode not in ("pure", "zcdp"):
        raise ValueError(f"mode must be 'pure' or 'zcdp', got {mode!r}")
    return mode  # type: ignore[return-value]


def _check_sample(x: np.ndarray, name: str = "x") -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty one-dimensional array")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity")
    return arr


def pmwm_practical(x: np.ndarray, *, budget: float, mode: Mode = "pure",
                   params: PMWMParams | None = None, rng: RandomSource | None = None,
                   ) -> PMWMResult:
    """Practical PMWM (§2.4.2): quantiles and clipped mean on the whole sample.

    Privacy: the two quantiles each cost ``(s1 + s2) * budget`` and the mean step
    ``s3 * budget`` (see :func:`split_budget`); basic composition gives ``budget`` (eps-DP
    in ``mode="pure"``, rho-zCDP in ``mode="zcdp"``). Swapping crossed quantiles and the
    optional hard-bound clamp are post-processing of the private quantiles (§5 A5, A6).
    """
    x = _check_sample(x)
    mode = _check_mode(mode)
    total = _finite_number("budget", budget)
    if total <= 0:
        raise ValueError(f"budget must be positive, got {budget}")
    params = params or PMWMParams()
    src = as_source(rng)
    n = x.size
    p = trimming_level(n, params.C, params.eta)
    qb, mb = split_budget(total, mode, params.split, params.quantile_noise)
    low = _maybe_warn(n, qb[1], params) if params.quantile_noise == "exponential" else False
    xs = np.sort(x)
    cap = params.cap()
    lo = upper_quantile(-xs[::-1], 1.0 - p, -params.upper, budget=qb, rng=src,
                        beta=params.beta, noise=params.quantile_noise, i_max=cap,
                        presorted=True)
    lo = QuantileRelease(-lo.value, lo.index, lo.capped)
    hi = upper_quantile(xs, 1.0 - p, params.lower, budget=qb, rng=src, beta=params.beta,
                        noise=params.quantile_noise, i_max=cap, presorted=True)
    a, b = lo.value, hi.value
    crossed = a > b
    if crossed:
        a, b = b, a
    if params.hard_bounds is not None:
        h0, h1 = params.hard_bounds
        a, b = min(max(a, h0), h1), min(max(b, h0), h1)
    est, info = mean_step(x, a, b, budget=mb, mode=mode, rng=src)
    if params.hard_bounds is not None:  # post-processing into the public range
        est = min(max(est, params.hard_bounds[0]), params.hard_bounds[1])
    return PMWMResult(est, a, b, crossed, p, qb, mb, low, lo.capped, hi.capped, info)


def pmwm_theoretical(x_half: np.ndarray, y_half: np.ndarray, *,
                     budgets: tuple[float, float, float], mode: Mode = "pure",
                     eta: float = 0.0, delta: float = 0.05, lower: float = -50.0,
                     upper: float = 50.0, beta: float = 1.001,
                     quantile_noise: QuantileNoise = "exponential",
                     rng: RandomSource | None = None) -> PMWMResult:
    """Theoretical PMWM (Definition 3.1, §2.4.1): quantiles at ``zeta`` and ``1 - zeta``
    from ``y_half``, clipped mean of ``x_half``.

    ``budgets = (b1, b2, b3)``: each quantile costs ``b1 + b2`` and the mean ``b3``; total
    ``2 b1 + 2 b2 + b3`` (basic composition, as the paper). In ``mode="zcdp"`` with the
    exponential walk, ``b1, b2`` are rho's and one quantile runs as an
    ``eps = sqrt(2 (b1 + b2))`` walk.
    """
    x = _check_sample(x_half, "x_half")
    y = _check_sample(y_half, "y_half")
    mode = _check_mode(mode)
    if x.size != y.size:
        raise ValueError("x_half and y_half must have the same size n")
    if len(budgets) != 3 or min(_finite_number("budgets", v) for v in budgets) <= 0:
        raise ValueError(f"budgets must be three positive numbers, got {budgets!r}")
    n = x.size
    zeta = theoretical_trimming_level(n, eta, beta, lower, upper, delta)
    if not 0 < zeta < 0.5:
        raise ValueError(f"zeta={zeta:.3g} must be < 1/2: n is too small for delta and eta")
    b1, b2, b3 = (float(v) for v in budgets)
    if mode == "pure" and quantile_noise != "exponential":
        raise ValueError("quantile_noise='gaussian' is not pure DP; use mode='zcdp'")
    if mode == "zcdp" and quantile_noise == "exponential":
        eps_q = math.sqrt(2.0 * (b1 + b2))
        qb = (eps_q * b1 / (b1 + b2), eps_q * b2 / (b1 + b2))
    else:
        qb = (b1, b2)
    src = as_source(rng)
    lo = lower_quantile(y, zeta, upper, budget=qb, rng=src, beta=beta, noise=quantile_noise)
    hi = upper_quantile(y, 1.0 - zeta, lower, budget=qb, rng=src, beta=beta,
                        noise=quantile_noise)
    a, b = lo.value, hi.value
    crossed = a > b
    if crossed:
        a, b = b, a
    est, info = mean_step(x, a, b, budget=b3, mode=mode, rng=src)
    return PMWMResult(est, a, b, crossed, zeta, qb, b3, False, lo.capped, hi.capped, info)


def modified_winsorized_mean(x: np.ndarray, *, C: int = 1, eta: float = 0.0) -> float:
    """Non-private modified winsorized mean (§6 "With LDP reports"): clip at the empirical
    (left-continuous) quantiles ``x_(ceil(np))`` and ``x_(ceil(n(1-p)))`` and average.
    Spends no budget only when ``x`` is already private (e.g. locally private reports):
    it is then post-processing."""
    x = _check_sample(x)
    p = trimming_level(x.size, C, eta)
    xs = np.sort(x)
    n = xs.size
    a = xs[max(0, math.ceil(n * p - 1e-9) - 1)]
    b = xs[max(0, math.ceil(n * (1.0 - p) - 1e-9) - 1)]
    return float(project(xs, min(a, b), max(a, b)).mean())


# ---------------------------------------------------------------------------------------
# §6 user-level entry point
# ---------------------------------------------------------------------------------------
def resolve_budget(epsilon: float | None, rho: float | None) -> tuple[Mode, float]:
    """Exactly one of ``epsilon`` (pure DP) or ``rho`` (zCDP); validated."""
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (pure DP) or rho (zCDP)")
    if epsilon is not None:
        e = _finite_number("epsilon", epsilon)
        if e <= 0:
            raise ValueError(f"epsilon must be positive, got {epsilon!r}")
        rational_epsilon(e)
        return "pure", e
    r = _finite_number("rho", rho)
    if r <= 0:
        raise ValueError(f"rho must be positive, got {rho!r}")
    return "zcdp", r


def _params_per_coord(params: PMWMParams | Sequence[PMWMParams] | None,
                      d: int) -> list[PMWMParams]:
    if params is None:
        return [PMWMParams()] * d
    if isinstance(params, PMWMParams):
        return [params] * d
    plist = list(params)
    if len(plist) != d or not all(isinstance(p, PMWMParams) for p in plist):
        raise ValueError(f"params must be a PMWMParams or a sequence of {d} PMWMParams")
    return plist


def _record(mechanism: str, mode: Mode, total: float, d: int,
            plist: list[PMWMParams], public: dict[str, Any], notes: str) -> PrivacyRecord:
    split: dict[str, float] = {}
    for j, p in enumerate(plist):
        pre = f"coord{j}." if d > 1 else ""
        s1, s2, s3 = p.split
        split[pre + "lower_quantile.threshold"] = s1 / d
        split[pre + "lower_quantile.queries"] = s2 / d
        split[pre + "upper_quantile.threshold"] = s1 / d
        split[pre + "upper_quantile.queries"] = s2 / d
        split[pre + "mean"] = s3 / d
    kw = {"epsilon": total} if mode == "pure" else {"rho": total}
    return PrivacyRecord(mechanism=mechanism, mode=mode, split=split, public=public,
                         notes=notes, **kw)


def _params_public(p: PMWMParams) -> dict[str, Any]:
    return {"lower": p.lower, "upper": p.upper, "beta": p.beta, "C": p.C, "eta": p.eta,
            "split": list(p.split), "quantile_noise": p.quantile_noise, "i_max": p.cap(),
            "hard_bounds": None if p.hard_bounds is None else list(p.hard_bounds)}


def pmwm_on_matrix(stats: np.ndarray, *, mode: Mode, total: float,
                   plist: list[PMWMParams], rng: RandomSource) -> list[PMWMResult]:
    """Coordinate-wise PMWM over rows of ``stats`` (shape (m, d)), ``total/d`` each (A2)."""
    d = stats.shape[1]
    return [pmwm_practical(stats[:, j], budget=total / d, mode=mode, params=plist[j],
                           rng=rng) for j in range(d)]


def _details(results: list[PMWMResult]) -> dict[str, Any]:
    keys = ("clip_lower", "clip_upper", "crossed", "trim_level", "lower_capped",
            "upper_capped", "low_budget_warning")
    out: dict[str, Any] = {k: [getattr(r, k) for r in results] for k in keys}
    out["quantile_budget"] = [list(r.quantile_budget) for r in results]
    out["mean_budget"] = [r.mean_budget for r in results]
    out["noise_sd"] = [r.mean.get("noise_sd", 0.0) for r in results]
    if len(results) == 1:
        out = {k: v[0] for k, v in out.items()}
    return out


def pmwm_mean(user_ids: np.ndarray, values: np.ndarray, *, epsilon: float | None,
              params: PMWMParams | Sequence[PMWMParams] | None = None,
              rng: RandomSource | None = None, rho: float | None = None) -> CentralRelease:
    """User-level private mean of per-user means via the practical PMWM (§2.4.2, §6).

    Each user contributes one number, the mean of their rows (A1 (a)); PMWM is applied to
    the ``n_users`` numbers, so replacing all of one user's rows is a replace-one
    neighbour of the estimator's input and the release is user-level ``epsilon``-DP (pure)
    or ``rho``-zCDP. Pass exactly one of ``epsilon``/``rho``. Vector values ``(N, d)`` are
    handled coordinate-wise with budget ``total/d`` per coordinate (§5 A2). The number of
    users is public.
    """
    mode, total = resolve_budget(epsilon, rho)
    groups = group_by_user(user_ids, values)
    means = groups.user_means()
    mat = means[:, None] if means.ndim == 1 else means
    d = mat.shape[1]
    plist = _params_per_coord(params, d)
    src = as_source(rng)
    results = pmwm_on_matrix(mat, mode=mode, total=total, plist=plist, rng=src)
    est: Any = results[0].estimate if d == 1 else tuple(r.estimate for r in results)
    public: dict[str, Any] = {"n_users": groups.n_users, "d": d,
                              "per_coordinate_budget": total / d,
                              "params": [_params_public(p) for p in plist]}
    notes = ("practical PMWM on per-user means; quantile walk "
             + ", ".join(sorted({p.quantile_noise for p in plist}))
             + (" (gaussian mode rests on the paper's Lemma D.1, spec §5 A3)"
                if any(p.quantile_noise == "gaussian" for p in plist) else ""))
    rec = _record("pmwm", mode, total, d, plist, public, notes)
    interval = None
    if d == 1:
        r0 = results[0]
        half = r0.mean.get("half_width_95", 0.0)
        lo_i, hi_i = r0.estimate - half, r0.estimate + half
        if plist[0].hard_bounds is not None:
            h0, h1 = plist[0].hard_bounds
            lo_i, hi_i = min(max(lo_i, h0), h1), min(max(hi_i, h0), h1)
        interval = (float(lo_i), float(hi_i))
    estimand = ("mean of user means, winsorized at the private quantiles (the "
                "clip_lower/clip_upper details); the interval covers the noise only, not "
                "the winsorizing bias")
    return CentralRelease(estimate=est, privacy=rec, details=_details(results),
                          interval=interval, estimand=estimand)
