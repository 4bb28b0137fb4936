"""The validity rule of a task's reports: which integer arrays a device could have sent.

See ``docs/mechanisms.md`` ("Valid reports") and ``docs/device-protocol.md`` §14.1. A
report is the concatenation of its method's *parts*, each one decoder's report (the
decoders' rules, ``bounds`` / ``rule``, are in their own modules):

* stage I of ``two-stage``: per served component ``c``, the task oracle's report over
  ``B_c`` bins at ``ε_c``;
* ``oracle``: per sampled record, the oracle's report over the kind's ``A`` categories;
* values (stage II of ``two-stage``, ``ssl`` — ``mean-by`` too —, ``baseline-b``): per
  served component one integer of the task's scalar randomizer at ``ε_c``;
* ``baseline-a``: noisy grid values (discrete Laplace) of its virtual groups, each within
  the limit of the smallest virtual ε (the accumulators' one limit).

:func:`report_rule` gives the rule of a task; the collector applies it twice: at ingest,
where a report that breaks it is refused with INVALID_ARGUMENT and changes nothing
(``uldp.collector.service.ingest``, and the shuffled batches, where such a report is
dropped and counted), and at close, where a report stored before the check existed is
skipped and counted instead of failing the query (``uldp.collector.service.reduce``). The
rule is exactly the accumulators' (``tests/service/test_report_rules.py`` checks both on
hostile reports of every method and mechanism). A method it does not know gets None: the
service then asks the method's own accumulator (:class:`ProbeRule`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from uldp.client.kinds import KINDS
from uldp.client.mechanisms import ORACLES
from uldp.client.taskspec import TaskSpec
from uldp.collector.mechanisms import ORACLE_DECODERS, SCALAR_DECODERS, ReportError
from uldp.collector.mechanisms.base import Bounds, OracleDecoder, ScalarDecoder

__all__ = ["Part", "ProbeRule", "ReportRule", "Rule", "report_rule"]


class Rule(Protocol):
    """Which reports of a task are valid (:class:`ReportRule`, :class:`ProbeRule`)."""

    def invalid(self, reports: np.ndarray, slots: np.ndarray | None = None) -> np.ndarray:
        """Per report of ``(n, width)`` integers (and the devices' slots): whether it
        breaks the rule."""

    def check(self, values: Sequence[int], slot: int = 0) -> None:
        """Refuse one report (``ReportError`` naming the rule it breaks)."""


@dataclass(frozen=True)
class Part:
    """``count`` consecutive reports of one decoder from report integer ``start``, each
    ``length`` integers (a scalar randomizer's: 1; ``count`` None: to the report's end)."""

    start: int
    length: int
    count: int | None
    k: int
    eps: float
    oracle: OracleDecoder | None = None
    scalar: ScalarDecoder | None = None

    def stop(self, width: int) -> int:
        return width if self.count is None else self.start + self.length * self.count

    def invalid(self, r: np.ndarray) -> np.ndarray:
        n = r.shape[0]
        block = r[:, self.start:self.stop(r.shape[1])]
        if self.oracle is not None:
            items = block.reshape(-1, self.length)
            bad = self.oracle.invalid(items, self.k, self.eps)
        else:
            assert self.scalar is not None
            bad = self.scalar.invalid(block, self.eps)
        return np.asarray(bad.reshape(n, -1).any(axis=1), dtype=bool)

    @cached_property
    def bounds(self) -> Bounds:
        """The decoder's rule of one of the part's reports."""
        if self.oracle is not None:
            return self.oracle.bounds(self.k, self.eps)
        assert self.scalar is not None
        return self.scalar.bounds(self.eps)

    def breaks(self, values: list[int]) -> bool:
        """Whether one report (Python integers) breaks the part's rule: the rule of
        :meth:`invalid`, without numpy (ingest checks one report at a time)."""
        block = values[self.start:self.stop(len(values))]
        b = self.bounds
        if self.scalar is not None or (len(b.lo) == 1 and not b.increasing):
            return b.breaks(block)  # every entry the same range: the block at once
        L = self.length
        return any(b.breaks(block[i:i + L]) for i in range(0, len(block), L))

    def rule(self) -> str:
        if self.oracle is not None:
            return self.oracle.rule(self.k, self.eps)
        assert self.scalar is not None
        return self.scalar.rule(self.eps)

    def where(self, width: int) -> str:
        stop = self.stop(width)
        if self.oracle is not None and self.count not in (None, 1):
            return (f"integers {self.start}..{stop - 1} ({self.count} reports of "
                    f"{self.length})")
        return f"integers {self.start}..{stop - 1}" if stop - self.start > 1 \
            else f"integer {self.start}"


#: integers of a report checked in Python (longer ones: in numpy)
_SHORT = 256


@dataclass(frozen=True)
class ReportRule:
    """The rule of a task's reports: its parts (module docstring). ``width``: integers
    per report (None when it depends on the device: baseline A)."""

    width: int | None
    parts: tuple[Part, ...]

    def invalid(self, reports: np.ndarray, slots: np.ndarray | None = None) -> np.ndarray:
        r = np.asarray(reports)
        if r.ndim == 1:
            r = r[None, :]
        bad = np.zeros(r.shape[0], dtype=bool)
        if self.width is not None and r.shape[1] != self.width:
            return ~bad
        for p in self.parts:
            bad |= p.invalid(r)
        return bad

    def check(self, values: Sequence[int], slot: int = 0) -> None:
        vals = [int(v) for v in values]
        if self.width is not None and len(vals) != self.width:
            raise ReportError(f"report must have {self.width} integers, got {len(vals)}")
        # a short report in Python (a few µs), a long one (OUE's k bits) in numpy
        r = np.asarray(vals, dtype=np.int64).reshape(1, -1) if len(vals) > _SHORT else None
        for p in self.parts:
            if p.breaks(vals) if r is None else bool(p.invalid(r)[0]):
                got = vals[p.start:p.stop(len(vals))]
                shown = ", ".join(map(str, got[:8])) + (", …" if len(got) > 8 else "")
                raise ReportError(f"report {p.where(len(vals))} = [{shown}] break the "
                                  f"rule: {p.rule()}")


@dataclass
class ProbeRule:
    """The rule of a method :func:`report_rule` does not know: a report is valid when
    the method's own accumulator (``empty``, never changed) takes it."""

    empty: Any

    def _takes(self, r: np.ndarray, slots: np.ndarray | None) -> bool:
        try:
            copy.deepcopy(self.empty).add(r, slots)
        except ReportError:
            return False
        return True

    def invalid(self, reports: np.ndarray, slots: np.ndarray | None = None) -> np.ndarray:
        r = np.asarray(reports)
        if r.ndim == 1:
            r = r[None, :]
        bad = np.zeros(r.shape[0], dtype=bool)
        _bisect(r, slots, 0, r.shape[0], self._takes, bad)
        return bad

    def check(self, values: Sequence[int], slot: int = 0) -> None:
        r = np.asarray(values, dtype=np.int64).reshape(1, -1)
        try:
            copy.deepcopy(self.empty).add(r, np.array([slot], dtype=np.int64))
        except ReportError as exc:
            raise ReportError(f"the report breaks its method's rule: {exc}") from None


def _bisect(r: np.ndarray, slots: np.ndarray | None, lo: int, hi: int,
            takes: Callable[[np.ndarray, np.ndarray | None], bool], bad: np.ndarray) -> None:
    """Mark in ``bad`` the rows of ``r[lo:hi]`` that ``takes`` refuses (halving the rows
    a refusal names: few calls when bad rows are rare)."""
    if hi <= lo or takes(r[lo:hi], None if slots is None else slots[lo:hi]):
        return
    if hi - lo == 1:
        bad[lo] = True
        return
    mid = (lo + hi) // 2
    _bisect(r, slots, lo, mid, takes, bad)
    _bisect(r, slots, mid, hi, takes, bad)


# ---- the parts of each method's reports -------------------------------------------------
def _oracle_parts(task: TaskSpec, ks: Sequence[int], start: int = 0) -> list[Part]:
    """One oracle report over ``ks[i]`` categories after another (equal neighbours
    merged into one part of ``count`` reports)."""
    oracle, decoder = ORACLES[task.mechanism], ORACLE_DECODERS[task.mechanism]
    parts: list[Part] = []
    for k in ks:
        L = oracle.length(int(k), task.eps_c)
        last = parts[-1] if parts else None
        if last is not None and last.k == k and last.length == L and last.count is not None:
            parts[-1] = Part(last.start, L, last.count + 1, int(k), task.eps_c, decoder)
        else:
            parts.append(Part(start, L, 1, int(k), task.eps_c, decoder))
        start += L
    return parts


def _value_parts(task: TaskSpec) -> list[Part]:
    return [Part(0, 1, len(task.components), 0, task.eps_c,
                 scalar=SCALAR_DECODERS[task.mechanism])]


def _two_stage(task: TaskSpec) -> list[Part]:
    if task.stage == 1:
        return _oracle_parts(task, [int(B) for _, _, B in task.bins])
    return _value_parts(task)


def _oracle(task: TaskSpec) -> list[Part]:
    categories = KINDS[task.kind].categories
    assert categories is not None
    return _oracle_parts(task, [categories(task)] * task.records)


def _baseline_a(task: TaskSpec) -> list[Part]:
    # every integer within the limit of the smallest virtual ε (values_limit): the limit
    # of discrete Laplace's grid values at that ε
    return [Part(0, 1, None, 0, min(task.virtual_eps), scalar=SCALAR_DECODERS["laplace"])]


#: the parts of a task's reports per device method (``uldp.client.methods``)
LAYOUTS: dict[str, Callable[[TaskSpec], list[Part]]] = {
    "two-stage": _two_stage, "ssl": _value_parts, "baseline-b": _value_parts,
    "oracle": _oracle, "baseline-a": _baseline_a}


def report_rule(task: TaskSpec) -> ReportRule | None:
    """The rule of ``task``'s reports (None for a method without a layout here)."""
    layout = LAYOUTS.get(task.method)
    if layout is None:
        return None
    parts = tuple(layout(task))
    open_ended = any(p.count is None for p in parts)  # to the report's end: baseline A
    width = None if open_ended else max((p.stop(0) for p in parts), default=0)
    return ReportRule(width, parts)
