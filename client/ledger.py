"""The device's crash-safe privacy ledger (§1.3 INV-1, INV-4; invariants 1, 3, 6 in
docs/architecture.md).

See ``docs/privacy.md`` ("The ledger"). One SQLite file in the device's state directory,
one row per query the device has accepted a task for. Budgets are counted in integer
units of 2^-24 (``uldp.client.budget``): no float slack anywhere.

A row goes through these states:

``reserved``
    The task passed every public check and its ε is charged — in the same transaction
    that checks the budget and the one-report-per-query rule — **before** the device
    touches its data. From here on the device owes exactly one report for the query,
    whatever its data are (totality).
``pending``
    The report bytes are stored; they are what is sent, and re-sent after a crash or a
    lost acknowledgement (never a fresh noisy draw, which would spend the budget twice).
``acknowledged`` / ``rejected``
    The collector's answer. The spend stays either way: the bytes left the device.

A crash between ``reserved`` and ``pending`` leaves a charged row without a report; the
device then computes the report afresh (nothing was sent, so nothing was released) and
sends it (:meth:`uldp.client.device.Device.resend_pending`). With ``durable=True`` (the
default) every commit is fsynced (``synchronous=FULL``); simulated fleets pass
``durable=False`` (survives a process crash, not a power cut).
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uldp.client.budget import EPS_DENOMINATOR, epsilon_units, units_to_epsilon

__all__ = ["STATES", "AlreadyParticipated", "BudgetExceeded", "Ledger", "LedgerEntry",
           "LedgerError"]

STATES = ("reserved", "pending", "acknowledged", "rejected")

_COLUMNS = ("query_id, task_digest, phase, eps_units, report, state, created_at, detail, "
            "task")


class LedgerError(Exception):
    """Base class of ledger refusals."""


class BudgetExceeded(LedgerError):
    """The task's ε does not fit in the device's remaining budget."""


class AlreadyParticipated(LedgerError):
    """The device already accepted a (different) task for this query."""


@dataclass(frozen=True)
class LedgerEntry:
    query_id: str
    task_digest: str
    phase: int
    eps_units: int  # ε charged, in units of 2^-24
    report: bytes  # b"" while reserved
    state: str  # one of STATES
    created_at: float
    detail: str = ""
    task: bytes = b""  # the serialized Task message (to recompute after a crash)

    @property
    def epsilon(self) -> float:
        return units_to_epsilon(self.eps_units)


class Ledger:
    """Budget ledger and report store of one device."""

    def __init__(self, path: str | Path, total_epsilon: float, *, durable: bool = True) -> None:
        self.budget_units = epsilon_units(total_epsilon, "the device budget")
        self.path = Path(path)
        self.durable = durable
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        with self._connect() as c:
            c.execute("CREATE TABLE IF NOT EXISTS entries (query_id TEXT PRIMARY KEY, "
                      "task_digest TEXT NOT NULL, phase INTEGER NOT NULL, "
                      "epsilon REAL NOT NULL, report BLOB NOT NULL, state TEXT NOT NULL, "
                      "created_at REAL NOT NULL, detail TEXT NOT NULL DEFAULT '', "
                      "eps_units INTEGER, task BLOB NOT NULL DEFAULT x'')")
            _migrate(c)

    @property
    def total_epsilon(self) -> float:
        return units_to_epsilon(self.budget_units)

    def _connect(self) -> _Locked:
        """The ledger's connection (opened once), held under the ledger lock."""
        with self._lock:
            if self._conn is None:
                c = sqlite3.connect(self.path, isolation_level=None, timeout=30,
                                    check_same_thread=False)
                if self.durable:  # fsync every commit
                    c.execute("PRAGMA journal_mode=WAL")
                    c.execute("PRAGMA synchronous=FULL")
                else:  # rollback journal, no fsync: survives a process crash only
                    c.execute("PRAGMA synchronous=OFF")
                self._conn = c
            return _Locked(self._conn, self._lock)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # ---- queries --------------------------------------------------------------------
    def spent_units(self) -> int:
        with self._connect() as c:
            return _spent(c)

    def spent(self) -> float:
        return units_to_epsilon(self.spent_units())

    def remaining(self) -> float:
        return units_to_epsilon(max(self.budget_units - self.spent_units(), 0))

    def get(self, query_id: str) -> LedgerEntry | None:
        with self._connect() as c:
            r = c.execute(f"SELECT {_COLUMNS} FROM entries WHERE query_id = ?",
                          (query_id,)).fetchone()
        return _entry(r) if r else None

    def entries(self, state: str | None = None) -> list[LedgerEntry]:
        sql = f"SELECT {_COLUMNS} FROM entries"
        args: tuple[str, ...] = ()
        if state:
            sql += " WHERE state = ?"
            args = (state,)
        with self._connect() as c:
            return [_entry(r) for r in c.execute(sql + " ORDER BY created_at", args)]

    def check(self, query_id: str, task_digest: str, eps_units: int) -> LedgerEntry | None:
        """Would :meth:`reserve` accept this task? Returns the stored entry for a resend."""
        with self._connect() as c:
            return self._admit(c, query_id, task_digest, eps_units)

    def _admit(self, c: sqlite3.Connection, query_id: str, task_digest: str,
               eps_units: int) -> LedgerEntry | None:
        r = c.execute(f"SELECT {_COLUMNS} FROM entries WHERE query_id = ?",
                      (query_id,)).fetchone()
        if r is not None:
            e = _entry(r)
            if e.task_digest == task_digest:
                return e
            raise AlreadyParticipated(f"already accepted a task for query {query_id}; "
                                      "a device reports at most once per query")
        spent = _spent(c)
        if spent + eps_units > self.budget_units:
            raise BudgetExceeded(
                f"task needs epsilon={units_to_epsilon(eps_units):.10g} but only "
                f"{units_to_epsilon(self.budget_units - spent):.10g} of the device budget "
                f"{self.total_epsilon:.10g} remains")
        return None

    # ---- updates --------------------------------------------------------------------
    def reserve(self, query_id: str, task_digest: str, phase: int, eps_units: int,
                task: bytes = b"") -> LedgerEntry:
        """Atomically check the rules and charge the task's ε (state ``reserved``).

        Returns the stored entry, which is the *previous* one if this exact task was
        already accepted (the caller then sends its stored report, or computes it if the
        device crashed before storing it).
        """
        if not isinstance(eps_units, int) or eps_units < 1:
            raise ValueError(f"eps_units must be a positive integer, got {eps_units!r}")
        with self._connect() as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                if self._admit(c, query_id, task_digest, eps_units) is None:
                    c.execute(f"INSERT INTO entries ({_COLUMNS}, epsilon) VALUES "
                              "(?, ?, ?, ?, x'', 'reserved', ?, '', ?, ?)",
                              (query_id, task_digest, int(phase), eps_units, time.time(),
                               bytes(task), units_to_epsilon(eps_units)))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        e = self.get(query_id)
        assert e is not None
        return e

    def store_report(self, query_id: str, report: bytes) -> LedgerEntry:
        """Attach the computed report to a reserved row (state ``pending``). A row that
        already has a report keeps it: the first stored bytes are the ones sent."""
        if not report:
            raise ValueError("a report has at least one value")
        with self._connect() as c:
            c.execute("UPDATE entries SET report = ?, state = 'pending' "
                      "WHERE query_id = ? AND state = 'reserved'", (bytes(report), query_id))
        e = self.get(query_id)
        if e is None:
            raise LedgerError(f"no reservation for query {query_id}")
        return e

    def record(self, query_id: str, task_digest: str, phase: int, eps_units: int,
               report: bytes) -> LedgerEntry:
        """:meth:`reserve` and :meth:`store_report` in one step (for callers that already
        computed the report without touching private data, e.g. tests)."""
        e = self.reserve(query_id, task_digest, phase, eps_units)
        return self.store_report(query_id, report) if e.state == "reserved" else e

    def mark(self, query_id: str, state: str, detail: str = "") -> None:
        """Record the collector's answer (``acknowledged`` or ``rejected``); the spend stays."""
        if state not in ("acknowledged", "rejected"):
            raise ValueError(f"state must be acknowledged or rejected, got {state!r}")
        with self._connect() as c:
            c.execute("UPDATE entries SET state = ?, detail = ? WHERE query_id = ? "
                      "AND state != 'reserved'", (state, detail[:1000], query_id))


def _spent(c: sqlite3.Connection) -> int:
    return int(c.execute("SELECT COALESCE(SUM(eps_units), 0) FROM entries").fetchone()[0])


def _entry(r: tuple[Any, ...]) -> LedgerEntry:
    q, digest, phase, units, report, state, created, detail, task = r
    return LedgerEntry(q, digest, int(phase), int(units), bytes(report), state, float(created),
                       detail, bytes(task or b""))


def _migrate(c: sqlite3.Connection) -> None:
    """Ledgers written before ε units: add the columns, charge ⌈ε·2^24⌉ (never less than
    was spent), rename the state ``acked``."""
    cols = {row[1] for row in c.execute("PRAGMA table_info(entries)")}
    if "eps_units" not in cols:
        c.execute("ALTER TABLE entries ADD COLUMN eps_units INTEGER")
    if "task" not in cols:
        c.execute("ALTER TABLE entries ADD COLUMN task BLOB NOT NULL DEFAULT x''")
    for q, eps in c.execute("SELECT query_id, epsilon FROM entries WHERE eps_units IS NULL"
                            ).fetchall():
        c.execute("UPDATE entries SET eps_units = ? WHERE query_id = ?",
                  (math.ceil(float(eps) * EPS_DENOMINATOR), q))
    c.execute("UPDATE entries SET state = 'acknowledged' WHERE state = 'acked'")


class _Locked:
    """Context manager: the shared connection, with the ledger lock held."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self._c, self._lock = conn, lock

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        return self._c

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
