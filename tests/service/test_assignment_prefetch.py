"""A replica that has not seen a device's GetTasks loads its assignments on the first
report: the missed (query, device) pairs and the same devices' assignments to every
other running query, in one read (issue 28: behind a balancer that spreads a device's
calls, each device missed once per query and replica). On SQLite and real PostgreSQL."""

from __future__ import annotations

from typing import Any, cast

from uldp.collector.service.tasks import TaskServer
from uldp.collector.storage.db import Database


def _query(db: Database, qid: str) -> None:
    db.create_query(dict(query_id=qid, kind="mean", dataset="x", epsilon=1.0, spec_json="{}",
                         seed="1", state="running", current_phase=1, num_phases=1,
                         target_users=50, phase_timeout_s=60.0, result_json=None),
                    [50], 2**62)


def _assign(db: Database, qid: str, devices: list[str]) -> None:
    with db.write() as conn:
        got = db.assign_many_in(conn, qid, devices, lambda s: (s % 2, 1, 1))
    assert all(a is not None for a in got.values())


def test_assignments_of_many_devices_and_queries(db):
    for q in ("a", "b", "c"):
        _query(db, q)
    _assign(db, "a", ["d1", "d2"])
    _assign(db, "b", ["d2", "d3"])
    _assign(db, "c", ["d1"])
    rows = db.get_assignments_of(["a", "b", "a"], ["d1", "d2", "d3", "d9", "d2"])
    assert sorted((r["query_id"], r["device_id"]) for r in rows) == [
        ("a", "d1"), ("a", "d2"), ("b", "d2"), ("b", "d3")]  # not c: not asked
    for r in rows:  # the very rows the single look-up gives
        assert r == db.get_assignment(r["query_id"], r["device_id"])
    assert db.get_assignments_of([], ["d1"]) == [] and db.get_assignments_of(["a"], []) == []


def test_a_miss_also_caches_the_device_in_the_other_running_queries(db):
    for q in ("a", "b"):
        _query(db, q)
    _query(db, "done")
    _assign(db, "a", ["d1", "d2"])
    _assign(db, "b", ["d1"])
    _assign(db, "done", ["d1"])
    with db.write() as conn:  # the query ended after d1 took a slot in it
        conn.exec_driver_sql("UPDATE uldp_queries SET state = 'finished' WHERE query_id = "
                             + ("?" if db.is_sqlite else "%s"), ("done",))
    # the look-ups a replica makes need only the database (no writer, catalogue, phases)
    none = cast(Any, None)
    tasks = TaskServer(db, none, none, none)
    tasks._running_queries()  # read by every GetTasks; the miss read uses the last list
    tasks.prefetch_devices([("a", "d1"), ("a", "d2"), ("a", "d7")])
    assert tasks.cached("a", "d1") and tasks.cached("a", "d2")
    assert tasks.cached("b", "d1")  # not asked about: the other running query
    assert not tasks.cached("b", "d2")  # d2 has no slot in b
    assert not tasks.cached("a", "d7")  # no slot: its own look-up refuses it later
    assert not tasks.cached("done", "d1")  # not running
    assert tasks.assignment("b", "d1") == db.get_assignment("b", "d1")
