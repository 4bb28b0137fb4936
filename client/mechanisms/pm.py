"""The piecewise mechanism (PM) on a fixed-point grid, device half —
``docs/device-protocol.md`` §17.8, ``docs/mechanisms.md`` (PM).

Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu, *Collecting and analyzing multidimensional
data under local differential privacy*, ICDE 2019, §3.2 (Algorithm 2): for
``t ∈ [−1, 1]`` the output is uniform on ``[−C, C]``, ``C = (e^{ε/2}+1)/(e^{ε/2}−1)``, with
density ``p = (e^ε − e^{ε/2})/(2e^{ε/2} + 2)`` on the window ``[l(t), l(t) + C − 1]`` and
``p/e^ε`` elsewhere, ``l(t) = (C+1)t/2 − (C−1)/2``. The window covers a share
``(C − 1)/(2C) = 1/(e^{ε/2} + 1)`` of the output range and slides linearly with ``t``.

Discretized exactly: the input is the grid integer ``g ∈ {0, …, 2^16}``; the output is an
integer ``j ∈ [0, N)``, ``N = 2^16 + W``, with window ``[g, g + W)``:

* ``W = max(1, ⌊2^80 / S_½⌋)`` — ``⌊2^16 / e^{ε/2}⌋``, so ``W/N ≈ 1/(e^{ε/2} + 1)`` —
  with ``S_½ = exp_lower(⌊N_ε/2⌋)``;
* the window holds the output with probability ``P_w/2^64``,
  ``P_w = ⌊2^64·S·W / (S·W + 2^80)⌋`` (``S = exp_lower(N_ε)``), i.e. each window cell has
  ``π_in = P_w/(2^64 W)`` and each of the ``2^16`` other cells ``π_out = (2^64 − P_w)/2^80``,
  and the design checks ``π_in/π_out <= S/2^64 <= e^ε`` exactly.

Draws, for the entries of a report in order: one word each (``w < P_w``: in the window);
then one ``below(W)`` call over the entries in the window (``j = g + u``); then one
``below(2^16)`` call over the others (``r``; ``j = r`` if ``r < g`` else ``r + W``).
``E[j | g]`` is affine in ``g``, so the collector decodes it without bias
(``uldp.collector.mechanisms.pm``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.exact import ONE, bernoulli_dyadic, exp_lower, units_of
from uldp.client.params import GRID_STEPS
from uldp.client.randomness import RandomSource

__all__ = ["PM", "PMDesign", "pm_design", "pm_values"]


@dataclass(frozen=True)
class PMDesign:
    W: int  # window cells
    P_w: int  # P(output in the window) = P_w / 2^64

    @property
    def cells(self) -> int:
        """``N = 2^16 + W`` output cells."""
        return GRID_STEPS + self.W


@functools.lru_cache(maxsize=4096)
def pm_design(units: int) -> PMDesign:
    S, S_half = exp_lower(units), exp_lower(units // 2)
    W = max(1, (1 << 80) // S_half)
    P_w = (ONE * S * W) // (S * W + (1 << 80))
    inside, outside = P_w * GRID_STEPS, W * (ONE - P_w)  # π_in : π_out
    if not (0 < P_w < ONE and 1 <= W <= GRID_STEPS and inside * ONE <= S * outside
            and outside * ONE <= S * inside):
        raise AssertionError(f"PM design failed its exact check (units={units})")
    return PMDesign(W, P_w)


def pm_values(g: np.ndarray, d: PMDesign, rng: RandomSource) -> np.ndarray:
    """PM outputs of the grid values ``g`` (any shape; entries in row-major order): the
    window words of every entry, then the in-window draws, then the others."""
    g = np.asarray(g, dtype=np.int64)
    flat = g.ravel()
    inside = bernoulli_dyadic(rng, np.full(flat.shape, d.P_w, dtype=np.uint64))
    out = np.empty(flat.shape, dtype=np.int64)
    ins, outs = np.flatnonzero(inside), np.flatnonzero(~inside)
    out[ins] = flat[ins] + rng.below(d.W, size=ins.size)
    r = rng.below(GRID_STEPS, size=outs.size)
    out[outs] = np.where(r < flat[outs], r, r + d.W)
    return out.reshape(g.shape)


class PM:
    """The piecewise mechanism on the grid (module docstring)."""

    name = "pm"
    family = "scalar"

    def limit(self, eps: float) -> int:
        return pm_design(units_of(eps)).cells - 1

    def privatize(self, g: np.ndarray, eps: float, rng: RandomSource) -> np.ndarray:
        return pm_values(g, pm_design(units_of(eps)), rng)

    def probability(self, z: int, g: int, eps: float) -> Fraction:
        d = pm_design(units_of(eps))
        if not 0 <= z < d.cells:
            return Fraction(0)
        if g <= z < g + d.W:
            return Fraction(d.P_w, ONE * d.W)
        return Fraction(ONE - d.P_w, ONE * GRID_STEPS)
