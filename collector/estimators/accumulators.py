"""Mergeable accumulators of the two report mechanisms (stage-I bins, values).

See ``docs/algorithms.md``. The device half is ``uldp.client.mechanisms.two_stage``; the
methods (``uldp.collector.methods``) build one accumulator per task. Spec:
``docs/algorithms.md`` §4.3 (collector steps 4–6 and 9), §4.5 (variance formula),
§5.3 (per-component arg max), §2.4/[D12] (dropouts: ``k̂ = 0`` fallback, estimate 0),
[D4] (ties: smallest index). The device half is ``uldp.client.mechanisms.two_stage``.

Accumulators hold only sums and counts, so partial accumulators from several collector
processes or batches merge exactly (integer sums; second moments in float64 for the
confidence interval only). Every report is checked for shape and range before it counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from uldp.client.params import GRID_STEPS, Alg1Params
from uldp.collector.mechanisms import OracleDecoder, ReportError, ScalarDecoder
from uldp.collector.mechanisms.laplace import LaplaceBinsDecoder

__all__ = ["Accumulator", "BinAccumulator", "ReportError", "ValueAccumulator"]


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
    r = np.asarray(reports)
    if r.ndim == 1:
        r = r[None, :]
    if r.ndim != 2 or r.shape[1] != width:
        raise ReportError(f"report must have {width} integers, got shape {tuple(r.shape)}")
    if not np.issubdtype(r.dtype, np.integer):
        raise ReportError(f"report entries must be integers, got dtype {r.dtype}")
    r = r.astype(np.int64, copy=False)
    if r.size and np.abs(r).max() > limit:
        raise ReportError(f"report entry {int(np.abs(r).max())} is out of range (limit {limit})")
    return r


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
                sup = self.decoder.support(r[:, pos:pos + L], p.bins, self.eps)
                self.sums[start:start + p.bins] += sup.sum(axis=0)
                pos, start = pos + L, start + p.bins
        self.count += r.shape[0]

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
    sums: np.ndarray = field(init=False)
    sq: np.ndarray = field(init=False)  # Σ (ĝ - G/2)(ĝ - G/2)^T, float64
    count: int = field(default=0, init=False)
    needs_slots = False

    def __post_init__(self) -> None:
        k = len(self.intervals)
        self.sums = np.zeros(k, dtype=np.int64 if self.decoder is None else np.float64)
        self.sq = np.zeros((k, k))

    def add(self, reports: np.ndarray, slots: np.ndarray | None = None) -> None:
        r = _check_reports(reports, len(self.intervals), self.limit)
        g = r if self.decoder is None else self.decoder.decode(r, self.eps)
        self.sums += g.sum(axis=0)
        c = g - GRID_STEPS // 2
        self.sq += c.T.astype(np.float64) @ c.astype(np.float64)
        self.count += r.shape[0]

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
        return 4.0 * np.diag(self.sq) / (self.count * GRID_STEPS**2)

    def merge(self, other: ValueAccumulator) -> None:
        if len(other.intervals) != len(self.intervals):
            raise ValueError("cannot merge accumulators of different tasks")
        self.sums += other.sums
        self.sq += other.sq
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
        S = (self.sq - self.count * np.outer(mean_c, mean_c)) / (self.count - 1)
        return np.outer(w, w) * S / GRID_STEPS**2 / self.count

    def state(self) -> dict[str, Any]:
        return {"sums": self.sums.tolist(), "sq": self.sq.tolist(), "count": self.count}

    def load(self, state: dict[str, Any]) -> None:
        self.sums = np.asarray(state["sums"], dtype=np.int64)
        self.sq = np.asarray(state["sq"], dtype=np.float64)
        self.count = int(state["count"])
