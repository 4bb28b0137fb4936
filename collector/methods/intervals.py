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
from collections.abc import Callable
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
    draws all miss with probability ``(1 − q)^n``.

    Newton's method from a point where ``kl ≥ c`` (the least of Pinsker's and two other
    bounds): ``kl(x, ·)`` is convex and increasing on ``[x, 1]``, so the iterates fall
    monotonically to the root."""
    scalar = np.ndim(x) == 0
    xa = np.clip(np.atleast_1d(np.asarray(x, dtype=np.float64)), 0.0, 1.0)
    if c <= 0:
        return float(xa[0]) if scalar else xa
    out = np.where(xa >= 1, 1.0, -math.expm1(-c))  # x = 1: 1; x = 0: 1 − e^{−c}
    inner = (xa > 0) & (xa < 1)
    if inner.any():
        xi = xa[inner]
        top = 1.0 - 1e-15
        # points where kl(x, p) ≥ c: Pinsker's; the one from x ln(x/p) ≥ x ln x; and the
        # one from kl(x, p) ≥ (p − x)²/(2p) (p ≥ x), tight for small means
        gap = (1 - xi) * np.exp(-(c - xi * np.log(xi)) / (1 - xi))
        small = xi + c + np.sqrt(c * c + 2 * xi * c)
        p = np.minimum(np.minimum(xi + math.sqrt(c / 2.0), 1 - gap), small)
        p = np.maximum(np.minimum(p, top), xi)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for _ in range(60):
                f = xi * np.log(xi / p) + (1 - xi) * np.log((1 - xi) / (1 - p)) - c
                step = np.where(f > 0, f * p * (1 - p) / np.maximum(p - xi, 1e-300), 0.0)
                p = np.maximum(p - step, xi)
                if float(np.max(step)) <= 1e-14:
                    break
        out[inner] = p
    return float(out[0]) if scalar else out


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
    mass = np.clip(hist.mass, 0.0, None)
    if mass.ndim == 2:  # one histogram per row of ``t2`` (``sizing.GridStage``)
        est = (t2 * mass).sum(axis=1) / np.maximum(mass.sum(axis=1), 1e-12)
        sd = np.sqrt((t2 * t2 * hist.var).sum(axis=1))
    else:
        est = t2 @ mass / max(float(mass.sum()), 1e-12)
        sd = np.sqrt((t2 * t2) @ hist.var)
    c = math.log(2 / alpha) / hist.reports
    hi = kl_upper(np.clip(est + z * sd, 0.0, 1.0), c)
    lo = 1.0 - kl_upper(np.clip(1.0 - est + z * sd, 0.0, 1.0), c)
    return np.atleast_1d(lo), np.atleast_1d(hi)
