"""Queries and phases: the catalogue tables (create, list, cancel, phase rows, due phases).

See ``docs/architecture.md`` ("Storage"). A mixin of :class:`uldp.collector.storage.db.Database`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, and_, func, insert, select, update

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.base import Tables
from uldp.collector.storage.records import (
    now_ms,
)

__all__ = ["QueryTables", "due_sql", "quota_in"]


def due_sql(marker: str) -> str:
    """SQL of :meth:`QueryTables.phases_due` with the driver's parameter ``marker``
    (``?`` or ``%s``; two parameters, both the time in ms): the condition of
    :func:`quota_in` and the deadline / lease checks, written out once."""
    return (f"SELECT p.query_id, p.phase FROM {S.phases.name} p WHERE "
            f"(p.state = 'open' AND (p.deadline_ms <= {marker} OR p.received + p.declined"
            f" + COALESCE((SELECT SUM(c.received + c.declined) FROM {S.phase_counts.name} c"
            " WHERE c.query_id = p.query_id AND c.phase = p.phase), 0) >= p.quota)) OR "
            f"(p.state = 'closing' AND p.lease_until_ms <= {marker})")


def quota_in() -> Any:
    """SQL: the phase row's reports and declines, merged with every writer's counters,
    reach its quota."""
    p, c = S.phases.c, S.phase_counts.c
    counted = (select(func.coalesce(func.sum(c.received + c.declined), 0))
               .where(and_(c.query_id == p.query_id, c.phase == p.phase))
               .scalar_subquery())
    return p.received + p.declined + counted >= p.quota


class QueryTables(Tables):
    """Statements on the ``queries`` and ``phases`` tables."""

    def create_query(self, row: dict[str, Any], quotas: Sequence[int], deadline_ms: int,
                     also: Callable[[Connection], None] | None = None
                     ) -> tuple[dict[str, Any], bool]:
        """Insert a query and its phases (phase 1 open), and run ``also(conn)`` in the
        same transaction when it is created (its shuffle-mode row). Returns (row,
        created)."""
        with self.write() as conn:
            existing = conn.execute(select(S.queries).where(
                S.queries.c.query_id == row["query_id"])).mappings().first()
            if existing is not None:
                return dict(existing), False
            t = now_ms()
            if not self.is_sqlite:
                self._add_partition(conn, str(row["query_id"]))
            conn.execute(insert(S.queries).values(**row, created_at_ms=t, next_slot=0,
                                                  finished_at_ms=0, error="", version=0))
            conn.execute(insert(S.phases), [
                dict(query_id=row["query_id"], phase=i + 1,
                     state="open" if i == 0 else "pending", quota=int(q), received=0,
                     opened_at_ms=t if i == 0 else 0, deadline_ms=deadline_ms if i == 0 else 0,
                     closed_at_ms=0, closer="", lease_until_ms=0, published_json="")
                for i, q in enumerate(quotas)])
            if also is not None:
                also(conn)
            created = conn.execute(select(S.queries).where(
                S.queries.c.query_id == row["query_id"])).mappings().one()
            return dict(created), True

    def _add_partition(self, conn: Connection, query_id: str) -> None:
        """PostgreSQL: the query's own partition of ``reports``, created empty and then
        attached (ATTACH takes a lock that lets other queries' inserts go on, where
        ``CREATE TABLE .. PARTITION OF`` would stop them for a moment)."""
        from psycopg import sql

        name, parent = sql.Identifier(S.partition_name(query_id)), sql.Identifier(S.reports.name)
        raw = conn.connection.driver_connection  # the same transaction
        assert raw is not None, "a checked-out connection has its driver connection"
        raw.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS)").format(name, parent))
        raw.execute(sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
            parent, name, sql.Literal(query_id)))

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
        """The phase rows of a query, ``received`` and ``declined`` merged with every
        writer's counter rows: one fixed statement on a held read connection (one round
        trip). Every replica's phase cache reads this a few times a second per query, on
        the path of every report (``uldp.collector.service.phases``); through the pool it
        cost a checkout, a liveness ping and a rollback besides."""
        cols = [c.name for c in S.phases.c]
        pc = S.phase_counts.name
        mark = "?" if self.is_sqlite else "%s"
        sums = ", ".join(f"(SELECT COALESCE(SUM(c.{k}), 0) FROM {pc} c WHERE c.query_id = "
                         f"p.query_id AND c.phase = p.phase)" for k in ("received", "declined"))
        def work(cur: Any) -> list[Any]:
            cur.execute(f"SELECT {', '.join('p.' + c for c in cols)}, {sums} FROM "
                        f"{S.phases.name} p WHERE p.query_id = {mark} ORDER BY p.phase",
                        [query_id])
            return list(cur.fetchall())
        got = self.read_with(work)
        rows = []
        for r in got:
            row = dict(zip(cols, r[:len(cols)], strict=True))
            row["received"] = int(row["received"]) + int(r[-2])
            row["declined"] = int(row["declined"]) + int(r[-1])
            rows.append(row)
        return rows

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

    def published(self, query_id: str, phase: int) -> dict[str, Any]:
        with self.read() as conn:
            v = conn.execute(select(S.phases.c.published_json).where(and_(
                S.phases.c.query_id == query_id, S.phases.c.phase == phase))).scalar()
        return json.loads(v) if v else {}

    def phases_due(self, t: int | None = None) -> list[tuple[str, int]]:
        """Open phases whose quota is in (reports plus declines) or deadline passed, and
        closings whose lease expired (their closer died).

        Every replica's closer asks this several times a second, so it runs fixed SQL
        (:func:`due_sql`, the same condition as :func:`quota_in`) on a held autocommit
        read connection (``raw_read``): no statement building, pool checkout or liveness
        ping per tick (2.2 ms of collector CPU and 0.7 ms of PostgreSQL's per tick
        before: ~1 % of a core per idle replica, paid by every replica)."""
        t = now_ms() if t is None else t
        def work(cur: Any) -> list[Any]:
            cur.execute(self._sql_due, (t, t))
            return list(cur.fetchall())
        rows = self.read_with(work)
        return [(r[0], int(r[1])) for r in rows]
