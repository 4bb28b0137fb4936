"""Duchi et al.'s one-bit randomizer of a bounded value, device half —
``docs/device-protocol.md`` §17.7, ``docs/mechanisms.md`` (Duchi).

Duchi, Jordan, Wainwright, *Minimax optimal procedures for locally private estimation*,
JASA 113 (2018), §4.2.3 (one-dimensional case; the form of Wang et al., ICDE 2019, §3.1):
for ``t ∈ [−1, 1]`` report ``+C`` with probability ``1/2 + t(e^ε − 1)/(2(e^ε + 1))`` and
``−C`` otherwise, ``C = (e^ε + 1)/(e^ε − 1)``; unbiased with variance ``C² − t²``.

On the grid: the value is already the grid integer ``g ∈ {0, …, 2^16}`` (``t = 2g/2^16 − 1``,
§6). The report is one bit ``b = [w < P_min + D·g]`` (one word) with
``P_min = 2^15·⌈2^113 / (S + 2^64)⌉`` (so ``(2^64 − P_min)/P_min <= S/2^64 <= e^ε``,
``exact.exp_lower``) and ``D = (2^64 − 2·P_min) / 2^16`` (an integer: ``P_min`` is a
multiple of 2^15). ``P(b = 1 | g)`` runs linearly from ``P_min/2^64`` (g = 0) to
``1 − P_min/2^64`` (g = 2^16), so any two inputs have likelihood ratios at most
``(2^64 − P_min)/P_min``.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.exact import ONE, bernoulli_dyadic, ceil_div, exp_lower, units_of
from uldp.client.params import GRID_STEPS
from uldp.client.randomness import RandomSource

__all__ = ["Duchi", "duchi_design"]


@functools.lru_cache(maxsize=4096)
def duchi_design(units: int) -> tuple[int, int]:
    """``(P_min, D)``: ``P(b = 1 | g) = (P_min + D·g) / 2^64``."""
    S = exp_lower(units)
    P_min = (1 << 15) * ceil_div(1 << 113, S + ONE)
    D = (ONE - 2 * P_min) // GRID_STEPS
    if not (0 < P_min <= ONE // 2 and (ONE - P_min) * ONE <= S * P_min
            and P_min + D * GRID_STEPS == ONE - P_min):
        raise AssertionError(f"Duchi design failed its exact check (units={units})")
    return P_min, D


class Duchi:
    """Duchi et al.'s one-bit mechanism (module docstring)."""

    name = "duchi"
    family = "scalar"

    def limit(self, eps: float) -> int:
        return 1

    def privatize(self, g: np.ndarray, eps: float, rng: RandomSource) -> np.ndarray:
        P_min, D = duchi_design(units_of(eps))
        g = np.asarray(g, dtype=np.uint64)
        P = np.uint64(P_min) + np.uint64(D) * g
        return bernoulli_dyadic(rng, P).astype(np.int64)

    def probability(self, z: int, g: int, eps: float) -> Fraction:
        P_min, D = duchi_design(units_of(eps))
        p1 = Fraction(P_min + D * g, ONE)
        return p1 if z == 1 else (1 - p1 if z == 0 else Fraction(0))
