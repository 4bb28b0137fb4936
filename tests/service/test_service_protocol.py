"""Wire-protocol corner cases a client written from the proto alone runs into (issue 9):
real collectors on loopback with TLS, on a SQLite file and on PostgreSQL.

* an identical re-send after the phase closed (the acknowledgement of the report that
  closed it was lost) is OK with ``duplicate = true``, unary and batched, through the
  collector's checks and through the storage guard; a different one is ALREADY_EXISTS;
* the real SDK ``Device`` whose acknowledgement is lost ends with the report
  acknowledged in its ledger;
* bytes that are not a valid request get INVALID_ARGUMENT naming only public names, and
  the server logs one WARNING line per call (no ERROR traceback), in both server modes;
* server reflection answers under ``grpc.reflection.v1`` as well as ``v1alpha``.
"""

from __future__ import annotations

import logging
import time

import grpc
import numpy as np
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha

from tests.service.wire import (
    USERS,
    enroll_with_task,
    one_phase_query,
    report_for,
    send,
)
from uldp.client.device import Device
from uldp.client.transport import RetryPolicy
from uldp.client.wire import bearer, device_pb2, device_pb2_grpc
from uldp.collector.service.servicers import DATABASE_UNAVAILABLE
from uldp.collector.storage.db import Database, PendingReport, open_database

WAIT_S = 120.0  # ceiling on a wait on a loaded machine, never a condition of the test


def _wait_done(c, qid: str = "q") -> None:
    a = c.analyst()
    end = time.monotonic() + WAIT_S
    while a.get(qid).state != 2 and time.monotonic() < end:
        time.sleep(0.05)
    q = a.get(qid)
    a.close()
    assert q.state == 2 and q.phases[0].state == 4, q  # DONE, phase CLOSED


def test_identical_resend_after_close_is_a_duplicate(start_collector, db_url):
    c = start_collector(db_url)
    one_phase_query(c)
    ch = c.channel()
    stub = device_pb2_grpc.DeviceServiceStub(ch)
    devices = [enroll_with_task(stub) for _ in range(USERS)]
    reports = [report_for(task, seed=i) for i, (_, task) in enumerate(devices)]
    for (tok, _), rep in zip(devices, reports, strict=True):
        r = send(stub, tok, rep)
        assert not r.duplicate
    last_tok, last_rep = devices[-1][0], reports[-1]  # this report closed the phase
    _wait_done(c)
    db = c.server.db
    before = db.snapshot()
    stored_at = db.stored_report("q", c.server.core.device_from_token(last_tok))
    assert stored_at is not None
    # the acknowledgement was lost: the same Report message again
    r = send(stub, last_tok, last_rep)
    assert r.duplicate and r.received_at_ms == stored_at.received_at_ms
    # batched, from a gateway
    item = device_pb2.Report()
    item.CopyFrom(last_rep)
    item.device_token = last_tok
    b = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(reports=[item, item]))
    assert [(x.code, x.duplicate) for x in b.results] == [(0, True), (0, True)]
    # a different report of the same device is not a duplicate, closed phase or not
    other = next(r for r in (report_for(devices[-1][1], seed=s) for s in range(99, 199))
                 if list(r.values) != list(last_rep.values))
    assert list(other.values) != list(last_rep.values)
    with pytest.raises(grpc.RpcError) as ei:
        send(stub, last_tok, other)
    assert ei.value.code() == grpc.StatusCode.ALREADY_EXISTS, ei.value.details()
    other.device_token = last_tok
    b = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(reports=[other]))
    assert b.results[0].code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    assert db.snapshot() == before  # nothing changed
    ch.close()


def test_storage_guard_judges_the_stored_report_before_the_phase(tmp_path, db_url):
    """The writer's re-check under the phase-row lock (the core's cached phase state may
    still say open): identical → OK duplicate, different → ALREADY_EXISTS, nothing
    stored → FAILED_PRECONDITION; PostgreSQL's pipelined path falls back correctly."""
    db: Database = open_database(db_url)
    db.create_query(dict(query_id="q", kind="mean", dataset="x", epsilon=1.0, spec_json="{}",
                         seed="1", state="running", current_phase=1, num_phases=1,
                         target_users=3, phase_timeout_s=60.0, result_json=None), [2], 2**62)

    def rep(dev: str, slot: int, payload: bytes) -> PendingReport:
        return PendingReport("q", 1, dev, 0, 1, slot, payload)
    first = [rep("a", 0, b"\x01" * 8), rep("b", 1, b"\x02" * 8)]
    assert [o.code for o in db.store_reports(first)] == ["OK", "OK"]
    assert db.begin_close("q", 1, "closer#1", 60_000)
    assert db.finish_close("q", 1, "closer#1", {"reports": 2}, next_deadline_ms=None,
                           result={"values": []})
    before = db.snapshot()
    out = db.store_reports([rep("a", 0, b"\x01" * 8), rep("b", 1, b"\x09" * 8),
                            rep("c", 2, b"\x03" * 8), rep("a", 0, b"\x01" * 8)])
    assert [(o.code, o.duplicate) for o in out] == [
        ("OK", True), ("ALREADY_EXISTS", False), ("FAILED_PRECONDITION", False), ("OK", True)]
    assert "not open (state: closed)" in out[2].message
    assert out[0].received_at_ms == db.stored_report("q", "a").received_at_ms
    assert db.snapshot() == before
    db.dispose()


class _LoseFirstAck(grpc.UnaryUnaryClientInterceptor):
    """The first SubmitReport reaches the collector (and is stored), but its answer is
    lost: the caller sees UNAVAILABLE only after ``wait()`` returns (the phase closed)."""

    class Lost(grpc.RpcError, grpc.Call):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            return "connection lost before the acknowledgement arrived"

    def __init__(self, wait) -> None:
        self.wait = wait
        self.lost = 0

    def intercept_unary_unary(self, continuation, details, request):
        call = continuation(details, request)
        if details.method.endswith("/SubmitReport") and self.lost == 0:
            call.result()  # the report was stored and acknowledged ...
            self.lost += 1
            self.wait()  # ... its report closed the phase ...
            raise self.Lost()  # ... and the acknowledgement never arrived
        return call


def test_sdk_lost_ack_after_close_ends_acknowledged(start_collector, db_url, tmp_path):
    c = start_collector(db_url)
    one_phase_query(c)
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        for i in range(USERS - 1):
            tok, task = enroll_with_task(stub)
            send(stub, tok, report_for(task, seed=i))
    lose = _LoseFirstAck(lambda: _wait_done(c))
    ch = grpc.intercept_channel(c.channel(), lose)
    dev = Device(c.endpoint, tmp_path / "dev", channel=ch, budget=4.0,
                 retry=RetryPolicy(attempts=4, base_s=0.01, cap_s=0.05, timeout_s=30))
    dev.add_dataset("x", np.linspace(-0.5, 0.5, 16))
    r = dev.poll()
    assert lose.lost == 1
    assert r.submitted == ["q"] and not r.rejected and not r.pending, r
    # the ledger's state of an acknowledged report (named "acknowledged" since the SDK's
    # totality rework, "acked" before it)
    assert dev.ledger.get("q").state in ("acked", "acknowledged")
    assert not dev.ledger.entries("pending")
    assert c.server.db.table_counts()["uldp_reports"] == USERS
    ch.close()


GARBAGE = b"\xff\xff\xff\xff not a protobuf message"
#: (method path, streaming shape) of every kind of method the collector serves
METHODS = [
    ("/uldp.v1.DeviceService/Enroll", "unary"),
    ("/uldp.v1.DeviceService/SubmitReport", "unary"),
    ("/uldp.v1.DeviceService/SubmitReportBatch", "unary"),
    ("/uldp.v1.AnalystService/CreateQuery", "unary"),
    ("/uldp.v1.AnalystService/WatchQuery", "server_stream"),
    ("/grpc.health.v1.Health/Check", "unary"),
    ("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "bidi"),
    ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "bidi"),
]


def _raw_call(ch: grpc.Channel, path: str, shape: str) -> None:
    """Send GARBAGE as the request body of ``path`` (no serializer: raw bytes)."""
    if shape == "unary":
        ch.unary_unary(path)(GARBAGE, timeout=30)
    elif shape == "server_stream":
        list(ch.unary_stream(path)(GARBAGE, timeout=30))
    else:
        list(ch.stream_stream(path)(iter([GARBAGE]), timeout=30))


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_undecodable_request_is_invalid_argument_with_one_warning(start_collector, mode,
                                                                  caplog):
    c = start_collector(server_mode=mode)
    one_phase_query(c)
    before = c.server.db.snapshot()
    with c.channel() as ch:
        for path, shape in METHODS:
            caplog.clear()
            with caplog.at_level(logging.INFO), pytest.raises(grpc.RpcError) as ei:
                _raw_call(ch, path, shape)
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (path, ei.value)
            details = ei.value.details()
            assert details.startswith(f"the request to {path} is not a valid "), details
            for leak in ("Traceback", "Error", "Exception", "class", "google", "pb2", ".py"):
                assert leak not in details, (path, details)
            mine = [r for r in caplog.records if "undecodable request" in r.getMessage()]
            assert [r.levelno for r in mine] == [logging.WARNING], (path, caplog.text)
            assert path in mine[0].getMessage() and "\n" not in mine[0].getMessage()
            assert mine[0].exc_info is None
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert c.server.db.snapshot() == before
    # a well-formed call on the same server still works
    with c.channel() as ch:
        assert device_pb2_grpc.DeviceServiceStub(ch).Enroll(device_pb2.EnrollRequest()).token


#: ServerReflectionRequest{list_services: ""} encoded by hand from the v1 proto (field 7,
#: length-delimited): independent of the message classes the server uses
LIST_SERVICES_V1 = bytes([7 << 3 | 2, 0])


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_reflection_serves_v1_and_v1alpha(start_collector, mode):
    c = start_collector(server_mode=mode)
    want = {"uldp.v1.DeviceService", "uldp.v1.AnalystService", "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}
    with c.channel() as ch:
        for version in ("v1", "v1alpha"):
            call = ch.stream_stream(f"/grpc.reflection.{version}.ServerReflection/"
                                    "ServerReflectionInfo",
                                    response_deserializer=v1alpha.ServerReflectionResponse
                                    .FromString)
            sym = v1alpha.ServerReflectionRequest(
                file_containing_symbol="grpc.reflection.v1.ServerReflection")
            dev = v1alpha.ServerReflectionRequest(
                file_containing_symbol="uldp.v1.DeviceService")
            got = list(call(iter([LIST_SERVICES_V1, sym.SerializeToString(),
                                  dev.SerializeToString()]), timeout=30))
            assert len(got) == 3
            assert {s.name for s in got[0].list_services_response.service} == want
            files = {}
            for r in got[1:]:
                assert not r.HasField("error_response"), r.error_response
                for raw in r.file_descriptor_response.file_descriptor_proto:
                    f = descriptor_pb2.FileDescriptorProto.FromString(raw)
                    files[f.name] = f
            v1 = files["grpc/reflection/v1/reflection.proto"]
            assert v1.package == "grpc.reflection.v1"
            assert [m.input_type for m in v1.service[0].method] == [
                ".grpc.reflection.v1.ServerReflectionRequest"]
            assert files["uldp/v1/device.proto"].service[0].name == "DeviceService"


SIMULATED = ("report is from a simulation (seeded noise); this query does not accept "
             "simulated reports")


def _sim(rep: device_pb2.Report) -> device_pb2.Report:
    out = device_pb2.Report()
    out.CopyFrom(rep)
    out.simulated = True
    return out


def test_simulated_reports_are_refused_unless_the_query_allows_them(start_collector,
                                                                    db_url):
    c = start_collector(db_url, allow_simulated=False)
    assert not one_phase_query(c, "strict").allow_simulated
    assert one_phase_query(c, "sim", allow_simulated=True).allow_simulated
    assert c.analyst().get("sim").allow_simulated  # stored, shown in the status
    db = c.server.db
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        tok = stub.Enroll(device_pb2.EnrollRequest()).token
        r = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]), metadata=bearer(tok))
        tasks = {t.query_id: t for t in r.tasks}
        assert set(tasks) == {"strict", "sim"}
        strict = report_for(tasks["strict"], seed=1)
        before = db.snapshot()
        # unary and batched: refused, nothing stored
        with pytest.raises(grpc.RpcError) as ei:
            send(stub, tok, _sim(strict))
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert ei.value.details() == SIMULATED
        item = _sim(strict)
        item.device_token = tok
        b = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(reports=[item]))
        assert (b.results[0].code, b.results[0].message) == (
            grpc.StatusCode.FAILED_PRECONDITION.value[0], SIMULATED)
        assert db.snapshot() == before
        # the order of checks: an unknown query is NOT_FOUND first; the simulated check
        # comes before the assignment (a device never assigned to "strict")
        tok2 = stub.Enroll(device_pb2.EnrollRequest()).token
        for qid, code in (("nope", grpc.StatusCode.NOT_FOUND),
                          ("strict", grpc.StatusCode.FAILED_PRECONDITION)):
            rep = _sim(strict)
            rep.query_id = qid
            with pytest.raises(grpc.RpcError) as ei:
                send(stub, tok2, rep)
            assert ei.value.code() == code, ei.value.details()
        assert db.snapshot() == before
        # the same report unmarked is accepted; a simulated one where the query allows it
        assert not send(stub, tok, strict).duplicate
        assert not send(stub, tok, _sim(report_for(tasks["sim"], seed=2))).duplicate
    assert db.table_counts()["uldp_reports"] == 2


def test_allow_simulated_is_part_of_the_idempotent_create(start_collector):
    c = start_collector(allow_simulated=False)
    one_phase_query(c, "q", allow_simulated=True)
    assert one_phase_query(c, "q", allow_simulated=True).allow_simulated  # same request again
    with pytest.raises(grpc.RpcError) as ei:
        one_phase_query(c, "q")
    assert ei.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.RpcError) as ei:
        one_phase_query(c, "q2", params={"allow_simulated": "yes"})
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'allow_simulated' must be true or false" in ei.value.details()


def test_cli_allow_simulated_flags(start_collector, pki, capsys):
    """``uldp collector serve --allow-simulated`` (the subprocess fixture passes it)
    accepts a simulated report for a query that does not allow it itself;
    ``uldp query create --allow-simulated`` stores the query option."""
    from uldp.collector.cli.service import main

    c = start_collector(subprocess_=True)
    conn = ["--target", c.target, "--ca", str(pki.ca_cert), "--admin-token-file",
            str(pki.directory / "admin.token"), "--json"]
    assert main(["query", "create", "--kind", "mean", "--method", "ssl", "--epsilon", "2",
                 "--dataset", "x", "--users", "3", "--samples", "16", "--id", "cliq",
                 "--allow-simulated", *conn]) == 0
    assert '"allow_simulated": true' in capsys.readouterr().out
    one_phase_query(c, "strict")
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        tok = stub.Enroll(device_pb2.EnrollRequest()).token
        r = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"], query_id="strict"),
                          metadata=bearer(tok))
        assert not send(stub, tok, _sim(report_for(r.tasks[0], seed=3))).duplicate


@pytest.mark.postgres
def test_database_outage_is_unavailable_without_internals(start_collector, postgres):
    """A call that hits a database that refuses connections gets UNAVAILABLE with a
    message for the caller (no driver or Python class names), and works again after."""
    import psycopg

    url = postgres.new_database()
    name = url.rsplit("/", 1)[1]
    c = start_collector(url)
    one_phase_query(c)
    a = c.analyst()
    admin = f"host=127.0.0.1 port={postgres.port} user=uldp dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as pg:
        pg.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        pg.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
        try:
            with pytest.raises(grpc.RpcError) as ei:
                a.get("q")
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
            assert ei.value.details() == DATABASE_UNAVAILABLE
        finally:
            pg.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    assert a.get("q").query_id == "q"
    a.close()
