"""Group commit: one writer thread turns many concurrent requests into few transactions.

gRPC handler threads hand their work (report batches, device assignments) to the
:class:`GroupCommitWriter` and block until it is committed. The writer drains everything
queued, runs it in **one** write transaction and commits once (one fsync for SQLite in
WAL/FULL mode), then wakes every waiting handler with its own outcome. An acknowledged
report is therefore always committed, while throughput scales with concurrency instead of
being bounded by the disk's fsync rate.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from uldp.collector.storage.db import Database, PendingReport, ReportOutcome

__all__ = ["GroupCommitWriter", "WriterUnavailable"]

log = logging.getLogger(__name__)


class WriterUnavailable(Exception):
    """The batch transaction failed (database down, writer stopped): retry later."""


@dataclass
class _Ticket:
    reports: Sequence[PendingReport] = ()
    op: Callable[[Connection], Any] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    outcomes: list[ReportOutcome] | None = None
    result: Any = None
    error: BaseException | None = None


class GroupCommitWriter:
    """A background thread committing queued work in shared transactions."""

    def __init__(self, db: Database, *, max_reports: int = 8192, max_ops: int = 512) -> None:
        self.db = db
        self.max_reports = max_reports
        self.max_ops = max_ops
        self._q: deque[_Ticket] = deque()
        self._cv = threading.Condition()
        self._stop = False
        self.batches = 0
        self.items = 0
        self._thread = threading.Thread(target=self._run, name="uldp-writer", daemon=True)
        self._thread.start()

    # ---- API for handler threads ----------------------------------------------------
    def store_reports(self, items: Sequence[PendingReport],
                      timeout: float = 60.0) -> list[ReportOutcome]:
        t = self._submit(_Ticket(reports=items), timeout)
        assert t.outcomes is not None
        return t.outcomes

    def run(self, op: Callable[[Connection], Any], timeout: float = 60.0) -> Any:
        """Run ``op(conn)`` inside the next batch transaction and return its result."""
        return self._submit(_Ticket(op=op), timeout).result

    def run_later(self, op: Callable[[Connection], Any]) -> None:
        """Queue ``op`` for the next batch without waiting (best effort, not durable)."""
        with self._cv:
            if not self._stop:
                self._q.append(_Ticket(op=op))
                self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=30)

    # ---- internals ------------------------------------------------------------------
    def _submit(self, ticket: _Ticket, timeout: float) -> _Ticket:
        with self._cv:
            if self._stop:
                raise WriterUnavailable("collector is shutting down")
            self._q.append(ticket)
            self._cv.notify()
        if not ticket.done.wait(timeout):
            raise WriterUnavailable("timed out waiting for the database")
        if ticket.error is not None:
            raise WriterUnavailable(f"database write failed: {ticket.error}") from ticket.error
        return ticket

    def _take(self) -> list[_Ticket]:
        with self._cv:
            while not self._q and not self._stop:
                self._cv.wait()
            batch: list[_Ticket] = []
            n_rep = n_ops = 0
            while self._q and n_rep < self.max_reports and n_ops < self.max_ops:
                t = self._q.popleft()
                batch.append(t)
                n_rep += len(t.reports)
                n_ops += 1 if t.op is not None else 0
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return  # stopped and drained
            try:
                self._commit(batch)
            except Exception as exc:  # the whole transaction rolled back
                log.warning("batch of %d requests failed: %s", len(batch), exc)
                time.sleep(0.05)
                for t in batch:
                    t.error = exc
            for t in batch:
                t.done.set()

    def _commit(self, batch: list[_Ticket]) -> None:
        with self.db.write() as conn:
            for t in batch:
                if t.op is not None:
                    t.result = t.op(conn)
            reports = [r for t in batch for r in t.reports]
            outcomes = self.db.store_reports_in(conn, reports) if reports else []
        i = 0
        for t in batch:
            if t.op is None:
                t.outcomes = outcomes[i:i + len(t.reports)]
                i += len(t.reports)
        self.batches += 1
        self.items += len(reports)
