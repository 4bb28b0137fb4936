"""Closing a phase: leases, streaming its reports, publishing its result.

See ``docs/architecture.md`` ("Storage"). A mixin of
:class:`uldp.collector.storage.db.Database`. ``begin_close`` is a conditional update, so
exactly one replica holds a phase's closing lease; every later write is conditional on
still holding it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np
from sqlalchemy import and_, or_, select, text, update

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.base import Tables
from uldp.collector.storage.records import (
    now_ms,
)

__all__ = ["ClosingTables"]


class ClosingTables(Tables):
    """Statements that close phases (leases, report streams, results)."""

    def begin_close(self, query_id: str, phase: int, closer: str, lease_ms: int,
                    force: bool = False) -> bool:
        """Atomically claim the aggregation of a due phase, or take over one whose
        closing lease expired; True for exactly one caller. The claim is a lease until
        now + ``lease_ms`` that its holder renews (:meth:`renew_lease`) while it works;
        :meth:`finish_close` only succeeds for the current holder, so a phase is closed
        exactly once even when a slow holder loses it to another replica."""
        t = now_ms()
        p = S.phases.c
        due = (or_(p.received + p.declined >= p.quota, p.deadline_ms <= t) if not force
               else text("1=1"))
        with self.write() as conn:
            r = conn.execute(update(S.phases).where(and_(
                p.query_id == query_id, p.phase == phase,
                or_(and_(p.state == "open", due),
                    and_(p.state == "closing", p.lease_until_ms <= t))))
                .values(state="closing", closer=closer, lease_until_ms=t + lease_ms))
            return r.rowcount == 1

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

    def report_blocks(self, query_id: str, phase: int, target_users: int,
                      window: int = 1 << 17) -> Iterator[tuple[int, int, int, bytes]]:
        """Yield (grp, stage, count, concatenated payloads) per group and slot window
        (reports only: a decline, an empty payload, is left out).

        The database concatenates the payloads of ``window`` consecutive slots per group
        (index range scan on (query, phase, slot)), so Python touches a few large byte
        strings instead of one object per report; memory is bounded by the window.
        """
        if self.is_sqlite:
            sql = ("SELECT grp, stage, count(*), group_concat(hex(payload), '') FROM "
                   "uldp_reports WHERE query_id = ? AND phase = ? AND slot >= ? AND slot < ? "
                   "AND length(payload) > 0 GROUP BY grp, stage")
        else:
            sql = ("SELECT grp, stage, count(*), string_agg(payload, ''::bytea) FROM "
                   "uldp_reports WHERE query_id = %s AND phase = %s AND slot >= %s "
                   "AND slot < %s AND length(payload) > 0 GROUP BY grp, stage")
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
        sql = (f"SELECT {cols} FROM uldp_reports WHERE query_id = %s AND phase = %s "
               "AND length(payload) > 0")  # an empty payload is a decline
        raw = self.engine.raw_connection()
        try:
            if self.is_sqlite:
                cur = raw.cursor()
                cur.execute(sql.replace("%s", "?"), (query_id, phase))
            else:
                driver: Any = raw.driver_connection
                cur = driver.cursor(name=f"uldp_stream_{secrets.token_hex(6)}")
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
