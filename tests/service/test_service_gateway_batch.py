"""The gateway batch calls (``proto/uldp/v1/device.proto``): EnrollBatch and GetTasksBatch
judge every item on its own — a bad item gets its own status and changes nothing, the
good ones are served exactly as by the unary call — over real gRPC with TLS, on SQLite and
PostgreSQL, in both server modes; and a fleet behind a gateway (batch calls only, devices
in one StateFile) finishes a two-phase query."""

from __future__ import annotations

from contextlib import closing

import grpc
import numpy as np
import pytest

from tests.service.wire import one_phase_query
from uldp.client.device import Device, StateFile
from uldp.client.ledger import AlreadyParticipated, BudgetExceeded
from uldp.client.wire import MAX_BATCH_ITEMS, bearer, device_pb2, device_pb2_grpc
from uldp.collector.service.client import QueryRequest
from uldp.collector.simulation.fleet import FleetDataset, dataset_for_query
from uldp.collector.simulation.gateway import run_gateway_fleet

OK = 0
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]


def _stub(c):
    ch = c.channel()
    return ch, device_pb2_grpc.DeviceServiceStub(ch)


def _forged(token: str) -> str:
    head, sig = token.split(".")
    return head + "." + ("A" if sig[0] != "A" else "B") + sig[1:]


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_enroll_batch_judges_each_item(start_collector, mode):
    c = start_collector(server_mode=mode, enrollment_secret="s3cret")
    ch, stub = _stub(c)
    first = stub.Enroll(device_pb2.EnrollRequest(enrollment_secret="s3cret", label="a"))
    c.server.core.writer.run(lambda conn: None)  # its registry row (written asynchronously)
    before = c.server.db.table_counts()["uldp_devices"]
    E = device_pb2.EnrollRequest
    r = stub.EnrollBatch(device_pb2.EnrollBatchRequest(requests=[
        E(enrollment_secret="s3cret", label="new"),
        E(enrollment_secret="wrong"),
        E(enrollment_secret="s3cret", previous_token=first.token),  # renewal: same id
        E(enrollment_secret="s3cret", previous_token=_forged(first.token)),
        E(enrollment_secret="s3cret", label="new2"),
    ]), timeout=60)
    codes = [x.code for x in r.results]
    assert codes == [OK, UNAUTHENTICATED, OK, UNAUTHENTICATED, OK]
    assert "wrong or missing enrollment secret" in r.results[1].message
    assert r.results[3].message.startswith("previous token rejected")
    assert r.results[2].enrollment.device_id == first.device_id
    new_ids = {r.results[0].enrollment.device_id, r.results[4].enrollment.device_id}
    assert len(new_ids) == 2 and first.device_id not in new_ids
    assert not r.results[1].HasField("enrollment")
    # every issued token works for a unary call of its own device
    for x in (r.results[0], r.results[2], r.results[4]):
        got = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]),
                            metadata=bearer(x.enrollment.token))
        assert got.retry_after_ms == 2000  # no query: nothing to do
    # the registry rows of the two new devices only
    c.server.core.writer.run(lambda conn: None)
    assert c.server.db.table_counts()["uldp_devices"] == before + 2
    ch.close()


def test_a_batch_over_the_limit_is_refused_whole(start_collector):
    c = start_collector()
    one_phase_query(c)
    ch, stub = _stub(c)
    before = c.server.db.snapshot()
    n = MAX_BATCH_ITEMS + 1
    for call, req in (
            (stub.EnrollBatch, device_pb2.EnrollBatchRequest(
                requests=[device_pb2.EnrollRequest()] * n)),
            (stub.GetTasksBatch, device_pb2.GetTasksBatchRequest(
                items=[device_pb2.GetTasksItem()] * n))):
        with pytest.raises(grpc.RpcError) as ei:
            call(req, timeout=60)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ei.value.details() == (f"a batch holds at most {MAX_BATCH_ITEMS} items, got "
                                      f"more than {MAX_BATCH_ITEMS}")
    assert c.server.db.snapshot() == before
    ch.close()


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_get_tasks_batch_judges_each_item(start_collector, db_url, mode):
    c = start_collector(db_url, server_mode=mode)
    one_phase_query(c, users=3)
    ch, stub = _stub(c)
    toks = [stub.Enroll(device_pb2.EnrollRequest()).token for _ in range(4)]
    unary = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]), metadata=bearer(toks[0]))
    assert len(unary.tasks) == 1
    R, Item = device_pb2.GetTasksRequest, device_pb2.GetTasksItem
    before = c.server.db.table_counts()["uldp_assignments"]
    r = stub.GetTasksBatch(device_pb2.GetTasksBatchRequest(items=[
        Item(device_token=_forged(toks[1]), request=R(datasets=["x"])),
        Item(device_token=toks[1], request=R(datasets=["x"], query_id="nope")),
        Item(device_token=toks[2], request=R(datasets=["x"])),
        Item(device_token="", request=R(datasets=["x"])),
        Item(device_token=toks[0], request=R(datasets=["x"])),  # already assigned
        Item(device_token=toks[1], request=R(datasets=["other"])),  # no query: nothing
        Item(device_token=toks[3], request=R(datasets=["x"])),
        Item(device_token=toks[1], request=R(datasets=["x"])),  # the query is full
    ]), timeout=60)
    codes = [x.code for x in r.results]
    assert codes == [UNAUTHENTICATED, NOT_FOUND, OK, UNAUTHENTICATED, OK, OK, OK, OK]
    assert r.results[1].message == "unknown query 'nope'"
    assert "missing device token" in r.results[3].message
    assert not r.results[0].HasField("response")
    # the device assigned by the unary call gets the same task again
    assert r.results[4].response.tasks[0] == unary.tasks[0]
    assert [len(r.results[k].response.tasks) for k in (2, 5, 6, 7)] == [1, 0, 1, 0]
    assert r.results[5].response.retry_after_ms == 2000
    # refused items assigned nothing; the slots went in request order
    db = c.server.db
    assert db.table_counts()["uldp_assignments"] == before + 2
    ids = [c.server.core.device_from_token(t) for t in toks]
    slots = [db.get_assignment("q", d) for d in ids]
    assert slots[1] is None
    assert [slots[k]["slot"] for k in (0, 2, 3)] == [0, 1, 2]
    # the batch answer is what the unary call answers, for every device
    for k in (2, 3):
        u = stub.GetTasks(R(datasets=["x"]), metadata=bearer(toks[k]))
        b = r.results[{2: 2, 3: 6}[k]].response
        assert u.tasks[0].task_digest == b.tasks[0].task_digest
        assert u.tasks[0].group == b.tasks[0].group and u.tasks[0].stage == b.tasks[0].stage
    ch.close()


def test_undecodable_batch_requests_are_invalid_argument(start_collector):
    c = start_collector()
    with c.channel() as ch:
        for m in ("EnrollBatch", "GetTasksBatch"):
            with pytest.raises(grpc.RpcError) as ei:
                ch.unary_unary(f"/uldp.v1.DeviceService/{m}")(b"\xff\xff\xff\xff junk",
                                                               timeout=30)
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"/uldp.v1.DeviceService/{m} is not a valid" in ei.value.details()


def test_state_file_keeps_each_device_apart(tmp_path):
    path = tmp_path / "gw.sqlite"
    sf = StateFile(path, durable=True)
    a, b = sf.ledger("a", 1.0), sf.ledger("b", 1.0)
    units = 1 << 23  # ε = 0.5
    a.record("q1", "d1", 1, units, b"\x01" * 8)
    a.record("q2", "d2", 1, units, b"\x02" * 8)
    with pytest.raises(BudgetExceeded):
        a.check("q3", "d3", units)
    b.record("q1", "dX", 1, units, b"\x03" * 8)  # the same query: another device
    with pytest.raises(AlreadyParticipated):
        b.check("q1", "other digest", units)
    a.mark("q1", "acknowledged")
    sf.save_identity("a", {"device_id": "d-a", "token": "t", "expires_at_ms": 1})
    sf.close()
    again = StateFile(path)  # a restarted gateway sees every device's own state
    a2, b2 = again.ledger("a", 1.0), again.ledger("b", 1.0)
    assert [(e.query_id, e.state) for e in a2.entries()] == [("q1", "acknowledged"),
                                                             ("q2", "pending")]
    assert [e.query_id for e in b2.entries()] == ["q1"] and b2.spent_units() == units
    assert again.load_identity("a")["device_id"] == "d-a" and again.load_identity("b") is None
    assert again.owners() == ["a", "b"]
    again.close()


def test_device_in_a_state_file_runs_the_unary_protocol(start_collector, tmp_path):
    c = start_collector()
    one_phase_query(c, users=2)
    sf = StateFile(tmp_path / "gw.sqlite", durable=False)
    devs = [Device(c.endpoint, sf.slot(f"dev{i}"), budget=4.0) for i in range(2)]
    for d in devs:
        d.add_dataset("x", np.linspace(-0.5, 0.5, 16))
        assert d.poll().submitted == ["q"]
    assert devs[0].device_id != devs[1].device_id
    assert [d.ledger.get("q").state for d in devs] == ["acknowledged"] * 2
    for d in devs:
        d.close()
    sf.close()


def test_gateway_fleet_finishes_a_two_phase_query(start_collector, tmp_path):
    c = start_collector()
    a = c.analyst()
    users = 60
    q = a.create(QueryRequest(kind="mean", method="two-stage", epsilon=2.0, dataset="g",
                              users=users, samples=20, query_id="two", phase_timeout_s=600))
    assert len(q.phases) == 2
    data = dataset_for_query("mean", "uniform", 20, 1, 1.0, 3)
    seen = []
    res = run_gateway_fleet(c.endpoint, tmp_path / "state", users, [FleetDataset("g", data)],
                            gateways=1, batch=16, budget=4.0, seed=7, timeout_s=300,
                            progress=seen.append)
    assert (res.submitted, res.unfinished, res.errors, res.rejected, res.refused) == (
        users, 0, [], [], [])
    assert seen[-1].done == users and seen[-1].checked_in == users
    final = a.wait("two", timeout_s=120)
    assert final.state == 2 and [p.received for p in final.phases] == [
        p.quota for p in final.phases]
    a.close()
    # every device's ledger is in the gateway's one file, every report acknowledged
    sf = StateFile(tmp_path / "state" / "gateway-0.sqlite")
    assert len(sf.owners()) == users
    assert all(sf.ledger(o, 4.0).get("two").state == "acknowledged" for o in sf.owners())
    sf.close()


def test_gateway_enrols_anew_a_device_whose_token_the_collector_refuses(start_collector,
                                                                         tmp_path):
    """The gateway's devices hold identities from a collector whose signing key is gone
    (a collector on a new database): each renewal in EnrollBatch comes back UNAUTHENTICATED
    ("previous token rejected"); the gateway enrols each such device as a new identity
    (as ``Device.enroll`` does) instead of failing it, and the devices report."""
    users, state = 6, tmp_path / "state"
    data = dataset_for_query("mean", "uniform", 8, 1, 1.0, 3)

    def run(c, query_id: str):
        with closing(c.analyst()) as a:
            a.create(QueryRequest(kind="mean", method="ssl", epsilon=1.0, dataset="g",
                                  users=users, samples=8, query_id=query_id,
                                  phase_timeout_s=600))
        return run_gateway_fleet(c.endpoint, state, users, [FleetDataset("g", data)],
                                 gateways=1, batch=4, budget=4.0, seed=11, timeout_s=120)

    old = start_collector()
    first = run(old, "before")
    assert (first.submitted, first.errors) == (users, [])
    old.stop()
    sf = StateFile(state / "gateway-0.sqlite")
    ids_before = {}
    for o in sf.owners():
        d = Device(old.endpoint, sf.slot(o))
        ids_before[o] = d.device_id
        d.close()
    sf.close()
    assert len(ids_before) == users
    new = start_collector(db_url=f"sqlite:///{tmp_path / 'other.db'}")  # another key
    res = run(new, "after")
    assert (res.submitted, res.unfinished, res.errors, res.rejected) == (users, 0, [], [])
    sf = StateFile(state / "gateway-0.sqlite")
    for o, old_id in ids_before.items():  # a new identity, the same ledger
        d = Device(new.endpoint, sf.slot(o), budget=4.0)
        assert d.device_id != old_id
        assert [d.ledger.get(q).state for q in ("before", "after")] == ["acknowledged"] * 2
        d.close()
    sf.close()
