"""Every bad input gets a precise gRPC status and message and changes nothing (DESIGN
invariant 5): real collector on loopback with TLS, real SQLite file; the database is
snapshotted before and after each refusal."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec, compute_report
from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import analyst_pb2, analyst_pb2_grpc, bearer, device_pb2, device_pb2_grpc
from uldp.collector.security.tokens import TokenKey
from uldp.collector.service.client import AnalystClient, QueryRequest
from uldp.collector.storage.records import unpack_values

USERS = 24


@pytest.fixture
def env(start_collector):
    c = start_collector()
    a = c.analyst()
    a.create(QueryRequest(method="two-stage", kind="mean", epsilon=2.0, dataset="x", users=USERS,
                          samples=16,
                          query_id="q1", phase_timeout_s=600))
    ch = c.channel()
    stub = device_pb2_grpc.DeviceServiceStub(ch)
    yield c, a, stub
    ch.close()
    a.close()


def enroll(stub) -> tuple[str, str]:
    r = stub.Enroll(device_pb2.EnrollRequest(label="t"))
    return r.device_id, r.token


def tasks(stub, token):
    return stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]), metadata=bearer(token))


def report_for(task, seed=0) -> device_pb2.Report:
    spec = TaskSpec.from_json(task.task_json)
    v = compute_report(spec, np.full(16, 0.25), rng=RandomSource.seeded(seed))
    return device_pb2.Report(query_id=task.query_id, phase=task.phase, values=v.tolist(),
                             task_digest=task.task_digest)


def stage_devices(stub):
    """An enrolled stage-I device with its task, and a stage-II device (waiting)."""
    s1 = s2 = None
    for _ in range(USERS):
        dev, tok = enroll(stub)
        r = tasks(stub, tok)
        if r.tasks and s1 is None:
            s1 = (dev, tok, r.tasks[0])
        elif r.waiting and s2 is None:
            s2 = (dev, tok, r.waiting[0])
        if s1 and s2:
            return s1, s2
    raise AssertionError("no stage split")


def submit(stub, token, report, **kw):
    return stub.SubmitReport(device_pb2.SubmitReportRequest(report=report),
                             metadata=bearer(token) if token is not None else None, **kw)


def refused(c, fn, code: grpc.StatusCode, fragment: str) -> None:
    """``fn()`` fails with ``code`` and a message containing ``fragment``; DB unchanged."""
    before = c.server.db.snapshot()
    with pytest.raises(grpc.RpcError) as ei:
        fn()
    assert ei.value.code() == code, (ei.value.code(), ei.value.details())
    assert fragment in ei.value.details(), ei.value.details()
    assert c.server.db.snapshot() == before


def test_token_failures(env):
    c, _, stub = env
    (dev, _tok, task), _ = stage_devices(stub)
    rep = report_for(task)
    U = grpc.StatusCode.UNAUTHENTICATED
    refused(c, lambda: submit(stub, None, rep), U, "missing device token")
    refused(c, lambda: submit(stub, "garbage", rep), U, "malformed device token")
    forged, _ = TokenKey.generate().issue(dev, 3600)
    refused(c, lambda: submit(stub, forged, rep), U, "invalid device token signature")
    expired, _ = c.server.core.token_key.issue(dev, -5)
    refused(c, lambda: submit(stub, expired, rep), U, "expired")
    refused(c, lambda: tasks(stub, forged), U, "invalid device token signature")
    # renewal with the expired token keeps the identity
    r = stub.Enroll(device_pb2.EnrollRequest(previous_token=expired))
    assert r.device_id == dev
    refused(c, lambda: stub.Enroll(device_pb2.EnrollRequest(previous_token=forged)), U,
            "previous token rejected")


def test_report_failures(env):
    c, _, stub = env
    (_dev1, tok1, task1), (_dev2, tok2, wait2) = stage_devices(stub)
    good = report_for(task1)
    assert wait2.phase == 2
    FP, IA = grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT
    # unknown query
    bad = device_pb2.Report(query_id="nope", phase=1, values=good.values,
                            task_digest=good.task_digest)
    refused(c, lambda: submit(stub, tok1, bad), grpc.StatusCode.NOT_FOUND, "unknown query")
    # a device that never checked in for the query
    _dev3, tok3 = enroll(stub)
    refused(c, lambda: submit(stub, tok3, good), grpc.StatusCode.PERMISSION_DENIED,
            "is not assigned to query q1")
    # report for a phase that is not open (stage-II device during phase 1)
    early = device_pb2.Report(query_id="q1", phase=2, values=[0], task_digest="x" * 64)
    refused(c, lambda: submit(stub, tok2, early), FP, "phase 2 of query q1 is not open")
    # wrong phase for the assignment
    wrong_phase = device_pb2.Report(query_id="q1", phase=2, values=good.values,
                                    task_digest=good.task_digest)
    refused(c, lambda: submit(stub, tok1, wrong_phase), FP, "is assigned to phase 1")
    # wrong shape
    short = device_pb2.Report(query_id="q1", phase=1, values=list(good.values)[:-1],
                              task_digest=good.task_digest)
    refused(c, lambda: submit(stub, tok1, short), IA, f"needs exactly {task1.report_length}")
    # out-of-range integer
    big = list(good.values)
    big[0] = task1.max_abs_value + 1
    oor = device_pb2.Report(query_id="q1", phase=1, values=big, task_digest=good.task_digest)
    refused(c, lambda: submit(stub, tok1, oor), IA, "is outside")
    # computed for another task
    other = device_pb2.Report(query_id="q1", phase=1, values=good.values,
                              task_digest="0" * 64)
    refused(c, lambda: submit(stub, tok1, other), FP, "different task")
    # device_token field in a unary call
    carrying = device_pb2.Report(query_id="q1", phase=1, values=good.values,
                                 task_digest=good.task_digest, device_token=tok1)
    refused(c, lambda: submit(stub, tok1, carrying), IA, "only used in SubmitReportBatch")
    # the good report is stored once; an identical retry is OK and changes nothing
    r = submit(stub, tok1, good)
    assert not r.duplicate
    before = c.server.db.snapshot()
    assert submit(stub, tok1, good).duplicate
    assert c.server.db.snapshot() == before
    # a different second report is a duplicate and is rejected
    # (the first seed from 99 whose report differs: a two-point randomizer such as
    # Duchi's sends the same value for half the seeds)
    second = next(r for r in (report_for(task1, seed=s) for s in range(99, 199))
                  if list(r.values) != list(good.values))
    assert list(second.values) != list(good.values)
    refused(c, lambda: submit(stub, tok1, second), grpc.StatusCode.ALREADY_EXISTS,
            "already has a different report")
    # the stored row is the first report
    rows = c.server.db.snapshot()["uldp_reports"]
    assert len(rows) == 1
    assert unpack_values(rows[0][6], rows[0][8]).tolist() == list(good.values)


def test_oversize_message(env):
    c, _, _ = env
    ep = Endpoint(c.target, c.pki.ca_cert, max_message_bytes=64 << 20)
    with secure_channel(ep) as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        _dev, tok = enroll(stub)
        huge = device_pb2.Report(query_id="q1", phase=1, values=[1 << 40] * 900_000)
        assert huge.ByteSize() > 4 << 20
        refused(c, lambda: submit(stub, tok, huge), grpc.StatusCode.RESOURCE_EXHAUSTED,
                "")


def test_batch_items_get_their_own_status(env):
    c, _, stub = env
    (_dev1, tok1, task1), (dev2, tok2, _) = stage_devices(stub)
    good = report_for(task1)
    good.device_token = tok1
    forged, _ = TokenKey.generate().issue(dev2, 3600)
    bad_tok = device_pb2.Report(query_id="q1", phase=1, values=good.values,
                                task_digest=good.task_digest, device_token=forged)
    short = device_pb2.Report(query_id="q1", phase=1, values=[1], task_digest="a",
                              device_token=tok2)
    r = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(
        reports=[good, bad_tok, short, good]))
    codes = [x.code for x in r.results]
    assert codes == [0, grpc.StatusCode.UNAUTHENTICATED.value[0],
                     grpc.StatusCode.FAILED_PRECONDITION.value[0], 0]
    assert "signature" in r.results[1].message
    assert r.results[3].duplicate and not r.results[0].duplicate
    assert c.server.db.table_counts()["uldp_reports"] == 1


def test_analyst_failures(env):
    c, a, stub = env
    U = grpc.StatusCode.UNAUTHENTICATED
    with c.channel() as ch:
        s = analyst_pb2_grpc.AnalystServiceStub(ch)
        refused(c, lambda: s.ListQueries(analyst_pb2.ListQueriesRequest()), U,
                "admin credential")
        refused(c, lambda: s.CreateQuery(analyst_pb2.CreateQueryRequest(kind="mean"),
                                         metadata=bearer("wrong-token-wrong-token")), U,
                "admin credential")
    IA = grpc.StatusCode.INVALID_ARGUMENT
    refused(c, lambda: a.create(QueryRequest(method="two-stage", kind="mean", epsilon=-1,
                                             dataset="x", users=10,
                                             samples=4)), IA, "epsilon")
    refused(c, lambda: a.create(QueryRequest(kind="nope", epsilon=1, dataset="x", users=10,
                                             samples=4)), IA, "kind")
    refused(c, lambda: a.create(QueryRequest(method="two-stage", kind="mean", epsilon=1,
                                             dataset="x", users=10,
                                             samples=4, query_id="bad id!")), IA, "query_id")
    refused(c, lambda: a.create(QueryRequest(method="two-stage", kind="mean", epsilon=3.0,
                                             dataset="x",
                                             users=USERS, samples=16, query_id="q1")),
            grpc.StatusCode.ALREADY_EXISTS, "different parameters")
    # idempotent re-create
    assert a.create(QueryRequest(method="two-stage", kind="mean", epsilon=2.0, dataset="x",
                                 users=USERS,
                                 samples=16, query_id="q1", phase_timeout_s=600)).query_id == "q1"
    refused(c, lambda: a.result("q1"), grpc.StatusCode.FAILED_PRECONDITION, "is running")
    refused(c, lambda: a.get("missing"), grpc.StatusCode.NOT_FOUND, "unknown query")
    # cancel: then reports are refused, and a second cancel is a precondition failure
    (_dev1, tok1, task1), _ = stage_devices(stub)
    q = a.cancel("q1")
    assert q.state == 3
    refused(c, lambda: submit(stub, tok1, report_for(task1)),
            grpc.StatusCode.FAILED_PRECONDITION, "not open")
    refused(c, lambda: a.cancel("q1"), grpc.StatusCode.FAILED_PRECONDITION, "cancelled")
    assert not tasks(stub, tok1).tasks


def test_enrollment_secret_health_reflection(start_collector):
    c = start_collector(enrollment_secret="s3cret-enrollment")
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        refused(c, lambda: stub.Enroll(device_pb2.EnrollRequest(enrollment_secret="no")),
                grpc.StatusCode.UNAUTHENTICATED, "enrollment secret")
        assert stub.Enroll(device_pb2.EnrollRequest(
            enrollment_secret="s3cret-enrollment")).device_id
        from grpc_health.v1 import health_pb2, health_pb2_grpc
        h = health_pb2_grpc.HealthStub(ch)
        for svc in ("", "uldp.v1.DeviceService", "uldp.v1.AnalystService"):
            assert h.Check(health_pb2.HealthCheckRequest(service=svc)).status == \
                health_pb2.HealthCheckResponse.SERVING
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
        rs = reflection_pb2_grpc.ServerReflectionStub(ch)
        resp = next(iter(rs.ServerReflectionInfo(iter([
            reflection_pb2.ServerReflectionRequest(list_services="")]))))
        names = {s.name for s in resp.list_services_response.service}
        assert {"uldp.v1.DeviceService", "uldp.v1.AnalystService",
                "grpc.health.v1.Health"} <= names


def test_mutual_tls(pki, tmp_path):
    from uldp.collector.service.server import CollectorServer, ServerConfig

    srv = CollectorServer(ServerConfig(
        db_url=f"sqlite:///{tmp_path / 'm.db'}", tls_cert=pki.server_cert,
        tls_key=pki.server_key, port=0, tls_client_ca=pki.ca_cert,
        admin_token_file=pki.directory / "admin.token"))
    srv.start()
    try:
        target = f"127.0.0.1:{srv.port}"
        with secure_channel(Endpoint(target, pki.ca_cert)) as ch:
            with pytest.raises(grpc.RpcError) as ei:
                device_pb2_grpc.DeviceServiceStub(ch).Enroll(device_pb2.EnrollRequest(),
                                                             timeout=5)
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        ep = Endpoint(target, pki.ca_cert, pki.client_cert, pki.client_key)
        with secure_channel(ep) as ch:
            assert device_pb2_grpc.DeviceServiceStub(ch).Enroll(
                device_pb2.EnrollRequest(), timeout=5).device_id
        a = AnalystClient(ep, (pki.directory / "admin.token").read_text())
        assert a.list() == []
        a.close()
    finally:
        srv.stop()


def test_watch_streams_progress(env):
    _c, a, stub = env
    seen = []
    (_dev1, tok1, task1), _ = stage_devices(stub)
    it = a.watch("q1", timeout_s=10)
    seen.append(next(it))
    submit(stub, tok1, report_for(task1))
    q = next(it)
    assert q.phases[0].received == 1
    a.cancel("q1")
    rest = list(it)
    assert rest[-1].state == 3
    assert json.loads(seen[0].spec_json)["kind"] == "mean"
