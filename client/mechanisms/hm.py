"""The hybrid mechanism (HM), device half — ``docs/device-protocol.md`` §17.9,
``docs/mechanisms.md`` (HM).

Wang et al., ICDE 2019, §3.3 (Algorithm 3): with probability ``α`` run the piecewise
mechanism, otherwise Duchi et al.'s; ``α = 1 − e^{−ε/2}`` for ``ε > ε* ≈ 0.61`` and
``α = 0`` below. Both branches are unbiased and ε-LDP, and the branch is chosen
independently of the data, so the mixture (with the branch visible in the report) is
ε-LDP; its worst-case variance is below both branches' (Lemma 5 of the paper).

Exact design: ``α = A/2^64`` with ``A = 0`` when ``N_ε < HM_THRESHOLD_UNITS`` (ε < 0.61),
else ``A = 2^64 − ⌈2^128 / S_½⌉`` (``S_½/2^64 <= e^{ε/2}``, so ``α`` is the paper's value
rounded down); the branches are ``uldp.client.mechanisms.pm`` and ``.duchi`` at the full ε.

Report: one integer per component, ``j ∈ [0, N)`` for the PM branch, ``N + b`` for the Duchi
branch (``N = 2^16 + W`` of PM). Draws: one branch word per entry (``w < A``: PM); then the
Duchi entries' words (in order); then PM's draws over the PM entries (in order, §17.8).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.duchi import Duchi
from uldp.client.mechanisms.exact import ONE, bernoulli_dyadic, ceil_div, exp_lower, units_of
from uldp.client.mechanisms.pm import PM, pm_design, pm_values
from uldp.client.randomness import RandomSource

__all__ = ["HM", "HM_THRESHOLD_UNITS", "hm_alpha"]

#: ε* = 0.61 in units of 2^-24 (⌈0.61 · 2^24⌉): below it HM is Duchi's mechanism
HM_THRESHOLD_UNITS = 10234102


@functools.lru_cache(maxsize=4096)
def hm_alpha(units: int) -> int:
    """``A``: the PM branch is taken with probability ``A/2^64``."""
    if units < HM_THRESHOLD_UNITS:
        return 0
    return ONE - ceil_div(ONE * ONE, exp_lower(units // 2))


class HM:
    """The hybrid mechanism (module docstring)."""

    name = "hm"
    family = "scalar"

    def limit(self, eps: float) -> int:
        return pm_design(units_of(eps)).cells + 1

    def privatize(self, g: np.ndarray, eps: float, rng: RandomSource) -> np.ndarray:
        g = np.asarray(g, dtype=np.int64)
        flat = g.ravel()
        pm_branch = bernoulli_dyadic(rng, np.full(flat.shape, hm_alpha(units_of(eps)),
                                                  dtype=np.uint64))
        out = np.empty(flat.shape, dtype=np.int64)
        du = np.flatnonzero(~pm_branch)
        out[du] = pm_design(units_of(eps)).cells + Duchi().privatize(flat[du], eps, rng)
        pm = np.flatnonzero(pm_branch)
        out[pm] = pm_values(flat[pm], pm_design(units_of(eps)), rng)
        return out.reshape(g.shape)

    def probability(self, z: int, g: int, eps: float) -> Fraction:
        alpha = Fraction(hm_alpha(units_of(eps)), ONE)
        N = pm_design(units_of(eps)).cells
        if z >= N:
            return (1 - alpha) * Duchi().probability(z - N, g, eps)
        return alpha * PM().probability(z, g, eps)
