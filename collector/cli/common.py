"""What the service commands share: connection flags, endpoints, output helpers.

Connection flags of the client commands fall back to environment variables:
``ULDP_TARGET`` (host:port), ``ULDP_CA`` (CA certificate), ``ULDP_ADMIN_TOKEN_FILE``,
``ULDP_CLIENT_CERT`` / ``ULDP_CLIENT_KEY`` (mutual TLS), ``ULDP_SERVER_NAME``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from uldp.collector.cli.util import OperatorError, describe_rpc_error, quiet_grpc_logs

quiet_grpc_logs()  # before gRPC's C core starts: no C-core log lines on the terminal

import grpc  # noqa: E402

__all__ = [
    "analyst",
    "atomic_write",
    "conn_endpoint",
    "conn_flags",
    "cors_origins",
    "endpoint",
    "env",
    "fail",
    "health_check",
    "preflight",
    "progress_line",
    "readable_file",
    "ready_file",
    "table",
    "unused_admin_flag",
    "wait_for_signal",
]


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def conn_flags(p: argparse.ArgumentParser, admin: bool = True) -> None:
    g = p.add_argument_group("connection")
    g.add_argument("--target", default=env("ULDP_TARGET", "127.0.0.1:50051"),
                   help="collector host:port (env ULDP_TARGET)")
    g.add_argument("--ca", default=env("ULDP_CA"), required=env("ULDP_CA") is None,
                   help="CA certificate that signed the collector's (env ULDP_CA)")
    g.add_argument("--server-name", default=env("ULDP_SERVER_NAME"),
                   help="name to check in the collector's certificate when it differs from "
                        "the --target host (env ULDP_SERVER_NAME)")
    g.add_argument("--client-cert", default=env("ULDP_CLIENT_CERT"),
                   help="client certificate for mutual TLS (env ULDP_CLIENT_CERT)")
    g.add_argument("--client-key", default=env("ULDP_CLIENT_KEY"),
                   help="client key for mutual TLS (env ULDP_CLIENT_KEY)")
    if admin:
        g.add_argument("--admin-token-file", default=env("ULDP_ADMIN_TOKEN_FILE"),
                       required=env("ULDP_ADMIN_TOKEN_FILE") is None,
                       help="file holding the admin credential (env ULDP_ADMIN_TOKEN_FILE)")


def unused_admin_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--admin-token-file", default=None,
                   help="accepted and ignored, so one set of connection flags ($A in the "
                        "README) works with every command")


def analyst(a: argparse.Namespace) -> Any:
    """The :class:`uldp.collector.analyst.Analyst` of the connection flags (every file
    checked first, each mistake one line naming its flag)."""
    from uldp.collector.analyst import Analyst

    ep = conn_endpoint(a)
    readable_file(Path(a.admin_token_file), "--admin-token-file",
                   "`uldp collector certs` writes admin.token next to the CA")
    try:
        return Analyst.from_endpoint(ep, Path(a.admin_token_file).read_text())
    except ValueError as exc:
        raise OperatorError(f"--admin-token-file {a.admin_token_file}: {exc}") from None


def endpoint(a: argparse.Namespace) -> Any:
    return conn_endpoint(a)


def conn_endpoint(a: argparse.Namespace, server_name: str | None = None) -> Any:
    """The endpoint of the connection flags, every file checked (a --ca that is not a
    certificate, a key that is not the certificate's: one line naming the flag)."""
    from uldp.client.tls import TLSSetupError, load_credentials
    from uldp.client.transport import Endpoint

    readable_file(Path(a.ca), "--ca")
    readable_file(Path(a.client_cert) if a.client_cert else None, "--client-cert")
    readable_file(Path(a.client_key) if a.client_key else None, "--client-key")
    try:
        load_credentials(Path(a.ca), None, None)
    except TLSSetupError as exc:
        raise OperatorError(f"--ca: {exc}") from None
    try:
        load_credentials(None, Path(a.client_cert) if a.client_cert else None,
                         Path(a.client_key) if a.client_key else None)
    except TLSSetupError as exc:
        raise OperatorError(f"--client-cert/--client-key: {exc}") from None
    return Endpoint(a.target, Path(a.ca), Path(a.client_cert) if a.client_cert else None,
                    Path(a.client_key) if a.client_key else None,
                    server_name=server_name or getattr(a, "server_name", None))


def readable_file(path: Path | None, flag: str, hint: str = "") -> None:
    """OperatorError unless ``path`` is a readable file (named by ``flag``)."""
    if path is None:
        return
    if not path.exists():
        raise OperatorError(f"{flag}: {path} does not exist{'; ' + hint if hint else ''}")
    if path.is_dir():
        raise OperatorError(f"{flag}: {path} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise OperatorError(f"{flag}: {path} is not readable by this user")


def health_check(ep: Any, service: str, timeout: float) -> int:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from uldp.client.transport import secure_channel
    with secure_channel(ep) as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    return int(r.status)


def preflight(ep: Any, target: str, timeout: float = 10.0) -> None:
    """OperatorError unless a collector answers at ``target`` (fail fast, before any
    device state is written)."""
    from grpc_health.v1 import health_pb2

    try:
        status = health_check(ep, "", timeout)
    except grpc.RpcError as exc:
        raise OperatorError(describe_rpc_error(exc)) from None
    if status != health_pb2.HealthCheckResponse.SERVING:
        raise OperatorError(f"the collector at --target {target} is not serving "
                            f"({health_pb2.HealthCheckResponse.ServingStatus.Name(status)})")


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def progress_line(q: Any) -> str:
    """One line of a query's progress (a :class:`uldp.collector.analyst.Query`)."""
    parts = []
    for p in q.phases:
        bar = "#" * int(20 * p.fraction)
        declined = f" (+{p.declined} declined)" if getattr(p, "declined", 0) else ""
        parts.append(f"phase {p.index} {p.state:7s} [{bar:<20}] {p.received}/{p.quota}"
                     f"{declined}")
    return f"{q.query_id} {q.state:9s} assigned {q.assigned}/" \
           f"{q.target_users}  " + "  ".join(parts)


def fail(exc: Any) -> int:
    """Print one line for a failed call (a ``grpc.RpcError`` or an ``AnalystError``)."""
    rpc = getattr(exc, "rpc", exc)
    text = describe_rpc_error(rpc) if rpc is not None else f"{exc.code}: {exc.message}"
    print(f"uldp: error: {text}", file=sys.stderr)
    return 2


def cors_origins(a: argparse.Namespace) -> frozenset[str]:
    """``--cors-origin`` values, each ``scheme://host[:port]`` or ``*`` (they need
    ``--http-port``)."""
    import re

    out = set()
    for o in a.cors_origin or ():
        o = o.strip().rstrip("/")
        if o != "*" and not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", o):
            raise OperatorError(f"--cors-origin {o!r}: give an origin as a browser sends it, "
                                "scheme://host[:port] (e.g. https://app.example.com), or *")
        out.add(o)
    if out and a.http_port is None:
        raise OperatorError("--cors-origin needs --http-port (CORS applies to the HTTP port)")
    return frozenset(out)


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` in one step (a reader sees the old file or the new one)."""
    tmp = Path(path + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def ready_file(path: str | None, text: str) -> Iterator[None]:
    """``path`` (if given) holds ``text`` while the block runs: a server's "I answer now"
    file, which scripts wait for; removed when the server stops."""
    if path:
        atomic_write(path, text)
    try:
        yield
    finally:
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)


def wait_for_signal(what: str) -> None:
    """Block until SIGTERM or SIGINT (``what``: the server, as the log line names it)."""
    done = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("uldp.collector").info("%s: signal %d: shutting down", what, signum)
        done.set()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    done.wait()
