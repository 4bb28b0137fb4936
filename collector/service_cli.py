"""Service commands of the ``uldp`` CLI: ``collector``, ``query``, ``fleet``, ``demo``.

``register(subparsers)`` adds them to the main ``uldp`` parser; this module also runs on
its own: ``python -m uldp.collector.service_cli collector serve ...``.

Connection flags of the client commands fall back to environment variables:
``ULDP_TARGET`` (host:port), ``ULDP_CA`` (CA certificate), ``ULDP_ADMIN_TOKEN_FILE``,
``ULDP_CLIENT_CERT`` / ``ULDP_CLIENT_KEY`` (mutual TLS).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES, common_pb2

__all__ = ["main", "register"]

_STATE = {common_pb2.QUERY_STATE_RUNNING: "running", common_pb2.QUERY_STATE_DONE: "done",
          common_pb2.QUERY_STATE_CANCELLED: "cancelled", common_pb2.QUERY_STATE_FAILED: "failed",
          0: "?"}
_PSTATE = {common_pb2.PHASE_STATE_PENDING: "pending", common_pb2.PHASE_STATE_OPEN: "open",
           common_pb2.PHASE_STATE_CLOSING: "closing", common_pb2.PHASE_STATE_CLOSED: "closed",
           0: "?"}


# ---- helpers ----------------------------------------------------------------------------
def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def _conn_flags(p: argparse.ArgumentParser, admin: bool = True) -> None:
    g = p.add_argument_group("connection")
    g.add_argument("--target", default=_env("ULDP_TARGET", "127.0.0.1:50051"),
                   help="collector host:port (env ULDP_TARGET)")
    g.add_argument("--ca", default=_env("ULDP_CA"), required=_env("ULDP_CA") is None,
                   help="CA certificate that signed the collector's (env ULDP_CA)")
    g.add_argument("--client-cert", default=_env("ULDP_CLIENT_CERT"),
                   help="client certificate for mutual TLS (env ULDP_CLIENT_CERT)")
    g.add_argument("--client-key", default=_env("ULDP_CLIENT_KEY"),
                   help="client key for mutual TLS (env ULDP_CLIENT_KEY)")
    if admin:
        g.add_argument("--admin-token-file", default=_env("ULDP_ADMIN_TOKEN_FILE"),
                       required=_env("ULDP_ADMIN_TOKEN_FILE") is None,
                       help="file holding the admin credential (env ULDP_ADMIN_TOKEN_FILE)")


def _analyst(a: argparse.Namespace) -> Any:
    from uldp.collector.service.client import AnalystClient
    return AnalystClient.from_files(a.target, a.ca, a.admin_token_file, a.client_cert,
                                    a.client_key)


def _endpoint(a: argparse.Namespace) -> Any:
    from uldp.client.transport import Endpoint
    return Endpoint(a.target, Path(a.ca), Path(a.client_cert) if a.client_cert else None,
                    Path(a.client_key) if a.client_key else None)


def _query_dict(q: Any) -> dict[str, Any]:
    return {
        "query_id": q.query_id, "kind": q.kind, "dataset": q.dataset, "epsilon": q.epsilon,
        "state": _STATE.get(q.state, "?"), "current_phase": q.current_phase,
        "assigned": q.assigned, "target_users": q.target_users,
        "phases": [{"index": p.index, "state": _PSTATE.get(p.state, "?"), "quota": p.quota,
                    "received": p.received, "deadline_ms": p.deadline_ms,
                    "published": json.loads(p.published_json) if p.published_json else None}
                   for p in q.phases],
        "created_at_ms": q.created_at_ms, "finished_at_ms": q.finished_at_ms,
        "spec": json.loads(q.spec_json) if q.spec_json else None, "error": q.error,
        "allow_simulated": q.allow_simulated,
    }


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _progress_line(q: Any) -> str:
    parts = []
    for p in q.phases:
        frac = p.received / p.quota if p.quota else 0.0
        bar = "#" * int(20 * min(frac, 1.0))
        parts.append(f"phase {p.index} {_PSTATE.get(p.state, '?'):7s} [{bar:<20}] "
                     f"{p.received}/{p.quota}")
    return f"{q.query_id} {_STATE.get(q.state, '?'):9s} assigned {q.assigned}/" \
           f"{q.target_users}  " + "  ".join(parts)


def _fail(exc: grpc.RpcError) -> int:
    print(f"error: {exc.code().name}: {exc.details()}", file=sys.stderr)
    return 2


# ---- collector ----------------------------------------------------------------------------
def _cmd_serve(a: argparse.Namespace) -> int:
    from uldp.collector.service.core import CoreConfig
    from uldp.collector.service.server import CollectorServer, ServerConfig

    logging.basicConfig(level=getattr(logging, a.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not 0.0 <= a.commit_linger_ms <= 100.0:
        print(f"error: --commit-linger-ms must be between 0 and 100, got {a.commit_linger_ms}",
              file=sys.stderr)
        return 2
    tls = Path(a.tls_dir) if a.tls_dir else None
    cert = Path(a.tls_cert) if a.tls_cert else (tls / "server.pem" if tls else None)
    key = Path(a.tls_key) if a.tls_key else (tls / "server.key" if tls else None)
    if cert is None or key is None:
        print("error: TLS is mandatory: give --tls-dir or --tls-cert/--tls-key "
              "(make a dev CA with `uldp collector certs`)", file=sys.stderr)
        return 2
    admin = Path(a.admin_token_file) if a.admin_token_file else (
        tls / "admin.token" if tls else cert.parent / "admin.token")
    token_key = Path(a.token_key_file) if a.token_key_file else (
        tls / "token-signing.key" if tls and (tls / "token-signing.key").exists() else None)
    cfg = ServerConfig(
        db_url=a.db, tls_cert=cert, tls_key=key, host=a.host, port=a.port,
        tls_client_ca=Path(a.tls_client_ca) if a.tls_client_ca else None,
        admin_token_file=admin, token_key_file=token_key,
        enrollment_secret_file=Path(a.enrollment_secret_file)
        if a.enrollment_secret_file else None,
        max_message_bytes=a.max_message_bytes, workers=a.workers, name=a.name,
        mode=a.server_mode,
        core=CoreConfig(default_phase_timeout_s=a.phase_timeout, token_ttl_s=a.token_ttl,
                        commit_linger_ms=a.commit_linger_ms,
                        allow_simulated=a.allow_simulated))
    children: list[subprocess.Popen[bytes]] = []
    if a.processes > 1:
        # N processes share one port (SO_REUSEPORT) and the database, like replicas
        if cfg.port == 0:
            with socket.socket() as s_:
                s_.bind((a.host, 0))
                cfg.port = s_.getsockname()[1]
        cfg.reuse_port = True
        argv = [x for x in sys.argv[1:]]
        base = [sys.executable, "-m", "uldp.collector.service_cli", "collector", "serve"]
        rest = argv[argv.index("serve") + 1:] if "serve" in argv else []
        rest = _strip_flags(rest, ("--processes", "--port", "--port-file", "--name"))
        for k in range(1, a.processes):
            children.append(subprocess.Popen(
                [*base, *rest, "--processes", "1", "--reuse-port", "--port", str(cfg.port),
                 "--name", f"{a.name or 'collector'}-{k}"]))
    if a.reuse_port:
        cfg.reuse_port = True
    srv = CollectorServer(cfg)
    if a.port_file:
        tmp = Path(a.port_file + ".tmp")
        tmp.write_text(str(srv.port))
        os.replace(tmp, a.port_file)
    print(f"uldp collector {srv.core.name} listening on {a.host}:{srv.port}"
          + (f" ({a.processes} processes)" if a.processes > 1 else ""), flush=True)
    try:
        srv.serve_forever()
    finally:
        for ch in children:
            ch.terminate()
        for ch in children:
            try:
                ch.wait(timeout=30)
            except subprocess.TimeoutExpired:
                ch.kill()
    return 0


def _strip_flags(args: list[str], flags: tuple[str, ...]) -> list[str]:
    """``args`` without ``flags`` (and their values, in both --f v and --f=v forms)."""
    out, skip = [], False
    for x in args:
        if skip:
            skip = False
            continue
        if x in flags:
            skip = True
            continue
        if any(x.startswith(f + "=") for f in flags):
            continue
        out.append(x)
    return out


def _cmd_certs(a: argparse.Namespace) -> int:
    from uldp.collector.security.certs import make_dev_pki
    from uldp.collector.security.tokens import TokenKey, new_admin_token

    pki = make_dev_pki(a.out, a.host or None, days=a.days, overwrite=a.force)
    admin = pki.directory / "admin.token"
    if not admin.exists() or a.force:
        admin.write_text(new_admin_token() + "\n")
        admin.chmod(0o600)
    signing = pki.directory / "token-signing.key"
    if not signing.exists() or a.force:
        signing.write_bytes(TokenKey.generate().private_pem())
        signing.chmod(0o600)
    for p in (pki.ca_cert, pki.server_cert, pki.server_key, pki.client_cert, pki.client_key,
              admin, signing):
        print(p)
    return 0


def _cmd_health(a: argparse.Namespace) -> int:
    """Exit 0 iff the collector answers grpc.health.v1 Check with SERVING (TLS)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from uldp.client.transport import Endpoint, secure_channel
    ep = Endpoint(a.target, Path(a.ca), Path(a.client_cert) if a.client_cert else None,
                  Path(a.client_key) if a.client_key else None, server_name=a.server_name)
    try:
        with secure_channel(ep) as ch:
            r = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=a.service), timeout=a.timeout)
    except grpc.RpcError as exc:
        print(f"unhealthy: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
    print(status)
    return 0 if r.status == health_pb2.HealthCheckResponse.SERVING else 1


# ---- query ---------------------------------------------------------------------------------
def _cmd_query_create(a: argparse.Namespace) -> int:
    from uldp.collector.service.client import QueryRequest

    params: dict[str, Any] = {}
    for k in ("moment_p", "moment_m", "frame_kind", "mode", "confidence"):
        v = getattr(a, k)
        if v is not None:
            params[k] = v
    if a.extra is not None:
        try:
            params["extra"] = json.loads(a.extra)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--extra is not JSON: {exc}") from None
    req = QueryRequest(kind=a.kind, epsilon=a.epsilon, dataset=a.dataset, users=a.users,
                       samples=a.samples, dim=a.dim, bound=a.bound or 0.0, method=a.method,
                       params=params or None, phase_timeout_s=a.phase_timeout,
                       query_id=a.id or "", allow_simulated=a.allow_simulated)
    c = _analyst(a)
    try:
        q = c.create(req)
    except grpc.RpcError as exc:
        return _fail(exc)
    finally:
        c.close()
    if a.json:
        print(json.dumps(_query_dict(q), indent=2))
    else:
        print(f"created query {q.query_id} ({q.kind}, eps={q.epsilon:g}, "
              f"{q.target_users} users, {len(q.phases)} phase(s))")
    return 0


def _cmd_query_list(a: argparse.Namespace) -> int:
    c = _analyst(a)
    try:
        qs = c.list(a.state)
    except grpc.RpcError as exc:
        return _fail(exc)
    finally:
        c.close()
    if a.json:
        print(json.dumps([_query_dict(q) for q in qs], indent=2))
        return 0
    rows = [[q.query_id, q.kind, q.dataset, f"{q.epsilon:g}", _STATE.get(q.state, "?"),
             str(q.current_phase or "-"), f"{q.assigned}/{q.target_users}",
             " ".join(f"{p.received}/{p.quota}" for p in q.phases)] for q in qs]
    print(_table(rows, ["QUERY", "KIND", "DATASET", "EPS", "STATE", "PHASE", "ASSIGNED",
                        "REPORTS/QUOTA"]))
    return 0


def _cmd_query_status(a: argparse.Namespace) -> int:
    c = _analyst(a)
    try:
        if not a.watch:
            q = c.get(a.query_id)
            print(json.dumps(_query_dict(q), indent=2) if a.json else _progress_line(q))
            return 0
        tty = sys.stdout.isatty()
        for q in c.watch(a.query_id):
            if a.json:
                print(json.dumps(_query_dict(q)), flush=True)
            else:
                end = "" if tty and q.state == common_pb2.QUERY_STATE_RUNNING else "\n"
                print(("\r" if tty else "") + _progress_line(q), end=end, flush=True)
        return 0
    except grpc.RpcError as exc:
        return _fail(exc)
    finally:
        c.close()


def _cmd_query_result(a: argparse.Namespace) -> int:
    c = _analyst(a)
    try:
        r = c.result(a.query_id)
    except grpc.RpcError as exc:
        return _fail(exc)
    finally:
        c.close()
    est = json.loads(r.estimate_json)
    if a.json:
        print(json.dumps({"query_id": r.query_id, "kind": r.kind, **est}, indent=2))
        return 0
    print(f"query {r.query_id} ({r.kind}): {int(r.confidence * 100)}% confidence intervals, "
          f"reports per phase {list(r.reports_per_phase)}")
    rows = [[str(i), f"{v:+.5f}", f"[{lo:+.5f}, {hi:+.5f}]"]
            for i, (v, lo, hi) in enumerate(zip(r.values, r.ci_low, r.ci_high, strict=True))]
    print(_table(rows, ["#", "ESTIMATE", "INTERVAL"]))
    return 0


def _cmd_query_cancel(a: argparse.Namespace) -> int:
    c = _analyst(a)
    try:
        q = c.cancel(a.query_id)
    except grpc.RpcError as exc:
        return _fail(exc)
    finally:
        c.close()
    print(json.dumps(_query_dict(q), indent=2) if a.json else
          f"query {q.query_id} is {_STATE.get(q.state, '?')}")
    return 0


# ---- fleet -----------------------------------------------------------------------------------
def _cmd_fleet_run(a: argparse.Namespace) -> int:
    import tempfile

    from uldp.collector.fleet import FleetDataset, dataset_for_query, run_fleet, summarize

    kind, samples, dim, bound, dataset = a.kind, a.samples, a.dim, a.bound, a.dataset
    moment_p = None
    if a.query:
        if not a.admin_token_file:
            print("error: --query needs --admin-token-file to read the query", file=sys.stderr)
            return 2
        c = _analyst(a)
        try:
            q = c.get(a.query)
        except grpc.RpcError as exc:
            return _fail(exc)
        finally:
            c.close()
        spec = json.loads(q.spec_json)
        kind, samples, dim, bound, dataset = (spec["kind"], spec["samples"], spec["dim"],
                                              spec["bound"], q.dataset)
        moment_p = spec.get("moment_p")
    if not (kind and samples and dataset):
        print("error: give --query, or --kind, --samples and --dataset", file=sys.stderr)
        return 2
    data = dataset_for_query(kind, a.dist, samples, dim or 1, bound, a.seed, moment_p)
    secret = Path(a.enrollment_secret_file).read_text().strip() \
        if a.enrollment_secret_file else ""
    root = a.state_dir or tempfile.mkdtemp(prefix="uldp-fleet-")
    res = run_fleet(_endpoint(a), root, a.devices, [FleetDataset(dataset, data)],
                    concurrency=a.concurrency, budget=a.budget, enrollment_secret=secret,
                    seed=a.seed, timeout_s=a.timeout, progress=not a.json and None,
                    keep_state=a.state_dir is not None)
    s = summarize(res)
    s["truth"] = [float(x) for x in data.truth.ravel()]
    if a.json:
        print(json.dumps(s, indent=2))
    else:
        print(_table([[k, str(v)] for k, v in s.items() if k != "truth"], ["FLEET", ""]))
        for e in res.errors[:5]:
            print("  error:", e)
    return 0 if not res.errors else 1


def _cmd_demo(a: argparse.Namespace) -> int:
    from uldp.collector.demo import run_demo
    return run_demo(devices=a.devices, epsilon=a.epsilon, samples=a.samples,
                    concurrency=a.concurrency, workdir=a.workdir, as_json=a.json,
                    seed=a.seed)


# ---- parser ------------------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    """Add ``collector``, ``query``, ``fleet`` and ``demo`` to the ``uldp`` parser."""
    # collector
    pc = subparsers.add_parser("collector", help="run the collector service")
    sc = pc.add_subparsers(dest="collector_cmd", required=True)
    s = sc.add_parser("serve", help="serve the device and analyst gRPC services (TLS)")
    s.add_argument("--db", default=_env("ULDP_DB", "uldp-collector.db"),
                   help="SQLite file path or SQLAlchemy URL, e.g. "
                        "postgresql://uldp@db:5432/uldp (env ULDP_DB)")
    s.add_argument("--host", default=_env("ULDP_HOST", "127.0.0.1"))
    s.add_argument("--port", type=int, default=int(_env("ULDP_PORT", "50051") or 50051),
                   help="0 = pick a free port (see --port-file)")
    s.add_argument("--port-file", help="write the bound port to this file once listening")
    s.add_argument("--tls-dir", default=_env("ULDP_TLS_DIR"),
                   help="directory with server.pem/server.key (and admin.token, "
                        "token-signing.key) as written by `uldp collector certs`")
    s.add_argument("--tls-cert", help="server certificate (overrides --tls-dir)")
    s.add_argument("--tls-key", help="server key (overrides --tls-dir)")
    s.add_argument("--tls-client-ca", default=_env("ULDP_TLS_CLIENT_CA"),
                   help="require client certificates signed by this CA (mutual TLS)")
    s.add_argument("--admin-token-file", default=_env("ULDP_ADMIN_TOKEN_FILE"),
                   help="admin credential file (default <tls-dir>/admin.token; created if "
                        "missing)")
    s.add_argument("--token-key-file", default=_env("ULDP_TOKEN_KEY_FILE"),
                   help="Ed25519 PEM key signing device tokens, shared by replicas "
                        "(default <tls-dir>/token-signing.key, else a key kept in the DB)")
    s.add_argument("--enrollment-secret-file", default=_env("ULDP_ENROLLMENT_SECRET_FILE"),
                   help="require this shared secret to enroll devices")
    s.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES)
    s.add_argument("--workers", type=int, default=32,
                   help="threads for database reads and analyst calls (aio mode) or for "
                        "every call (threads mode)")
    s.add_argument("--server-mode", choices=("aio", "threads"), default="aio",
                   help="aio: asyncio gRPC server (default); threads: thread per call")
    s.add_argument("--processes", type=int, default=1,
                   help="serve from N processes sharing the port (SO_REUSEPORT) and the "
                        "database; they coordinate like replicas")
    s.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    s.add_argument("--phase-timeout", type=float, default=3600.0,
                   help="default phase deadline in seconds (per query override)")
    s.add_argument("--token-ttl", type=float, default=7 * 24 * 3600.0,
                   help="device token lifetime in seconds")
    s.add_argument("--commit-linger-ms", type=float, default=2.0,
                   help="group commit: when few reports are queued, wait this long (ms, "
                        "0-100) for more before committing (fewer, larger transactions)")
    s.add_argument("--name", help="replica name (logs, phase-closing lease)")
    s.add_argument("--allow-simulated", action="store_true",
                   help="accept reports marked simulated (seeded noise: fleets, demos, "
                        "tests) for every query; never on a production collector")
    s.add_argument("--log-level", default="info")
    s.set_defaults(func=_cmd_serve)
    s = sc.add_parser("certs", help="write a development CA, server and client certificates")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--host", action="append", default=[],
                   help="server DNS name or IP (repeat; default localhost, 127.0.0.1, ::1)")
    s.add_argument("--days", type=int, default=365)
    s.add_argument("--force", action="store_true", help="overwrite existing files")
    s.set_defaults(func=_cmd_certs)
    s = sc.add_parser("health", help="gRPC health check over TLS (container/k8s probes)")
    _conn_flags(s, admin=False)
    s.add_argument("--server-name", help="name to verify in the server certificate")
    s.add_argument("--service", default="", help="service name ('' = whole server)")
    s.add_argument("--timeout", type=float, default=3.0)
    s.set_defaults(func=_cmd_health)

    # query
    pq = subparsers.add_parser("query", help="create and inspect queries (analyst)")
    sq = pq.add_subparsers(dest="query_cmd", required=True)
    s = sq.add_parser("create", help="create a query")
    s.add_argument("--kind", required=True,
                   help="mean, mean-linf, mean-l2, mean-l1, distribution, classify, "
                   "regress, sgd")
    s.add_argument("--epsilon", type=float, required=True)
    s.add_argument("--dataset", required=True, help="name of the devices' local dataset")
    s.add_argument("--users", type=int, required=True, help="target number of devices")
    s.add_argument("--samples", type=int, required=True, help="reference samples per user m")
    s.add_argument("--dim", type=int, default=1)
    s.add_argument("--bound", type=float, default=1.0, help="support bound D")
    s.add_argument("--method", default="", help="two-stage (default), ssl, baseline-a/b")
    s.add_argument("--moment-p", dest="moment_p", type=float)
    s.add_argument("--moment-m", dest="moment_m", type=float)
    s.add_argument("--frame-kind", dest="frame_kind")
    s.add_argument("--mode", choices=("default", "paper"))
    s.add_argument("--confidence", type=float)
    s.add_argument("--extra", help="JSON object of public values of the learning kinds: "
                   "grid, lo, hi, label_bound (classify/regress); for sgd "
                   '\'{"model": "logistic", "sgd": {"t0": 5, ...}}\' (SGDConfig fields)')
    s.add_argument("--phase-timeout", type=float, default=0.0,
                   help="seconds each phase stays open at most (0 = collector default)")
    s.add_argument("--id", help="query id (idempotent create)")
    s.add_argument("--allow-simulated", action="store_true",
                   help="this query accepts reports marked simulated (seeded noise, e.g. "
                        "`uldp fleet run`)")
    s.set_defaults(func=_cmd_query_create)
    s = sq.add_parser("list", help="list queries")
    s.add_argument("--state", choices=("running", "done", "cancelled", "failed"))
    s.set_defaults(func=_cmd_query_list)
    s = sq.add_parser("status", help="progress of a query")
    s.add_argument("query_id")
    s.add_argument("--watch", action="store_true", help="follow until it finishes")
    s.set_defaults(func=_cmd_query_status)
    s = sq.add_parser("result", help="estimate with confidence intervals")
    s.add_argument("query_id")
    s.set_defaults(func=_cmd_query_result)
    s = sq.add_parser("cancel", help="cancel a running query")
    s.add_argument("query_id")
    s.set_defaults(func=_cmd_query_cancel)
    for sub in sq.choices.values():
        _conn_flags(sub)
        sub.add_argument("--json", action="store_true", help="machine-readable output")

    # fleet
    pf = subparsers.add_parser("fleet", help="simulated devices over gRPC")
    sf = pf.add_subparsers(dest="fleet_cmd", required=True)
    s = sf.add_parser("run", help="run N simulated devices against a collector")
    _conn_flags(s, admin=False)
    s.add_argument("--admin-token-file", default=_env("ULDP_ADMIN_TOKEN_FILE"),
                   help="needed with --query (reads the query's public parameters)")
    s.add_argument("--devices", type=int, required=True)
    s.add_argument("--query", help="take kind/samples/dim/bound/dataset from this query")
    s.add_argument("--kind")
    s.add_argument("--samples", type=int)
    s.add_argument("--dim", type=int, default=1)
    s.add_argument("--bound", type=float, default=1.0)
    s.add_argument("--dataset")
    s.add_argument("--dist", default="uniform", help="population, as in `uldp simulate`")
    s.add_argument("--concurrency", type=int, default=32)
    s.add_argument("--budget", type=float, default=10.0, help="each device's total epsilon")
    s.add_argument("--enrollment-secret-file")
    s.add_argument("--seed", type=int, help="reproducible data and noise (simulation mode)")
    s.add_argument("--state-dir", help="keep device state here (default: a temp dir, removed)")
    s.add_argument("--timeout", type=float, default=1800.0)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_fleet_run)

    # demo
    s = subparsers.add_parser("demo", help="collector + one query per kind + a simulated "
                              "fleet on loopback; prints estimates next to the truth")
    s.add_argument("--devices", type=int, default=20_000)
    s.add_argument("--epsilon", type=float, default=2.0)
    s.add_argument("--samples", type=int, default=100)
    s.add_argument("--concurrency", type=int, default=48)
    s.add_argument("--workdir", help="keep the collector database and certificates here")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_demo)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="uldp", description="uldp service commands")
    register(p.add_subparsers(dest="cmd", required=True))
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    rc = int(a.func(a) or 0)
    logging.getLogger("uldp").debug("done in %.2fs", time.perf_counter() - t0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
