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


class ReportError(ValueError):
    """A report does not fit its task (shape, dtype or range)."""


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
    """Stage I: per-component sums ``s_{c,k}`` of noisy bin indicators (§4.3 step 4)."""

    params: Sequence[Alg1Params]
    limit: int
    sums: np.ndarray = field(init=False)
    count: int = field(default=0, init=False)
    needs_slots = False

    def __post_init__(self) -> None:
        self.sums = np.zeros(sum(p.bins for p in self.params), dtype=np.int64)

    @property
    def width(self) -> int:
        return int(self.sums.size)

    def add(self, reports: np.ndarray, slots: np.ndarray | None = None) -> None:
        r = _check_reports(reports, self.width, self.limit)
        self.sums += r.sum(axis=0)
        self.count += r.shape[0]

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
    sums: np.ndarray = field(init=False)
    sq: np.ndarray = field(init=False)  # Σ (z - G/2)(z - G/2)^T, float64
    count: int = field(default=0, init=False)
    needs_slots = False

    def __post_init__(self) -> None:
        k = len(self.intervals)
        self.sums = np.zeros(k, dtype=np.int64)
        self.sq = np.zeros((k, k))

    def add(self, reports: np.ndarray, slots: np.ndarray | None = None) -> None:
        r = _check_reports(reports, len(self.intervals), self.limit)
        self.sums += r.sum(axis=0)
        c = r - GRID_STEPS // 2
        self.sq += c.T.astype(np.float64) @ c.astype(np.float64)
        self.count += r.shape[0]

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
