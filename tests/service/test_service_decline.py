"""Declining a task (issue 17, item 11): a device that refuses a task for its budget or
its rules says so (DeclineTask, ``proto/uldp/v1/device.proto``), and the collector counts
the declined slot toward the phase's quota, so the phase no longer waits for its deadline
(3600 s here) and closes short. Real collectors on loopback with TLS, real SQLite and
PostgreSQL, the Python SDK's Device (unary calls) and a gateway fleet (batch calls).

The checks of a decline, in order, each changing nothing; the stored decline answers a
repeat (OK, duplicate) and a later report (ALREADY_EXISTS), and a stored report answers a
later decline the same way."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest

from tests.service.wire import enroll_with_task, one_phase_query, report_for, send
from uldp.client.device import Device, StateFile
from uldp.client.wire import MAX_BATCH_ITEMS, bearer, common_pb2, device_pb2, device_pb2_grpc
from uldp.collector.service.client import QueryRequest
from uldp.collector.simulation.fleet import FleetDataset, dataset_for_query
from uldp.collector.simulation.gateway import run_gateway_fleet

DEADLINE_S = 3600.0
#: well under the deadline: a phase that closes within this did not wait for it
PROMPT_S = 90.0


def _decline(stub, tok, task, reason="budget", **kw):
    d = device_pb2.Decline(query_id=task.query_id, phase=task.phase,
                           task_digest=task.task_digest, reason=reason, **kw)
    return stub.DeclineTask(device_pb2.DeclineTaskRequest(decline=d), metadata=bearer(tok),
                            timeout=30)


def _closed_promptly(a, qid: str, phase: int = 1) -> object:
    t0 = time.monotonic()
    while True:
        q = a.get(qid)
        ph = q.phases[phase - 1]
        if ph.closed_at_ms:
            return q
        assert time.monotonic() - t0 < PROMPT_S, f"phase {phase} of {qid} still waits: {ph}"
        time.sleep(0.2)


def test_a_refusing_device_no_longer_makes_the_phase_wait(start_collector, db_url, tmp_path):
    """Three devices, one query of three users: the third refuses for its budget (the
    query's ε is 2, its budget 1). Before, the phase waited out its 3600 s deadline; now
    the device declines and the query finishes with the two reports."""
    c = start_collector(db_url)
    a = c.analyst()
    a.create(QueryRequest(kind="mean", method="ssl", epsilon=2.0, dataset="x", users=3,
                          samples=16, query_id="q", phase_timeout_s=DEADLINE_S))
    devs = [Device(c.endpoint, tmp_path / f"d{i}", budget=b) for i, b in
            enumerate((4.0, 1.0, 4.0))]
    results = []
    for d in devs:
        d.add_dataset("x", np.linspace(-0.5, 0.5, 16))
        results.append(d.poll())
    assert [r.submitted for r in results] == [["q"], [], ["q"]]
    assert results[1].refused and "budget" in results[1].refused[0][1]
    assert results[1].declined == ["q"]
    q = _closed_promptly(a, "q")
    ph = q.phases[0]
    assert (ph.quota, ph.received, ph.declined) == (3, 2, 1)
    final = a.wait("q", timeout_s=PROMPT_S)
    assert a.result("q").reports_per_phase == [2], final
    # the declining device's ledger charged nothing; a repeat poll sends nothing new
    assert devs[1].ledger.spent_units() == 0
    again = devs[1].poll()
    assert (again.submitted, again.declined) == ([], [])
    for d in devs:
        d.close()
    a.close()


def test_without_a_decline_the_phase_waits_for_its_deadline(start_collector, tmp_path,
                                                            monkeypatch):
    """The control (an SDK that refuses silently, as before): the refused slot is never
    answered, so the phase stays open, one answer short, until its deadline."""
    monkeypatch.setattr(Device, "decline", lambda self, task, refusal: False)
    c = start_collector()
    a = c.analyst()
    a.create(QueryRequest(kind="mean", method="ssl", epsilon=2.0, dataset="x", users=3,
                          samples=16, query_id="q", phase_timeout_s=DEADLINE_S))
    for i, b in enumerate((4.0, 1.0, 4.0)):
        d = Device(c.endpoint, tmp_path / f"d{i}", budget=b)
        d.add_dataset("x", np.linspace(-0.5, 0.5, 16))
        d.poll()
        d.close()
    time.sleep(2.0)  # ten ticks of the phase closer
    ph = a.get("q").phases[0]
    assert (ph.state, ph.received, ph.declined, ph.closed_at_ms) == (
        common_pb2.PHASE_STATE_OPEN, 2, 0, 0)
    a.close()


def test_a_refused_stage_two_task_closes_the_last_phase(start_collector, tmp_path):
    """Two-stage: the devices of stage II learn their task only when phase 2 opens; one
    whose budget another query spent declines then, and phase 2 closes without it."""
    c = start_collector()
    a = c.analyst()
    users = 8
    a.create(QueryRequest(kind="mean", method="two-stage", epsilon=1.0, dataset="x",
                          users=users, samples=16, query_id="two", phase_timeout_s=DEADLINE_S))
    devs = [Device(c.endpoint, tmp_path / f"d{i}", budget=1.0) for i in range(users)]
    for d in devs:
        d.add_dataset("x", np.linspace(-0.5, 0.5, 16))
        d.poll()
    _closed_promptly(a, "two", 1)
    stage2 = [d for d in devs if d.ledger.get("two") is None]
    assert stage2
    stage2[0].ledger.record("elsewhere", "x" * 64, 1, 1 << 24, b"\0" * 8)  # budget gone
    stage2[0].ledger.mark("elsewhere", "acknowledged")
    outs = [d.run(timeout_s=PROMPT_S) for d in stage2]
    assert outs[0].declined == ["two"] and all(o.submitted == ["two"] for o in outs[1:])
    q = _closed_promptly(a, "two", 2)
    # phase 1 can close (and phase 2 open) before the loop above polled its last devices:
    # those of phase 2 then reported at their first poll and are not in ``stage2``
    ph = q.phases[1]
    assert (ph.received, ph.declined) == (ph.quota - 1, 1)
    assert ph.quota >= len(stage2)
    for d in devs:
        d.close()
    a.close()


def test_the_checks_of_a_decline_in_order(start_collector, db_url):
    c = start_collector(db_url)
    one_phase_query(c, users=3)
    ch = c.channel()
    stub = device_pb2_grpc.DeviceServiceStub(ch)
    tok, task = enroll_with_task(stub)
    db = c.server.db

    def refused(fn, code, fragment):
        before = db.snapshot()
        with pytest.raises(grpc.RpcError) as ei:
            fn()
        assert ei.value.code() == code, (ei.value.code(), ei.value.details())
        assert fragment in ei.value.details(), ei.value.details()
        assert db.snapshot() == before

    S = grpc.StatusCode
    other_tok, other_task = enroll_with_task(stub)
    stranger = stub.Enroll(device_pb2.EnrollRequest(), timeout=30).token
    refused(lambda: _decline(stub, "", task), S.UNAUTHENTICATED, "missing device token")
    refused(lambda: _decline(stub, tok, task, device_token=tok), S.INVALID_ARGUMENT,
            "device_token is only used in DeclineTaskBatch")
    refused(lambda: _decline(stub, tok, task, reason="Budget!"), S.INVALID_ARGUMENT,
            "reason must be")
    refused(lambda: _decline(stub, tok, task, reason="r" * 33), S.INVALID_ARGUMENT,
            "reason must be")
    wrong = device_pb2.Task(query_id="nope" * 3000, phase=1, task_digest=task.task_digest)
    refused(lambda: _decline(stub, tok, wrong), S.NOT_FOUND, "(12000 characters)")
    refused(lambda: _decline(stub, stranger, task), S.PERMISSION_DENIED, "is not assigned")
    late = device_pb2.Task(query_id=task.query_id, phase=2, task_digest=task.task_digest)
    refused(lambda: _decline(stub, tok, late), S.FAILED_PRECONDITION, "not phase 2")
    bad = device_pb2.Task(query_id=task.query_id, phase=1, task_digest="0" * 64)
    refused(lambda: _decline(stub, tok, bad), S.FAILED_PRECONDITION, "different task")
    # declined: counted once, repeats are OK duplicates, a later report is refused
    assert not _decline(stub, tok, task).duplicate
    assert _decline(stub, tok, task, reason="").duplicate
    assert [p["declined"] for p in db.get_phases("q")] == [1]
    refused(lambda: send(stub, tok, report_for(task, 1)), S.ALREADY_EXISTS, "declined")
    # a stored report is final too: a later decline is refused
    assert not send(stub, other_tok, report_for(other_task, 2)).duplicate
    assert stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]),
                         metadata=bearer(other_tok)).tasks == []  # it reported: no task
    refused(lambda: _decline(stub, other_tok, other_task), S.ALREADY_EXISTS,
            "already has a report")
    assert [(p["received"], p["declined"]) for p in db.get_phases("q")] == [(1, 1)]
    ch.close()


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_decline_batch_judges_each_item(start_collector, mode):
    c = start_collector(server_mode=mode)
    one_phase_query(c, users=3)
    ch = c.channel()
    stub = device_pb2_grpc.DeviceServiceStub(ch)
    (t1, k1), (t2, k2) = enroll_with_task(stub), enroll_with_task(stub)
    D = device_pb2.Decline

    def item(tok, task, **kw):
        return D(query_id=task.query_id, phase=task.phase, task_digest=task.task_digest,
                 device_token=tok, **kw)
    r = stub.DeclineTaskBatch(device_pb2.DeclineTaskBatchRequest(declines=[
        item(t1, k1, reason="budget"), item("", k2), item(t2, k2, reason="BAD REASON"),
        item(t1, k1, reason="budget"), item(t2, k2, reason="declaration")]), timeout=30)
    assert [(x.code, x.duplicate) for x in r.results] == [
        (0, False), (grpc.StatusCode.UNAUTHENTICATED.value[0], False),
        (grpc.StatusCode.INVALID_ARGUMENT.value[0], False), (0, True), (0, False)]
    assert [p["declined"] for p in c.server.db.get_phases("q")] == [2]
    with pytest.raises(grpc.RpcError) as ei:
        stub.DeclineTaskBatch(device_pb2.DeclineTaskBatchRequest(
            declines=[D()] * (MAX_BATCH_ITEMS + 1)), timeout=60)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ch.close()


def test_gateway_devices_decline_what_they_refuse(start_collector, tmp_path):
    """Behind a gateway (batch calls only): every device can afford one of two queries,
    answers the first and declines the second (DeclineTaskBatch); both phases close
    without waiting for their deadline."""
    c = start_collector()
    a = c.analyst()
    n = 24
    for qid in ("first", "second"):
        a.create(QueryRequest(kind="mean", method="ssl", epsilon=1.0, dataset="g", users=n,
                              samples=20, query_id=qid, phase_timeout_s=DEADLINE_S))
    data = dataset_for_query("mean", "uniform", 20, 1, 1.0, 3)
    res = run_gateway_fleet(c.endpoint, tmp_path / "gw", n, [FleetDataset("g", data)],
                            gateways=1, batch=8, budget=1.5, seed=5, timeout_s=PROMPT_S)
    assert (res.submitted, res.unfinished, res.errors) == (n, 0, [])
    assert len(res.refused) == n and res.declined == n
    first, second = _closed_promptly(a, "first"), _closed_promptly(a, "second")
    assert (first.phases[0].received, first.phases[0].declined) == (n, 0)
    assert (second.phases[0].received, second.phases[0].declined) == (0, n)
    sf = StateFile(tmp_path / "gw" / "gateway-0.sqlite")
    assert all(sf.ledger(o, 1.5).get("second") is None for o in sf.owners())
    sf.close()
    a.close()
