"""Mergeable accumulators of the two report mechanisms (stage-I bins, values).

See ``docs/algorithms.md``. The device half is ``uldp.client.mechanisms.two_stage``; the
methods (``uldp.collector.methods``) build one accumulator per task. Spec:
``docs/algorithms.md`` §4.3 (collector steps 4–6 and 9), §4.5 (variance formula),
§5.3 (per-component arg max), §2.4/[D12] (dropouts: ``k̂ = 0`` fallback, estimate 0),
[D4] (ties: smallest index). The device half is ``uldp.client.mechanisms.two_stage``.

Accumulators hold only sums and counts, so partial accumulators from several collector
processes, windows or batches merge exactly: every sum is an exact integer (the second
moments of Laplace values too, ``uldp.collector.estimators.reductions``), except the
float sums of a scalar randomizer's decoded values. Every report is checked for shape and
range before it counts. An accumulator whose sums the database can compute itself says so
with ``reduction()`` and takes the result with ``absorb`` (``reductions`` module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import numpy as np

from uldp.client.params import GRID_STEPS, Alg1Params
from uldp.collector.estimators.reductions import (
    ColumnSums,
    PieceSums,
    Reduction,
    ValueCounts,
    WindowCounts,
    WindowPieces,
    WindowSums,
    exact_gram,
    shifted_gram,
)
from uldp.collector.mechanisms import OracleDecoder, ReportError, ScalarDecoder
from uldp.collector.mechanisms.base import check_layout, support_sum
from uldp.collector.mechanisms.laplace import LaplaceBinsDecoder

__all__ = ["Accumulator", "BinAccumulator", "ReportError", "ValueAccumulator", "absorb_counts"]


@runtime_checkable
class Accumulator(Protocol):
    """What a phase's reports are summed into (exactly mergeable across processes).

    ``add(reports, slots)``: a batch of reports ``(k, width)`` and the enrolment slots of
    the devices that sent them (used only by accumulators whose layout depends on the
    device, ``needs_slots``)."""

    @property
    def count(self) -> int:
        """Reports added so far."""

    @property
    def needs_slots(self) -> bool:
        """Whether :meth:`add` needs the devices' slots (device-specific layouts)."""

    def add(self, reports: np.ndarray, slots: np.ndarray | None = None) -> None: ...

    def merge(self, other: Any) -> None: ...


def _check_reports(reports: np.ndarray, width: int, limit: int) -> np.ndarray:
    r = check_layout(reports, width)
    if r.size and (int(r.max()) > limit or int(r.min()) < -limit):
        bad = int(r.max()) if int(r.max()) > limit else -int(r.min())
        raise ReportError(f"report entry {bad} is out of range (limit {limit})")
    return r.astype(np.int64, copy=False)


def _check_window(w: WindowSums, width: int, limit: int) -> None:
    """The range and shape checks of :func:`_check_reports`, on a window's sums."""
    if w.count == 0:
        return
    if w.filled[width - 1] != w.count or any(f for f in w.filled[width:]):
        raise ReportError(f"report must have {width} integers")
    if max(abs(w.lo), abs(w.hi)) > limit:
        raise ReportError(f"report entry {max(abs(w.lo), abs(w.hi))} is out of range "
                          f"(limit {limit})")


@dataclass
class BinAccumulator:
    """Stage I: per-component sums ``s_{c,k}`` of noisy bin indicators (§4.3 step 4); with
    a frequency oracle (``decoder``), of the reports' supports (``docs/mechanisms.md``)."""

    params: Sequence[Alg1Params]
    limit: int
    decoder: OracleDecoder | None = None  # None: discrete Laplace one-hot bins
    eps: float = 1.0  # ε_c of the reports
    lengths: Sequence[int] | None = None  # report integers per component (oracles)
    sums: np.ndarray = field(init=False)
    count: int = field(default=0, init=False)
    needs_slots = False

    def __post_init__(self) -> None:
        self.sums = np.zeros(sum(p.bins for p in self.params), dtype=np.int64)

    @property
    def width(self) -> int:
        return int(self.sums.size if self.lengths is None else sum(self.lengths))

    def add(self, reports: np.ndarray, slots: np.ndarray | None = None) -> None:
        r = _check_reports(reports, self.width, self.limit)
        if self.decoder is None or self.lengths is None:
            self.sums += r.sum(axis=0)
        else:
            pos = start = 0
            for p, L in zip(self.params, self.lengths, strict=True):
                self.sums[start:start + p.bins] += support_sum(
                    self.decoder, r[:, pos:pos + L], p.bins, self.eps)
                pos, start = pos + L, start + p.bins
        self.count += r.shape[0]

    def reduction(self) -> Reduction | None:
        """Laplace bins: column sums; GRR bins of one component: value counts."""
        if self.decoder is None or self.lengths is None:
            return ColumnSums(self.width, self.limit)
        if getattr(self.decoder, "name", "") == "grr" and len(self.params) == 1:
            return ValueCounts(self.params[0].bins)
        return None

    def absorb(self, w: WindowSums | WindowCounts) -> None:
        """Add the database's sums of a window of reports (:meth:`reduction`)."""
        if isinstance(w, WindowSums):
            _check_window(w, self.width, self.limit)
            self.sums += np.asarray(w.sums[:self.width], dtype=np.int64)
        else:
            absorb_counts(self.sums, w, self.sums.size)
        self.count += w.count

    def masses(self, c: int) -> np.ndarray:
        """Unbiased estimates of the share of reports in each bin of component ``c``."""
        start = sum(p.bins for p in self.params[:c])
        B = self.params[c].bins
        if self.count == 0:
            return np.zeros(B)
        raw = self.sums[start:start + B] / self.count
        if self.decoder is None:
            return raw
        p, q = self.decoder.pq(B, self.eps)
        return (raw - q) / (p - q)

    def mass_variance(self, c: int) -> np.ndarray:
        """Variance of each entry of :meth:`masses` (noise of the reports' mechanism, at
        the estimated masses clipped to [0, 1])."""
        B = self.params[c].bins
        dec = self.decoder
        if dec is None:
            dec = LaplaceBinsDecoder()
        f = np.clip(self.masses(c), 0.0, 1.0)
        return dec.variance(f, B, self.eps) / max(self.count, 1)

    def merge(self, other: BinAccumulator) -> None:
        if other.width != self.width:
            raise ValueError("cannot merge accumulators of different tasks")
        self.sums += other.sums
        self.count += other.count

    def khat(self) -> tuple[int, ...]:
        """1-based arg max per component (smallest index on ties); 0 if no report came."""
        if self.count == 0:
            return tuple(0 for _ in self.params)
        out, start = [], 0
        for p in self.params:
            out.append(int(np.argmax(self.sums[start: start + p.bins])) + 1)
            start += p.bins
        return tuple(out)

    def state(self) -> dict[str, Any]:
        return {"sums": self.sums.tolist(), "count": self.count}

    def load(self, state: dict[str, Any]) -> None:
        self.sums = np.asarray(state["sums"], dtype=np.int64)
        self.count = int(state["count"])


@dataclass
class ValueAccumulator:
    """Stage II / SSL: sums of grid-encoded noisy values, decoded at the end (§4.3 step 9).

    ``intervals[c] = (lo_c, hi_c)`` is the clamp interval component ``c`` was encoded on;
    a report integer ``z`` stands for ``lo + (hi - lo) z / GRID_STEPS``.
    """

    intervals: Sequence[tuple[float, float]]
    limit: int
    #: the scalar randomizer's decoder (None: discrete Laplace, whose report integers are
    #: their own unbiased grid values and sum exactly in int64)
    decoder: ScalarDecoder | None = None
    eps: float = 1.0  # ε_c the reports were made at (for the decoder)
    count: int = field(default=0, init=False)
    #: one-component reports of a scalar randomizer: per affine piece of its decoder,
    #: the exact [count, Σz, Σz²] of the report integers in it (the float sums are
    #: computed from them once, exactly rounded: the same bits however reports arrive)
    moments: list[list[int]] | None = field(default=None, init=False)
    needs_slots = False

    def __post_init__(self) -> None:
        k = len(self.intervals)
        self._sums = np.zeros(k, dtype=np.int64 if self.decoder is None else np.float64)
        # Σ (ĝ - G/2)(ĝ - G/2)^T — Laplace: exact integers (Python ints); a decoder's
        # values: float64 (from the moments when there are)
        self._sq = (np.zeros((k, k), dtype=object) if self.decoder is None
                    else np.zeros((k, k)))
        self._pieces = (self.decoder.pieces(self.eps)
                        if self.decoder is not None and k == 1
                        and hasattr(self.decoder, "pieces") else None)
        if self._pieces is not None:
            self.moments = [[0, 0, 0] for _ in self._pieces]
        self._stale = False

    @property
    def sums(self) -> np.ndarray:
        """Σ ĝ per component (int64 for Laplace, float64 for a decoder's values)."""
        self._refresh()
        return self._sums

    @property
    def sq(self) -> np.ndarray:
        """Σ (ĝ − G/2)(ĝ − G/2)ᵀ."""
        self._refresh()
        return self._sq

    def _refresh(self) -> None:
        """The float sums from the exact moments: ``Σ ĝ`` and ``Σ (ĝ − G/2)²`` as exact
        fractions of the decoder's own constants, each rounded once."""
        if self.moments is None or not self._stale:
            return
        assert self._pieces is not None
        total, square = Fraction(0), Fraction(0)
        half = GRID_STEPS // 2
        for (_, _, scale, offset, div), (n, s1, s2) in zip(self._pieces, self.moments,
                                                           strict=True):
            total += (scale * s1 - offset * n) / div
            c = offset + half * div  # ĝ − G/2 = (scale·z − c)/div
            square += (scale * scale * s2 - 2 * scale * c * s1 + c * c * n) / (div * div)
        self._sums = np.array([float(total)])
        self._sq = np.array([[float(square)]])
        self._stale = False

    def add(self, reports: np.ndarray, slots: np.ndarray | None = None) -> None:
        r = _check_reports(reports, len(self.intervals), self.limit)
        if self.moments is not None:
            self._add_moments(r[:, 0])
            self.count += r.shape[0]
            return
        g = r if self.decoder is None else self.decoder.decode(r, self.eps)
        self._sums += g.sum(axis=0)
        c = g - GRID_STEPS // 2
        if self.decoder is None:
            self._sq += exact_gram(c)
        else:
            self._sq += c.T.astype(np.float64) @ c.astype(np.float64)
        self.count += r.shape[0]

    def _add_moments(self, z: np.ndarray) -> None:
        assert self._pieces is not None and self.moments is not None
        inside = 0
        for (lo, hi, *_), m in zip(self._pieces, self.moments, strict=True):
            sel = z[(z >= lo) & (z <= hi)]
            inside += sel.size
            m[0] += int(sel.size)
            m[1] += int(sel.sum())
            m[2] += int(exact_gram(sel.reshape(-1, 1))[0, 0])
        if inside != z.size:
            raise ReportError(f"{z.size - inside} report integers are outside the "
                              f"{self.decoder.name if self.decoder else ''} range")
        self._stale = True

    def reduction(self) -> Reduction | None:
        """Laplace values: column sums and sums of products (the Gram matrix); one
        component of a scalar randomizer: per-piece moments."""
        if self.decoder is None:
            return ColumnSums(len(self.intervals), self.limit, gram=True)
        if self._pieces is not None:
            return PieceSums(tuple((lo, hi) for lo, hi, *_ in self._pieces))
        return None

    def absorb(self, w: WindowSums | WindowCounts | WindowPieces) -> None:
        """Add the database's sums of a window of reports (:meth:`reduction`)."""
        k = len(self.intervals)
        if isinstance(w, WindowPieces) and self.moments is not None:
            if w.malformed:
                raise ReportError("report must have 1 integer")
            if w.outside:
                raise ReportError(f"{w.outside} report integers are outside the range of "
                                  "their randomizer")
            for m, got in zip(self.moments, w.moments, strict=True):
                for i in range(3):
                    m[i] += int(got[i])
            self.count += w.count
            self._stale = True
            return
        if not isinstance(w, WindowSums) or w.gram is None or self.decoder is not None:
            raise TypeError("a value accumulator absorbs column sums with their Gram matrix")
        _check_window(w, k, self.limit)
        if w.count == 0:
            return
        self._sums += np.asarray(w.sums[:k], dtype=np.int64)
        self._sq += shifted_gram(w.count, w.sums, w.gram, GRID_STEPS // 2, k)
        self.count += w.count

    def _sq64(self) -> np.ndarray:
        """The second moments as float64 (the exact integers rounded once)."""
        return np.asarray(self.sq, dtype=np.float64)

    def mean_t(self) -> np.ndarray:
        """Mean over the reports of the decoded ``t̂ = 2ĝ/G − 1`` per component."""
        if self.count == 0:
            return np.zeros(len(self.intervals))
        return 2.0 * self.sums / (self.count * GRID_STEPS) - 1.0

    def mean_square_t(self) -> np.ndarray:
        """Mean over the reports of ``t̂² = (2ĝ/G − 1)²`` per component (the decoded values
        on ``[−1, 1]``; 0 without reports)."""
        if self.count == 0:
            return np.zeros(len(self.intervals))
        return 4.0 * np.diag(self._sq64()) / (self.count * GRID_STEPS**2)

    def merge(self, other: ValueAccumulator) -> None:
        if len(other.intervals) != len(self.intervals):
            raise ValueError("cannot merge accumulators of different tasks")
        if self.moments is not None and other.moments is not None:
            for m, o in zip(self.moments, other.moments, strict=True):
                for i in range(3):
                    m[i] += o[i]
            self._stale = True
        else:
            self._sums += other.sums
            self._sq += other.sq
        self.count += other.count

    @property
    def _lo_w(self) -> tuple[np.ndarray, np.ndarray]:
        lo = np.array([a for a, _ in self.intervals])
        w = np.array([b - a for a, b in self.intervals])
        return lo, w

    def means(self) -> np.ndarray:
        """Decoded component estimates; 0 for a component with no report ([D12])."""
        lo, w = self._lo_w
        if self.count == 0:
            return np.zeros(len(self.intervals))
        return lo + w * (self.sums / self.count) / GRID_STEPS

    def covariance(self) -> np.ndarray:
        """Estimated covariance of ``means()``: the report covariance over ``count``.

        The reports' empirical covariance contains both the known noise variance and the
        sampling variance of the clamped user statistics (§4.5). With no reports the
        variance is that of a value known only to lie in its interval, ``w²/4``.
        """
        _, w = self._lo_w
        if self.count < 2:
            return np.diag((w / 2) ** 2)
        mean_c = self.sums / self.count - GRID_STEPS // 2
        S = (self._sq64() - self.count * np.outer(mean_c, mean_c)) / (self.count - 1)
        return np.outer(w, w) * S / GRID_STEPS**2 / self.count

    def state(self) -> dict[str, Any]:
        out = {"sums": self.sums.tolist(), "sq": self.sq.tolist(), "count": self.count}
        if self.moments is not None:
            out["moments"] = [list(m) for m in self.moments]
        return out

    def load(self, state: dict[str, Any]) -> None:
        exact = self.decoder is None
        self._sums = np.asarray(state["sums"], dtype=np.int64 if exact else np.float64)
        self._sq = np.asarray(state["sq"], dtype=object if exact else np.float64)
        if self.moments is not None and "moments" in state:
            self.moments = [[int(x) for x in m] for m in state["moments"]]
            self._stale = True
        self.count = int(state["count"])


def absorb_counts(target: np.ndarray, w: WindowCounts, categories: int) -> None:
    """Scatter-add a window's value counts into ``target`` (the values must be categories)."""
    if w.malformed:
        raise ReportError("report must have 1 integer")
    if not w.values:
        return
    vals = np.asarray(w.values, dtype=np.int64)
    if vals.min() < 0 or vals.max() >= categories:
        bad = int(vals.max()) if vals.max() >= categories else int(vals.min())
        raise ReportError(f"value {bad} is out of range [0, {categories - 1}]")
    np.add.at(target, vals, np.asarray(w.counts, dtype=np.int64))
