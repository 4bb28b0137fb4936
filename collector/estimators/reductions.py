"""What the database computes for an accumulator when a phase closes, and exact Gram sums.

See ``docs/architecture.md`` ("Closing a phase"). Closing a phase reduces its stored
reports window by window into per-group accumulators (``uldp.collector.service.reduce``).
An accumulator whose statistic is a plain integer sum says so with ``reduction()``, and
the database computes it over a window itself, from the reports' typed columns
(``uldp.collector.storage.records``); the accumulator then ``absorb``s the result:

* :class:`ColumnSums` — the count, the sum of every report column and, with ``gram``, the
  sum of every product ``v_i v_j`` (``i ≤ j``): Laplace bins and Laplace values;
* :class:`ValueCounts` — how many one-integer reports carry each value: GRR supports;
* :class:`PieceSums` — per affine piece of a scalar randomizer's decoder, the count, sum
  and sum of squares of the one-integer reports in it: PM, HM and Duchi values.

Every other accumulator gets the window's reports as an ``(n, width)`` array (``add``).
Either way every sum is exact integer arithmetic, so the result does not depend on how
the reports are split into windows, on their order, or on which process or engine
reduced them; the float statistics are computed once from the exact sums
(:func:`exact_gram`, :func:`shifted_gram`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ColumnSums", "PieceSums", "Reduction", "ValueCounts", "WindowCounts",
           "WindowPieces", "WindowSums", "exact_gram", "shifted_gram"]


@dataclass(frozen=True)
class ColumnSums:
    """Count, column sums and (``gram``) sums of products of reports of ``width``
    integers; ``limit`` bounds every integer (the accumulator's range check)."""

    width: int
    limit: int
    gram: bool = False


@dataclass(frozen=True)
class ValueCounts:
    """How many one-integer reports carry each value in ``[0, categories)``."""

    categories: int


@dataclass(frozen=True)
class PieceSums:
    """Per integer range ``pieces[p] = (lo, hi)``: the count, sum and sum of squares of
    the one-integer reports in it."""

    pieces: tuple[tuple[int, int], ...]


Reduction = ColumnSums | ValueCounts | PieceSums


@dataclass
class WindowSums:
    """A :class:`ColumnSums` over one window of one group's reports (exact integers).

    ``filled[i]``: reports with a value in column ``i`` (a report of ``width`` integers
    fills exactly the first ``width``); ``gram[i][j]`` for ``i ≤ j`` (None without)."""

    count: int
    sums: list[int]
    filled: list[int]
    lo: int
    hi: int
    gram: list[list[int]] | None = None


@dataclass
class WindowCounts:
    """A :class:`ValueCounts` over one window of one group's reports (``malformed``: those
    of them that are not exactly one integer)."""

    count: int
    values: list[int]
    counts: list[int]
    malformed: int = 0


@dataclass
class WindowPieces:
    """A :class:`PieceSums` over one window of one group's reports: ``moments[p] = [n, Σz,
    Σz²]``; ``outside``: reports in no piece; ``malformed``: not exactly one integer."""

    count: int
    moments: list[list[int]]
    outside: int = 0
    malformed: int = 0


#: the largest |entry| whose squares sum exactly in float64 over 2^k rows: 2^(52-k)/2 …
_F64_EXACT = 1 << 52


def exact_gram(c: np.ndarray) -> np.ndarray:
    """``cᵀc`` of an integer matrix, exactly (object array of Python ints).

    In float64 (BLAS) over row chunks small enough that every partial sum stays below
    2^52 (so exact in any summation order), then in int64, and only for entries beyond
    2^31 in Python integers."""
    c = np.asarray(c, dtype=np.int64)
    k = c.shape[1]
    out = np.zeros((k, k), dtype=object)
    if c.size == 0:
        return out
    m = int(np.abs(c).max())
    if m == 0:
        return out
    if m * m < _F64_EXACT:
        step = max(1, _F64_EXACT // (m * m))
        for lo in range(0, c.shape[0], step):
            f = c[lo:lo + step].astype(np.float64)
            out += (f.T @ f).astype(np.int64).astype(object)
        return out
    if m < 1 << 31:
        step = max(1, (1 << 62) // (m * m))
        for lo in range(0, c.shape[0], step):
            b = c[lo:lo + step]
            out += (b.T @ b).astype(object)
        return out
    o = c.astype(object)
    return np.asarray(o.T @ o, dtype=object)


def shifted_gram(n: int, sums: list[int], gram: list[list[int]], shift: int,
                 width: int) -> np.ndarray:
    """``Σ (v − shift)(v − shift)ᵀ`` from the count, column sums and ``Σ v_i v_j``
    (upper triangle) of ``n`` reports — exact (object array)."""
    out = np.zeros((width, width), dtype=object)
    for i in range(width):
        for j in range(i, width):
            v = (int(gram[i][j]) - shift * int(sums[i]) - shift * int(sums[j])
                 + n * shift * shift)
            out[i, j] = out[j, i] = v
    return out
