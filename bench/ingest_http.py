"""Benchmark: report ingestion over the HTTP port (Connect, gRPC-Web) against native gRPC.

    python bench/ingest_http.py [--devices 10000] [--backend sqlite|postgres]

One real ``uldp collector serve --http-port`` process (the same process serves both ports:
same core, same group-commit writer, same database) on loopback with TLS. Preparation (not
timed): ``--devices`` devices enroll and call GetTasks over gRPC, which assigns each of them
to every query (single-phase ``ssl`` mean queries, one report per device per query); the
reports are computed with the production device function and serialized before any clock
starts. Then, one after the other on the same box:

* unary: ``--unary-queries`` × devices ``SubmitReport`` calls per protocol, ``--concurrency``
  in flight from one asyncio client — native gRPC over 8 TLS channels (``bench/ingest.py``'s
  client), Connect and gRPC-Web over one TLS HTTP/1.1 keep-alive connection per call in
  flight (as many browsers would hold) with pre-built request bytes; reports/s and per-call
  latency p50/p99 (an OK answer = committed);
* batched: ``--batch-queries`` × devices reports in ``SubmitReportBatch`` calls of
  ``--batch-size`` (each item with its device token), over gRPC and over Connect, from
  ``--batch-threads`` calls in flight; reports/s.

The table gives each protocol's rate as a share of native gRPC's. CPU µs per report of the
collector and of the load generator (from /proc) go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import ssl
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import (
    _batched,
    _cpu,
    _prepare,
    _reports,
    _unary_aio,
    local_postgres,
)

from uldp.client.transport import Endpoint
from uldp.client.wire import device_pb2
from uldp.collector.security.certs import make_dev_pki
from uldp.collector.security.tokens import new_admin_token
from uldp.collector.service.client import AnalystClient, QueryRequest
from uldp.collector.simulation.demo import start_collector_process

SERVICE = "/uldp.v1.DeviceService/"


def _http_request(port: int, method: str, body: bytes, token: str | None,
                  protocol: str) -> bytes:
    """The exact bytes of one HTTP/1.1 request (built before the clock starts)."""
    if protocol == "grpc-web":
        body = b"\x00" + len(body).to_bytes(4, "big") + body
        ctype = b"application/grpc-web+proto\r\nx-grpc-web: 1"
    else:
        ctype = b"application/proto\r\nconnect-protocol-version: 1"
    auth = f"authorization: Bearer {token}\r\n".encode() if token else b""
    return (f"POST {SERVICE}{method} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n".encode()
            + b"content-type: " + ctype + b"\r\n" + auth
            + f"content-length: {len(body)}\r\n\r\n".encode() + body)


async def _read_answer(r: asyncio.StreamReader, protocol: str) -> bool:
    """Read one HTTP/1.1 response (content-length or chunked); True when it says OK."""
    head = await r.readuntil(b"\r\n\r\n")
    length, chunked = 0, False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            length = int(v)
        elif k == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    if chunked:
        parts = []
        while True:
            size = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append(await r.readexactly(size + 2))
            if size == 0:
                break
        body = b"".join(parts)
    else:
        body = await r.readexactly(length)
    if not head.startswith(b"HTTP/1.1 200"):
        if os.environ.get("ULDP_BENCH_DEBUG"):
            print(head, body[:300], file=sys.stderr)
        return False
    return (protocol == "connect" or b"grpc-status: 0" in body or b"grpc-status:0" in body
            or b"grpc-status: 0" in head)


def http_calls(port: int, ca: Path, requests: list[bytes], protocol: str,
               concurrency: int) -> tuple[float, np.ndarray, int]:
    """Pre-built requests from one asyncio client, one keep-alive TLS connection per call in
    flight: (calls/s, per-call latency, calls not OK)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    lat = np.zeros(len(requests))
    bad = [0]

    async def run() -> float:
        nxt = iter(range(len(requests)))
        conns = [await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
                 for _ in range(concurrency)]
        for _, w in conns:
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        async def worker(k: int) -> None:
            r, w = conns[k]
            for j in nxt:
                t = time.perf_counter()
                w.write(requests[j])
                if not await _read_answer(r, protocol):
                    bad[0] += 1
                lat[j] = time.perf_counter() - t
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        el = time.perf_counter() - t0
        for _, w in conns:
            w.close()
        return el
    el = asyncio.run(run())
    return len(requests) / el, lat, bad[0]


def _queries(an: AnalystClient, qids: list[str], n: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for q in qids:
            an.create(QueryRequest(kind="mean", epsilon=1.0, dataset="x", users=n, samples=16,
                                   method="ssl", query_id=q, phase_timeout_s=3600))


def _batches(prep, qids: list[str], size: int, seed: int
             ) -> list[device_pb2.SubmitReportBatchRequest]:
    items = []
    for k, q in enumerate(qids):
        for i, r in enumerate(_reports(prep, q, seed + k)):
            r.device_token = prep.tokens[i]
            items.append(r)
    return [device_pb2.SubmitReportBatchRequest(reports=items[s:s + size])
            for s in range(0, len(items), size)]


def _measure(pid: int, fn, n: int) -> tuple[object, float, float]:
    c0, s0 = _cpu(pid), _cpu(None)
    out = fn()
    return out, 1e6 * (_cpu(pid) - c0) / n, 1e6 * (_cpu(None) - s0) / n


def run(db_url: str, work: Path, a: argparse.Namespace) -> list[dict[str, object]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        http_port = s.getsockname()[1]
    proc, port = start_collector_process(work, db_url, work / "pki",
                                         ["--workers", str(a.workers), "--http-port",
                                          str(http_port)])
    ep = Endpoint(f"127.0.0.1:{port}", work / "pki" / "ca.pem")
    ca = work / "pki" / "ca.pem"
    protos = ("grpc", "connect", "grpc-web")
    try:
        an = AnalystClient(ep, (work / "pki" / "admin.token").read_text())
        n = a.devices
        unary_q = {p: [f"u-{p}-{i}" for i in range(a.unary_queries)] for p in protos}
        batch_q = {p: [f"b-{p}-{i}" for i in range(a.batch_queries)] for p in ("grpc", "connect")}
        qids = [q for v in (*unary_q.values(), *batch_q.values()) for q in v]
        _queries(an, qids, n)
        prep = _prepare(ep, n, a.threads)
        assert all(len(t) == len(qids) for t in prep.tasks)
        rows: list[dict[str, object]] = []
        for k, p in enumerate(protos):
            unary = [(i, r) for j, q in enumerate(unary_q[p])
                     for i, r in enumerate(_reports(prep, q, 10 * k + j))]
            if p == "grpc":
                got, cpu_s, cpu_c = _measure(proc.pid, lambda u=unary: _unary_aio(
                    ep, prep, u, a.concurrency), len(unary))
                rate, lat = got  # type: ignore[misc]
                bad = 0
            else:
                reqs = [_http_request(http_port, "SubmitReport",
                                      device_pb2.SubmitReportRequest(report=r)
                                      .SerializeToString(), prep.tokens[i], p)
                        for i, r in unary]
                got, cpu_s, cpu_c = _measure(proc.pid, lambda rq=reqs, p=p: http_calls(
                    http_port, ca, rq, p, a.concurrency), len(reqs))
                rate, lat, bad = got  # type: ignore[misc]
            assert bad == 0, f"{bad} {p} calls failed"
            rows.append({"path": f"unary, {p}", "rps": rate, "p50": float(np.median(lat)) * 1e3,
                         "p99": float(np.percentile(lat, 99)) * 1e3, "n": len(unary),
                         "cpu_s": cpu_s, "cpu_c": cpu_c})
        for k, p in enumerate(("grpc", "connect")):
            batches = _batches(prep, batch_q[p], a.batch_size, 100 + 10 * k)
            total = sum(len(b.reports) for b in batches)
            if p == "grpc":
                got, cpu_s, cpu_c = _measure(proc.pid, lambda b=batches: _batched(
                    ep, b, a.batch_threads), total)
                rate, bad = got  # type: ignore[misc]
                lat = np.array([np.nan])
            else:
                reqs = [_http_request(http_port, "SubmitReportBatch", b.SerializeToString(),
                                      None, p) for b in batches]
                got, cpu_s, cpu_c = _measure(proc.pid, lambda rq=reqs: http_calls(
                    http_port, ca, rq, "connect", a.batch_threads), total)
                calls, lat, bad = got  # type: ignore[misc]
                rate = calls * a.batch_size
            assert bad == 0, f"{bad} batched {p} calls failed"
            rows.append({"path": f"batched, {p}", "rps": rate, "p50": float(np.nan),
                         "p99": float(np.nan), "n": total, "cpu_s": cpu_s, "cpu_c": cpu_c})
        for q in qids:  # every report was committed: each query closes with all its reports
            final = an.wait(q, 300)
            assert final.state == 2 and final.phases[0].received == n, (q, final)
        an.close()
        return rows
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=10_000)
    ap.add_argument("--unary-queries", type=int, default=2)
    ap.add_argument("--batch-queries", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--batch-threads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=64, help="preparation threads")
    ap.add_argument("--concurrency", type=int, default=48, help="unary calls in flight")
    ap.add_argument("--workers", type=int, default=64, help="collector handler threads")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="uldp-bench-http-") as tmp:
        work = Path(tmp)
        make_dev_pki(work / "pki", ["localhost", "127.0.0.1"])
        (work / "pki" / "admin.token").write_text(new_admin_token())
        if a.backend == "sqlite":
            rows = run(f"sqlite:///{work / 'ingest.db'}", work, a)
        else:
            with local_postgres(durable=True) as pg:
                rows = run(pg.new_database(), work, a)
    print(f"cores: {os.cpu_count()}, backend: {a.backend}, devices: {a.devices}, unary in "
          f"flight: {a.concurrency}, batches of {a.batch_size} x {a.batch_threads} in flight",
          file=sys.stderr)
    for r in rows:
        print(f"{r['path']}: CPU µs per report: collector {r['cpu_s']:.0f}, "
              f"load generator {r['cpu_c']:.0f}", file=sys.stderr)
    base = {kind: next(r["rps"] for r in rows if r["path"] == f"{kind}, grpc")
            for kind in ("unary", "batched")}
    print("| path | reports/s | p50 (ms) | p99 (ms) | reports | vs native gRPC |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        kind = str(r["path"]).split(",")[0]
        rps = float(r["rps"])  # type: ignore[arg-type]
        p50 = "–" if np.isnan(r["p50"]) else f"{r['p50']:.1f}"  # type: ignore[arg-type]
        p99 = "–" if np.isnan(r["p99"]) else f"{r['p99']:.1f}"  # type: ignore[arg-type]
        print(f"| {r['path']} | {rps:,.0f} | {p50} | {p99} | {r['n']:,} | "
              f"{rps / float(base[kind]):.0%} |")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
