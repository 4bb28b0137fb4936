"""The ingest SQL path (``Database.store_reports_cursor``) on SQLite and PostgreSQL: one
batch mixing new reports, duplicates inside the batch (identical and different), a
report for a phase that is not open, and duplicates of stored rows; outcomes, stored
bytes and the phase's ``received`` counter. On PostgreSQL the batch with a closed phase
stores the reports of open phases in one round trip and leaves the rest to the
statement-by-statement path, so both paths
are checked for not losing or double counting anything."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from uldp.collector.storage import open_database
from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.db import Database, PendingReport


def _query(db: Database, qid: str) -> None:
    db.create_query(dict(query_id=qid, kind="mean", dataset="x", epsilon=1.0, spec_json="{}",
                         seed="1", state="running", current_phase=1, num_phases=2,
                         target_users=200, phase_timeout_s=60.0, result_json=None),
                    [100, 100], 2**62)


def _rep(qid: str, phase: int, dev: str, payload: bytes) -> PendingReport:
    return PendingReport(qid, phase, dev, 0, 1, int(dev[1:]), payload)


def _stored(db: Database) -> dict[tuple[str, str], bytes]:
    with db.read() as conn:
        rows = conn.execute(select(S.reports.c.query_id, S.reports.c.device_id,
                                   S.reports.c.payload)).all()
    return {(r[0], r[1]): bytes(r[2]) for r in rows}


def _received(db: Database, qid: str) -> list[int]:
    return [p["received"] for p in db.get_phases(qid)]


@pytest.mark.parametrize("with_closed_phase", [False, True])
def test_batch_outcomes_and_counts(db, with_closed_phase):
    _query(db, "a")
    _query(db, "b")
    A, B, C = b"\x01" * 8, b"\x02" * 8, b"\x03" * 8
    batch = [_rep("a", 1, "d1", A), _rep("a", 1, "d2", B), _rep("b", 1, "d1", C),
             _rep("a", 1, "d1", A),   # identical duplicate inside the batch
             _rep("a", 1, "d2", C)]   # different duplicate inside the batch
    if with_closed_phase:
        batch.append(_rep("a", 2, "d9", A))  # phase 2 of "a" is pending, not open
    out = db.store_reports(batch)
    codes = [o.code for o in out]
    assert codes[:5] == ["OK", "OK", "OK", "OK", "ALREADY_EXISTS"]
    assert [o.duplicate for o in out[:4]] == [False, False, False, True]
    assert "one report per device per query" in out[4].message
    if with_closed_phase:
        assert codes[5] == "FAILED_PRECONDITION"
        assert "phase 2 of query a is not open (state: pending)" in out[5].message
    assert _stored(db) == {("a", "d1"): A, ("a", "d2"): B, ("b", "d1"): C}
    assert _received(db, "a") == [2, 0] and _received(db, "b") == [1, 0]

    # against stored rows: identical -> OK duplicate, different -> ALREADY_EXISTS, new -> OK
    out = db.store_reports([_rep("a", 1, "d1", A), _rep("a", 1, "d2", A),
                            _rep("a", 1, "d3", B)])
    assert [(o.code, o.duplicate) for o in out] == [("OK", True), ("ALREADY_EXISTS", False),
                                                    ("OK", False)]
    assert "nothing changed" in out[0].message
    assert _stored(db)[("a", "d2")] == B and _stored(db)[("a", "d3")] == B
    assert _received(db, "a") == [3, 0] and _received(db, "b") == [1, 0]


def test_unknown_phase_only_batch_changes_nothing(db):
    _query(db, "a")
    before = db.snapshot()
    out = db.store_reports([_rep("a", 7, "d1", b"\x00" * 8), _rep("zz", 1, "d2", b"\x00" * 8)])
    assert [o.code for o in out] == ["FAILED_PRECONDITION"] * 2
    assert "query a has no phase 7" in out[0].message
    assert "query zz has no phase 1" in out[1].message
    assert db.snapshot() == before


def _terminate_other_backends(db: Database) -> int:
    """Kill every other PostgreSQL session on this database (a database restart, as seen
    by the collector's held connection)."""
    from sqlalchemy import text

    with db.engine.connect() as conn:
        n = conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()")).scalar()
        conn.commit()
    return int(n or 0)


@pytest.mark.postgres
def test_writer_survives_a_dropped_connection(postgres):
    from uldp.collector.storage.writer import GroupCommitWriter

    db = open_database(postgres.new_database())
    _query(db, "a")
    w = GroupCommitWriter(db, linger_s=0.0)
    try:
        assert w.store_reports([_rep("a", 1, "d1", b"\x01" * 8)])[0].code == "OK"
        assert db._held is not None  # the writer keeps its connection between commits
        assert _terminate_other_backends(db) >= 1
        # the held connection is dead: the batch fails once and is retried on a fresh one
        out = w.store_reports([_rep("a", 1, "d2", b"\x02" * 8), _rep("a", 1, "d3", b"\x03" * 8)])
        assert [o.code for o in out] == ["OK", "OK"]
        assert [o.duplicate for o in out] == [False, False]
        assert _received(db, "a") == [3, 0]
        assert set(_stored(db)) == {("a", "d1"), ("a", "d2"), ("a", "d3")}
    finally:
        w.close()
        db.dispose()


def test_hostile_ids_and_payloads_are_stored_byte_for_byte(db):
    """PostgreSQL sends each column as one array literal: ids with quotes, backslashes,
    braces, commas, spaces, NULL-looking text and non-ASCII, and empty, odd and
    high-byte payloads must come back exactly as sent (and the counter count them)."""
    _query(db, 'q"{,}\\')
    qid = 'q"{,}\\'
    devs = ['d0', 'd"1', "d\\2", "d{3}", "d,4", "d 5", "NULL", "d\u00e97", "d\\\"8"]
    pays = [b"", b"\x00", b"\xff" * 8, b"\\x00", b'"', b"{}", b",", b"\x80\x81", b"N"]
    out = db.store_reports([PendingReport(qid, 1, d, 0, 1, i, p, 1)
                            for i, (d, p) in enumerate(zip(devs, pays, strict=True))])
    assert [o.code for o in out] == ["OK"] * len(devs)
    assert not any(o.duplicate for o in out)
    assert _stored(db) == {(qid, d): p for d, p in zip(devs, pays, strict=True)}
    assert _received(db, qid) == [len(devs), 0]
