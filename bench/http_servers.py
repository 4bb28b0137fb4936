"""Benchmark: which ASGI server carries the collector's HTTP port (the choice in
``uldp.collector.http.front``).

    python bench/http_servers.py [--devices 3000]

For each candidate — uvicorn with httptools, uvicorn with its pure-Python h11 parser,
hypercorn (h11/h2), granian (Rust HTTP, embedded in the asyncio loop) — a child process runs
a collector (SQLite, TLS) whose HTTP application (``build_app``: the same servicers, CORS,
``/healthz``) is served by that server; the parent prepares ``--devices`` devices over gRPC
and times Connect ``SubmitReport`` calls (pre-built bytes, one keep-alive TLS connection per
call in flight, ``bench/ingest_http.py``'s client): reports/s, p50/p99 and collector CPU µs
per report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import _cpu, _prepare, _reports
from ingest_http import _http_request, _queries, http_calls

from uldp.client.transport import Endpoint
from uldp.client.wire import device_pb2
from uldp.collector.security.certs import make_dev_pki
from uldp.collector.security.tokens import new_admin_token
from uldp.collector.service.client import AnalystClient

SERVERS = ("uvicorn-httptools", "uvicorn-h11", "hypercorn", "granian")


def _serve(app: object, server: str, port: int, pki: Path) -> None:
    """Serve ``app`` on 127.0.0.1:``port`` with ``server`` until the process ends."""
    cert, key = pki / "server.pem", pki / "server.key"
    if server.startswith("uvicorn"):
        import uvicorn

        uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=port, lifespan="off", log_level="warning",
            access_log=False, http="httptools" if server.endswith("httptools") else "h11",
            ssl_certfile=str(cert), ssl_keyfile=str(key))).run()
    elif server == "hypercorn":
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        cfg = Config()
        cfg.bind = [f"127.0.0.1:{port}"]
        cfg.certfile, cfg.keyfile = str(cert), str(key)
        cfg.loglevel = "WARNING"
        async def forever() -> None:
            await asyncio.Event().wait()
        asyncio.run(serve(app, cfg, shutdown_trigger=forever))  # type: ignore[arg-type]
    else:
        from granian.constants import Interfaces
        from granian.server.embed import Server

        asyncio.run(Server(app, address="127.0.0.1", port=port, interface=Interfaces.ASGI,
                           ssl_cert=cert, ssl_key=key, log_enabled=False).serve())


def child(server: str, db: str, pki: Path, grpc_port: int, http_port: int) -> None:
    from uldp.collector.http import build_app
    from uldp.collector.service.server import CollectorServer, ServerConfig

    srv = CollectorServer(ServerConfig(db_url=db, tls_cert=pki / "server.pem",
                                       tls_key=pki / "server.key", port=grpc_port,
                                       admin_token_file=pki / "admin.token", workers=64))
    srv.start()
    app = build_app(srv.core, srv.executor)
    threading.Thread(target=_serve, args=(app, server, http_port, pki), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    srv.stop()


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(server: str, work: Path, a: argparse.Namespace) -> dict[str, float]:
    pki = work.parent / "pki"
    work.mkdir(exist_ok=True)
    db = f"sqlite:///{work / (server + '.db')}"
    gp, hp = _free(), _free()
    proc = subprocess.Popen([sys.executable, __file__, "--child", server, db, str(pki),
                             str(gp), str(hp)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        ep = Endpoint(f"127.0.0.1:{gp}", pki / "ca.pem")
        an = AnalystClient(ep, (pki / "admin.token").read_text())
        qids = [f"q{i}" for i in range(a.queries)]
        _queries(an, qids, a.devices)
        prep = _prepare(ep, a.devices, 32)
        reqs = [_http_request(hp, "SubmitReport", device_pb2.SubmitReportRequest(report=r)
                              .SerializeToString(), prep.tokens[i], "connect")
                for k, q in enumerate(qids) for i, r in enumerate(_reports(prep, q, k))]
        c0 = _cpu(proc.pid)
        rate, lat, bad = http_calls(hp, pki / "ca.pem", reqs, "connect", a.concurrency)
        cpu = 1e6 * (_cpu(proc.pid) - c0) / len(reqs)
        assert bad == 0, f"{server}: {bad} calls failed"
        an.close()
        return {"rps": rate, "p50": float(np.median(lat)) * 1e3,
                "p99": float(np.percentile(lat, 99)) * 1e3, "cpu": cpu, "n": len(reqs)}
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        server, db, pki, gp, hp = sys.argv[2:7]
        child(server, db, Path(pki), int(gp), int(hp))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=48)
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds; each round measures every server once (interleaved: the "
                         "box's load drifts), the table shows the median round")
    a = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="uldp-bench-servers-") as tmp:
        work = Path(tmp)
        make_dev_pki(work / "pki", ["localhost", "127.0.0.1"])
        (work / "pki" / "admin.token").write_text(new_admin_token())
        for k in range(a.repeat):
            for s in a.servers.split(","):
                got = measure(s, work / f"r{k}", a)
                runs.setdefault(s, []).append(got)
                print(s, json.dumps(got), file=sys.stderr, flush=True)
    out = {s: sorted(rs, key=lambda r: r["rps"])[len(rs) // 2] for s, rs in runs.items()}
    print(f"cores: {os.cpu_count()}, devices: {a.devices}, Connect unary SubmitReport, "
          f"{a.concurrency} in flight", file=sys.stderr)
    print("| ASGI server | reports/s (median round) | p50 (ms) | p99 (ms) | collector CPU "
          "µs/report | reports/s, every round |")
    print("|---|---:|---:|---:|---:|---|")
    for s, r in out.items():
        every = ", ".join(f"{x['rps']:,.0f}" for x in runs[s])
        print(f"| {s} | {r['rps']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['cpu']:.0f} | "
              f"{every} |")


if __name__ == "__main__":
    main()
