"""Shuffle mode in the database: which queries are shuffled, the batches the shuffler
forwarded, and the reports they carried — with no device identity.

See ``docs/privacy.md`` ("Shuffle mode") and ``docs/architecture.md`` ("Storage"). A mixin
of :class:`uldp.collector.storage.db.Database`. A shuffled batch is stored in one
transaction: its ``uldp_shuffle_batches`` row (the batch id is the idempotency key: a
re-sent batch changes nothing), its opened reports in ``uldp_reports`` under a fresh random
id ``r-<24 hex>`` and a uniformly random slot (the accumulators' windows need one; it says
nothing about any device), and the phase's received count — only while the phase is open
and the batch keeps it within the phase's quota (the phase row's count merged with every
writer's ``phase_counts`` row, read under the phase's advisory lock held exclusively on
PostgreSQL, so that two replicas cannot both pass the check; the count goes into this
process's own counter row, as the direct ingest path's does). A report whose sealed
ciphertext's digest the (query, phase) already holds (``uldp_shuffle_digests``, read and
written in the same transaction) is a replay from another batch: dropped, counted as
refused. The batch row keeps what
the shuffler said of it: how many of its reports came from distinct subjects its own
enrolment check attested, and which check that was.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, and_, exists, func, insert, select, update

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.base import Tables
from uldp.collector.storage.records import (
    INSERT_CHUNK,
    REPORT_COLUMNS,
    TYPED_VALUES,
    PendingReport,
    now_ms,
    phase_lock_key,
    typed_values,
)

__all__ = ["BatchOutcome", "ShuffleTables", "ShuffledBatch", "StoredBatch", "sealed_digest"]


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
    attested: int = 0  # reports from distinct subjects the shuffler's check attested
    verifier: str = ""  # the name of that check ("": none)
    #: per payload, the digest of the sealed report it came from (:func:`sealed_digest`):
    #: a payload whose digest the (query, phase) already holds is a replay, dropped
    digests: Sequence[bytes] = ()


def sealed_digest(sealed: bytes) -> bytes:
    """The digest a stored sealed report is remembered by (SHA-256, 16 bytes)."""
    return hashlib.sha256(sealed).digest()[:16]


#: digests looked up per statement (SQLite allows 32 766 parameters a statement)
_LOOKUP = 4000


@dataclass(frozen=True)
class StoredBatch:
    """A stored batch as the privacy section reads it."""

    phase: int
    grp: int
    stage: int
    stored: int  # reports that opened and passed the checks
    refused: int  # reports dropped (did not open, failed a check)
    attested: int = 0
    verifier: str = ""


@dataclass(frozen=True)
class BatchOutcome:
    """What storing a batch did: stored now, a duplicate of a stored batch, or refused
    because the phase is not open (``state``)."""

    duplicate: bool = False
    stored: int = 0
    refused: int = 0
    state: str | None = None  # set when the phase was not open: nothing stored
    #: (received, quota) of an open phase the batch would take past its quota
    over_quota: tuple[int, int] | None = None


def _counted() -> Any:
    """SQL: the reports every writer counted into a phase (``phase_counts``, merged)."""
    c, p = S.phase_counts.c, S.phases.c
    return (select(func.coalesce(func.sum(c.received), 0))
            .where(and_(c.query_id == p.query_id, c.phase == p.phase)).scalar_subquery())


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

    def shuffled_queries(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """The shuffled queries (of ``dataset``, or all): what the privacy odometer
        composes — id, dataset, state, ε, result, finish time, min batch and whether any
        batch came in — in one statement, oldest first."""
        q, sq, b = S.queries.c, S.shuffle_queries.c, S.shuffle_batches.c
        batched = exists().where(b.query_id == q.query_id)
        stmt = (select(q.query_id, q.dataset, q.state, q.epsilon, q.result_json,
                       q.finished_at_ms, sq.min_batch, batched.label("batched"))
                .join_from(S.queries, S.shuffle_queries, sq.query_id == q.query_id)
                .order_by(q.created_at_ms, q.query_id))
        if dataset is not None:
            stmt = stmt.where(q.dataset == dataset)
        with self.read() as conn:
            return [dict(m) for m in conn.execute(stmt).mappings()]

    def lock_dataset_in(self, conn: Connection, dataset: str) -> None:
        """Serialize, until the transaction ``conn`` ends, every transaction that takes
        this lock for ``dataset`` (the odometer's budget check and the query's insert):
        an advisory lock on PostgreSQL; on SQLite the write transaction (``BEGIN
        IMMEDIATE``) already excludes every other writer."""
        if not self.is_sqlite:
            d = hashlib.sha256(f"uldp-odometer/{dataset}".encode()).digest()
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)",
                                 (int.from_bytes(d[:8], "little", signed=True),))

    def stored_batch(self, query_id: str, batch_id: str) -> BatchOutcome | None:
        """The outcome of a batch stored earlier (None if there is none)."""
        b = S.shuffle_batches.c
        with self.read() as conn:
            row = conn.execute(select(b.stored, b.refused).where(and_(
                b.query_id == query_id, b.batch_id == batch_id))).first()
        return None if row is None else BatchOutcome(True, int(row[0]), int(row[1]))

    def batch_counts(self, query_id: str) -> list[StoredBatch]:
        """Every stored batch of a query (its cell and counts), by cell."""
        b = S.shuffle_batches.c
        with self.read() as conn:
            rows = conn.execute(select(b.phase, b.grp, b.stage, b.stored, b.refused,
                                       b.attested, b.verifier).where(
                b.query_id == query_id).order_by(b.phase, b.grp, b.stage)).all()
        return [StoredBatch(int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]),
                            int(r[5]), str(r[6])) for r in rows]

    def store_batch_in(self, conn: Connection, batch: ShuffledBatch) -> BatchOutcome:
        """Store an opened batch inside the transaction ``conn`` (the group-commit
        writer's): never raises for a refusal, so other work in the transaction stands."""
        b, p = S.shuffle_batches.c, S.phases.c
        old = conn.execute(select(b.stored, b.refused).where(and_(
            b.query_id == batch.query_id, b.batch_id == batch.batch_id))).first()
        if old is not None:
            return BatchOutcome(True, int(old[0]), int(old[1]))
        cur = conn.connection.cursor()
        if not self.is_sqlite:  # exclusive: no other replica's batch (nor the closer) in
            # between this count and this insert; direct reports never reach a shuffled
            # query, so no report commit waits for it (SQLite serializes writers anyway)
            cur.execute("SELECT pg_advisory_xact_lock(%s)",
                        (phase_lock_key(batch.query_id, batch.phase),))
        row = conn.execute(select(p.state, p.received + _counted(), p.quota).where(and_(
            p.query_id == batch.query_id, p.phase == batch.phase))).first()
        if row is None or row[0] != "open":
            return BatchOutcome(state=str(row[0] if row is not None else "missing"))
        payloads, digests = self._fresh(conn, batch)
        n = len(payloads)
        if int(row[1]) + n > int(row[2]):
            return BatchOutcome(state="open", over_quota=(int(row[1]), int(row[2])))
        self.count_in(cur, batch.query_id, batch.phase, received=n)
        t = now_ms()
        conn.execute(insert(S.shuffle_batches).values(
            query_id=batch.query_id, batch_id=batch.batch_id, phase=batch.phase,
            grp=batch.grp, stage=batch.stage, size=batch.size, stored=n,
            refused=batch.size - n, received_at_ms=t, attested=batch.attested,
            verifier=batch.verifier))
        if digests:
            self._insert_digests(cur, batch.query_id, batch.phase, sorted(digests))
        if n:
            rows = _rows(batch, payloads, t)
            if self.is_sqlite:
                _insert_rows(cur, rows)
            else:
                self._insert_reports(cur, [PendingReport(r[0], r[2], r[1], r[3], r[4], r[5],
                                                         r[6], 8) for r in rows], t)
        return BatchOutcome(False, n, batch.size - n)

    def _fresh(self, conn: Connection, batch: ShuffledBatch
               ) -> tuple[list[bytes], list[bytes]]:
        """The payloads of a batch (and their digests) whose sealed report the (query,
        phase) does not hold yet — read in the batch's transaction, under the phase's lock
        (PostgreSQL) or the database's one writer (SQLite): a replay racing its original
        in another batch is found here or refused by the table's key, never stored twice.
        A batch without digests (none given) keeps every payload."""
        if not batch.digests:
            return list(batch.payloads), []
        assert len(batch.digests) == len(batch.payloads)
        seen: set[bytes] = set()
        wanted = sorted(set(batch.digests))  # in key order: neighbouring index pages
        cur = conn.connection.cursor()
        head = (f"SELECT digest FROM {S.shuffle_digests.name} WHERE query_id = {{m}} AND "
                f"phase = {{m}} AND digest ")
        if self.is_sqlite:
            for i in range(0, len(wanted), _LOOKUP):
                part = wanted[i:i + _LOOKUP]
                cur.execute(head.format(m="?") + f"IN ({','.join('?' * len(part))})",
                            (batch.query_id, batch.phase, *part))
                seen.update(bytes(r[0]) for r in cur.fetchall())
        else:
            cur.execute(head.format(m="%s") + "= ANY(%s::bytea[])",
                        (batch.query_id, batch.phase, wanted))
            seen.update(bytes(r[0]) for r in cur.fetchall())
        payloads, digests = [], []
        for payload, dg in zip(batch.payloads, batch.digests, strict=True):
            if dg not in seen:
                seen.add(dg)
                payloads.append(payload)
                digests.append(dg)
        return payloads, digests

    def _insert_digests(self, cur: Any, query_id: str, phase: int,
                        digests: Sequence[bytes]) -> None:
        """Insert the digests of a batch's stored reports (the table's key refuses a
        digest twice: a replay the check above missed fails the whole batch)."""
        name = S.shuffle_digests.name
        if not self.is_sqlite:
            cur.execute(f"INSERT INTO {name} (query_id, phase, digest) SELECT %s, %s, "
                        "unnest(%s::bytea[])", (query_id, phase, list(digests)))
            return
        for i in range(0, len(digests), INSERT_CHUNK):
            part = digests[i:i + INSERT_CHUNK]
            params: list[Any] = []
            for d in part:
                params += (query_id, phase, d)
            cur.execute(f"INSERT INTO {name} (query_id, phase, digest) VALUES "
                        + ",".join(["(?, ?, ?)"] * len(part)), params)


def _rows(batch: ShuffledBatch, payloads: Sequence[bytes], t: int) -> list[tuple[Any, ...]]:
    """The rows (:data:`REPORT_COLUMNS`) of a batch's stored reports: each under a fresh
    random id ``r-<24 hex>`` and a uniformly random slot in ``[0, batch.slots)`` (OS
    randomness; neither says anything about a device). The ids and the slots are drawn,
    then sorted — the rows go into the reports table's two indexes in key order, a pass
    over neighbouring pages instead of a random walk — and the payloads are matched to
    them in an order of the collector's own drawing (a uniformly random permutation:
    whatever order the shuffler sent them in, each report's slot is uniform and
    independent of the others' as before; nothing here follows the batch's order)."""
    n = len(payloads)
    rng = np.random.default_rng(secrets.randbits(128))
    hexes = os.urandom(12 * n).hex()
    ids = sorted("r-" + hexes[24 * k:24 * k + 24] for k in range(n))
    slots = np.sort(rng.integers(0, max(batch.slots, 1), n)).tolist()
    order = rng.permutation(n).tolist()
    width = len(payloads[0]) // 8 if n else 0
    if all(len(p) == 8 * width for p in payloads) and 0 < width <= TYPED_VALUES:
        vals = np.frombuffer(b"".join(payloads), dtype="<i8").reshape(n, width).tolist()
        pad = (None,) * (TYPED_VALUES - width)
        typed = [(*vals[i], *pad) for i in order]
    else:
        typed = [typed_values(payloads[i], 8) for i in order]
    q, ph, g, st = batch.query_id, batch.phase, batch.grp, batch.stage
    return [(q, ids[k], ph, g, st, slots[k], payloads[i], t, 8, *typed[k])
            for k, i in enumerate(order)]


def _insert_rows(cur: Any, rows: list[tuple[Any, ...]]) -> None:
    """SQLite: insert a batch's report rows, multi-row VALUES without RETURNING (every
    id is fresh: 96 random bits). RuntimeError if a row was not inserted (an id that
    exists already): the batch's transaction then stores nothing."""
    head = f"INSERT INTO {S.reports.name} ({', '.join(REPORT_COLUMNS)}) VALUES "
    one = "(" + ", ".join("?" * len(REPORT_COLUMNS)) + ")"
    for i in range(0, len(rows), INSERT_CHUNK):
        part = rows[i:i + INSERT_CHUNK]
        cur.execute(head + ",".join([one] * len(part)) + " ON CONFLICT DO NOTHING",
                    [v for r in part for v in r])
        if cur.rowcount != len(part):
            raise RuntimeError("a report id drawn for a shuffled batch exists already; "
                               "the batch is not stored (the shuffler sends it again)")
