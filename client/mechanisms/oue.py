"""Optimized unary encoding (OUE), device half — ``docs/device-protocol.md`` §17.4,
``docs/mechanisms.md`` (OUE).

Wang, Blocki, Li, Jha, USENIX Security 2017, §4.3: the value ``v`` becomes the one-hot
vector of length ``k``; bit ``v`` is reported as 1 with probability ``p = 1/2``, every
other bit as 1 with probability ``q = 1/(e^ε + 1)``. Two inputs differ in two bits, so the
likelihood ratio is at most ``p(1−q)/((1−p)q) = (1−q)/q``.

Exact design: ``q = Q/2^64`` with ``Q = ⌈2^128 / (S + 2^64)⌉``, so ``(2^64 − Q)/Q <= S/2^64``
(``S/2^64 <= e^ε``, ``exact.exp_lower``); ``p = 2^63/2^64``. The report is ``k`` words,
bit ``j`` = ``w_j < (2^63 if j = v else Q)``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.base import OracleBase
from uldp.client.mechanisms.exact import ONE, bernoulli_dyadic, ceil_div, exp_lower, units_of
from uldp.client.randomness import RandomSource

__all__ = ["OUE", "oue_q"]

HALF = 1 << 63


@functools.lru_cache(maxsize=4096)
def oue_q(units: int) -> int:
    """The numerator ``Q`` of ``q = Q/2^64`` (module docstring)."""
    S = exp_lower(units)
    Q = ceil_div(ONE * ONE, S + ONE)
    if not ((ONE - Q) * ONE <= S * Q and 0 < Q <= HALF):
        raise AssertionError(f"OUE design failed its exact check (units={units})")
    return Q


class OUE(OracleBase):
    """Optimized unary encoding (module docstring)."""

    name = "oue"
    family = "oracle"

    def length(self, k: int, eps: float) -> int:
        return k

    def limit(self, k: int, eps: float) -> int:
        return 1

    def privatize(self, items: np.ndarray, k: int, eps: float, rng: RandomSource
                  ) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        P = np.full((items.size, k), oue_q(units_of(eps)), dtype=np.uint64)
        P[np.arange(items.size), items] = HALF
        return bernoulli_dyadic(rng, P).astype(np.int64)

    def probability(self, report: Sequence[int], item: int, k: int, eps: float) -> Fraction:
        Q = oue_q(units_of(eps))
        out = Fraction(1)
        for j, bit in enumerate(report):
            if bit not in (0, 1):
                return Fraction(0)
            on = HALF if j == item else Q
            out *= Fraction(on if bit else ONE - on, ONE)
        return out
