"""The records the storage layer exchanges with the service, and the report SQL text.

See ``docs/architecture.md`` ("Storage"). A :class:`PendingReport` is a validated report
waiting for the group-commit writer; a :class:`StoredReport` is a committed one (never
changed or deleted); :func:`judge_stored` decides how an incoming report relates to the
stored one (identical re-send = OK duplicate; different = ALREADY_EXISTS).

A report is stored in two forms (``docs/architecture.md``, "Storage"): ``payload``, its
integers packed little-endian at ``vbytes`` bytes each — the narrowest of 1, 2, 4 or 8
that holds the task's public limit (:func:`value_bytes`), so a subset-selection report of
k = 256 takes 2 bytes a value instead of 8 — and, for a report of at most
:data:`TYPED_VALUES` integers, the same integers in the typed columns ``v0 ..``, which the
database sums itself when a phase closes. Rows stored before schema version 4 have
``vbytes = 8``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from uldp.collector.storage import schema as S  # noqa: N812

__all__ = [
    "INSERT_CHUNK",
    "REPORT_COLUMNS",
    "TYPED_VALUES",
    "PendingReport",
    "ReportOutcome",
    "StoredReport",
    "first_reports",
    "judge_stored",
    "now_ms",
    "pack_values",
    "phase_lock_key",
    "report_array_literals",
    "report_arrays",
    "report_params",
    "report_sql",
    "same_report",
    "stored_row",
    "typed_values",
    "unpack_values",
    "value_bytes",
]

#: reports of at most this many integers also fill the typed columns ``v0 .. v{n-1}``
TYPED_VALUES = 4
#: numpy dtype of a stored value of ``vbytes`` bytes (little-endian, signed)
VALUE_DTYPES = {1: "<i1", 2: "<i2", 4: "<i4", 8: "<i8"}


def value_bytes(limit: int) -> int:
    """Bytes per stored value of a task whose report integers lie in ``[-limit, limit]``
    (public): the narrowest signed width that holds them."""
    for b in (1, 2, 4):
        if limit < 1 << (8 * b - 1):
            return b
    return 8


def pack_values(values: Sequence[int] | np.ndarray, vbytes: int = 8) -> bytes:
    """The ``payload`` of a report: its integers little-endian at ``vbytes`` bytes each
    (the caller has checked they fit: ``value_bytes`` of the task's limit)."""
    return np.asarray(values, dtype=np.int64).astype(VALUE_DTYPES[vbytes]).tobytes()


def unpack_values(payload: bytes, vbytes: int = 8) -> np.ndarray:
    """The integers of a stored ``payload`` (int64)."""
    return np.frombuffer(payload, VALUE_DTYPES[vbytes]).astype(np.int64)


def typed_values(payload: bytes, vbytes: int) -> tuple[int | None, ...]:
    """The typed columns ``v0 ..`` of a stored report: its integers if it has at most
    :data:`TYPED_VALUES` (None for the rest, and for a decline)."""
    n = len(payload) // vbytes if payload else 0
    if n == 0 or n > TYPED_VALUES:
        return (None,) * TYPED_VALUES
    vals = [int(v) for v in unpack_values(payload, vbytes)]
    return (*vals, *(None,) * (TYPED_VALUES - n))


def same_report(a: bytes, a_bytes: int, b: bytes, b_bytes: int) -> bool:
    """Are two stored payloads the same report (the same integers, whatever widths they
    were packed at: a row stored before schema 4 has 8 bytes a value)?"""
    if a_bytes == b_bytes or not a or not b:
        return a == b
    return np.array_equal(unpack_values(a, a_bytes), unpack_values(b, b_bytes))


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
    vbytes: int = 8  # bytes per value of ``payload`` (:func:`value_bytes`)


@dataclass(frozen=True)
class StoredReport:
    """The report stored for one (query, device): reports are never changed or deleted,
    so a committed row is a permanent fact."""

    phase: int
    payload: bytes
    received_at_ms: int
    vbytes: int = 8


@dataclass(frozen=True)
class ReportOutcome:
    """Result of storing one report: gRPC code name ('OK', ...) and a message."""

    code: str
    message: str = ""
    duplicate: bool = False
    received_at_ms: int = 0



def stored_row(row: Any) -> StoredReport | None:
    """A ``stored`` statement's row (phase, payload, received_at_ms[, vbytes]) as a
    StoredReport."""
    if row is None:
        return None
    return StoredReport(int(row[0]), bytes(row[1]), int(row[2]),
                        int(row[3]) if len(row) > 3 else 8)


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
    if stored.phase == item.phase and same_report(stored.payload, stored.vbytes,
                                                  item.payload, item.vbytes):
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
    typed = list(zip(*(typed_values(it.payload, it.vbytes) for it in rows), strict=True))
    return ([it.query_id for it in rows], [it.device_id for it in rows],
            [it.phase for it in rows], [it.grp for it in rows], [it.stage for it in rows],
            [it.slot for it in rows], [it.payload for it in rows], [t] * len(rows),
            [it.vbytes for it in rows], *(list(c) for c in typed))


def report_params(it: PendingReport, t: int) -> tuple[Any, ...]:
    """One row's parameters of the SQLite multi-row insert (:data:`REPORT_COLUMNS`)."""
    return (it.query_id, it.device_id, it.phase, it.grp, it.stage, it.slot, it.payload, t,
            it.vbytes, *typed_values(it.payload, it.vbytes))


def _text_array(xs: Sequence[str]) -> str:
    return "{" + ",".join('"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"'
                          for x in xs) + "}"


def _int_array(xs: Sequence[int | None]) -> str:
    return "{" + ",".join("NULL" if x is None else str(int(x)) for x in xs) + "}"


def report_array_literals(rows: list[PendingReport], t: int) -> tuple[str, ...]:
    """:func:`report_arrays` as PostgreSQL array literals (``{..}`` text the statement
    casts): one string parameter per column. psycopg's list adapter inspects and dumps
    every array element by element in Python (~0.25 ms per commit for the 14 columns,
    whatever the group's size); a string is sent as it is."""
    typed = list(zip(*(typed_values(it.payload, it.vbytes) for it in rows), strict=True))
    return (_text_array([it.query_id for it in rows]),
            _text_array([it.device_id for it in rows]),
            _int_array([it.phase for it in rows]), _int_array([it.grp for it in rows]),
            _int_array([it.stage for it in rows]), _int_array([it.slot for it in rows]),
            "{" + ",".join('"\\\\x' + bytes(it.payload).hex() + '"' for it in rows) + "}",
            _int_array([t] * len(rows)), _int_array([it.vbytes for it in rows]),
            *(_int_array(c) for c in typed))


#: the columns a report insert fills, in order
REPORT_COLUMNS = ("query_id", "device_id", "phase", "grp", "stage", "slot", "payload",
                  "received_at_ms", "vbytes", *(f"v{i}" for i in range(TYPED_VALUES)))
#: rows per multi-row INSERT (13 parameters each; SQLite allows 32766, PostgreSQL 65535)
INSERT_CHUNK = 1000


def report_sql(mark: str) -> dict[str, str]:
    """The fixed statements of :meth:`Database.store_reports_cursor` in the driver's
    parameter style (``?`` for sqlite3, ``%s`` for psycopg; multi-row VALUES on SQLite,
    ``unnest`` of arrays on PostgreSQL)."""
    ph, rep, cnt = S.phases.name, S.reports.name, S.phase_counts.name
    cols = REPORT_COLUMNS
    assert all(c in S.reports.c for c in cols)
    insert = f"INSERT INTO {rep} ({', '.join(cols)}) "
    # PostgreSQL: one array parameter per column instead of one per value (adapting
    # thousands of scalar parameters costs ~40 µs per report in psycopg; arrays ~2 µs)
    typed = ", ?::bigint[]" * TYPED_VALUES
    unnest = (insert + "SELECT * FROM unnest(?::varchar[], ?::varchar[], ?::int[], "
              "?::int[], ?::int[], ?::int[], ?::bytea[], ?::bigint[], ?::smallint[]"
              f"{typed}) ON CONFLICT DO NOTHING RETURNING query_id, device_id")
    open_rows = (insert + "SELECT u.* FROM unnest(?::varchar[], ?::varchar[], ?::int[], "
                 "?::int[], ?::int[], ?::int[], ?::bytea[], ?::bigint[], ?::smallint[]"
                 f"{typed}) AS u({', '.join(cols)}) JOIN {ph} AS p ON p.query_id = "
                 "u.query_id AND p.phase = u.phase AND p.state = 'open' "
                 "ON CONFLICT DO NOTHING RETURNING query_id, device_id, phase")
    upsert = (f"INSERT INTO {cnt} AS c (query_id, phase, writer, received, declined) "
              "{rows} ON CONFLICT (query_id, phase, writer) DO UPDATE SET received = "
              "c.received + excluded.received, declined = c.declined + excluded.declined")
    q = {
        # PostgreSQL: a shared lock on the phase (the closer takes it exclusively to flip
        # the phase's state: no report commit holds a row lock another replica waits for)
        "lock": "SELECT pg_advisory_xact_lock_shared(?)",
        "phase_state": f"SELECT state FROM {ph} WHERE query_id = ? AND phase = ?",
        "insert_head": insert + "VALUES ",
        "insert_row": "(" + ", ".join("?" * len(cols)) + ")",
        "insert_tail": " ON CONFLICT DO NOTHING RETURNING query_id, device_id",
        "insert_unnest": unnest,
        # PostgreSQL one-trip path: the shared locks of every phase of the batch in one
        # statement, then one statement inserting only rows of open phases (read under
        # those locks: a later statement, so a later snapshot) and counting them
        "lock_many": "SELECT count(pg_advisory_xact_lock_shared(k)) FROM "
                     "unnest(?::bigint[]) AS k",
        "insert_open": f"WITH ins AS ({open_rows}), "
                       "n AS (SELECT query_id, phase, count(*) AS n FROM ins "
                       "GROUP BY query_id, phase), "
                       "u AS (" + upsert.format(rows="SELECT query_id, phase, ?, n, 0 FROM n")
                       + " RETURNING 1) SELECT query_id, device_id FROM ins",
        "stored": f"SELECT phase, payload, received_at_ms, vbytes FROM {rep} "
                  "WHERE query_id = ? AND device_id = ?",
        # this writer's own counter row of the phase (no other process writes it)
        "count": upsert.format(rows="VALUES (?, ?, ?, ?, ?)"),
    }
    return {k: v.replace("?", mark) for k, v in q.items()}


@functools.lru_cache(maxsize=4096)
def phase_lock_key(query_id: str, phase: int) -> int:
    """PostgreSQL: the advisory lock key of a phase (a signed 64-bit digest)."""
    import hashlib

    d = hashlib.sha256(f"uldp-phase/{query_id}/{phase}".encode()).digest()
    return int.from_bytes(d[:8], "little", signed=True)
