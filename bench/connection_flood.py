"""Benchmark: a collector limited to 1 024 descriptors under 1 100 slow unauthenticated
connections (issue 28, "Bounded connections"; ``docs/operations.md``, "Connections and
descriptors").

    python bench/connection_flood.py [--flood 1100] [--nofile 1024] [--seconds 20]

For each scenario a fresh ``uldp collector serve`` process (SQLite, TLS, ``--http-port``,
``RLIMIT_NOFILE`` = ``--nofile``, every limit at its default) is flooded by a persistent
attacker — a connection the collector closes is opened again at once — and probed:

* ``/healthz`` on a new TLS connection every 0.25 s, native gRPC ``Health/Check`` on a new
  connection every 0.5 s;
* a device's ``SubmitReport`` every 0.5 s on the channel it opened before the flood
  (``kept``) and every second on a new connection (``new``);
* the collector's log bytes per second, its peak resident memory and descriptors, its CPU.

Scenarios: ``none`` (no flood); ``http-idle``, ``grpc-idle``, ``both-idle`` (TCP
connections that never send a byte, to the HTTP port, the gRPC port, half on each: the
kernel keeps them until TCP_DEFER_ACCEPT expires, ~31 s, then hands them over);
``http-byte``, ``grpc-byte`` (connections that send one byte, the start of a TLS record,
and stop: held by the server until the header time); ``http-slowloris`` (TLS connections
sending a request head one byte a second). Latencies are p50 / max in ms over the
successful probes, after ``ok/total``. The attackers run in processes of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.service.flood import HOST, Attacker, grpc_health, healthz, proc_stats
from tests.service.spawn import with_nofile
from tests.service.wire import enroll_with_task, report_for, send
from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import device_pb2_grpc
from uldp.collector.security.certs import make_dev_pki
from uldp.collector.service.client import AnalystClient, QueryRequest

ADMIN = "bench-admin-token-0123456789abcdef"
SCENARIOS = ("none", "http-idle", "grpc-idle", "both-idle", "http-byte", "grpc-byte",
             "grpc-byte-other", "both-byte", "http-slowloris")
#: the attacker's address in ``grpc-byte-other`` (the probes connect from 127.0.0.1)
OTHER = "127.0.0.2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class Collector:
    proc: subprocess.Popen[bytes]
    port: int
    http_port: int
    ca: Path
    log: Path


def start_collector(work: Path, nofile: int, extra: tuple[str, ...] = ()) -> Collector:
    pki = make_dev_pki(work / "pki", overwrite=True)
    (work / "pki" / "admin.token").write_text(ADMIN + "\n")
    port, http_port = _free_port(), _free_port()
    log = work / f"collector-{port}.log"

    proc = subprocess.Popen(with_nofile(  # no preexec_fn: see tests/service/spawn.py
        [sys.executable, "-m", "uldp.collector.cli.service", "collector", "serve", "--db",
         f"sqlite:///{work}/c{port}.db", "--port", str(port), "--http-port", str(http_port),
         "--tls-dir", str(work / "pki"), "--allow-simulated", "--name", "flood", *extra],
        nofile), stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    c = Collector(proc, port, http_port, pki.ca_cert, log)
    end = time.monotonic() + 120
    while not (healthz(http_port, c.ca, 2)[0] and grpc_health(port, c.ca, 2)[0]):
        if proc.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"the collector did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    return c


# ---- the probes -----------------------------------------------------------------------
@dataclass
class Series:
    ok: int = 0
    total: int = 0
    ms: list[float] = field(default_factory=list)

    def add(self, ok: bool, seconds: float) -> None:
        self.total += 1
        if ok:
            self.ok += 1
            self.ms.append(1000 * seconds)

    def cell(self) -> str:
        if not self.ms:
            return f"0/{self.total}"
        return (f"{self.ok}/{self.total} · {np.percentile(self.ms, 50):.0f} / "
                f"{max(self.ms):.0f}")


def _every(period: float, stop: threading.Event, fn: Callable[[], None]) -> threading.Thread:
    def loop() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            fn()
            stop.wait(max(0.0, period - (time.monotonic() - t0)))
    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return th


def _devices(c: Collector, n: int) -> tuple[object, list[tuple[str, object]]]:
    ep = Endpoint(f"{HOST}:{c.port}", c.ca)
    with contextlib.closing(AnalystClient(ep, ADMIN)) as a:
        a.create(QueryRequest(kind="mean", method="ssl", epsilon=2.0, dataset="x", users=n,
                              samples=16, query_id="flood", phase_timeout_s=3600))
    kept = secure_channel(ep)
    stub = device_pb2_grpc.DeviceServiceStub(kept)
    return kept, [enroll_with_task(stub) for _ in range(n)]


def _submit(channel: object, dev: tuple[str, object], seed: int) -> tuple[bool, float]:
    t0 = time.monotonic()
    try:
        send(device_pb2_grpc.DeviceServiceStub(channel), dev[0], report_for(dev[1], seed))
        ok = True
    except Exception:
        ok = False
    return ok, time.monotonic() - t0


def run(scenario: str, flood: int, nofile: int, seconds: float,
        extra: tuple[str, ...] = ()) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="uldp-flood-") as tmp:
        c = start_collector(Path(tmp), nofile, extra)
        try:
            return _measure(c, scenario, flood, seconds)
        finally:
            c.proc.terminate()
            c.proc.wait(30)


def _attackers(c: Collector, scenario: str, flood: int) -> list[Attacker]:
    return {"none": [],
            "http-idle": [Attacker(c.http_port, flood)],
            "http-slowloris": [Attacker(c.http_port, flood, slowloris_ca=c.ca)],
            "grpc-idle": [Attacker(c.port, flood)],
            "http-byte": [Attacker(c.http_port, flood, first=b"\x16")],
            "grpc-byte": [Attacker(c.port, flood, first=b"\x16")],
            "grpc-byte-other": [Attacker(c.port, flood, first=b"\x16", source=OTHER)],
            "both-byte": [Attacker(c.http_port, flood, first=b"\x16"),
                          Attacker(c.port, flood, first=b"\x16")],
            "both-idle": [Attacker(c.http_port, flood // 2),
                          Attacker(c.port, flood - flood // 2)]}[scenario]


def _measure(c: Collector, scenario: str, flood: int, seconds: float) -> list[str]:
    n_dev = int(seconds * 3) + 10
    kept, devs = _devices(c, n_dev)
    it = iter(range(n_dev))
    lock = threading.Lock()
    s = {k: Series() for k in ("healthz", "grpc", "kept", "new")}

    def next_dev() -> int:
        with lock:
            return next(it)

    def new_channel_submit() -> None:
        i = next_dev()
        ch = secure_channel(Endpoint(f"{HOST}:{c.port}", c.ca))
        try:
            s["new"].add(*_submit(ch, devs[i], i))
        finally:
            ch.close()

    probes = [(0.25, lambda: s["healthz"].add(*healthz(c.http_port, c.ca))),
              (0.5, lambda: s["grpc"].add(*grpc_health(c.port, c.ca))),
              (0.5, lambda: s["kept"].add(*_submit(kept, devs[(i := next_dev())], i))),
              (1.0, new_channel_submit)]
    attackers = _attackers(c, scenario, flood)
    with contextlib.ExitStack() as stack:
        for a in attackers:
            stack.enter_context(a)
        time.sleep(3.0 if attackers else 0.0)  # the flood is in place
        log0, cpu0, t0 = c.log.stat().st_size, proc_stats(c.proc.pid).cpu_s, time.monotonic()
        stop = threading.Event()
        threads = [_every(p, stop, fn) for p, fn in probes]
        peak_fds, peak_rss = 0, 0.0
        while time.monotonic() - t0 < seconds:
            st = proc_stats(c.proc.pid)
            peak_fds, peak_rss = max(peak_fds, st.fds), max(peak_rss, st.rss_mib)
            time.sleep(0.25)
        stop.set()
        for th in threads:
            th.join(30)
        took = time.monotonic() - t0
        log_rate = (c.log.stat().st_size - log0) / took
        cpu = proc_stats(c.proc.pid).cpu_s - cpu0
        reopened = sum(a.reopened for a in attackers)
    kept.close()  # type: ignore[attr-defined]
    alive = "yes" if c.proc.poll() is None else "NO"
    return [scenario, str(sum(a.n for a in attackers)), f"{reopened / took:.0f}",
            s["healthz"].cell(), s["grpc"].cell(), s["kept"].cell(), s["new"].cell(),
            f"{log_rate:.0f}", str(peak_fds), f"{peak_rss:.0f}", f"{cpu / took:.2f}", alive]


HEADER = ["scenario", "flood", "reopened/s", "/healthz ok · p50/max ms",
          "gRPC health (new conn)", "SubmitReport (kept channel)",
          "SubmitReport (new conn)", "log B/s", "peak fds", "peak RSS MiB",
          "CPU s/s", "alive"]


def _thread_cpu(pid: int, *names: str) -> float:
    """CPU seconds of ``pid``'s threads called one of ``names`` (0 if none). A relay
    thread's CPU is lost when it exits (a connection closed): the new-connection column
    counts the front's loop thread only."""
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() in names:
                f = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return total


FRONT_THREADS = ("uldp-grpc-front", "uldp-grpc-relay")


def overhead(n_kept: int, n_new: int, nofile: int, front: str, mode: str) -> list[str]:
    """CPU of the collector process per report: ``n_kept`` SubmitReport calls one after
    another on one channel, then ``n_new`` each on a new connection (TLS handshake
    included), with the gRPC front on or off; the CPU of the front's own thread is also
    given alone."""
    with tempfile.TemporaryDirectory(prefix="uldp-front-") as tmp:
        relay = front if front != "off" else "threads"
        c = start_collector(Path(tmp), nofile, ("--grpc-front", "off" if front == "off"
                                                else "on", "--grpc-front-relay", relay,
                                                "--server-mode", mode))
        try:
            kept, devs = _devices(c, n_kept + n_new + 20)
            for i in range(20):  # warm-up
                _submit(kept, devs[i], i)
            row = [mode, front]
            for count, new in ((n_kept, False), (n_new, True)):
                base = 20 if not new else 20 + n_kept
                ms, cpu0 = [], proc_stats(c.proc.pid).cpu_s
                fcpu0 = _thread_cpu(c.proc.pid, *FRONT_THREADS)
                for i in range(base, base + count):
                    ch = secure_channel(Endpoint(f"{HOST}:{c.port}", c.ca)) if new else kept
                    ok, took = _submit(ch, devs[i], i)
                    if new:
                        ch.close()  # type: ignore[attr-defined]
                    assert ok
                    ms.append(1000 * took)
                cpu = proc_stats(c.proc.pid).cpu_s - cpu0
                fcpu = _thread_cpu(c.proc.pid, *FRONT_THREADS) - fcpu0
                row += [str(count), f"{1e6 * cpu / count:.0f}",
                        f"{1e6 * fcpu / count:.0f}" if front != "off" else "–",
                        f"{np.percentile(ms, 50):.2f} / {np.percentile(ms, 90):.2f}"]
            kept.close()  # type: ignore[attr-defined]
            return row
        finally:
            c.proc.terminate()
            c.proc.wait(30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flood", type=int, default=1100)
    p.add_argument("--nofile", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--grpc-front", choices=("on", "off"), default="on",
                   help="the collector's --grpc-front")
    p.add_argument("--overhead", type=int, metavar="N", default=0,
                   help="instead of floods: the collector's CPU per SubmitReport with the "
                        "gRPC front off, on relaying on its loop, on relaying in threads (N "
                        "reports on one channel, N/10 on new connections; each setting "
                        "twice, alternating)")
    a = p.parse_args()
    if a.overhead:
        cols = ["--server-mode", "--grpc-front (relay)", "reports (kept channel)",
                "CPU µs/report", "front thread µs/report", "p50 / p90 ms",
                "reports (new conn)", "CPU µs/report", "front thread µs/report",
                "p50 / p90 ms"]
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
        for mode in ("aio", "threads"):
            for front in ("off", "loop", "threads", "off", "loop", "threads"):
                print("| " + " | ".join(overhead(a.overhead, max(10, a.overhead // 10),
                                                 a.nofile, front, mode)) + " |", flush=True)
        return
    extra = ("--grpc-front", a.grpc_front)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * a.flood + 256:  # the attacker's own descriptors
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * a.flood + 1024), hard))
    print(f"collector RLIMIT_NOFILE = {a.nofile}, flood of {a.flood} connections, "
          f"{a.seconds:g} s of probes per scenario, {os.cpu_count()} cores\n")
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for sc in a.scenarios.split(","):
        print("| " + " | ".join(run(sc, a.flood, a.nofile, a.seconds, extra)) + " |",
              flush=True)


if __name__ == "__main__":
    main()
