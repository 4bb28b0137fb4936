"""Group commit: one writer thread turns many concurrent requests into few transactions.

gRPC handler threads hand their work (report batches, device assignments) to the
:class:`GroupCommitWriter` and block until it is committed. The writer drains everything
queued, runs it in **one** write transaction and commits once (one fsync for SQLite in
WAL/FULL mode), then wakes every waiting handler with its own outcome. An acknowledged
report is therefore always committed, while throughput scales with concurrency instead of
being bounded by the disk's fsync rate.

The commit window adapts (issue 28): every transaction costs the collector and the
database a fixed amount (~0.3–0.5 ms of CPU each, and an fsync), so a writer that sees
half the arrivals — one of two replicas on one phase — would commit twice as often per
report. With fewer than ``linger_below`` reports queued the writer waits for more, for
the time the measured arrival rate needs to fill the batch, at most ``linger_s``, and
commits as soon as the batch is full. Waits that gather nothing (one client sending one
report at a time) shrink the window toward a tenth of it, so a lone sequential caller is
hardly slowed down; waits that gather something widen it again.

The cap is 20 ms by default (``--commit-linger-ms``): at the few hundred unary reports/s a
replica sees, 5 ms gathered 6–7 reports per commit with two replicas (15 with one), so
each replica paid the commit's fixed cost — the writer's and PostgreSQL's CPU and a loop
wake-up per commit — about twice as often per report; 20 ms gathers about twice as many
(``bench/ingest_replicas.py``, issue 28). Nothing is acknowledged before its commit, so
the wait changes latency, never durability.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from uldp.collector.storage.db import Database, PendingReport, ReportOutcome

__all__ = ["WRITE_FAILED", "GroupCommitWriter", "WriterUnavailable"]

log = logging.getLogger(__name__)


#: the caller-facing message of a failed batch transaction (its cause is logged here)
WRITE_FAILED = "database write failed; not acknowledged, retry later"
#: times a transaction aborted by a lock conflict (deadlock, serialization failure) is
#: run again before its callers get UNAVAILABLE
CONFLICT_RETRIES = 8


class WriterUnavailable(Exception):
    """The batch transaction failed (database down, writer stopped): retry later."""


@dataclass
class _Ticket:
    reports: Sequence[PendingReport] = ()
    op: Callable[[Connection], Any] | None = None
    assign: list[tuple[str, str, Any]] | None = None  # [(query id, device id, place)]
    devices: Sequence[tuple[str, str]] | None = None  # [(device id, label)]: registry rows
    future: Any = None  # asyncio.Future resolved with the ticket on ``loop``
    loop: Any = None
    done: threading.Event | None = None  # set for callers that block (not asyncio)
    outcomes: list[ReportOutcome] | None = None
    result: Any = None
    error: BaseException | None = None

    @property
    def reports_only(self) -> bool:
        """Only reports to store (no operation, assignment or device row)."""
        return self.op is None and self.assign is None and self.devices is None


def _resolve(tickets: list[_Ticket]) -> None:
    """On the event loop: hand each ticket to the coroutine awaiting it."""
    for t in tickets:
        if not t.future.done():
            t.future.set_result(t)


class GroupCommitWriter:
    """A background thread committing queued work in shared transactions."""

    #: called after every transaction with (seconds, reports in it, whether it failed);
    #: the collector's metrics set it (``uldp.collector.observe.metrics``)
    on_commit: Callable[[float, int, bool], None] | None = None

    def __init__(self, db: Database, *, max_reports: int = 8192, max_ops: int = 2048,
                 linger_s: float = 0.02, linger_below: int = 64) -> None:
        if not 0.0 <= linger_s <= 0.1:
            raise ValueError(f"linger_s must be in [0, 0.1] seconds, got {linger_s!r}")
        self.db = db
        #: when fewer than ``linger_below`` reports are queued, wait up to ``linger_s``
        #: for more before committing (the window adapts, see the module docstring):
        #: bigger transactions, fewer commits (each one costs the database ~0.5 ms of CPU
        #: and an fsync), for at most ``linger_s`` more latency
        self.linger_s = linger_s
        self.linger_below = linger_below
        #: arrivals (reports, or 1 per other ticket) per second, smoothed over takes
        self.rate = 0.0
        #: smoothed share of waits that gathered at least one more arrival (0.1 … 1)
        self.useful = 1.0
        self.waits = 0  # commits that waited for more reports
        self._arrived = 0  # arrivals since the last take (under ``_cv``)
        self._pending = 0  # arrivals queued (under ``_cv``)
        self._last_take = time.perf_counter()
        self.max_reports = max_reports
        self.max_ops = max_ops
        self._q: deque[_Ticket] = deque()
        self._cv = threading.Condition()
        self._stop = False
        self.batches = 0
        self.items = 0
        self.tickets = 0
        self.busy_s = 0.0
        self.conflicts = 0  # transactions retried after a lock conflict
        self._thread = threading.Thread(target=self._run, name="uldp-writer", daemon=True)
        self._thread.start()

    # ---- API for handler threads ----------------------------------------------------
    def store_reports(self, items: Sequence[PendingReport],
                      timeout: float = 60.0) -> list[ReportOutcome]:
        t = self._submit(_Ticket(reports=items), timeout)
        assert t.outcomes is not None
        return t.outcomes

    def submit_reports_aio(self, items: Sequence[PendingReport], loop: Any) -> Any:
        """Queue reports from coroutine code on ``loop``; returns an asyncio future
        resolved (on ``loop``) with the ticket after the commit or failure. All futures
        of one commit are resolved in a single loop callback (one wake-up per commit, not
        one per report)."""
        fut = loop.create_future()
        t = _Ticket(reports=items, future=fut, loop=loop)
        with self._cv:
            if self._stop:
                t.error = WriterUnavailable("collector is shutting down")
                fut.set_result(t)
                return fut
            self._put(t)
        return fut

    def assign(self, wanted: list[tuple[str, str, Any]], timeout: float = 60.0
               ) -> dict[tuple[str, str], dict[str, Any] | None]:
        """Assignments ((query id, device id) -> row, None if the query is full or not
        running) of devices to queries ``[(query id, device id, place)]``, created from
        the next free slots in the order given; batched with every other assignment
        waiting for this commit."""
        return self._submit(_Ticket(assign=wanted), timeout).result

    def run(self, op: Callable[[Connection], Any], timeout: float = 60.0) -> Any:
        """Run ``op(conn)`` inside the next batch transaction and return its result."""
        return self._submit(_Ticket(op=op), timeout).result

    def store_declines(self, items: Sequence[PendingReport], timeout: float = 60.0
                       ) -> list[ReportOutcome]:
        """Commit declines (empty payloads) in the next batch transaction; one outcome per
        item (``Database.store_declines_in``)."""
        out: list[ReportOutcome] = self.run(
            lambda conn: self.db.store_declines_in(conn, items), timeout)
        return out

    def register_device(self, device_id: str, label: str) -> None:
        """Queue a device-registry row for the next batch without waiting (best effort)."""
        self.register_devices([(device_id, label)])

    def register_devices(self, devices: Sequence[tuple[str, str]]) -> None:
        """Queue device-registry rows ``[(device id, label)]`` for the next batch without
        waiting (best effort: the rows are informational, tokens are stateless)."""
        with self._cv:
            if not self._stop and devices:
                self._put(_Ticket(devices=list(devices)))

    def stats(self) -> dict[str, float]:
        """Counters for operators: commits, tickets and reports, seconds spent writing."""
        return {"commits": self.batches, "tickets": self.tickets, "reports": self.items,
                "conflict_retries": self.conflicts, "busy_s": round(self.busy_s, 3),
                "waits": self.waits, "arrivals_per_s": round(self.rate, 1),
                "window_ms": round(1e3 * self._window(0), 3)}

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=30)

    # ---- internals ------------------------------------------------------------------
    def _submit(self, ticket: _Ticket, timeout: float) -> _Ticket:
        ticket.done = threading.Event()
        with self._cv:
            if self._stop:
                raise WriterUnavailable("collector is shutting down")
            self._put(ticket)
        if not ticket.done.wait(timeout):
            raise WriterUnavailable("timed out waiting for the database")
        if ticket.error is not None:  # logged by the writer thread
            raise WriterUnavailable(WRITE_FAILED) from ticket.error
        return ticket

    def _window(self, queued: int) -> float:
        """Seconds to wait for more work with ``queued`` arrivals queued: the time the
        measured rate needs to bring the batch to ``linger_below``, at most ``linger_s``,
        scaled by how often waiting has gathered anything lately."""
        if self.linger_s <= 0 or queued >= self.linger_below:
            return 0.0
        fill = (self.linger_below - queued) / self.rate if self.rate > 0 else self.linger_s
        return min(self.linger_s, fill) * self.useful

    def _note_rate(self, now: float) -> None:
        """Fold the arrivals since the last take into the smoothed rate (under ``_cv``)."""
        dt = now - self._last_take
        if dt > 0:
            inst = self._arrived / dt
            self.rate = inst if self.rate == 0 else 0.75 * self.rate + 0.25 * inst
        self._arrived, self._last_take = 0, now

    def _take(self) -> list[_Ticket]:
        with self._cv:
            while not self._q and not self._stop:
                self._cv.wait()
            if not self._stop:
                self._linger()
            self._note_rate(time.perf_counter())
            batch: list[_Ticket] = []
            n_rep = n_ops = 0
            while self._q and n_rep < self.max_reports and n_ops < self.max_ops:
                t = self._q.popleft()
                self._pending -= max(len(t.reports), 1)
                batch.append(t)
                n_rep += len(t.reports)
                n_ops += 1 if t.op is not None or t.assign is not None else 0
            return batch

    def _put(self, t: _Ticket) -> None:
        """Queue ``t`` (under ``_cv``); wake the writer when it waits for a first ticket
        or the batch just filled (not on every arrival: a wake-up per report costs a
        thread switch per report)."""
        n = max(len(t.reports), 1)
        self._q.append(t)
        self._arrived += n
        self._pending += n
        if self._pending == n or self._pending - n < self.linger_below <= self._pending:
            self._cv.notify()

    def _queued(self) -> int:
        return self._pending

    def _linger(self) -> None:
        """Under ``_cv``: wait up to :meth:`_window` for the batch to fill (woken when it
        does), and learn whether waiting gathered anything."""
        before = self._queued()
        window = self._window(before)
        if window <= 0:
            return
        self.waits += 1
        self._cv.wait_for(lambda: self._stop or self._queued() >= self.linger_below,
                          timeout=window)
        gained = self._queued() > before
        self.useful = min(1.0, max(0.1, 0.75 * self.useful + (0.25 if gained else 0.0)))

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return  # stopped and drained
            t0 = time.perf_counter()
            failed = False
            try:
                self._commit_retrying(batch)
            except Exception as exc:  # the whole transaction rolled back
                log.warning("batch of %d requests failed: %s", len(batch), exc)
                time.sleep(0.05)
                failed = True
                for t in batch:
                    t.error = exc
            spent = time.perf_counter() - t0
            self.busy_s += spent
            if self.on_commit is not None:
                with contextlib.suppress(Exception):
                    self.on_commit(spent, sum(len(t.reports) for t in batch), failed)
            self.tickets += len(batch)
            by_loop: dict[Any, list[_Ticket]] = {}
            for t in batch:
                if t.done is not None:
                    t.done.set()
                if t.loop is not None:
                    by_loop.setdefault(t.loop, []).append(t)
            for loop, tickets in by_loop.items():
                # a closed loop (shutdown) has nobody waiting; it must not kill the writer
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_resolve, tickets)

    def _commit_retrying(self, batch: list[_Ticket]) -> None:
        """:meth:`_commit`, retried when the database aborted the transaction for a lock
        conflict with another replica (a deadlock or serialization failure: nothing of it
        was committed) up to :data:`CONFLICT_RETRIES` times after a short random wait, so
        no caller sees UNAVAILABLE for it. A report-only batch that fails with another
        database error (e.g. the held connection died with a database restart) is retried
        once on a fresh connection. That is safe even if the failed COMMIT did land: a
        report already stored with the same bytes is an OK duplicate, counted once."""
        conflicts = 0
        while True:
            try:
                self._commit(batch)
                return
            except Exception as exc:
                if self.db.is_lock_conflict(exc) and conflicts < CONFLICT_RETRIES:
                    conflicts += 1
                    self.conflicts += 1
                    log.info("batch aborted by a lock conflict (%s); retry %d", exc,
                             conflicts)
                    time.sleep(random.uniform(0.0, 0.005 * 2 ** conflicts))
                    continue
                if not (isinstance(exc, self.db.dbapi_error)
                        and all(t.reports_only for t in batch)):
                    raise
                log.warning("report batch failed (%s); retrying once on a fresh "
                            "connection", exc)
                self._commit(batch)
                return

    def _commit(self, batch: list[_Ticket]) -> None:
        reports = [r for t in batch for r in t.reports]
        if all(t.reports_only for t in batch):
            # only reports (the ingest steady state): the bare DB-API transaction
            with self.db.raw_write(hold=True) as cur:
                # commit=True: PostgreSQL sends the COMMIT in the inserts' round trip
                outcomes = self.db.store_reports_cursor(cur, reports, commit=True)
        else:
            with self.db.write() as conn:
                devices = [d for t in batch for d in (t.devices or ())]
                if devices:
                    self.db.add_devices_in(conn, devices)
                # slot blocks before query and phase rows (operations, reports): the
                # lock order of every transaction (uldp.collector.storage.db)
                self._assign(conn, [t for t in batch if t.assign is not None])
                for t in batch:
                    if t.op is not None:
                        t.result = t.op(conn)
                outcomes = self.db.store_reports_in(conn, reports) if reports else []
        i = 0
        for t in batch:
            if t.reports_only:
                t.outcomes = outcomes[i:i + len(t.reports)]
                i += len(t.reports)
        self.batches += 1
        self.items += len(reports)

    def _assign(self, conn: Connection, tickets: list[_Ticket]) -> None:
        """The assignment tickets of one transaction: per query, one batched assignment
        in ticket order; each ticket gets its (query id, device id) -> row dict."""
        by_query: dict[str, list[tuple[str, Any]]] = {}
        for t in tickets:
            t.result = {}
            for qid, dev, place in t.assign or ():
                by_query.setdefault(qid, []).append((dev, place))
        got: dict[tuple[str, str], dict[str, Any] | None] = {}
        # queries in query-id order; each locks only this process's slot blocks (a new
        # block is leased in a transaction of its own: storage.assignments.take_slots)
        for qid in sorted(by_query):
            items = by_query[qid]
            rows = self.db.assign_many_in(conn, qid, [dev for dev, _ in items], items[0][1])
            got.update({(qid, dev): row for dev, row in rows.items()})
        for t in tickets:
            t.result = {(qid, dev): got.get((qid, dev)) for qid, dev, _ in t.assign or ()}
