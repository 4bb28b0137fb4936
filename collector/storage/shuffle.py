"""Shuffle mode in the database: which queries are shuffled, the batches the shuffler
forwarded, and the reports they carried — with no device identity.

See ``docs/privacy.md`` ("Shuffle mode") and ``docs/architecture.md`` ("Storage"). A mixin
of :class:`uldp.collector.storage.db.Database`. A shuffled batch is stored in one
transaction: its ``uldp_shuffle_batches`` row (the batch id is the idempotency key: a
re-sent batch changes nothing), its opened reports in ``uldp_reports`` under a fresh random
id ``r-<24 hex>`` and a uniformly random slot (the accumulators' windows need one; it says
nothing about any device), and the phase's received count — only while the phase is open,
under the same guard update on the phase row as the direct ingest path.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, insert, select, update

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.base import Tables
from uldp.collector.storage.records import now_ms, typed_values

__all__ = ["BatchOutcome", "ShuffleTables", "ShuffledBatch"]


@dataclass(frozen=True)
class ShuffledBatch:
    """An opened batch, ready to store: the payloads of its reports that passed."""

    query_id: str
    batch_id: str
    phase: int
    grp: int
    stage: int
    size: int  # reports the shuffler sent
    payloads: Sequence[bytes]  # the opened reports (int64 little-endian)
    slots: int  # the query's target users: slots are drawn in [0, slots)


@dataclass(frozen=True)
class BatchOutcome:
    """What storing a batch did: stored now, a duplicate of a stored batch, or refused
    because the phase is not open (``state``)."""

    duplicate: bool = False
    stored: int = 0
    refused: int = 0
    state: str | None = None  # set when the phase was not open: nothing stored


class ShuffleTables(Tables):
    """Statements of shuffle mode (shuffled queries, batches, meta values)."""

    def get_meta(self, key: str) -> str | None:
        with self.read() as conn:
            v = conn.execute(select(S.meta.c.value).where(S.meta.c.key == key)).scalar()
        return None if v is None else str(v)

    def set_meta(self, key: str, value: str) -> None:
        with self.write() as conn:
            if conn.execute(update(S.meta).where(S.meta.c.key == key)
                            .values(value=value)).rowcount == 0:
                conn.execute(insert(S.meta).values(key=key, value=value))

    def add_shuffle_query_in(self, conn: Connection, query_id: str, min_batch: int,
                             delta: float, key_id: str) -> None:
        conn.execute(insert(S.shuffle_queries).values(query_id=query_id, min_batch=min_batch,
                                                      delta=delta, key_id=key_id))

    def shuffle_query(self, query_id: str) -> dict[str, Any] | None:
        """The shuffle parameters of a query (None: not in shuffle mode)."""
        with self.read() as conn:
            m = conn.execute(select(S.shuffle_queries).where(
                S.shuffle_queries.c.query_id == query_id)).mappings().first()
        return dict(m) if m is not None else None

    def stored_batch(self, query_id: str, batch_id: str) -> BatchOutcome | None:
        """The outcome of a batch stored earlier (None if there is none)."""
        b = S.shuffle_batches.c
        with self.read() as conn:
            row = conn.execute(select(b.stored, b.refused).where(and_(
                b.query_id == query_id, b.batch_id == batch_id))).first()
        return None if row is None else BatchOutcome(True, int(row[0]), int(row[1]))

    def batch_counts(self, query_id: str) -> list[tuple[int, int, int, int]]:
        """(phase, group, stage, reports stored) of every batch of a query."""
        b = S.shuffle_batches.c
        with self.read() as conn:
            rows = conn.execute(select(b.phase, b.grp, b.stage, b.stored).where(
                b.query_id == query_id).order_by(b.phase, b.grp, b.stage)).all()
        return [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]

    def store_batch_in(self, conn: Connection, batch: ShuffledBatch) -> BatchOutcome:
        """Store an opened batch inside the transaction ``conn`` (the group-commit
        writer's): never raises for a refusal, so other work in the transaction stands."""
        b = S.shuffle_batches.c
        old = conn.execute(select(b.stored, b.refused).where(and_(
            b.query_id == batch.query_id, b.batch_id == batch.batch_id))).first()
        if old is not None:
            return BatchOutcome(True, int(old[0]), int(old[1]))
        n = len(batch.payloads)
        cur = conn.connection.cursor()
        state = self.phase_open(cur, batch.query_id, batch.phase)
        if state != "open":
            return BatchOutcome(state=str(state or "missing"))
        self.count_in(cur, batch.query_id, batch.phase, received=n)
        t = now_ms()
        conn.execute(insert(S.shuffle_batches).values(
            query_id=batch.query_id, batch_id=batch.batch_id, phase=batch.phase,
            grp=batch.grp, stage=batch.stage, size=batch.size, stored=n,
            refused=batch.size - n, received_at_ms=t))
        if n:
            conn.execute(insert(S.reports), [
                dict(query_id=batch.query_id, device_id="r-" + secrets.token_hex(12),
                     phase=batch.phase, grp=batch.grp, stage=batch.stage,
                     slot=secrets.randbelow(max(batch.slots, 1)), payload=payload,
                     received_at_ms=t, vbytes=8,
                     **dict(zip(S.TYPED_COLUMNS, typed_values(payload, 8), strict=True)))
                for payload in batch.payloads])
        return BatchOutcome(False, n, batch.size - n)
