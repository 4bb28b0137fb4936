"""Benchmark: what an oversized SubmitReportBatch costs the collector (issue 17, item 5).

    python bench/batch_limits.py [--items 2000000] [--concurrent 3] [--mode aio|threads]

Starts a real ``uldp collector serve`` process (SQLite file, TLS on loopback), creates a
one-phase query, then sends the hostile request of the issue: one ``SubmitReportBatch`` of
``--items`` empty reports (2 bytes each on the wire, no token), first alone, then
``--concurrent`` at once (``--max-message-bytes 1073741824`` lets the collector send
an answer of any size) while a well-behaved client keeps calling ``GetTasks``. Printed
(a markdown table): the call's status and wall time, the collector's resident memory
(VmRSS before and after, and its peak VmHWM, from /proc), the size of the answer, and the
p50/max latency of the GetTasks calls made while the hostile calls ran.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES, bearer, device_pb2, device_pb2_grpc
from uldp.collector.security.certs import make_dev_pki
from uldp.collector.service.client import AnalystClient, QueryRequest


def _mem_mib(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) / 1024
    return out


def _hostile(ch: grpc.Channel, n: int) -> tuple[str, float, int]:
    call = ch.unary_unary("/uldp.v1.DeviceService/SubmitReportBatch")
    t0 = time.perf_counter()
    try:
        answer = call(b"\x0a\x00" * n, timeout=600)
        status, size = "OK", len(answer)
    except grpc.RpcError as exc:
        status, size = f"{exc.code().name}: {(exc.details() or '')[:60]}", 0
    return status, time.perf_counter() - t0, size


def _prober(stub: device_pb2_grpc.DeviceServiceStub, token: str, stop: threading.Event,
            lat: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]), metadata=bearer(token),
                      timeout=600)
        lat.append(time.perf_counter() - t0)
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=2_000_000)
    ap.add_argument("--concurrent", type=int, default=3)
    ap.add_argument("--mode", choices=("aio", "threads"), default="aio")
    ap.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES,
                    help="the collector's --max-message-bytes (default: its default)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="uldp-bench-limits-"))
    pki = make_dev_pki(work / "tls")
    ready = work / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "uldp.collector.cli.service", "collector", "serve", "--db",
         str(work / "c.db"), "--port", "0", "--tls-dir", str(pki.directory), "--ready-file",
         str(ready), "--server-mode", a.mode, "--log-level", "error",
         "--max-message-bytes", str(a.max_message_bytes)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not ready.exists():
            if proc.poll() is not None:
                raise SystemExit("collector exited")
            time.sleep(0.1)
        target = ready.read_text().strip()
        ep = Endpoint(target, pki.ca_cert, max_message_bytes=1 << 30)
        admin = (pki.directory / "admin.token").read_text().strip()
        an = AnalystClient(ep, admin)
        an.create(QueryRequest(kind="mean", method="ssl", epsilon=1.0, dataset="x",
                               users=1000, samples=8, query_id="q"))
        an.close()
        ch = secure_channel(ep)
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        token = stub.Enroll(device_pb2.EnrollRequest()).token
        rows = []
        for k in (1, a.concurrent):
            before = _mem_mib(proc.pid)
            lat: list[float] = []
            stop = threading.Event()
            probe = threading.Thread(target=_prober, args=(stub, token, stop, lat))
            probe.start()
            got: list[tuple[str, float, int]] = []
            threads = [threading.Thread(target=lambda out=got: out.append(
                _hostile(ch, a.items))) for _ in range(k)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            stop.set()
            probe.join()
            after = _mem_mib(proc.pid)
            for status, secs, size in got:
                rows.append((k, status, secs, size, before["VmRSS"], after["VmRSS"],
                             after["VmHWM"], statistics.median(lat), max(lat)))
        print(f"collector --server-mode {a.mode} --max-message-bytes {a.max_message_bytes}; "
              f"{a.items} empty items per call "
              f"({2 * a.items / 1e6:.1f} MB request)\n")
        print("| calls at once | status | wall s | answer bytes | RSS before MiB | "
              "RSS after MiB | peak RSS MiB | GetTasks p50 ms | GetTasks max ms |")
        print("|---|---|---|---|---|---|---|---|---|")
        for k, status, secs, size, rb, ra, hwm, p50, mx in rows:
            print(f"| {k} | {status} | {secs:.2f} | {size} | {rb:.0f} | {ra:.0f} | {hwm:.0f} "
                  f"| {p50 * 1e3:.1f} | {mx * 1e3:.1f} |")
        ch.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
