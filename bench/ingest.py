"""Benchmark: report ingestion over loopback with TLS and durable acknowledgements.

    python bench/ingest.py [--devices 10000] [--backend sqlite|postgres|both]

For each backend a real ``uldp collector serve`` process is started (SQLite file in WAL
mode with synchronous=FULL; PostgreSQL 15 with fsync=on, synchronous_commit=on, started
from the local binaries). Preparation (not timed): ``--devices`` devices enroll and call
GetTasks once, which assigns each of them to every query (single-phase ``ssl`` mean
queries, one report per device per query) and warms the token/assignment caches as a
real device's GetTasks → SubmitReport sequence does. The reports are computed on the
client with the production device function.

Timed:
* floor: ``--floor-calls`` empty ``grpc.health.v1.Health/Check`` calls to the same
  collector from the same asyncio client: what this machine's gRPC + TLS stack can do
  right now with nothing validated or stored. The unary rate is printed as a fraction of
  it, which separates the collector's own cost from a slow or busy box (the empty-call
  rate alone varies by ±20 % between runs on a shared VM);
* unary: ``--unary-queries`` × devices ``SubmitReport`` calls, ``--concurrency`` in flight
  from one asyncio client over 8 TLS channels (requests serialized before the clock
  starts; ``--client threads`` uses ``--threads`` blocking threads instead, which costs
  the shared cores more per call); reports/s and per-call latency p50/p99 (an OK answer
  = committed). ``--route any`` (default) sends a report on whichever connection is free,
  so with N replicas N − 1 in N reports reach a replica that has not seen the device
  (an L7 balancer); ``--route device`` first sends every device's GetTasks (not timed)
  on the connection that then carries its reports, as a device holding one channel does
  behind ``--processes N`` (SO_REUSEPORT) or an L4 balancer;
* batched: ``--batch-queries`` × devices reports sent as ``SubmitReportBatch`` calls of
  ``--batch-size`` reports (each with its own device token) from ``--batch-threads``
  threads; reports/s.

Also printed (stderr): CPU µs per report of the collector (with ``--processes N``: all N
replicas), the load generator and this bench's PostgreSQL server, from /proc; on
PostgreSQL, for enrolment, unary and batched, the share of active-backend samples
(``pg_stat_activity`` every 10 ms) waiting on a lock and the transactions committed —
two replicas on one phase vs one (``--processes 2``) without the box's load in the way —
and the collector's idle CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2

from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec, compute_reports
from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import bearer, device_pb2, device_pb2_grpc
from uldp.collector.security.certs import make_dev_pki
from uldp.collector.security.tokens import new_admin_token
from uldp.collector.service.client import AnalystClient, QueryRequest
from uldp.collector.simulation.demo import start_collector_process

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replica_cpu import CpuQuota, StageCpu
from replica_cpu import replica_pids as _replica_pids

__all__ = ["LocalPostgres", "local_postgres"]


# ---- a throwaway PostgreSQL from the local binaries -----------------------------------------
def _pg_bin(name: str) -> str:
    for cand in [shutil.which(name), f"/usr/local/bin/{name}",
                 *sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))]:
        if cand and os.access(cand, os.X_OK):
            return cand
    raise FileNotFoundError(f"PostgreSQL binary {name} not found")


@dataclass
class LocalPostgres:
    port: int

    def new_database(self, name: str | None = None) -> str:
        """A new database (``name``: this one, kept if it exists already)."""
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=uldp dbname=postgres",
                             autocommit=True) as c:
            if name is None or not c.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                             (name,)).fetchone():
                name = name or "b_" + uuid.uuid4().hex[:10]
                c.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://uldp@127.0.0.1:{self.port}/{name}"


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def local_postgres(durable: bool = True, settings: dict[str, str] | None = None,
                   keep: Path | None = None) -> Iterator[LocalPostgres]:
    """initdb + pg_ctl start on a free loopback port (as user postgres when root);
    ``settings``: more server settings (name -> value). ``keep``: the cluster's directory,
    created if missing and kept (stopped) afterwards, so a big database is loaded once and
    closed many times (delete the directory to free the disk)."""
    root = Path(tempfile.mkdtemp(prefix="uldp-bench-pg-")) if keep is None else keep
    root.mkdir(parents=True, exist_ok=True)
    prefix: list[str] = []
    if os.geteuid() == 0:
        pwd.getpwnam("postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    if not (data / "PG_VERSION").exists():
        subprocess.run([*prefix, _pg_bin("initdb"), "-D", str(data), "-U", "uldp",
                        "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)
    opts = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200 "
            f"-c shared_buffers=256MB -c fsync={'on' if durable else 'off'} "
            "-c synchronous_commit=on"
            + "".join(f" -c {k}={v}" for k, v in (settings or {}).items()))
    subprocess.run([*prefix, _pg_bin("pg_ctl"), "-D", str(data), "-o", opts, "-l",
                    str(root / "log"), "-w", "start"], check=True, capture_output=True)
    # An outer `timeout` sends SIGTERM, which by default ends Python without running this
    # `finally`: the server would outlive the bench. Turn it into SystemExit while we hold it.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield LocalPostgres(port)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        subprocess.run([*prefix, _pg_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w",
                        "stop"], capture_output=True)
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def _postgres_cpu(port: int | None = None) -> float:
    """CPU seconds of the ``postgres`` processes on the box (0 without PostgreSQL); with
    ``port``, only those of the server listening there (its postmaster and children: the
    box may run other PostgreSQL servers)."""
    procs: dict[int, tuple[int, int, str]] = {}
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "comm").read_text().strip() == "postgres":
                st = (d / "stat").read_text().rsplit(")", 1)[1].split()
                procs[int(d.name)] = (int(st[1]), int(st[11]) + int(st[12]),
                                      (d / "cmdline").read_text())
        except OSError:
            continue
    if port is not None:
        roots = {pid for pid, (_, _, cmd) in procs.items() if f"-p\x00{port}\x00" in cmd
                 or f"-p {port}" in cmd}
        procs = {pid: v for pid, v in procs.items() if pid in roots or v[0] in roots}
    return sum(t for _, t, _ in procs.values()) / os.sysconf("SC_CLK_TCK")


def _replica_cpu(pid: int) -> list[float]:
    """CPU seconds of each collector process: ``pid`` (replica 0) and each of its
    children (the sibling replicas of ``--processes N``), in pid order."""
    out: dict[int, float] = {}
    tck = os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit():
                st = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if int(d.name) == pid or int(st[1]) == pid:
                    out[int(d.name)] = (int(st[11]) + int(st[12])) / tck
        except OSError:
            continue
    return [out[k] for k in sorted(out)]


def _cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid`` and its descendants — with
    ``--processes N`` the sibling replicas are its children — (None: this process)."""
    if pid is None:
        import resource
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    procs: dict[int, tuple[int, int]] = {}  # pid -> (parent, clock ticks)
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit():
                st = (d / "stat").read_text().rsplit(")", 1)[1].split()
                procs[int(d.name)] = (int(st[1]), int(st[11]) + int(st[12]))
        except OSError:
            continue
    tree, grew = {pid}, True
    while grew:
        more = {p for p, (parent, _) in procs.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(procs[p][1] for p in tree if p in procs) / os.sysconf("SC_CLK_TCK")


class WaitSampler:
    """Samples ``pg_stat_activity`` every ``every_s`` seconds while running: how many of
    the database's active backends wait on a heavyweight lock (``Lock``: a row, the
    phase's advisory lock, a transaction) vs anything else. Replicas that contend show
    lock waits (issue 28 measured 31 % of samples on the shared phase row); the share
    does not depend on how busy the box's cores are, which the reports/s do."""

    def __init__(self, db_url: str, every_s: float = 0.01) -> None:
        from urllib.parse import urlparse
        u = urlparse(db_url)
        self.dsn = f"host={u.hostname} port={u.port} user={u.username} dbname={u.path[1:]}"
        self.every_s = every_s
        self.active = self.lock = 0
        self.events: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WaitSampler:
        self.commits = -self._commits()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        time.sleep(1.5)  # backends flush their statistics at most once a second
        self.commits += self._commits()

    def _commits(self) -> int:
        """Transactions committed in the database so far (pg_stat_database)."""
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as c:
            row = c.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = "
                            "current_database()").fetchone()
        return int(row[0]) if row else 0

    def _run(self) -> None:
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as c:
            q = ("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE "
                 "datname = current_database() AND state = 'active' AND pid <> "
                 "pg_backend_pid()")
            while not self._stop.wait(self.every_s):
                for kind, event in c.execute(q).fetchall():
                    self.active += 1
                    if kind == "Lock":
                        self.lock += 1
                        self.events[str(event)] = self.events.get(str(event), 0) + 1

    def share(self) -> float:
        return self.lock / self.active if self.active else 0.0


def _report_commits(db_url: str, qids: list[str]) -> int:
    """PostgreSQL: how many transactions committed the reports of ``qids`` (distinct
    ``xmin`` of their rows): the writers' group commits, without the reads and the
    enrolment that ``pg_stat_database`` counts too."""
    from urllib.parse import urlparse

    import psycopg
    u = urlparse(db_url)
    with psycopg.connect(f"host={u.hostname} port={u.port} user={u.username} "
                         f"dbname={u.path[1:]}", autocommit=True) as c:
        row = c.execute("SELECT count(DISTINCT xmin::text) FROM uldp_reports "
                        "WHERE query_id = ANY(%s)", (qids,)).fetchone()
    return int(row[0]) if row else 0


def _print_replicas(name: str, what: str, before: list[float], after: list[float],
                    n: int, quota: tuple[CpuQuota, float, list[tuple[int, float]]] | None
                    = None) -> None:
    """Each collector process's CPU µs per report of the whole run (how evenly the
    connections spread over the replicas: one connection is served by one process);
    with ``--cpu-quota``, ``quota`` = (the groups, the stage's seconds, their throttle
    counters before it): the share of its quota each replica used and how long it was
    throttled — ≈ 100 % and throttled most periods when the quota bounds it."""
    if len(before) == len(after):
        per = ", ".join(f"{1e6 * (b - a) / max(n, 1):.0f}" for a, b in zip(before, after,
                                                                            strict=True))
        print(f"{name}: {what}, CPU µs per report of each collector process: {per}",
              file=sys.stderr)
        if quota is not None:
            q, wall, t0 = quota
            use = ", ".join(f"{(b - a) / (q.cores * wall):.0%}"
                            for a, b in zip(before, after, strict=True))
            thr = ", ".join(f"{p1 - p0} periods / {s1 - s0:.1f} s"
                            for (p0, s0), (p1, s1) in zip(t0, q.throttled(), strict=True))
            load = "/".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"{name}: {what}, quota {q.cores:g} core per replica over {wall:.1f} s: "
                  f"used {use}; throttled {thr}; load average {load}", file=sys.stderr)


def _print_waits(name: str, what: str, processes: int, waits: WaitSampler | None) -> None:
    if waits is not None:
        print(f"{name}: {what}, {processes} collector process(es): {waits.share():.1%} of "
              f"{waits.active} active-backend samples wait on a lock "
              f"{dict(sorted(waits.events.items()))}; {waits.commits:,} transactions "
              "committed", file=sys.stderr)


# ---- the benchmark -----------------------------------------------------------------------
@dataclass
class Prepared:
    tokens: list[str]
    tasks: list[dict[str, device_pb2.Task]]  # per device: query id -> task


def _prepare(ep: Endpoint, n: int, threads: int) -> Prepared:
    tokens: list[str] = [""] * n
    tasks: list[dict[str, device_pb2.Task]] = [{} for _ in range(n)]
    chans = [secure_channel(ep) for _ in range(4)]

    def one(i: int) -> None:
        stub = device_pb2_grpc.DeviceServiceStub(chans[i % 4])
        tok = stub.Enroll(device_pb2.EnrollRequest(label="bench")).token
        r = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]), metadata=bearer(tok))
        tokens[i] = tok
        tasks[i] = {t.query_id: t for t in r.tasks}
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, range(n)))
    for c in chans:
        c.close()
    return Prepared(tokens, tasks)


def _reports(prep: Prepared, qid: str, seed: int) -> list[device_pb2.Report]:
    t0 = prep.tasks[0][qid]
    spec = TaskSpec.from_json(t0.task_json)
    rng = RandomSource.seeded(seed)
    X = rng.numpy_generator().uniform(-0.5, 0.5, size=(len(prep.tokens), spec.m_ref))
    vals = compute_reports(spec, X, rng)
    out = []
    for i, t in enumerate(prep.tasks):
        task = t[qid]
        out.append(device_pb2.Report(query_id=qid, phase=task.phase, values=vals[i].tolist(),
                                     task_digest=task.task_digest))
    return out


def _run_threads(worker: Callable[[int], None], threads: int,
                 chans: list[grpc.Channel]) -> float:
    """Run ``worker(k)`` for k < ``threads`` in threads; close ``chans``; seconds taken."""
    t0 = time.perf_counter()
    ths = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    el = time.perf_counter() - t0
    for c in chans:
        c.close()
    return el


def _unary(ep: Endpoint, prep: Prepared, reports: list[tuple[int, device_pb2.Report]],
           threads: int) -> tuple[float, np.ndarray]:
    chans = [secure_channel(ep) for _ in range(8)]
    stubs = [device_pb2_grpc.DeviceServiceStub(c) for c in chans]
    lat = np.zeros(len(reports))
    nxt = iter(range(len(reports)))
    lock = threading.Lock()

    def worker(k: int) -> None:
        stub = stubs[k % len(stubs)]
        while True:
            with lock:
                j = next(nxt, None)
            if j is None:
                return
            dev, rep = reports[j]
            t = time.perf_counter()
            stub.SubmitReport(device_pb2.SubmitReportRequest(report=rep),
                              metadata=bearer(prep.tokens[dev]), timeout=60)
            lat[j] = time.perf_counter() - t
    return len(reports) / _run_threads(worker, threads, chans), lat


#: TLS connections of the asyncio load generator (--channels)
CHANNELS = 8
#: which connection carries a unary report (--route): "any" or the device's own
ROUTE = "any"


def _aio_calls(ep: Endpoint, method: str, wire: list[bytes], meta: list[tuple],
               concurrency: int, channels: int = 8, route: list[int] | None = None,
               warm: tuple[str, list[bytes], list[tuple], list[int]] | None = None,
               on_start: Callable[[], None] | None = None) -> tuple[float, np.ndarray]:
    """Pre-serialized unary calls from one asyncio client: (calls/s, per-call latency).

    ``route``: the channel of each call (default: whichever the free worker holds);
    ``warm``: (method, requests, metadata, channels) of calls made before the clock
    starts, each on its channel (``--route device``: every device's GetTasks on the
    connection that then carries its reports, as a device holding one channel does)."""
    creds = grpc.ssl_channel_credentials(Path(ep.ca_cert).read_bytes())
    lat = np.zeros(len(wire))
    # each channel its own TCP connection: channels with equal arguments share one
    # connection from gRPC's global subchannel pool, and one connection reaches one
    # replica of a SO_REUSEPORT group (--processes N)
    opts = [("grpc.use_local_subchannel_pool", 1)]

    async def run() -> float:
        chans = [grpc.aio.secure_channel(ep.target, creds, options=opts)
                 for _ in range(channels)]
        calls = [c.unary_unary(method) for c in chans]  # bytes in, bytes out
        nxt = iter(range(len(wire)))
        # connected (TLS handshakes done) before the clock starts; a busy box may make a
        # handshake slow: wait_for_ready retries instead of failing the run
        await asyncio.wait_for(asyncio.gather(*(c.channel_ready() for c in chans)), 300)
        if warm is not None:
            w_method, w_wire, w_meta, w_chan = warm
            w_calls = [c.unary_unary(w_method) for c in chans]
            w_next = iter(range(len(w_wire)))

            async def warmer() -> None:
                for i in w_next:
                    await w_calls[w_chan[i]](w_wire[i], metadata=w_meta[i], timeout=120,
                                             wait_for_ready=True)
            await asyncio.gather(*(warmer() for _ in range(concurrency)))
        if on_start is not None:  # the CPU counters start here, after the warm-up
            on_start()

        async def worker(k: int) -> None:
            own = calls[k % len(calls)]
            for j in nxt:
                call = own if route is None else calls[route[j]]
                t = time.perf_counter()
                try:
                    await call(wire[j], metadata=meta[j], timeout=60, wait_for_ready=True)
                except grpc.aio.AioRpcError as exc:
                    done = int(np.count_nonzero(lat))
                    med = float(np.median(lat[lat > 0])) if done else 0.0
                    raise RuntimeError(
                        f"{method}: call {j} failed {time.perf_counter() - t:.1f} s after it "
                        f"was sent, {time.perf_counter() - t0:.1f} s into the stage, "
                        f"{done} calls answered (median {med:.2f} s, "
                        f"max {lat.max():.2f} s): {exc.code().name} {exc.details()}") from exc
                lat[j] = time.perf_counter() - t
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        el = time.perf_counter() - t0
        for c in chans:
            await c.close()
        return el
    el = asyncio.run(run())
    return len(wire) / el, lat


def _unary_aio(ep: Endpoint, prep: Prepared, reports: list[tuple[int, device_pb2.Report]],
               concurrency: int, on_start: Callable[[], None]) -> tuple[float, np.ndarray]:
    """The same calls from one asyncio client (cheaper per call than 64 threads); the
    requests are serialized up front: the generator's CPU goes to gRPC, not to protobuf."""
    wire = [device_pb2.SubmitReportRequest(report=rep).SerializeToString()
            for _, rep in reports]
    meta = [bearer(prep.tokens[dev]) for dev, _ in reports]
    service = "/" + device_pb2.DESCRIPTOR.services_by_name["DeviceService"].full_name
    if ROUTE == "any":
        return _aio_calls(ep, service + "/SubmitReport", wire, meta, concurrency, CHANNELS,
                          on_start=on_start)
    n = len(prep.tokens)
    ask = device_pb2.GetTasksRequest(datasets=["x"]).SerializeToString()
    warm = (service + "/GetTasks", [ask] * n, [bearer(t) for t in prep.tokens],
            [d % CHANNELS for d in range(n)])
    return _aio_calls(ep, service + "/SubmitReport", wire, meta, concurrency, CHANNELS,
                      route=[dev % CHANNELS for dev, _ in reports], warm=warm,
                      on_start=on_start)


def _floor(ep: Endpoint, calls: int, concurrency: int) -> float:
    """The machine's gRPC ceiling right now, in calls/s: empty
    ``grpc.health.v1.Health/Check`` calls to the same collector over the same TLS channels
    from the same client as the unary run (nothing validated, nothing stored)."""
    wire = [health_pb2.HealthCheckRequest().SerializeToString()] * calls
    return _aio_calls(ep, "/grpc.health.v1.Health/Check", wire, [()] * calls,
                      concurrency, CHANNELS)[0]


def _batched(ep: Endpoint, batches: list[device_pb2.SubmitReportBatchRequest],
             threads: int) -> tuple[float, int]:
    """``SubmitReportBatch`` calls from ``threads`` threads, each on a connection of its
    own; the requests are serialized before the clock starts and the answers parsed after
    it stops (the generator's CPU per report is gRPC's per call over the batch size)."""
    creds = grpc.ssl_channel_credentials(Path(ep.ca_cert).read_bytes())
    opts = [("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.use_local_subchannel_pool", 1)]  # a connection per thread (see above)
    chans = [grpc.secure_channel(ep.target, creds, options=opts) for _ in range(threads)]
    method = "/" + device_pb2.DESCRIPTOR.services_by_name["DeviceService"].full_name + \
        "/SubmitReportBatch"
    calls = [c.unary_unary(method) for c in chans]  # bytes in, bytes out
    wire = [b.SerializeToString() for b in batches]
    answers: list[bytes] = [b""] * len(wire)
    nxt = iter(range(len(wire)))
    lock = threading.Lock()

    def worker(k: int) -> None:
        while True:
            with lock:
                j = next(nxt, None)
            if j is None:
                return
            answers[j] = calls[k](wire[j], timeout=120, wait_for_ready=True)
    for c in chans:  # connected before the clock starts (as in _aio_calls)
        grpc.channel_ready_future(c).result(timeout=300)
    n = sum(len(b.reports) for b in batches)
    rate = n / _run_threads(worker, threads, chans)
    bad = sum(1 for a in answers
              for x in device_pb2.SubmitReportBatchResponse.FromString(a).results if x.code)
    return rate, bad


def ceiling(x: float, y: float, z: float, cores: int, replicas: int) -> float:
    """Reports/s that ``replicas`` collector processes can reach on ``cores`` cores when a
    report costs the collector ``x`` µs of CPU in all (each process bound to one core: its
    Python work holds the GIL), the database ``y`` and the load generator ``z`` on the
    same cores: min(replicas, cores · x / (x + y + z)) / x per µs."""
    return 1e6 * min(replicas, cores * x / (x + y + z)) / x


def _wait_replicas(log: Path, n: int, offset: int, timeout_s: float = 300.0) -> None:
    """Wait until all ``n`` replicas of ``--processes n`` serve (each prints its
    "listening" line; the first one's ready file only says it serves): connections made
    before a sibling listens all reach the first one."""
    t0 = time.monotonic()
    while log.read_bytes()[offset:].count(b"uldp collector ") < n:
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"{n} collector processes not serving after {timeout_s} s")
        time.sleep(0.2)


def run_backend(name: str, db_url: str, work: Path, a: argparse.Namespace) -> dict[str, Any]:
    from urllib.parse import urlparse
    pg_port = urlparse(db_url).port  # only this bench's PostgreSQL (the box may run others)

    def db_cpu() -> float:
        return _postgres_cpu(pg_port) if pg_port else 0.0
    quota = CpuQuota(a.cpu_quota, f"{os.getpid()}-{name}") if a.cpu_quota else None
    log_at = (work / "collector.log").stat().st_size if (work / "collector.log").exists() \
        else 0
    proc, port = start_collector_process(work, db_url, work / "pki",
                                         ["--workers", str(a.workers),
                                          "--processes", str(a.processes),
                                          *(["--commit-linger-ms", str(a.linger_ms)]
                                            if a.linger_ms is not None else [])])
    ep = Endpoint(f"127.0.0.1:{port}", work / "pki" / "ca.pem")
    try:
        _wait_replicas(work / "collector.log", a.processes, log_at)
        an = AnalystClient(ep, (work / "pki" / "admin.token").read_text())
        n = a.devices
        qids = [f"{name}-u{i}" for i in range(a.unary_queries)] + \
               [f"{name}-b{i}" for i in range(a.batch_queries)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for q in qids:
                an.create(QueryRequest(kind="mean", epsilon=1.0, dataset="x", users=n,
                                       samples=16, method="ssl", query_id=q,
                                       phase_timeout_s=3600))
        t0 = time.perf_counter()
        with WaitSampler(db_url) if pg_port else contextlib.nullcontext() as waits:
            prep = _prepare(ep, n, a.threads)  # enrolment and slot assignment
        prep_s = time.perf_counter() - t0
        _print_waits(name, "enrol + GetTasks (slot assignment)", a.processes, waits)
        if quota is not None:
            quota.apply(_replica_pids(proc.pid))
        c0, d0 = _cpu(proc.pid), db_cpu()
        time.sleep(3.0)  # nothing sent: what the collector processes spend idle
        print(f"{name}: idle, {a.processes} collector process(es): "
              f"{(_cpu(proc.pid) - c0) / 3.0:.1%} of a core (collector), "
              f"{(db_cpu() - d0) / 3.0:.1%} (database)", file=sys.stderr)
        assert all(len(t) == len(qids) for t in prep.tasks)
        unary = [(i, r) for k, q in enumerate(qids[:a.unary_queries])
                 for i, r in enumerate(_reports(prep, q, k))]
        floor = cpu_f = float("nan")
        if a.floor_calls:
            c0, s0 = _cpu(proc.pid), _cpu(None)
            floor = _floor(ep, a.floor_calls, a.concurrency)
            cpu_f = (_cpu(proc.pid) - c0 + _cpu(None) - s0) / a.floor_calls
        at: dict[str, Any] = {}

        def start() -> None:  # after the --route device warm-up, before the clock
            at.update(c0=_cpu(proc.pid), s0=_cpu(None), d0=db_cpu(),
                      r0=_replica_cpu(proc.pid),
                      thr0=quota.throttled() if quota is not None else [],
                      roles=StageCpu(proc.pid, "unary", a.profile).start() if a.roles
                      else None,
                      waits=WaitSampler(db_url).__enter__() if pg_port else None)
        try:
            if a.client == "aio":
                u_rate, lat = _unary_aio(ep, prep, unary, a.concurrency, start)
            else:
                start()
                u_rate, lat = _unary(ep, prep, unary, a.threads)
        finally:
            if at.get("waits") is not None:
                at["waits"].__exit__(None, None, None)
        waits, roles, r0, thr0 = at["waits"], at["roles"], at["r0"], at["thr0"]
        cpu_u = (_cpu(proc.pid) - at["c0"], _cpu(None) - at["s0"], db_cpu() - at["d0"])
        u_roles: dict[str, float] = {}  # role -> CPU µs per unary report, all replicas
        if roles is not None:
            print(roles.stop().table(len(unary)), file=sys.stderr)
            for d in roles.by_role:
                for k, v in d.items():
                    u_roles[k] = u_roles.get(k, 0.0) + 1e6 * v / max(len(unary), 1)
        u_commits = _report_commits(db_url, qids[:a.unary_queries]) if pg_port else 0
        _print_replicas(name, "unary", r0, _replica_cpu(proc.pid), len(unary),
                        (quota, len(unary) / u_rate, thr0) if quota is not None else None)
        _print_waits(name, "unary", a.processes, waits)
        if u_commits:
            print(f"{name}: unary, {u_commits:,} transactions stored the {len(unary):,} "
                  f"reports ({len(unary) / u_commits:.1f} per commit)", file=sys.stderr)
        batch_items = []
        for k, q in enumerate(qids[a.unary_queries:]):
            for i, r in enumerate(_reports(prep, q, 100 + k)):
                r.device_token = prep.tokens[i]
                batch_items.append(r)
        batches = [device_pb2.SubmitReportBatchRequest(reports=batch_items[s:s + a.batch_size])
                   for s in range(0, len(batch_items), a.batch_size)]
        c0, s0, d0 = _cpu(proc.pid), _cpu(None), db_cpu()
        r0 = _replica_cpu(proc.pid)
        thr0 = quota.throttled() if quota is not None else []
        roles = StageCpu(proc.pid, "batched", a.profile).start() if a.roles else None
        with WaitSampler(db_url) if pg_port else contextlib.nullcontext() as waits:
            b_rate, bad = _batched(ep, batches, a.batch_threads)
        cpu_b = (_cpu(proc.pid) - c0, _cpu(None) - s0, db_cpu() - d0)
        if roles is not None:
            print(roles.stop().table(len(batch_items)), file=sys.stderr)
        _print_replicas(name, "batched", r0, _replica_cpu(proc.pid), len(batch_items),
                        (quota, len(batch_items) / b_rate, thr0) if quota is not None
                        else None)
        _print_waits(name, "batched", a.processes, waits)
        assert bad == 0, f"{bad} batched reports refused"
        for q in qids:  # every report was committed: each query closes with all reports
            final = an.wait(q, 300)
            assert final.state == 2 and final.phases[0].received == n, (q, final)
        an.close()
        lat = lat if len(lat) else np.full(1, np.nan)  # --unary-queries 0
        return {"prep_s": prep_s, "unary_rps": u_rate, "unary_roles": u_roles,
                "unary_db_commits": u_commits, "p50_ms": float(np.median(lat) * 1e3),
                "p99_ms": float(np.percentile(lat, 99) * 1e3), "unary_n": len(unary),
                "floor_cps": floor, "floor_cpu_us": 1e6 * cpu_f,
                "batched_rps": b_rate, "batched_n": len(batch_items),
                "server_cpu_us_per_unary": 1e6 * cpu_u[0] / max(len(unary), 1),
                "client_cpu_us_per_unary": 1e6 * cpu_u[1] / max(len(unary), 1),
                "server_cpu_us_per_batched": 1e6 * cpu_b[0] / max(len(batch_items), 1),
                "client_cpu_us_per_batched": 1e6 * cpu_b[1] / max(len(batch_items), 1),
                "db_cpu_us_per_unary": 1e6 * cpu_u[2] / max(len(unary), 1),
                "db_cpu_us_per_batched": 1e6 * cpu_b[2] / max(len(batch_items), 1)}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if quota is not None:
            quota.remove()
        if os.environ.get("ULDP_BENCH_LOG"):
            print((work / "collector.log").read_text()[-3000:], file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    """The bench's command line (also used by ``bench/ingest_replicas.py``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=10_000)
    ap.add_argument("--unary-queries", type=int, default=2)
    ap.add_argument("--batch-queries", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--client", choices=("aio", "threads"), default="aio",
                    help="unary load generator: one asyncio client or --threads threads")
    ap.add_argument("--concurrency", type=int, default=48,
                    help="calls in flight from the asyncio client")
    ap.add_argument("--batch-threads", type=int, default=4)
    ap.add_argument("--workers", type=int, default=64, help="collector handler threads")
    ap.add_argument("--processes", type=int, default=1, help="collector processes")
    ap.add_argument("--linger-ms", type=float, default=None,
                    help="the collector's --commit-linger-ms (group commit; default: the "
                         "collector's own)")
    ap.add_argument("--channels", type=int, default=CHANNELS,
                    help="TLS connections of the asyncio load generator (each reaches one "
                         "collector process)")
    ap.add_argument("--route", choices=("any", "device"), default="any",
                    help="unary stage: 'any' sends each report on whichever connection is "
                         "free (an L7 balancer: with N replicas a report reaches another "
                         "replica than its device's GetTasks N-1 times in N); 'device' "
                         "sends a device's GetTasks (before the clock) and its reports on "
                         "one connection, as a device holding one channel does through "
                         "--processes N (SO_REUSEPORT) or an L4 balancer")
    ap.add_argument("--floor-calls", type=int, default=20_000,
                    help="empty Health/Check calls timed first, for the machine's gRPC "
                         "ceiling (0: skip)")
    ap.add_argument("--cpu-quota", type=float, default=None, metavar="CORES",
                    help="put each collector replica in a cgroup of its own with this "
                         "many cores of CPU quota (after enrolment; PostgreSQL and the "
                         "load generator stay outside): one fixed-size box per replica, "
                         "so --processes 1 vs 2 compares one box with two on a shared "
                         "machine (needs root and the cgroup cpu controller)")
    ap.add_argument("--roles", action="store_true",
                    help="print each replica's CPU per report by thread role "
                         "(bench/replica_cpu.py; names Python threads with py-spy if "
                         "installed)")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="with --roles: also sample each replica with py-spy record "
                         "into DIR (collapsed stacks per stage and replica)")
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    return ap


def main() -> None:
    ap = parser()
    a = ap.parse_args()
    globals()["CHANNELS"] = a.channels
    globals()["ROUTE"] = a.route
    if a.cpu_quota is not None:
        why = CpuQuota.check()
        if why is not None or not 0 < a.cpu_quota <= (os.cpu_count() or 1):
            ap.error(f"--cpu-quota {a.cpu_quota:g}: "
                     + (why or f"give a number of cores in (0, {os.cpu_count()}]"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="uldp-bench-ingest-") as tmp:
        work = Path(tmp)
        make_dev_pki(work / "pki", ["localhost", "127.0.0.1"])
        (work / "pki" / "admin.token").write_text(new_admin_token())
        if a.backend in ("sqlite", "both"):
            rows.append(("sqlite", run_backend("s", f"sqlite:///{work / 'ingest.db'}", work, a)))
        if a.backend in ("postgres", "both"):
            with local_postgres(durable=True) as pg:
                rows.append(("postgres", run_backend("p", pg.new_database(), work, a)))
    print(f"cores: {os.cpu_count()}, devices: {a.devices}, unary threads: {a.threads}, "
          f"batch size: {a.batch_size} x {a.batch_threads} threads", file=sys.stderr)
    print("| backend | unary reports/s | unary p50 (ms) | unary p99 (ms) | batched reports/s | "
          "unary n | batched n | empty calls/s | unary / empty |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"{name}: CPU µs per report: unary server {r['server_cpu_us_per_unary']:.0f} "
              f"client {r['client_cpu_us_per_unary']:.0f} "
              f"postgres {r['db_cpu_us_per_unary']:.0f}; batched server "
              f"{r['server_cpu_us_per_batched']:.0f} client "
              f"{r['client_cpu_us_per_batched']:.0f} "
              f"postgres {r['db_cpu_us_per_batched']:.0f}; empty call (collector + client) "
              f"{r['floor_cpu_us']:.0f}", file=sys.stderr)
    cores = os.cpu_count() or 1
    for name, r in rows:
        for path in ("unary", "batched"):
            x, y, z = (r[f"{k}_cpu_us_per_{path}"] for k in ("server", "db", "client"))
            if x > 0:
                one, two = ceiling(x, y, z, cores, 1), ceiling(x, y, z, cores, 2)
                print(f"{name}: {path}, the ceiling from CPU per report (collector {x:.1f} "
                      f"µs in all, database {y:.1f}, load generator {z:.1f}) on {cores} "
                      f"cores: {one:,.0f}/s with one collector process, {two:,.0f}/s with "
                      f"two ({two / one:.2f}x)", file=sys.stderr)
    for name, r in rows:
        print(f"| {name} | {r['unary_rps']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
              f"{r['batched_rps']:,.0f} | {r['unary_n']:,} | {r['batched_n']:,} | "
              f"{r['floor_cps']:,.0f} | {r['unary_rps'] / r['floor_cps']:.0%} |")


if __name__ == "__main__":
    main()
