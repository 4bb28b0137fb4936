"""Declines: a device's "I will not report for this query" (DeclineTask), stored as a row of
``reports`` with an empty payload, counted in its phase's ``declined``.

See ``docs/architecture.md`` ("Storage") and ``proto/uldp/v1/device.proto`` ("Checks of a
decline"). A mixin of :class:`uldp.collector.storage.db.Database`. Sharing the reports
table's (query, device) key makes "one answer per device and query" one unique key: a
report and a decline of the same device can never both be stored, whichever comes first,
on any replica. Every decline reads its phase's state under the phase's shared lock and
is counted in this process's counter row, as every report commit is (and, per (phase,
group, stage), in its row of ``cell_declines``: a shuffler completes a cell on it); the
phase closes once ``received + declined`` reaches its quota. Declines are rare, so this is
plain SQLAlchemy on the group-commit writer's transaction, not the fixed SQL of the report
hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, and_, func, select

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.base import Tables
from uldp.collector.storage.records import (
    PendingReport,
    ReportOutcome,
    judge_stored,
    now_ms,
    stored_row,
)

__all__ = ["DeclineTables"]


class DeclineTables(Tables):
    """Storing declines (see the module docstring)."""

    def store_declines(self, items: Sequence[PendingReport]) -> list[ReportOutcome]:
        """:meth:`store_declines_in` in a transaction of its own."""
        with self.write() as conn:
            return self.store_declines_in(conn, items)

    def _count_cells(self, conn: Connection, qid: str, phase: int,
                     new: Sequence[PendingReport]) -> None:
        """Add the new declines of a phase to this process's rows of ``cell_declines``."""
        cells: dict[tuple[int, int], int] = {}
        for it in new:
            cells[(it.grp, it.stage)] = cells.get((it.grp, it.stage), 0) + 1
        c = S.cell_declines.c
        for (grp, stage), n in sorted(cells.items()):
            stmt = self._insert(S.cell_declines).values(
                query_id=qid, phase=phase, grp=grp, stage=stage, writer=self.writer_id,
                declined=n)
            conn.execute(stmt.on_conflict_do_update(
                index_elements=[c.query_id, c.phase, c.grp, c.stage, c.writer],
                set_={"declined": c.declined + stmt.excluded.declined}))

    def cell_declines(self, query_id: str) -> dict[tuple[int, int, int], int]:
        """Declines per (phase, group, stage) of a query, merged over every writer's rows:
        O(cells × writers), what the shuffler's poll reads."""
        c = S.cell_declines.c
        with self.read() as conn:
            rows = conn.execute(select(c.phase, c.grp, c.stage, func.sum(c.declined))
                                .where(c.query_id == query_id)
                                .group_by(c.phase, c.grp, c.stage)).all()
        return {(int(r[0]), int(r[1]), int(r[2])): int(r[3]) for r in rows}

    def store_declines_in(self, conn: Connection,
                          items: Sequence[PendingReport]) -> list[ReportOutcome]:
        """Store declines (items with an empty payload) inside the write transaction
        ``conn``; one outcome per item, never raising for a refusal. Per (query, phase),
        in that order: lock the phase row while it is open, judge what is stored for
        each device (a decline: OK duplicate; a report: ALREADY_EXISTS), insert the new
        ones and count them in ``declined``."""
        out: list[ReportOutcome | None] = [None] * len(items)
        by_phase: dict[tuple[str, int], list[int]] = {}
        for i, it in enumerate(items):
            assert not it.payload, "a decline has an empty payload"
            by_phase.setdefault((it.query_id, it.phase), []).append(i)
        r = S.reports.c
        t = now_ms()
        cur = conn.connection.cursor()
        for (qid, ph) in sorted(by_phase):
            found = self.phase_open(cur, qid, ph)  # unchanged until this transaction ends
            state = None if found == "open" else (found or "missing")
            new: list[PendingReport] = []
            for i in by_phase[(qid, ph)]:
                it = items[i]
                stored = stored_row(conn.execute(select(r.phase, r.payload, r.received_at_ms,
                                                        r.vbytes)
                                                 .where(and_(r.query_id == qid,
                                                             r.device_id == it.device_id)))
                                    .first())
                judged = judge_stored(it, stored)
                if judged is not None:
                    out[i] = judged
                elif state is not None:
                    out[i] = ReportOutcome("FAILED_PRECONDITION", f"phase {ph} of query {qid} "
                                           f"is not open (state: {state})")
                else:
                    conn.execute(S.reports.insert().values(
                        query_id=qid, device_id=it.device_id, phase=ph, grp=it.grp,
                        stage=it.stage, slot=it.slot, payload=b"", received_at_ms=t))
                    out[i] = ReportOutcome("OK", "declined", False, t)
                    new.append(it)
            if new:
                self.count_in(cur, qid, ph, declined=len(new))
                self._count_cells(conn, qid, ph, new)
        return [o if o is not None else ReportOutcome("INTERNAL", "not processed")
                for o in out]
