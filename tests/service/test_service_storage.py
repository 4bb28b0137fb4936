"""Storage layer: schema/migrations, SQLite durability settings, uniqueness in the schema,
group commit under concurrency, bounded streaming; and the generated wire code."""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
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


def _as_version_3(db: Database) -> None:
    """Turn a new database back into schema version 3: ``reports`` a plain table (on
    PostgreSQL its default partition becomes the table again) without ``vbytes`` and the
    typed columns, ``phases`` without the close counters, no per-writer counters."""
    with db.write() as conn:
        if not db.is_sqlite:
            conn.execute(text("ALTER TABLE uldp_reports DETACH PARTITION uldp_reports_default"))
            conn.execute(text("DROP TABLE uldp_reports"))
            conn.execute(text("ALTER TABLE uldp_reports_default RENAME TO uldp_reports"))
            for ix in conn.execute(text("SELECT indexname FROM pg_indexes WHERE tablename = "
                                        "'uldp_reports'")).scalars().all():
                new = "uldp_reports_pkey" if ix.endswith("pkey") else "ix_reports_phase_slot"
                conn.execute(text(f'ALTER INDEX "{ix}" RENAME TO {new}'))
        for col in ("vbytes", *S.TYPED_COLUMNS):
            conn.execute(text(f"ALTER TABLE uldp_reports DROP COLUMN {col}"))
        for col in ("close_attempts", "close_error"):
            conn.execute(text(f"ALTER TABLE uldp_phases DROP COLUMN {col}"))
        conn.execute(text("DROP TABLE uldp_phase_counts"))
        conn.execute(text("DROP TABLE uldp_device_counts"))
        conn.execute(update(S.meta).where(S.meta.c.key == "schema_version").values(value="3"))


def test_migrations_from_version_1(db):
    """A version-1 database (before ``queries.allow_simulated`` and ``phases.declined``) is
    upgraded in place: existing queries keep their rows, refuse simulated reports, and
    their phases have no decline."""
    _query(db)
    _as_version_3(db)
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
        assert d2.batch_counts("q") == []  # shuffle_batches has its version-5 columns
        assert d2.migrate() == SCHEMA_VERSION == 6
    finally:
        d2.dispose()


def test_migration_to_version_4_types_stored_reports(db):
    """Reports stored by a version-3 collector (int64 payloads) are kept byte for byte, get
    their typed columns (reports of at most four integers), stay one per (query, device),
    and on PostgreSQL end up in the default partition; a query created afterwards gets a
    partition of its own."""
    _query(db)
    _as_version_3(db)
    rows = [("d1", [5, -7]), ("d2", [1 << 40]), ("d3", [1, 2, 3, 4, 5]), ("d4", [])]
    with db.write() as conn:
        for i, (dev, vals) in enumerate(rows):
            conn.execute(text("INSERT INTO uldp_reports (query_id, device_id, phase, grp, "
                              "stage, slot, payload, received_at_ms) VALUES ('q', :d, 1, 0, "
                              "1, :s, :p, 1)"),
                         dict(d=dev, s=i, p=np.asarray(vals, "<i8").tobytes()))
    db.dispose()
    d2 = open_database(str(db.url.render_as_string(hide_password=False)))
    try:
        with d2.read() as conn:
            got = conn.execute(text("SELECT device_id, payload, vbytes, v0, v1, v2, v3 FROM "
                                    "uldp_reports ORDER BY device_id")).all()
        assert [(r[0], bytes(r[1]), r[2]) for r in got] == [
            (d, np.asarray(v, "<i8").tobytes(), 8) for d, v in rows]
        assert [tuple(r[3:]) for r in got] == [(5, -7, None, None), (1 << 40, None, None, None),
                                               (None,) * 4, (None,) * 4]
        assert d2.stored_report("q", "d1").payload == np.asarray([5, -7], "<i8").tobytes()
        with pytest.raises(IntegrityError), d2.write() as conn:
            conn.execute(insert(S.reports).values(query_id="q", device_id="d1", phase=1, grp=0,
                                                  stage=1, slot=9, payload=b"", received_at_ms=1))
        _query(d2, "q2")
        assert d2.store_reports([PendingReport("q2", 1, "d1", 0, 1, 0, b"\x05", 1)])[0].code == "OK"
        if not d2.is_sqlite:
            with d2.read() as conn:
                where = dict(conn.execute(text(
                    "SELECT device_id || query_id, tableoid::regclass::text FROM uldp_reports"
                )).all())
            assert where["d1q"] == "uldp_reports_default"
            assert where["d1q2"] == S.partition_name("q2")
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


def test_close_windows_are_bounded_and_cover_every_report(db):
    """A closing phase is read in windows bounded in rows (so in bytes); together they
    return every report of the phase exactly once, grouped, with their slots."""
    _query(db)
    items = [PendingReport("q", 1, f"d{i}", i % 3, 1, i, (i * 7 % 200).to_bytes(2, "little"),
                           2) for i in range(1000)]
    db.store_reports(items)
    windows = db.close_windows("q", 1, 2000, None, max_rows=300 if db.is_sqlite else 291 * 2)
    assert len(windows) >= 3
    seen: dict[int, list[int]] = {}
    for w in windows:
        for b in db.window_reports("q", 1, w, [0, 1, 2], with_slots=True):
            assert b.count <= (300 if db.is_sqlite else 2 * 291) and b.stage == 1
            vals = b.reports()[:, 0]
            assert [int(v) for v in vals] == [int(s) * 7 % 200 for s in b.slots]
            assert all(int(s) % 3 == b.grp for s in b.slots)
            seen.setdefault(b.grp, []).extend(int(s) for s in b.slots)
    assert sorted(x for v in seen.values() for x in v) == list(range(1000))


def test_stream_windows_are_planned_on_stored_bytes(db):
    """Wide reports stored narrow (275 values at 2 bytes: 550 B, 2 200 B as int64) are read
    in windows sized on what is stored: on PostgreSQL a window spans the blocks of about
    2 MiB of reports, not the ~3 blocks an int64 (out-of-line) estimate gave."""
    _query(db)
    width = 275
    payload = np.arange(width, dtype=np.int16).tobytes()
    db.store_reports([PendingReport("q", 1, f"d{i}", 0, 1, i, payload, 2) for i in range(400)])
    windows = db.close_windows("q", 1, 400, 8 * width)
    if db.is_sqlite:
        assert len(windows) == 1
    else:  # 2 MiB of in-row reports: 256 blocks a window (the 400 reports fill ~30)
        assert len(windows) == 1 and windows[0].hi - windows[0].lo == 256
    (block,) = list(db.window_reports("q", 1, windows[0], [0], with_slots=False))
    assert block.count == 400 and block.reports().shape == (400, width)


def test_due_phases_take_a_new_connection_after_theirs_died(db):
    # phases_due, get_phases and assignment reads use held autocommit connections (every
    # replica polls several times a second); one that died is dropped with the others and
    # the read runs again on a new one, so the call still answers; the due check still
    # sees every writer's counters merged with the phase row
    _query(db, quota=2)
    db.store_reports([PendingReport("q", 1, "d", 0, 1, 0, b"\x00" * 8)])
    assert db.phases_due() == []
    for read in (db.phases_due, lambda: db.get_phases("q")[0]["received"],
                 lambda: db.get_assignments("q", ["x"])):
        held = list(db._readers)
        assert held
        for raw in held:
            raw.close()  # the database or the network dropped them
        assert read() in ([], 1)
        assert not any(raw in db._readers for raw in held)
    db.store_reports([PendingReport("q", 1, "e", 0, 1, 1, b"\x00" * 8)])
    assert db.phases_due() == [("q", 1)]
    assert db.phases_due(t=0) == [("q", 1)]


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


def test_shuffled_batches_never_take_a_phase_past_its_quota(db):
    """Issue 25: received ≤ quota in shuffle mode. Two replicas (two ``Database`` objects,
    each with its own counter rows) store the shuffler's batches of one phase: the quota
    counts what every replica stored; a batch that would pass it stores nothing; two
    batches racing for the last places cannot both get in (the phase's advisory lock held
    exclusively on PostgreSQL, one writer at a time on SQLite); a re-sent batch id is a
    duplicate; a closed phase takes nothing."""
    from uldp.collector.storage.shuffle import ShuffledBatch

    _query(db, quota=10)
    other = open_database(str(db.url.render_as_string(hide_password=False)))

    def batch(n: int) -> ShuffledBatch:
        return ShuffledBatch("q", secrets.token_hex(16), 1, 0, 0, n,
                             [np.int64(i).tobytes() for i in range(n)], 20, n, "v")

    def store(d: Database, b: ShuffledBatch):
        with d.write() as conn:
            return d.store_batch_in(conn, b)

    try:
        first = batch(4)
        assert store(db, first).stored == 4
        assert store(other, first).duplicate
        over = store(other, batch(7))
        assert (over.over_quota, over.stored) == ((4, 10), 0)
        outs: list = []
        racers = [threading.Thread(target=lambda d=d: outs.append(store(d, batch(4))))
                  for d in (db, other)]
        for t in racers:
            t.start()
        for t in racers:
            t.join()
        assert sorted(o.stored for o in outs) == [0, 4]
        assert [o.over_quota for o in outs if not o.stored] == [(8, 10)]
        assert store(other, batch(2)).stored == 2
        assert store(db, batch(1)).over_quota == (10, 10)
        assert db.get_phases("q")[0]["received"] == 10
        with db.read() as conn:
            assert conn.execute(text("SELECT count(*) FROM uldp_reports")).scalar() == 10
        b2 = ShuffledBatch("q", secrets.token_hex(16), 1, 0, 0, 1, [b"\0" * 8], 20)
        with db.write() as conn:
            conn.execute(update(S.phases).where(S.phases.c.phase == 1).values(state="closing"))
        assert store(db, b2).state == "closing"
    finally:
        other.dispose()


def test_a_replayed_ciphertext_is_stored_once_across_batches_and_replicas(db):
    """Issue 25: the same sealed report forwarded in two batches — even by two replicas
    at once — is stored once per (query, phase): its digest is checked in the batch's
    transaction; the copies count as refused. Another phase may hold the same digest."""
    from uldp.collector.storage.shuffle import ShuffledBatch, sealed_digest

    _query(db, quota=100)
    other = open_database(str(db.url.render_as_string(hide_password=False)))
    sealed = [secrets.token_bytes(40) for _ in range(6)]

    def batch(items: list[bytes], phase: int = 1) -> ShuffledBatch:
        return ShuffledBatch("q", secrets.token_hex(16), phase, 0, 0, len(items),
                             [np.int64(i).tobytes() for i in range(len(items))], 20,
                             len(items), "v", [sealed_digest(x) for x in items])

    def store(d: Database, b: ShuffledBatch):
        with d.write() as conn:
            return d.store_batch_in(conn, b)

    try:
        out = store(db, batch(sealed[:4]))
        assert (out.stored, out.refused) == (4, 0)
        out = store(other, batch(sealed[2:]))  # 2 replays, 2 new
        assert (out.stored, out.refused) == (2, 2)
        fresh = [secrets.token_bytes(40) for _ in range(5)]
        outs: list = []
        racers = [threading.Thread(target=lambda d=d: outs.append(store(d, batch(fresh))))
                  for d in (db, other)]
        for t in racers:
            t.start()
        for t in racers:
            t.join()
        assert sorted((o.stored, o.refused) for o in outs) == [(0, 5), (5, 0)]
        assert db.get_phases("q")[0]["received"] == 11
        with db.read() as conn:
            assert conn.execute(text("SELECT count(*) FROM uldp_reports")).scalar() == 11
            assert conn.execute(text("SELECT count(*) FROM uldp_shuffle_digests")
                                ).scalar() == 11
        # the table's key holds even if the check were skipped
        with db.write() as conn, pytest.raises(IntegrityError):
            conn.execute(insert(S.shuffle_digests).values(
                query_id="q", phase=1, digest=sealed_digest(sealed[0])))
    finally:
        other.dispose()


def test_declines_are_counted_per_cell_over_every_writer(db):
    """What a shuffler completes a cell on (issue 25: declines never stall a cell): the
    declines of each (phase, group, stage), merged over the replicas' counter rows; a
    duplicate decline counts once."""
    _query(db)
    other = open_database(str(db.url.render_as_string(hide_password=False)))
    try:
        def decline(d: Database, dev: str, grp: int) -> str:
            return d.store_declines([PendingReport("q", 1, dev, grp, 0, 0, b"")])[0].code

        assert [decline(db, "a", 0), decline(other, "b", 0), decline(other, "c", 2),
                decline(db, "a", 0)] == ["OK"] * 4
        assert db.cell_declines("q") == {(1, 0, 0): 2, (1, 2, 0): 1}
        assert db.get_phases("q")[0]["declined"] == 3
    finally:
        other.dispose()


def test_enrolled_devices_are_counted_per_writer_and_migrated(db):
    """``uldp_devices{enrolled}`` reads per-writer counter rows, not the registry: two
    processes (Database objects) adding devices, with repeats within and across them,
    each count only the rows they added, in rows of their own whose sum is the registry's
    size; a version-5 database gets one row counting the devices already enrolled."""
    from uldp.collector.observe.gauges import read_snapshot

    url = str(db.url.render_as_string(hide_password=False))
    other = open_database(url)
    try:
        with db.write() as conn:
            db.add_devices_in(conn, [("a", ""), ("b", ""), ("a", "again")])
        other.add_device("b", "")  # enrolled by the first writer: not counted again
        with other.write() as conn:
            other.add_devices_in(conn, [("c", ""), ("d", ""), ("c", "")])
        db.add_device("e", "")
        assert db.table_counts()["uldp_devices"] == 5
        assert db.enrolled_devices() == other.enrolled_devices() == 5
        assert read_snapshot(other).enrolled == 5
        with db.read() as conn:
            rows = dict(conn.execute(text("SELECT writer, enrolled FROM uldp_device_counts"))
                        .all())
        assert rows == {db.writer_id: 3, other.writer_id: 2}
        with db.write() as conn:  # back to version 5: no counter table
            conn.execute(text("DROP TABLE uldp_device_counts"))
            conn.execute(update(S.meta).where(S.meta.c.key == "schema_version")
                         .values(value="5"))
    finally:
        other.dispose()
    db.dispose()
    d2 = open_database(url)
    try:
        assert d2.enrolled_devices() == 5
        d2.add_device("f", "")
        assert d2.enrolled_devices() == 6 == d2.table_counts()["uldp_devices"]
    finally:
        d2.dispose()


def test_window_sums_leave_out_declines_and_count_wide_reports(db):
    """The database's per-window sums count reports only: declines (empty payloads, no
    typed value) interleaved with them change nothing, and a report too wide for the typed
    columns still counts (so the width check refuses it)."""
    _query(db)
    vals = [3, -5, 7, 11, 0, 2]
    items = [PendingReport("q", 1, f"d{i}", 0, 1, i, np.asarray([v], "<i2").tobytes(), 2)
             for i, v in enumerate(vals)]
    assert {o.code for o in db.store_reports(items)} == {"OK"}
    assert {o.code for o in db.store_declines(
        [PendingReport("q", 1, f"x{i}", 0, 1, 100 + i, b"") for i in range(4)])} == {"OK"}
    (w,) = db.close_windows("q", 1, 10_000, None)
    got = db.window_sums("q", 1, w, [0], 1, True)
    s = got[(0, 1)]
    assert (s.count, s.sums, s.lo, s.hi) == (6, [sum(vals)], -5, 11)
    assert s.filled == [6, 0, 0, 0] and s.gram == [[sum(v * v for v in vals)]]
    wide = PendingReport("q", 1, "wide", 0, 1, 200, np.arange(5, dtype="<i2").tobytes(), 2)
    assert db.store_reports([wide])[0].code == "OK"
    (w,) = db.close_windows("q", 1, 10_000, None)
    s = db.window_sums("q", 1, w, [0], 1, False)[(0, 1)]
    assert s.count == 7 and s.filled[0] == 6  # the width check's evidence
    two = PendingReport("q", 1, "two", 0, 1, 201, np.arange(2, dtype="<i2").tobytes(), 2)
    assert db.store_reports([two])[0].code == "OK"
    (w,) = db.close_windows("q", 1, 10_000, None)
    s = db.window_sums("q", 1, w, [0], 1, False)[(0, 1)]
    assert s.count == 8 and s.filled[:2] == [7, 1]  # one report fills v1: not width 1


def test_a_shuffled_batch_stores_its_reports_in_an_order_of_its_own(db):
    """Issue 25: a batch's reports are stored whole (payloads and their typed columns),
    each under a fresh id and a slot in [0, slots); ids and slots go in sorted (index
    order, the cheap insert) and the payloads are matched to them by the collector's own
    random permutation: a shuffler that sends its batch sorted by value cannot make the
    slots (the windows a phase is closed in) or the ids follow the values."""
    from uldp.collector.storage.shuffle import ShuffledBatch

    n = 2000
    _query(db, quota=n + 1)
    batch = ShuffledBatch("q", secrets.token_hex(16), 1, 0, 0, n,
                          [np.int64(i).tobytes() for i in range(n)], 500, n, "v")
    with db.write() as conn:
        assert db.store_batch_in(conn, batch).stored == n
    wide = ShuffledBatch("q", secrets.token_hex(16), 1, 0, 0, 1,
                         [np.arange(5, dtype="<i8").tobytes()], 500, 1, "v")
    with db.write() as conn:
        assert db.store_batch_in(conn, wide).stored == 1
    with db.read() as conn:
        rows = conn.execute(text("SELECT device_id, slot, payload, v0, v1, v2, v3 FROM "
                                 "uldp_reports WHERE query_id = 'q' ORDER BY device_id")
                            ).all()
    assert len(rows) == n + 1 and len({r[0] for r in rows}) == n + 1
    assert all(r[0].startswith("r-") and len(r[0]) == 26 for r in rows)
    narrow = [r for r in rows if len(r[2]) == 8]
    values = np.array([np.frombuffer(bytes(r[2]), "<i8")[0] for r in narrow])
    assert sorted(values.tolist()) == list(range(n))
    assert all(r[3] == v and r[4:] == (None, None, None)
               for r, v in zip(narrow, values, strict=True))
    (w,) = [r for r in rows if len(r[2]) == 40]
    assert w[3:] == (None, None, None, None)  # five values: no typed columns
    slots = np.array([r[1] for r in narrow])
    assert slots.min() >= 0 and slots.max() < 500

    def rho(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])

    bound = 5 / np.sqrt(n - 1)  # |ρ| of independent ranks: sd 1/√(n−1)
    assert abs(rho(values, slots)) < bound  # slots ignore the batch's order
    assert abs(rho(values, np.arange(n))) < bound  # so do the ids
