"""Engine setup, migrations and every SQL statement the collector runs.

SQLite (embedded default): one file in WAL mode with ``synchronous=FULL`` (a commit is on
disk before the collector acknowledges), write transactions ``BEGIN IMMEDIATE``.
PostgreSQL (production, several collector replicas): psycopg 3; the phase row is the
synchronisation point — every report batch updates it (``... WHERE state = 'open'``) in
the same transaction as its inserts, and the replica that flips it to ``closing`` does
so with a conditional update, so exactly one replica aggregates a phase and it sees every
report acknowledged before the flip and none after.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import (
    Connection,
    Engine,
    and_,
    create_engine,
    event,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import make_url

from uldp.collector.storage import schema as S  # noqa: N812

__all__ = [
    "Database",
    "PendingReport",
    "ReportOutcome",
    "StoredReport",
    "judge_stored",
    "now_ms",
    "open_database",
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


class Database:
    """A SQLAlchemy engine plus the collector's operations on it."""

    def __init__(self, url: str, *, pool_size: int = 16, echo: bool = False) -> None:
        u = make_url(url)
        if u.drivername in ("postgresql", "postgres"):
            u = u.set(drivername="postgresql+psycopg")
        self.url = u
        self.is_sqlite = u.get_backend_name() == "sqlite"
        if self.is_sqlite:
            if not u.database or u.database == ":memory:":
                raise ValueError("the collector needs a SQLite *file* (durability)")
            # LIFO: the writer keeps getting the connection it just used, whose page
            # cache is current (a FIFO rotation re-reads pages another connection wrote)
            self.engine: Engine = create_engine(u, pool_size=pool_size, max_overflow=pool_size,
                                                pool_use_lifo=True, echo=echo)
            event.listen(self.engine, "connect", _sqlite_on_connect)
            event.listen(self.engine, "begin", _sqlite_on_begin)
        else:
            self.engine = create_engine(u, pool_size=pool_size, max_overflow=pool_size,
                                        pool_pre_ping=True, echo=echo)
        self._insert = sqlite_dialect.insert if self.is_sqlite else pg_dialect.insert
        self._sql = _report_sql("?" if self.is_sqlite else "%s")
        self._held: Any = None  # the writer thread's connection (raw_write(hold=True))

    # ---- transactions -------------------------------------------------------------
    def write(self) -> Any:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite)."""
        return self.engine.execution_options(sqlite_begin="IMMEDIATE").begin()

    def read(self) -> Any:
        """A read-only connection (autocommit reads; one statement = one snapshot)."""
        return self.engine.connect()

    @property
    def dbapi_error(self) -> type[Exception]:
        """The driver's base exception (``sqlite3.Error`` / ``psycopg.Error``)."""
        return self.engine.dialect.loaded_dbapi.Error  # type: ignore[no-any-return]

    def dispose(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            with contextlib.suppress(Exception):
                held.close()
        self.engine.dispose()

    # ---- schema ---------------------------------------------------------------------
    def migrate(self) -> int:
        """Create or upgrade the schema; safe when several processes start at once."""
        with self.write() as conn:
            if not self.is_sqlite:
                conn.execute(text("SELECT pg_advisory_xact_lock(427311)"))
            S.metadata.create_all(conn, checkfirst=True)
            row = conn.execute(select(S.meta.c.value).where(S.meta.c.key == "schema_version"))
            found = row.scalar()
            version = int(found) if found is not None else 0
            if version == 0:
                conn.execute(insert(S.meta).values(key="schema_version",
                                                   value=str(S.SCHEMA_VERSION)))
                return S.SCHEMA_VERSION
            if version > S.SCHEMA_VERSION:
                raise RuntimeError(f"database schema version {version} is newer than this "
                                   f"collector ({S.SCHEMA_VERSION}); upgrade the collector")
            for v in range(version + 1, S.SCHEMA_VERSION + 1):
                S.MIGRATIONS[v](conn)
            conn.execute(update(S.meta).where(S.meta.c.key == "schema_version")
                         .values(value=str(S.SCHEMA_VERSION)))
            return S.SCHEMA_VERSION

    def get_or_create_meta(self, key: str, make: Any) -> str:
        """The value of ``key``, inserting ``make()`` first if absent (race-safe)."""
        with self.read() as conn:
            v = conn.execute(select(S.meta.c.value).where(S.meta.c.key == key)).scalar()
        if v is not None:
            return v
        with self.write() as conn:
            conn.execute(self._insert(S.meta).values(key=key, value=make())
                         .on_conflict_do_nothing())
            return conn.execute(select(S.meta.c.value).where(S.meta.c.key == key)).scalar_one()

    # ---- devices --------------------------------------------------------------------
    def add_device(self, device_id: str, label: str) -> None:
        with self.write() as conn:
            self.add_device_in(conn, device_id, label)

    def add_devices_in(self, conn: Connection, devices: Sequence[tuple[str, str]]) -> None:
        t = now_ms()
        conn.execute(self._insert(S.devices).on_conflict_do_nothing(),
                     [dict(device_id=d, label=lab[:256], enrolled_at_ms=t) for d, lab in devices])

    def add_device_in(self, conn: Connection, device_id: str, label: str) -> None:
        conn.execute(self._insert(S.devices).values(device_id=device_id, label=label[:256],
                                                    enrolled_at_ms=now_ms())
                     .on_conflict_do_nothing())

    # ---- queries --------------------------------------------------------------------
    def create_query(self, row: dict[str, Any], quotas: Sequence[int],
                     deadline_ms: int) -> tuple[dict[str, Any], bool]:
        """Insert a query and its phases (phase 1 open). Returns (row, created)."""
        with self.write() as conn:
            existing = conn.execute(select(S.queries).where(
                S.queries.c.query_id == row["query_id"])).mappings().first()
            if existing is not None:
                return dict(existing), False
            t = now_ms()
            conn.execute(insert(S.queries).values(**row, created_at_ms=t, next_slot=0,
                                                  finished_at_ms=0, error="", version=0))
            conn.execute(insert(S.phases), [
                dict(query_id=row["query_id"], phase=i + 1,
                     state="open" if i == 0 else "pending", quota=int(q), received=0,
                     opened_at_ms=t if i == 0 else 0, deadline_ms=deadline_ms if i == 0 else 0,
                     closed_at_ms=0, closer="", lease_until_ms=0, published_json="")
                for i, q in enumerate(quotas)])
            created = conn.execute(select(S.queries).where(
                S.queries.c.query_id == row["query_id"])).mappings().one()
            return dict(created), True

    def get_query(self, query_id: str) -> dict[str, Any] | None:
        with self.read() as conn:
            r = conn.execute(select(S.queries).where(S.queries.c.query_id == query_id))
            m = r.mappings().first()
            return dict(m) if m is not None else None

    def list_queries(self, state: str | None = None) -> list[dict[str, Any]]:
        q = select(S.queries).order_by(S.queries.c.created_at_ms, S.queries.c.query_id)
        if state:
            q = q.where(S.queries.c.state == state)
        with self.read() as conn:
            return [dict(m) for m in conn.execute(q).mappings()]

    def running_queries(self) -> list[dict[str, Any]]:
        return self.list_queries("running")

    def get_phases(self, query_id: str) -> list[dict[str, Any]]:
        with self.read() as conn:
            rows = conn.execute(select(S.phases).where(S.phases.c.query_id == query_id)
                                .order_by(S.phases.c.phase)).mappings()
            return [dict(m) for m in rows]

    def assigned_count(self, query_id: str) -> int:
        with self.read() as conn:
            return int(conn.execute(select(func.count()).select_from(S.assignments).where(
                S.assignments.c.query_id == query_id)).scalar_one())

    def cancel_query(self, query_id: str) -> bool:
        with self.write() as conn:
            r = conn.execute(update(S.queries).where(and_(
                S.queries.c.query_id == query_id, S.queries.c.state == "running"))
                .values(state="cancelled", finished_at_ms=now_ms(),
                        version=S.queries.c.version + 1))
            if r.rowcount != 1:
                return False
            conn.execute(update(S.phases).where(and_(
                S.phases.c.query_id == query_id,
                S.phases.c.state.in_(("open", "pending", "closing"))))
                .values(state="cancelled", closed_at_ms=now_ms()))
            return True

    # ---- assignment -----------------------------------------------------------------
    def get_assignment(self, query_id: str, device_id: str) -> dict[str, Any] | None:
        with self.read() as conn:
            m = conn.execute(select(S.assignments).where(and_(
                S.assignments.c.query_id == query_id,
                S.assignments.c.device_id == device_id))).mappings().first()
            return dict(m) if m is not None else None

    def get_assignments(self, query_id: str, device_ids: Sequence[str]) -> list[dict[str, Any]]:
        a = S.assignments.c
        with self.read() as conn:
            return [dict(m) for m in conn.execute(select(S.assignments).where(and_(
                a.query_id == query_id, a.device_id.in_(set(device_ids))))).mappings()]

    def stored_report(self, query_id: str, device_id: str) -> StoredReport | None:
        """The report stored for (query, device), if any."""
        r = S.reports.c
        with self.read() as conn:
            row = conn.execute(select(r.phase, r.payload, r.received_at_ms).where(and_(
                r.query_id == query_id, r.device_id == device_id))).first()
        return _stored_row(row)

    def device_status(self, query_id: str, device_id: str) -> tuple[dict[str, Any] | None, bool]:
        """(assignment or None, whether a report of this device is stored)."""
        a, r = S.assignments, S.reports
        stmt = (select(a, r.c.phase.label("reported_phase"))
                .select_from(a.outerjoin(r, and_(r.c.query_id == a.c.query_id,
                                                 r.c.device_id == a.c.device_id)))
                .where(and_(a.c.query_id == query_id, a.c.device_id == device_id)))
        with self.engine.connect() as conn:
            m = conn.execute(stmt).mappings().first()
        if m is None:
            return None, False
        row = dict(m)
        reported = row.pop("reported_phase") is not None
        return row, reported

    def assign(self, query_id: str, device_id: str, place: Any) -> dict[str, Any] | None:
        """The device's assignment, creating it from the next free slot if needed.

        ``place(slot) -> (grp, stage, phase)`` maps a slot to its public assignment. Returns
        None when the query is not running or all its slots are taken.
        """
        with self.write() as conn:
            return self.assign_in(conn, query_id, device_id, place)

    def assign_in(self, conn: Connection, query_id: str, device_id: str,
                  place: Any) -> dict[str, Any] | None:
        m = conn.execute(select(S.assignments).where(and_(
            S.assignments.c.query_id == query_id,
            S.assignments.c.device_id == device_id))).mappings().first()
        if m is not None:
            return dict(m)
        r = conn.execute(update(S.queries).where(and_(
            S.queries.c.query_id == query_id, S.queries.c.state == "running",
            S.queries.c.next_slot < S.queries.c.target_users))
            .values(next_slot=S.queries.c.next_slot + 1)
            .returning(S.queries.c.next_slot)).first()
        if r is None:
            return None
        slot = int(r[0]) - 1
        grp, stage, phase = place(slot)
        row = dict(query_id=query_id, device_id=device_id, slot=slot, grp=int(grp),
                   stage=int(stage), phase=int(phase), assigned_at_ms=now_ms())
        conn.execute(insert(S.assignments).values(**row))
        return row

    def assign_many_in(self, conn: Connection, query_id: str, device_ids: Sequence[str],
                       place: Any) -> dict[str, dict[str, Any] | None]:
        """Batched :meth:`assign_in` for many devices of one query (3-4 statements)."""
        out: dict[str, dict[str, Any] | None] = {}
        a = S.assignments.c
        for m in conn.execute(select(S.assignments).where(and_(
                a.query_id == query_id, a.device_id.in_(set(device_ids))))).mappings():
            out[m["device_id"]] = dict(m)
        new = list(dict.fromkeys(d for d in device_ids if d not in out))
        if not new:
            return out
        q = S.queries.c
        stmt = select(q.next_slot, q.target_users, q.state).where(q.query_id == query_id)
        if not self.is_sqlite:
            stmt = stmt.with_for_update()
        r = conn.execute(stmt).first()
        if r is None or r[2] != "running":
            return {**out, **{d: None for d in new}}
        first, target = int(r[0]), int(r[1])
        k = max(0, min(len(new), target - first))
        if k:
            conn.execute(update(S.queries).where(q.query_id == query_id)
                         .values(next_slot=first + k))
            t = now_ms()
            rows = []
            for j, dev in enumerate(new[:k]):
                grp, stage, phase = place(first + j)
                rows.append(dict(query_id=query_id, device_id=dev, slot=first + j,
                                 grp=int(grp), stage=int(stage), phase=int(phase),
                                 assigned_at_ms=t))
            conn.execute(insert(S.assignments), rows)
            out.update({row["device_id"]: row for row in rows})
        out.update({d: None for d in new[k:]})
        return out

    # ---- reports (group commit) -----------------------------------------------------
    def store_reports(self, items: Sequence[PendingReport]) -> list[ReportOutcome]:
        """Commit a batch of reports in one transaction; one outcome per item."""
        with self.raw_write() as cur:
            return self.store_reports_cursor(cur, items)

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

    def store_reports_cursor(self, cur: Any,
                             items: Sequence[PendingReport]) -> list[ReportOutcome]:
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

        PostgreSQL first tries all of it as one pipelined round trip (guards, then one
        statement inserting and counting) under a savepoint; if a phase turns out not to
        be open or a row conflicts (a retry), it rolls back to the savepoint and takes the
        statement-by-statement path, which says which phase or report was refused.
        """
        out: list[ReportOutcome | None] = [None] * len(items)
        t = now_ms()
        sql = self._sql
        by_phase: dict[tuple[str, int], list[int]] = {}
        for i, it in enumerate(items):
            by_phase.setdefault((it.query_id, it.phase), []).append(i)
        phases = sorted(by_phase)
        inserted: Any = None  # container of the (query, device) keys inserted
        counted = False  # the pipelined statement counted its inserts
        if not self.is_sqlite:
            rows, first_of, later = _first_reports(items, [by_phase[k] for k in phases])
            if self._pg_pipelined(cur, phases, rows, t):
                inserted, counted = first_of.keys(), True
        if inserted is None:
            open_groups = []
            for (qid, ph) in phases:
                cur.execute(sql["guard"], (qid, ph))
                if cur.rowcount == 1:
                    open_groups.append(by_phase[(qid, ph)])
                    continue
                cur.execute(sql["phase_state"], (qid, ph))
                found = cur.fetchone()
                msg = (f"phase {ph} of query {qid} is not open (state: {found[0]})"
                       if found else f"query {qid} has no phase {ph}")
                for i in by_phase[(qid, ph)]:
                    # the stored report is looked up before the phase refusal: an identical
                    # re-send after the phase closed (lost acknowledgement) is a duplicate
                    it = items[i]
                    cur.execute(sql["stored"], (it.query_id, it.device_id))
                    out[i] = (judge_stored(it, _stored_row(cur.fetchone()))
                              or ReportOutcome("FAILED_PRECONDITION", msg))
            rows, first_of, later = _first_reports(items, open_groups)
            inserted = self._insert_reports(cur, rows, t)
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
        conflicts.extend(later)
        for i in conflicts:
            it = items[i]
            if (it.query_id, it.device_id) in inserted and i in later_set:
                first = items[first_of[(it.query_id, it.device_id)]]
                stored = StoredReport(first.phase, first.payload, t)
            else:
                cur.execute(sql["stored"], (it.query_id, it.device_id))
                stored = _stored_row(cur.fetchone())
            # ON CONFLICT DO NOTHING skipped the row: it exists and this transaction sees it
            out[i] = judge_stored(it, stored) or ReportOutcome(
                "INTERNAL", "report conflicted but no stored report was found")
        if not counted:
            for (qid, ph), c in counts.items():
                cur.execute(sql["count"], (c, qid, ph))
        return [o if o is not None else ReportOutcome("INTERNAL", "not processed")
                for o in out]

    def _insert_reports(self, cur: Any, rows: list[PendingReport],
                        t: int) -> set[tuple[str, str]]:
        """Insert ``rows`` (ON CONFLICT DO NOTHING); the (query, device) keys inserted."""
        sql = self._sql
        if not rows:
            return set()
        if not self.is_sqlite:  # PostgreSQL: one column array per field
            cur.execute(sql["insert_unnest"], _report_arrays(rows, t))
            return {(r[0], r[1]) for r in cur.fetchall()}
        inserted: set[tuple[str, str]] = set()
        for s0 in range(0, len(rows), _INSERT_CHUNK):  # SQLite: multi-row VALUES
            chunk = rows[s0:s0 + _INSERT_CHUNK]
            params: list[Any] = []
            for it in chunk:
                params += (it.query_id, it.device_id, it.phase, it.grp, it.stage,
                           it.slot, it.payload, t)
            cur.execute(sql["insert_head"] + ",".join([sql["insert_row"]] * len(chunk))
                        + sql["insert_tail"], params)
            inserted.update((r[0], r[1]) for r in cur.fetchall())
        return inserted

    def _pg_pipelined(self, cur: Any, phases: list[tuple[str, int]],
                      rows: list[PendingReport], t: int) -> bool:
        """PostgreSQL: guards + insert-and-count in one pipelined round trip under a
        savepoint. True if every phase was open and every row was new (all inserted and
        counted); otherwise False, rolled back to the savepoint."""
        sql = self._sql
        conn = cur.connection
        guards = [conn.cursor() for _ in phases]
        ins = conn.cursor()
        try:
            with conn.pipeline():
                cur.execute("SAVEPOINT uldp_ingest")
                for g, (qid, ph) in zip(guards, phases, strict=True):
                    g.execute(sql["guard"], (qid, ph))
                if rows:
                    ins.execute(sql["insert_count"], _report_arrays(rows, t))
            n = ins.fetchone()[0] if rows else 0
            if n != len(rows) or any(g.rowcount != 1 for g in guards):
                # a phase is not open, or a device already has a stored report
                cur.execute("ROLLBACK TO SAVEPOINT uldp_ingest")
                return False
            return True
        finally:
            for c in (*guards, ins):
                c.close()

    # ---- phase closing --------------------------------------------------------------
    def phases_due(self, t: int | None = None) -> list[tuple[str, int]]:
        """Open phases whose quota is in or deadline passed, and closings whose lease
        expired (their closer died)."""
        t = now_ms() if t is None else t
        p = S.phases.c
        with self.read() as conn:
            rows = conn.execute(select(p.query_id, p.phase).where(or_(
                and_(p.state == "open", or_(p.received >= p.quota, p.deadline_ms <= t)),
                and_(p.state == "closing", p.lease_until_ms <= t))))
            return [(r[0], int(r[1])) for r in rows]

    def begin_close(self, query_id: str, phase: int, closer: str, lease_ms: int,
                    force: bool = False) -> bool:
        """Atomically claim the aggregation of a due phase, or take over one whose
        closing lease expired; True for exactly one caller. The claim is a lease until
        now + ``lease_ms`` that its holder renews (:meth:`renew_lease`) while it works;
        :meth:`finish_close` only succeeds for the current holder, so a phase is closed
        exactly once even when a slow holder loses it to another replica."""
        t = now_ms()
        p = S.phases.c
        due = or_(p.received >= p.quota, p.deadline_ms <= t) if not force else text("1=1")
        with self.write() as conn:
            r = conn.execute(update(S.phases).where(and_(
                p.query_id == query_id, p.phase == phase,
                or_(and_(p.state == "open", due),
                    and_(p.state == "closing", p.lease_until_ms <= t))))
                .values(state="closing", closer=closer, lease_until_ms=t + lease_ms))
            return r.rowcount == 1

    def renew_lease(self, query_id: str, phase: int, closer: str, lease_ms: int) -> bool:
        """Extend the closing lease ``closer`` holds to now + ``lease_ms``; False if it
        no longer holds it (another replica took the phase over)."""
        p = S.phases.c
        with self.write() as conn:
            r = conn.execute(update(S.phases).where(and_(
                p.query_id == query_id, p.phase == phase, p.state == "closing",
                p.closer == closer)).values(lease_until_ms=now_ms() + lease_ms))
            return r.rowcount == 1

    def expire_leases(self, owned: Any, keep: str) -> list[tuple[str, int]]:
        """Expire at once the closing leases whose holder ``owned(closer)`` says is an
        earlier incarnation of this replica (other than ``keep``, the current one): it
        was killed mid-close and cannot still be working. Returns the phases freed."""
        p = S.phases.c
        with self.read() as conn:
            held = conn.execute(select(p.query_id, p.phase, p.closer)
                                .where(p.state == "closing")).all()
        freed = []
        for qid, ph, closer in held:
            if closer == keep or not owned(closer):
                continue
            with self.write() as conn:
                r = conn.execute(update(S.phases).where(and_(
                    p.query_id == qid, p.phase == ph, p.state == "closing",
                    p.closer == closer)).values(lease_until_ms=0))
                if r.rowcount == 1:
                    freed.append((str(qid), int(ph)))
        return freed

    def report_blocks(self, query_id: str, phase: int, target_users: int,
                      window: int = 1 << 17) -> Iterator[tuple[int, int, int, bytes]]:
        """Yield (grp, stage, count, concatenated payloads) per group and slot window.

        The database concatenates the payloads of ``window`` consecutive slots per group
        (index range scan on (query, phase, slot)), so Python touches a few large byte
        strings instead of one object per report; memory is bounded by the window.
        """
        if self.is_sqlite:
            sql = ("SELECT grp, stage, count(*), group_concat(hex(payload), '') FROM "
                   "uldp_reports WHERE query_id = ? AND phase = ? AND slot >= ? AND slot < ? "
                   "GROUP BY grp, stage")
        else:
            sql = ("SELECT grp, stage, count(*), string_agg(payload, ''::bytea) FROM "
                   "uldp_reports WHERE query_id = %s AND phase = %s AND slot >= %s "
                   "AND slot < %s GROUP BY grp, stage")
        raw = self.engine.raw_connection()
        try:
            cur = raw.cursor()
            for lo in range(0, max(target_users, 1), window):
                cur.execute(sql, (query_id, phase, lo, lo + window))
                for g, st, n, blob in cur.fetchall():
                    data = bytes.fromhex(blob) if self.is_sqlite else bytes(blob)
                    yield int(g), int(st), int(n), data
            cur.close()
            if not self.is_sqlite:
                raw.rollback()
        finally:
            raw.close()

    def stream_reports(self, query_id: str, phase: int, chunk: int = 65536,
                       with_slots: bool = True
                       ) -> Iterator[tuple[int, int, list[int], list[bytes]]]:
        """Yield (grp, stage, slots, payloads) chunks of a phase's reports, one group per
        chunk. Memory is bounded by ``chunk`` rows: a raw DBAPI cursor (server-side on
        PostgreSQL) fetched ``chunk`` rows at a time, bucketed by group in numpy."""
        cols = "grp, stage, slot, payload" if with_slots else "grp, stage, payload"
        sql = f"SELECT {cols} FROM uldp_reports WHERE query_id = %s AND phase = %s"
        raw = self.engine.raw_connection()
        try:
            if self.is_sqlite:
                cur = raw.cursor()
                cur.execute(sql.replace("%s", "?"), (query_id, phase))
            else:
                cur = raw.driver_connection.cursor(name=f"uldp_stream_{secrets.token_hex(6)}")
                cur.itersize = chunk
                cur.execute(sql, (query_id, phase))
            while True:
                rows = cur.fetchmany(chunk)
                if not rows:
                    break
                cols_ = list(zip(*rows, strict=True))
                grps = np.fromiter(cols_[0], dtype=np.int64, count=len(rows))
                stages = cols_[1]
                slots = cols_[2] if with_slots else ()
                payloads = cols_[-1]
                uniq = np.unique(grps)
                for g in uniq:
                    idx = np.flatnonzero(grps == g) if uniq.size > 1 else range(len(rows))
                    yield (int(g), int(stages[idx[0]]),
                           [int(slots[i]) for i in idx] if with_slots else [],
                           [bytes(payloads[i]) for i in idx])
            cur.close()
            if not self.is_sqlite:
                raw.rollback()
        finally:
            raw.close()

    def finish_close(self, query_id: str, phase: int, closer: str, published: dict[str, Any],
                     *, next_deadline_ms: int | None, result: dict[str, Any] | None) -> bool:
        """Publish a closed phase and open the next one (or store the result)."""
        t = now_ms()
        p = S.phases.c
        with self.write() as conn:
            r = conn.execute(update(S.phases).where(and_(
                p.query_id == query_id, p.phase == phase, p.state == "closing",
                p.closer == closer))
                .values(state="closed", closed_at_ms=t,
                        published_json=json.dumps(published, sort_keys=True)))
            if r.rowcount != 1:
                return False  # lost the lease to another replica
            q = S.queries.c
            if result is None:
                conn.execute(update(S.phases).where(and_(p.query_id == query_id,
                                                         p.phase == phase + 1))
                             .values(state="open", opened_at_ms=t,
                                     deadline_ms=next_deadline_ms or t))
                conn.execute(update(S.queries).where(and_(q.query_id == query_id,
                                                          q.state == "running"))
                             .values(current_phase=phase + 1, version=q.version + 1))
            else:
                conn.execute(update(S.queries).where(and_(q.query_id == query_id,
                                                          q.state == "running"))
                             .values(state="done", current_phase=0, finished_at_ms=t,
                                     result_json=json.dumps(result, sort_keys=True),
                                     version=q.version + 1))
            return True

    def fail_close(self, query_id: str, phase: int, closer: str, error: str) -> bool:
        """Fail the query whose phase ``closer`` is closing, if it still holds the lease
        (a replica that lost the phase to another must not fail it)."""
        p, q = S.phases.c, S.queries.c
        t = now_ms()
        with self.write() as conn:
            r = conn.execute(update(S.phases).where(and_(
                p.query_id == query_id, p.phase == phase, p.state == "closing",
                p.closer == closer)).values(state="cancelled", closed_at_ms=t))
            if r.rowcount != 1:
                return False
            conn.execute(update(S.queries).where(and_(q.query_id == query_id,
                                                      q.state == "running"))
                         .values(state="failed", error=error[:2000], finished_at_ms=t,
                                 version=q.version + 1))
            conn.execute(update(S.phases).where(and_(
                p.query_id == query_id, p.state.in_(("open", "pending", "closing"))))
                .values(state="cancelled", closed_at_ms=t))
            return True

    def published(self, query_id: str, phase: int) -> dict[str, Any]:
        with self.read() as conn:
            v = conn.execute(select(S.phases.c.published_json).where(and_(
                S.phases.c.query_id == query_id, S.phases.c.phase == phase))).scalar()
        return json.loads(v) if v else {}

    def checkpoint(self) -> None:
        """SQLite: copy the WAL back into the database file without blocking writers
        (PASSIVE); called periodically off the request path. No-op on PostgreSQL."""
        if not self.is_sqlite:
            return
        raw = self.engine.raw_connection()
        try:
            raw.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            raw.close()

    # ---- diagnostics (tests, benchmarks) --------------------------------------------
    def table_counts(self) -> dict[str, int]:
        out = {}
        with self.read() as conn:
            for t in (S.devices, S.queries, S.phases, S.assignments, S.reports):
                out[t.name] = int(conn.execute(select(func.count()).select_from(t)).scalar_one())
        return out

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the mutable tables, for 'nothing changed' assertions."""
        out: dict[str, list[tuple[Any, ...]]] = {}
        with self.read() as conn:
            for t in (S.queries, S.phases, S.assignments, S.reports):
                rows = conn.execute(select(t)).all()
                out[t.name] = sorted(tuple(r) for r in rows)
        return out


def _stored_row(row: Any) -> StoredReport | None:
    """A ``stored`` statement's row (phase, payload, received_at_ms) as a StoredReport."""
    return None if row is None else StoredReport(int(row[0]), bytes(row[1]), int(row[2]))


def judge_stored(item: PendingReport, stored: StoredReport | None) -> ReportOutcome | None:
    """The answer to ``item`` given the report already stored for its (query, device):
    None if nothing is stored; OK with ``duplicate`` if the stored report is identical
    (same phase, same payload bytes; the task digest was checked against the same
    assignment before), ALREADY_EXISTS otherwise. Independent of the phase's state, so
    a re-send after the phase closed gets the same answer as one while it is open."""
    if stored is None:
        return None
    if stored.phase == item.phase and stored.payload == item.payload:
        return ReportOutcome("OK", "identical report already stored; nothing changed",
                             True, stored.received_at_ms)
    return ReportOutcome(
        "ALREADY_EXISTS",
        f"device {item.device_id} already has a different report stored for query "
        f"{item.query_id} (phase {stored.phase}); one report per device per query")


def _first_reports(items: Sequence[PendingReport], groups: list[list[int]]
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


def _report_arrays(rows: list[PendingReport], t: int) -> tuple[list[Any], ...]:
    """The column arrays of the PostgreSQL ``unnest`` inserts."""
    return ([it.query_id for it in rows], [it.device_id for it in rows],
            [it.phase for it in rows], [it.grp for it in rows], [it.stage for it in rows],
            [it.slot for it in rows], [it.payload for it in rows], [t] * len(rows))


#: rows per multi-row INSERT (8 parameters each; SQLite allows 32766, PostgreSQL 65535)
_INSERT_CHUNK = 1000


def _report_sql(mark: str) -> dict[str, str]:
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


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _sqlite_on_begin)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=60000")
    # no checkpoint inside a commit (latency spikes on the acknowledging path): the
    # collector's background thread checkpoints instead (Database.checkpoint)
    cur.execute("PRAGMA wal_autocheckpoint=0")
    cur.close()


def _sqlite_on_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def open_database(url: str, **kw: Any) -> Database:
    """Open (and create/migrate) the collector database at ``url``.

    ``url`` is an SQLAlchemy URL (``sqlite:////var/lib/uldp/collector.db``,
    ``postgresql://user@host:5432/uldp``) or a plain file path (SQLite).
    """
    if "://" not in url:
        url = "sqlite:///" + url
    db = Database(url, **kw)
    db.migrate()
    return db
