"""The HTTP port's limits against each abuse case of issue 28, on a real collector process
over real sockets (``uldp.collector.http.guard``, ``docs/operations.md`` "Connections and
descriptors"): every case gets a proper status (or, before a request has begun, a closed
connection) within bounded time, and the collector's memory and CPU stay bounded.

* a 64 MiB header: ``431`` before the rest is read, no memory growth;
* a slow head, a slow body: ``408`` after the header / body time; an idle connection (TLS
  done or not) closed after the header time;
* a 4 MB EnrollBatch of empty items, binary and JSON: INVALID_ARGUMENT from the item
  count, before decoding (milliseconds of CPU), four at once without stalling ``/healthz``;
* ``content-type: application/grpc``: ``415`` with ``grpc-status: 12``, no traceback;
* ``X-Forwarded-For``: ignored (a per-address enrolment limit holds against 6 spoofed
  values), believed only from a ``--trusted-proxy``;
* the connection cap: more idle connections than the cap leave ``/healthz`` answering and
  the descriptors bounded (the slowest is evicted);
* the connection flags: a bad value is one line naming the flag, exit 2.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.service.conftest import ADMIN_TOKEN, launch_collector
from tests.service.connect_channel import https_call
from tests.service.flood import (
    close_all,
    closed_within,
    healthz,
    open_idle,
    proc_stats,
    read_response,
    tls,
)
from uldp.client.wire import device_pb2
from uldp.collector.service.enrolment import RateLimit

HEADER_S, BODY_S, CAP = 1.0, 2.0, 40  # 20 connections per port


@pytest.fixture(scope="module")
def col(pki, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("limits")
    c = launch_collector(pki, workdir, subprocess_=True, http=True,
                         extra_args=["--header-timeout", str(HEADER_S), "--body-timeout",
                                     str(BODY_S), "--max-connections", str(CAP),
                                     "--enroll-peer-limit", "5/1h"])
    c.workdir = workdir  # type: ignore[attr-defined]
    yield c
    c.stop()


def _log(c) -> str:
    return "".join(p.read_text(errors="replace") for p in c.workdir.glob("collector-*.log"))


def test_64_mib_header_is_refused_before_it_is_read(col):
    before = proc_stats(col.proc.pid)
    s = tls(col.http_port, col.pki.ca_cert)
    sent = [0]

    def push() -> None:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ")
        chunk = b"a" * (1 << 16)
        try:
            for _ in range(1024):  # 64 MiB
                s.sendall(chunk)
                sent[0] += len(chunk)
        except OSError:
            pass
    t0 = time.monotonic()
    th = threading.Thread(target=push, daemon=True)
    th.start()
    status, _, body = read_response(s, 10)
    took = time.monotonic() - t0
    th.join(10)
    s.close()
    assert status == 431 and b"over the limit of 16384 bytes" in body, (status, body)
    assert took < 5, took
    after = proc_stats(col.proc.pid)
    assert after.hwm_mib - before.hwm_mib < 24, (before, after)


def test_slow_head_slow_body_and_idle_connections_are_timed_out(col):
    port, ca = col.http_port, col.pki.ca_cert
    slow_head = tls(port, ca)
    slow_head.sendall(b"POST /uldp.v1.DeviceService/Enroll HTTP/1.1\r\nhost: x\r\n")
    slow_body = tls(port, ca)
    slow_body.sendall(b"POST /uldp.v1.DeviceService/Enroll HTTP/1.1\r\nhost: x\r\n"
                      b"content-type: application/proto\r\ncontent-length: 100\r\n\r\n0123")
    idle_tls = tls(port, ca)
    idle_tcp = open_idle(port, 1, first=b"\x16")
    t0 = time.monotonic()
    status, _, body = read_response(slow_head, 6)
    assert status == 408 and b"request head did not arrive within 1 s" in body, body
    assert time.monotonic() - t0 < HEADER_S + 3
    status, _, body = read_response(slow_body, 8)
    assert status == 408 and b"request body did not arrive within 2 s" in body, body
    assert time.monotonic() - t0 < BODY_S + 4
    assert closed_within(idle_tls, 6) is not None
    idle_tcp[0].setblocking(True)
    assert closed_within(idle_tcp[0], 6) is not None
    for s in (slow_head, slow_body, idle_tls, *idle_tcp):
        s.close()
    status, _, text = https_call(f"{col.http_url}/metrics", col.pki.ca_cert,
                                 headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    closed = {line.split('"')[1]: float(line.split()[-1]) for line in
              text.decode().splitlines()
              if line.startswith("uldp_http_connections_closed_total{")}
    assert status == 200 and closed["header_timeout"] >= 3 and closed["body_timeout"] >= 1


def _enroll_batch(codec: str) -> tuple[bytes, str]:
    """About 4 MB of EnrollBatch with far more than 10 000 (empty) items."""
    if codec == "proto":
        body = device_pb2.EnrollBatchRequest(
            requests=[device_pb2.EnrollRequest()] * 2_000_000).SerializeToString()
        return body, "application/proto"
    return b'{"requests":[' + b",".join([b"{}"] * 1_300_000) + b"]}", "application/json"


@pytest.mark.parametrize("codec", ["proto", "json"])
def test_oversized_batch_is_counted_before_decoding(col, codec):
    body, ctype = _enroll_batch(codec)
    assert 3_500_000 < len(body) < 4 << 20
    url = f"{col.http_url}/uldp.v1.DeviceService/EnrollBatch"
    cpu0 = proc_stats(col.proc.pid).cpu_s
    status, _, out = https_call(url, col.pki.ca_cert, "POST", {"content-type": ctype}, body)
    err = json.loads(out)
    assert status == 400 and err["code"] == "invalid_argument", (status, out)
    assert err["message"] == "a batch holds at most 10000 items, got more than 10000"
    # four at once, /healthz probed meanwhile
    probes: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            ok, took = healthz(col.http_port, col.pki.ca_cert)
            assert ok
            probes.append(took)
    th = threading.Thread(target=probe, daemon=True)
    th.start()
    with ThreadPoolExecutor(4) as ex:
        codes = list(ex.map(lambda _: https_call(url, col.pki.ca_cert, "POST",
                                                 {"content-type": ctype}, body)[0], range(4)))
    done.set()
    th.join(15)
    assert codes == [400] * 4
    cpu = proc_stats(col.proc.pid).cpu_s - cpu0
    # five 4 MB requests: TLS and reading the bytes, counting; no decoding (1.3 s each
    # binary, 4.1 s JSON before)
    assert cpu < 2.5, cpu
    assert probes and max(probes) < 2.0, probes


def test_native_grpc_content_type_gets_415_without_a_traceback(col):
    status, headers, body = https_call(
        f"{col.http_url}/uldp.v1.DeviceService/Enroll", col.pki.ca_cert, "POST",
        {"content-type": "application/grpc"}, b"\x00\x00\x00\x00\x00")
    assert status == 415 and headers.get("grpc-status") == "12", (status, headers)
    assert b"gRPC port" in body
    time.sleep(0.3)
    assert "Traceback" not in _log(col)


def _enroll_json(c, forwarded: str) -> tuple[int, bytes]:
    status, _, out = https_call(f"{c.http_url}/uldp.v1.DeviceService/Enroll",
                                c.pki.ca_cert, "POST",
                                {"content-type": "application/json",
                                 "x-forwarded-for": forwarded}, b"{}")
    return status, out


def test_x_forwarded_for_is_ignored_by_default(col):
    """--enroll-peer-limit 5/1h: six enrolments from this address, each claiming another
    one: the sixth is refused (the limit counts the connecting address)."""
    out = [_enroll_json(col, f"203.0.113.{i}") for i in range(6)]
    assert [s for s, _ in out] == [200] * 5 + [429], out
    assert json.loads(out[5][1])["code"] == "resource_exhausted"


def test_x_forwarded_for_is_believed_from_a_trusted_proxy(start_collector):
    c = start_collector(http=True, enroll_peer_limit=RateLimit.parse("2/1h"),
                        http_config={"trusted_proxies": ("127.0.0.0/8",)})
    assert [_enroll_json(c, f"203.0.113.{i}")[0] for i in range(6)] == [200] * 6
    assert [_enroll_json(c, "198.51.100.9")[0] for _ in range(3)] == [200, 200, 429]


def test_connection_cap_evicts_the_slowest(col):
    """Three times the HTTP port's cap of idle connections: /healthz still answers, the
    descriptors stay within the cap (the slowest connection is evicted)."""
    base = proc_stats(col.proc.pid).fds
    silent = open_idle(col.http_port, 100)  # never sent a byte: left in the kernel
    time.sleep(0.3)
    assert proc_stats(col.proc.pid).fds <= base + 1
    socks = silent + open_idle(col.http_port, 3 * CAP // 2 + 30, first=b"\x16")
    try:
        time.sleep(0.5)
        for _ in range(3):
            ok, took = healthz(col.http_port, col.pki.ca_cert)
            assert ok and took < 2, took
        fds = proc_stats(col.proc.pid).fds
        assert fds <= base + CAP // 2 + 2, (base, fds)
    finally:
        close_all(socks)


def test_max_connections_must_fit_in_the_descriptors(pki, tmp_path, capsys, monkeypatch):
    """``--max-connections`` over what RLIMIT_NOFILE allows (1 024 here): one line, exit 2
    (the limit itself is set on a real process in ``test_connection_flood``)."""
    from uldp.collector.cli.service import main
    from uldp.collector.service import connections

    monkeypatch.setattr(connections, "raise_descriptor_limit", lambda: 1024)
    code = main(["collector", "serve", "--db", str(tmp_path / "x.db"), "--tls-dir",
                 str(pki.directory), "--port", "0", "--http-port", "0",
                 "--max-connections", "5000"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "uldp: error: --max-connections 5000: 5000 connections need more than the 1024 file "
        "descriptors of this process (160 are kept for the database and the process "
        "itself): give at most 864, or raise the limit (ulimit -n, systemd LimitNOFILE=)"]
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("flags, says", [
    (["--max-connections", "none"], "--max-connections: expected a whole number"),
    (["--max-connections", "1"], "--max-connections 1: 1 is below 2"),
    (["--max-header-bytes", "10"], "--max-header-bytes: expected a number of bytes"),
    (["--header-timeout", "0"], "--header-timeout"),
    (["--body-timeout", "1e9"], "--body-timeout: expected seconds up to 3600"),
    (["--http-port", "0", "--trusted-proxy", "proxy.example"],
     "--trusted-proxy 'proxy.example': give the proxy's address or network"),
    (["--trusted-proxy", "10.0.0.7"], "--trusted-proxy needs --http-port"),
])
def test_connection_flags_are_checked_first(pki, tmp_path, capsys, flags, says):
    from uldp.collector.cli.service import main

    argv = ["collector", "serve", "--db", str(tmp_path / "x.db"), "--tls-dir",
            str(pki.directory), "--port", "0", *flags]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.db").exists()


def test_caps_are_planned_from_the_descriptor_limit():
    from uldp.collector.service.connections import CEILING, grpc_options, plan_connections

    p = plan_connections(1024, http=True)
    assert (p.grpc_connections, p.http_connections) == (432, 432)
    assert plan_connections(1024, http=False).grpc_connections == 864
    assert plan_connections(1 << 20, http=True).http_connections == CEILING
    assert plan_connections(1024, http=True, total=101).grpc_connections == 51
    with pytest.raises(ValueError, match="raise the limit"):
        plan_connections(100, http=True)
    opts = dict(grpc_options(p))
    assert opts["grpc.max_allowed_incoming_connections"] == 432
    assert opts["grpc.server_handshake_timeout_ms"] == 10_000


def test_systemd_unit_raises_the_descriptor_limit():
    """The unit's LimitNOFILE leaves room for the full cap on both ports."""
    from pathlib import Path

    from uldp.collector.service.connections import CEILING, plan_connections

    unit = (Path(__file__).resolve().parents[2] / "deploy" / "systemd" /
            "uldp-collector.service").read_text()
    limit = int(unit.split("\nLimitNOFILE=")[1].split()[0])
    assert plan_connections(limit, http=True).http_connections == CEILING
