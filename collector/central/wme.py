"""Two-stage Winsorized Mean Estimator (WME, Levy et al. 2021) — the HLM baseline.

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats": WME). Reference:
``docs/central-algorithms.md`` H§3 (PrivateRange, WME-1D balanced/imbalanced, option
``stage2="gaussian"``, WME-HighD with a randomised Hadamard rotation), decisions H§6 A23
(split, bins, noise law, high-d composition, per-coordinate τ) and A24 (imbalanced stage 1
is an unweighted histogram of user means).

Privacy argument (OpenDP style). Neighbours replace one user's whole local dataset with
every ``m_i`` public (H§1). The random signs of the Hadamard rotation are drawn from
the same :class:`RandomSource` *before* touching the data and are public.

* **Stage 1 — PrivateRange** (per coordinate, budget ``ε_r``): the histogram of user
  means over the public bins ``[-B + 2τj, -B + 2τ(j+1))`` changes in at most two counts by
  one (L1 sensitivity 2). Adding iid discrete Laplace ``DLap(2/ε_r)`` (exact CKS sampler,
  ``uldp.client.noise``) makes the noisy count vector pure ``ε_r``-DP; the argmax and the
  interval ``[a, b]`` are post-processing. In d' coordinates with ``ε_r = ε₁/d'`` basic
  composition gives pure ``ε₁``.
* **Stage 2 — clipped mean on a grid.** Each user mean is clipped into ``[a, b]`` (per
  coordinate), mapped to grid units ``(Π(y) − a)/g`` with ``g = (b − a)/K`` and randomly
  rounded *unbiasedly* to an integer in ``[0, K]`` (a randomised pre-processing of the
  user's own record; any two users' rounded values still differ by at most ``K`` per
  coordinate). The statistic ``U = Σ_i m_i u_i`` is an exact integer with sensitivity
  ``m_max K`` (L1, d = 1) or ``m_max K √d'`` (L2).
  - ``stage2="laplace"`` (d = 1 only): ``U + DLap(m_max K / ε₂)`` is pure ``ε₂``-DP, so
    WME-1D is pure ε-DP in total (basic composition).
  - ``stage2="gaussian"``: ``U + N_Z(0, σ²)`` (discrete Gaussian, exact CKS sampler) is
    ``ρ``-zCDP with ``ρ = Δ₂²/(2σ²)`` for integer-valued shifts of L2 norm ``<= Δ₂``
    (CKS 2020, Thm 14 — identical to the continuous Gaussian); σ is the smallest value for
    which the CKS zCDP→(ε, δ) conversion (Cor. 13,
    ``δ = inf_{a>1} e^{(a−1)(aρ−ε)} (1 − 1/a)^a / (a − 1)``) gives ``(ε₂, δ)``.
  The release ``a + g (U + noise)/N`` is post-processing. Total: ``(ε₁ + ε₂, δ)``.

Weights: ``weighting="users"`` (the default since issue 11) averages user means with
weight ``1/n`` (sensitivity ``K``); ``weighting="samples"`` is the spec's ``m_i/N``
(equal to ``1/n`` for balanced users, H§3), whose sensitivity ``m_max K`` makes the
noise grow with the largest user (RMSE 11–38 on skewed real counts).

Estimand. With user weighting: the **mean of user means** (each user mean clamped to the
public range ``[-B, B]``). WME clamps user means to the stage-2 interval ``[a, b]``, so
the release is biased when user means lie outside it; ``interval`` accounts for the
stage-2 noise only (exact discrete Laplace quantile, Laplace stage 2) and covers the mean
of user means clamped to ``[a, b]``. With sample weighting: the pooled mean of all rows
(users weighted by their counts), clamped in the same way.

Concentration radius τ (issue 11): the former default ``B √(2 ln(2n²d)/m_min)`` took
the *smallest* user's count, so one user with one row makes the stage-2 interval as wide
as the whole range. Here τ is, in order: ``tau`` if given; else ``default_tau`` at a
declared public ``typical_count``; else at a **private median count**: the pure-DP
upper-quantile walk of :mod:`uldp.collector.central.quantile_walk` (geometric grid ``1.1^i``,
replace-one sensitivity of every count query 1) on the users' row counts, spending
``count_share`` of ε (taken from stage 1's share). The stage-2 interval is intersected
with ``[-B, B]`` (post-processing of the stage-1 output) and the release is clamped into
``[-B, B]`` (post-processing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from uldp.client.noise import discrete_gaussian, discrete_laplace, laplace_scale, randomized_round
from uldp.client.randomness import RandomSource, as_source
from uldp.collector.central.checks import validate_budget
from uldp.collector.central.data import UserGroups, group_by_user
from uldp.collector.central.intervals import dlap_abs_quantile
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord
from uldp.collector.central.quantile_walk import upper_quantile

__all__ = [
    "WMEParams",
    "clipped_grid_sum",
    "default_tau",
    "fwht",
    "hadamard_rotation",
    "histogram_counts",
    "private_median_count",
    "private_range",
    "range_bins",
    "wme_from_groups",
    "wme_mean",
    "zcdp_delta",
    "zcdp_sigma",
]


@dataclass(frozen=True)
class WMEParams:
    """Public parameters of WME (H§3).

    tau: concentration radius of user means (per coordinate in the rotated basis for
      d > 1); bins have width 2τ and the stage-2 interval width 4τ. None → default_tau.
    bound: ``B`` with ``|μ_j| <= B`` (spec: ``B = R_c``).
    split: share of ε spent on stage 1 (spec: 1/2).
    stage2: ``"laplace"`` (pure DP, d = 1 only) or ``"gaussian"``; None → Laplace for
      d = 1, Gaussian for d > 1.
    weighting: ``"users"`` (``1/n``, default) or ``"samples"`` (``m_i/N``, spec).
    grid_units: ``K``, integer grid units across the stage-2 interval.
    typical_count: a declared public typical number of rows per user for the default τ.
    count_share: share of ε spent on the private median count when neither ``tau`` nor
      ``typical_count`` is given (taken out of stage 1's share).
    alpha: the interval's miscoverage (noise part).
    """

    tau: float | None = None
    bound: float = 1.0
    split: float = 0.5
    stage2: str | None = None
    weighting: str = "users"
    grid_units: int = 1 << 12
    typical_count: float | None = None
    count_share: float = 0.1
    alpha: float = 0.05

    def __post_init__(self) -> None:
        for name in ("tau",):
            v = getattr(self, name)
            if v is not None and not _pos(v):
                raise ValueError(f"{name} must be a finite positive number, got {v!r}")
        if not _pos(self.bound):
            raise ValueError(f"bound must be a finite positive number, got {self.bound!r}")
        if not (_pos(self.split) and self.split < 1):
            raise ValueError(f"split must be a number in (0, 1), got {self.split!r}")
        if self.stage2 is not None and self.stage2 not in STAGE2:
            raise ValueError(f"stage2 must be None, 'laplace' or 'gaussian', "
                             f"got {self.stage2!r}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be 'samples' or 'users', got {self.weighting!r}")
        if self.typical_count is not None and not (_pos(self.typical_count)
                                                   and self.typical_count >= 1):
            raise ValueError(f"typical_count must be a number >= 1, got "
                             f"{self.typical_count!r}")
        if not (_pos(self.count_share) and self.count_share < self.split):
            raise ValueError(f"count_share must be in (0, split), got {self.count_share!r}")
        if not (_pos(self.alpha) and self.alpha < 1):
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if (not isinstance(self.grid_units, int) or isinstance(self.grid_units, bool)
                or not 1 <= self.grid_units <= 1 << 24):
            raise ValueError(f"grid_units must be an integer in [1, 2^24], "
                             f"got {self.grid_units!r}")


def _pos(x: object) -> bool:
    return (isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
            and math.isfinite(float(x)) and float(x) > 0)


def default_tau(bound: float, n: int, m_min: float, d: int = 1) -> float:
    """``B √(2 ln(2 n² d)/m_min)``: Hoeffding radius of a mean of ``m_min`` draws in
    ``[-B, B]`` holding for all users and coordinates w.p. ``>= 1 − 1/n``."""
    return bound * math.sqrt(2 * math.log(2 * n * n * d) / m_min)


# ---- stage 1 ------------------------------------------------------------------------
def range_bins(tau: float, bound: float) -> int:
    """Number of bins ``⌈B/τ⌉`` of width 2τ covering ``[-B, B)``."""
    return max(1, math.ceil(bound / tau))


def histogram_counts(x: np.ndarray, tau: float, bound: float) -> np.ndarray:
    """Counts of ``x`` in ``I_j = [-B + 2τj, -B + 2τ(j+1))``; points outside are ignored."""
    J = range_bins(tau, bound)
    j = np.floor((np.asarray(x, dtype=float) + bound) / (2 * tau))
    j = j[(j >= 0) & (j < J)].astype(np.int64)
    return np.bincount(j, minlength=J).astype(np.int64)


def private_range(x: np.ndarray, tau: float, bound: float, epsilon: float,
                  rng: RandomSource) -> tuple[float, float]:
    """PrivateRange (H§3): noisy-argmax bin, widened by τ on both sides; pure ε-DP."""
    counts = histogram_counts(x, tau, bound)
    noisy = counts + discrete_laplace(laplace_scale(2, epsilon), counts.size, rng)
    j = int(np.argmax(noisy))  # ties: smallest j
    left = -bound + 2 * tau * j
    return left - tau, left + 2 * tau + tau


# ---- stage 2 ------------------------------------------------------------------------
def clipped_grid_sum(y: np.ndarray, a: float | np.ndarray, b: float | np.ndarray,
                     weights: np.ndarray, K: int, rng: RandomSource) -> np.ndarray:
    """``Σ_i weights_i u_i`` with ``u_i`` = randomised rounding of ``K (Π_[a,b](y_i) − a)/(b − a)``.

    ``y`` is (n,) or (n, d') with per-coordinate ``a``/``b``; returns exact integers.
    """
    lo = np.asarray(a, dtype=float)
    hi = np.asarray(b, dtype=float)
    pos = (np.clip(y, lo, hi) - lo) / (hi - lo) * K
    u = np.clip(randomized_round(pos, rng), 0, K)
    w = np.asarray(weights, dtype=np.int64)
    return (w[:, None] * u.reshape(u.shape[0], -1)).sum(axis=0) if u.ndim == 2 else \
        np.array([int((w * u).sum())])


def zcdp_delta(rho: float, epsilon: float) -> float:
    """CKS 2020 Cor. 13: ρ-zCDP ⇒ (ε, δ) with δ = inf_a e^{(a−1)(aρ−ε)} (1−1/a)^a/(a−1)."""
    a = np.exp(np.linspace(math.log(1.0 + 1e-6), math.log(1e6), 20000))
    log_d = (a - 1) * (a * rho - epsilon) + a * np.log1p(-1 / a) - np.log(a - 1)
    return float(min(1.0, math.exp(float(np.min(log_d)))))


def zcdp_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Smallest σ (1e-6 relative, rounded up) with ``zcdp_delta(Δ²/(2σ²), ε) <= δ``."""
    return _unit_sigma(float(epsilon), float(delta)) * sensitivity


@lru_cache(maxsize=256)
def _unit_sigma(epsilon: float, delta: float) -> float:
    lo, hi = 1e-3, 1.0
    while zcdp_delta(1 / (2 * lo * lo), epsilon) <= delta:
        lo /= 2
    while zcdp_delta(1 / (2 * hi * hi), epsilon) > delta:
        hi *= 2
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        if zcdp_delta(1 / (2 * mid * mid), epsilon) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


# ---- rotation -----------------------------------------------------------------------
def fwht(x: np.ndarray) -> np.ndarray:
    """Unnormalised fast Walsh–Hadamard transform along the last axis (length 2^k)."""
    x = np.array(x, dtype=float, copy=True)
    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"length must be a power of two, got {d}")
    h = 1
    while h < d:
        y = x.reshape(*x.shape[:-1], d // (2 * h), 2, h)
        a, b = y[..., 0, :].copy(), y[..., 1, :].copy()
        y[..., 0, :] = a + b
        y[..., 1, :] = a - b
        x = y.reshape(*x.shape[:-1], d)
        h *= 2
    return x


def hadamard_rotation(y: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """``U y`` with ``U = H D_ξ/√d'`` (orthogonal); ``y`` zero-padded to ``d' = len(signs)``."""
    dp = signs.size
    pad = np.zeros((*y.shape[:-1], dp))
    pad[..., : y.shape[-1]] = y
    return fwht(pad * signs) / math.sqrt(dp)


def hadamard_inverse(z: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """``Uᵀ z = D_ξ H z/√d'``."""
    return fwht(z) * signs / math.sqrt(signs.size)


@dataclass(frozen=True)
class Weighting:
    """How WME weights users in stage 2 (``WMEParams.weighting``): ``weights(m)`` gives the
    integer weights, their total N and the largest weight (the sensitivity factor)."""

    weights: Callable[[np.ndarray], tuple[np.ndarray, int, int]]
    m_i: str  # what the release's privacy record says about the sample sizes m_i
    estimand: str


#: ``"users"``: 1/n each (the default since issue 11); ``"samples"``: m_i/N (the spec)
WEIGHTINGS: dict[str, Weighting] = {
    "users": Weighting(lambda m: (np.ones(m.size, np.int64), m.size, 1),
                       "not used (user weighting)", "mean of user means"),
    "samples": Weighting(lambda m: (m, int(m.sum()), int(m.max())),
                         "per-user sample sizes (public, docs/central-algorithms.md H§1)",
                         "pooled mean of all rows (users weighted by their counts)"),
}


@dataclass(frozen=True)
class Stage2Noise:
    """The noise added to stage 2's integer sum, and what it implies for the release."""

    noise: np.ndarray
    mode: str  # the privacy record's mode: "pure" (Laplace) or "approx" (Gaussian)
    sigma: float | None  # Gaussian sd in grid units
    half: float | None  # 95 % (1 - alpha) noise half-width of the estimate (Laplace, d = 1)


def _stage2_laplace(units: int, dp: int, eps2: float, delta: float, g: np.ndarray, N: int,
                    alpha: float, src: RandomSource) -> Stage2Noise:
    """``DLap(m_max K / ε₂)``: pure ε₂-DP (L1 sensitivity ``units = m_max K``, d = 1)."""
    scale = laplace_scale(units, eps2)
    noise = discrete_laplace(scale, 1, src)
    return Stage2Noise(noise, "pure", None, float(g[0] * dlap_abs_quantile(scale, alpha) / N))


def _stage2_gaussian(units: int, dp: int, eps2: float, delta: float, g: np.ndarray, N: int,
                     alpha: float, src: RandomSource) -> Stage2Noise:
    """``N_Z(0, σ²)`` per coordinate with σ from the zCDP conversion: (ε₂, δ)-DP."""
    sigma = zcdp_sigma(units * math.sqrt(dp), eps2, delta)
    noise = discrete_gaussian(sigma * sigma * (1 + 1e-9), dp, src)
    return Stage2Noise(noise, "approx", sigma, None)


@dataclass(frozen=True)
class Stage2:
    """One stage-2 mechanism (``WMEParams.stage2``) and whether it exists only for d = 1."""

    add_noise: Callable[[int, int, float, float, np.ndarray, int, float, RandomSource],
                        Stage2Noise]
    one_d_only: bool
    notes: str


STAGE2: dict[str, Stage2] = {
    "laplace": Stage2(_stage2_laplace, True, "discrete Laplace (pure DP)"),
    "gaussian": Stage2(_stage2_gaussian, False, "discrete Gaussian via zCDP conversion"),
}


# ---- the estimator --------------------------------------------------------------------
def wme_mean(user_ids: np.ndarray, values: np.ndarray, *, epsilon: float, delta: float,
             params: WMEParams | None = None, rng: RandomSource | None = None,
             tau: float | None = None, bound: float | None = None) -> CentralRelease:
    """Two-stage WME (H§3). d = 1: WME-1D; d > 1: WME-HighD (Hadamard rotation).

    ``tau``/``bound`` override the same fields of ``params``. ``delta`` is used by the
    Gaussian stage 2; with the default Laplace stage 2 in d = 1 the release is pure ε-DP.
    """
    return wme_from_groups(group_by_user(user_ids, values), epsilon=epsilon, delta=delta,
                           params=params, rng=rng, tau=tau, bound=bound)


def private_median_count(m: np.ndarray, epsilon: float, rng: RandomSource) -> float:
    """Pure ε-DP median of the per-user row counts (PMWM upper-quantile walk, grid 1.1^i).

    Replacing one user changes one count, so every count query of the walk moves by at
    most one in one direction: the walk's privacy argument (``upper_quantile`` of
    :mod:`uldp.collector.central.quantile_walk`) applies with budget ``(ε/2, ε/2)``. The
    result is clamped to ``>= 1``."""
    rel = upper_quantile(m.astype(np.float64), 0.5, 1.0, budget=(epsilon / 2, epsilon / 2),
                         rng=rng, beta=1.1, i_max=400)
    return max(1.0, float(rel.value))


def _params(params: WMEParams | None, tau: float | None, bound: float | None) -> WMEParams:
    p = params if params is not None else WMEParams()
    if not isinstance(p, WMEParams):
        raise ValueError(f"params must be a WMEParams, got {type(p).__name__}")
    if tau is not None:
        p = replace(p, tau=tau)
    if bound is not None:
        p = replace(p, bound=bound)
    return p


def _tau(p: WMEParams, n: int, d: int, m: np.ndarray, epsilon: float, src: RandomSource,
         ) -> tuple[float, str, float, dict[str, float]]:
    """(τ, where it came from, stage 1's ε, the budget split): τ declared, at a declared
    typical count, or at a private median count paid out of stage 1's share."""
    split = {"private_range": p.split, "clipped_mean": 1 - p.split}
    if p.tau is not None:
        return p.tau, "declared tau", p.split * epsilon, split
    if p.typical_count is not None:
        return (default_tau(p.bound, n, p.typical_count, d), "declared typical_count",
                p.split * epsilon, split)
    m_typ = private_median_count(m, p.count_share * epsilon, src)
    split = {"median_count": p.count_share, "private_range": p.split - p.count_share,
             "clipped_mean": 1 - p.split}
    return (default_tau(p.bound, n, m_typ, d), f"private median count {m_typ:g}",
            (p.split - p.count_share) * epsilon, split)


def _rotate(y: np.ndarray, src: RandomSource) -> tuple[int, np.ndarray, np.ndarray]:
    """(d', the public random signs, the rotated user means): the identity for d = 1."""
    d = y.shape[1]
    if d == 1:
        return 1, np.ones(1), y
    dp = 1 << math.ceil(math.log2(d))
    signs = np.where(src.below(2, size=dp) == 1, 1.0, -1.0)  # public, data independent
    return dp, signs, hadamard_rotation(y, signs)


def _stage1(z: np.ndarray, tau: float, bound: float, eps: float, src: RandomSource,
            ) -> tuple[np.ndarray, np.ndarray]:
    """PrivateRange per coordinate at ``eps`` each, intersected with ``[-B, B]``."""
    dp = z.shape[1]
    lo = np.empty(dp)
    hi = np.empty(dp)
    for j in range(dp):
        a, b = private_range(z[:, j], tau, bound, eps, src)
        # post-processing: intersect with the public range [-B, B] (|U mu|_j <= B)
        lo[j], hi[j] = max(a, -bound), min(b, bound)
    return lo, hi


def _record(p: WMEParams, n: int, d: int, T: float, tau_from: str, stage2: str,
            signs: np.ndarray, mode: str, epsilon: float, delta: float,
            split: dict[str, float]) -> PrivacyRecord:
    public = {"n": n, "d": d, "m_i": WEIGHTINGS[p.weighting].m_i, "tau": T,
              "tau_from": tau_from, "bound": p.bound, "grid_units": p.grid_units,
              "stage2": stage2, "weighting": p.weighting,
              "bins_per_coordinate": range_bins(T, p.bound)}
    if d > 1:
        public["rotation_signs"] = signs.astype(int).tolist()
    return PrivacyRecord(
        mechanism="wme-two-stage" if d == 1 else "wme-highd-hadamard", mode=mode,
        epsilon=epsilon, delta=delta if mode == "approx" else None,
        split=split, public=public,
        notes=("stage 1 discrete-Laplace histogram argmax per coordinate (basic composition);"
               " stage 2 integer grid sum + " + STAGE2[stage2].notes
               + ("; tau from a pure-DP median of the per-user counts"
                  if "median_count" in split else "")),
    )


def wme_from_groups(groups: UserGroups, *, epsilon: float, delta: float,
                    params: WMEParams | None = None, rng: RandomSource | None = None,
                    tau: float | None = None, bound: float | None = None) -> CentralRelease:
    """:func:`wme_mean` on rows already grouped by user (repeated releases, benches)."""
    epsilon, delta = validate_budget(epsilon, delta)
    p = _params(params, tau, bound)
    src = as_source(rng)
    n = groups.n_users
    one_d = groups.values.ndim == 1
    y = groups.user_means()
    y = y[:, None] if y.ndim == 1 else y
    d = y.shape[1]
    m = groups.counts.astype(np.int64)
    stage2 = p.stage2 or ("laplace" if d == 1 else "gaussian")
    if STAGE2[stage2].one_d_only and d > 1:
        raise ValueError(f"stage2={stage2!r} is only available for d = 1 "
                         "(docs/central-algorithms.md H§3)")
    T, tau_from, eps1, split = _tau(p, n, d, m, epsilon, src)
    eps2 = (1 - p.split) * epsilon
    dp, signs, z = _rotate(y, src)
    lo, hi = _stage1(z, T, p.bound, eps1 / dp, src)
    K = p.grid_units
    wts, N, mmax = WEIGHTINGS[p.weighting].weights(m)
    U = clipped_grid_sum(z, lo, hi, wts, K, src)
    g = (hi - lo) / K
    s2 = STAGE2[stage2].add_noise(mmax * K, dp, eps2, delta, g, N, p.alpha, src)
    zhat = lo + g * (U + s2.noise).astype(float) / N
    est = zhat if d == 1 else hadamard_inverse(zhat, signs)[:d]
    # post-processing into the public range: the interval [-B, B] (d = 1) / the ball of
    # radius B*sqrt(d) that contains every |mu_j| <= B vector (d > 1: per coordinate)
    est = np.clip(est, -p.bound, p.bound)
    details = {"n_users": n, "n_records": int(m.sum()),
               "ranges": [(float(a), float(b)) for a, b in zip(lo, hi, strict=True)],
               "stage2_noisy_sum": [int(v) for v in (U + s2.noise)]}
    if s2.sigma is not None:
        details["stage2_sigma_grid_units"] = s2.sigma
    interval = None
    if s2.half is not None:
        raw = float(zhat[0])
        interval = (float(np.clip(raw - s2.half, -p.bound, p.bound)),
                    float(np.clip(raw + s2.half, -p.bound, p.bound)))
        details["coverage_noise_only"] = 1 - p.alpha
    estimand = (f"{WEIGHTINGS[p.weighting].estimand}, each user mean clamped to the private "
                f"stage-2 interval (intersected with [-{p.bound:g}, {p.bound:g}]); the "
                "interval covers the noise only")
    return CentralRelease(estimate=float(est[0]) if one_d else tuple(map(float, est)),
                          privacy=_record(p, n, d, T, tau_from, stage2, signs, s2.mode,
                                          epsilon, delta, split),
                          details=details, interval=interval, estimand=estimand)
