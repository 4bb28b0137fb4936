"""``uldp demo``: the whole system on one machine, over real gRPC with TLS.

1. writes a development CA, a server certificate and an admin token to a work directory;
2. starts ``uldp collector serve`` (a separate process) on a SQLite file, loopback only;
3. creates one query per kind of the core algorithms (mean, mean-linf, mean-l2, mean-l1,
   distribution), each over its own dataset name;
4. runs a fleet of simulated devices (default 20 000; device ``i`` holds the dataset of
   kind ``i mod 5``), every one a real ``uldp.client.Device`` with its own state;
5. waits for every query to finish and prints each estimate next to the truth of the
   simulated population, with its confidence interval;
6. stops the collector (SIGTERM, graceful) and removes the work directory (unless
   ``--workdir`` was given).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from uldp.client.transport import Endpoint, secure_channel
from uldp.collector.fleet import FleetDataset, dataset_for_query, run_fleet, summarize
from uldp.collector.security.certs import make_dev_pki
from uldp.collector.security.tokens import new_admin_token
from uldp.collector.service.client import AnalystClient, QueryRequest

__all__ = ["DEMO_QUERIES", "run_demo", "start_collector_process"]

#: (kind, dimension, population) of the demo queries
DEMO_QUERIES: tuple[tuple[str, int, str], ...] = (
    ("mean", 1, "gaussian"),
    ("mean-linf", 4, "uniform"),
    ("mean-l2", 4, "sphere"),
    ("mean-l1", 4, "bernoulli"),
    ("distribution", 8, "zipf:1.1"),
)


def start_collector_process(workdir: Path, db_url: str, tls_dir: Path,
                            extra: list[str] | None = None,
                            timeout_s: float = 60.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``uldp collector serve`` on 127.0.0.1 (free port); wait until it serves."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    port_file = workdir / f"collector-{os.getpid()}-{time.monotonic_ns()}.port"
    log = open(workdir / "collector.log", "ab")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "uldp.collector.service_cli", "collector", "serve",
         "--db", db_url, "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file),
         "--tls-dir", str(tls_dir), "--log-level", os.environ.get("ULDP_LOG_LEVEL", "warning"),
         "--allow-simulated", *(extra or [])],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"collector exited with {proc.returncode}; "
                               f"see {workdir / 'collector.log'}")
        if port_file.exists():
            port = int(port_file.read_text())
            try:
                with secure_channel(Endpoint(f"127.0.0.1:{port}", tls_dir / "ca.pem")) as ch:
                    r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                             timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return proc, port
            except grpc.RpcError:
                pass
        time.sleep(0.1)
    proc.kill()
    raise TimeoutError("collector did not start")


def _fmt(v: float) -> str:
    return f"{v:+.4f}"


def run_demo(devices: int = 20_000, epsilon: float = 2.0, samples: int = 100,
             concurrency: int = 48, workdir: str | None = None, as_json: bool = False,
             seed: int | None = None) -> int:
    t0 = time.perf_counter()
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="uldp-demo-")
        work = Path(tmp.name)
    else:
        work = Path(workdir)
        work.mkdir(parents=True, exist_ok=True)
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if as_json else \
        (lambda *a: print(*a, flush=True))
    tls = work / "pki"
    if not (tls / "server.pem").exists():
        make_dev_pki(tls, ["localhost", "127.0.0.1"])
    admin_file = tls / "admin.token"
    if not admin_file.exists():
        admin_file.write_text(new_admin_token() + "\n")
        admin_file.chmod(0o600)
    db_url = f"sqlite:///{work / 'collector.db'}"
    proc, port = start_collector_process(work, db_url, tls)
    ep = Endpoint(f"127.0.0.1:{port}", tls / "ca.pem")
    say(f"collector on 127.0.0.1:{port} (TLS), database {work / 'collector.db'}")
    analyst = AnalystClient(ep, admin_file.read_text())
    rc = 0
    try:
        k = len(DEMO_QUERIES)
        per = devices // k
        datasets, qids = [], []
        rng_seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
        for i, (kind, dim, dist) in enumerate(DEMO_QUERIES):
            users = len(range(i, devices, k))
            name = f"demo-{kind}"
            q = analyst.create(QueryRequest(kind=kind, epsilon=epsilon, dataset=name,
                                            users=users, samples=samples, dim=dim, bound=1.0,
                                            phase_timeout_s=600.0,
                                            query_id=f"demo-{kind}-{rng_seed % 100000}"))
            qids.append(q.query_id)
            data = dataset_for_query(kind, dist, samples, dim, 1.0, rng_seed + i)
            datasets.append(FleetDataset(name, data, modulo=k, residue=i))
            say(f"query {q.query_id}: {kind} d={dim} eps={epsilon:g} over {users} devices "
                f"({dist})")
        say(f"fleet: {devices} devices (~{per} per query), concurrency {concurrency}")
        t_fleet = time.perf_counter()
        res = run_fleet(ep, work / "devices", devices, datasets, concurrency=concurrency,
                        budget=max(epsilon, 1.0) * 2, seed=seed, progress=None if not as_json
                        else False, keep_state=workdir is not None, timeout_s=1800)
        fleet_s = time.perf_counter() - t_fleet
        rows: list[dict[str, Any]] = []
        for qid, ds in zip(qids, datasets, strict=True):
            final = analyst.wait(qid, timeout_s=600)
            if final.state != 2:
                say(f"query {qid} did not finish: state {final.state} {final.error}")
                rc = 1
                continue
            r = analyst.result(qid)
            truth = np.asarray(ds.data.truth, dtype=float).ravel()
            for j, (v, lo, hi) in enumerate(zip(r.values, r.ci_low, r.ci_high, strict=True)):
                rows.append({"query": qid, "kind": r.kind, "component": j,
                             "truth": float(truth[j]), "estimate": v, "ci_low": lo,
                             "ci_high": hi, "covered": bool(lo <= truth[j] <= hi)})
        summary = summarize(res)
        summary.update(fleet_seconds=round(fleet_s, 2),
                       wall_seconds=round(time.perf_counter() - t0, 2))
        if as_json:
            print(json.dumps({"fleet": summary, "estimates": rows}, indent=2))
        else:
            print()
            print(f"{'kind':13s} {'#':>2s} {'truth':>9s} {'estimate':>9s}   "
                  f"{'95% interval':23s} covered")
            for r_ in rows:
                print(f"{r_['kind']:13s} {r_['component']:2d} {_fmt(r_['truth']):>9s} "
                      f"{_fmt(r_['estimate']):>9s}   [{_fmt(r_['ci_low'])}, "
                      f"{_fmt(r_['ci_high'])}]  {'yes' if r_['covered'] else 'NO'}")
            cov = np.mean([r_["covered"] for r_ in rows]) if rows else 0.0
            print(f"\n{summary['reports_acknowledged']} reports from {devices} devices in "
                  f"{fleet_s:.1f}s; interval coverage {100 * cov:.0f}%; "
                  f"total {summary['wall_seconds']:.1f}s")
        if res.errors or res.unfinished:
            rc = 1
            for e in res.errors[:5]:
                say("error:", e)
    finally:
        analyst.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if tmp is not None:
            tmp.cleanup()
    return rc
