"""Stage-II intervals from the stage-I histogram, with honest bias bounds.

See ``docs/algorithms.md`` ("Adaptive two-stage"). Sections of ``docs/algorithms.md``: §4.3 step 5
(the paper's interval ``[L - Δ, R + Δ]`` around ``k̂``), §4.5 (its bias given success).

Stage II clamps every user statistic ``Y`` to ``[a, b]`` and estimates ``E clamp(Y, a, b)``.
When user means are spread out (real, heterogeneous users) that differs from ``E Y`` by

    E clamp(Y, a, b) − E Y = β_lo − β_hi,   β_lo = E(a − Y)⁺,   β_hi = E(Y − b)⁺,

so ``E Y`` lies in ``[estimate − β_lo, estimate + β_hi]`` up to the noise. Both are bounded
from the stage-I histogram alone — public, already-noised numbers, so this is
post-processing and costs no privacy: ``β_hi ≤ Σ_{bins k above b} p_k (e_k − b)`` with
``e_k`` the bin's upper edge (``β_lo`` likewise), and the noisy masses ``p̂_k`` give an upper
confidence bound ``Σ w_k p̂_k + z √(Σ w_k² v / n_I)`` (``v``: the variance of one bin's
noise per report). Every stage-II estimate's interval is widened by these bounds.

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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from uldp.client.noise import discrete_laplace_variance, laplace_scale
from uldp.client.params import Alg1Params

__all__ = ["Z_BIAS", "StageTwoInterval", "adaptive_interval", "bias_bounds",
           "bin_edges", "candidate_intervals", "paper_interval"]

#: evidence a widening needs: a bias estimate counts only beyond this many noise sds
Z_WIDEN = 2.0

#: one-sided normal quantile of the bias upper confidence bounds (95 %); the bounds put
#: all the mass outside at the far edge of its bin, so they are conservative beyond it
Z_BIAS = 1.6448536269514722


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


def _bin_noise_var(eps_c: float) -> float:
    """Variance of the noise on one bin entry of one stage-I report, DLap(2/ε_c)."""
    return discrete_laplace_variance(laplace_scale(2, eps_c).value)


def bias_bounds(p: Alg1Params, sums: np.ndarray, n_I: int, eps_c: float, a: float,
                b: float) -> tuple[float, float]:
    """Upper confidence bounds ``(β_lo⁺, β_hi⁺)`` of the clamping bias of ``[a, b]``.

    ``sums`` are the stage-I noisy bin sums of the component (``n_I`` reports). With no
    stage-I report the bounds are the worst case over the support.
    """
    if n_I <= 0:
        return max(a + p.bound, 0.0), max(p.bound - b, 0.0)
    elo, ehi = bin_edges(p)
    mass = np.asarray(sums, dtype=np.float64) / n_I
    v = _bin_noise_var(eps_c) / n_I
    out = []
    for w in (np.maximum(a - elo, 0.0), np.maximum(ehi - b, 0.0)):
        ucb = float(np.dot(w, mass)) + Z_BIAS * float(np.sqrt(v * np.dot(w, w)))
        out.append(max(ucb, 0.0))
    return out[0], out[1]


def paper_interval(p: Alg1Params, khat: int, sums: np.ndarray, n_I: int,
                   eps_c: float) -> StageTwoInterval:
    """The spec's interval from ``k̂`` (§4.3 step 5; ``k̂ = 0``: the support), with its
    bias bounds from the same histogram."""
    lo, hi = p.clamp_interval(int(khat))
    b_lo, b_hi = bias_bounds(p, sums, n_I, eps_c, max(lo, -p.bound), min(hi, p.bound))
    return StageTwoInterval(lo, hi, b_lo, b_hi)


def _net_bias(p: Alg1Params, mass: np.ndarray, v: float, a: float, b: float
              ) -> tuple[float, float]:
    """Net clamping bias ``β_lo − β_hi`` of ``[a, b]`` estimated at the bins' centres, and
    the variance of that estimate from the histogram noise."""
    elo, ehi = bin_edges(p)
    centre = (elo + ehi) / 2
    w = np.maximum(a - centre, 0.0) - np.maximum(centre - b, 0.0)
    return float(np.dot(w, mass)), v * float(np.dot(w, w))


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


def adaptive_interval(p: Alg1Params, khat: int, sums: np.ndarray, n_I: int, eps_c: float,
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
    if n_I <= 0:
        mass, v = np.zeros(p.bins), 0.0
    else:
        mass, v = np.asarray(sums, dtype=np.float64) / n_I, _bin_noise_var(eps_c) / n_I
    best: tuple[float, float, float] | None = None
    for lo, hi in candidate_intervals(p, khat):
        net, var = _net_bias(p, mass, v, lo, hi)
        # only a bias the histogram shows beyond its noise counts (soft threshold): a
        # widening must pay for itself with evidence, not with the noise's fluctuations
        shown = max(abs(net) - Z_WIDEN * var**0.5, 0.0)
        mse = noise_var(hi - lo, eps_c) / n2 + shown * shown
        if best is None or mse < best[0] - 1e-18:
            best = (mse, lo, hi)
    assert best is not None
    lo, hi = best[1], best[2]
    b_lo, b_hi = bias_bounds(p, sums, n_I, eps_c, max(lo, -p.bound), min(hi, p.bound))
    return StageTwoInterval(lo, hi, b_lo, b_hi)
