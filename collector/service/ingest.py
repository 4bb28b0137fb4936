"""Report ingest: the checks a report (or a decline) passes before the group-commit
writer stores it.

See ``docs/architecture.md`` ("Service") and the numbered order of the checks in
``proto/uldp/v1/device.proto``. Spec: [D23] (one message per device and query).
The writer re-checks under the phase-row lock that the phase is open and enforces one
report per (query, device). An identical re-send is an OK duplicate even after its phase
closed (the stored report is judged before the phase refusal).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from uldp.collector.mechanisms import ReportError
from uldp.collector.service.catalogue import QueryCatalogue, QueryRuntime
from uldp.collector.service.errors import ServiceError, echo
from uldp.collector.service.phases import PhaseView
from uldp.collector.service.tasks import TaskInfo, TaskServer
from uldp.collector.storage.db import Database, PendingReport, ReportOutcome, judge_stored
from uldp.collector.storage.records import value_bytes
from uldp.collector.storage.writer import GroupCommitWriter, WriterUnavailable

__all__ = ["SIMULATED_REFUSED", "ReportIngest", "check_rule", "keep_valid", "not_open"]

#: a decline's optional reason: a refusal code of the device (protocol §14.1)
_REASON = re.compile(r"[a-z0-9_-]{0,32}")

#: struct format of a stored value of 1, 2, 4 or 8 bytes
_FORMATS = {1: "b", 2: "h", 4: "i", 8: "q"}

SIMULATED_REFUSED = ("report is from a simulation (seeded noise); this query does not "
                     "accept simulated reports")


def not_open(query_id: str, phase: int, state: str) -> str:
    """The FAILED_PRECONDITION message of a report for a phase that is not open."""
    return f"phase {phase} of query {query_id} is not open (state: {state})"


class ReportIngest:
    """SubmitReport / SubmitReportBatch and DeclineTask / DeclineTaskBatch: validate,
    then commit through the writer."""

    def __init__(self, db: Database, writer: GroupCommitWriter, catalogue: QueryCatalogue,
                 phases: PhaseView, tasks: TaskServer, *, allow_simulated: bool) -> None:
        self.db, self.writer, self.catalogue = db, writer, catalogue
        self.phases, self.tasks = phases, tasks
        self.allow_simulated = allow_simulated

    def validate(self, device_id: str, query_id: str, phase: int, values: Sequence[int],
                 digest: str, simulated: bool = False) -> PendingReport | ReportOutcome:
        """The report to commit, or the final answer (OK, ``duplicate``) when the
        identical report is already stored and its phase is no longer open; raises
        :class:`ServiceError` for a refusal (checks in the documented order)."""
        rt = self._runtime(query_id)
        if rt.shuffle is not None:
            raise ServiceError("FAILED_PRECONDITION", f"query {query_id} is in shuffle mode: "
                               "its reports are sealed and go through the shuffler")
        if simulated and not (self.allow_simulated or rt.allow_simulated):
            raise ServiceError("FAILED_PRECONDITION", SIMULATED_REFUSED)
        a, ph = self._assigned(device_id, query_id, phase)
        info = self.tasks.task_info(rt, a)
        vals = list(values)
        _check_values(vals, info.length, info.limit, a)
        check_rule(info, vals, a["slot"])  # step 8: the mechanism's rule (device.proto)
        if digest != info.digest:
            raise ServiceError("FAILED_PRECONDITION",
                               "report was computed for a different task (task_digest "
                               f"{digest[:16] or '<empty>'}… != {info.digest[:16]}…); "
                               "fetch the current task")
        vb = value_bytes(info.limit)  # the narrowest width the task's public limit needs
        item = PendingReport(query_id, phase, device_id, a["grp"], a["stage"], a["slot"],
                             struct.pack(f"<{len(vals)}{_FORMATS[vb]}", *vals), vb)
        return self._open_or_stored(item, ph["state"])

    def validate_decline(self, device_id: str, query_id: str, phase: int, digest: str,
                         reason: str) -> PendingReport | ReportOutcome:
        """The decline to commit (a :class:`PendingReport` with an empty payload), or the
        final answer (OK, ``duplicate``) when it is stored already and its phase is no
        longer open; raises :class:`ServiceError` for a refusal (the checks of a decline
        in device.proto, in order)."""
        if not _REASON.fullmatch(reason):
            raise ServiceError("INVALID_ARGUMENT", "reason must be at most 32 characters of "
                               f"[a-z0-9_-], got {echo(reason)}")
        rt = self._runtime(query_id)
        a, ph = self._assigned(device_id, query_id, phase)
        info = self.tasks.task_info(rt, a)
        if digest != info.digest:
            raise ServiceError("FAILED_PRECONDITION",
                               "decline names a different task (task_digest "
                               f"{echo(digest[:16]) if digest else '<empty>'} != "
                               f"{info.digest[:16]}…); fetch the current task")
        item = PendingReport(query_id, phase, device_id, a["grp"], a["stage"], a["slot"], b"")
        return self._open_or_stored(item, ph["state"])

    def _runtime(self, query_id: str) -> QueryRuntime:
        rt = self.catalogue.runtime(query_id)
        if rt is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        return rt

    def _assigned(self, device_id: str, query_id: str, phase: int
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(assignment, phase row) of a device answering ``phase`` of a query: refused
        unless the device is assigned to that phase and it has opened."""
        a = self.tasks.assignment(query_id, device_id)
        if a is None:
            raise ServiceError("PERMISSION_DENIED",
                               f"device {device_id} is not assigned to query {query_id}")
        if phase != a["phase"]:
            raise ServiceError("FAILED_PRECONDITION",
                               f"device {device_id} is assigned to phase {a['phase']} of query "
                               f"{query_id}, not phase {phase}")
        ph = self.phases.rows(query_id).get(phase)
        if ph is None or ph["state"] != "open":  # the cache may be behind: look again
            ph = self.phases.rows(query_id, fresh=True).get(phase)
        if ph is None:
            raise ServiceError("FAILED_PRECONDITION", f"query {query_id} has no phase {phase}")
        if not ph["opened_at_ms"]:  # never opened: nothing of it can be stored
            raise ServiceError("FAILED_PRECONDITION", not_open(query_id, phase, ph["state"]))
        return a, ph

    def _open_or_stored(self, item: PendingReport, state: str
                        ) -> PendingReport | ReportOutcome:
        """``item`` to commit while its phase is open (the writer judges a stored row
        under the phase-row lock); otherwise the answer the stored row gives (a committed
        row never changes, so this read is authoritative), else the phase refusal."""
        if state == "open":
            return item
        out = judge_stored(item, self.db.stored_report(item.query_id, item.device_id))
        if out is None:
            raise ServiceError("FAILED_PRECONDITION",
                               not_open(item.query_id, item.phase, state))
        if out.code != "OK":
            raise ServiceError(out.code, out.message)
        return out

    def store(self, items: Sequence[PendingReport]) -> list[ReportOutcome]:
        try:
            return self.writer.store_reports(items)
        except WriterUnavailable as exc:
            raise ServiceError("UNAVAILABLE", str(exc)) from None

    def store_declines(self, items: Sequence[PendingReport]) -> list[ReportOutcome]:
        try:
            return self.writer.store_declines(items)
        except WriterUnavailable as exc:
            raise ServiceError("UNAVAILABLE", str(exc)) from None


def check_rule(info: TaskInfo, vals: Sequence[int], slot: int = 0) -> None:
    """Refuse (INVALID_ARGUMENT) a report its task's mechanism could not have produced:
    the rule the phase's close applies (``uldp.collector.mechanisms.validity``)."""
    if info.rule is None:
        return
    try:
        info.rule.check(vals, slot)
    except ReportError as exc:
        raise ServiceError("INVALID_ARGUMENT", f"not a report of this task: {exc}") from None


def keep_valid(info: TaskInfo, opened: Sequence[bytes | None]) -> list[bytes | None]:
    """The opened reports of a shuffled batch (int64 little-endian payloads; None: did
    not open) with the ones that break the task's rule turned into None too: dropped and
    counted with the others, never failing the batch."""
    out = list(opened)
    rows = [i for i, p in enumerate(out) if p is not None]
    if info.rule is None or not rows:
        return out
    r = np.frombuffer(b"".join(out[i] or b"" for i in rows), "<i8").reshape(len(rows), -1)
    for j in np.flatnonzero(info.rule.invalid(r)):
        out[rows[int(j)]] = None
    return out


def _check_values(vals: list[int], length: int, limit: int, a: dict[str, object]) -> None:
    if len(vals) != length:
        raise ServiceError("INVALID_ARGUMENT",
                           f"report has {len(vals)} values; the task of group {a['grp']} "
                           f"stage {a['stage']} needs exactly {length}")
    if vals and (max(vals) > limit or min(vals) < -limit):
        i = next(k for k, v in enumerate(vals) if abs(v) > limit)
        raise ServiceError("INVALID_ARGUMENT",
                           f"report value #{i} = {vals[i]} is outside [-{limit}, {limit}]")
