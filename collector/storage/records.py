"""The records the storage layer exchanges with the service, and the report SQL text.

See ``docs/architecture.md`` ("Storage"). A :class:`PendingReport` is a validated report
waiting for the group-commit writer; a :class:`StoredReport` is a committed one (never
changed or deleted); :func:`judge_stored` decides how an incoming report relates to the
stored one (identical re-send = OK duplicate; different = ALREADY_EXISTS).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from uldp.collector.storage import schema as S  # noqa: N812

__all__ = [
    "INSERT_CHUNK",
    "PendingReport",
    "ReportOutcome",
    "StoredReport",
    "first_reports",
    "judge_stored",
    "now_ms",
    "report_arrays",
    "report_sql",
    "stored_row",
]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class PendingReport:
    """One validated report waiting to be committed by the group-commit writer."""

    query_id: str
    phase: int
    device_id: str
    grp: int
    stage: int
    slot: int
    payload: bytes


@dataclass(frozen=True)
class StoredReport:
    """The report stored for one (query, device): reports are never changed or deleted,
    so a committed row is a permanent fact."""

    phase: int
    payload: bytes
    received_at_ms: int


@dataclass(frozen=True)
class ReportOutcome:
    """Result of storing one report: gRPC code name ('OK', ...) and a message."""

    code: str
    message: str = ""
    duplicate: bool = False
    received_at_ms: int = 0



def stored_row(row: Any) -> StoredReport | None:
    """A ``stored`` statement's row (phase, payload, received_at_ms) as a StoredReport."""
    return None if row is None else StoredReport(int(row[0]), bytes(row[1]), int(row[2]))


def judge_stored(item: PendingReport, stored: StoredReport | None) -> ReportOutcome | None:
    """The answer to ``item`` (a report, or a decline: an empty payload) given the row
    already stored for its (query, device):
    None if nothing is stored; OK with ``duplicate`` if the stored report is identical
    (same phase, same payload bytes; the task digest was checked against the same
    assignment before), ALREADY_EXISTS otherwise. Independent of the phase's state, so
    a re-send after the phase closed gets the same answer as one while it is open."""
    if stored is None:
        return None
    declined, declining = not stored.payload, not item.payload
    if stored.phase == item.phase and stored.payload == item.payload:
        what = "decline" if declining else "report"
        return ReportOutcome("OK", f"identical {what} already stored; nothing changed",
                             True, stored.received_at_ms)
    if declined:
        return ReportOutcome(
            "ALREADY_EXISTS",
            f"device {item.device_id} declined the task of query {item.query_id} (phase "
            f"{stored.phase}); one answer per device and query")
    if declining:
        return ReportOutcome(
            "ALREADY_EXISTS",
            f"device {item.device_id} already has a report stored for query "
            f"{item.query_id} (phase {stored.phase}); a decline comes instead of a report")
    return ReportOutcome(
        "ALREADY_EXISTS",
        f"device {item.device_id} already has a different report stored for query "
        f"{item.query_id} (phase {stored.phase}); one report per device per query")


def first_reports(items: Sequence[PendingReport], groups: list[list[int]]
                   ) -> tuple[list[PendingReport], dict[tuple[str, str], int], list[int]]:
    """Within a batch, the first report of each (query, device) is inserted; later ones
    (``later``, by index) are duplicates judged against it. ``groups``: item indices of
    the phases taken, in order."""
    rows: list[PendingReport] = []
    first_of: dict[tuple[str, str], int] = {}
    later: list[int] = []
    for idx in groups:
        for i in idx:
            it = items[i]
            key = (it.query_id, it.device_id)
            if key in first_of:
                later.append(i)
                continue
            first_of[key] = i
            rows.append(it)
    return rows, first_of, later


def report_arrays(rows: list[PendingReport], t: int) -> tuple[list[Any], ...]:
    """The column arrays of the PostgreSQL ``unnest`` inserts."""
    return ([it.query_id for it in rows], [it.device_id for it in rows],
            [it.phase for it in rows], [it.grp for it in rows], [it.stage for it in rows],
            [it.slot for it in rows], [it.payload for it in rows], [t] * len(rows))


#: rows per multi-row INSERT (8 parameters each; SQLite allows 32766, PostgreSQL 65535)
INSERT_CHUNK = 1000


def report_sql(mark: str) -> dict[str, str]:
    """The fixed statements of :meth:`Database.store_reports_cursor` in the driver's
    parameter style (``?`` for sqlite3, ``%s`` for psycopg; multi-row VALUES on SQLite,
    ``unnest`` of arrays on PostgreSQL)."""
    ph, rep = S.phases.name, S.reports.name
    cols = ("query_id", "device_id", "phase", "grp", "stage", "slot", "payload",
            "received_at_ms")
    assert all(c in S.reports.c for c in cols)
    insert = f"INSERT INTO {rep} ({', '.join(cols)}) "
    # PostgreSQL: 8 array parameters instead of 8 per row (adapting thousands of scalar
    # parameters costs ~40 µs per report in psycopg; arrays ~2 µs)
    unnest = (insert + "SELECT * FROM unnest(?::varchar[], ?::varchar[], ?::int[], "
              "?::int[], ?::int[], ?::int[], ?::bytea[], ?::bigint[]) ON CONFLICT DO NOTHING "
              "RETURNING query_id, device_id")
    q = {
        "guard": f"UPDATE {ph} SET received = received WHERE query_id = ? AND phase = ? "
                 "AND state = 'open'",
        "phase_state": f"SELECT state FROM {ph} WHERE query_id = ? AND phase = ?",
        "insert_head": insert + "VALUES ",
        "insert_row": "(" + ", ".join("?" * len(cols)) + ")",
        "insert_tail": " ON CONFLICT DO NOTHING RETURNING query_id, device_id",
        "insert_unnest": unnest,
        # PostgreSQL pipelined path: insert and count the inserted rows per phase in one
        # statement (a data-modifying CTE runs even though nothing reads its output)
        "insert_count": f"WITH ins AS ({unnest}, phase), "
                        "c AS (SELECT query_id, phase, count(*) AS n FROM ins "
                        "GROUP BY query_id, phase), "
                        f"u AS (UPDATE {ph} p SET received = p.received + c.n FROM c "
                        "WHERE p.query_id = c.query_id AND p.phase = c.phase RETURNING 1) "
                        "SELECT count(*) FROM ins",
        "stored": f"SELECT phase, payload, received_at_ms FROM {rep} "
                  "WHERE query_id = ? AND device_id = ?",
        "count": f"UPDATE {ph} SET received = received + ? WHERE query_id = ? AND phase = ?",
    }
    return {k: v.replace("?", mark) for k, v in q.items()}
