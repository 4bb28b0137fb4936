"""The shuffler's durable state: one SQLite file (WAL, ``synchronous=FULL``).

See ``docs/privacy.md`` §7 ("Shuffle mode"). Tables:

``queries``      query id -> ``qk``, and ``buckets`` give each bucket a ``bk``: every
                 table a report touches is keyed by these integers and blobs (no text
                 key, no secondary index on the path of a report's admission).
``submissions``  (qk, slot) -> SHA-256 of the routing fields and sealed bytes: one
                 report per ticket (= per assigned slot), and how a resend is judged
                 (identical: OK duplicate; different: ALREADY_EXISTS). Once the report's
                 batch is forwarded (or dropped) the hash is set to NULL: the shuffler then
                 only knows *that* the slot reported, never which report was its (a resend
                 then gets OK duplicate and stores nothing).
``sealed_seen``  (qk, SHA-256 of the sealed bytes): a ciphertext is admitted once per
                 query, so a captured report replayed under another ticket is refused.
                 No slot, no time (a WITHOUT ROWID table, ordered by the hash).
``cells``        (query, phase, group, stage) -> reports admitted: the per-cell count the
                 shuffler checks against the devices the query placed there (received ≤
                 quota) and that tells the forwarder when a cell is complete.
``buckets``      bk -> (query, phase, group, stage, task digest), its unbatched reports,
                 newest arrival, largest ciphertext: what the forwarder looks at every
                 tick without scanning ``pending``.
``pending``      the sealed reports not yet forwarded, clustered by (bk, id): the sealed
                 bytes, the slot and a hash of the attested subject (only to forget the
                 link and count distinct subjects when drawn) and — once drawn — the batch
                 (``batches.bn``) and the position in the batch's random order. No
                 arrival time. Deleted (``secure_delete``: overwritten) once the collector
                 has the batch.
``counters``     operator counters kept across restarts (``dropped``: reports whose phase
                 closed before they made a batch).
``batches``      every batch drawn: id (the collector's idempotency key), bucket, size,
                 distinct attested subjects in it, state (``forwarding`` until the collector
                 answered, then ``forwarded`` or ``refused``) and the collector's counts.

A report is acknowledged only after the transaction that inserts its rows has committed
(fsynced); a call whose transaction fails has committed nothing. A batch is recorded in
one transaction (rows and their order fixed) before the collector can store it (before it
is sent, or — a complete cell's batch, :meth:`ShufflerStore.plan` then
:meth:`ShufflerStore.commit` — before its last piece is sent), so after a crash the same
batch, in the same order, is re-sent under the same id and the collector stores it at most
once.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from uldp.client.randomness import RandomSource

__all__ = ["FORGOTTEN", "Bucket", "DrawPlan", "DrawnBatch", "ShufflerStore", "Submission",
           "draw_order", "subject_hash"]

SCHEMA_VERSION = 3

# Every table a report touches is keyed by integers (a query's ``qk``, a bucket's ``bk``)
# and blobs: the admission of a report is three inserts into compact b-trees and no
# secondary index (``pending`` is clustered by bucket, so a draw reads one key range).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (
  qk INTEGER PRIMARY KEY, query_id TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS submissions (
  qk INTEGER NOT NULL, slot INTEGER NOT NULL, digest BLOB,
  PRIMARY KEY (qk, slot)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sealed_seen (
  qk INTEGER NOT NULL, hash BLOB NOT NULL, PRIMARY KEY (qk, hash)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cells (
  query_id TEXT NOT NULL, phase INTEGER NOT NULL, grp INTEGER NOT NULL,
  stage INTEGER NOT NULL, admitted INTEGER NOT NULL,
  PRIMARY KEY (query_id, phase, grp, stage)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS buckets (
  bk INTEGER PRIMARY KEY, query_id TEXT NOT NULL, phase INTEGER NOT NULL,
  grp INTEGER NOT NULL, stage INTEGER NOT NULL, task_digest TEXT NOT NULL,
  count INTEGER NOT NULL, last_ms INTEGER NOT NULL, max_bytes INTEGER NOT NULL,
  UNIQUE (query_id, phase, grp, stage, task_digest));
CREATE TABLE IF NOT EXISTS pending (
  bk INTEGER NOT NULL, id INTEGER NOT NULL, sealed BLOB NOT NULL, slot INTEGER NOT NULL,
  subject BLOB, batch INTEGER, pos INTEGER, PRIMARY KEY (bk, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (
  name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
  bn INTEGER PRIMARY KEY, batch_id TEXT NOT NULL UNIQUE, bk INTEGER NOT NULL,
  query_id TEXT NOT NULL, phase INTEGER NOT NULL,
  grp INTEGER NOT NULL, stage INTEGER NOT NULL, task_digest TEXT NOT NULL,
  size INTEGER NOT NULL, attested INTEGER NOT NULL, verifier TEXT NOT NULL,
  state TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL, done_at_ms INTEGER NOT NULL DEFAULT 0,
  stored INTEGER NOT NULL DEFAULT 0, refused INTEGER NOT NULL DEFAULT 0,
  message TEXT NOT NULL DEFAULT '');
"""


def draw_order(m: int, k: int, rng: RandomSource | None = None) -> list[int]:
    """A uniformly random ordered sample of ``k`` of the indices ``0 .. m - 1`` (every
    one of the m! / (m - k)! sequences equally likely): the first ``k`` steps of a
    Fisher–Yates shuffle, step ``i`` swapping position ``i`` with a uniform one of
    ``i .. m - 1``. The ``k`` uniform integers come at once from ``rng``'s exact rejection
    sampler (:meth:`RandomSource.below`; default a fresh OS-keyed ChaCha20 stream,
    ``RandomSource.secure()``) — one keystream read per batch, where ``random.SystemRandom``
    made one ``os.urandom`` call per report."""
    if not 0 <= k <= m:
        raise ValueError(f"cannot draw {k} of {m}")
    if k == 0:
        return []
    src = rng if rng is not None else RandomSource.secure()
    steps = src.below(np.arange(m, m - k, -1, dtype=np.int64)).tolist()
    order = list(range(m))
    for i, j in enumerate(steps):
        j += i
        order[i], order[j] = order[j], order[i]
    return order[:k]

#: :meth:`ShufflerStore.prior` of a slot whose report was forwarded (its bytes forgotten)
FORGOTTEN = b""


def _now_ms() -> int:
    return int(time.time() * 1000)


def subject_hash(query_id: str, subject: str) -> bytes:
    """What the store keeps of an attested subject while the report waits: a hash bound
    to the query (to count distinct subjects in a batch; deleted with the report)."""
    return hashlib.sha256(b"uldp-shuffle-subject\x00" + query_id.encode() + b"\x00"
                          + subject.encode()).digest()


@lru_cache(maxsize=1024)  # one entry per task: the reports of a batch call share it
def _routing(query_id: str, phase: int, group: int, stage: int, task_digest: str) -> bytes:
    """The routing fields of a report, as hashed before its sealed bytes in its digest."""
    q = query_id.encode()
    return (struct.pack(">I", len(q)) + q + struct.pack(">III", phase, group, stage)
            + task_digest.encode())


@dataclass(frozen=True)
class Submission:
    """One admitted ticket's sealed report (the slot only judges resends and counts).

    ``digest`` (SHA-256 of the routing fields and the sealed bytes: how a resend is
    judged) and ``sealed_hash`` (SHA-256 of the sealed bytes: a ciphertext once per
    query) are computed once, at construction (a ``cached_property`` took a lock per
    access in Python 3.11: half the cost of a report's admission bookkeeping)."""

    query_id: str
    phase: int
    group: int
    stage: int
    task_digest: str
    sealed: bytes
    slot: int
    subject: bytes | None = None  # subject_hash of the attested subject, if any
    digest: bytes = field(init=False, repr=False, compare=False)
    sealed_hash: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        head = _routing(self.query_id, self.phase, self.group, self.stage, self.task_digest)
        object.__setattr__(self, "digest", hashlib.sha256(head + self.sealed).digest())
        object.__setattr__(self, "sealed_hash", hashlib.sha256(self.sealed).digest())


@dataclass(frozen=True)
class Admission:
    """A submission with the limits of its query: the devices placed in its cell."""

    item: Submission
    placed: int


@dataclass(frozen=True)
class Bucket:
    """The unbatched reports of one (query, phase, group, stage, task digest)."""

    query_id: str
    phase: int
    group: int
    stage: int
    task_digest: str
    count: int
    last_ms: int  # arrival time of the newest
    max_bytes: int  # largest sealed report
    key: int = 0  # its row in ``buckets`` (``bk``: what its waiting reports are keyed by)


@dataclass(frozen=True)
class DrawnBatch:
    batch_id: str
    query_id: str
    phase: int
    group: int
    stage: int
    task_digest: str
    sealed: list[bytes]  # in the batch's random order
    attested: int = 0  # distinct attested subjects among them
    verifier: str = ""  # the enrolment check that attested them ("": none)


@dataclass(frozen=True)
class DrawPlan:
    """A drawn batch not yet recorded (:meth:`ShufflerStore.plan`): the batch (its
    ``sealed`` in the drawn order, or empty), its bucket, and its rows' ids in order."""

    batch: DrawnBatch
    bucket: Bucket
    order: list[int]


#: the page cache of the shuffler's database (KiB, fixed: the waiting reports of a cell
#: of 10⁵ fit; SQLite's default of 2 MiB made drawing a batch a walk through the OS's)
CACHE_KIB = 64 * 1024

_NONE = object()  # no row
_CHUNK = 500  # values per IN (...) lookup


def _lookup(db: sqlite3.Connection, sql: str, keys: list[tuple[int, object]]
            ) -> dict[tuple[int, object], object]:
    """(query, key) -> third column of the rows ``sql`` finds for ``keys``, in chunks of
    at most :data:`_CHUNK` per query (``sql`` has one ``{}`` for the placeholders)."""
    by_query: dict[int, list[object]] = {}
    for q, k in keys:
        by_query.setdefault(q, []).append(k)
    out: dict[tuple[int, object], object] = {}
    for q, ks in by_query.items():
        uniq = list(dict.fromkeys(ks))
        for i in range(0, len(uniq), _CHUNK):
            part = uniq[i:i + _CHUNK]
            for a, b, c in db.execute(sql.format(",".join("?" * len(part))), (q, *part)):
                out[(a, bytes(b) if isinstance(b, bytes) else b)] = c
    return out


def judge(prior: bytes | None, item: Submission) -> tuple[str, bool] | None:
    """The answer to ``item`` given what its slot has stored (None: nothing yet)."""
    if prior is None:
        return None
    if prior == FORGOTTEN or prior == item.digest:
        return ("OK", True)
    return ("ALREADY_EXISTS", False)


@dataclass
class _Rows:
    """The rows one :meth:`ShufflerStore.submit` call writes."""

    subs: list[tuple[object, ...]] = field(default_factory=list)
    seals: list[tuple[object, ...]] = field(default_factory=list)
    pend: list[tuple[object, ...]] = field(default_factory=list)
    cells: dict[tuple[str, int, int, int], int] = field(default_factory=dict)
    buckets: dict[int, list[int]] = field(default_factory=dict)

    def add(self, it: Submission, qk: int, bk: int, report_id: int) -> None:
        self.cells[(it.query_id, it.phase, it.group, it.stage)] += 1
        b = self.buckets.setdefault(bk, [0, 0])
        b[0] += 1
        b[1] = max(b[1], len(it.sealed))
        self.subs.append((qk, it.slot, it.digest))
        self.seals.append((qk, it.sealed_hash))
        self.pend.append((bk, report_id, it.sealed, it.slot, it.subject))

    def insert(self, db: sqlite3.Connection, t: int) -> None:
        """Write the rows (arrival time ``t``), a few statements in all."""
        db.executemany("INSERT INTO submissions VALUES (?, ?, ?)", self.subs)
        db.executemany("INSERT INTO sealed_seen VALUES (?, ?)", self.seals)
        db.executemany("INSERT INTO pending (bk, id, sealed, slot, subject) "
                       "VALUES (?, ?, ?, ?, ?)", self.pend)
        db.executemany("INSERT INTO cells VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE "
                       "SET admitted = excluded.admitted",
                       [(*c, n) for c, n in self.cells.items()])
        db.executemany("UPDATE buckets SET count = count + ?, last_ms = max(last_ms, ?), "
                       "max_bytes = max(max_bytes, ?) WHERE bk = ?",
                       [(n, t, m, k) for k, (n, m) in self.buckets.items()])


class ShufflerStore:
    """The shuffler's SQLite database (thread-safe: one connection, one lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        tables = self._db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                                  ).fetchone()[0]
        if tables and version != SCHEMA_VERSION:
            self._db.close()
            raise RuntimeError(f"{self.path} is a shuffler database of another version "
                               f"({version}, this shuffler writes {SCHEMA_VERSION}): let the "
                               "shuffler that wrote it forward what it holds, then start on "
                               "a new file")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA secure_delete=ON")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.executescript(_SCHEMA)
        self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._lock = threading.Lock()
        # committed keys only (a key written by a call that rolled back is not cached)
        self._qk: dict[str, int] = dict(
            (str(q), int(k)) for k, q in self._db.execute("SELECT qk, query_id FROM queries"))
        self._bk: dict[tuple[str, int, int, int, str], int] = {
            (str(r[1]), int(r[2]), int(r[3]), int(r[4]), str(r[5])): int(r[0])
            for r in self._db.execute("SELECT bk, query_id, phase, grp, stage, task_digest "
                                      "FROM buckets")}
        # the next waiting report's id (ids of rows deleted before a restart may come back)
        self._next = int(self._db.execute("SELECT coalesce(max(id), 0) FROM pending"
                                          ).fetchone()[0]) + 1

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @staticmethod
    def _key(db: sqlite3.Connection, cache: dict[object, int], new: dict[object, int],
             key: object, select: str, insert: str, args: tuple[object, ...]) -> int:
        """The integer key of ``key`` (a query id or a bucket's fields): cached, read, or
        written now (and then in ``new`` until the transaction commits)."""
        got = cache.get(key)
        if got is None:
            got = new.get(key)
        if got is None:
            row = db.execute(select, args).fetchone()
            got = int(row[0]) if row is not None else int(db.execute(insert, args).lastrowid or 0)
            new[key] = got
        return got

    def _query_key(self, db: sqlite3.Connection, query_id: str, new: dict[object, int]) -> int:
        return self._key(db, self._qk, new, query_id,  # type: ignore[arg-type]
                         "SELECT qk FROM queries WHERE query_id = ?",
                         "INSERT INTO queries (query_id) VALUES (?)", (query_id,))

    def _bucket_key(self, db: sqlite3.Connection, k: tuple[str, int, int, int, str],
                    new: dict[object, int]) -> int:
        return self._key(db, self._bk, new, k,  # type: ignore[arg-type]
                         "SELECT bk FROM buckets WHERE query_id = ? AND phase = ? AND "
                         "grp = ? AND stage = ? AND task_digest = ?",
                         "INSERT INTO buckets (query_id, phase, grp, stage, task_digest, "
                         "count, last_ms, max_bytes) VALUES (?, ?, ?, ?, ?, 0, 0, 0)", k)

    # ---- devices' reports ---------------------------------------------------------------
    def prior(self, query_id: str, slot: int) -> bytes | None:
        """What slot ``slot`` of ``query_id`` stored: its report's hash, FORGOTTEN once
        forwarded, None if nothing."""
        with self._lock:
            row = self._db.execute("SELECT s.digest FROM submissions s JOIN queries q ON "
                                   "q.qk = s.qk WHERE q.query_id = ? AND s.slot = ?",
                                   (query_id, slot)).fetchone()
        return None if row is None else (FORGOTTEN if row[0] is None else bytes(row[0]))

    def submit(self, items: Sequence[Admission]) -> list[tuple[str, bool, str]]:
        """Admit each report unless its slot has one (judged by :func:`judge`), its cell
        holds ``placed`` reports already, or its ciphertext was admitted before; per item
        (code, duplicate, message), in order, as if admitted one by one. All committed
        together before returning, or none (an exception). A few statements per call, not
        per report: the lookups in chunks, the inserts with ``executemany``."""
        t = _now_ms()
        new_q: dict[object, int] = {}
        new_b: dict[object, int] = {}
        with self._tx() as db:
            qks = {q: self._query_key(db, q, new_q)
                   for q in dict.fromkeys(a.item.query_id for a in items)}
            out, rows = self._admit(db, items, qks, new_b)
            if rows.pend:
                rows.insert(db, t)
            self._next += len(rows.pend)  # ids of a call that rolls back are never reused
        self._qk.update(new_q)  # type: ignore[arg-type]
        self._bk.update(new_b)  # type: ignore[arg-type]
        return out

    def _admit(self, db: sqlite3.Connection, items: Sequence[Admission],
               qks: dict[str, int], new_b: dict[object, int]
               ) -> tuple[list[tuple[str, bool, str]], _Rows]:
        """The answers of :meth:`submit` and the rows of the reports it admits."""
        priors = _lookup(db, "SELECT qk, slot, digest FROM submissions WHERE "
                         "qk = ? AND slot IN ({})",
                         [(qks[a.item.query_id], a.item.slot) for a in items])
        seen = _lookup(db, "SELECT qk, hash, 1 FROM sealed_seen WHERE qk = ? AND hash IN ({})",
                       [(qks[a.item.query_id], a.item.sealed_hash) for a in items])
        rows = _Rows()
        out: list[tuple[str, bool, str]] = []
        bks: dict[tuple[str, int, int, int, str], int] = {}
        for adm in items:
            it = adm.item
            qk = qks[it.query_id]
            got = priors.get((qk, it.slot), _NONE)
            judged = judge(None if got is _NONE else
                           (got if isinstance(got, bytes) else FORGOTTEN), it)
            if judged is not None:
                out.append((*judged, "" if judged[0] == "OK" else f"slot {it.slot} of "
                            f"query {it.query_id} already sent a different report"))
                continue
            cell = (it.query_id, it.phase, it.group, it.stage)
            if cell not in rows.cells:
                row = db.execute("SELECT admitted FROM cells WHERE query_id = ? AND "
                                 "phase = ? AND grp = ? AND stage = ?", cell).fetchone()
                rows.cells[cell] = int(row[0]) if row is not None else 0
            if rows.cells[cell] >= adm.placed:
                out.append(("FAILED_PRECONDITION", False,
                            f"phase {it.phase} group {it.group} stage {it.stage} of "
                            f"query {it.query_id} holds all its {adm.placed} reports"))
                continue
            if (qk, it.sealed_hash) in seen:
                out.append(("ALREADY_EXISTS", False, "this sealed report was submitted "
                            "before (a replayed ciphertext)"))
                continue
            priors[(qk, it.slot)] = it.digest
            seen[(qk, it.sealed_hash)] = 1
            bfields = (*cell, it.task_digest)
            bk = bks.get(bfields)
            if bk is None:
                bk = bks[bfields] = self._bucket_key(db, bfields, new_b)
            rows.add(it, qk, bk, self._next + len(rows.pend))
            out.append(("OK", False, ""))
        return out, rows

    def admitted(self, query_id: str, phase: int) -> dict[tuple[int, int], int]:
        """(group, stage) -> reports admitted in ``phase`` of ``query_id`` (incl. forwarded)."""
        with self._lock:
            rows = self._db.execute("SELECT grp, stage, admitted FROM cells WHERE query_id = ? "
                                    "AND phase = ?", (query_id, phase)).fetchall()
        return {(int(g), int(s)): int(n) for g, s, n in rows}

    # ---- batches ----------------------------------------------------------------------
    def buckets(self) -> list[Bucket]:
        with self._lock:
            rows = self._db.execute(
                "SELECT query_id, phase, grp, stage, task_digest, count, last_ms, max_bytes, "
                "bk FROM buckets WHERE count > 0").fetchall()
        return [Bucket(*r) for r in rows]

    def _bk_of(self, b: Bucket) -> int:
        """``b``'s bucket key (0: no such bucket; call with the lock held)."""
        if b.key:
            return b.key
        row = self._db.execute("SELECT bk FROM buckets WHERE query_id = ? AND phase = ? AND "
                               "grp = ? AND stage = ? AND task_digest = ?",
                               (b.query_id, b.phase, b.group, b.stage, b.task_digest)
                               ).fetchone()
        return int(row[0]) if row is not None else 0

    def pending(self, b: Bucket) -> int:
        """The unbatched reports of ``b``'s bucket now (``b`` may be an older snapshot)."""
        with self._lock:
            row = self._db.execute("SELECT count FROM buckets WHERE bk = ?",
                                   (self._bk_of(b),)).fetchone()
        return int(row[0]) if row is not None else 0

    def draw(self, b: Bucket, size: int, verifier: str = "") -> str | None:
        """Draw a batch of ``size`` reports of bucket ``b``, chosen uniformly at random
        among its unbatched ones and put in uniformly random order (an OS-keyed ChaCha20
        stream, :func:`draw_order`); the batch id, or None if the bucket has fewer reports
        now. The batch records how many distinct attested subjects it holds and the name
        of the enrolment check (``verifier``) that attested them."""
        plan = self.plan(b, size, verifier, sealed=False)
        if plan is None:
            return None
        self.commit(plan)
        return plan.batch.batch_id

    def plan(self, b: Bucket, size: int, verifier: str = "", sealed: bool = True
             ) -> DrawPlan | None:
        """The draw of :meth:`draw` (subset, order, batch id, attested subjects) and — with
        ``sealed`` — the batch's sealed reports in that order, without writing anything;
        None if the bucket has fewer than ``size`` reports. :meth:`commit` records it.
        One pass over the bucket's key range of ``pending``."""
        with self._lock:
            bk = self._bk_of(b)
            rows = self._db.execute(
                "SELECT id, subject" + (", sealed" if sealed else "") + " FROM pending "
                "WHERE bk = ? AND batch IS NULL", (bk,)).fetchall()
        if len(rows) < size:
            return None
        # a uniform subset, in uniform random order (OS-keyed ChaCha20, exact)
        chosen = [rows[i] for i in draw_order(len(rows), size)]
        attested = len({bytes(r[1]) for r in chosen if r[1] is not None})
        got = [bytes(r[2]) for r in chosen] if sealed else []
        batch = DrawnBatch(secrets.token_hex(16), b.query_id, b.phase, b.group, b.stage,
                           b.task_digest, got, attested if verifier else 0, verifier)
        return DrawPlan(batch, replace(b, key=bk), [int(r[0]) for r in chosen])

    def commit(self, plan: DrawPlan) -> None:
        """Record a planned draw in one transaction: the batch row is written, its rows
        take the batch and their random positions and forget their subject, the bucket's
        count goes down. RuntimeError (nothing written) if a row of the plan is gone or in
        another batch by now."""
        b, batch = plan.bucket, plan.batch
        # in the rows' own order (their random positions in ``pos``): a pass over the
        # bucket's key range, not a random walk through pages the cache does not hold
        ids = sorted((i, k) for k, i in enumerate(plan.order))
        with self._tx() as db:
            bn = db.execute(
                "INSERT INTO batches (batch_id, bk, query_id, phase, grp, stage, "
                "task_digest, size, attested, verifier, state, created_at_ms) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'forwarding', ?)",
                (batch.batch_id, b.key, b.query_id, b.phase, b.group, b.stage, b.task_digest,
                 len(ids), batch.attested, batch.verifier, _now_ms())).lastrowid
            n = db.executemany(
                "UPDATE pending SET batch = ?, pos = ?, subject = NULL "
                "WHERE bk = ? AND id = ? AND batch IS NULL",
                [(bn, k, b.key, r) for r, k in ids]).rowcount
            if n != len(ids):
                raise RuntimeError(f"batch {batch.batch_id}: {len(ids) - n} of its reports "
                                   "changed since it was drawn; not recorded")
            db.execute("UPDATE buckets SET count = count - ? WHERE bk = ?", (len(ids), b.key))

    def unsent(self, skip: frozenset[str] = frozenset(), limit: int = 1 << 30
               ) -> list[DrawnBatch]:
        """The batches drawn and not yet answered by the collector, oldest first, except
        ``skip`` (being sent), at most ``limit`` of them, with their reports."""
        with self._lock:
            heads = self._db.execute(
                "SELECT batch_id, query_id, phase, grp, stage, task_digest, attested, "
                "verifier, bk, bn FROM batches WHERE state = 'forwarding' "
                "ORDER BY created_at_ms, batch_id").fetchall()
            out: list[DrawnBatch] = []
            for h in heads:
                if len(out) >= limit:
                    break
                if h[0] in skip:
                    continue
                sealed = [bytes(r[0]) for r in self._db.execute(
                    "SELECT sealed FROM pending WHERE bk = ? AND batch = ? ORDER BY pos",
                    (h[8], h[9]))]
                out.append(DrawnBatch(str(h[0]), str(h[1]), int(h[2]), int(h[3]), int(h[4]),
                                      str(h[5]), sealed, int(h[6]), str(h[7])))
        return out

    @staticmethod
    def _forget(db: sqlite3.Connection, bk: int, where: str, args: tuple[object, ...]) -> int:
        """Forget which slot sent the pending reports of bucket ``bk`` that ``where``
        selects (their submissions keep only that the slot reported), then delete them;
        returns how many."""
        db.execute("UPDATE submissions SET digest = NULL WHERE qk = (SELECT q.qk FROM "
                   "queries q JOIN buckets b ON b.query_id = q.query_id WHERE b.bk = ?) AND "
                   f"slot IN (SELECT slot FROM pending WHERE bk = ? AND {where})",
                   (bk, bk, *args))
        return int(db.execute(f"DELETE FROM pending WHERE bk = ? AND {where}",
                              (bk, *args)).rowcount)

    def finish(self, batch_id: str, state: str, stored: int = 0, refused: int = 0,
               message: str = "") -> None:
        """Record the collector's answer, forget the batch's slots and drop its reports."""
        with self._tx() as db:
            row = db.execute("SELECT bk, bn FROM batches WHERE batch_id = ?",
                             (batch_id,)).fetchone()
            if row is None:
                return
            db.execute("UPDATE batches SET state = ?, done_at_ms = ?, stored = ?, refused = ?, "
                       "message = ? WHERE bn = ?",
                       (state, _now_ms(), stored, refused, message[:500], row[1]))
            self._forget(db, int(row[0]), "batch = ?", (row[1],))

    def drop_bucket(self, b: Bucket) -> int:
        """Delete a bucket's unbatched reports (their phase closed before they could
        make a batch), forgetting their slots; returns how many."""
        with self._tx() as db:
            bk = self._bk_of(b)
            n = self._forget(db, bk, "batch IS NULL", ())
            db.execute("UPDATE buckets SET count = count - ? WHERE bk = ?", (n, bk))
            db.execute("INSERT INTO counters VALUES ('dropped', ?) ON CONFLICT DO UPDATE "
                       "SET value = value + excluded.value", (n,))
        return n

    def counts(self) -> dict[str, int]:
        """Operator counters: slots admitted, reports waiting, batches by state."""
        with self._lock:
            out = {"admitted": int(self._db.execute(
                "SELECT coalesce(sum(admitted), 0) FROM cells").fetchone()[0]),
                "pending": int(self._db.execute(
                    "SELECT coalesce(sum(count), 0) FROM buckets").fetchone()[0])}
            for state, n, size in self._db.execute(
                    "SELECT state, count(*), coalesce(sum(size), 0) FROM batches "
                    "GROUP BY state"):
                out[f"batches_{state}"] = int(n)
                out[f"reports_{state}"] = int(size)
            for name, value in self._db.execute("SELECT name, value FROM counters"):
                out[str(name)] = int(value)
        return out
