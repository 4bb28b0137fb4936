"""Closing a phase: leases, streaming its reports, publishing its result.

See ``docs/architecture.md`` ("Storage"). A mixin of
:class:`uldp.collector.storage.db.Database`. ``begin_close`` is a conditional update, so
exactly one replica holds a phase's closing lease; every later write is conditional on
still holding it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import and_, or_, select, text, update

from uldp.collector.estimators.reductions import WindowCounts, WindowPieces, WindowSums
from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.base import Tables
from uldp.collector.storage.catalog import quota_in
from uldp.collector.storage.records import VALUE_DTYPES, now_ms, phase_lock_key

__all__ = ["ROWS_PER_BLOCK", "SQLITE_STREAM_BYTES", "STREAM_BYTES", "WINDOW_BLOCKS",
           "WINDOW_SLOTS", "ClosingTables", "ReportBlock", "Window"]

#: PostgreSQL: heap blocks of one close window at most (128 MiB of 8 KiB blocks)
WINDOW_BLOCKS = 1 << 14
#: PostgreSQL: rows a heap block holds at most (MaxHeapTuplesPerPage of 8 KiB blocks)
ROWS_PER_BLOCK = 291
#: SQLite: enrolment slots of one close window at most
WINDOW_SLOTS = 1 << 18
#: PostgreSQL: bytes of reports one streamed window concatenates, about
STREAM_BYTES = 2 << 20
#: SQLite: bytes of reports one streamed window returns (row by row), at most
SQLITE_STREAM_BYTES = 16 << 20


@dataclass(frozen=True)
class Window:
    """A slice of a closing phase's reports read by one statement: heap blocks
    ``[lo, hi)`` of the query's partition (PostgreSQL) or enrolment slots ``[lo, hi)``
    (SQLite)."""

    lo: int
    hi: int


@dataclass(frozen=True)
class ReportBlock:
    """The reports of one (group, stage) in a window, stored at ``vbytes`` per value."""

    grp: int
    stage: int
    vbytes: int
    count: int
    payload: bytes
    slots: np.ndarray | None

    def reports(self) -> np.ndarray:
        """The reports as a ``(count, width)`` array of their stored integer type (an
        accumulator widens them to int64 where its sums need it)."""
        vals = np.frombuffer(self.payload, VALUE_DTYPES[self.vbytes])
        return vals.reshape(self.count, -1) if self.count else vals.reshape(0, 0)




class ClosingTables(Tables):
    """Statements that close phases (leases, report streams, results)."""

    def begin_close(self, query_id: str, phase: int, closer: str, lease_ms: int,
                    force: bool = False) -> bool:
        """Atomically claim the aggregation of a due phase, or take over one whose
        closing lease expired; True for exactly one caller. On PostgreSQL the claim first
        takes the phase's advisory lock exclusively: it waits for the report commits in
        flight (which hold it shared) and new ones wait for the claim, then see the phase
        closing. The claim is a lease until
        now + ``lease_ms`` that its holder renews (:meth:`renew_lease`) while it works;
        :meth:`finish_close` only succeeds for the current holder, so a phase is closed
        exactly once even when a slow holder loses it to another replica."""
        t = now_ms()
        p = S.phases.c
        due = or_(quota_in(), p.deadline_ms <= t) if not force else text("1=1")
        with self.write() as conn:
            if not self.is_sqlite:  # wait for the report commits of the phase in flight
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                             {"k": phase_lock_key(query_id, phase)})
            r = conn.execute(update(S.phases).where(and_(
                p.query_id == query_id, p.phase == phase,
                or_(and_(p.state == "open", due),
                    and_(p.state == "closing", p.lease_until_ms <= t))))
                .values(state="closing", closer=closer, lease_until_ms=t + lease_ms,
                        close_attempts=p.close_attempts + 1))
            return r.rowcount == 1

    def close_attempts(self, query_id: str, phase: int) -> tuple[int, str]:
        """(closes of the phase begun so far, the last one's recorded failure)."""
        p = S.phases.c
        with self.read() as conn:
            row = conn.execute(select(p.close_attempts, p.close_error).where(and_(
                p.query_id == query_id, p.phase == phase))).first()
        return (int(row[0]), str(row[1])) if row is not None else (0, "")

    def record_close_error(self, query_id: str, phase: int, closer: str, error: str) -> None:
        """Note why the close ``closer`` holds failed (it will be retried)."""
        p = S.phases.c
        with self.write() as conn:
            conn.execute(update(S.phases).where(and_(
                p.query_id == query_id, p.phase == phase, p.closer == closer))
                .values(close_error=error[:2000]))

    def _lock_query(self, conn: Any, query_id: str) -> None:
        """PostgreSQL: lock the query's row first, as every transaction touching both a
        query row and its phase rows does (the writer's slot counters, cancel), so no two
        of them wait on each other in a cycle. SQLite serializes writers anyway."""
        if not self.is_sqlite:
            conn.execute(select(S.queries.c.query_id).where(
                S.queries.c.query_id == query_id).with_for_update())

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

    # ---- reading a closing phase in windows (service.reduce) ---------------------------
    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Any]:
        """A DB-API cursor for reads (the close's statements run on the driver directly:
        no per-row SQLAlchemy objects; on PostgreSQL in binary, so a window's bytea comes
        as it is instead of hex-encoded by the server and decoded here)."""
        raw = self.engine.raw_connection()
        try:
            driver = raw.driver_connection
            assert driver is not None, "a checked-out connection has its driver connection"
            cur = raw.cursor() if self.is_sqlite else driver.cursor(binary=True)
            try:
                yield cur
            finally:
                cur.close()
            if not self.is_sqlite:
                raw.rollback()
        finally:
            raw.close()

    def _close_source(self, cur: Any, query_id: str) -> tuple[str, bool]:
        """(table holding the query's reports, whether rows must be filtered by query):
        PostgreSQL reads the query's own partition (no filter), or the default partition
        for a query created before schema 4; SQLite the one reports table."""
        if self.is_sqlite:
            return S.reports.name, True
        part = S.partition_name(query_id)
        cur.execute("SELECT to_regclass(%s)", (part,))
        return (part, False) if cur.fetchone()[0] else (S.DEFAULT_PARTITION, True)

    def close_windows(self, query_id: str, phase: int, users: int,
                      report_bytes: int | None, max_rows: int | None = None) -> list[Window]:
        """The windows a closing phase is read in, independent of who reads them (so an
        in-process close and a distributed one reduce the same windows).

        ``report_bytes``: the largest report the close streams (None: the database sums
        every group). ``max_rows``: rows per window at most (SQLite's int64 sums).
        PostgreSQL: ranges of heap blocks of the query's partition (``ctid`` range scans),
        of :data:`WINDOW_BLOCKS` blocks when the database sums, and of about
        :data:`STREAM_BYTES` of reports when it concatenates them (``string_agg`` slows
        down sharply beyond a few MB). SQLite: ranges of enrolment slots (the index on
        (query, phase, slot)) of at most :data:`WINDOW_SLOTS`, fewer when streamed
        (:data:`SQLITE_STREAM_BYTES`)."""
        if self.is_sqlite:
            step = WINDOW_SLOTS
            if report_bytes is not None:
                step = min(step, SQLITE_STREAM_BYTES // (report_bytes + 64))
            if max_rows is not None:
                step = min(step, max_rows)
            step = max(step, 1)
            return [Window(lo, min(lo + step, users)) for lo in range(0, max(users, 1), step)]
        with self._cursor() as cur:
            table, by_query = self._close_source(cur, query_id)
            cur.execute("SELECT pg_relation_size(%s) / current_setting('block_size')::int",
                        (table,))
            blocks = int(cur.fetchone()[0] or 0)
            if report_bytes is not None:
                report_bytes = self._stored_report_bytes(cur, table, by_query, query_id,
                                                         phase, report_bytes)
        step = WINDOW_BLOCKS
        if report_bytes is not None:
            # a report up to ~1.9 kB is stored in its row (≤ 8 KiB a block); beyond, out of
            # line (TOAST), at most ROWS_PER_BLOCK rows a block
            per_block = 8192 if report_bytes < 1900 else ROWS_PER_BLOCK * report_bytes
            step = min(step, STREAM_BYTES // per_block)
        if max_rows is not None:
            step = min(step, max_rows // ROWS_PER_BLOCK)
        step = max(step, 1)
        return [Window(lo, lo + step) for lo in range(0, max(blocks, 1), step)]

    @staticmethod
    def _stored_report_bytes(cur: Any, table: str, by_query: bool, query_id: str,
                             phase: int, report_bytes: int) -> int:
        """Bytes a report of the phase takes *stored* (``report_bytes`` counts its integers
        at 8 bytes; they are stored at their task's ``vbytes``, often 1 or 2): the widest
        ``vbytes`` among the phase's first stored rows (in ``ctid`` order, so every replica
        plans the same windows). A k = 1 024 subset report is 2 200 bytes as int64 but 550
        stored: taken for out-of-line, its windows held ~36 reports and the close spent
        40 µs a report on per-window statements (bench/results/phase_close.md)."""
        where = "phase = %s AND length(payload) > 0" + (" AND query_id = %s" if by_query else "")
        cur.execute(f"SELECT max(vbytes) FROM (SELECT vbytes FROM {table} WHERE {where} "
                    "ORDER BY ctid LIMIT 1000) AS head",
                    (phase, query_id) if by_query else (phase,))
        vb = cur.fetchone()[0]
        return report_bytes if vb is None else max(1, report_bytes // 8 * int(vb))

    def _window_where(self, cur: Any, query_id: str, phase: int, window: Window,
                      grps: Sequence[int], declines: bool = False
                      ) -> tuple[str, str, list[Any]]:
        """(table, WHERE clause, parameters) of one window's reports of ``grps`` (a
        decline, an empty payload, is never a report; ``declines=True``: the caller
        leaves them out itself, the rows are not filtered on their payload)."""
        table, by_query = self._close_source(cur, query_id)
        one = len(grps) == 1
        if self.is_sqlite:
            where = "query_id = ? AND phase = ? AND slot >= ? AND slot < ? AND grp "
            where += "= ?" if one else f"IN ({','.join('?' * len(grps))})"
            params: list[Any] = [query_id, phase, window.lo, window.hi, *grps]
        else:
            where = "ctid >= %s::tid AND ctid < %s::tid AND phase = %s AND grp "
            where += "= %s" if one else "= ANY(%s)"
            params = [f"({window.lo},0)", f"({window.hi},0)", phase,
                      grps[0] if one else list(grps)]
            if by_query:
                where += " AND query_id = %s"
                params.append(query_id)
        return table, where + ("" if declines else " AND length(payload) > 0"), params

    @staticmethod
    def _by_group(grps: Sequence[int], keys: str) -> tuple[str, str]:
        """(SELECT prefix, GROUP BY clause): one group is one plain aggregate (no hashing
        per row), several are grouped."""
        if len(grps) == 1:
            return f"{int(grps[0])}, min(stage), ", "" if not keys else f" GROUP BY {keys}"
        return "grp, stage, ", " GROUP BY grp, stage" + (f", {keys}" if keys else "")

    def window_sums(self, query_id: str, phase: int, window: Window, grps: Sequence[int],
                    width: int, gram: bool) -> dict[tuple[int, int], WindowSums]:
        """Per (group, stage): the count, the sums of the typed columns ``v0 ..
        v{width-1}``, how many reports fill each typed column, the smallest and largest
        value and (``gram``) the sums of products ``v_i v_j``, ``i ≤ j`` — computed by the
        database over one window. Exact: PostgreSQL sums ``bigint`` into ``numeric``
        (products in ``numeric``); on SQLite the caller bounds the window so that no sum
        leaves int64 (SQLite raises on an integer overflow of ``sum``)."""
        cols = S.TYPED_COLUMNS
        w = min(width, len(cols))
        num = "" if self.is_sqlite else "::numeric"
        # the typed columns of a report are filled in order (v0 .. v{n-1} for n integers):
        # filled[w-1] and filled[w] say whether every report has exactly w integers, and
        # the others are not counted (each a column more to deform and count per row:
        # ~20 % of a one-integer mean's statement) — filled[i] is given as filled[w-1]
        # for i < w - 1 and as filled[w] for i > w (what the width check reads the same)
        counted = cols[max(w - 1, 0):w + 1]
        exprs = ["count(*)", *(f"count({c})" for c in counted),
                 *(f"sum({c})" for c in cols[:w]),
                 *(f"min({c})" for c in cols[:w]), *(f"max({c})" for c in cols[:w])]
        pairs = [(i, j) for i in range(w) for j in range(i, w)] if gram else []
        exprs += [f"sum({cols[i]}{num} * {cols[j]})" for i, j in pairs]
        declines = not self.is_sqlite
        if declines:
            # PostgreSQL: no per-row test of the payload (a function call on a varlena,
            # ~13 % of the statement's CPU): a decline has no typed value, so the rows
            # with v0 are reports and only the rest are tested (bench/phase_close.py)
            exprs[0] = "count(v0) + count(*) FILTER (WHERE v0 IS NULL AND length(payload) > 0)"
        head, group = self._by_group(grps, "")
        out: dict[tuple[int, int], WindowSums] = {}
        with self._cursor() as cur:
            table, where, params = self._window_where(cur, query_id, phase, window, grps,
                                                      declines)
            cur.execute(f"SELECT {head}{', '.join(exprs)} FROM {table} WHERE {where}{group}",
                        params)
            for row in cur.fetchall():
                vals = [0 if v is None else int(v) for v in row[2:]]
                n, got = vals[0], vals[1:1 + len(counted)]
                if n == 0:
                    continue
                filled = [got[0]] * max(w - 1, 0) + got + [got[-1]] * (len(cols) - w - 1)
                k = 1 + len(counted)
                sums, lo, hi = vals[k:k + w], vals[k + w:k + 2 * w], vals[k + 2 * w:k + 3 * w]
                g: list[list[int]] | None = None
                if gram:
                    g = [[0] * w for _ in range(w)]
                    for (i, j), v in zip(pairs, vals[k + 3 * w:], strict=True):
                        g[i][j] = v
                out[(int(row[0]), int(row[1]))] = WindowSums(
                    n, sums, filled, min(lo) if lo else 0, max(hi) if hi else 0, g)
        return out

    def window_pieces(self, query_id: str, phase: int, window: Window, grps: Sequence[int],
                      pieces: Sequence[tuple[int, int]]
                      ) -> dict[tuple[int, int], WindowPieces]:
        """Per (group, stage): for each integer range of ``pieces``, the count, sum and
        sum of squares of the one-integer reports in it (``v0``), and how many reports
        are in none or are not one integer — computed by the database over one window
        (PostgreSQL sums into ``numeric``; SQLite's window keeps them in int64)."""
        exprs = ["count(*)", "count(v1) + count(*) FILTER (WHERE v0 IS NULL)"]
        inside = []
        for lo, hi in pieces:
            cond = f"v0 BETWEEN {int(lo)} AND {int(hi)}"
            inside.append(cond)
            exprs += [f"count(*) FILTER (WHERE {cond})", f"sum(v0) FILTER (WHERE {cond})",
                      f"sum(v0 * v0) FILTER (WHERE {cond})"]
        exprs.append(f"count(*) FILTER (WHERE v0 IS NOT NULL AND NOT ({' OR '.join(inside)}))")
        head, group = self._by_group(grps, "")
        out: dict[tuple[int, int], WindowPieces] = {}
        with self._cursor() as cur:
            table, where, params = self._window_where(cur, query_id, phase, window, grps)
            cur.execute(f"SELECT {head}{', '.join(exprs)} FROM {table} WHERE {where}{group}",
                        params)
            for row in cur.fetchall():
                vals = [0 if v is None else int(v) for v in row[2:]]
                if vals[0] == 0:
                    continue
                moments = [vals[2 + 3 * i:5 + 3 * i] for i in range(len(pieces))]
                out[(int(row[0]), int(row[1]))] = WindowPieces(vals[0], moments, vals[-1],
                                                               vals[1])
        return out

    def window_counts(self, query_id: str, phase: int, window: Window, grps: Sequence[int]
                      ) -> dict[tuple[int, int], WindowCounts]:
        """Per (group, stage): how many of one window's reports carry each value of
        ``v0`` (``malformed``: reports that are not exactly one integer). PostgreSQL packs
        the (value, count) pairs into one bytea per group."""
        out: dict[tuple[int, int], WindowCounts] = {}
        with self._cursor() as cur:
            table, where, params = self._window_where(cur, query_id, phase, window, grps)
            inner = (f"SELECT grp, stage, v0, v1 IS NOT NULL AS extra, count(*) AS n FROM "
                     f"{table} WHERE {where} GROUP BY grp, stage, v0, v1 IS NOT NULL")
            if not self.is_sqlite:
                cur.execute(
                    "SELECT grp, stage, sum(n), coalesce(sum(n) FILTER (WHERE v0 IS NULL OR "
                    "extra), 0), string_agg(int8send(v0) || int8send(n), ''::bytea) FILTER "
                    f"(WHERE v0 IS NOT NULL AND NOT extra) FROM ({inner}) s GROUP BY grp, "
                    "stage", params)
                for g, st, n, bad, blob in cur.fetchall():
                    pairs = np.frombuffer(bytes(blob or b""), ">i8").reshape(-1, 2)
                    out[(int(g), int(st))] = WindowCounts(
                        int(n), pairs[:, 0].tolist(), pairs[:, 1].tolist(), int(bad))
                return out
            cur.execute(inner, params)
            for g, st, v, extra, n in cur.fetchall():
                w = out.setdefault((int(g), int(st)), WindowCounts(0, [], []))
                w.count += int(n)
                if v is None or extra:
                    w.malformed += int(n)
                else:
                    w.values.append(int(v))
                    w.counts.append(int(n))
        return out

    def window_reports(self, query_id: str, phase: int, window: Window, grps: Sequence[int],
                       with_slots: bool = False) -> list[ReportBlock]:
        """One window's reports of ``grps``, per (group, stage, bytes per value): their
        payloads concatenated (and their slots, in the same order). PostgreSQL
        concatenates them itself (``string_agg``); SQLite returns them row by row. The
        window bounds the bytes (:meth:`close_windows`)."""
        with self._cursor() as cur:
            table, where, params = self._window_where(cur, query_id, phase, window, grps)
            if self.is_sqlite:
                return self._sqlite_blocks(cur, table, where, params, with_slots)
            slots = ", string_agg(int4send(slot), ''::bytea)" if with_slots else ""
            head, group = self._by_group(grps, "")
            cur.execute(f"SELECT {head}count(*), min(vbytes), max(vbytes), string_agg("
                        f"payload, ''::bytea){slots} FROM {table} WHERE {where}{group}",
                        params)
            rows = cur.fetchall()
            if any(r[3] != r[4] for r in rows if r[2]):  # rows of schema < 4 among them
                head, group = self._by_group(grps, "vbytes")
                cur.execute(f"SELECT {head}count(*), vbytes, vbytes, string_agg(payload, "
                            f"''::bytea){slots} FROM {table} WHERE {where}{group}", params)
                rows = cur.fetchall()
        return [ReportBlock(int(r[0]), int(r[1]), int(r[3]), int(r[2]), bytes(r[5]),
                            np.frombuffer(bytes(r[6]), ">i4").astype(np.int64)
                            if with_slots else None)
                for r in rows if r[2]]

    @staticmethod
    def _sqlite_blocks(cur: Any, table: str, where: str, params: list[Any],
                       with_slots: bool) -> list[ReportBlock]:
        cur.execute(f"SELECT grp, stage, vbytes, slot, payload FROM {table} WHERE {where}",
                    params)
        parts: dict[tuple[int, int, int], tuple[list[int], list[bytes]]] = {}
        for g, st, vb, slot, payload in cur.fetchall():
            sl, pl = parts.setdefault((g, st, vb), ([], []))
            sl.append(slot)
            pl.append(payload)
        return [ReportBlock(int(g), int(st), int(vb), len(pl), b"".join(pl),
                            np.asarray(sl, dtype=np.int64) if with_slots else None)
                for (g, st, vb), (sl, pl) in parts.items()]

    def finish_close(self, query_id: str, phase: int, closer: str, published: dict[str, Any],
                     *, next_deadline_ms: int | None, result: dict[str, Any] | None) -> bool:
        """Publish a closed phase and open the next one (or store the result)."""
        t = now_ms()
        p = S.phases.c
        with self.write() as conn:
            self._lock_query(conn, query_id)
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
            self._lock_query(conn, query_id)
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
