"""The ingest hot path: devices and report commits.

See ``docs/architecture.md`` ("Storage"). A mixin of
:class:`uldp.collector.storage.db.Database`. Every report batch updates its phase row
(``... WHERE state = 'open'``) in the same transaction as its inserts, so a report is
committed only while its phase is open; one report per (query, device) is a unique key.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, and_, func, select

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.base import Tables
from uldp.collector.storage.records import (
    INSERT_CHUNK,
    PendingReport,
    ReportOutcome,
    StoredReport,
    first_reports,
    judge_stored,
    now_ms,
    phase_lock_key,
    report_array_literals,
    report_arrays,
    report_params,
    stored_row,
)

__all__ = ["IngestTables"]


class IngestTables(Tables):
    """Statements on the ``devices`` and ``reports`` tables (assignments:
    :mod:`uldp.collector.storage.assignments`)."""

    def add_device(self, device_id: str, label: str) -> None:
        with self.write() as conn:
            self.add_device_in(conn, device_id, label)

    def add_devices_in(self, conn: Connection, devices: Sequence[tuple[str, str]]) -> None:
        """Add registry rows (an id already there is kept as it is) and count the new ones
        in this process's row of ``device_counts``, in the same transaction."""
        if not devices:
            return
        t = now_ms()
        added = conn.execute(
            self._insert(S.devices).on_conflict_do_nothing().returning(S.devices.c.device_id),
            [dict(device_id=d, label=lab[:256], enrolled_at_ms=t) for d, lab in devices]
        ).all()
        self.count_devices_in(conn, len(added))

    def add_device_in(self, conn: Connection, device_id: str, label: str) -> None:
        self.add_devices_in(conn, [(device_id, label)])

    def count_devices_in(self, conn: Connection, n: int) -> None:
        """Add ``n`` to this process's enrolled-devices counter (merged on read: no two
        replicas write the same counter row)."""
        if n:
            ins = self._insert(S.device_counts).values(writer=self.writer_id, enrolled=n)
            conn.execute(ins.on_conflict_do_update(
                index_elements=[S.device_counts.c.writer],
                set_=dict(enrolled=S.device_counts.c.enrolled + ins.excluded.enrolled)))

    def enrolled_devices(self, conn: Connection | None = None) -> int:
        """Devices in the registry: the sum of every writer's counter (no count of the
        registry itself, whose rows grow with the users)."""
        stmt = select(func.coalesce(func.sum(S.device_counts.c.enrolled), 0))
        if conn is not None:
            return int(conn.execute(stmt).scalar_one())
        with self.read() as c:
            return int(c.execute(stmt).scalar_one())

    def stored_report(self, query_id: str, device_id: str) -> StoredReport | None:
        """The report stored for (query, device), if any."""
        r = S.reports.c
        with self.read() as conn:
            row = conn.execute(select(r.phase, r.payload, r.received_at_ms, r.vbytes).where(and_(
                r.query_id == query_id, r.device_id == device_id))).first()
        return stored_row(row)

    def store_reports(self, items: Sequence[PendingReport]) -> list[ReportOutcome]:
        """Commit a batch of reports in one transaction; one outcome per item."""
        with self.raw_write() as cur:
            return self.store_reports_cursor(cur, items, commit=True)

    def store_reports_in(self, conn: Connection,
                         items: Sequence[PendingReport]) -> list[ReportOutcome]:
        """:meth:`store_reports_cursor` inside the SQLAlchemy transaction ``conn``."""
        cur = conn.connection.cursor()
        try:
            return self.store_reports_cursor(cur, items)
        finally:
            cur.close()

    @contextlib.contextmanager
    def raw_write(self, hold: bool = False) -> Iterator[Any]:
        """A write transaction on a bare DB-API connection, yielding a cursor: the ingest
        fast path of the group-commit writer (no per-transaction SQLAlchemy events).
        ``BEGIN IMMEDIATE`` on SQLite; psycopg begins implicitly.

        ``hold=True`` (the writer thread only) keeps the connection between transactions
        instead of returning it to the pool: no pool checkout, and on PostgreSQL no
        pre-ping round trip per commit. After any failure the held connection is
        invalidated and the next transaction takes a fresh one."""
        raw = self._held if hold else None
        if raw is None:
            raw = self.engine.raw_connection()
        try:
            cur = raw.cursor()
            if self.is_sqlite:
                cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                raw.rollback()
                raise
            raw.commit()
            cur.close()
        except BaseException:
            if hold:
                self._held = None
                with contextlib.suppress(Exception):
                    raw.invalidate()  # possibly broken: never reuse it
            raise
        finally:
            if not hold:
                raw.close()  # back to the pool
        if hold:
            self._held = raw

    def store_reports_cursor(self, cur: Any, items: Sequence[PendingReport],
                             commit: bool = False) -> list[ReportOutcome]:
        """Store validated reports with the DB-API cursor ``cur`` of an open write
        transaction.

        This is the ingest hot path, so it runs fixed SQL on the driver directly
        (SQLAlchemy's per-statement compilation costs ~60 µs per report at typical
        group-commit sizes). Per (query, phase): a guard update on the phase row
        (which must be open; it also serialises with a replica closing the phase), the
        inserts (``ON CONFLICT DO NOTHING RETURNING``), and one ``received += n``. A
        conflicting (query, device) is a duplicate: OK if the stored bytes are
        identical, ALREADY_EXISTS otherwise (:func:`judge_stored`). A report for a phase
        that is not open is judged against the stored report first, the same way (an
        identical re-send after the phase closed is an OK duplicate), and only refused
        with FAILED_PRECONDITION when nothing is stored for its (query, device).

        PostgreSQL first sends all of it as one pipelined round trip of a fixed number of
        statements whatever the batch holds (:meth:`_pg_one_trip`: the shared locks of
        every phase in one statement, then one statement inserting only the rows of open
        phases and counting them, and with ``commit=True`` — the writer's own
        transaction — the COMMIT): no savepoint, no per-phase statements, no second round
        trip. Everything it stored is correct as it stands; the reports it did not insert
        (a phase not open, a row already stored: retries) then take the
        statement-by-statement path, which says which phase or report was refused (after
        the commit, in the next transaction, with ``commit=True``).

        No phase row is written: the phase's state is read under its shared advisory lock
        (:meth:`phase_open`) and the reports are counted in this process's own row of
        ``phase_counts`` (:meth:`count_in`), so replicas committing reports of one phase
        never wait on each other (issue 28).
        """
        out: list[ReportOutcome | None] = [None] * len(items)
        t = now_ms()
        rest: Sequence[int] = range(len(items))  # left to the slow path
        if not self.is_sqlite and items:
            rest = self._pg_one_trip(cur, items, out, t, commit)
        if rest:
            sub = [items[i] for i in rest]
            for i, o in zip(rest, self._store_slow(cur, sub, t), strict=True):
                out[i] = o
        return [o if o is not None else ReportOutcome("INTERNAL", "not processed")
                for o in out]

    def _store_slow(self, cur: Any, items: Sequence[PendingReport],
                    t: int) -> list[ReportOutcome | None]:
        """Statement by statement: guard each phase, insert the first report of each
        (query, device) of the open phases, judge the rest against the stored reports,
        count the inserts."""
        out: list[ReportOutcome | None] = [None] * len(items)
        by_phase: dict[tuple[str, int], list[int]] = {}
        for i, it in enumerate(items):
            by_phase.setdefault((it.query_id, it.phase), []).append(i)
        open_groups = self._guard_phases(cur, items, by_phase, out)
        rows, first_of, later = first_reports(items, open_groups)
        inserted = self._insert_reports(cur, rows, t)
        counts = self._judge_inserts(cur, items, first_of, later, inserted, out, t)
        for (qid, ph), c in counts.items():
            self.count_in(cur, qid, ph, received=c)
        return out

    def phase_open(self, cur: Any, query_id: str, phase: int) -> str | None:
        """The state of a phase (None: no such phase), read so that it stays what it is
        until this transaction ends: PostgreSQL takes the phase's advisory lock shared
        first (the closer takes it exclusively to flip the state), SQLite serializes
        writers anyway. Report commits of every replica share it: no row lock, no wait."""
        if not self.is_sqlite:
            cur.execute(self._sql["lock"], (phase_lock_key(query_id, phase),))
        cur.execute(self._sql["phase_state"], (query_id, phase))
        found = cur.fetchone()
        return None if found is None else str(found[0])

    def count_in(self, cur: Any, query_id: str, phase: int, *, received: int = 0,
                 declined: int = 0) -> None:
        """Add to this process's own counter row of a phase (merged on read)."""
        cur.execute(self._sql["count"], (query_id, phase, self.writer_id, received, declined))

    def _guard_phases(self, cur: Any, items: Sequence[PendingReport],
                      by_phase: dict[tuple[str, int], list[int]],
                      out: list[ReportOutcome | None]) -> list[list[int]]:
        """Guard each (query, phase); the item groups of open phases. Items of a phase
        that is not open are judged against their stored report first (an identical
        re-send after the phase closed is a duplicate), else FAILED_PRECONDITION."""
        sql = self._sql
        open_groups = []
        for (qid, ph) in sorted(by_phase):
            state = self.phase_open(cur, qid, ph)
            if state == "open":
                open_groups.append(by_phase[(qid, ph)])
                continue
            msg = (f"phase {ph} of query {qid} is not open (state: {state})"
                   if state else f"query {qid} has no phase {ph}")
            for i in by_phase[(qid, ph)]:
                it = items[i]
                cur.execute(sql["stored"], (it.query_id, it.device_id))
                out[i] = (judge_stored(it, stored_row(cur.fetchone()))
                          or ReportOutcome("FAILED_PRECONDITION", msg))
        return open_groups

    def _judge_inserts(self, cur: Any, items: Sequence[PendingReport],
                       first_of: dict[tuple[str, str], int], later: list[int],
                       inserted: Any, out: list[ReportOutcome | None],
                       t: int) -> dict[tuple[str, int], int]:
        """Outcomes of the inserted reports and of the conflicting ones (judged against
        the stored report); returns the reports counted per (query, phase)."""
        counts: dict[tuple[str, int], int] = {}
        conflicts: list[int] = []
        for key, i in first_of.items():
            if key in inserted:
                out[i] = ReportOutcome("OK", "stored", False, t)
                k = (items[i].query_id, items[i].phase)
                counts[k] = counts.get(k, 0) + 1
            else:
                conflicts.append(i)
        later_set = set(later)
        for i in conflicts + list(later):
            it = items[i]
            if (it.query_id, it.device_id) in inserted and i in later_set:
                first = items[first_of[(it.query_id, it.device_id)]]
                stored: StoredReport | None = StoredReport(first.phase, first.payload, t,
                                                           first.vbytes)
            else:
                cur.execute(self._sql["stored"], (it.query_id, it.device_id))
                stored = stored_row(cur.fetchone())
            # ON CONFLICT DO NOTHING skipped the row: it exists and this transaction sees it
            out[i] = judge_stored(it, stored) or ReportOutcome(
                "INTERNAL", "report conflicted but no stored report was found")
        return counts

    def _insert_reports(self, cur: Any, rows: list[PendingReport],
                        t: int) -> set[tuple[str, str]]:
        """Insert ``rows`` (ON CONFLICT DO NOTHING); the (query, device) keys inserted."""
        sql = self._sql
        if not rows:
            return set()
        if not self.is_sqlite:  # PostgreSQL: one column array per field
            cur.execute(sql["insert_unnest"], report_arrays(rows, t))
            return {(r[0], r[1]) for r in cur.fetchall()}
        inserted: set[tuple[str, str]] = set()
        for s0 in range(0, len(rows), INSERT_CHUNK):  # SQLite: multi-row VALUES
            chunk = rows[s0:s0 + INSERT_CHUNK]
            params: list[Any] = []
            for it in chunk:
                params += report_params(it, t)
            cur.execute(sql["insert_head"] + ",".join([sql["insert_row"]] * len(chunk))
                        + sql["insert_tail"], params)
            inserted.update((r[0], r[1]) for r in cur.fetchall())
        return inserted

    def _pg_one_trip(self, cur: Any, items: Sequence[PendingReport],
                     out: list[ReportOutcome | None], t: int, commit: bool) -> list[int]:
        """PostgreSQL: the shared locks of the batch's phases, then the first report of
        each (query, device) inserted if its phase is open and nothing is stored for it,
        counted in this writer's rows of ``phase_counts`` (and with ``commit`` the
        COMMIT), all in one pipelined round trip of at most three statements. Sets the
        outcome of every inserted report; returns the indices of the others, for
        :meth:`_store_slow`."""
        keys = sorted({phase_lock_key(it.query_id, it.phase) for it in items})
        rows, first_of, _ = first_reports(items, [list(range(len(items)))])
        conn = cur.connection
        ins = conn.cursor()
        try:
            with conn.pipeline():
                cur.execute(self._sql["lock_many"], (keys,))
                ins.execute(self._sql["insert_open"], (*report_array_literals(rows, t),
                                                       self.writer_id))
                if commit:
                    # a statement, not conn.commit(): that would sync the pipeline (one
                    # more wait); the server ends the transaction all the same
                    cur.execute("COMMIT")
            inserted = {(r[0], r[1]) for r in ins.fetchall()}
        finally:
            ins.close()
        for key in inserted:
            out[first_of[key]] = ReportOutcome("OK", "stored", False, t)
        return [i for i, o in enumerate(out) if o is None]
