"""``uldp shuffler serve``: the independent shuffler of shuffle mode (``uldp.collector.shuffler``).

Every flag is checked before anything is written (one line naming the flag, exit 2); the
database file is owner-only. Runs until SIGTERM/SIGINT; a ``kill -9`` loses no
acknowledged report (``uldp.collector.shuffler.store``).
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES
from uldp.collector.cli.common import cors_origins, env, readable_file, ready_file, wait_for_signal
from uldp.collector.cli.connections import add_connection_flags, connection_limits, trusted_proxies
from uldp.collector.cli.util import (
    OperatorError,
    nonneg_int,
    port_number,
    positive_float,
    positive_int,
)
from uldp.collector.security.tokens import AdminAuth

__all__ = ["register"]

_FILES = (("tls_cert", "--tls-cert"), ("tls_key", "--tls-key"),
          ("ticket_key_file", "--ticket-key-file"), ("collector_ca", "--collector-ca"),
          ("client_cert", "--client-cert"), ("client_key", "--client-key"))


def _config(a: argparse.Namespace) -> Any:
    from uldp.collector.shuffler.checks import MAX_CHECKERS, default_checkers
    from uldp.collector.shuffler.server import ShufflerServerConfig
    from uldp.collector.shuffler.service import ShufflerConfig

    for attr, flag in _FILES:
        readable_file(Path(getattr(a, attr)), flag)
    attest = Path(a.attestation_key_file) if a.attestation_key_file else None
    readable_file(attest, "--attestation-key-file")
    _check_keys(Path(a.ticket_key_file), attest)
    db = Path(a.db)
    if db.is_dir() or not db.resolve().parent.is_dir():
        raise OperatorError(f"--db {db}: give a file in an existing directory")
    if a.checkers is not None and a.checkers > 16 * MAX_CHECKERS:
        raise OperatorError(f"--checkers {a.checkers}: at most {16 * MAX_CHECKERS} processes")
    from uldp.client.wire import MAX_FORWARD_REPORTS
    if a.max_batch > MAX_FORWARD_REPORTS:
        raise OperatorError(f"--max-batch {a.max_batch}: at most {MAX_FORWARD_REPORTS} "
                            "reports (what the collector takes in one batch)")
    if a.max_batch < a.min_batch:
        raise OperatorError(f"--max-batch {a.max_batch} is below --min-batch {a.min_batch}")
    if a.metrics_token_file:
        readable_file(Path(a.metrics_token_file), "--metrics-token-file")
        if a.http_port is None:
            raise OperatorError("--metrics-token-file needs --http-port (/metrics is served "
                                "on the HTTP port)")
        try:
            AdminAuth.from_file(a.metrics_token_file)
        except ValueError as exc:
            raise OperatorError(f"--metrics-token-file {a.metrics_token_file}: {exc}") from None
    if a.http_port is not None and a.http_port == a.port and a.port != 0:
        raise OperatorError(f"--http-port {a.http_port}: the same port as --port; give the "
                            "HTTP port its own number")
    cors_origins(a)
    trusted_proxies(a)
    if ":" not in a.collector:
        raise OperatorError(f"--collector {a.collector!r}: give host:port of the collector's "
                            "shuffler port")
    return ShufflerServerConfig(
        db_path=db, tls_cert=Path(a.tls_cert), tls_key=Path(a.tls_key),
        ticket_key=Path(a.ticket_key_file), attestation_key=attest, collector=a.collector,
        collector_ca=Path(a.collector_ca), client_cert=Path(a.client_cert),
        client_key=Path(a.client_key), host=a.host, port=a.port,
        max_message_bytes=a.max_message_bytes, collector_server_name=a.collector_server_name,
        shuffle=ShufflerConfig(min_batch=a.min_batch, max_batch=a.max_batch,
                               batch_parts=a.batch_parts,
                               checkers=default_checkers() if a.checkers is None
                               else a.checkers,
                               linger_s=a.linger, deadline_margin_s=a.deadline_margin,
                               max_message_bytes=a.max_message_bytes),
        connections=connection_limits(a, http=a.http_port is not None)[0])


def _check_keys(ticket: Path, attest: Path | None) -> None:
    """The key files: well-formed and not readable by others (one line naming the flag)."""
    from uldp.collector.security.attestation import HmacAttestation
    from uldp.collector.security.files import check_not_world_readable
    from uldp.collector.security.tickets import TicketKey

    for path, flag, load in ((ticket, "--ticket-key-file", TicketKey.from_file),
                             (attest, "--attestation-key-file", HmacAttestation.from_file)):
        if path is None:
            continue
        if why := check_not_world_readable(path, flag):
            raise OperatorError(why)
        try:
            load(path)
        except ValueError as exc:
            raise OperatorError(f"{flag} {exc}") from None


def _http_front(a: argparse.Namespace) -> Any:
    """The bound HTTP port of ``--http-port`` (Connect, gRPC-Web, /healthz), or None."""
    if a.http_port is None:
        return None
    from uldp.collector.http import HttpConfig
    from uldp.collector.http.shuffler import shuffler_front

    proxies = trusted_proxies(a)
    limits = connection_limits(a, http=True)[1]
    try:
        return shuffler_front(HttpConfig(
            Path(a.tls_cert), Path(a.tls_key), host=a.host, port=a.http_port,
            cors_origins=cors_origins(a), max_message_bytes=a.max_message_bytes,
            limits=limits, trusted_proxies=proxies))
    except OSError as exc:
        raise OperatorError(f"--http-port {a.http_port}: cannot listen on "
                            f"{a.host}:{a.http_port}: {exc.strerror or exc}") from None


def _cmd_serve(a: argparse.Namespace) -> int:
    from uldp.collector.shuffler.server import ShufflerServer

    cfg = _config(a)
    logging.basicConfig(level=getattr(logging, a.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from uldp.collector.observe.logs import RateLimit
    for h in logging.getLogger().handlers:
        h.addFilter(RateLimit())
    os.umask(0o077)
    front = _http_front(a)  # both ports before anything is written
    try:
        srv = ShufflerServer(cfg)
    except (OSError, RuntimeError) as exc:
        if front is not None:
            front.stop(0)
        if "shuffler database" in str(exc):
            raise OperatorError(f"--db {a.db}: {exc}") from None
        raise OperatorError(f"--port {a.port}: cannot serve: {exc}") from None
    if front is not None:
        from uldp.collector.http.shuffler import serve_shuffler
        serve_shuffler(front, srv, AdminAuth.from_file(a.metrics_token_file)
                       if a.metrics_token_file else None)
    try:
        srv.start()
        http = ""
        if front is not None:
            front.start()
            http = f", HTTP (Connect, gRPC-Web) on {a.host}:{front.port}"
        with ready_file(a.ready_file, f"{a.host}:{srv.port}\n"):
            print(f"uldp shuffler listening on {a.host}:{srv.port}{http}", flush=True)
            wait_for_signal("shuffler")
    finally:
        if front is not None:
            front.stop()
        srv.stop()
    return 0


def _cmd_certs(a: argparse.Namespace) -> int:
    """A development server certificate and client certificate for a shuffler."""
    from uldp.collector.security.certs import issue_leaf

    readable_file(Path(a.ca_cert), "--ca-cert")
    readable_file(Path(a.ca_key), "--ca-key")
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise OperatorError(f"--out {out} is a file, not a directory")
    if (out / "client.pem").exists() and not a.force:
        raise OperatorError(f"--out {out} already holds shuffler certificates; pass --force")
    hosts = a.host or ["localhost", "127.0.0.1"]
    for p in (*issue_leaf(a.ca_cert, a.ca_key, out, "server", hosts[0], hosts, client=False),
              *issue_leaf(a.ca_cert, a.ca_key, out, "client", a.name, client=True)):
        print(p)
    return 0


def _certs_parser(sc: Any) -> None:
    c = sc.add_parser("certs", help="development certificates for a shuffler",
                      description="Sign, with a development CA (e.g. `uldp collector certs "
                      "--admin-out`'s ca.pem/ca.key), the shuffler's server certificate for "
                      "devices (server.pem/.key) and its client certificate for the "
                      "collector's shuffler port (client.pem/.key, common name --name).")
    c.add_argument("--ca-cert", required=True, help="the CA certificate")
    c.add_argument("--ca-key", required=True, help="the CA's private key")
    c.add_argument("--out", required=True, help="directory to write into (created)")
    c.add_argument("--host", action="append", default=[],
                   help="server DNS name or IP (repeat; default localhost, 127.0.0.1)")
    c.add_argument("--name", default="uldp-shuffler",
                   help="common name of the client certificate (the collector's "
                        "--shuffler-name; default uldp-shuffler)")
    c.add_argument("--force", action="store_true", help="replace existing files")
    c.set_defaults(func=_cmd_certs)


def _key_flags(s: Any) -> None:
    s.add_argument("--metrics-token-file", default=env("ULDP_SHUFFLER_METRICS_TOKEN_FILE"),
                   help="serve GET /metrics (Prometheus, aggregate counts only) on the HTTP "
                        "port to a scraper presenting this token as a bearer token (one line "
                        "of >= 16 characters; env ULDP_SHUFFLER_METRICS_TOKEN_FILE)")
    s.add_argument("--ticket-key-file", required=True,
                   help="the key that checks shuffler tickets, shared with the collector "
                        "(`uldp collector shuffle-ticket-key --out FILE` writes it; 0600)")
    s.add_argument("--attestation-key-file", default=None,
                   help="the shuffler's own enrolment check: admit a report only with an app "
                        "attestation under this key (one line of >= 64 hex digits, shared "
                        "with the app's back end, NOT with the collector). Results count "
                        "towards an amplified central ε only reports from distinct subjects "
                        "it attested; without it they state the local ε0 only")


def _batch_flags(s: Any) -> None:
    """The flags of batching and of the checking processes."""
    s.add_argument("--min-batch", type=positive_int, default=100,
                   help="never forward a batch smaller than this (default 100; 1 is allowed "
                        "but every query sets its own minimum of at least 2, which applies "
                        "when larger); a cell is forwarded before it is complete only once "
                        "it holds twice the minimum (the last batch keeps at least it)")
    s.add_argument("--max-batch", type=positive_int, default=50_000,
                   help="at most this many reports per batch (default 50000; at most "
                        "100000, what the collector takes in one batch)")
    s.add_argument("--batch-parts", type=positive_int, default=1,
                   help="forward a cell in ~this many batches (default 1: one per cell, the "
                   "smallest stated ε; 4: opened while it arrives, ~2× the ε; docs/privacy.md §7)")
    s.add_argument("--checkers", type=nonneg_int, default=None,
                   help="processes that check the tickets and attestations of batch calls "
                        "(default: one per core, at most 4; 0: in the gRPC threads)")
    s.add_argument("--linger", type=positive_float, default=2.0,
                   help="forward a bucket once quiet this many seconds (default 2)")
    s.add_argument("--deadline-margin", type=positive_float, default=5.0,
                   help="forward a bucket this many seconds before its phase's deadline")


def register(subparsers: Any) -> None:
    """Add ``shuffler serve`` and ``shuffler certs`` to the ``uldp`` parser."""
    pc = subparsers.add_parser("shuffler", help="run the shuffler of shuffle mode")
    sc = pc.add_subparsers(dest="sub", required=True)
    _certs_parser(sc)
    s = sc.add_parser(
        "serve", help="serve ShufflerService to devices and forward shuffled batches",
        description="The independent shuffler: admits one sealed report per assigned slot "
                    "(the device's shuffler ticket; never a collector token), optionally "
                    "only from devices that pass its own enrolment check "
                    "(--attestation-key-file), durable before the acknowledgement; drops "
                    "every credential and forwards each (query, phase, group, stage) in "
                    "batches of at least the minimum size, in uniformly random order, to "
                    "the collector's shuffler port over mutual TLS, forgetting which slot "
                    "sent which report once forwarded. It cannot open a report.")
    s.add_argument("--db", default=env("ULDP_SHUFFLER_DB", "uldp-shuffler.db"),
                   help="SQLite file of the shuffler (default uldp-shuffler.db)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on for devices")
    s.add_argument("--port", type=port_number, default=50061,
                   help="TCP port for devices (default 50061; 0 = any free port)")
    s.add_argument("--http-port", type=port_number, default=env("ULDP_SHUFFLER_HTTP_PORT"),
                   help="also serve ShufflerService over Connect and gRPC-Web (browsers, "
                        "React Native) and GET /healthz on this TCP port, TLS with the same "
                        "certificate (env ULDP_SHUFFLER_HTTP_PORT; default: off)")
    s.add_argument("--cors-origin", action="append", default=[],
                   help="a web origin (scheme://host[:port]) whose pages may call the HTTP "
                        "port; repeat for more; * allows every origin (default: none)")
    add_connection_flags(s, "shuffler")
    s.add_argument("--ready-file", help="write HOST:PORT here once serving (removed on stop)")
    s.add_argument("--tls-cert", required=True, help="the shuffler's server certificate")
    s.add_argument("--tls-key", required=True, help="the shuffler's server key")
    _key_flags(s)
    s.add_argument("--collector", required=True,
                   help="host:port of the collector's shuffler port (--shuffler-port)")
    s.add_argument("--collector-ca", required=True,
                   help="CA certificate that signed the collector's certificate")
    s.add_argument("--collector-server-name", help="name to check in the collector's "
                   "certificate (default: the host of --collector)")
    s.add_argument("--client-cert", required=True,
                   help="the shuffler's client certificate for the collector (its common "
                        "name is the collector's --shuffler-name)")
    s.add_argument("--client-key", required=True, help="key of --client-cert")
    _batch_flags(s)
    s.add_argument("--max-message-bytes", type=positive_int, default=DEFAULT_MAX_MESSAGE_BYTES,
                   help=f"largest gRPC message (default {DEFAULT_MAX_MESSAGE_BYTES})")
    s.add_argument("--log-level", default="info", help="debug, info, warning or error")
    s.set_defaults(func=_cmd_serve)
