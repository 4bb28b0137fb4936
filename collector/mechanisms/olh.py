"""Optimized local hashing, collector half (``docs/mechanisms.md``): the support of
``(s, y)`` is ``{v : H_s(v) = y}``, recomputed from the public hash family; ``p* = P_g/2^64``
and ``q* = c·P_g/2^64 + (1 − c)·Q_g/2^64`` with ``c = Σ_j π_j²`` the exact collision
probability of two values under a random seed (each bucket ``j`` has the dyadic
probability ``π_j``). Device half: ``uldp.client.mechanisms.olh``."""

from __future__ import annotations

import functools
import itertools
from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.exact import ONE, ceil_div, units_of
from uldp.client.mechanisms.olh import SEED_BITS, hash_table, olh_design
from uldp.collector.mechanisms.base import (
    Bounds,
    check_shape,
    independent_functional_variance,
    independent_mean_variance,
    pure_variance,
    require,
)

__all__ = ["OLHDecoder", "collision"]


@functools.lru_cache(maxsize=256)
def collision(g: int) -> float:
    """``Σ_j π_j²``, ``π_j = #{w < 2^64 : ⌊wg/2^64⌋ = j} / 2^64`` (exact, then rounded)."""
    edges = [ceil_div(j * ONE, g) for j in range(g + 1)]
    return float(sum(Fraction(b - a, ONE) ** 2 for a, b in itertools.pairwise(edges)))


class OLHDecoder:
    name = "olh"
    binary = True  # supports are 0/1

    def bounds(self, k: int, eps: float) -> Bounds:
        """A report is a seed in ``[0, 2^SEED_BITS − 1]`` and a hash value in
        ``[0, g − 1]`` (``g`` the design's buckets)."""
        g = olh_design(units_of(eps)).k
        return Bounds((0, 0), ((1 << SEED_BITS) - 1, g - 1))

    def invalid(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        return self.bounds(k, eps).invalid(reports)

    def rule(self, k: int, eps: float) -> str:
        g = olh_design(units_of(eps)).k
        return (f"a local-hashing report is a seed in [0, {(1 << SEED_BITS) - 1}] and a hash "
                f"value in [0, {g - 1}]")

    def support(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        g = olh_design(units_of(eps)).k
        r = check_shape(reports, 2)
        require(self.invalid(r, k, eps), r, self.rule(k, eps))
        out = np.empty((r.shape[0], k), dtype=np.int64)
        for i, (s, y) in enumerate(r.tolist()):
            out[i] = hash_table(s, k, g) == y
        return out

    def pq(self, k: int, eps: float) -> tuple[float, float]:
        d = olh_design(units_of(eps))
        p, q, c = d.P / ONE, d.Q / ONE, collision(d.k)
        return p, c * p + (1 - c) * q

    def variance(self, f: np.ndarray, k: int, eps: float) -> np.ndarray:
        return pure_variance(f, *self.pq(k, eps))

    def functional_variance(self, F: np.ndarray, k: int, eps: float) -> np.ndarray:
        """As if the support's entries were independent given the value: two values'
        entries correlate only through the hash's collisions, a second-order term (OLH is
        chosen only for more than 1024 categories; ``two-stage-sized`` refuses it)."""
        return independent_functional_variance(F, *self.pq(k, eps))

    def mean_functional_variance(self, F: np.ndarray, pi: np.ndarray, k: int, eps: float
                                 ) -> np.ndarray:
        return independent_mean_variance(F, pi, *self.pq(k, eps))
