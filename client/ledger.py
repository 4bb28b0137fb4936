"""The device's crash-safe privacy ledger (spec §1.3 INV-1, INV-4; DESIGN invariants 1, 3).

One SQLite file in the device's state directory, one row per query the device has
*computed a report for*. The row is written — with the exact report bytes — in the same
transaction that checks the budget, **before** the report leaves the device:

* a second, different task for a query is refused (one report per query);
* a task whose ε would push the total spent above the device's budget is refused;
* after a crash or a lost acknowledgement the device re-sends the stored bytes, never a
  fresh noisy draw (which would spend the budget twice).

A report that was computed but never persisted was never sent, so it spent nothing.
With ``durable=True`` (the default) every commit is fsynced (``synchronous=FULL``);
simulated fleets pass ``durable=False`` (survives a process crash, not a power cut).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AlreadyParticipated", "BudgetExceeded", "Ledger", "LedgerEntry", "LedgerError"]

_SLACK = 1e-9


class LedgerError(Exception):
    """Base class of ledger refusals."""


class BudgetExceeded(LedgerError):
    """The task's ε does not fit in the device's remaining budget."""


class AlreadyParticipated(LedgerError):
    """The device already computed a (different) report for this query."""


@dataclass(frozen=True)
class LedgerEntry:
    query_id: str
    task_digest: str
    phase: int
    epsilon: float
    report: bytes
    state: str  # "pending" (persisted, not acknowledged) | "acked" | "rejected"
    created_at: float
    detail: str = ""


class Ledger:
    """Budget ledger and report store of one device."""

    def __init__(self, path: str | Path, total_epsilon: float, *, durable: bool = True) -> None:
        if not total_epsilon > 0:
            raise ValueError("the device budget must be positive")
        self.path = Path(path)
        self.total_epsilon = float(total_epsilon)
        self.durable = durable
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        with self._connect() as c:
            c.execute("CREATE TABLE IF NOT EXISTS entries (query_id TEXT PRIMARY KEY, "
                      "task_digest TEXT NOT NULL, phase INTEGER NOT NULL, "
                      "epsilon REAL NOT NULL, report BLOB NOT NULL, state TEXT NOT NULL, "
                      "created_at REAL NOT NULL, detail TEXT NOT NULL DEFAULT '')")

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
    def spent(self) -> float:
        with self._connect() as c:
            return float(c.execute("SELECT COALESCE(SUM(epsilon), 0) FROM entries").fetchone()[0])

    def remaining(self) -> float:
        return max(self.total_epsilon - self.spent(), 0.0)

    def get(self, query_id: str) -> LedgerEntry | None:
        with self._connect() as c:
            r = c.execute("SELECT query_id, task_digest, phase, epsilon, report, state, "
                          "created_at, detail FROM entries WHERE query_id = ?",
                          (query_id,)).fetchone()
        return LedgerEntry(*r) if r else None

    def entries(self, state: str | None = None) -> list[LedgerEntry]:
        sql = ("SELECT query_id, task_digest, phase, epsilon, report, state, created_at, "
               "detail FROM entries")
        args: tuple[str, ...] = ()
        if state:
            sql += " WHERE state = ?"
            args = (state,)
        with self._connect() as c:
            return [LedgerEntry(*r) for r in c.execute(sql + " ORDER BY created_at", args)]

    def check(self, query_id: str, task_digest: str, epsilon: float) -> LedgerEntry | None:
        """Would :meth:`record` accept this task? Returns the stored entry for a resend."""
        e = self.get(query_id)
        if e is not None:
            if e.task_digest == task_digest:
                return e
            raise AlreadyParticipated(f"already computed a report for query {query_id}; "
                                      "a device reports at most once per query")
        spent = self.spent()
        if spent + epsilon > self.total_epsilon * (1 + _SLACK):
            raise BudgetExceeded(f"task needs epsilon={epsilon:.6g} but only "
                                 f"{self.total_epsilon - spent:.6g} of the device budget "
                                 f"{self.total_epsilon:.6g} remains")
        return None

    # ---- updates --------------------------------------------------------------------
    def record(self, query_id: str, task_digest: str, phase: int, epsilon: float,
               report: bytes) -> LedgerEntry:
        """Atomically check and record the spend with the report bytes (before sending).

        Returns the stored entry, which is the *previous* one if this exact task was
        already recorded (the caller must then send the stored bytes).
        """
        with self._connect() as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                r = c.execute("SELECT task_digest FROM entries WHERE query_id = ?",
                              (query_id,)).fetchone()
                if r is None:
                    spent = float(c.execute(
                        "SELECT COALESCE(SUM(epsilon), 0) FROM entries").fetchone()[0])
                    if spent + epsilon > self.total_epsilon * (1 + _SLACK):
                        raise BudgetExceeded(
                            f"task needs epsilon={epsilon:.6g} but only "
                            f"{self.total_epsilon - spent:.6g} of the device budget remains")
                    c.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, 'pending', ?, '')",
                              (query_id, task_digest, phase, float(epsilon), report,
                               time.time()))
                elif r[0] != task_digest:
                    raise AlreadyParticipated(f"already computed a report for query "
                                              f"{query_id}; a device reports at most once "
                                              "per query")
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        e = self.get(query_id)
        assert e is not None
        return e

    def mark(self, query_id: str, state: str, detail: str = "") -> None:
        """Record the collector's answer ("acked" or "rejected"); the spend stays."""
        with self._connect() as c:
            c.execute("UPDATE entries SET state = ?, detail = ? WHERE query_id = ?",
                      (state, detail[:1000], query_id))


class _Locked:
    """Context manager: the shared connection, with the ledger lock held."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self._c, self._lock = conn, lock

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        return self._c

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
