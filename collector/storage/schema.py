"""The collector's database schema (SQLAlchemy Core) and its migrations.

Every piece of collector state lives here, so a restarted collector (or another replica
on the same PostgreSQL database) resumes each query exactly where it was:

``meta``         key/value: schema version, the database-managed token signing key.
``devices``      enrolled devices (id, label, enrollment time).
``queries``      one row per query: public spec (JSON), public seed of the slot
                 permutation, state, current phase, next free assignment slot, result,
                 whether it accepts reports marked ``simulated`` (seeded noise).
``phases``       one row per (query, phase): state, quota, received and declined counts,
                 deadline, closing lease (which replica aggregates it) and what it
                 published.
``assignments``  (query, device) -> slot, group, stage, phase. Primary key (query,
                 device): one assignment per device per query; unique (query, slot).
``slot_blocks``  (query, first slot) -> next free slot, end, writer: the blocks of
                 slots each collector process leased from ``queries.next_slot`` and
                 assigns from (only blocks with free slots have a row).
``reports``      (query, device) -> phase, group, stage, slot, payload (the report's
                 integers little-endian at ``vbytes`` bytes each) and, for a report of at
                 most four integers, the same integers typed in ``v0 .. v3`` (what the
                 database sums when the phase closes; ``uldp.collector.storage.records``).
                 On PostgreSQL the table is partitioned by query (LIST): every query
                 gets a partition of its own when it is created (:func:`partition_name`),
                 so closing a phase scans that query's rows only; rows of queries created
                 before schema 4 stay in the default partition.
                 Primary key (query, device): one report per device per query. A row
                 with an empty payload is a decline (DeclineTask: the device refused its
                 task; no report has fewer than one value). A report
                 that came through the shuffler has a random ``r-…`` id and a random slot
                 instead: the collector never knows its device.
``phase_counts`` (query, phase, writer) -> received, declined: each collector process
                 counts what its writer stored in a row of its own (``writer`` is unique
                 per process), so replicas never wait on each other's counter; a phase's
                 counts are ``phases.received/declined`` plus the sum of these rows
                 (merged on read, ``uldp.collector.storage.catalog``).
``device_counts`` writer -> enrolled: the devices each collector process added to
                 ``devices`` (``writer`` as in ``phase_counts``); their sum is the
                 registry's size (the ``uldp_devices{enrolled}`` gauge) without a count of
                 the registry, and no replica waits on another's counter row.
``shuffle_queries`` a query in shuffle mode: its minimum batch, δ and sealing key id.
``shuffle_batches`` every batch the shuffler forwarded: (query, batch id) -> phase,
                 group, stage, size, reports stored and refused (no device, no token).
``shuffle_digests`` (query, phase, digest): the SHA-256 (first 16 bytes) of every sealed
                 report stored from a batch, so a ciphertext replayed in another batch is
                 stored once.

Migrations: ``SCHEMA_VERSION`` is stored in ``meta``; :data:`MIGRATIONS` maps a version
to the DDL that brings the previous version to it. Version 1 is the initial schema;
version 2 adds ``queries.allow_simulated`` (false for existing queries); version 3 adds
``phases.declined`` (0); version 4 adds ``reports.vbytes`` (8: stored rows keep their
int64 payloads) and ``reports.v0 .. v3`` (filled from the payloads of the stored reports
of at most four integers), ``phases.close_attempts`` and ``phases.close_error``, and on
PostgreSQL makes ``reports`` a table partitioned by query whose default partition holds
the rows already stored; version 5 adds ``shuffle_batches.attested`` (0) and
``verifier`` ('': batches stored before count as attested by no enrolment check) and the
table ``cell_declines`` (empty: declines stored before count per phase only); version 6
adds ``device_counts`` with one row counting the devices already enrolled.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "assignments",
    "cell_declines",
    "device_counts",
    "devices",
    "meta",
    "metadata",
    "partition_name",
    "phase_counts",
    "phases",
    "queries",
    "reports",
    "shuffle_batches",
    "shuffle_digests",
    "shuffle_queries",
]

SCHEMA_VERSION = 6
#: the typed value columns of a report (``records.TYPED_VALUES``)
TYPED_COLUMNS = ("v0", "v1", "v2", "v3")

metadata = MetaData()

meta = Table(
    "uldp_meta", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

devices = Table(
    "uldp_devices", metadata,
    Column("device_id", String(64), primary_key=True),
    Column("label", String(256), nullable=False, default=""),
    Column("enrolled_at_ms", BigInteger, nullable=False),
)

#: devices added to ``devices`` per collector process (``writer``), summed on read
device_counts = Table(
    "uldp_device_counts", metadata,
    Column("writer", String(64), primary_key=True),
    Column("enrolled", BigInteger, nullable=False, default=0),
)

#: the ``device_counts`` row holding the devices enrolled before schema version 6
DEVICES_BEFORE_V6 = "schema-v6"

queries = Table(
    "uldp_queries", metadata,
    Column("query_id", String(64), primary_key=True),
    Column("kind", String(64), nullable=False),
    Column("dataset", String(256), nullable=False),
    Column("epsilon", Float, nullable=False),
    Column("spec_json", Text, nullable=False),
    Column("seed", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("current_phase", Integer, nullable=False),
    Column("num_phases", Integer, nullable=False),
    Column("target_users", Integer, nullable=False),
    Column("next_slot", Integer, nullable=False, default=0),
    Column("phase_timeout_s", Float, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("finished_at_ms", BigInteger, nullable=False, default=0),
    Column("result_json", Text, nullable=True),
    Column("error", Text, nullable=False, default=""),
    Column("version", Integer, nullable=False, default=0),
    # the query accepts reports marked simulated (CreateQuery params "allow_simulated")
    Column("allow_simulated", Boolean, nullable=False, default=False,
           server_default=false()),
)

phases = Table(
    "uldp_phases", metadata,
    Column("query_id", String(64), nullable=False),
    Column("phase", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("quota", Integer, nullable=False),
    Column("received", Integer, nullable=False, default=0),
    Column("opened_at_ms", BigInteger, nullable=False, default=0),
    Column("deadline_ms", BigInteger, nullable=False, default=0),
    Column("closed_at_ms", BigInteger, nullable=False, default=0),
    Column("closer", String(128), nullable=False, default=""),
    Column("lease_until_ms", BigInteger, nullable=False, default=0),
    Column("published_json", Text, nullable=False, default=""),
    # slots whose device declined its task (DeclineTask): received + declined vs quota
    Column("declined", Integer, nullable=False, default=0, server_default=text("0")),
    # closes begun (a claim or a take-over) and the last one's failure: a close that keeps
    # failing fails its query instead of being retried forever (service.closer)
    Column("close_attempts", Integer, nullable=False, default=0, server_default=text("0")),
    Column("close_error", Text, nullable=False, default="", server_default=text("''")),
    PrimaryKeyConstraint("query_id", "phase"),
)

phase_counts = Table(
    "uldp_phase_counts", metadata,
    Column("query_id", String(64), nullable=False),
    Column("phase", Integer, nullable=False),
    Column("writer", String(64), nullable=False),
    Column("received", BigInteger, nullable=False, default=0),
    Column("declined", BigInteger, nullable=False, default=0),
    PrimaryKeyConstraint("query_id", "phase", "writer"),
)

assignments = Table(
    "uldp_assignments", metadata,
    Column("query_id", String(64), nullable=False),
    Column("device_id", String(64), nullable=False),
    Column("slot", Integer, nullable=False),
    Column("grp", Integer, nullable=False),
    Column("stage", Integer, nullable=False),
    Column("phase", Integer, nullable=False),
    Column("assigned_at_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("query_id", "device_id"),
    UniqueConstraint("query_id", "slot", name="uq_assignment_slot"),
)

reports = Table(
    "uldp_reports", metadata,
    # fixed-width columns first, then the payload: closing a phase reads only these, and
    # PostgreSQL finds them at fixed offsets in every row (uldp.collector.service.reduce)
    Column("phase", Integer, nullable=False),
    Column("grp", Integer, nullable=False),
    Column("stage", Integer, nullable=False),
    Column("slot", Integer, nullable=False),
    Column("vbytes", SmallInteger, nullable=False, default=8, server_default=text("8")),
    Column("received_at_ms", BigInteger, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("query_id", String(64), nullable=False),
    Column("device_id", String(64), nullable=False),
    *(Column(c, BigInteger, nullable=True) for c in TYPED_COLUMNS),
    PrimaryKeyConstraint("query_id", "device_id"),
    Index("ix_reports_phase_slot", "query_id", "phase", "slot"),
    postgresql_partition_by="LIST (query_id)",
)

#: PostgreSQL: the partition of ``reports`` holding the rows of queries without their own
DEFAULT_PARTITION = "uldp_reports_default"


def partition_name(query_id: str) -> str:
    """PostgreSQL: the name of a query's partition of ``reports`` (a digest of its id: any
    query id makes a valid, distinct table name)."""
    return "uldp_reports_q" + hashlib.sha256(query_id.encode()).hexdigest()[:24]

# shuffle mode (uldp.collector.storage.shuffle): new tables, so create_all adds them to an
# existing database without a migration
shuffle_queries = Table(
    "uldp_shuffle_queries", metadata,
    Column("query_id", String(64), primary_key=True),
    Column("min_batch", Integer, nullable=False),
    Column("delta", Float, nullable=False),
    Column("key_id", String(16), nullable=False),
)

shuffle_batches = Table(
    "uldp_shuffle_batches", metadata,
    Column("query_id", String(64), nullable=False),
    Column("batch_id", String(32), nullable=False),
    Column("phase", Integer, nullable=False),
    Column("grp", Integer, nullable=False),
    Column("stage", Integer, nullable=False),
    Column("size", Integer, nullable=False),
    Column("stored", Integer, nullable=False),
    Column("refused", Integer, nullable=False),
    Column("received_at_ms", BigInteger, nullable=False),
    # reports from distinct subjects the shuffler's own enrolment check attested, and the
    # name of that check ('' none): what the central guarantee counts (privacy.md §7)
    Column("attested", Integer, nullable=False, default=0, server_default=text("0")),
    Column("verifier", String(64), nullable=False, default="", server_default=text("''")),
    PrimaryKeyConstraint("query_id", "batch_id"),
)

# the digest of every sealed report stored from a shuffled batch, unique per (query,
# phase): a ciphertext replayed in another batch is stored once (privacy.md §7)
shuffle_digests = Table(
    "uldp_shuffle_digests", metadata,
    Column("query_id", String(64), nullable=False),
    Column("phase", Integer, nullable=False),
    Column("digest", LargeBinary(16), nullable=False),
    PrimaryKeyConstraint("query_id", "phase", "digest"),
)

# declines per (query, phase, group, stage), each collector process in its own row (as
# phase_counts): a shuffler knows a cell is complete once its reports and declines reach
# the cell's placement (privacy.md §7), without waiting for the rest of the phase
cell_declines = Table(
    "uldp_cell_declines", metadata,
    Column("query_id", String(64), nullable=False),
    Column("phase", Integer, nullable=False),
    Column("grp", Integer, nullable=False),
    Column("stage", Integer, nullable=False),
    Column("writer", String(64), nullable=False),
    Column("declined", BigInteger, nullable=False, default=0),
    PrimaryKeyConstraint("query_id", "phase", "grp", "stage", "writer"),
)


# blocks of a query's slots leased by one collector process (``writer`` as in
# ``phase_counts``; uldp.collector.storage.assignments): a writer takes a block from the
# query's slot counter in a short transaction of its own, then assigns devices from it
# under that block's row lock only, so replicas never wait on one row per assignment. A
# row lives while its block has free slots (``next_slot < block_end``); the query's slots
# taken are ``queries.next_slot`` minus the free slots of its blocks. A new table:
# create_all adds it to an existing database without a migration
slot_blocks = Table(
    "uldp_slot_blocks", metadata,
    Column("query_id", String(64), nullable=False),
    Column("block_start", Integer, nullable=False),
    Column("next_slot", Integer, nullable=False),
    Column("block_end", Integer, nullable=False),
    Column("writer", String(64), nullable=False),
    PrimaryKeyConstraint("query_id", "block_start"),
)


def _v2_allow_simulated(conn: Connection) -> None:
    """Version 2: ``queries.allow_simulated`` (existing queries refuse simulated reports)."""
    no = "false" if conn.dialect.name == "postgresql" else "0"
    conn.execute(text(f"ALTER TABLE {queries.name} ADD COLUMN allow_simulated BOOLEAN "
                      f"NOT NULL DEFAULT {no}"))


def _v3_declined(conn: Connection) -> None:
    """Version 3: ``phases.declined`` (no phase of an existing query has a decline)."""
    conn.execute(text(f"ALTER TABLE {phases.name} ADD COLUMN declined INTEGER NOT NULL "
                      "DEFAULT 0"))


def _le_int64(col: str, i: int) -> str:
    """SQL (PostgreSQL) of the ``i``-th little-endian int64 of the bytea ``col``."""
    return " | ".join(f"(get_byte({col}, {8 * i + b})::bigint << {8 * b})" for b in range(8))


def _v4_typed_partitioned(conn: Connection) -> None:
    """Version 4: ``reports.vbytes`` (8: the stored payloads are int64), the typed columns
    ``v0 .. v3`` of the stored reports of at most four integers, ``phases.close_attempts``
    and ``close_error``; on PostgreSQL ``reports`` becomes partitioned by query, the
    existing table its default partition."""
    pg = conn.dialect.name == "postgresql"
    rep = reports.name
    conn.execute(text(f"ALTER TABLE {phases.name} ADD COLUMN close_attempts INTEGER NOT NULL "
                      "DEFAULT 0"))
    conn.execute(text(f"ALTER TABLE {phases.name} ADD COLUMN close_error TEXT NOT NULL "
                      "DEFAULT ''"))
    conn.execute(text(f"ALTER TABLE {rep} ADD COLUMN vbytes SMALLINT NOT NULL DEFAULT 8"))
    for c in TYPED_COLUMNS:
        conn.execute(text(f"ALTER TABLE {rep} ADD COLUMN {c} BIGINT"))
    n = len(TYPED_COLUMNS)
    for width in range(1, n + 1):  # the stored reports of 1..4 int64 values
        if pg:
            sets = ", ".join(f"{TYPED_COLUMNS[i]} = {_le_int64('payload', i)}"
                             for i in range(width))
        else:
            sets = ", ".join(f"{TYPED_COLUMNS[i]} = uldp_le_int64(payload, {i})"
                             for i in range(width))
        conn.execute(text(f"UPDATE {rep} SET {sets} WHERE length(payload) = {8 * width}"))
    if not pg:
        return
    conn.execute(text(f"ALTER TABLE {rep} RENAME TO {DEFAULT_PARTITION}"))
    for ix in conn.execute(text("SELECT indexname FROM pg_indexes WHERE tablename = "
                                f"'{DEFAULT_PARTITION}'")).scalars().all():
        conn.execute(text(f'ALTER INDEX "{ix}" RENAME TO "{DEFAULT_PARTITION}_{ix}"'))
    reports.create(conn)
    conn.execute(text(f"ALTER TABLE {rep} ATTACH PARTITION {DEFAULT_PARTITION} DEFAULT"))


def create_default_partition(conn: Connection) -> None:
    """PostgreSQL: the default partition of ``reports`` (a new database)."""
    conn.execute(text(f"CREATE TABLE IF NOT EXISTS {DEFAULT_PARTITION} PARTITION OF "
                      f"{reports.name} DEFAULT"))


def _v5_shuffle_attested(conn: Connection) -> None:
    """Version 5: ``shuffle_batches.attested`` and ``verifier`` (batches stored before
    were attested by no enrolment check: they never count towards amplification). The
    table may be new (``create_all`` made it with the columns): only missing ones."""
    from sqlalchemy import inspect

    have = {c["name"] for c in inspect(conn).get_columns(shuffle_batches.name)}
    for name, ddl in (("attested", "INTEGER NOT NULL DEFAULT 0"),
                      ("verifier", "VARCHAR(64) NOT NULL DEFAULT ''")):
        if name not in have:
            conn.execute(text(f"ALTER TABLE {shuffle_batches.name} ADD COLUMN {name} {ddl}"))


def _v6_device_counts(conn: Connection) -> None:
    """Version 6: ``device_counts`` (``create_all`` made the table) starts with one row
    holding the devices enrolled so far (the last count of the registry ever taken)."""
    conn.execute(text(f"INSERT INTO {device_counts.name} (writer, enrolled) SELECT "
                      f"'{DEVICES_BEFORE_V6}', count(*) FROM {devices.name}"))


#: version -> function(connection) applying the DDL from version-1 to version.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {2: _v2_allow_simulated,
                                                       3: _v3_declined,
                                                       4: _v4_typed_partitioned,
                                                       5: _v5_shuffle_attested,
                                                       6: _v6_device_counts}
