"""Two collector replicas on one PostgreSQL database never deadlock each other into
UNAVAILABLE (issue 17, item 8).

A replica's group-commit writer assigns the devices of many queries in one transaction.
It used to lock each query's slot counter (``uldp_queries`` row, ``FOR UPDATE``) in the
order the requests arrived, so two replicas assigning over two queries in opposite orders
deadlocked and PostgreSQL aborted one of them: every request of the losing batch got
UNAVAILABLE. (Now each locks only slot blocks of its own: ``test_slot_blocks.py``.)
Here two real ``uldp collector serve`` processes assign
fresh devices to q1 and q2 concurrently, one always asking q1 then q2 and the other q2
then q1 (one GetTasksBatch of many devices per round, both queries in one writer
transaction), while reports of earlier rounds go in through both replicas: no call may
fail, every device gets exactly one slot per query and the slots stay unique.
"""

from __future__ import annotations

import threading

import grpc
import pytest

from uldp.client.wire import device_pb2, device_pb2_grpc
from uldp.collector.service.client import QueryRequest
from uldp.collector.storage.db import open_database

ROUNDS = 40
PER_QUERY = 60  # devices per query per round
QUERIES = ("q1", "q2")


def _create(c) -> None:
    a = c.analyst()
    for q in QUERIES:
        a.create(QueryRequest(kind="mean", method="ssl", epsilon=1.0, dataset=q, users=100_000,
                              samples=8, query_id=q, phase_timeout_s=3600))
    a.close()


def _tokens(stub, n: int) -> list[str]:
    r = stub.EnrollBatch(device_pb2.EnrollBatchRequest(
        requests=[device_pb2.EnrollRequest()] * n), timeout=120)
    assert all(x.code == 0 for x in r.results)
    return [x.enrollment.token for x in r.results]


def _assign(c, order: tuple[str, ...], failures: list[str], done: list[int]) -> None:
    """ROUNDS GetTasksBatch calls, each assigning PER_QUERY fresh devices to every query
    of ``order``, in that order."""
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        toks = _tokens(stub, ROUNDS * PER_QUERY * len(order))
        it = iter(toks)
        for _ in range(ROUNDS):
            items = [device_pb2.GetTasksItem(device_token=next(it), request=device_pb2.
                                             GetTasksRequest(datasets=[q], query_id=q))
                     for q in order for _ in range(PER_QUERY)]
            try:
                r = stub.GetTasksBatch(device_pb2.GetTasksBatchRequest(items=items),
                                       timeout=120)
            except grpc.RpcError as exc:
                failures.append(f"{exc.code().name}: {exc.details()}")
                continue
            bad = [x for x in r.results if x.code != 0 or len(x.response.tasks) != 1]
            if bad:
                failures.append(f"{len(bad)} items: {bad[0]}")
            done[0] += 1


@pytest.mark.postgres
def test_two_replicas_assigning_in_opposite_orders_never_fail(start_collector, postgres,
                                                               tmp_path):
    url = postgres.new_database()
    r1 = start_collector(url, subprocess_=True, name="r1")
    r2 = start_collector(url, subprocess_=True, name="r2")
    _create(r1)
    failures: list[str] = []
    done = [0], [0]
    threads = [threading.Thread(target=_assign, args=(r1, QUERIES, failures, done[0])),
               threading.Thread(target=_assign, args=(r2, QUERIES[::-1], failures, done[1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [], f"{len(failures)} failed calls, e.g. {failures[:3]}"
    assert done[0][0] == done[1][0] == ROUNDS
    db = open_database(url)
    try:
        for q in QUERIES:
            assert db.assigned_count(q) == 2 * ROUNDS * PER_QUERY
            assert db.slots_taken(q) == 2 * ROUNDS * PER_QUERY
    finally:
        db.dispose()
    # no transaction was aborted (the retry did not hide a deadlock)
    logs = "".join(p.read_text() for p in tmp_path.glob("collector-*.log"))
    assert "lock conflict" not in logs


def test_writer_retries_a_transaction_aborted_by_a_lock_conflict(db):
    """A transaction the database aborted for a deadlock is run again inside the writer
    (its callers never see it); any other error still fails the ticket."""
    psycopg = pytest.importorskip("psycopg")
    from uldp.collector.storage.writer import GroupCommitWriter, WriterUnavailable

    calls = []

    def op(conn):
        calls.append(1)
        if len(calls) < 3:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return "done"

    w = GroupCommitWriter(db)
    try:
        assert w.run(op) == "done" and len(calls) == 3
        assert w.stats()["conflict_retries"] == 2

        def broken(conn):
            raise psycopg.errors.UniqueViolation("not a conflict")
        with pytest.raises(WriterUnavailable):
            w.run(broken)
    finally:
        w.close()
