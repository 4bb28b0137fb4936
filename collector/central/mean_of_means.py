"""The user-mean estimators: simple (public range) and adaptive (private range), pure ε-DP.

See ``docs/central.md`` ("simple" and "adaptive"): the estimand, both mechanisms, their
privacy and what the intervals cover, with the measurements on real data.

Estimand of both: the **mean of user means** — each user's rows are averaged, the user
mean is clamped to the public range ``[lo, hi]`` and the n clamped user means are
averaged with equal weight. When every value lies in ``[lo, hi]`` (the public range is a
property of a single value) every user mean does too, and the clamping changes nothing.
It is *not* the pooled mean of all rows (which weights users by their number of rows).

Neighbouring relation: replace all rows of one user (``replace-one-user``), as for every
central estimator here. The number of users ``n`` is the same in neighbours and is
released (treated as public); under add/remove-one-user neighbouring ``n`` would have to
be privatized too, which we do not do.

**Simple** (:func:`user_mean`, the estimator an OpenDP or PipelineDP user writes):

1. ``u_i = clip(floor(K (clip(ybar_i, lo, hi) − lo)/(hi − lo) + 1/2), 0, K)`` with the
   public ``K = 2^grid_bits`` grid units: an integer in ``[0, K]`` that depends on user
   i's rows only. Whatever floating-point error the computation makes, ``u_i`` is in
   ``[0, K]``, so ``S = Σ u_i`` (exact integer) has replace-one sensitivity ``K``.
2. ``S + Z``, ``Z ~ DLap(K/ε_r)`` (exact sampler of :mod:`uldp.client.noise`,
   ``ε_r <= ε`` the budget rounded down to a multiple of 2^-24) is ε-DP (Laplace
   mechanism on integers: the pmf ratio at every output is at most ``e^{ε_r}``).
3. Release ``lo + (hi − lo)(S + Z)/(nK)``, clamped into ``[lo, hi]`` (post-processing).

This is the sensitivity ``(hi − lo)/n`` of the mean of n clamped user means, on a grid.

Interval (95 % by default): ``±((hi − lo)/(nK)) k_α + (hi − lo)/(2K)``, where
``k_α`` is the exact ``1 − α`` quantile of ``|DLap(K/ε_r)|`` (``P(|Z| > k) =
2q^{k+1}/(1+q)``, ``q = e^{−ε_r/K}``) and the second term bounds the rounding of step 1;
intersected with ``[lo, hi]``. It covers the estimand with probability ``>= 1 − α`` for
*every* dataset: the clamping bias is zero by definition of the estimand.

**Adaptive** (:func:`adaptive_user_mean`, the default of ``uldp central mean``) spends a
small public share of ε to find where the user means lie, and runs the simple estimator
on that narrower range when it is much narrower than the public one:

1. *Gate (public).* With ``ε_h = ε · share_hist`` and ``J`` bins, the detection
   threshold is ``τ = (2/ε_h) ln(J/(2·0.01))`` users. If ``τ > n/2`` no histogram bin can
   be found reliably: the simple estimator runs with the whole ε (nothing is spent).
2. *Histogram (ε_h).* Counts of clamped user means in J equal bins of ``[lo, hi]``
   (replace-one L1 sensitivity 2) plus iid ``DLap(2/ε_h)``.
3. *Candidate (post-processing).* Bins with noisy count ``> τ`` are detected (an empty
   bin passes with probability ``< 1 %`` over all J bins). If the noisy mass between the
   first and last detected bin (the *core*, k bins), less two standard deviations of its
   noise (``2 √(2k) · 2/ε_h``), is at least ``n/2``, the candidate is
   the core widened by ``m = ceil(f k)`` bins on each side, ``f = clip(40 τ/n, 1, 2)``
   (wider margins when the detection is coarse, so that thin tails beyond the core stay
   inside), intersected with ``[lo, hi]``. It is kept only if it is at most ``0.4`` of the
   public width (a noise reduction of 2.5× or more); otherwise the public range is used.
4. *Clamped mass (ε_t, only with a candidate).* The net mass the candidate clamps off,
   ``T = Σ_i (y_i − b)⁺ − (a − y_i)⁺`` (user means clamped to the public range first; a
   grid of ``W/K``, ``W = (hi − b) + (a − lo)``, replace-one sensitivity ``K + 1`` grid
   units, :func:`tail_sum`) plus ``DLap((K + 1)/ε_t)``.
5. *Mean (the rest of ε).* The simple estimator's statistic on the chosen range ``[a, b]``
   (the candidate, else the public range).

Privacy: steps 2, 4 and 5 are ε_h-, ε_t- and ε_m-DP mechanisms (each a discrete Laplace
mechanism on an integer statistic of stated sensitivity, each share rounded down
separately); steps 1 and 3, the choice of J and all thresholds use only public values
(n, ε, the public range, fixed constants) and earlier noisy outputs, so by adaptive basic
composition the release is ``(ε_h + ε_t + ε_m) <= ε``-DP. The noisy histogram and the
noisy clamped mass are released in ``details`` (they are DP outputs).

Estimate and interval of the adaptive estimator (issue 17 item 21). Without a candidate:
the simple estimator's, on ``ε − ε_h``. With one: ``N`` (step 5) plus ``T/n`` is unbiased
for the estimand *whatever the users outside* ``[a, b]`` — a point mass at the edge of the
values that the histogram could not see is measured, not assumed away — so the interval
is centred there, its half-width the exact ``1 − α`` quantile of the sum of the two
Laplace noises (:func:`~uldp.collector.central.intervals.laplace_sum_abs_quantile`) plus
the grid and rounding terms: it covers at its level on every population. The estimate is
``N`` plus the part of ``T/n`` beyond ``tail_z`` noise standard deviations (when no user
lies outside, ``N`` alone has the far smaller error), and the interval is widened to hold
it. The price of the honest interval is ``ε_t``: where the candidate is used, the
interval is about twice as wide as the simple estimator's while the estimate's RMSE is
about 0.4 of it (``docs/central.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from uldp.client.noise import (
    discrete_laplace,
    discrete_laplace_variance,
    laplace_scale,
    rational_epsilon,
)
from uldp.client.randomness import RandomSource, as_source
from uldp.collector.central.data import group_by_user
from uldp.collector.central.intervals import dlap_abs_quantile, laplace_sum_abs_quantile
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord

__all__ = [
    "ESTIMAND",
    "AdaptiveParams",
    "adaptive_user_mean",
    "adaptive_user_mean_of_means",
    "grid_sum",
    "histogram",
    "tail_sum",
    "user_mean",
    "user_mean_of_means",
]

ESTIMAND = ("mean of user means (each user's rows averaged, the user mean clamped to the "
            "public range [{lo:g}, {hi:g}], users weighted equally)")
DEFAULT_GRID_BITS = 24


# ---- validation ------------------------------------------------------------------------
def _number(name: str, x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(x)):
        raise ValueError(f"{name} must be a finite number, got {x!r}")
    return float(x)


def _check(epsilon: Any, lo: Any, hi: Any, alpha: Any) -> tuple[float, float, float, float]:
    eps = _number("epsilon", epsilon)
    if eps <= 0:
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
    rational_epsilon(eps)
    lo_f, hi_f = _number("lo", lo), _number("hi", hi)
    if not lo_f < hi_f:
        raise ValueError(f"the public range needs lo < hi, got lo={lo_f:g}, hi={hi_f:g}")
    a = _number("alpha", alpha)
    if not 0 < a < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return eps, lo_f, hi_f, a


def _means(means: Any) -> np.ndarray:
    try:
        y = np.asarray(means, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("user means must be numeric") from None
    if y.ndim != 1 or y.size == 0:
        raise ValueError("user means must be a non-empty one-dimensional array "
                         "(this estimator is one-dimensional: one --value-col)")
    if not np.isfinite(y).all():
        raise ValueError("user means contain NaN or infinity")
    return y


# ---- the integer statistics (each depends on one user only through that user's term) ---
def grid_sum(y: np.ndarray, a: float, b: float, K: int) -> int:
    """``Σ_i clip(floor(K (clip(y_i, a, b) − a)/(b − a) + 1/2), 0, K)``: an exact integer
    whose replace-one sensitivity is ``K`` (each term is an integer in ``[0, K]``)."""
    pos = (np.clip(y, a, b) - a) / (b - a) * K
    u = np.clip(np.floor(pos + 0.5), 0, K).astype(np.int64)
    return int(u.sum())


def histogram(y: np.ndarray, lo: float, hi: float, J: int) -> np.ndarray:
    """Counts of ``clip(y, lo, hi)`` in J equal bins of ``[lo, hi]`` (last bin closed).
    Every user is in exactly one bin: replace-one L1 sensitivity 2."""
    pos = (np.clip(y, lo, hi) - lo) / (hi - lo) * J
    j = np.clip(np.floor(pos), 0, J - 1).astype(np.int64)
    return np.bincount(j, minlength=J).astype(np.int64)


def tail_sum(y: np.ndarray, a: float, b: float, lo: float, hi: float, K: int) -> int:
    """The net mass the range ``[a, b]`` clamps off, on a grid of ``W/K``,
    ``W = (hi − b) + (a − lo)``: ``Σ_i round(K (y_i − b)⁺/W) − round(K (a − y_i)⁺/W)`` with
    ``y_i`` clamped to ``[lo, hi]`` first. Each term lies in ``[−round(K(a − lo)/W),
    round(K(hi − b)/W)]``, an interval of at most ``K + 1`` integers apart: replace-one
    sensitivity ``K + 1``."""
    W = (hi - b) + (a - lo)
    if W <= 0:  # [a, b] is the public range: it clamps nothing off
        return 0
    yc = np.clip(y, lo, hi)
    up = np.floor(K * np.maximum(yc - b, 0.0) / W + 0.5).astype(np.int64)
    down = np.floor(K * np.maximum(a - yc, 0.0) / W + 0.5).astype(np.int64)
    return int(up.sum() - down.sum())


# ---- the mean step -----------------------------------------------------------------------
def _mean_step(y: np.ndarray, a: float, b: float, epsilon: float, K: int, alpha: float,
               src: RandomSource) -> dict[str, Any]:
    n = y.size
    s = grid_sum(y, a, b, K)
    scale = laplace_scale(K, epsilon)
    z = int(discrete_laplace(scale, 1, src)[0])
    unit = (b - a) / (n * K)
    raw = a + unit * (s + z)
    k = dlap_abs_quantile(scale, alpha)
    half = unit * k + (b - a) / (2 * K)
    return {"raw": raw, "half_width": half, "noisy_grid_sum": s + z, "scale": scale.value,
            "noise_sd": unit * math.sqrt(discrete_laplace_variance(scale.value)),
            "scale_grid_units": f"{scale.num}/{scale.den}"}


def _finish(raw: float, half: float, lo: float, hi: float) -> tuple[float, tuple[float, float]]:
    """Clamp the estimate and both interval ends into ``[lo, hi]`` (post-processing).

    The estimand lies in ``[lo, hi]``, so the clamped interval contains it whenever the
    raw one does; the clamped estimate stays inside the clamped interval."""
    clamp = lambda v: min(max(v, lo), hi)  # noqa: E731
    return clamp(raw), (clamp(raw - half), clamp(raw + half))


def user_mean_of_means(means: Any, *, epsilon: float, lo: float, hi: float,
                       alpha: float = 0.05, grid_bits: int = DEFAULT_GRID_BITS,
                       rng: RandomSource | None = None) -> CentralRelease:
    """The simple estimator on precomputed user means (one entry per user)."""
    eps, lo, hi, alpha = _check(epsilon, lo, hi, alpha)
    K = _grid_units(grid_bits)
    y = _means(means)
    src = as_source(rng)
    step = _mean_step(y, lo, hi, eps, K, alpha, src)
    est, ci = _finish(step["raw"], step["half_width"], lo, hi)
    record = PrivacyRecord(
        mechanism="user-mean-laplace", mode="pure", epsilon=eps,
        split={"mean": 1.0},
        public={"n_users": int(y.size), "lo": lo, "hi": hi, "grid_units": K},
        notes="mean of clamped user means on a 2^grid_bits grid + discrete Laplace "
              "(sensitivity K grid units = (hi - lo)/n); n public (replace-one-user)")
    return CentralRelease(
        estimate=est, privacy=record,
        details={"n_users": int(y.size), "noise_sd": step["noise_sd"],
                 "noisy_grid_sum": step["noisy_grid_sum"],
                 "noise_scale_grid_units": step["scale_grid_units"],
                 "range": (lo, hi), "coverage": 1 - alpha},
        interval=ci, estimand=ESTIMAND.format(lo=lo, hi=hi))


def user_mean(user_ids: Any, values: Any, *, epsilon: float, lo: float, hi: float,
              alpha: float = 0.05, grid_bits: int = DEFAULT_GRID_BITS,
              rng: RandomSource | None = None) -> CentralRelease:
    """Simple user-level ε-DP mean of user means over the public range ``[lo, hi]``.

    ``user_ids`` (N,), ``values`` (N,): rows of a warehouse table. See the module
    docstring for the mechanism, its privacy argument and its interval.
    """
    groups = group_by_user(user_ids, values)
    if groups.values.ndim != 1:
        raise ValueError("values must be one-dimensional (one value per row)")
    rel = user_mean_of_means(groups.user_means(), epsilon=epsilon, lo=lo, hi=hi, alpha=alpha,
                             grid_bits=grid_bits, rng=rng)
    rel.details["n_records"] = int(groups.counts.sum())
    return rel


def _grid_units(grid_bits: Any) -> int:
    if isinstance(grid_bits, bool) or not isinstance(grid_bits, (int, np.integer)) \
            or not 4 <= grid_bits <= 30:
        raise ValueError(f"grid_bits must be an integer in [4, 30], got {grid_bits!r}")
    return 1 << int(grid_bits)


# ---- adaptive --------------------------------------------------------------------------
@dataclass(frozen=True)
class AdaptiveParams:
    """Public constants of the adaptive estimator (module docstring, steps 1–5).

    share_hist: budget share of the histogram (the mean step gets the rest, less
    share_tail when a candidate is found). bins_small / bins_large: J when ``n ε_h`` is below /
    at least ``bins_switch``. max_fraction: keep a candidate only if it is at most this
    fraction of the public width. gate: use the simple estimator when ``τ > gate · n``.
    core_mass / mass_z: the core must hold ``core_mass · n`` users after subtracting
    ``mass_z`` noise standard deviations. share_tail: budget share of the clamped-mass
    measurement (step 4) when a candidate is found. tail_z: the estimate takes the part of
    the measured clamped mass beyond this many of its noise standard deviations (a soft
    threshold). These constants are public.
    """

    share_hist: float = 3 / 64
    share_tail: float = 3 / 8
    bins_small: int = 32
    bins_large: int = 64
    bins_switch: float = 100.0
    detect_alpha: float = 0.01
    margin_scale: float = 40.0
    margin_min: float = 1.0
    margin_max: float = 2.0
    max_fraction: float = 0.4
    core_mass: float = 0.5
    mass_z: float = 2.0
    tail_z: float = 3.0
    gate: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.tail_z, (int, float)) and 0 <= self.tail_z < math.inf):
            raise ValueError(f"tail_z must be a finite number >= 0, got {self.tail_z!r}")
        for name in ("share_hist", "share_tail"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < 1):
                raise ValueError(f"{name} must be in (0, 1), got {v!r}")
        if self.share_hist + self.share_tail >= 0.9:
            raise ValueError("share_hist + share_tail must be below 0.9 (the mean step "
                             "needs the rest)")
        for name in ("bins_small", "bins_large"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 4 <= v <= 4096:
                raise ValueError(f"{name} must be an integer in [4, 4096], got {v!r}")
        for name in ("detect_alpha", "max_fraction", "core_mass", "gate"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < 1):
                raise ValueError(f"{name} must be in (0, 1), got {v!r}")
        if not 0 < self.margin_min <= self.margin_max:
            raise ValueError("need 0 < margin_min <= margin_max")


def _plan(n: int, eps: float, p: AdaptiveParams) -> tuple[int, float, float, bool]:
    """Public plan: (J, ε_h, τ, use the range finder?)."""
    eps_h = eps * p.share_hist
    J = p.bins_small if n * eps_h < p.bins_switch else p.bins_large
    tau = (2 / eps_h) * math.log(J / (2 * p.detect_alpha))
    return J, eps_h, tau, tau <= p.gate * n


def _candidate(noisy: np.ndarray, n: int, tau: float, lo: float, hi: float,
               p: AdaptiveParams) -> tuple[float, float] | None:
    """Post-processing of the noisy histogram: the candidate range, or None."""
    J = noisy.size
    det = np.flatnonzero(noisy > tau)
    if det.size == 0:
        return None
    j1, j2 = int(det[0]), int(det[-1])
    k = j2 - j1 + 1
    # the core must hold at least core_mass * n users even after subtracting mass_z noise
    # standard deviations (sd of a sum of k DLap(t): sqrt(2k) t, t = tau_scale): a single
    # spurious bin pushed over tau by its noise cannot pass when tau is close to n/2
    t = tau / math.log(J / (2 * p.detect_alpha))
    if float(noisy[j1:j2 + 1].sum()) - p.mass_z * t * math.sqrt(2 * k) < p.core_mass * n:
        return None
    f = min(p.margin_max, max(p.margin_min, p.margin_scale * tau / n))
    m = max(1, math.ceil(f * k))
    a_j, b_j = max(0, j1 - m), min(J, j2 + 1 + m)
    if (b_j - a_j) > p.max_fraction * J:
        return None
    h = (hi - lo) / J
    return lo + h * a_j, (hi if b_j == J else lo + h * b_j)


def _find_range(y: np.ndarray, lo: float, hi: float, J: int, eps_h: float, tau: float,
                p: AdaptiveParams, src: RandomSource, details: dict[str, Any],
                ) -> tuple[float, float] | None:
    """Steps 2–3: the noisy histogram (into ``details``) and the candidate range it shows,
    or None."""
    counts = histogram(y, lo, hi, J)
    noisy = counts + discrete_laplace(laplace_scale(2, eps_h), J, src)
    details["histogram_noisy"] = noisy.tolist()
    cand = _candidate(noisy, y.size, tau, lo, hi, p)
    details["candidate"] = cand
    return cand


def _tail_step(y: np.ndarray, a: float, b: float, lo: float, hi: float, eps_t: float, K: int,
               src: RandomSource) -> dict[str, Any]:
    """Step 4: the net clamped mass ``T`` (:func:`tail_sum`) plus ``DLap((K + 1)/ε_t)``; in
    units of the mean (divided by n): its value, grid unit and noise scale."""
    n = y.size
    scale = laplace_scale(K + 1, eps_t)
    noisy = tail_sum(y, a, b, lo, hi, K) + int(discrete_laplace(scale, 1, src)[0])
    unit = ((hi - b) + (a - lo)) / (n * K)
    return {"noisy": noisy, "unit": unit, "scale": scale.value,
            "sd": unit * math.sqrt(discrete_laplace_variance(scale.value)),
            "scale_grid_units": f"{scale.num}/{scale.den}"}


def _narrowed(y: np.ndarray, a: float, b: float, lo: float, hi: float, eps_t: float,
              eps_m: float, K: int, alpha: float, tail_z: float, src: RandomSource,
              details: dict[str, Any]) -> tuple[float, float, float]:
    """Steps 4–6 on the candidate ``[a, b]``: ``(estimate, interval low, interval high)``
    before the clamp into ``[lo, hi]``.

    ``N`` (the mean step on ``[a, b]``) plus the noisy net clamped mass ``T/n`` is an
    unbiased estimate of the estimand whatever the users outside ``[a, b]``; the interval
    is centred there, half-width the exact ``1 − α`` quantile of the sum of the two
    Laplace noises plus their grid and rounding terms. The estimate is ``N`` plus the part
    of ``T/n`` beyond ``tail_z`` noise standard deviations (soft threshold: when few users
    lie outside, which is when the histogram narrows, ``N`` alone has the smaller error;
    a clamped mass that stands out of the noise is added back); the interval is widened
    to hold it."""
    m = _mean_step(y, a, b, eps_m, K, alpha, src)
    t = _tail_step(y, a, b, lo, hi, eps_t, K, src)
    n_unit = (b - a) / (y.size * K)
    centre = m["raw"] + t["noisy"] * t["unit"]
    q = laplace_sum_abs_quantile(n_unit * m["scale"], t["unit"] * t["scale"], alpha)
    half = q + n_unit + t["unit"] + (b - a) / (2 * K) + ((hi - b) + (a - lo)) / (2 * K)
    mass = t["noisy"] * t["unit"]
    est = m["raw"] + math.copysign(max(abs(mass) - tail_z * t["sd"], 0.0), mass)
    details.update(noisy_grid_sum=m["noisy_grid_sum"], noise_sd=m["noise_sd"],
                   noise_scale_grid_units=m["scale_grid_units"], tail_noisy=t["noisy"],
                   tail_noise_sd=t["sd"], tail_noise_scale_grid_units=t["scale_grid_units"],
                   unbiased_centre=centre)
    return est, min(centre - half, est), max(centre + half, est)


def _adaptive_record(eps: float, split: dict[str, float], n: int, lo: float, hi: float,
                     K: int, J: int, p: AdaptiveParams, use_finder: bool) -> PrivacyRecord:
    return PrivacyRecord(
        mechanism="user-mean-adaptive" if use_finder else "user-mean-laplace",
        mode="pure", epsilon=eps, split=split,
        public={"n_users": n, "lo": lo, "hi": hi, "grid_units": K, "bins": J,
                "shares": [p.share_hist, p.share_tail] if use_finder else [],
                "range_finder": use_finder},
        notes=("noisy histogram of user means (L1 sensitivity 2) -> candidate range; if one: "
               "noisy net mass it clamps off (sensitivity K + 1 grid units) and the mean of "
               "user means clamped to it + discrete Laplace, else the mean over the public "
               "range; basic composition; n public (replace-one-user)"
               if use_finder else
               "range finder skipped (public gate: tau > gate*n); simple estimator with the "
               "whole budget"))


def adaptive_user_mean_of_means(means: Any, *, epsilon: float, lo: float, hi: float,
                                alpha: float = 0.05, grid_bits: int = DEFAULT_GRID_BITS,
                                params: AdaptiveParams | None = None,
                                rng: RandomSource | None = None) -> CentralRelease:
    """The adaptive estimator on precomputed user means (one entry per user)."""
    eps, lo, hi, alpha = _check(epsilon, lo, hi, alpha)
    K = _grid_units(grid_bits)
    p = params if params is not None else AdaptiveParams()
    if not isinstance(p, AdaptiveParams):
        raise ValueError(f"params must be an AdaptiveParams, got {type(p).__name__}")
    y = _means(means)
    n = y.size
    src = as_source(rng)
    J, eps_h, tau, use_finder = _plan(n, eps, p)
    details: dict[str, Any] = {"n_users": n, "bins": J, "detect_threshold": tau,
                               "range_finder": use_finder, "coverage": 1 - alpha}
    cand = _find_range(y, lo, hi, J, eps_h, tau, p, src, details) if use_finder else None
    if cand is not None:
        (a, b), eps_t = cand, eps * p.share_tail
        eps_m = eps - eps_h - eps_t
        split = {"histogram": eps_h / eps, "clamped_mass": eps_t / eps, "mean": eps_m / eps}
        raw, c_lo, c_hi = _narrowed(y, a, b, lo, hi, eps_t, eps_m, K, alpha, p.tail_z, src,
                                    details)
        clamp = lambda v: min(max(v, lo), hi)  # noqa: E731 - post-processing, as _finish
        est, ci = clamp(raw), (clamp(c_lo), clamp(c_hi))
    else:
        (a, b), eps_m = (lo, hi), eps - (eps_h if use_finder else 0.0)
        split = ({"histogram": eps_h / eps, "mean": eps_m / eps} if use_finder
                 else {"mean": 1.0})
        step = _mean_step(y, lo, hi, eps_m, K, alpha, src)
        est, ci = _finish(step["raw"], step["half_width"], lo, hi)
        details.update(noise_sd=step["noise_sd"], noisy_grid_sum=step["noisy_grid_sum"],
                       noise_scale_grid_units=step["scale_grid_units"])
    details.update(range=(a, b), narrowed=cand is not None)
    estimand = ESTIMAND.format(lo=lo, hi=hi)
    if cand is not None:
        estimand += (f"; the mean step ran on the private range [{a:g}, {b:g}], the interval "
                     "includes the noisy mass that range clamps off")
    return CentralRelease(estimate=est,
                          privacy=_adaptive_record(eps, split, n, lo, hi, K, J, p, use_finder),
                          details=details, interval=ci, estimand=estimand)


def adaptive_user_mean(user_ids: Any, values: Any, *, epsilon: float, lo: float, hi: float,
                       alpha: float = 0.05, grid_bits: int = DEFAULT_GRID_BITS,
                       params: AdaptiveParams | None = None,
                       rng: RandomSource | None = None) -> CentralRelease:
    """Adaptive user-level ε-DP mean of user means (module docstring, steps 1–5)."""
    groups = group_by_user(user_ids, values)
    if groups.values.ndim != 1:
        raise ValueError("values must be one-dimensional (one value per row)")
    rel = adaptive_user_mean_of_means(groups.user_means(), epsilon=epsilon, lo=lo, hi=hi,
                                      alpha=alpha, grid_bits=grid_bits, params=params,
                                      rng=rng)
    rel.details["n_records"] = int(groups.counts.sum())
    return rel
