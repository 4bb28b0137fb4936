"""Service commands of the ``uldp`` CLI: ``collector``, ``query``, ``fleet``, ``demo``.

``register(subparsers)`` adds them to the main ``uldp`` parser; this module also runs on
its own: ``python -m uldp.collector.service_cli collector serve ...``.

Connection flags of the client commands fall back to environment variables:
``ULDP_TARGET`` (host:port), ``ULDP_CA`` (CA certificate), ``ULDP_ADMIN_TOKEN_FILE``,
``ULDP_CLIENT_CERT`` / ``ULDP_CLIENT_KEY`` (mutual TLS).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from uldp.collector.cliutil import (
    OperatorError,
    Parser,
    add_debug_flag,
    describe_rpc_error,
    nonneg_float,
    nonneg_int,
    port_number,
    positive_float,
    positive_int,
    quiet_grpc_logs,
    run_cli,
)

quiet_grpc_logs()  # before gRPC's C core starts: no C-core log lines on the terminal

import grpc  # noqa: E402

from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES, common_pb2  # noqa: E402

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


def _unused_admin_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--admin-token-file", default=None,
                   help="accepted and ignored, so one set of connection flags ($A in the "
                        "README) works with every command")


def _analyst(a: argparse.Namespace) -> Any:
    from uldp.collector.service.client import AnalystClient

    ep = _conn_endpoint(a)
    _readable_file(Path(a.admin_token_file), "--admin-token-file",
                   "`uldp collector certs` writes admin.token next to the CA")
    try:
        return AnalystClient(ep, Path(a.admin_token_file).read_text())
    except ValueError as exc:
        raise OperatorError(f"--admin-token-file {a.admin_token_file}: {exc}") from None


def _endpoint(a: argparse.Namespace) -> Any:
    return _conn_endpoint(a)


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
    print(f"uldp: error: {describe_rpc_error(exc)}", file=sys.stderr)
    return 2


# ---- collector ----------------------------------------------------------------------------
def _readable_file(path: Path | None, flag: str, hint: str = "") -> None:
    """OperatorError unless ``path`` is a readable file (named by ``flag``)."""
    if path is None:
        return
    if not path.exists():
        raise OperatorError(f"{flag}: {path} does not exist{'; ' + hint if hint else ''}")
    if path.is_dir():
        raise OperatorError(f"{flag}: {path} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise OperatorError(f"{flag}: {path} is not readable by this user")


def _check_port_free(host: str, port: int) -> None:
    """OperatorError when ``host:port`` cannot be listened on (checked before anything is
    written; the server binds it for real right after)."""
    if port == 0:
        return
    import errno

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s_:
        s_.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s_.bind((host, port))
        except socket.gaierror:
            raise OperatorError(f"--host {host}: unknown host name") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OperatorError(
                    f"--port {port}: {host}:{port} is already in use (another collector?); "
                    "stop it, pick another --port, or use --port 0 for any free port"
                ) from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise OperatorError(f"--host {host}: not an address of this machine") from None
            if exc.errno == errno.EACCES:
                raise OperatorError(f"--port {port}: permission denied (ports below 1024 "
                                    "need privileges); pick a port >= 1024") from None
            raise OperatorError(f"--host/--port: cannot listen on {host}:{port}: "
                                f"{exc.strerror}") from None


def _check_db_location(url: str) -> None:
    """OperatorError when a SQLite --db cannot be created or opened where it points."""
    from uldp.collector.security.files import sqlite_path

    if "://" in url and not url.split("://")[0]:
        raise OperatorError(f"--db {url!r}: not a database URL or file path")
    path = sqlite_path(url)
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OperatorError(f"--db {url}: directory {parent} does not exist; create it or "
                            "give another path")
    if path.is_dir():
        raise OperatorError(f"--db {url}: {path} is a directory; give a file name")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise OperatorError(f"--db {url}: {path} is not readable and writable by this "
                                "user")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise OperatorError(f"--db {url}: cannot create a file in {parent} (permission "
                            "denied)")


def _atomic_write(path: str, text: str) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _cmd_serve(a: argparse.Namespace) -> int:
    from uldp.collector.security.files import (
        check_not_world_readable,
        private_umask,
        restrict_sqlite_files,
        sqlite_path,
    )
    from uldp.collector.service.core import CoreConfig
    from uldp.collector.service.server import CollectorServer, ServerConfig

    # 1. validate everything before anything is written (database, admin token, files)
    if not 0.0 <= a.commit_linger_ms <= 100.0:
        raise OperatorError(f"--commit-linger-ms must be between 0 and 100, got "
                            f"{a.commit_linger_ms:g}")
    try:
        level = getattr(logging, a.log_level.upper())
        if not isinstance(level, int):
            raise AttributeError
    except AttributeError:
        raise OperatorError(f"--log-level {a.log_level!r}: use debug, info, warning or "
                            "error") from None
    tls = Path(a.tls_dir) if a.tls_dir else None
    if tls is not None and not tls.is_dir():
        raise OperatorError(f"--tls-dir {tls}: no such directory (create one with "
                            f"`uldp collector certs --out {tls}`)")
    cert = Path(a.tls_cert) if a.tls_cert else (tls / "server.pem" if tls else None)
    key = Path(a.tls_key) if a.tls_key else (tls / "server.key" if tls else None)
    if cert is None or key is None:
        raise OperatorError("TLS is mandatory: give --tls-dir or --tls-cert/--tls-key "
                            "(make a dev CA with `uldp collector certs --out DIR`)")
    certs_hint = "`uldp collector certs --out DIR` writes one"
    _readable_file(cert, "--tls-cert" if a.tls_cert else "--tls-dir", certs_hint)
    _readable_file(key, "--tls-key" if a.tls_key else "--tls-dir", certs_hint)
    client_ca = Path(a.tls_client_ca) if a.tls_client_ca else None
    _readable_file(client_ca, "--tls-client-ca")
    admin = Path(a.admin_token_file) if a.admin_token_file else (
        tls / "admin.token" if tls else cert.parent / "admin.token")
    if admin.exists():
        _readable_file(admin, "--admin-token-file")
    elif not admin.parent.is_dir():
        raise OperatorError(f"--admin-token-file {admin}: directory {admin.parent} does not "
                            "exist")
    token_key = Path(a.token_key_file) if a.token_key_file else (
        tls / "token-signing.key" if tls and (tls / "token-signing.key").exists() else None)
    _readable_file(token_key, "--token-key-file")
    secret_file = Path(a.enrollment_secret_file) if a.enrollment_secret_file else None
    _readable_file(secret_file, "--enrollment-secret-file")
    for path, flag in ((key, "--tls-key"), (token_key, "--token-key-file")):
        if path is not None and (why := check_not_world_readable(path, flag)):
            raise OperatorError(why)
    for f in (a.port_file, a.ready_file):
        if f and not Path(f).resolve().parent.is_dir():
            raise OperatorError(f"{'--port-file' if f == a.port_file else '--ready-file'} "
                                f"{f}: directory {Path(f).parent} does not exist")
    _check_db_location(a.db)
    if not a.reuse_port:
        _check_port_free(a.host, a.port)

    # 2. owner-only files from here on (database, -wal/-shm, generated admin token)
    private_umask()
    db_file = sqlite_path(a.db)
    if db_file is not None:
        restrict_sqlite_files(db_file)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = ServerConfig(
        db_url=a.db, tls_cert=cert, tls_key=key, host=a.host, port=a.port,
        tls_client_ca=client_ca, admin_token_file=admin, token_key_file=token_key,
        enrollment_secret_file=secret_file,
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
        rest = _strip_flags(rest, ("--processes", "--port", "--port-file", "--ready-file",
                                   "--name"))
        for k in range(1, a.processes):
            children.append(subprocess.Popen(
                [*base, *rest, "--processes", "1", "--reuse-port", "--port", str(cfg.port),
                 "--name", f"{a.name or 'collector'}-{k}"]))
    if a.reuse_port:
        cfg.reuse_port = True
    try:
        srv = _open_server(CollectorServer, cfg)
    except BaseException:
        _stop_children(children)
        raise
    done = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("uldp.collector").info("signal %d: shutting down", signum)
        done.set()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        srv.start()
        if a.port_file:
            _atomic_write(a.port_file, str(srv.port))
        if a.ready_file:  # written once the server answers: scripts wait for this file
            _atomic_write(a.ready_file, f"{a.host}:{srv.port}\n")
        print(f"uldp collector {srv.core.name} listening on {a.host}:{srv.port}"
              + (f" ({a.processes} processes)" if a.processes > 1 else ""), flush=True)
        done.wait()
    finally:
        if a.ready_file:
            with contextlib.suppress(OSError):
                os.unlink(a.ready_file)
        srv.stop()
        _stop_children(children)
    return 0


def _open_server(factory: Any, cfg: Any) -> Any:
    """``factory(cfg)`` with the database and listening errors as one operator line."""
    from sqlalchemy.exc import SQLAlchemyError

    from uldp.collector.cliutil import redact_url

    try:
        return factory(cfg)
    except SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None) or exc
        lines = [x.strip() for x in str(orig).strip().splitlines() if x.strip()]
        why = lines[0] if lines else type(orig).__name__
        for x in lines:  # psycopg: 'connection failed: ... Connection refused'
            if "refused" in x or "timeout" in x.lower() or "does not exist" in x:
                why = x
                break
        db = redact_url(cfg.db_url)
        hint = ("is the database server running and reachable, and are the user, password "
                "and database name right?") if "://" in cfg.db_url and not \
            cfg.db_url.startswith("sqlite") else "is the path right and writable?"
        raise OperatorError(f"--db {db}: cannot open the database: {why}; {hint}") from None
    except RuntimeError as exc:
        if "Failed to bind" in str(exc):
            raise OperatorError(f"--port {cfg.port}: cannot listen on {cfg.host}:{cfg.port} "
                                "(in use?); pick another --port or use --port 0") from None
        raise


def _stop_children(children: list[subprocess.Popen[bytes]]) -> None:
    for ch in children:
        ch.terminate()
    for ch in children:
        try:
            ch.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ch.kill()


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
    from uldp.collector.security.certs import existing_pki, make_dev_pki
    from uldp.collector.security.files import write_private
    from uldp.collector.security.tokens import TokenKey, new_admin_token

    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise OperatorError(f"--out {out} is a file, not a directory")
    if not out.exists() and not out.parent.resolve().is_dir():
        raise OperatorError(f"--out {out}: directory {out.parent} does not exist")
    found = existing_pki(out)
    if found and not a.force:
        raise OperatorError(f"--out {out} already holds a CA ({found.name}); pass --force to "
                            "replace every file in it, or pick another --out")
    if not 1 <= a.days <= 36500:
        raise OperatorError(f"--days must be between 1 and 36500, got {a.days}")
    pki = make_dev_pki(out, a.host or None, days=a.days, overwrite=a.force)
    admin = pki.directory / "admin.token"
    if not admin.exists() or a.force:
        write_private(admin, (new_admin_token() + "\n").encode())
    signing = pki.directory / "token-signing.key"
    if not signing.exists() or a.force:
        write_private(signing, TokenKey.generate().private_pem())
    for p in (pki.ca_key, pki.server_key, pki.client_key, admin, signing):
        p.chmod(0o600)  # also when an older run left them wider
    for p in (pki.ca_cert, pki.server_cert, pki.server_key, pki.client_cert, pki.client_key,
              admin, signing):
        print(p)
    return 0


def _health_check(ep: Any, service: str, timeout: float) -> int:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from uldp.client.transport import secure_channel
    with secure_channel(ep) as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    return int(r.status)


def _conn_endpoint(a: argparse.Namespace, server_name: str | None = None) -> Any:
    from uldp.client.transport import Endpoint

    _readable_file(Path(a.ca), "--ca")
    _readable_file(Path(a.client_cert) if a.client_cert else None, "--client-cert")
    _readable_file(Path(a.client_key) if a.client_key else None, "--client-key")
    return Endpoint(a.target, Path(a.ca), Path(a.client_cert) if a.client_cert else None,
                    Path(a.client_key) if a.client_key else None, server_name=server_name)


def _cmd_health(a: argparse.Namespace) -> int:
    """Exit 0 iff the collector answers grpc.health.v1 Check with SERVING (TLS)."""
    from grpc_health.v1 import health_pb2

    from uldp.collector.cliutil import describe_rpc_error
    ep = _conn_endpoint(a, a.server_name)
    try:
        status = _health_check(ep, a.service, a.timeout)
    except grpc.RpcError as exc:
        print(f"unhealthy: {describe_rpc_error(exc)}", file=sys.stderr)
        return 1
    print(health_pb2.HealthCheckResponse.ServingStatus.Name(status))
    return 0 if status == health_pb2.HealthCheckResponse.SERVING else 1


def _cmd_wait(a: argparse.Namespace) -> int:
    """Poll the health check until SERVING (exit 0) or --timeout (exit 1)."""
    from grpc_health.v1 import health_pb2

    from uldp.collector.cliutil import describe_rpc_error
    ep = _conn_endpoint(a, a.server_name)
    end = time.monotonic() + a.timeout
    last = "no answer yet"
    while True:
        left = end - time.monotonic()
        try:
            status = _health_check(ep, "", max(0.2, min(left, 5.0)))
            if status == health_pb2.HealthCheckResponse.SERVING:
                if not a.quiet:
                    print(f"collector at {a.target} is serving")
                return 0
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
        except grpc.RpcError as exc:
            last = describe_rpc_error(exc)
            if "certificate" in last or "TLS" in last:  # waiting will not fix a wrong CA
                raise OperatorError(last) from None
        if time.monotonic() + 0.25 > end:
            print(f"uldp: collector at {a.target} not serving after --timeout {a.timeout:g}s:"
                  f" {last}", file=sys.stderr)
            return 1
        time.sleep(0.25)


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
        last = None
        for q in c.watch(a.query_id):
            last = q
            if a.json:
                print(json.dumps(_query_dict(q)), flush=True)
            else:
                end = "" if tty and q.state == common_pb2.QUERY_STATE_RUNNING else "\n"
                print(("\r" if tty else "") + _progress_line(q), end=end, flush=True)
        if last is not None and last.state != common_pb2.QUERY_STATE_DONE:
            why = f": {last.error}" if last.error else ""
            print(f"uldp: query {last.query_id} ended {_STATE.get(last.state, '?')}{why}",
                  file=sys.stderr)
            return 1
        return 0
    except grpc.RpcError as exc:
        return _fail(exc)
    finally:
        c.close()


def _cmd_query_result(a: argparse.Namespace) -> int:
    c = _analyst(a)
    try:
        try:
            r = c.result(a.query_id)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                return _fail(exc)
            q = c.get(a.query_id)
            state = _STATE.get(q.state, "?")
            if q.state in (common_pb2.QUERY_STATE_CANCELLED, common_pb2.QUERY_STATE_FAILED):
                why = f" ({q.error})" if q.error else ""
                print(f"uldp: error: query {q.query_id} was {state}{why}: it has no result "
                      "(FAILED_PRECONDITION)", file=sys.stderr)
            else:
                print(f"uldp: error: query {q.query_id} is still {state} "
                      f"({_progress_line(q)}); `uldp query status {q.query_id} --watch` "
                      "follows it until it is done (FAILED_PRECONDITION)", file=sys.stderr)
            return 2
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
def _preflight(ep: Any, target: str, timeout: float = 10.0) -> None:
    """OperatorError unless a collector answers at ``target`` (fail fast, before any
    device state is written)."""
    from grpc_health.v1 import health_pb2

    try:
        status = _health_check(ep, "", timeout)
    except grpc.RpcError as exc:
        raise OperatorError(describe_rpc_error(exc)) from None
    if status != health_pb2.HealthCheckResponse.SERVING:
        raise OperatorError(f"the collector at --target {target} is not serving "
                            f"({health_pb2.HealthCheckResponse.ServingStatus.Name(status)})")


def _cmd_fleet_run(a: argparse.Namespace) -> int:
    import tempfile

    from uldp.collector.fleet import (
        FleetDataset,
        dataset_for_query,
        run_fleet,
        summarize,
    )
    from uldp.collector.gateway import run_gateway_fleet

    kind, samples, dim, bound, dataset = a.kind, a.samples, a.dim, a.bound, a.dataset
    moment_p = None
    ep = _endpoint(a)
    secret = ""
    if a.enrollment_secret_file:
        _readable_file(Path(a.enrollment_secret_file), "--enrollment-secret-file")
        secret = Path(a.enrollment_secret_file).read_text().strip()
    if a.query:
        if not a.admin_token_file:
            raise OperatorError("--query needs --admin-token-file to read the query")
        c = _analyst(a)
        try:
            q = c.get(a.query)
        finally:
            c.close()
        spec = json.loads(q.spec_json)
        kind, samples, dim, bound, dataset = (spec["kind"], spec["samples"], spec["dim"],
                                              spec["bound"], q.dataset)
        moment_p = spec.get("moment_p")
    else:
        missing = [f for f, v in (("--kind", kind), ("--samples", samples),
                                  ("--dataset", dataset)) if not v]
        if missing:
            raise OperatorError(f"give --query, or {', '.join(missing)} (the devices' data)")
        _preflight(ep, a.target)
    data = dataset_for_query(kind, a.dist, samples, dim or 1, bound, a.seed, moment_p)
    root = a.state_dir or tempfile.mkdtemp(prefix="uldp-fleet-")
    common = dict(budget=a.budget, enrollment_secret=secret, seed=a.seed,
                  timeout_s=a.timeout, keep_state=a.state_dir is not None)
    if a.gateways:
        res = run_gateway_fleet(ep, root, a.devices, [FleetDataset(dataset, data)],
                                gateways=a.gateways, **common)
    else:
        res = run_fleet(ep, root, a.devices, [FleetDataset(dataset, data)],
                        concurrency=a.concurrency, progress=not a.json and None, **common)
    s = summarize(res)
    s["truth"] = [float(x) for x in data.truth.ravel()]
    if a.json:
        print(json.dumps(s, indent=2))
    else:
        print(_table([[k, str(v)] for k, v in s.items() if k != "truth"], ["FLEET", ""]))
    problems = []
    if res.unfinished:
        problems.append(f"{res.unfinished} device(s) unfinished after --timeout {a.timeout:g}s")
    if res.rejected:
        problems.append(f"{len(res.rejected)} report(s) rejected (first: "
                        f"{res.rejected[0][0]}: {res.rejected[0][1]})")
    if res.refused:
        problems.append(f"{len(res.refused)} task(s) refused by devices (first: "
                        f"{res.refused[0][0]}: {res.refused[0][1]})")
    if res.errors:
        problems.append(f"{len(res.errors)} device error(s) (first: {res.errors[0]})")
    if problems:
        print("uldp: fleet incomplete: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


def _cmd_demo(a: argparse.Namespace) -> int:
    from uldp.collector.demo import run_demo
    return run_demo(devices=a.devices, epsilon=a.epsilon, samples=a.samples,
                    concurrency=a.concurrency, workdir=a.workdir, as_json=a.json,
                    seed=a.seed, gateways=a.gateways)


# ---- parser ------------------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    """Add ``collector``, ``query``, ``fleet`` and ``demo`` to the ``uldp`` parser."""
    # collector
    pc = subparsers.add_parser("collector", help="run the collector service")
    sc = pc.add_subparsers(dest="collector_cmd", required=True)
    s = sc.add_parser("serve", help="serve the device and analyst gRPC services (TLS)",
                      description="Serve the collector until SIGTERM/SIGINT (graceful stop). "
                      "Every flag is checked before anything is written; files the collector "
                      "creates (SQLite database and its -wal/-shm, a generated admin token) "
                      "are owner-only (umask 0077).")
    s.add_argument("--db", default=_env("ULDP_DB", "uldp-collector.db"),
                   help="SQLite file path or SQLAlchemy URL, e.g. "
                        "postgresql://uldp@db:5432/uldp (env ULDP_DB; default "
                        "uldp-collector.db in the working directory)")
    s.add_argument("--host", default=_env("ULDP_HOST", "127.0.0.1"),
                   help="address to listen on (env ULDP_HOST; default 127.0.0.1, "
                        "0.0.0.0 = every interface)")
    s.add_argument("--port", type=port_number,
                   default=int(_env("ULDP_PORT", "50051") or 50051),
                   help="TCP port (env ULDP_PORT; default 50051; 0 = any free port, see "
                        "--port-file)")
    s.add_argument("--port-file", help="write the bound port to this file once listening")
    s.add_argument("--ready-file",
                   help="write HOST:PORT to this file once the server answers (removed on "
                        "stop); scripts wait for it, or use `uldp collector wait`")
    s.add_argument("--tls-dir", default=_env("ULDP_TLS_DIR"),
                   help="directory with server.pem/server.key (and admin.token, "
                        "token-signing.key) as written by `uldp collector certs` "
                        "(env ULDP_TLS_DIR)")
    s.add_argument("--tls-cert", help="server certificate (overrides --tls-dir)")
    s.add_argument("--tls-key", help="server key (overrides --tls-dir)")
    s.add_argument("--tls-client-ca", default=_env("ULDP_TLS_CLIENT_CA"),
                   help="require client certificates signed by this CA (mutual TLS; env "
                        "ULDP_TLS_CLIENT_CA)")
    s.add_argument("--admin-token-file", default=_env("ULDP_ADMIN_TOKEN_FILE"),
                   help="admin credential file (default <tls-dir>/admin.token; created "
                        "0600 if missing; env ULDP_ADMIN_TOKEN_FILE)")
    s.add_argument("--token-key-file", default=_env("ULDP_TOKEN_KEY_FILE"),
                   help="Ed25519 PEM key signing device tokens, shared by replicas "
                        "(default <tls-dir>/token-signing.key, else a key kept in the "
                        "database, which is then owner-only; env ULDP_TOKEN_KEY_FILE)")
    s.add_argument("--enrollment-secret-file", default=_env("ULDP_ENROLLMENT_SECRET_FILE"),
                   help="require the shared secret in this file to enroll devices (env "
                        "ULDP_ENROLLMENT_SECRET_FILE)")
    s.add_argument("--max-message-bytes", type=positive_int,
                   default=DEFAULT_MAX_MESSAGE_BYTES,
                   help=f"largest gRPC message accepted or sent (default "
                        f"{DEFAULT_MAX_MESSAGE_BYTES})")
    s.add_argument("--workers", type=positive_int, default=32,
                   help="threads for database reads and analyst calls (aio mode) or for "
                        "every call (threads mode); default 32")
    s.add_argument("--server-mode", choices=("aio", "threads"), default="aio",
                   help="aio: asyncio gRPC server (default); threads: thread per call")
    s.add_argument("--processes", type=positive_int, default=1,
                   help="serve from N processes sharing the port (SO_REUSEPORT) and the "
                        "database; they coordinate like replicas (default 1)")
    s.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    s.add_argument("--phase-timeout", type=positive_float, default=3600.0,
                   help="default phase deadline in seconds (per query override; default "
                        "3600)")
    s.add_argument("--token-ttl", type=positive_float, default=7 * 24 * 3600.0,
                   help="device token lifetime in seconds, a finite positive number "
                        "(default 604800 = 7 days)")
    s.add_argument("--commit-linger-ms", type=nonneg_float, default=2.0,
                   help="group commit: when few reports are queued, wait this long (ms, "
                        "0-100) for more before committing (fewer, larger transactions)")
    s.add_argument("--name", default=_env("ULDP_NAME"),
                   help="replica name in logs and the phase-closing lease (env ULDP_NAME; "
                        "Kubernetes sets it to the pod name; default a random name)")
    s.add_argument("--allow-simulated", action="store_true",
                   help="accept reports marked simulated (seeded noise: fleets, demos, "
                        "tests) for every query; never on a production collector")
    s.add_argument("--log-level", default="info",
                   help="debug, info (default), warning or error")
    s.set_defaults(func=_cmd_serve)
    s = sc.add_parser("certs", help="write a development CA, server and client certificates",
                      description="Write a development CA, a server certificate, a client "
                      "certificate, an admin token and a token-signing key into --out "
                      "(keys and tokens 0600). Refuses to touch an existing CA without "
                      "--force.")
    s.add_argument("--out", required=True,
                   help="output directory (created; must not hold a CA unless --force)")
    s.add_argument("--host", action="append", default=[],
                   help="server DNS name or IP (repeat; default localhost, 127.0.0.1, ::1)")
    s.add_argument("--days", type=positive_int, default=365,
                   help="validity of the certificates in days (default 365)")
    s.add_argument("--force", action="store_true",
                   help="replace every file in --out (keys are rewritten 0600)")
    s.set_defaults(func=_cmd_certs)
    s = sc.add_parser("health", help="gRPC health check over TLS (container/k8s probes)",
                      description="Exit 0 when the collector answers the grpc.health.v1 "
                      "check with SERVING, 1 otherwise.")
    _conn_flags(s, admin=False)
    s.add_argument("--server-name", help="name to verify in the server certificate")
    s.add_argument("--service", default="", help="service name ('' = whole server)")
    s.add_argument("--timeout", type=positive_float, default=3.0,
                   help="seconds to wait for the answer (default 3)")
    _unused_admin_flag(s)
    s.set_defaults(func=_cmd_health)
    s = sc.add_parser("wait", help="wait until a collector serves (for scripts)",
                      description="Poll the collector's health check until it is SERVING "
                      "(exit 0) or --timeout passes (exit 1). A wrong --ca fails at once "
                      "(exit 2).")
    _conn_flags(s, admin=False)
    s.add_argument("--server-name", help="name to verify in the server certificate")
    s.add_argument("--timeout", type=positive_float, default=30.0,
                   help="seconds to wait at most (default 30)")
    s.add_argument("--quiet", action="store_true", help="print nothing when it is up")
    _unused_admin_flag(s)
    s.set_defaults(func=_cmd_wait)

    # query
    pq = subparsers.add_parser("query", help="create and inspect queries (analyst)")
    sq = pq.add_subparsers(dest="query_cmd", required=True)
    s = sq.add_parser("create", help="create a query")
    s.add_argument("--kind", required=True,
                   choices=("mean", "mean-linf", "mean-l2", "mean-l1", "distribution",
                            "classify", "regress", "sgd"),
                   help="what to estimate (as in `uldp simulate`)")
    s.add_argument("--epsilon", type=positive_float, required=True,
                   help="user-level privacy budget each device spends on this query")
    s.add_argument("--dataset", required=True, help="name of the devices' local dataset")
    s.add_argument("--users", type=positive_int, required=True,
                   help="target number of devices")
    s.add_argument("--samples", type=positive_int, required=True,
                   help="reference samples per user m")
    s.add_argument("--dim", type=positive_int, default=1,
                   help="dimension d (alphabet size for distribution; default 1)")
    s.add_argument("--bound", type=positive_float, default=1.0,
                   help="public support bound D of the data (default 1)")
    s.add_argument("--method", default="",
                   choices=("auto", "two-stage", "two-stage-paper", "ssl", "baseline-a",
                            "baseline-b"),
                   help="auto (default: chosen from the public parameters by the explicit "
                        "error bound), "
                        "two-stage (Algorithm 1, adaptive stage-II interval), two-stage-paper "
                        "(the paper's interval), ssl (user mean, single-stage Laplace), "
                        "baseline-a / baseline-b (spec §12); see the README's method guide")
    s.add_argument("--moment-p", dest="moment_p", type=positive_float,
                   help="heavy tails: the moment order p of E|X|^p <= M (instead of --bound)")
    s.add_argument("--moment-m", dest="moment_m", type=positive_float,
                   help="heavy tails: the moment bound M of E|X|^p <= M")
    s.add_argument("--frame-kind", dest="frame_kind", choices=("gaussian", "hadamard"),
                   help="Kashin frame of mean-l2 (default gaussian)")
    s.add_argument("--mode", choices=("default", "paper", "tuned"),
                   help="grouping: spec [D7] default, paper (eps_c = 1), or tuned "
                        "(minimizes the explicit error bound; as in `uldp simulate`)")
    s.add_argument("--confidence", type=positive_float,
                   help="confidence level of the intervals, e.g. 0.95 (the default)")
    s.add_argument("--extra", help="JSON object of public values of the learning kinds: "
                   "grid, lo, hi, label_bound (classify/regress); for sgd "
                   '\'{"model": "logistic", "sgd": {"t0": 5, ...}}\' (SGDConfig fields)')
    s.add_argument("--phase-timeout", type=nonneg_float, default=0.0,
                   help="seconds each phase stays open at most (0 = collector default)")
    s.add_argument("--id", help="query id (idempotent create; default: generated)")
    s.add_argument("--allow-simulated", action="store_true",
                   help="this query accepts reports marked simulated (seeded noise, e.g. "
                        "`uldp fleet run`)")
    s.set_defaults(func=_cmd_query_create)
    s = sq.add_parser("list", help="list queries")
    s.add_argument("--state", choices=("running", "done", "cancelled", "failed"),
                   help="only queries in this state")
    s.set_defaults(func=_cmd_query_list)
    s = sq.add_parser("status", help="progress of a query")
    s.add_argument("query_id", help="the query's id")
    s.add_argument("--watch", action="store_true",
                   help="follow until it ends; exit 1 if it ends cancelled or failed")
    s.set_defaults(func=_cmd_query_status)
    s = sq.add_parser("result", help="estimate with confidence intervals")
    s.add_argument("query_id", help="the query's id")
    s.set_defaults(func=_cmd_query_result)
    s = sq.add_parser("cancel", help="cancel a running query")
    s.add_argument("query_id", help="the query's id")
    s.set_defaults(func=_cmd_query_cancel)
    for sub in sq.choices.values():
        _conn_flags(sub)
        sub.add_argument("--json", action="store_true", help="machine-readable output")

    # fleet
    pf = subparsers.add_parser("fleet", help="simulated devices over gRPC")
    sf = pf.add_subparsers(dest="fleet_cmd", required=True)
    s = sf.add_parser("run", help="run N simulated devices against a collector",
                      description="Run N simulated devices (each a real uldp.client.Device "
                      "with its own state) against a collector until none has anything left "
                      "to do. Exit 0 when every device finished; 1 when any is unfinished "
                      "at --timeout, refused a task or had a report rejected; 2 when the "
                      "collector cannot be reached.")
    _conn_flags(s, admin=False)
    s.add_argument("--admin-token-file", default=_env("ULDP_ADMIN_TOKEN_FILE"),
                   help="needed with --query (reads the query's public parameters; env "
                        "ULDP_ADMIN_TOKEN_FILE)")
    s.add_argument("--devices", type=positive_int, required=True,
                   help="number of simulated devices")
    s.add_argument("--query", help="take kind/samples/dim/bound/dataset from this query")
    s.add_argument("--kind", help="kind of data to give the devices (without --query)")
    s.add_argument("--samples", type=positive_int,
                   help="samples per device (without --query)")
    s.add_argument("--dim", type=positive_int, default=1,
                   help="dimension of each sample (without --query; default 1)")
    s.add_argument("--bound", type=positive_float, default=1.0,
                   help="support bound of the data (without --query; default 1)")
    s.add_argument("--dataset", help="dataset name the devices register (without --query)")
    s.add_argument("--dist", default="uniform", help="population, as in `uldp simulate`")
    s.add_argument("--concurrency", type=positive_int, default=32,
                   help="devices in flight at once (threads; default 32)")
    s.add_argument("--gateways", type=nonneg_int, default=0,
                   help="0 (default): every device sends its own report (SubmitReport), as "
                        "an app does; N >= 1: N gateway processes collect the devices' "
                        "reports and send them in batches (SubmitReportBatch)")
    s.add_argument("--budget", type=positive_float, default=10.0,
                   help="each device's total epsilon (default 10)")
    s.add_argument("--enrollment-secret-file",
                   help="file with the collector's enrollment secret, if it requires one")
    s.add_argument("--seed", type=int,
                   help="reproducible data and noise (simulation mode; reports are marked "
                        "simulated)")
    s.add_argument("--state-dir", help="keep device state here (default: a temp dir, removed)")
    s.add_argument("--timeout", type=positive_float, default=1800.0,
                   help="stop after this many seconds; unfinished devices make the exit "
                        "code 1 (default 1800)")
    s.add_argument("--json", action="store_true", help="machine-readable summary")
    s.set_defaults(func=_cmd_fleet_run)

    # demo
    s = subparsers.add_parser(
        "demo", help="collector + one query per kind + a simulated fleet on loopback; "
                     "prints estimates next to the truth",
        description="Start a collector (TLS, SQLite, loopback), create one query per kind, "
                    "run a simulated fleet through gateway processes that batch the reports, "
                    "and print every estimate next to the truth with its interval.")
    s.add_argument("--devices", type=positive_int, default=20_000,
                   help="number of simulated devices, split over the 5 queries (default "
                        "20000)")
    s.add_argument("--epsilon", type=positive_float, default=2.0,
                   help="privacy budget of every query (default 2)")
    s.add_argument("--samples", type=positive_int, default=100,
                   help="samples per device (default 100)")
    s.add_argument("--gateways", type=positive_int, default=2,
                   help="gateway processes driving the devices (default 2)")
    s.add_argument("--concurrency", type=positive_int, default=16,
                   help="devices in flight per gateway (default 16)")
    s.add_argument("--workdir", help="keep the collector database and certificates here")
    s.add_argument("--seed", type=int, default=None,
                   help="reproducible data and noise (simulation mode)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=_cmd_demo)


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="uldp", description="uldp service commands")
    register(p.add_subparsers(dest="cmd", required=True))
    add_debug_flag(p)
    t0 = time.perf_counter()
    rc = run_cli(p, argv)
    logging.getLogger("uldp").debug("done in %.2fs", time.perf_counter() - t0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
