"""``uldp collector serve``: check every flag, then run the collector until SIGTERM.

Nothing is written before every flag has been checked (files, TLS material, the database
location, the port); the files the collector creates are owner-only (umask 0077).
``--processes N`` starts N-1 sibling processes sharing the port (SO_REUSEPORT) and the
database, like replicas.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES
from uldp.collector.cli.common import (
    atomic_write,
    cors_origins,
    env,
    readable_file,
    ready_file,
    wait_for_signal,
)
from uldp.collector.cli.connections import (
    add_connection_flags,
    connection_limits,
    trusted_proxies,
)
from uldp.collector.cli.util import (
    OperatorError,
    nonneg_float,
    open_unit_float,
    port_number,
    positive_float,
    positive_int,
)

__all__ = ["add_serve_parser"]


def _check_port_free(host: str, port: int, flag: str = "--port") -> None:
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
                    f"{flag} {port}: {host}:{port} is already in use (another collector?); "
                    f"stop it, pick another {flag}, or use {flag} 0 for any free port"
                ) from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise OperatorError(f"--host {host}: not an address of this machine") from None
            if exc.errno == errno.EACCES:
                raise OperatorError(f"{flag} {port}: permission denied (ports below 1024 "
                                    "need privileges); pick a port >= 1024") from None
            raise OperatorError(f"--host/{flag}: cannot listen on {host}:{port}: "
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


@dataclass(frozen=True)
class _Files:
    """The files ``serve`` reads, each checked readable."""

    cert: Path
    key: Path
    client_ca: Path | None
    admin: Path
    token_key: Path | None
    secret: Path | None
    attestation_key: Path | None = None
    metrics_token: Path | None = None


def _log_level(a: argparse.Namespace) -> int:
    try:
        level = getattr(logging, a.log_level.upper())
        if not isinstance(level, int):
            raise AttributeError
    except AttributeError:
        raise OperatorError(f"--log-level {a.log_level!r}: use debug, info, warning or "
                            "error") from None
    if a.log_format not in ("plain", "json"):
        raise OperatorError(f"--log-format {a.log_format!r} (or ULDP_LOG_FORMAT): use plain "
                            "or json")
    return level


def _tls_files(a: argparse.Namespace) -> tuple[Path | None, Path, Path]:
    """(--tls-dir, server certificate, server key), each checked."""
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
    readable_file(cert, "--tls-cert" if a.tls_cert else "--tls-dir", certs_hint)
    readable_file(key, "--tls-key" if a.tls_key else "--tls-dir", certs_hint)
    return tls, cert, key


def _check_files(a: argparse.Namespace) -> _Files:
    """Every file flag of ``serve``, checked before anything is written."""
    from uldp.collector.security.files import check_not_world_readable

    tls, cert, key = _tls_files(a)
    client_ca = Path(a.tls_client_ca) if a.tls_client_ca else None
    readable_file(client_ca, "--tls-client-ca")
    admin = Path(a.admin_token_file) if a.admin_token_file else (
        tls / "admin.token" if tls else cert.parent / "admin.token")
    if admin.exists():
        readable_file(admin, "--admin-token-file")
    elif not admin.parent.is_dir():
        raise OperatorError(f"--admin-token-file {admin}: directory {admin.parent} does not "
                            "exist")
    token_key = Path(a.token_key_file) if a.token_key_file else (
        tls / "token-signing.key" if tls and (tls / "token-signing.key").exists() else None)
    readable_file(token_key, "--token-key-file")
    secret_file = Path(a.enrollment_secret_file) if a.enrollment_secret_file else None
    readable_file(secret_file, "--enrollment-secret-file")
    metrics = _metrics_token(a)
    if (a.shuffler_port is None) != (a.shuffler_ca is None):
        raise OperatorError("--shuffler-port and --shuffler-ca go together (shuffle mode: "
                            "the port the shuffler forwards to, and the CA of its client "
                            "certificate)")
    readable_file(Path(a.shuffler_ca) if a.shuffler_ca else None, "--shuffler-ca")
    attest = Path(a.attestation_key_file) if a.attestation_key_file else None
    readable_file(attest, "--attestation-key-file")
    for path, flag in ((key, "--tls-key"), (token_key, "--token-key-file"),
                       (attest, "--attestation-key-file")):
        if path is not None and (why := check_not_world_readable(path, flag)):
            raise OperatorError(why)
    for f in (a.port_file, a.ready_file):
        if f and not Path(f).resolve().parent.is_dir():
            raise OperatorError(f"{'--port-file' if f == a.port_file else '--ready-file'} "
                                f"{f}: directory {Path(f).parent} does not exist")
    return _Files(cert, key, client_ca, admin, token_key, secret_file, attest, metrics)


def _check_dev_example(a: argparse.Namespace, files: _Files) -> None:
    """``--dev-example DIR``: only with --http-port, on loopback, with the dev certificates."""
    if not a.dev_example:
        return
    from uldp.collector.http.example import check_dev_setup

    if a.http_port is None:
        raise OperatorError("--dev-example needs --http-port (the page is served on the "
                            "HTTP port, the same origin as the calls it makes)")
    if why := check_dev_setup(a.host, files.cert, Path(a.dev_example)):
        raise OperatorError(why)


def _metrics_token(a: argparse.Namespace) -> Path | None:
    """``--metrics-token-file``, checked (readable, one token of >= 16 characters)."""
    if not a.metrics_token_file:
        return None
    path = Path(a.metrics_token_file)
    readable_file(path, "--metrics-token-file")
    if a.http_port is None:
        raise OperatorError("--metrics-token-file needs --http-port (/metrics is served on "
                            "the HTTP port)")
    token = path.read_text().strip()
    if len(token) < 16 or any(ch.isspace() or not ch.isprintable() for ch in token):
        raise OperatorError(f"--metrics-token-file {path}: the token must be one line of at "
                            "least 16 printable characters without spaces")
    return path


def _server_config(a: argparse.Namespace, files: _Files, connections: Any = None) -> Any:
    from uldp.collector.service.core import CoreConfig
    from uldp.collector.service.odometer import CentralBudget
    from uldp.collector.service.server import ServerConfig

    return ServerConfig(
        db_url=a.db, tls_cert=files.cert, tls_key=files.key, host=a.host, port=a.port,
        tls_client_ca=files.client_ca, admin_token_file=files.admin,
        token_key_file=files.token_key, enrollment_secret_file=files.secret,
        max_message_bytes=a.max_message_bytes, workers=a.workers, name=a.name,
        mode=a.server_mode, shuffler_port=a.shuffler_port,
        shuffler_ca=Path(a.shuffler_ca) if a.shuffler_ca else None,
        shuffler_name=a.shuffler_name, connections=connections,
        grpc_front=getattr(a, "grpc_front", "on") == "on",
        grpc_front_relay=getattr(a, "grpc_front_relay", "threads"),
        core=CoreConfig(default_phase_timeout_s=a.phase_timeout, token_ttl_s=a.token_ttl,
                        commit_linger_ms=a.commit_linger_ms,
                        allow_simulated=a.allow_simulated,
                        enroll_peer_limit=a.enroll_peer_limit,
                        enroll_credential_limit=("auto" if a.enroll_credential_limit is None
                                                 else a.enroll_credential_limit),
                        enrolment_verifier=_verifier(files.attestation_key),
                        close_threads=a.close_threads, dask_scheduler=a.dask_scheduler,
                        central_budget=CentralBudget(a.central_budget or None,
                                                     a.central_delta)))


def _verifier(path: Path | None) -> Any:
    """The reference attestation verifier over the key in ``path`` (OperatorError naming
    the flag when the file is not a key)."""
    if path is None:
        return None
    from uldp.collector.security.attestation import HmacAttestation

    try:
        return HmacAttestation.from_file(path)
    except ValueError as exc:
        raise OperatorError(f"--attestation-key-file {exc}") from None


def rate_limit(text: str) -> Any:
    """argparse type of ``--enroll-*-limit``: N/T (``25000/250s``, ``3/1d``) or ``off``."""
    from uldp.collector.service.enrolment import RateLimit

    try:
        return RateLimit.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _start_siblings(a: argparse.Namespace, cfg: Any) -> list[subprocess.Popen[bytes]]:
    """``--processes N``: N-1 more processes share the port (SO_REUSEPORT) and the
    database, like replicas."""
    children: list[subprocess.Popen[bytes]] = []
    if a.processes > 1:
        if cfg.port == 0:
            with socket.socket() as s_:
                s_.bind((a.host, 0))
                cfg.port = s_.getsockname()[1]
        cfg.reuse_port = True
        argv = [x for x in sys.argv[1:]]
        base = [sys.executable, "-m", "uldp.collector.cli.service", "collector", "serve"]
        rest = argv[argv.index("serve") + 1:] if "serve" in argv else []
        rest = _strip_flags(rest, ("--processes", "--port", "--port-file", "--ready-file",
                                   "--name", "--http-port"))
        for k in range(1, a.processes):
            children.append(subprocess.Popen(
                [*base, *rest, "--processes", "1", "--reuse-port", "--port", str(cfg.port),
                 *(["--http-port", str(a.http_port)] if a.http_port is not None else []),
                 "--name", f"{a.name or 'collector'}-{k}"]))
    if a.reuse_port:
        cfg.reuse_port = True
    return children


def _cmd_serve(a: argparse.Namespace) -> int:
    from uldp.collector.observe.logs import configure_logging
    from uldp.collector.security.files import private_umask, restrict_sqlite_files, sqlite_path
    from uldp.collector.service.server import CollectorServer

    # 1. validate everything before anything is written (database, admin token, files)
    if not 0.0 <= a.commit_linger_ms <= 100.0:
        raise OperatorError(f"--commit-linger-ms must be between 0 and 100, got "
                            f"{a.commit_linger_ms:g}")
    level = _log_level(a)
    files = _check_files(a)
    _check_dev_example(a, files)
    _check_db_location(a.db)
    cors = cors_origins(a)
    proxies = trusted_proxies(a)
    plan, http_limits = connection_limits(a, http=a.http_port is not None)
    if not a.reuse_port:
        _check_port_free(a.host, a.port)
        if a.http_port is not None:
            if a.http_port == a.port and a.port != 0:
                raise OperatorError(f"--http-port {a.http_port}: the same port as --port; "
                                    "give the HTTP port its own number")
            _check_port_free(a.host, a.http_port, "--http-port")

    # 2. owner-only files from here on (database, -wal/-shm, generated admin token)
    private_umask()
    db_file = sqlite_path(a.db)
    if db_file is not None:
        restrict_sqlite_files(db_file)
    configure_logging(level, a.log_format, replica=a.name)
    cfg = _server_config(a, files, plan)
    children = _start_siblings(a, cfg)
    try:
        srv = _open_server(CollectorServer, cfg)
        front = _http_front(a, srv, files, cors, (http_limits, proxies))
    except BaseException:
        _stop_children(children)
        raise
    return _serve_until_signal(a, srv, children, front)


def _http_front(a: argparse.Namespace, srv: Any, files: _Files,
                cors: frozenset[str], guard: tuple[Any, tuple[str, ...]]) -> Any:
    """The HTTP port (Connect, gRPC-Web, /healthz) over the server's core, or None
    (``guard``: its connection limits and trusted proxies)."""
    if a.http_port is None:
        return None
    from uldp.collector.http import HttpConfig, attach_front

    try:
        return attach_front(srv.core, srv.executor, HttpConfig(
            files.cert, files.key, host=a.host, port=a.http_port,
            tls_client_ca=files.client_ca, cors_origins=cors,
            max_message_bytes=a.max_message_bytes,
            reuse_port=a.reuse_port or a.processes > 1,
            metrics_token_file=files.metrics_token, limits=guard[0],
            trusted_proxies=guard[1],
            dev_example=Path(a.dev_example) if a.dev_example else None))
    except OSError as exc:
        srv.stop()
        raise OperatorError(f"--http-port {a.http_port}: cannot listen on "
                            f"{a.host}:{a.http_port}: {exc.strerror or exc}") from None


def _serve_until_signal(a: argparse.Namespace, srv: Any,
                        children: list[subprocess.Popen[bytes]], front: Any = None) -> int:
    try:
        srv.start()
        if front is not None:
            front.start()
        if a.port_file:
            atomic_write(a.port_file, str(srv.port))
        with ready_file(a.ready_file, f"{a.host}:{srv.port}\n"):
            print(f"uldp collector {srv.core.name} listening on {a.host}:{srv.port}"
                  + (f", HTTP (Connect, gRPC-Web) on {a.host}:{front.port}" if front else "")
                  + (f" ({a.processes} processes)" if a.processes > 1 else ""), flush=True)
            wait_for_signal(f"collector {srv.core.name}")
    finally:
        if front is not None:
            front.stop()
        srv.stop()
        _stop_children(children)
    return 0


def _open_server(factory: Any, cfg: Any) -> Any:
    """``factory(cfg)`` with the database and listening errors as one operator line."""
    from sqlalchemy.exc import SQLAlchemyError

    from uldp.collector.cli.util import redact_url

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


def add_serve_parser(sc: Any) -> None:
    """``uldp collector serve`` and its flags."""
    s = sc.add_parser("serve", help="serve the device and analyst gRPC services (TLS)",
                      description="Serve the collector until SIGTERM/SIGINT (graceful stop). "
                      "Every flag is checked before anything is written; files the collector "
                      "creates (SQLite database and its -wal/-shm, a generated admin token) "
                      "are owner-only (umask 0077).")
    s.add_argument("--db", default=env("ULDP_DB", "uldp-collector.db"),
                   help="SQLite file path or SQLAlchemy URL, e.g. "
                        "postgresql://uldp@db:5432/uldp (env ULDP_DB; default "
                        "uldp-collector.db in the working directory)")
    s.add_argument("--host", default=env("ULDP_HOST", "127.0.0.1"),
                   help="address to listen on (env ULDP_HOST; default 127.0.0.1, "
                        "0.0.0.0 = every interface)")
    s.add_argument("--port", type=port_number,
                   default=int(env("ULDP_PORT", "50051") or 50051),
                   help="TCP port (env ULDP_PORT; default 50051; 0 = any free port, see "
                        "--port-file)")
    s.add_argument("--port-file", help="write the bound port to this file once listening")
    s.add_argument("--ready-file",
                   help="write HOST:PORT to this file once the server answers (removed on "
                        "stop); scripts wait for it, or use `uldp collector wait`")
    s.add_argument("--tls-dir", default=env("ULDP_TLS_DIR"),
                   help="directory with server.pem/server.key (and admin.token, "
                        "token-signing.key) as written by `uldp collector certs` "
                        "(env ULDP_TLS_DIR)")
    s.add_argument("--tls-cert", help="server certificate (overrides --tls-dir)")
    s.add_argument("--tls-key", help="server key (overrides --tls-dir)")
    s.add_argument("--tls-client-ca", default=env("ULDP_TLS_CLIENT_CA"),
                   help="require client certificates signed by this CA (mutual TLS; env "
                        "ULDP_TLS_CLIENT_CA)")
    s.add_argument("--http-port", type=port_number,
                   default=env("ULDP_HTTP_PORT") or None,
                   help="also serve the Device and Analyst services over Connect and gRPC-Web "
                        "(browsers, React Native), GET /healthz, GET /metrics (Prometheus) and "
                        "the analyst console (/console/) on this TCP port, TLS with the same "
                        "certificate (env ULDP_HTTP_PORT; default: off)")
    s.add_argument("--cors-origin", action="append",
                   default=[o for o in (env("ULDP_CORS_ORIGINS") or "").split(",") if o],
                   help="a web origin (scheme://host[:port]) whose pages may call the HTTP "
                        "port; repeat for more; * allows every origin (env "
                        "ULDP_CORS_ORIGINS, comma-separated; default: none)")
    s.add_argument("--dev-example", metavar="DIR", default=None,
                   help="development mode: also serve the built example web page from DIR "
                        "(examples/web/dist, from client-ts/scripts/build-example.mjs) at "
                        "/example/ on the HTTP port — same origin, one CA; open "
                        "https://127.0.0.1:PORT/example/?autostart=1. Refused unless --host "
                        "is loopback and the certificate is from `uldp collector certs` "
                        "(default: off)")
    add_connection_flags(s)
    _front_flags(s)
    _tuning_flags(s)
    _close_flags(s)
    _odometer_flags(s)
    s.set_defaults(func=_cmd_serve)


def _enrolment_flags(s: argparse.ArgumentParser) -> None:
    """The flags against Sybil enrolment (docs/privacy.md, "Sybil identities")."""
    from uldp.collector.service.enrolment import DEFAULT_PEER_LIMIT

    s.add_argument("--attestation-key-file", default=env("ULDP_ATTESTATION_KEY_FILE"),
                   help="enrol a new device only with an app attestation signed with the "
                        "key in this file (HMAC-SHA256, shared with the app's back end; "
                        "`uldp collector attestation-key` writes one; env "
                        "ULDP_ATTESTATION_KEY_FILE)")
    s.add_argument("--enroll-peer-limit", type=rate_limit, default=DEFAULT_PEER_LIMIT,
                   metavar="N/T",
                   help="enrolments (renewals too) per network address: at most N at once, "
                        f"refilled at N per T, e.g. 3000/1h, or off (default "
                        f"{DEFAULT_PEER_LIMIT}); behind a proxy that hides addresses, "
                        "raise it or turn it off")
    s.add_argument("--enroll-credential-limit", type=rate_limit, default=None,
                   metavar="N/T",
                   help="new identities per credential (the attested subject, else the "
                        "enrollment secret): N/T or off (default 3/1d with "
                        "--attestation-key-file, else 100000/100s)")


def _close_flags(s: argparse.ArgumentParser) -> None:
    """Who reduces a closing phase (``uldp.collector.service.reduce``)."""
    s.add_argument("--close-threads", type=positive_int, default=2,
                   help="windows of a closing phase reduced at once in this process "
                        "(default 2)")
    s.add_argument("--dask-scheduler", default=env("ULDP_DASK_SCHEDULER"),
                   help="reduce closing phases on the workers of this Dask scheduler "
                        "(tcp://host:8786; needs uldp[scale]; env ULDP_DASK_SCHEDULER) "
                        "instead of in this process")
def _odometer_flags(s: argparse.ArgumentParser) -> None:
    """Shuffle mode's privacy odometer (docs/privacy.md §7.2)."""
    from uldp.collector.service.odometer import DEFAULT_BUDGET, DEFAULT_DELTA

    s.add_argument("--central-budget", type=nonneg_float, default=DEFAULT_BUDGET,
                   help="shuffle mode: the central ε each dataset's shuffled queries may "
                        f"compose to (PLD accountant, at --central-delta); a query that would "
                        f"exceed it is refused at create (default {DEFAULT_BUDGET:g}; 0: "
                        "count only, refuse nothing)")
    s.add_argument("--central-delta", type=open_unit_float, default=DEFAULT_DELTA,
                   help=f"shuffle mode: the δ of the central budget (default {DEFAULT_DELTA:g})")


def _front_flags(s: argparse.ArgumentParser) -> None:  # uldp.collector.service.grpc_front
    s.add_argument("--grpc-front", choices=("on", "off"),
                   default=env("ULDP_GRPC_FRONT", "on") or "on",
                   help="admission in front of the native gRPC port: slow TLS handshakes "
                        "evicted for new ones, per-address caps (docs/operations.md, "
                        "'Connections and descriptors'); off: grpc-core listens on the port "
                        "itself (env ULDP_GRPC_FRONT; default on)")
    s.add_argument("--grpc-front-relay", choices=("threads", "loop"),
                   default=env("ULDP_GRPC_FRONT_RELAY", "threads") or "threads",
                   help="how the front copies a connection past its handshake: two "
                        "threads of its own, or the front's event loop (env "
                        "ULDP_GRPC_FRONT_RELAY; default threads: least CPU per report)")


def _tuning_flags(s: argparse.ArgumentParser) -> None:
    s.add_argument("--admin-token-file", default=env("ULDP_ADMIN_TOKEN_FILE"),
                   help="admin credential file (default <tls-dir>/admin.token; created "
                        "0600 if missing; env ULDP_ADMIN_TOKEN_FILE)")
    s.add_argument("--token-key-file", default=env("ULDP_TOKEN_KEY_FILE"),
                   help="Ed25519 PEM key signing device tokens, shared by replicas "
                        "(default <tls-dir>/token-signing.key, else a key kept in the "
                        "database, which is then owner-only; env ULDP_TOKEN_KEY_FILE)")
    s.add_argument("--enrollment-secret-file", default=env("ULDP_ENROLLMENT_SECRET_FILE"),
                   help="require the shared secret in this file to enroll devices (env "
                        "ULDP_ENROLLMENT_SECRET_FILE)")
    _enrolment_flags(s)
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
    s.add_argument("--commit-linger-ms", type=nonneg_float, default=20.0,
                   help="group commit: when few reports are queued, wait at most this long "
                        "(ms, 0-100; default 20) for more before committing; the window follows "
                        "the arrival rate, shrinks for a lone caller (fewer, larger transactions)")
    s.add_argument("--name", default=env("ULDP_NAME"),
                   help="replica name in logs and the phase-closing lease (env ULDP_NAME; "
                        "Kubernetes sets it to the pod name; default a random name)")
    s.add_argument("--allow-simulated", action="store_true",
                   help="accept reports marked simulated (seeded noise: fleets, demos, "
                        "tests) for every query; never on a production collector")
    s.add_argument("--shuffler-port", type=port_number, default=env("ULDP_SHUFFLER_PORT"),
                   help="shuffle mode: serve ShuffleIntakeService on this port (mutual TLS; "
                        "0 = any free port, see the log line; env ULDP_SHUFFLER_PORT)")
    s.add_argument("--shuffler-ca", default=env("ULDP_SHUFFLER_CA"),
                   help="shuffle mode: the CA of the shuffler's client certificate (env "
                        "ULDP_SHUFFLER_CA)")
    s.add_argument("--shuffler-name", default=env("ULDP_SHUFFLER_NAME", "uldp-shuffler"),
                   help="shuffle mode: the common name the shuffler's client certificate "
                        "must carry (default uldp-shuffler; env ULDP_SHUFFLER_NAME)")
    s.add_argument("--log-level", default="info",
                   help="debug, info (default), warning or error")
    s.add_argument("--log-format", choices=("plain", "json"),
                   default=env("ULDP_LOG_FORMAT", "plain"),
                   help="plain lines (default) or one JSON object per line with an access "
                        "record per call: call, status code, latency (env ULDP_LOG_FORMAT)")
    s.add_argument("--metrics-token-file", default=env("ULDP_METRICS_TOKEN_FILE"),
                   help="token a Prometheus scraper presents at GET /metrics on the HTTP "
                        "port (the admin token works too and also sees per-query series; "
                        "env ULDP_METRICS_TOKEN_FILE)")
