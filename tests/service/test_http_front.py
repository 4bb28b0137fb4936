"""The collector's HTTP port (Connect and gRPC-Web; ``uldp.collector.http``), against real
collectors on loopback with TLS: the same servicers as the native port (one
implementation of every check), its size limit before decoding, undecodable bytes, CORS
(nothing allowed by default, a foreign origin refused before any work), ``/healthz``,
mutual TLS, the ``serve`` flags, and two replicas on one PostgreSQL database serving
devices on both ports."""

from __future__ import annotations

import logging
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import grpc
import numpy as np
import pytest

from tests.service.conftest import ADMIN_TOKEN
from tests.service.connect_channel import ConnectChannel, https_call
from tests.service.wire import enroll_with_task, one_phase_query, report_for, send
from uldp.client.device import Device
from uldp.client.randomness import RandomSource
from uldp.client.transport import RetryPolicy
from uldp.client.wire import device_pb2, device_pb2_grpc
from uldp.collector.service.client import AnalystClient, QueryRequest

PROTOCOLS = ["connect", "grpc-web"]


def _http(c, path: str, method: str = "GET", headers: dict[str, str] | None = None,
          body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    return https_call(c.http_url + path, c.pki.ca_cert, method, headers, body)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_both_ports_answer_from_one_store(start_collector, protocol):
    """A report sent over HTTP is the report the native port sees: an identical re-send
    over gRPC is a duplicate, a different one ALREADY_EXISTS with the same message."""
    c = start_collector(http=True)
    one_phase_query(c, users=3)
    with ConnectChannel(c.http_url, c.pki.ca_cert, protocol) as hch, c.channel() as gch:
        web, native = device_pb2_grpc.DeviceServiceStub(hch), device_pb2_grpc.DeviceServiceStub(gch)
        tok, task = enroll_with_task(web)
        rep = report_for(task, seed=1)
        assert not send(web, tok, rep).duplicate
        assert send(native, tok, rep).duplicate
        assert send(web, tok, rep).duplicate
        other = report_for(task, seed=2)
        msgs = []
        for stub in (web, native):
            with pytest.raises(grpc.RpcError) as ei:
                send(stub, tok, other)
            assert ei.value.code() == grpc.StatusCode.ALREADY_EXISTS
            msgs.append(ei.value.details())
        assert msgs[0] == msgs[1]
    assert c.server.db.table_counts()["uldp_reports"] == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_oversize_and_undecodable_requests(start_collector, protocol, caplog):
    c = start_collector(http=True)
    one_phase_query(c)
    before = c.server.db.snapshot()
    with ConnectChannel(c.http_url, c.pki.ca_cert, protocol) as ch:
        huge = device_pb2.SubmitReportRequest(report=device_pb2.Report(
            query_id="q", phase=1, values=[1 << 40] * 900_000))
        assert huge.ByteSize() > 4 << 20
        with pytest.raises(grpc.RpcError) as ei:
            ch.unary_unary("/uldp.v1.DeviceService/SubmitReport")(huge.SerializeToString())
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for path in ("/uldp.v1.DeviceService/SubmitReport", "/uldp.v1.AnalystService/GetQuery"):
            caplog.clear()
            with caplog.at_level(logging.INFO), pytest.raises(grpc.RpcError) as ei:
                ch.unary_unary(path)(b"\xff\xff\xff\xff garbage")
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert ei.value.details().startswith(f"the request to {path} is not a valid "
                                                 "uldp.v1.")
            mine = [r for r in caplog.records if "undecodable request" in r.getMessage()]
            assert [r.levelno for r in mine] == [logging.WARNING]
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert c.server.db.snapshot() == before


def test_cors_allow_list(start_collector):
    """Nothing is allowed by default; an allowed origin gets its preflight and its CORS
    headers; a foreign origin is refused (403) before any route runs."""
    enroll = "/uldp.v1.DeviceService/Enroll"
    proto = {"content-type": "application/proto"}
    closed = start_collector(http=True)
    st, _, _ = _http(closed, enroll, "POST", {**proto, "origin": "https://app.example"}, b"")
    assert st == 403
    c = start_collector(http=True, cors_origins=("https://app.example",))
    before = c.server.db.snapshot()
    st, h, body = _http(c, enroll, "POST", {**proto, "origin": "https://evil.example"}, b"")
    assert st == 403 and b"CORS" in body and "access-control-allow-origin" not in h
    st, h, _ = _http(c, enroll, "OPTIONS", {"origin": "https://evil.example",
                                            "access-control-request-method": "POST"})
    assert st == 403 and "access-control-allow-origin" not in h
    assert c.server.db.snapshot() == before
    st, h, _ = _http(c, enroll, "OPTIONS", {
        "origin": "https://app.example", "access-control-request-method": "POST",
        "access-control-request-headers": "content-type, authorization"})
    assert st == 204 and h["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in h["access-control-allow-headers"]
    st, h, body = _http(c, enroll, "POST", {**proto, "origin": "https://app.example"}, b"")
    assert st == 200 and h["access-control-allow-origin"] == "https://app.example"
    assert "grpc-status" in h["access-control-expose-headers"]
    assert device_pb2.EnrollResponse.FromString(body).token
    st, h, _ = _http(c, enroll, "POST", proto, b"")  # no Origin: an app, not a page
    assert st == 200 and "access-control-allow-origin" not in h


def test_healthz_and_unknown_paths(start_collector):
    c = start_collector(http=True)
    assert _http(c, "/healthz")[:1] == (200,)
    assert _http(c, "/nope")[0] == 404
    assert _http(c, "/uldp.v1.DeviceService/Nope", "POST",
                 {"content-type": "application/proto"}, b"")[0] == 404
    c.front.app.serving = False
    assert _http(c, "/healthz")[0] == 503


def test_mutual_tls_on_the_http_port(pki, tmp_path):
    from uldp.collector.http import HttpConfig, attach_front
    from uldp.collector.service.server import CollectorServer, ServerConfig

    srv = CollectorServer(ServerConfig(
        db_url=f"sqlite:///{tmp_path / 'm.db'}", tls_cert=pki.server_cert,
        tls_key=pki.server_key, port=0, tls_client_ca=pki.ca_cert,
        admin_token_file=pki.directory / "admin.token"))
    srv.start()
    front = attach_front(srv.core, srv.executor, HttpConfig(
        pki.server_cert, pki.server_key, port=0, tls_client_ca=pki.ca_cert))
    front.start()
    url = f"https://127.0.0.1:{front.port}"
    try:
        with ConnectChannel(url, pki.ca_cert) as ch, pytest.raises(grpc.RpcError) as ei:
            device_pb2_grpc.DeviceServiceStub(ch).Enroll(device_pb2.EnrollRequest())
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        with ConnectChannel(url, pki.ca_cert, client_cert=pki.client_cert,
                            client_key=pki.client_key) as ch:
            assert device_pb2_grpc.DeviceServiceStub(ch).Enroll(
                device_pb2.EnrollRequest()).device_id
    finally:
        front.stop()
        srv.stop()


def _serve(pki, tmp_path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uldp.collector.service_cli", "collector", "serve", "--db",
         str(tmp_path / "x.db"), "--tls-dir", str(pki.directory), "--port", "0", *flags],
        capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flags, says", [
    (["--http-port", "0", "--cors-origin", "app.example"], "--cors-origin 'app.example'"),
    (["--http-port", "0", "--cors-origin", "https://a.example/path"], "scheme://host"),
    (["--cors-origin", "https://a.example"], "--cors-origin needs --http-port"),
    (["--http-port", "70000"], "--http-port"),
])
def test_serve_http_flags_are_checked_first(pki, tmp_path, flags, says):
    r = _serve(pki, tmp_path, *flags)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "x.db").exists()


@pytest.mark.postgres
def test_two_replicas_on_postgres_serve_both_ports(start_collector, postgres, tmp_path):
    """Two ``serve`` processes, one PostgreSQL database: SDK devices on replica A's HTTP
    port (Connect), replica B's HTTP port (gRPC-Web) and B's gRPC port complete one
    two-stage query together."""
    url = postgres.new_database()
    a = start_collector(url, subprocess_=True, http=True, name="ra")
    b = start_collector(url, subprocess_=True, http=True, name="rb")
    users = 36
    with closing(AnalystClient(a.endpoint, ADMIN_TOKEN)) as analyst:
        analyst.create(QueryRequest(method="two-stage", kind="mean", epsilon=2.0,
                                    dataset="x", users=users, samples=8, query_id="qr",
                                    phase_timeout_s=300, allow_simulated=True))
        routes = [(a, "connect"), (b, "grpc-web"), (b, None)]

        def run(i: int) -> list[str]:
            col, proto = routes[i % 3]
            ch = (ConnectChannel(col.http_url, col.pki.ca_cert, proto) if proto
                  else col.channel())
            dev = Device(col.target, tmp_path / f"d{i}", channel=ch, budget=4.0,
                         rng=RandomSource.seeded(i), simulation=True, durable=False,
                         retry=RetryPolicy(attempts=8))
            dev.add_dataset("x", np.full(8, 0.25 + 0.01 * (i % 5)))
            try:
                return dev.run(timeout_s=240).submitted
            finally:
                dev.close()
                ch.close()

        with ThreadPoolExecutor(users) as ex:
            done = list(ex.map(run, range(users)))
        assert all(d == ["qr"] for d in done), done
        q = analyst.wait("qr", 240)
        assert q.state == 2, q
        assert [p.received for p in q.phases] == [users // 2, users - users // 2]

