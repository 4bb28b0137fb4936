"""Stage-II intervals from the stage-I histogram, with honest bias bounds.

See ``docs/algorithms.md`` ("Adaptive two-stage"). Sections of ``docs/algorithms.md``: §4.3 step 5
(the paper's interval ``[L - Δ, R + Δ]`` around ``k̂``), §4.5 (its bias given success).

Stage II clamps every user statistic ``Y`` to ``[a, b]`` and estimates ``E clamp(Y, a, b)``.
When user means are spread out (real, heterogeneous users) that differs from ``E Y`` by

    E clamp(Y, a, b) − E Y = β_lo − β_hi,   β_lo = E(a − Y)⁺,   β_hi = E(Y − b)⁺,

so ``E Y`` lies in ``[estimate − β_lo, estimate + β_hi]`` up to the noise. Both are bounded
from the stage-I histogram alone — public, already-noised numbers, so this is
post-processing and costs no privacy: ``β_hi ≤ Σ_{bins k above b} p_k (e_k − b)`` with
``e_k`` the bin's upper edge (``β_lo`` likewise), over *all* users. The stage-I users are a
sample of them: the noisy masses ``p̂_k`` give ``Σ w_k p̂_k + z √(Σ w_k² v / n_I)`` for the
stage-I users (``v``: one bin's noise per report), and a Chernoff bound on ``[0, max w]``
carries that to all users — a tail of mass ``q`` misses all ``n_I`` stage-I users with
probability ``(1 − q)^{n_I}``, which no histogram can see (:func:`tail_upper`). Every
stage-II estimate's interval is widened by these bounds.

Two rules choose ``[a, b]`` (a union of adjacent bins, or the whole support):

* ``paper`` — the spec's interval around the arg max bin ``k̂`` (with its margin ``Δ``);
* ``adaptive`` (default) — the paper's interval or a widening of it by whole bins on
  either side, up to the whole support: the one with the smallest estimated mean squared
  error, noise variance of its width plus the squared clamping bias the histogram shows
  beyond its noise. It is never narrower than the paper's (the arg max is the histogram's
  most robust statistic; narrower choices from noisy masses overfit the noise), and the
  whole support
  is a candidate, so it never does much worse than single-stage Laplace on the stage-II
  users.

The bias bounds are conservative where the stage-I histogram is noisy (few stage-I users,
small ε): the interval is then honest but wider than the noise alone would make it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.params import Alg1Params

__all__ = [
    "ALPHA_BIAS",
    "Histogram",
    "StageTwoInterval",
    "adaptive_interval",
    "bias_bounds",
    "bin_edges",
    "candidate_intervals",
    "kl_upper",
    "missed_tail_risk",
    "moment_bounds",
    "paper_interval",
    "sized_interval",
    "tail_upper",
]

#: evidence a widening needs: a bias estimate counts only beyond this many noise sds
Z_WIDEN = 2.0

#: the level of each clamping-bias upper confidence bound (one-sided): its share for the
#: reports' noise and its share for the sampling of the stage-I users (``tail_upper``)
ALPHA_BIAS = 0.05


@dataclass(frozen=True)
class Histogram:
    """What stage I saw of one component: unbiased estimates of the share of users in each
    bin and their variances (``BinAccumulator.masses`` / ``mass_variance``: the noise of
    whichever mechanism the stage-I reports used), over ``reports`` reports."""

    mass: np.ndarray
    var: np.ndarray
    reports: int


@dataclass(frozen=True)
class StageTwoInterval:
    """A stage-II clamp interval and the bounds on the clamping bias it causes."""

    lo: float
    hi: float
    bias_lo: float  # the truth may lie this far below the estimate
    bias_hi: float  # ... and this far above it

    def to_json(self) -> list[float]:
        return [self.lo, self.hi, self.bias_lo, self.bias_hi]


def bin_edges(p: Alg1Params) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper edges of the ``B`` bins of ``[-D, D]`` (the last one ends at D)."""
    k = np.arange(p.bins)
    lo = -p.bound + k * p.bin_width
    hi = np.minimum(lo + p.bin_width, p.bound)
    hi[-1] = p.bound
    return lo, hi


def kl_upper(x: float | np.ndarray, c: float) -> Any:
    """The largest ``p ∈ [x, 1]`` with ``kl(x, p) ≤ c`` (Bernoulli relative entropy),
    elementwise: the Chernoff upper confidence bound of a mean in ``[0, 1]`` whose sample
    mean is ``x`` over ``n`` draws at confidence ``1 − e^{−n c}`` (it holds for any law on
    ``[0, 1]``, the Bernoulli being the extreme one, and for draws without replacement,
    Hoeffding 1963 §6). At ``x = 0`` it is ``1 − e^{−c}``: the tail of mass ``q`` that ``n``
    draws all miss with probability ``(1 − q)^n``."""
    if np.ndim(x) == 0:
        return _kl_upper_scalar(min(max(float(x), 0.0), 1.0), float(c))
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    if c <= 0:
        return x
    lo, hi = x.copy(), np.ones_like(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(56):
            mid = (lo + hi) / 2
            kl = np.where(x > 0, x * np.log(x / mid), 0.0) + \
                np.where(x < 1, (1 - x) * np.log((1 - x) / (1 - mid)), 0.0)
            ok = kl <= c
            lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(x >= 1, 1.0, hi)


def _kl_upper_scalar(x: float, c: float) -> float:
    if c <= 0 or x >= 1.0:
        return x
    if x == 0.0:
        return -math.expm1(-c)
    lo, hi = x, 1.0
    for _ in range(56):
        mid = (lo + hi) / 2
        kl = x * math.log(x / mid) + (1 - x) * math.log((1 - x) / (1 - mid))
        lo, hi = (mid, hi) if kl <= c else (lo, mid)
    return hi


def tail_upper(w: np.ndarray, hist: Histogram, alpha: float = ALPHA_BIAS) -> float:
    """Upper confidence bound (level ``1 − alpha``) of ``(1/n) Σ_i w(bin_i)`` over *all*
    ``n`` users, from the stage-I histogram of ``n_I`` of them (``w ≥ 0`` per bin).

    Two errors separate the histogram's ``Σ_k w_k p̂_k`` from it: the reports' noise (an
    unbiased sum with variance ``Σ_k w_k² v_k``, bounded at ``z_{1 − α/2}`` sds) and *which*
    users happened to land in stage I — a tail of mass ``q`` holding none of the ``n_I``
    stage-I users with probability ``(1 − q)^{n_I}``. The second is bounded by the Chernoff
    bound :func:`kl_upper` of a mean on ``[0, W]`` (``W = max w``) at ``ln(2/α)/n_I``, so the
    bound never falls below ``W·(1 − (α/2)^{1/n_I})`` — what a sample of ``n_I`` users
    cannot rule out."""
    W = float(np.max(w)) if w.size else 0.0
    if W <= 0.0:
        return 0.0
    if hist.reports <= 0:
        return W
    z = NormalDist().inv_cdf(1 - alpha / 2)
    seen = float(np.dot(w, hist.mass)) + z * float(np.sqrt(np.dot(w * w, hist.var)))
    return W * kl_upper(max(seen, 0.0) / W, math.log(2 / alpha) / hist.reports)


def bias_bounds(p: Alg1Params, hist: Histogram, a: float, b: float
                ) -> tuple[float, float]:
    """Upper confidence bounds ``(β_lo⁺, β_hi⁺)`` of the clamping bias of ``[a, b]`` over all
    the users, from the stage-I histogram of the component (:func:`tail_upper`: the noise
    *and* the sampling of the stage-I users). With no stage-I report the bounds are the
    worst case over the support."""
    if hist.reports <= 0:
        return max(a + p.bound, 0.0), max(p.bound - b, 0.0)
    elo, ehi = bin_edges(p)
    return (tail_upper(np.maximum(a - elo, 0.0), hist),
            tail_upper(np.maximum(ehi - b, 0.0), hist))


def missed_tail_risk(n1: int, W: float) -> float:
    """The largest expected squared clamping bias a stage I of ``n1`` users leaves unseen,
    from public values: a share ``q`` of the users at distance ``W`` beyond the window
    holds none of them with probability ``(1 − q)^{n1}``, and then costs ``(qW)²``;
    ``max_q q²(1 − q)^{n1} W²`` is at ``q = 2/(n1 + 2)`` (≈ ``0.54 W²/n1²``)."""
    if W <= 0:
        return 0.0
    if n1 <= 0:
        return W * W
    q = 2.0 / (n1 + 2.0)
    return float(q * q * (1 - q) ** n1 * W * W)


def paper_interval(p: Alg1Params, khat: int, hist: Histogram) -> StageTwoInterval:
    """The spec's interval from ``k̂`` (§4.3 step 5; ``k̂ = 0``: the support), with its
    bias bounds from the same histogram."""
    lo, hi = p.clamp_interval(int(khat))
    b_lo, b_hi = bias_bounds(p, hist, max(lo, -p.bound), min(hi, p.bound))
    return StageTwoInterval(lo, hi, b_lo, b_hi)


def net_bias(p: Alg1Params, hist: Histogram, a: float, b: float) -> tuple[float, float]:
    """Net clamping bias ``β_lo − β_hi`` of ``[a, b]`` estimated at the bins' centres, and
    the variance of that estimate from the histogram noise."""
    elo, ehi = bin_edges(p)
    centre = (elo + ehi) / 2
    w = np.maximum(a - centre, 0.0) - np.maximum(centre - b, 0.0)
    return float(np.dot(w, hist.mass)), float(np.dot(w * w, hist.var))


def candidate_intervals(p: Alg1Params, khat: int) -> list[tuple[float, float]]:
    """The paper's interval around ``k̂`` and its widenings by whole bins on either side,
    up to the whole support (``k̂ = 0``: only the support)."""
    if khat == 0:
        return [(-p.bound, p.bound)]
    lo0, hi0 = p.clamp_interval(khat)
    out = []
    for down in range(p.bins + 1):
        for up in range(p.bins + 1):
            lo = max(lo0 - down * p.bin_width, -p.bound)
            hi = min(hi0 + up * p.bin_width, p.bound)
            if (lo, hi) not in out:
                out.append((lo, hi))
    return out


def adaptive_interval(p: Alg1Params, khat: int, hist: Histogram, eps_c: float,
                      n_II: int, noise_var: Callable[[float, float], float]
                      ) -> StageTwoInterval:
    """The candidate interval (:func:`candidate_intervals`: never narrower than the
    paper's) with the smallest estimated mean squared error, ``noise_var(b − a)/n_II +
    ((|β̂| − z·sd β̂)⁺)²``: the noise variance of its width plus the squared net clamping
    bias estimated from the noisy stage-I masses at the bins' centres, counted only where
    it stands out of the histogram's noise (``z =`` :data:`Z_WIDEN`). The returned bias
    bounds are the honest upper confidence bounds of :func:`bias_bounds`.
    """
    n2 = max(int(n_II), 1)
    seen = hist if hist.reports > 0 else Histogram(np.zeros(p.bins), np.zeros(p.bins), 0)
    best: tuple[float, float, float] | None = None
    for lo, hi in candidate_intervals(p, khat):
        net, var = net_bias(p, seen, lo, hi)
        # only a bias the histogram shows beyond its noise counts (soft threshold): a
        # widening must pay for itself with evidence, not with the noise's fluctuations
        shown = max(abs(net) - Z_WIDEN * var**0.5, 0.0)
        mse = noise_var(hi - lo, eps_c) / n2 + shown * shown
        if best is None or mse < best[0] - 1e-18:
            best = (mse, lo, hi)
    assert best is not None
    lo, hi = best[1], best[2]
    b_lo, b_hi = bias_bounds(p, hist, max(lo, -p.bound), min(hi, p.bound))
    return StageTwoInterval(lo, hi, b_lo, b_hi)


def _candidates(p: Alg1Params, mode: int, margin: float) -> np.ndarray:
    """``(lo, hi)`` rows: the model window — the fine bin ``mode`` (0-based) widened by
    ``margin`` on both sides — and its widenings by whole bins on either side, up to the
    whole support (every row cut to the support)."""
    elo, ehi = bin_edges(p)
    a0, b0 = float(elo[mode]) - margin, float(ehi[mode]) + margin
    steps = np.arange(p.bins + 1) * p.bin_width
    los = np.maximum(np.append(a0 - steps, -p.bound), -p.bound)
    his = np.minimum(np.append(b0 + steps, p.bound), p.bound)
    lo, hi = np.meshgrid(np.unique(los), np.unique(his), indexing="ij")
    rows = np.stack([lo.ravel(), hi.ravel()], axis=1)
    return rows[rows[:, 1] > rows[:, 0]]


#: the largest slack (z standard deviations of the inside mass) the test may allow
MAX_SLACK = 0.35

#: the model window is used only when it is at most this share of the support: then a
#: population spread over the support puts most of its mass outside, which the stage-I
#: histogram sees (the inside-mass test has power)
NARROW_MAX = 0.35


def _model_holds(p: Alg1Params, hist: Histogram, mode: int, margin: float,
                 centre: np.ndarray) -> bool:
    """Whether the users look alike: the model window around the mode is narrow
    (:data:`NARROW_MAX`) and the histogram's mass inside it is 1 up to ``z`` standard
    deviations of its noise, a slack of at most :data:`MAX_SLACK` (a weaker stage I
    cannot tell users alike from users spread out, and the window is then the support)."""
    elo, ehi = bin_edges(p)
    a, b = float(elo[mode]) - margin, float(ehi[mode]) + margin
    if b - a > NARROW_MAX * 2 * p.bound:
        return False
    inside = ((centre >= a) & (centre <= b)).astype(float)
    slack = Z_WIDEN * float(np.sqrt(inside @ hist.var))
    # the test must have power: a population with a third of its mass outside fails it
    return slack <= MAX_SLACK and float(inside @ hist.mass) >= 1 - slack


def moment_bounds(t2: np.ndarray, hist: Histogram, alpha: float = ALPHA_BIAS
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Confidence bounds of ``E t²`` over *all* the users (rows of ``t2``: ``t²`` at each
    bin's values for a candidate window), from the stage-I histogram: the noisy masses'
    estimate ± ``z`` of its noise, carried from the stage-I users to all users by the
    Chernoff bound :func:`kl_upper` (values in ``[0, 1]``; a sample of ``n_I`` users may miss
    a share of the others). A randomizer's noise is affine in ``E t²``, so its worse end over
    these bounds is what the rule may count on."""
    if hist.reports <= 0:
        n = t2.shape[0]
        return np.zeros(n), np.ones(n)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    est = t2 @ np.clip(hist.mass, 0.0, None) / max(float(np.clip(hist.mass, 0.0, None).sum()),
                                                   1e-12)
    sd = np.sqrt((t2 * t2) @ hist.var)
    c = math.log(2 / alpha) / hist.reports
    hi = kl_upper(np.clip(est + z * sd, 0.0, 1.0), c)
    lo = 1.0 - kl_upper(np.clip(1.0 - est + z * sd, 0.0, 1.0), c)
    return np.atleast_1d(lo), np.atleast_1d(hi)


def sized_interval(p: Alg1Params, hist: Histogram, eps_c: float, n_II: int,
                   mechanisms: Sequence[str], noise_var: Callable[..., float],
                   margin: float) -> tuple[StageTwoInterval, str, float, float]:
    """The stage-II interval *and* randomizer sized from what stage I saw (``two-stage-
    sized``, ``docs/algorithms.md``). Candidates: the *model window* — the histogram's
    mode bin widened by ``margin`` (the deviation no user statistic of ``m`` bounded
    samples exceeds, by Hoeffding's inequality and a union bound over the users) — and its
    widenings by whole bins, up to the whole support; never narrower, so no choice rests
    on noisy masses alone — and only when the users look alike (:func:`_model_holds`:
    the window is narrow and holds all of the histogram's mass up to its noise); otherwise
    the whole support, with the randomizer still chosen from the histogram. A candidate
    whose estimated mass below ``a`` (or above ``b``)
    exceeds ``z`` standard deviations of its noise is out (the whole support never is).
    Over the candidates and the randomizers the rule takes the smallest estimated mean
    squared error ``noise_var(mech, b − a, ε_c, E t²)/n_II + ((|β̂| − z·sd β̂)⁺)²``: the
    randomizer's noise at the second moment ``E t²`` the histogram shows on ``[a, b]``,
    plus the clamping bias it shows beyond its noise. Returns the interval with its
    honest bias bounds, the randomizer, that ``E t²`` (NaN without a stage-I report) and
    the estimated mean squared error."""
    n2 = max(int(n_II), 1)
    elo, ehi = bin_edges(p)
    centre = (elo + ehi) / 2
    if hist.reports <= 0:
        cand = np.array([[-p.bound, p.bound]])
        hist = Histogram(np.zeros(p.bins), np.zeros(p.bins), 0)
    elif _model_holds(p, hist, int(np.argmax(hist.mass)), margin, centre):
        cand = _candidates(p, int(np.argmax(hist.mass)), margin)
    else:
        cand = np.array([[-p.bound, p.bound]])
    lo, hi = cand[:, :1], cand[:, 1:]
    w = np.maximum(lo - centre, 0.0) - np.maximum(centre - hi, 0.0)
    net, var = w @ hist.mass, (w * w) @ hist.var
    shown = np.maximum(np.abs(net) - Z_WIDEN * np.sqrt(var), 0.0)
    # a candidate must leave outside no more mass than the histogram's noise explains
    below, above = (centre < lo).astype(float), (centre > hi).astype(float)
    clear = ((below @ hist.mass <= Z_WIDEN * np.sqrt(below @ hist.var))
             & (above @ hist.mass <= Z_WIDEN * np.sqrt(above @ hist.var)))
    shown = np.where(clear, shown, np.inf)
    mass = np.clip(hist.mass, 0.0, None)
    mass = mass / mass.sum() if mass.sum() > 0 else np.full(p.bins, 1.0 / p.bins)
    # where the values lie: the bins' centres, except that the end bins hold the support's
    # ends, where clamped (and binary) values pile up
    where = centre.copy()
    where[0], where[-1] = -p.bound, p.bound
    t = 2 * (np.clip(where, lo, hi) - lo) / (hi - lo) - 1
    t2 = np.clip((t * t) @ mass, 0.0, 1.0) if hist.reports > 0 else np.full(len(cand), np.nan)
    t2_lo, t2_hi = moment_bounds(t * t, hist)
    best: tuple[float, int, str] | None = None
    for mech in mechanisms:
        for r in range(len(cand)):
            width = float(cand[r, 1] - cand[r, 0])
            if np.isnan(t2[r]):
                noise = noise_var(mech, width, eps_c, None)
            else:  # affine in E t²: the worse end of what all the users may have
                noise = max(noise_var(mech, width, eps_c, float(t2_lo[r])),
                            noise_var(mech, width, eps_c, float(t2_hi[r])))
            mse = noise / n2 + float(shown[r]) ** 2
            if best is None or mse < best[0] * (1 - 1e-12):
                best = (mse, r, mech)
    assert best is not None
    a, b = float(cand[best[1], 0]), float(cand[best[1], 1])
    b_lo, b_hi = bias_bounds(p, hist, a, b)
    moment = float(t2[best[1]]) if hist.reports > 0 else float("nan")
    return StageTwoInterval(a, b, b_lo, b_hi), best[2], moment, best[0]
