"""Subset selection (ω-subset mechanism), device half — ``docs/device-protocol.md`` §17.5,
``docs/mechanisms.md`` (SS).

Wang, Huang, Wang, Nie, Xu, Yang, *Mutual information optimally local private discrete
distribution estimation*, arXiv:1607.08025 (2016), and Ye, Barg, *Optimal schemes for
discrete distribution estimation under locally differential privacy*, IEEE Trans. IT 64(8)
(2018): report a subset ``Y`` of size ω; ``P(Y | v) ∝ e^ε`` if ``v ∈ Y`` and ``∝ 1``
otherwise, with ``ω ≈ k/(e^ε + 1)``. Equivalently: with probability
``p_in = ω e^ε / (ω e^ε + k − ω)`` the subset holds ``v`` and ω − 1 uniformly chosen other
values, otherwise ω uniformly chosen other values. GRR is the case ω = 1.

Exact design (``S/2^64 <= e^ε``, ``exact.exp_lower``):
``ω = clamp(⌊(2k·2^64 + S + 2^64) / (2(S + 2^64))⌋, 1, k − 1)`` (``k/(e^ε+1)`` rounded) and
``P_in = ⌊2^64·ωS / (ωS + (k − ω)·2^64)⌋``. For a subset holding ``v`` but not ``v'`` the
likelihood ratio is ``P_in (k − ω) / ((2^64 − P_in) ω)``, which the floor keeps at most
``S/2^64`` (and the design checks at least ``2^64/S``).

Draws: one word (``w < P_in``: ``v`` is in), then the ``t`` other values (``t = ω − 1`` or
ω) as a uniform ``t``-subset of the ``k − 1`` positions ``{0, …, k−2}`` by Floyd's
algorithm: for ``j = k−1−t, …, k−2``: ``r = below(j + 1)``; add ``j`` if ``r`` is already
chosen, else ``r``. Position ``p`` is the value ``p`` if ``p < v``, else ``p + 1``. The
report is the ω values in increasing order. ``k = 1``: the report is ``[0]``, no draw.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.base import OracleBase
from uldp.client.mechanisms.exact import ONE, bernoulli_dyadic, exp_lower, units_of
from uldp.client.randomness import RandomSource

__all__ = ["SS", "SSDesign", "ss_design"]

#: users × positions of one vectorized Floyd pass (memory bound of the batch path)
_CELLS = 1 << 24


@dataclass(frozen=True)
class SSDesign:
    k: int
    omega: int  # subset size ω
    P_in: int  # P(v ∈ Y | v) = P_in / 2^64


@functools.lru_cache(maxsize=4096)
def ss_design(k: int, units: int) -> SSDesign:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k == 1:
        return SSDesign(1, 1, ONE)
    S = exp_lower(units)
    w = (2 * k * ONE + S + ONE) // (2 * (S + ONE))
    w = min(max(w, 1), k - 1)
    P_in = (ONE * w * S) // (w * S + (k - w) * ONE)
    num, den = P_in * (k - w), (ONE - P_in) * w  # the likelihood ratio num/den
    if not (0 < P_in < ONE and num * ONE <= S * den and den * ONE <= S * num):
        raise AssertionError(f"SS design failed its exact check (k={k}, units={units})")
    return SSDesign(k, w, P_in)


def _floyd(rng: RandomSource, t: np.ndarray, N: int, omega: int) -> np.ndarray:
    """Chosen positions ``(n, N)`` (bool): a uniform ``t_i``-subset of ``{0..N−1}`` per row
    (Floyd's algorithm, ``j`` from ``N − t_i`` to ``N − 1``)."""
    n = t.size
    chosen = np.zeros((n, N), dtype=bool)
    for j in range(N - omega, N):
        rows = np.flatnonzero(N - t <= j)
        if not rows.size:
            continue
        r = rng.below(j + 1, size=rows.size)
        hit = chosen[rows, r]
        chosen[rows, np.where(hit, j, r)] = True
    return chosen


class SS(OracleBase):
    """Subset selection (module docstring)."""

    name = "ss"
    family = "oracle"

    def length(self, k: int, eps: float) -> int:
        return ss_design(k, units_of(eps)).omega

    def limit(self, k: int, eps: float) -> int:
        return max(k - 1, 0)

    def privatize(self, items: np.ndarray, k: int, eps: float, rng: RandomSource
                  ) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        d = ss_design(k, units_of(eps))
        if k == 1:
            return np.zeros((items.size, 1), dtype=np.int64)
        inside = bernoulli_dyadic(rng, np.full(items.size, d.P_in, dtype=np.uint64))
        t = np.where(inside, d.omega - 1, d.omega)
        N = k - 1
        out = np.empty((items.size, d.omega), dtype=np.int64)
        step = max(1, _CELLS // N)
        for start in range(0, items.size, step):
            sl = slice(start, start + step)
            chosen = _floyd(rng, t[sl], N, d.omega)
            rows, pos = np.nonzero(chosen)
            vals = np.where(pos < items[sl][rows], pos, pos + 1)
            member = np.zeros((chosen.shape[0], k), dtype=bool)
            member[rows, vals] = True
            ins = np.flatnonzero(inside[sl])
            member[ins, items[sl][ins]] = True
            out[sl] = np.nonzero(member)[1].reshape(-1, d.omega)
        return out

    def probability(self, report: Sequence[int], item: int, k: int, eps: float) -> Fraction:
        d = ss_design(k, units_of(eps))
        ys = list(report)
        if len(ys) != d.omega or ys != sorted(set(ys)) or min(ys) < 0 or max(ys) >= k:
            return Fraction(0)
        if k == 1:
            return Fraction(1)
        if item in ys:
            return Fraction(d.P_in, ONE) / math.comb(k - 1, d.omega - 1)
        return Fraction(ONE - d.P_in, ONE) / math.comb(k - 1, d.omega)
