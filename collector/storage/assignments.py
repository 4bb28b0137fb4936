"""Assignments of devices to query slots: the GetTasks path, as fixed SQL on the driver.

See ``docs/architecture.md`` ("Storage"). A mixin of
:class:`uldp.collector.storage.db.Database`. Every device that checks in costs a status
read (its assignment, and whether a report of it is stored) and, the first time, an
assignment from a free slot of the query (from a block of slots this process
leased: :meth:`AssignmentTables.take_slots`). Both run once per *batch* of devices
(GetTasksBatch, and unary GetTasks calls that the group-commit writer batched), as fixed
statements on the DB-API cursor: SQLAlchemy's per-statement compilation cost more than
the statements themselves on this path.

An assignment row is a dict with the columns of ``uldp_assignments``: ``query_id``,
``device_id``, ``slot``, ``grp``, ``stage``, ``phase``, ``assigned_at_ms``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.base import Tables
from uldp.collector.storage.records import now_ms

__all__ = ["ASSIGNMENT_COLUMNS", "AssignmentTables", "Place"]

#: the columns of an assignment row, in the order the statements below select them
ASSIGNMENT_COLUMNS = ("query_id", "device_id", "slot", "grp", "stage", "phase",
                      "assigned_at_ms")
#: ``place(slot) -> (group, stage, phase)``: a query's public placement of a slot
Place = Callable[[int], tuple[int, int, int]]
#: read connections a process keeps open between reads (:meth:`AssignmentTables.raw_read`)
HELD_READERS = 8
#: device ids per ``IN (...)`` list (SQLite allows 32766 parameters per statement)
_IN_CHUNK = 900
#: slots a process leases from a query's counter at once, at most (and at least the
#: devices it is assigning); near the end 1/BLOCK_SHARE of the slots left, so the last
#: slots spread over the replicas still asking
MAX_BLOCK = 1024
BLOCK_SHARE = 8
_A, _R, _Q, _B = (S.assignments.name, S.reports.name, S.queries.name,
                  S.slot_blocks.name)
_COLS = ", ".join(f"a.{c}" for c in ASSIGNMENT_COLUMNS)
_T = TypeVar("_T")


def _row(r: Sequence[Any]) -> dict[str, Any]:
    return {"query_id": r[0], "device_id": r[1], "slot": int(r[2]), "grp": int(r[3]),
            "stage": int(r[4]), "phase": int(r[5]), "assigned_at_ms": int(r[6])}


class AssignmentTables(Tables):
    """Statements on the ``assignments`` table, the slot blocks and the slot counter of
    ``queries``."""

    # ---- SQL text in the driver's parameter style ---------------------------------------
    def _in_list(self, n: int) -> str:
        """``IN (...)`` of ``n`` parameters (SQLite) or ``= ANY(%s)`` of one array."""
        return "IN (" + ",".join("?" * n) + ")" if self.is_sqlite else "= ANY(%s)"

    def _mark(self, sql: str) -> str:
        return sql if self.is_sqlite else sql.replace("?", "%s")

    def _ids(self, ids: Sequence[str]) -> list[Any]:
        return list(ids) if self.is_sqlite else [list(ids)]

    @contextlib.contextmanager
    def raw_read(self) -> Iterator[Any]:
        """A DB-API cursor for reads, on one of this process's held read connections in
        autocommit mode (each statement its own snapshot), taken from a free list of at
        most :data:`HELD_READERS`: no pool checkout, liveness ping or rollback per read —
        one round trip where the pool took three. Reads on this path are hot: every
        report of a device whose assignment this replica has not cached yet (with N
        replicas, N − 1 in N first reports of a device), and every closer tick. A
        connection that failed is closed, never reused: the next read opens a new one."""
        with self._readers_lock:
            raw: Any = self._readers.pop() if self._readers else None
        if raw is None:
            fairy = self.engine.raw_connection()
            raw = fairy.dbapi_connection
            fairy.detach()  # ours from here on: autocommit stays with it
            if not self.is_sqlite:
                raw.autocommit = True
        ok = False
        try:
            cur = raw.cursor()
            try:
                yield cur
            finally:
                cur.close()
            ok = True
        finally:
            with self._readers_lock:
                keep = ok and len(self._readers) < HELD_READERS
                if keep:
                    self._readers.append(raw)
            if not keep:
                with contextlib.suppress(Exception):
                    raw.close()

    def read_with(self, work: Callable[[Any], _T]) -> _T:
        """``work(cursor)`` on a held read connection (:meth:`raw_read`). A held connection
        the server ended while it sat in the free list (a restart, an administrator's
        ``pg_terminate_backend``, an idle timeout) fails its next statement: then every
        held connection is dropped (they went together) and ``work`` runs once more on a
        new one, so the first call after the database comes back succeeds. Reads only —
        running one twice is harmless (any driver error is tried once more: a real fault,
        or an outage, fails the second try as well, and that error is raised)."""
        try:
            with self.raw_read() as cur:
                return work(cur)
        except self.dbapi_error:
            self.close_readers()
        with self.raw_read() as cur:
            return work(cur)

    def close_readers(self) -> None:
        """Close the held read connections (again: nothing)."""
        with self._readers_lock:
            held, self._readers = self._readers, []
        for raw in held:
            with contextlib.suppress(Exception):
                raw.close()

    # ---- reads --------------------------------------------------------------------------
    def get_assignment(self, query_id: str, device_id: str) -> dict[str, Any] | None:
        got = self.get_assignments(query_id, [device_id])
        return got[0] if got else None

    def get_assignments(self, query_id: str, device_ids: Sequence[str]) -> list[dict[str, Any]]:
        return self.read_with(
            lambda cur: list(self.assignments_cursor(cur, query_id, device_ids).values()))

    def assignments_cursor(self, cur: Any, query_id: str, device_ids: Sequence[str]
                           ) -> dict[str, dict[str, Any]]:
        """device id -> assignment row, of those of ``device_ids`` assigned to the query."""
        out: dict[str, dict[str, Any]] = {}
        ids = list(dict.fromkeys(device_ids))
        for k in range(0, len(ids), _IN_CHUNK):
            chunk = ids[k:k + _IN_CHUNK]
            cur.execute(self._mark(f"SELECT {_COLS} FROM {_A} a WHERE a.query_id = ? AND "
                                   f"a.device_id {self._in_list(len(chunk))}"),
                        [query_id, *self._ids(chunk)])
            for r in cur.fetchall():
                out[r[1]] = _row(r)
        return out

    def get_assignments_of(self, query_ids: Sequence[str], device_ids: Sequence[str]
                           ) -> list[dict[str, Any]]:
        """The assignments of ``device_ids`` to any of ``query_ids`` (one statement per
        :data:`_IN_CHUNK` devices, on the primary key). A committed assignment never
        changes, so a replica may cache every row it reads."""
        qs, ids = list(dict.fromkeys(query_ids)), list(dict.fromkeys(device_ids))
        if not qs or not ids:
            return []

        def work(cur: Any) -> list[dict[str, Any]]:
            out = []
            for k in range(0, len(ids), _IN_CHUNK):
                chunk = ids[k:k + _IN_CHUNK]
                cur.execute(self._mark(f"SELECT {_COLS} FROM {_A} a WHERE a.query_id "
                                       f"{self._in_list(len(qs))} AND a.device_id "
                                       f"{self._in_list(len(chunk))}"),
                            [*self._ids(qs), *self._ids(chunk)])
                out += [_row(r) for r in cur.fetchall()]
            return out
        return self.read_with(work)

    def device_status(self, query_id: str, device_id: str
                      ) -> tuple[dict[str, Any] | None, bool]:
        """(assignment or None, whether a report of this device is stored)."""
        return self.device_statuses(query_id, [device_id]).get(device_id, (None, False))

    def device_statuses(self, query_id: str, device_ids: Sequence[str]
                        ) -> dict[str, tuple[dict[str, Any], bool]]:
        """device id -> (assignment, whether a report of it is stored), for the devices of
        ``device_ids`` assigned to the query (one statement per 900 devices)."""
        ids = list(dict.fromkeys(device_ids))

        def work(cur: Any) -> dict[str, tuple[dict[str, Any], bool]]:
            out: dict[str, tuple[dict[str, Any], bool]] = {}
            for k in range(0, len(ids), _IN_CHUNK):
                chunk = ids[k:k + _IN_CHUNK]
                cur.execute(self._mark(
                    f"SELECT {_COLS}, r.phase FROM {_A} a LEFT JOIN {_R} r ON "
                    "r.query_id = a.query_id AND r.device_id = a.device_id "
                    f"WHERE a.query_id = ? AND a.device_id {self._in_list(len(chunk))}"),
                    [query_id, *self._ids(chunk)])
                for r in cur.fetchall():
                    out[r[1]] = (_row(r), r[7] is not None)
            return out
        return self.read_with(work)

    # ---- assigning ----------------------------------------------------------------------
    def assign(self, query_id: str, device_id: str, place: Place) -> dict[str, Any] | None:
        """The device's assignment, creating it from the next free slot if needed.

        ``place(slot) -> (grp, stage, phase)`` maps a slot to its public assignment. Returns
        None when the query is not running or all its slots are taken.
        """
        with self.write() as conn:
            return self.assign_in(conn, query_id, device_id, place)

    def assign_in(self, conn: Any, query_id: str, device_id: str,
                  place: Place) -> dict[str, Any] | None:
        return self.assign_many_in(conn, query_id, [device_id], place)[device_id]

    def assign_many_in(self, conn: Any, query_id: str, device_ids: Sequence[str],
                       place: Place) -> dict[str, dict[str, Any] | None]:
        """:meth:`assign_many_cursor` inside the SQLAlchemy write transaction ``conn``."""
        cur = conn.connection.cursor()
        try:
            return self.assign_many_cursor(cur, query_id, device_ids, place)
        finally:
            cur.close()

    def assign_many_cursor(self, cur: Any, query_id: str, device_ids: Sequence[str],
                           place: Place) -> dict[str, dict[str, Any] | None]:
        """Assignments of many devices to one query, inside an open write transaction:
        existing ones are returned, the others take free slots in the order of
        ``device_ids`` (None once the query is full or not running): a select of the
        existing rows, the query's state, this process's slot blocks (:meth:`take_slots`)
        and one multi-row insert."""
        out: dict[str, dict[str, Any] | None] = dict(
            self.assignments_cursor(cur, query_id, device_ids))
        new = [d for d in dict.fromkeys(device_ids) if d not in out]
        if not new:
            return out
        slots = self.take_slots(cur, query_id, len(new))
        if slots:
            t = now_ms()
            rows = []
            for dev, slot in zip(new, slots, strict=False):
                grp, stage, phase = place(slot)
                rows.append((query_id, dev, slot, int(grp), int(stage), int(phase), t))
            self._insert_assignments(cur, rows)
            out.update({row[1]: _row(row) for row in rows})
        out.update({d: None for d in new[len(slots):]})
        return out

    # ---- slot blocks --------------------------------------------------------------------
    def take_slots(self, cur: Any, query_id: str, n: int) -> list[int]:
        """Up to ``n`` free slots of a running query, inside the write transaction of
        ``cur`` (fewer once the query is full; none if it is not running).

        Slots come from *blocks* (``uldp_slot_blocks``): this process's own blocks first,
        each locked ``FOR UPDATE`` (a row no other replica asks for), then a new block
        leased from the query's slot counter (:meth:`_lease_block`, its own short
        transaction on PostgreSQL), and once the counter is exhausted, the free slots
        left in any block (another replica's, or one whose process died), ``SKIP
        LOCKED`` first. A block's ``next_slot`` moves in the transaction that inserts the
        assignments of its slots, so a slot is given once even across kill -9, and a
        block leased but never used is used by somebody before the query is full."""
        cur.execute(self._mark(f"SELECT state FROM {_Q} WHERE query_id = ?"), [query_id])
        r = cur.fetchone()
        if r is None or r[0] != "running":
            return []
        lock = "" if self.is_sqlite else " FOR UPDATE"
        slots: list[int] = []
        while len(slots) < n:
            cur.execute(self._mark(f"SELECT block_start, next_slot, block_end FROM {_B} "
                                   f"WHERE query_id = ? AND writer = ? "
                                   f"ORDER BY block_start{lock}"),
                        [query_id, self.writer_id])
            own = cur.fetchall()
            slots += self._use_blocks(cur, query_id, own, n - len(slots))
            if len(slots) < n and not self._lease_block(cur, query_id, n - len(slots)):
                slots += self._use_others(cur, query_id, n - len(slots))
                break
        return slots

    def _use_blocks(self, cur: Any, query_id: str, blocks: Sequence[Sequence[Any]],
                    n: int) -> list[int]:
        """Take up to ``n`` slots from ``blocks`` (rows locked by this transaction) in
        order; a block left without free slots is deleted, the others move on."""
        slots: list[int] = []
        for start, nxt, end in blocks:
            if len(slots) >= n:
                break
            k = min(n - len(slots), int(end) - int(nxt))
            slots.extend(range(int(nxt), int(nxt) + k))
            if int(nxt) + k >= int(end):
                cur.execute(self._mark(f"DELETE FROM {_B} WHERE query_id = ? AND "
                                       "block_start = ?"), [query_id, start])
            else:
                cur.execute(self._mark(f"UPDATE {_B} SET next_slot = ?, writer = ? WHERE "
                                       "query_id = ? AND block_start = ?"),
                            [int(nxt) + k, self.writer_id, query_id, start])
        return slots

    def _use_others(self, cur: Any, query_id: str, n: int) -> list[int]:
        """The query's slot counter is exhausted: up to ``n`` slots from the blocks of
        other processes (live or dead), those not locked right now first, then waiting
        for a locked one (its owner's transaction ends in a commit's time)."""
        slots: list[int] = []
        waits = ([" FOR UPDATE SKIP LOCKED", " FOR UPDATE"] if not self.is_sqlite else [""])
        for lock in waits:
            while len(slots) < n:
                cur.execute(self._mark(f"SELECT block_start, next_slot, block_end FROM {_B} "
                                       "WHERE query_id = ? AND next_slot < block_end "
                                       f"ORDER BY block_start LIMIT 1{lock}"), [query_id])
                r = cur.fetchone()
                if r is None:
                    break
                slots += self._use_blocks(cur, query_id, [r], n - len(slots))
        return slots

    def _lease_block(self, cur: Any, query_id: str, want: int) -> bool:
        """Lease this process a new block of at least ``want`` slots (fewer at the end)
        from the query's slot counter: False when the counter is exhausted or the query
        is not running. On PostgreSQL in a transaction of its own, which holds the
        query's row for a few statements, not through the writer's commit; on SQLite
        (one writer at a time anyway) inside the caller's transaction."""
        if self.is_sqlite:
            return self._lease_in(cur, query_id, want)
        with self.write() as conn:
            c2 = conn.connection.cursor()
            try:
                c2.execute("SET LOCAL lock_timeout = '30s'")
                return self._lease_in(c2, query_id, want)
            finally:
                c2.close()

    def _lease_in(self, cur: Any, query_id: str, want: int) -> bool:
        lock = "" if self.is_sqlite else " FOR UPDATE"
        cur.execute(self._mark(f"SELECT next_slot, target_users, state FROM {_Q} "
                               f"WHERE query_id = ?{lock}"), [query_id])
        r = cur.fetchone()
        if r is None or r[2] != "running" or int(r[0]) >= int(r[1]):
            return False
        first, left = int(r[0]), int(r[1]) - int(r[0])
        size = min(left, max(want, min(MAX_BLOCK, left // BLOCK_SHARE)))
        cur.execute(self._mark(f"UPDATE {_Q} SET next_slot = ? WHERE query_id = ?"),
                    [first + size, query_id])
        cur.execute(self._mark(f"INSERT INTO {_B} (query_id, block_start, next_slot, "
                               "block_end, writer) VALUES (?, ?, ?, ?, ?)"),
                    [query_id, first, first, first + size, self.writer_id])
        return True

    def slots_taken(self, query_id: str) -> int:
        """Devices assigned to the query so far, from the small tables: the slots leased
        from its counter less the free slots of its blocks."""
        def work(cur: Any) -> Any:
            cur.execute(self._mark(
                f"SELECT q.next_slot - COALESCE((SELECT SUM(b.block_end - b.next_slot) "
                f"FROM {_B} b WHERE b.query_id = q.query_id), 0) FROM {_Q} q "
                "WHERE q.query_id = ?"), [query_id])
            return cur.fetchone()
        r = self.read_with(work)
        return int(r[0]) if r is not None else 0

    def _insert_assignments(self, cur: Any, rows: list[tuple[Any, ...]]) -> None:
        head = f"INSERT INTO {_A} ({', '.join(ASSIGNMENT_COLUMNS)}) "
        if not self.is_sqlite:  # one array per column
            cols = [list(c) for c in zip(*rows, strict=True)]
            cur.execute(head + "SELECT * FROM unnest(%s::varchar[], %s::varchar[], "
                        "%s::int[], %s::int[], %s::int[], %s::int[], %s::bigint[])", cols)
            return
        one = "(" + ",".join("?" * len(ASSIGNMENT_COLUMNS)) + ")"
        step = 4000  # 7 parameters per row
        for k in range(0, len(rows), step):
            chunk = rows[k:k + step]
            cur.execute(head + "VALUES " + ",".join([one] * len(chunk)),
                        [x for row in chunk for x in row])
