"""The collector's database: engine setup, migrations, and the table groups as mixins.

See ``docs/architecture.md`` ("Storage"). :class:`Database` is the engine and connection
handling plus migrations and maintenance; its statements live with their table group:
``catalog`` (queries, phases), ``assignments`` (slots of devices), ``ingest`` (devices,
reports), ``closing``
(leases, report streams, results); ``records`` holds the types they exchange.

SQLite (embedded default): one file in WAL mode with ``synchronous=FULL`` (a commit is on
disk before the collector acknowledges), write transactions ``BEGIN IMMEDIATE``.
PostgreSQL (production, several collector replicas): psycopg 3; a phase's state is the
synchronisation point — every report batch reads it under the phase's advisory lock held
*shared* (``pg_advisory_xact_lock_shared``), and the replica that flips it to ``closing``
takes that lock exclusively first, so exactly one replica aggregates a phase and it sees
every report acknowledged before the flip and none after. Report batches count what
they stored in their own process's row of ``phase_counts`` (merged on read), so no
replica waits on another's commit. Lock order, in every transaction: query rows (in
query-id order) before phase rows (in (query, phase) order), advisory locks before rows,
so replicas never deadlock each other; a transaction the database still aborts for a lock
conflict is run again by the writer (``is_lock_conflict``).

Errors of the engine never carry their SQL parameters (``hide_parameters``): a logged
database error names the statement, never a report's payload or a device id.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import make_url

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.assignments import AssignmentTables
from uldp.collector.storage.catalog import QueryTables, due_sql
from uldp.collector.storage.closing import ClosingTables
from uldp.collector.storage.declines import DeclineTables
from uldp.collector.storage.ingest import IngestTables
from uldp.collector.storage.records import (
    REPORT_COLUMNS,
    PendingReport,
    ReportOutcome,
    StoredReport,
    judge_stored,
    now_ms,
    report_sql,
)
from uldp.collector.storage.shuffle import ShuffleTables

__all__ = [
    "Database",
    "PendingReport",
    "ReportOutcome",
    "StoredReport",
    "judge_stored",
    "now_ms",
    "open_database",
]


class Database(QueryTables, AssignmentTables, IngestTables, DeclineTables, ClosingTables,
               ShuffleTables):
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
                                                pool_use_lifo=True, echo=echo,
                                                hide_parameters=True)
            event.listen(self.engine, "connect", _sqlite_on_connect)
            event.listen(self.engine, "begin", _sqlite_on_begin)
        else:
            self.engine = create_engine(u, pool_size=pool_size, max_overflow=pool_size,
                                        pool_pre_ping=True, echo=echo, hide_parameters=True)
        self._insert = sqlite_dialect.insert if self.is_sqlite else pg_dialect.insert
        self._sql = report_sql("?" if self.is_sqlite else "%s")
        self._held: Any = None  # the writer thread's connection (raw_write(hold=True))
        self._sql_due = due_sql("?" if self.is_sqlite else "%s")
        self._readers: list[Any] = []
        self._readers_lock = threading.Lock()
        #: this process's counter rows in ``phase_counts`` (unique per Database object)
        self.writer_id = f"w-{secrets.token_hex(8)}"

    def write(self) -> Any:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite)."""
        return self.engine.execution_options(sqlite_begin="IMMEDIATE").begin()

    def read(self) -> Any:
        """A read-only connection (autocommit reads; one statement = one snapshot)."""
        return self.engine.connect()

    @property
    def dbapi_error(self) -> type[Exception]:
        """The driver's base exception (``sqlite3.Error`` / ``psycopg.Error``)."""
        err: type[Exception] = self.engine.dialect.loaded_dbapi.Error
        return err

    def is_lock_conflict(self, exc: BaseException) -> bool:
        """Did the database abort a transaction for a lock conflict with another one
        (PostgreSQL deadlock 40P01 or serialization failure 40001)? Nothing of it was
        committed: running it again is safe."""
        seen: BaseException | None = exc
        for _ in range(4):  # the driver's error, possibly wrapped by SQLAlchemy
            if seen is None:
                break
            if getattr(seen, "sqlstate", None) in _LOCK_CONFLICTS:
                return True
            seen = getattr(seen, "orig", None) or seen.__cause__
        return False

    def is_permanent(self, exc: BaseException) -> bool:
        """Is ``exc`` a database error that the same statement on the same data would
        hit again (a limit, malformed or corrupt data, a missing object), as opposed to
        one of the moment (a lost connection, a lock, memory, the disk)? A close that
        hits one fails its query at once instead of being retried."""
        seen: BaseException | None = exc
        for _ in range(4):
            if seen is None:
                break
            name = getattr(seen, "sqlite_errorname", None)
            if name is not None:  # extended codes name their primary: SQLITE_CORRUPT_…
                return "_".join(str(name).split("_")[:2]) in _SQLITE_PERMANENT
            state = getattr(seen, "sqlstate", None)
            if state:
                return str(state)[:2] in _PG_PERMANENT_CLASSES
            seen = getattr(seen, "orig", None) or seen.__cause__
        return False

    def dispose(self) -> None:
        self.close_readers()
        held, self._held = self._held, None
        if held is not None:
            with contextlib.suppress(Exception):
                held.close()
        self.engine.dispose()

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
                if not self.is_sqlite:
                    S.create_default_partition(conn)
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
            for t in (S.queries, S.phases, S.assignments, S.reports, S.phase_counts,
                      S.cell_declines, S.slot_blocks):
                # reports: (query_id, device_id, phase, grp, stage, slot, payload,
                # received_at_ms, vbytes, v0..v3), whatever the table's column order
                cols = ([t.c[c] for c in REPORT_COLUMNS] if t is S.reports else list(t.c))
                rows = conn.execute(select(*cols)).all()
                out[t.name] = sorted(tuple(r) for r in rows)
        return out


#: SQLSTATEs of a transaction aborted for a lock conflict (deadlock, serialization failure)
_LOCK_CONFLICTS = frozenset({"40P01", "40001"})
#: SQLite result codes of an error the same statement would hit again
_SQLITE_PERMANENT = frozenset({"SQLITE_TOOBIG", "SQLITE_CORRUPT", "SQLITE_NOTADB",
                               "SQLITE_MISMATCH", "SQLITE_RANGE", "SQLITE_ERROR",
                               "SQLITE_CONSTRAINT", "SQLITE_FORMAT"})
#: PostgreSQL SQLSTATE classes of such errors: feature not supported, data exception,
#: integrity, syntax or access, program limit exceeded, internal (corruption)
_PG_PERMANENT_CLASSES = frozenset({"0A", "22", "23", "42", "54", "XX"})


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
    # the schema-4 migration decodes the stored int64 payloads into the typed columns
    dbapi_conn.create_function("uldp_le_int64", 2, _le_int64, deterministic=True)


def _le_int64(payload: bytes, i: int) -> int | None:
    """SQLite function ``uldp_le_int64(payload, i)``: the ``i``-th little-endian int64."""
    part = bytes(payload[8 * i:8 * i + 8])
    return int.from_bytes(part, "little", signed=True) if len(part) == 8 else None


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
