"""Generalized randomized response (GRR, k-ary RR), device half — ``docs/device-protocol.md``
§17.3, ``docs/mechanisms.md`` (GRR).

Wang, Blocki, Li, Jha, *Locally differentially private protocols for frequency
estimation*, USENIX Security 2017 (§4.1, "direct encoding"): report the true value with
probability ``p = e^ε/(e^ε + k − 1)``, otherwise a uniformly chosen other value
(``q = 1/(e^ε + k − 1)`` each).

Exact design: ``Q = ⌈2^128 / (S + (k−1)·2^64)⌉`` and ``P = 2^64 − (k−1)·Q`` with
``S / 2^64 <= e^ε`` (``exact.exp_lower``), so ``P/Q <= S/2^64``; if that leaves ``P < Q``
(ε below ~``k²·2^-64``, never for a countable ε and ``k <= 2^16``), ``Q = ⌊2^64/k⌋``.
The report is the value kept with probability ``P/2^64`` (one word ``w < P``), else
``below(k − 1)`` mapped past ``v``. ``k = 1``: the report is 0 and nothing is drawn.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.base import OracleBase
from uldp.client.mechanisms.exact import ONE, bernoulli_dyadic, ceil_div, exp_lower, units_of
from uldp.client.randomness import RandomSource

__all__ = ["GRR", "GRRDesign", "grr_design", "grr_values"]


@dataclass(frozen=True)
class GRRDesign:
    """``P(report = v | v) = P/2^64``; ``P(report = u | v) = Q/2^64`` for each ``u ≠ v``."""

    k: int
    P: int
    Q: int


@functools.lru_cache(maxsize=4096)
def grr_design(k: int, units: int) -> GRRDesign:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k == 1:
        return GRRDesign(1, ONE, 0)
    S = exp_lower(units)
    Q = ceil_div(ONE * ONE, S + (k - 1) * ONE)
    P = ONE - (k - 1) * Q
    if P < Q:
        Q = ONE // k
        P = ONE - (k - 1) * Q
    if not (P * ONE <= S * Q and Q * ONE <= S * P and 0 < Q <= P < ONE):
        raise AssertionError(f"GRR design failed its exact check (k={k}, units={units})")
    return GRRDesign(k, P, Q)


def grr_values(items: np.ndarray, k: int, P: int, rng: RandomSource) -> np.ndarray:
    """k-ary randomized response of ``items`` with keep numerator ``P`` (used by GRR and
    by OLH over its hash range): one keep word per item (in order), then one
    ``below(k − 1)`` for every item not kept (in order)."""
    items = np.asarray(items, dtype=np.int64)
    if k == 1:
        return np.zeros(items.shape, dtype=np.int64)
    keep = bernoulli_dyadic(rng, np.full(items.shape, P, dtype=np.uint64))
    out = items.copy()
    flip = np.flatnonzero(~keep)
    if flip.size:
        other = rng.below(k - 1, size=flip.size)
        out[flip] = np.where(other < items[flip], other, other + 1)
    return out


class GRR(OracleBase):
    """Generalized randomized response (module docstring)."""

    name = "grr"
    family = "oracle"

    def length(self, k: int, eps: float) -> int:
        return 1

    def limit(self, k: int, eps: float) -> int:
        return max(k - 1, 0)

    def privatize(self, items: np.ndarray, k: int, eps: float, rng: RandomSource
                  ) -> np.ndarray:
        d = grr_design(k, units_of(eps))
        return grr_values(items, k, d.P, rng)[:, None]

    def probability(self, report: Sequence[int], item: int, k: int, eps: float) -> Fraction:
        d = grr_design(k, units_of(eps))
        (y,) = report
        if not 0 <= y < k:
            return Fraction(0)
        return Fraction(d.P if y == item else d.Q, ONE)
