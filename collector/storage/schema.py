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
``reports``      (query, device) -> phase, group, stage, slot, payload (little-endian
                 int64).
                 Primary key (query, device): one report per device per query. A row
                 with an empty payload is a decline (DeclineTask: the device refused its
                 task; no report has fewer than one value). A report
                 that came through the shuffler has a random ``r-…`` id and a random slot
                 instead: the collector never knows its device.
``shuffle_queries`` a query in shuffle mode: its minimum batch, δ and sealing key id.
``shuffle_batches`` every batch the shuffler forwarded: (query, batch id) -> phase,
                 group, stage, size, reports stored and refused (no device, no token).

Migrations: ``SCHEMA_VERSION`` is stored in ``meta``; :data:`MIGRATIONS` maps a version
to the DDL that brings the previous version to it. Version 1 is the initial schema;
version 2 adds ``queries.allow_simulated`` (false for existing queries); version 3 adds
``phases.declined`` (0); version 4 adds ``shuffle_batches.attested`` (0) and ``verifier``
('': batches stored before count as attested by no enrolment check).
"""

from __future__ import annotations

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
    "devices",
    "meta",
    "metadata",
    "phases",
    "queries",
    "reports",
    "shuffle_batches",
    "shuffle_queries",
]

SCHEMA_VERSION = 4

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
    PrimaryKeyConstraint("query_id", "phase"),
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
    Column("query_id", String(64), nullable=False),
    Column("device_id", String(64), nullable=False),
    Column("phase", Integer, nullable=False),
    Column("grp", Integer, nullable=False),
    Column("stage", Integer, nullable=False),
    Column("slot", Integer, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("received_at_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("query_id", "device_id"),
    Index("ix_reports_phase_slot", "query_id", "phase", "slot"),
)

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

def _v2_allow_simulated(conn: Connection) -> None:
    """Version 2: ``queries.allow_simulated`` (existing queries refuse simulated reports)."""
    no = "false" if conn.dialect.name == "postgresql" else "0"
    conn.execute(text(f"ALTER TABLE {queries.name} ADD COLUMN allow_simulated BOOLEAN "
                      f"NOT NULL DEFAULT {no}"))


def _v3_declined(conn: Connection) -> None:
    """Version 3: ``phases.declined`` (no phase of an existing query has a decline)."""
    conn.execute(text(f"ALTER TABLE {phases.name} ADD COLUMN declined INTEGER NOT NULL "
                      "DEFAULT 0"))


def _v4_shuffle_attested(conn: Connection) -> None:
    """Version 4: ``shuffle_batches.attested`` and ``verifier`` (batches stored before
    were attested by no enrolment check: they never count towards amplification). The
    table may be new (``create_all`` made it with the columns): only missing ones."""
    from sqlalchemy import inspect

    have = {c["name"] for c in inspect(conn).get_columns(shuffle_batches.name)}
    for name, ddl in (("attested", "INTEGER NOT NULL DEFAULT 0"),
                      ("verifier", "VARCHAR(64) NOT NULL DEFAULT ''")):
        if name not in have:
            conn.execute(text(f"ALTER TABLE {shuffle_batches.name} ADD COLUMN {name} {ddl}"))


#: version -> function(connection) applying the DDL from version-1 to version.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {2: _v2_allow_simulated,
                                                       3: _v3_declined,
                                                       4: _v4_shuffle_attested}
