"""Slot assignment without a hot row (issue 28): every collector process assigns devices
from blocks of slots it leased (``uldp.collector.storage.assignments.take_slots``).

What must hold, on SQLite and on real PostgreSQL: a slot goes to at most one device and a
device gets at most one slot; a full query has given every slot 0 .. users − 1; a block
leased by a process that died before using it (kill -9 between the lease's commit and the
assignments' commit leaves exactly that) is used by the others before the query is full;
and on PostgreSQL one replica's open assignment transaction never makes another wait.
"""

from __future__ import annotations

import threading

import pytest

from uldp.collector.storage import open_database
from uldp.collector.storage.db import Database


def _place(slot: int) -> tuple[int, int, int]:
    return slot % 3, 1, 1


def _query(db: Database, qid: str, users: int) -> None:
    db.create_query(dict(query_id=qid, kind="mean", dataset="x", epsilon=1.0, spec_json="{}",
                         seed="1", state="running", current_phase=1, num_phases=1,
                         target_users=users, phase_timeout_s=60.0, result_json=None),
                    [users], 2**62)


def _assign(db: Database, qid: str, devices: list[str]) -> dict[str, dict | None]:
    with db.write() as conn:
        return db.assign_many_in(conn, qid, devices, _place)


def _slots(db: Database, qid: str) -> list[int]:
    with db.read() as conn:
        return sorted(int(r[0]) for r in conn.exec_driver_sql(
            "SELECT slot FROM uldp_assignments WHERE query_id = "
            + ("?" if db.is_sqlite else "%s"), (qid,)))


def _blocks(db: Database) -> int:
    with db.read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM uldp_slot_blocks").scalar_one())


@pytest.fixture
def second(db: Database):
    """Another collector process's view of the same database (its own writer id)."""
    other = open_database(db.engine.url.render_as_string(hide_password=False))
    assert other.writer_id != db.writer_id
    yield other
    other.dispose()


def test_two_processes_fill_a_query_with_every_slot_once(db, second):
    users = 700
    _query(db, "q", users)
    got: dict[str, dict | None] = {}
    lock = threading.Lock()

    def run(d: Database, k: int) -> None:
        for i in range(45):  # 2 x 45 x 9 = 810 devices ask for 700 slots
            ids = [f"p{k}-{i}-{j}" for j in range(9)]
            out = _assign(d, "q", ids)
            # asking again gives the same answers, takes nothing new
            assert _assign(d, "q", ids) == out
            with lock:
                got.update(out)
    ths = [threading.Thread(target=run, args=(d, k)) for k, d in enumerate((db, second))]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    given = [a for a in got.values() if a is not None]
    assert len(got) == 810 and len(given) == users
    assert sorted(a["slot"] for a in given) == list(range(users))
    assert all((a["grp"], a["stage"], a["phase"]) == _place(a["slot"]) for a in given)
    assert _slots(db, "q") == list(range(users))
    assert db.slots_taken("q") == users == db.assigned_count("q")
    assert _blocks(db) == 0  # used-up blocks leave no row
    assert _assign(second, "q", ["late"]) == {"late": None}


def test_a_dead_process_block_is_used_before_the_query_is_full(db, second):
    users = 300
    _query(db, "q", users)
    # the first process assigns a few devices, then leases a block and dies before its
    # assignments commit: its lease is durable, the rest rolled back
    assert all(a is not None for a in _assign(db, "q", [f"a{i}" for i in range(5)]).values())
    with pytest.raises(RuntimeError), db.write() as conn:
        db.assign_many_in(conn, "q", [f"lost{i}" for i in range(200)], _place)
        raise RuntimeError("kill -9")
    db.dispose()
    assert _blocks(second) >= 1 and second.slots_taken("q") == 5
    out = {}
    for i in range(0, 400, 50):
        out.update(_assign(second, "q", [f"b{i + j}" for j in range(50)]))
    assert sum(a is not None for a in out.values()) == users - 5
    assert _slots(second, "q") == list(range(users))
    assert second.slots_taken("q") == users and _blocks(second) == 0


def test_a_query_that_stops_running_takes_no_more_devices(db, second):
    _query(db, "q", 1000)
    assert _assign(db, "q", ["a"])["a"] is not None  # db now holds a block with free slots
    assert db.cancel_query("q")
    assert _assign(db, "q", ["b"]) == {"b": None}
    assert _assign(second, "q", ["c"]) == {"c": None}
    assert db.slots_taken("q") == 1


@pytest.mark.parametrize("db", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_an_open_assignment_transaction_makes_no_other_replica_wait(db, second):
    """The hot row is gone: while one replica's writer transaction holds its slots (it
    assigned devices and has not committed), the other assigns and commits at once. With
    the slot counter locked per assignment it waited for the first one's commit."""
    _query(db, "q", 10_000)
    _assign(second, "q", ["warm"])  # the second replica has a block of its own
    done = threading.Event()
    with db.write() as conn:
        first = db.assign_many_in(conn, "q", [f"a{i}" for i in range(64)], _place)
        assert all(a is not None for a in first.values())

        def other() -> None:
            with second.write() as c2:
                c2.exec_driver_sql("SET LOCAL lock_timeout = '5s'")
                out = second.assign_many_in(c2, "q", [f"b{i}" for i in range(64)], _place)
            assert all(a is not None for a in out.values())
            done.set()
        t = threading.Thread(target=other)
        t.start()
        t.join(timeout=30)
        assert done.is_set(), "the second replica waited for the first one's transaction"
    assert db.slots_taken("q") == 129
    slots = _slots(db, "q")
    assert len(slots) == len(set(slots)) == 129
