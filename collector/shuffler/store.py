"""The shuffler's durable state: one SQLite file (WAL, ``synchronous=FULL``).

See ``docs/privacy.md`` ("Shuffle mode"). Three tables:

``submissions``  (query, device) -> SHA-256 of the routing fields and sealed bytes: the
                 one-report-per-device-per-query rule, and how a resend is judged
                 (identical: OK duplicate, also after forwarding; different:
                 ALREADY_EXISTS). No report content.
``pending``      the sealed reports not yet forwarded, *without* their device: query,
                 phase, group, stage, task digest, the sealed bytes, the arrival time (to
                 flush a quiet bucket), and — once drawn into a batch — the batch id and
                 the report's position in the batch's random order. Deleted once the
                 collector has the batch.
``batches``      every batch drawn: its id (the collector's idempotency key), bucket,
                 size, state (``forwarding`` until the collector answered, then
                 ``forwarded`` or ``refused``) and the collector's counts.

A report is acknowledged only after the transaction that inserts its ``submissions`` and
``pending`` rows has committed (fsynced). A batch is drawn in one transaction (rows and
their order fixed) *before* it is sent, so after a crash the same batch, in the same
order, is re-sent under the same id and the collector stores it at most once.
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
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Bucket", "DrawnBatch", "ShufflerStore", "Submission"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
  query_id TEXT NOT NULL, device_id TEXT NOT NULL, digest BLOB NOT NULL,
  PRIMARY KEY (query_id, device_id));
CREATE TABLE IF NOT EXISTS pending (
  id INTEGER PRIMARY KEY, query_id TEXT NOT NULL, phase INTEGER NOT NULL,
  grp INTEGER NOT NULL, stage INTEGER NOT NULL, task_digest TEXT NOT NULL,
  sealed BLOB NOT NULL, received_at_ms INTEGER NOT NULL, batch_id TEXT, pos INTEGER);
CREATE INDEX IF NOT EXISTS pending_bucket
  ON pending (batch_id, query_id, phase, grp, stage, task_digest);
CREATE TABLE IF NOT EXISTS batches (
  batch_id TEXT PRIMARY KEY, query_id TEXT NOT NULL, phase INTEGER NOT NULL,
  grp INTEGER NOT NULL, stage INTEGER NOT NULL, task_digest TEXT NOT NULL,
  size INTEGER NOT NULL, state TEXT NOT NULL, created_at_ms INTEGER NOT NULL,
  done_at_ms INTEGER NOT NULL DEFAULT 0, stored INTEGER NOT NULL DEFAULT 0,
  refused INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '');
"""

_RNG = secrets.SystemRandom()


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Submission:
    """One authenticated device's sealed report (the device id only judges resends)."""

    device_id: str
    query_id: str
    phase: int
    group: int
    stage: int
    task_digest: str
    sealed: bytes

    @property
    def digest(self) -> bytes:
        q = self.query_id.encode()
        return hashlib.sha256(struct.pack(">I", len(q)) + q + struct.pack(
            ">III", self.phase, self.group, self.stage) + self.task_digest.encode()
            + self.sealed).digest()


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


@dataclass(frozen=True)
class DrawnBatch:
    batch_id: str
    query_id: str
    phase: int
    group: int
    stage: int
    task_digest: str
    sealed: list[bytes]  # in the batch's random order


class ShufflerStore:
    """The shuffler's SQLite database (thread-safe: one connection, one lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

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

    # ---- devices' reports ---------------------------------------------------------------
    def submit(self, items: Sequence[Submission]) -> list[tuple[str, bool]]:
        """Store each report unless its device already has one for the query; per item
        ("OK", duplicate) or ("ALREADY_EXISTS", False). Committed before returning."""
        out: list[tuple[str, bool]] = []
        t = _now_ms()
        with self._tx() as db:
            for it in items:
                row = db.execute("SELECT digest FROM submissions WHERE query_id = ? AND "
                                 "device_id = ?", (it.query_id, it.device_id)).fetchone()
                if row is not None:
                    out.append(("OK", True) if bytes(row[0]) == it.digest
                               else ("ALREADY_EXISTS", False))
                    continue
                db.execute("INSERT INTO submissions VALUES (?, ?, ?)",
                           (it.query_id, it.device_id, it.digest))
                db.execute("INSERT INTO pending (query_id, phase, grp, stage, task_digest, "
                           "sealed, received_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (it.query_id, it.phase, it.group, it.stage, it.task_digest,
                            it.sealed, t))
                out.append(("OK", False))
        return out

    # ---- batches ----------------------------------------------------------------------
    def buckets(self) -> list[Bucket]:
        with self._lock:
            rows = self._db.execute(
                "SELECT query_id, phase, grp, stage, task_digest, count(*), "
                "max(received_at_ms), max(length(sealed)) FROM pending WHERE batch_id IS NULL "
                "GROUP BY query_id, phase, grp, stage, task_digest").fetchall()
        return [Bucket(*r) for r in rows]

    def draw(self, b: Bucket, size: int) -> str | None:
        """Draw a batch of ``size`` reports of bucket ``b``, chosen uniformly at random
        among its unbatched ones and put in uniformly random order (OS CSPRNG); the batch
        id, or None if the bucket has fewer reports now."""
        with self._tx() as db:
            ids = [r[0] for r in db.execute(
                "SELECT id FROM pending WHERE batch_id IS NULL AND query_id = ? AND phase = ? "
                "AND grp = ? AND stage = ? AND task_digest = ?",
                (b.query_id, b.phase, b.group, b.stage, b.task_digest))]
            if len(ids) < size:
                return None
            chosen = _RNG.sample(ids, size)  # a uniform subset, in uniform random order
            batch_id = secrets.token_hex(16)
            db.executemany("UPDATE pending SET batch_id = ?, pos = ? WHERE id = ?",
                           [(batch_id, k, i) for k, i in enumerate(chosen)])
            db.execute("INSERT INTO batches (batch_id, query_id, phase, grp, stage, "
                       "task_digest, size, state, created_at_ms) VALUES "
                       "(?, ?, ?, ?, ?, ?, ?, 'forwarding', ?)",
                       (batch_id, b.query_id, b.phase, b.group, b.stage, b.task_digest,
                        size, _now_ms()))
        return batch_id

    def batched(self, b: Bucket) -> int:
        """Reports of ``b``'s (query, phase, group, stage) already drawn into batches."""
        with self._lock:
            row = self._db.execute(
                "SELECT coalesce(sum(size), 0) FROM batches WHERE query_id = ? AND phase = ? "
                "AND grp = ? AND stage = ?", (b.query_id, b.phase, b.group, b.stage)).fetchone()
        return int(row[0])

    def unsent(self) -> list[DrawnBatch]:
        """The batches drawn and not yet answered by the collector, oldest first."""
        with self._lock:
            heads = self._db.execute(
                "SELECT batch_id, query_id, phase, grp, stage, task_digest FROM batches "
                "WHERE state = 'forwarding' ORDER BY created_at_ms, batch_id").fetchall()
            out = []
            for h in heads:
                sealed = [bytes(r[0]) for r in self._db.execute(
                    "SELECT sealed FROM pending WHERE batch_id = ? ORDER BY pos", (h[0],))]
                out.append(DrawnBatch(str(h[0]), str(h[1]), int(h[2]), int(h[3]), int(h[4]),
                                      str(h[5]), sealed))
        return out

    def finish(self, batch_id: str, state: str, stored: int = 0, refused: int = 0,
               message: str = "") -> None:
        """Record the collector's answer and drop the batch's sealed reports."""
        with self._tx() as db:
            db.execute("UPDATE batches SET state = ?, done_at_ms = ?, stored = ?, refused = ?, "
                       "message = ? WHERE batch_id = ?",
                       (state, _now_ms(), stored, refused, message[:500], batch_id))
            db.execute("DELETE FROM pending WHERE batch_id = ?", (batch_id,))

    def drop_bucket(self, b: Bucket) -> int:
        """Delete a bucket's unbatched reports (their phase closed before they could
        make a batch); returns how many."""
        with self._tx() as db:
            return db.execute(
                "DELETE FROM pending WHERE batch_id IS NULL AND query_id = ? AND phase = ? "
                "AND grp = ? AND stage = ? AND task_digest = ?",
                (b.query_id, b.phase, b.group, b.stage, b.task_digest)).rowcount

    def counts(self) -> dict[str, int]:
        """Operator counters: reports accepted, waiting, batches by state."""
        with self._lock:
            out = {"submissions": self._db.execute(
                "SELECT count(*) FROM submissions").fetchone()[0],
                "pending": self._db.execute("SELECT count(*) FROM pending").fetchone()[0]}
            for state, n in self._db.execute("SELECT state, count(*) FROM batches "
                                             "GROUP BY state"):
                out[f"batches_{state}"] = n
        return out
