"""What the service commands share: connection flags, endpoints, output helpers.

Connection flags of the client commands fall back to environment variables:
``ULDP_TARGET`` (host:port), ``ULDP_CA`` (CA certificate), ``ULDP_ADMIN_TOKEN_FILE``,
``ULDP_CLIENT_CERT`` / ``ULDP_CLIENT_KEY`` (mutual TLS), ``ULDP_SERVER_NAME``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from uldp.collector.cliutil import OperatorError, describe_rpc_error, quiet_grpc_logs

quiet_grpc_logs()  # before gRPC's C core starts: no C-core log lines on the terminal

import grpc  # noqa: E402

from uldp.client.wire import common_pb2  # noqa: E402

__all__ = ["PSTATE", "STATE", "analyst", "conn_endpoint", "conn_flags", "endpoint", "env",
           "fail", "health_check", "preflight", "progress_line", "query_dict",
           "readable_file", "table", "unused_admin_flag"]

STATE = {common_pb2.QUERY_STATE_RUNNING: "running", common_pb2.QUERY_STATE_DONE: "done",
         common_pb2.QUERY_STATE_CANCELLED: "cancelled", common_pb2.QUERY_STATE_FAILED: "failed",
         0: "?"}
PSTATE = {common_pb2.PHASE_STATE_PENDING: "pending", common_pb2.PHASE_STATE_OPEN: "open",
          common_pb2.PHASE_STATE_CLOSING: "closing", common_pb2.PHASE_STATE_CLOSED: "closed",
          0: "?"}


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
    from uldp.collector.service.client import AnalystClient

    ep = conn_endpoint(a)
    readable_file(Path(a.admin_token_file), "--admin-token-file",
                   "`uldp collector certs` writes admin.token next to the CA")
    try:
        return AnalystClient(ep, Path(a.admin_token_file).read_text())
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


def query_dict(q: Any) -> dict[str, Any]:
    return {
        "query_id": q.query_id, "kind": q.kind, "dataset": q.dataset, "epsilon": q.epsilon,
        "state": STATE.get(q.state, "?"), "current_phase": q.current_phase,
        "assigned": q.assigned, "target_users": q.target_users,
        "phases": [{"index": p.index, "state": PSTATE.get(p.state, "?"), "quota": p.quota,
                    "received": p.received, "deadline_ms": p.deadline_ms,
                    "published": json.loads(p.published_json) if p.published_json else None}
                   for p in q.phases],
        "created_at_ms": q.created_at_ms, "finished_at_ms": q.finished_at_ms,
        "spec": json.loads(q.spec_json) if q.spec_json else None, "error": q.error,
        "allow_simulated": q.allow_simulated,
    }


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def progress_line(q: Any) -> str:
    parts = []
    for p in q.phases:
        frac = p.received / p.quota if p.quota else 0.0
        bar = "#" * int(20 * min(frac, 1.0))
        parts.append(f"phase {p.index} {PSTATE.get(p.state, '?'):7s} [{bar:<20}] "
                     f"{p.received}/{p.quota}")
    return f"{q.query_id} {STATE.get(q.state, '?'):9s} assigned {q.assigned}/" \
           f"{q.target_users}  " + "  ".join(parts)


def fail(exc: grpc.RpcError) -> int:
    print(f"uldp: error: {describe_rpc_error(exc)}", file=sys.stderr)
    return 2
