"""Storage layer: schema/migrations, SQLite durability settings, uniqueness in the schema,
group commit under concurrency, bounded streaming; and the generated wire code."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import insert, text, update
from sqlalchemy.exc import IntegrityError

from uldp.collector.storage import SCHEMA_VERSION, open_database
from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.db import Database, PendingReport
from uldp.collector.storage.writer import GroupCommitWriter

ROOT = Path(__file__).resolve().parents[2]


def _query(db: Database, qid: str = "q", quota: int = 10_000) -> None:
    db.create_query(dict(query_id=qid, kind="mean", dataset="x", epsilon=1.0, spec_json="{}",
                         seed="1", state="running", current_phase=1, num_phases=2,
                         target_users=quota * 2, phase_timeout_s=60.0, result_json=None),
                    [quota, quota], 2**62)


def test_migrate_is_idempotent_and_versioned(db):
    assert db.migrate() == SCHEMA_VERSION
    assert db.migrate() == SCHEMA_VERSION
    with db.write() as conn:
        conn.execute(update(S.meta).where(S.meta.c.key == "schema_version")
                     .values(value=str(SCHEMA_VERSION + 1)))
    with pytest.raises(RuntimeError, match="newer than this collector"):
        db.migrate()


def test_migrations_from_version_1(db):
    """A version-1 database (before ``queries.allow_simulated`` and ``phases.declined``) is
    upgraded in place: existing queries keep their rows, refuse simulated reports, and
    their phases have no decline."""
    _query(db)
    with db.write() as conn:
        conn.execute(text("ALTER TABLE uldp_queries DROP COLUMN allow_simulated"))
        conn.execute(text("ALTER TABLE uldp_phases DROP COLUMN declined"))
        conn.execute(text("ALTER TABLE uldp_shuffle_batches DROP COLUMN attested"))
        conn.execute(text("ALTER TABLE uldp_shuffle_batches DROP COLUMN verifier"))
        conn.execute(update(S.meta).where(S.meta.c.key == "schema_version").values(value="1"))
    db.dispose()
    d2 = open_database(str(db.url.render_as_string(hide_password=False)))
    try:
        row = d2.get_query("q")
        assert row is not None and row["allow_simulated"] is False
        assert row["target_users"] == 20_000
        assert {p["declined"] for p in d2.get_phases("q")} == {0}
        assert d2.batch_counts("q") == []  # shuffle_batches has its version-4 columns
        assert d2.migrate() == SCHEMA_VERSION == 4
    finally:
        d2.dispose()


def test_unique_report_per_query_and_device_in_schema(db):
    _query(db)
    row = dict(query_id="q", device_id="d", phase=1, grp=0, stage=1, slot=0, payload=b"x",
               received_at_ms=1)
    with db.write() as conn:
        conn.execute(insert(S.reports).values(**row))
    with pytest.raises(IntegrityError), db.write() as conn:
        conn.execute(insert(S.reports).values(**{**row, "payload": b"y"}))
    with pytest.raises(IntegrityError), db.write() as conn:
        conn.execute(insert(S.assignments).values(query_id="q", device_id="d", slot=0, grp=0,
                                                  stage=1, phase=1, assigned_at_ms=1))
        conn.execute(insert(S.assignments).values(query_id="q", device_id="e", slot=0, grp=0,
                                                  stage=1, phase=1, assigned_at_ms=1))


def test_group_commit_under_concurrency(db):
    _query(db)
    w = GroupCommitWriter(db)
    outcomes = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        for i in range(25):
            o = w.store_reports([PendingReport("q", 1, f"d{k}-{i}", 0, 1, i, b"\x01" * 8)])
            with lock:
                outcomes.extend(o)
    ths = [threading.Thread(target=worker, args=(k,)) for k in range(40)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    w.close()
    assert len(outcomes) == 1000 and all(o.code == "OK" for o in outcomes)
    assert w.batches < 1000  # requests shared transactions
    assert db.table_counts()["uldp_reports"] == 1000
    assert db.get_phases("q")[0]["received"] == 1000


def test_stream_reports_is_chunked_and_grouped(db):
    _query(db)
    items = [PendingReport("q", 1, f"d{i}", i % 3, 1, i, i.to_bytes(8, "little"))
             for i in range(1000)]
    db.store_reports(items)
    seen = 0
    for grp, stage, slots, payloads in db.stream_reports("q", 1, chunk=64):
        assert len(payloads) <= 64 and stage == 1
        assert all(int.from_bytes(p, "little") % 3 == grp for p in payloads)
        assert len(slots) == len(payloads)
        seen += len(payloads)
    assert seen == 1000


def test_phase_close_claim_is_exclusive(db):
    _query(db, quota=1)
    db.store_reports([PendingReport("q", 1, "d", 0, 1, 0, b"\x00" * 8)])
    assert db.phases_due() == [("q", 1)]
    assert db.begin_close("q", 1, "a", 60_000)
    assert not db.begin_close("q", 1, "b", 60_000)
    out = db.store_reports([PendingReport("q", 1, "e", 0, 1, 1, b"\x00" * 8)])
    assert out[0].code == "FAILED_PRECONDITION" and "closing" in out[0].message
    assert not db.finish_close("q", 1, "b", {}, next_deadline_ms=1, result=None)
    assert db.finish_close("q", 1, "a", {"khat": {}}, next_deadline_ms=2**62, result=None)
    assert [p["state"] for p in db.get_phases("q")] == ["closed", "open"]


def test_sqlite_is_durable_wal(tmp_path):
    db = open_database(str(tmp_path / "plain-path.db"))
    with db.read() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL
    db.dispose()
    with pytest.raises(ValueError, match="file"):
        Database("sqlite:///:memory:")


def test_generated_wire_code_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
