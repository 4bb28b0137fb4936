"""Private modified winsorized mean (PMWM) with unbounded private quantiles.

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats"). Reference:
``docs/central-algorithms.md``. Implemented here:

* P§2.1 projection ``phi_{a,b}`` (:func:`project`);
* P§2.2 / P§2.3 the private quantiles come from :mod:`uldp.collector.central.quantile_walk`;
* P§2.4.1 theoretical PMWM with sample split and trimming level ``zeta``
  (:func:`pmwm_theoretical`, :func:`theoretical_trimming_level`);
* P§2.4.2 practical PMWM, the default (:func:`pmwm_practical`), with the budget split of
  P§2.4.2/P§5 A4, crossed-quantile swap (P§5 A5), the PDP warning of P§2.5 and the optional
  hard bounds of P§5 A6;
* P§5 A14 float-safe noise: every random draw comes from :class:`RandomSource`; the mean
  step (:func:`mean_step`) uses discrete Laplace or discrete Gaussian noise on a
  power-of-two fixed-point grid;
* P§6 user-level entry point :func:`pmwm_mean` (one value per user: the user's mean; vector
  values coordinate-wise with the even budget split of P§5 A2).

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
from uldp.collector.central.checks import finite_number
from uldp.collector.central.data import group_by_user
from uldp.collector.central.intervals import dlap_abs_quantile
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord
from uldp.collector.central.quantile_walk import (
    WALK_NOISES,
    QuantileNoise,
    QuantileRelease,
    default_i_max,
    lower_quantile,
    upper_quantile,
)

__all__ = [
    "MEAN_GRID_BITS",
    "PMWMAccuracyWarning",
    "PMWMParams",
    "PMWMResult",
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
]

Mode = Literal["pure", "zcdp"]
#: the mean step snaps clipped values to a grid of step 2^(floor(log2(b - a)) - MEAN_GRID_BITS)
MEAN_GRID_BITS = 24


class PMWMAccuracyWarning(UserWarning):
    """The quantile budget is too small for the walk to reach the data reliably (P§2.5)."""


# ---------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PMWMParams:
    """Public parameters of the practical PMWM (P§2.4.2, defaults of P§2.5).

    lower, upper: loose bounds ``ell < u`` on the data (only their log-range matters).
    beta: grid ratio (> 1). C: points trimmed per end without contamination (integer >= 1).
    eta: expected contamination fraction in [0, 1/2). split: budget shares
    ``(threshold, queries, mean)`` with ``2*(s1 + s2) + s3 == 1``. quantile_noise:
    ``"exponential"`` (pure DP walk, default) or ``"gaussian"`` (paper Lemma D.1, zCDP
    only). i_max: data-independent cap on the walk (default: float64 limit). hard_bounds:
    optional public clamp of the private quantiles (P§5 A6). warn: emit
    :class:`PMWMAccuracyWarning` when the quantile budget is below the P§2.5 threshold.
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
        lo = finite_number("lower", self.lower)
        up = finite_number("upper", self.upper)
        for name in ("lower", "upper", "beta", "eta"):  # normalize numpy scalars
            object.__setattr__(self, name, finite_number(name, getattr(self, name)))
        if not lo < up:
            raise ValueError(f"lower must be < upper, got lower={lo}, upper={up}")
        beta = finite_number("beta", self.beta)
        if not beta > 1.0:
            raise ValueError(f"beta must be > 1, got {beta}")
        if isinstance(self.C, bool) or not isinstance(self.C, (int, np.integer)) or self.C < 1:
            raise ValueError(f"C must be an integer >= 1, got {self.C!r}")
        eta = finite_number("eta", self.eta)
        if not 0.0 <= eta < 0.5:
            raise ValueError(f"eta must lie in [0, 1/2), got {eta}")
        if len(self.split) != 3:
            raise ValueError(f"split must have three shares, got {self.split!r}")
        s = [finite_number("split", x) for x in self.split]
        if min(s) <= 0 or abs(2 * (s[0] + s[1]) + s[2] - 1.0) > 1e-9:
            raise ValueError(
                f"split shares must be positive with 2*(s1 + s2) + s3 == 1, got {self.split!r}"
            )
        if self.quantile_noise not in WALK_NOISES:
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
            h0 = finite_number("hard_bounds", self.hard_bounds[0])
            h1 = finite_number("hard_bounds", self.hard_bounds[1])
            if not h0 < h1:
                raise ValueError(f"hard_bounds must be increasing, got {self.hard_bounds!r}")

    def cap(self) -> int:
        """The walk cap actually used (``i_max`` or the float64 default)."""
        return self.i_max if self.i_max is not None else default_i_max(
            self.beta, max(abs(self.lower), abs(self.upper)))


# ---------------------------------------------------------------------------------------
# P§2.1 projection and trimming levels
# ---------------------------------------------------------------------------------------
def project(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """phi_{a,b}: clip (winsorize) onto ``[a, b]``; values are moved, never removed (P§2.1)."""
    if not a <= b:
        raise ValueError(f"projection needs a <= b, got a={a}, b={b}")
    return np.clip(np.asarray(x, dtype=np.float64), a, b)


def trimming_level(n: int, C: int, eta: float) -> float:
    """Practical trimming level ``p = max(min(C, 0.025 n)/n, eta)`` (P§2.4.2, P§5 A12)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    p = max(min(float(C), 0.025 * n) / n, float(eta))
    if not 0.0 < p < 0.5:
        raise ValueError(f"trimming level p={p} must lie in (0, 1/2); check C and eta")
    return p


def theoretical_trimming_level(n: int, eta: float, beta: float, lower: float, upper: float,
                               delta: float) -> float:
    """zeta of Definition 3.1 (P§2.4.1, step 1)."""
    if not 4.0 * math.exp(-n) < delta < 1.0:
        raise ValueError(f"delta must lie in (4 exp(-n), 1), got {delta}")
    ratio = max(beta * (upper - lower) / (beta - 1.0), 1.0)
    return 16.0 * eta + (112.0 / 3.0) * math.log(32.0 * ratio / delta) / n


# ---------------------------------------------------------------------------------------
# mean step (P§2.4, P§5 A14)
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
    the grid, P§5 A14). Pure: ``Z ~ DLap(Delta/eps3)`` gives eps3-DP (Laplace mechanism).
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
    ``s3 rho``. zCDP + exponential (P§5 A3): one quantile spends ``rho_q = (s1 + s2) rho``
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
    """P§2.5 PDP warning: ``n eps2 < ln S + 3`` (public quantities only)."""
    low = n * eps2 < math.log(_walk_steps(params)) + 3.0
    if low and params.warn:
        warnings.warn(
            f"PMWM quantile budget is small: n*eps2 = {n * eps2:.3g} < ln S + 3 = "
            f"{math.log(_walk_steps(params)) + 3.0:.3g}; the private quantiles may stop "
            "early or overshoot (docs/central-algorithms.md P§2.5). Consider a "
            "quantile-heavier split such as (1/8, 1/8, 1/2) or more users.",
            PMWMAccuracyWarning, stacklevel=3)
    return low


# ---------------------------------------------------------------------------------------
# P§2.4 PMWM
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
    """Practical PMWM (P§2.4.2): quantiles and clipped mean on the whole sample.

    Privacy: the two quantiles each cost ``(s1 + s2) * budget`` and the mean step
    ``s3 * budget`` (see :func:`split_budget`); basic composition gives ``budget`` (eps-DP
    in ``mode="pure"``, rho-zCDP in ``mode="zcdp"``). Swapping crossed quantiles and the
    optional hard-bound clamp are post-processing of the private quantiles (P§5 A5, A6).
    """
    x = _check_sample(x)
    mode = _check_mode(mode)
    total = finite_number("budget", budget)
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
    """Theoretical PMWM (Definition 3.1, P§2.4.1): quantiles at ``zeta`` and ``1 - zeta``
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
    if len(budgets) != 3 or min(finite_number("budgets", v) for v in budgets) <= 0:
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
    """Non-private modified winsorized mean (P§6 "With LDP reports"): clip at the empirical
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
# P§6 user-level entry point
# ---------------------------------------------------------------------------------------
def resolve_budget(epsilon: float | None, rho: float | None) -> tuple[Mode, float]:
    """Exactly one of ``epsilon`` (pure DP) or ``rho`` (zCDP); validated."""
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (pure DP) or rho (zCDP)")
    if epsilon is not None:
        e = finite_number("epsilon", epsilon)
        if e <= 0:
            raise ValueError(f"epsilon must be positive, got {epsilon!r}")
        rational_epsilon(e)
        return "pure", e
    r = finite_number("rho", rho)
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
    kw: dict[str, Any] = {"epsilon": total} if mode == "pure" else {"rho": total}
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
    """User-level private mean of per-user means via the practical PMWM (P§2.4.2, P§6).

    Each user contributes one number, the mean of their rows (A1 (a)); PMWM is applied to
    the ``n_users`` numbers, so replacing all of one user's rows is a replace-one
    neighbour of the estimator's input and the release is user-level ``epsilon``-DP (pure)
    or ``rho``-zCDP. Pass exactly one of ``epsilon``/``rho``. Vector values ``(N, d)`` are
    handled coordinate-wise with budget ``total/d`` per coordinate (P§5 A2). The number of
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
             + (" (gaussian mode rests on the paper's Lemma D.1, "
                "docs/central-algorithms.md P§5 A3)"
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
