"""Benchmark: how many subprocess collector starts die before their first line of Python
when the process starting them runs gRPC (grpc/grpc#43055; ``tests/service/spawn.py``).

    python bench/collector_starts.py [--starts 100] [--spawn exec preexec] [--busy 2]
                                     [--load 2]

Each start is the test harness's subprocess collector of
``tests/service/test_connection_flood.py`` — ``launch_collector(subprocess_=True,
http=True, nofile=320, extra_args=["--header-timeout", "3"])``, SQLite, TLS — waited for
until both ports serve, then stopped (SIGTERM). The process starting them runs gRPC as a
pytest worker does in the middle of the suite: a gRPC server of its own and ``--busy``
threads calling it without pause. ``--load`` busy-loop processes (nice 19) load the CPU.

``--spawn``: ``exec`` — the harness now (an interim interpreter sets RLIMIT_NOFILE and
execs the collector; ``Popen`` without ``preexec_fn``, so Python uses ``vfork``);
``preexec`` — the harness before (``Popen(preexec_fn=setrlimit)``: ``fork``, which runs
grpc-core's fork handlers in the child). Printed: one row per spawn — starts, aborted
(the child killed by SIGABRT with grpc's ``Epoll1Poller ... epoll_wait error: Bad file
descriptor`` in its log), other failures, median and max seconds to SERVING.
``--to exec``: each start only until the collector's own interpreter runs (then killed):
the defect strikes between fork and exec, and a start costs a fraction of a second.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.service import conftest
from uldp.collector.security.certs import make_dev_pki

NOFILE = 320
ABORT_LINE = "epoll_wait error"


def _old_start_process(cmd: list[str], log: IO[bytes], env: dict[str, str],
                       nofile: int | None) -> subprocess.Popen[bytes]:
    """The harness before: the limit set in the forked child (the defect measured)."""
    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            preexec_fn=limit)  # fork: grpc/grpc#43055, on purpose


class BusyGrpc:
    """A gRPC server in this process and ``n`` threads calling it without pause."""

    def __init__(self, n: int) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.stop = threading.Event()
        self.calls = 0
        self.threads = [threading.Thread(target=self._call, daemon=True) for _ in range(n)]

    def _call(self) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while not self.stop.is_set():
                stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
                self.calls += 1

    def __enter__(self) -> BusyGrpc:
        self.server.start()
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        self.server.stop(0)


def _start_to_exec(pki: object, work: Path) -> str:
    """One start, only until the child runs the collector's own interpreter (the defect
    strikes between fork and exec): "ok", "aborted" or what else happened."""
    port = conftest._free_port()
    argv = conftest.collector_argv(pki, f"sqlite:///{work}/c.db", port,  # type: ignore[arg-type]
                                   name=f"proc-{port}",
                                   extra_args=["--header-timeout", "3.0", "--http-port",
                                               str(conftest._free_port())])
    with open(work / "collector.log", "wb") as log:
        proc = conftest.start_process(argv, log, dict(os.environ), NOFILE)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if proc.poll() is not None:
                text = (work / "collector.log").read_text(errors="replace")
                if proc.returncode == -6 and ABORT_LINE in text:
                    return "aborted"
                return f"exited with {proc.returncode}: {text[-300:]}"
            with contextlib.suppress(OSError):  # the collector itself, not the interim one
                if Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[1:2] == [b"-m"]:
                    return "ok"
            time.sleep(0.005)
        return "not exec'd in 60 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def run(spawn: str, starts: int, root: Path, to: str = "serving") -> dict[str, object]:
    pki = make_dev_pki(root / "pki")
    (root / "pki" / "admin.token").write_text(conftest.ADMIN_TOKEN + "\n")
    conftest_start = conftest.start_process
    if spawn == "preexec":
        conftest.start_process = _old_start_process
    aborted = other = 0
    seconds: list[float] = []
    first_other = ""
    try:
        for k in range(starts):
            work = root / f"{spawn}-{k}"
            work.mkdir()
            t0 = time.monotonic()
            if to == "exec":
                got = _start_to_exec(pki, work)
                aborted += got == "aborted"
                if got not in ("ok", "aborted"):
                    other += 1
                    first_other = first_other or got
                else:
                    seconds.append(time.monotonic() - t0)
                continue
            try:
                c = conftest.launch_collector(pki, work, subprocess_=True, http=True,
                                              nofile=NOFILE,
                                              extra_args=["--header-timeout", "3.0"])
            except RuntimeError as exc:
                log = "".join(p.read_text(errors="replace") for p in work.glob("*.log"))
                if "exited with -6" in str(exc) and ABORT_LINE in log:
                    aborted += 1
                else:
                    other += 1
                    first_other = first_other or f"{exc}: {log[-300:]}"
                continue
            seconds.append(time.monotonic() - t0)
            c.stop()
    finally:
        conftest.start_process = conftest_start
    return {"spawn": spawn, "starts": starts, "aborted": aborted, "other": other,
            "p50_s": statistics.median(seconds) if seconds else float("nan"),
            "max_s": max(seconds) if seconds else float("nan"), "first_other": first_other}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--spawn", nargs="+", choices=("exec", "preexec"),
                    default=["exec", "preexec"])
    ap.add_argument("--busy", type=int, default=2, help="threads calling gRPC meanwhile")
    ap.add_argument("--load", type=int, default=2, help="busy-loop processes (nice 19)")
    ap.add_argument("--to", choices=("serving", "exec"), default="serving",
                    help="wait for each start until both ports serve (then SIGTERM), or "
                         "only until the collector's interpreter runs (then SIGKILL)")
    a = ap.parse_args()
    loaders = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
               for _ in range(a.load)]
    print(f"starts to {a.to}; load: {a.load} busy loops (nice 19), {a.busy} threads calling "
          f"gRPC in the launching process; {os.cpu_count()} CPUs; grpcio {grpc.__version__}; "
          f"load average {os.getloadavg()[0]:.1f} at the start\n")
    print("| spawn | starts | aborted before exec (SIGABRT, Epoll1Poller EBADF) | other "
          f"failures | to {a.to}: p50 s | max s | wall s | gRPC calls meanwhile |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    notes = []
    try:
        with tempfile.TemporaryDirectory(prefix="uldp-starts-") as tmp, BusyGrpc(a.busy) as b:
            for spawn in a.spawn:  # each row as soon as it is measured
                t0, calls0 = time.monotonic(), b.calls
                r = run(spawn, a.starts, Path(tmp) / spawn, a.to)
                print(f"| {spawn} | {r['starts']} | {r['aborted']} | {r['other']} | "
                      f"{r['p50_s']:.2f} | {r['max_s']:.2f} | {time.monotonic() - t0:.0f} | "
                      f"{b.calls - calls0} |", flush=True)
                if r["first_other"]:
                    notes.append(f"{spawn}: first other failure: {r['first_other']}")
    finally:
        for p in loaders:
            p.kill()
            p.wait()
    for n in notes:
        print(f"\n{n}")


if __name__ == "__main__":
    main()
