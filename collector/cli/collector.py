"""``uldp collector serve|certs|health|wait|attestation-key|attest``: the collector
process, its probes, and the app attestation key (docs/privacy.md, "Sybil identities")."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from uldp.collector.cli.common import (
    conn_endpoint,
    conn_flags,
    env,
    health_check,
    readable_file,
    unused_admin_flag,
)
from uldp.collector.cli.serve import add_serve_parser
from uldp.collector.cli.util import OperatorError, positive_float, positive_int

__all__ = ["register"]


def _cmd_certs(a: argparse.Namespace) -> int:
    from uldp.collector.security.certs import admin_directory_for, existing_pki, make_dev_pki
    from uldp.collector.security.files import write_private
    from uldp.collector.security.tokens import TokenKey, new_admin_token

    out = Path(a.out)
    adm = Path(a.admin_out) if a.admin_out else admin_directory_for(out)
    for d, flag in ((out, "--out"), (adm, "--admin-out")):
        if d.exists() and not d.is_dir():
            raise OperatorError(f"{flag} {d} is a file, not a directory")
        found = existing_pki(d)
        if found and not a.force:
            raise OperatorError(f"{flag} {d} already holds a CA ({found.name}); pass --force "
                                f"to replace every file in it, or pick another {flag}")
    if out.resolve() == adm.resolve() or adm.resolve().is_relative_to(out.resolve()):
        raise OperatorError(f"--admin-out {adm} must lie outside --out {out}: --out is what "
                            "every collector gets, the CA key must not be in it")
    if not 1 <= a.days <= 36500:
        raise OperatorError(f"--days must be between 1 and 36500, got {a.days}")
    pki = make_dev_pki(out, a.host or None, days=a.days, overwrite=a.force,
                       admin_directory=adm)
    token = (new_admin_token() + "\n").encode()
    admins = [d / "admin.token" for d in (pki.directory, pki.admin_directory)]
    if not admins[0].exists() or a.force:
        write_private(admins[0], token)
    if not admins[1].exists() or a.force:
        write_private(admins[1], admins[0].read_bytes())
    signing = pki.directory / "token-signing.key"
    if not signing.exists() or a.force:
        write_private(signing, TokenKey.generate().private_pem())
    for p in (pki.ca_key, pki.server_key, pki.client_key, *admins, signing):
        p.chmod(0o600)  # also when an older run left them wider
    print(f"# server: give it to every collector (--tls-dir {pki.directory})")
    for p in (pki.server_cert, pki.server_key, pki.ca_cert, admins[0], signing):
        print(p)
    print(f"# admin: keep it off the servers (CA key, client credentials) in "
          f"{pki.admin_directory}")
    for p in (pki.admin_directory / "ca.pem", pki.ca_key, pki.client_cert, pki.client_key,
              admins[1]):
        print(p)
    return 0


def _cmd_attestation_key(a: argparse.Namespace) -> int:
    from uldp.collector.security.attestation import new_attestation_key
    from uldp.collector.security.files import write_private

    out = Path(a.out)
    if not out.parent.is_dir():
        raise OperatorError(f"--out {out}: directory {out.parent} does not exist")
    if out.exists() and not a.force:
        raise OperatorError(f"--out {out}: exists; give --force to replace the key (every "
                            "attestation issued with the old one stops working)")
    write_private(out, (new_attestation_key() + "\n").encode())
    print(f"wrote an attestation key to {out} (give it to the collectors as "
          "--attestation-key-file and to the app's back end; keep it secret)")
    return 0


def _cmd_attest(a: argparse.Namespace) -> int:
    from uldp.collector.security.attestation import HmacAttestation

    try:
        att = HmacAttestation.from_file(a.key_file).issue(a.subject, a.ttl)
    except OSError as exc:
        raise OperatorError(f"--key-file {a.key_file}: {exc.strerror}") from None
    except ValueError as exc:
        raise OperatorError(f"--key-file/--subject: {exc}") from None
    print(att)
    return 0


def _attestation_parsers(sc: Any) -> None:
    s = sc.add_parser("attestation-key", help="write a key for app attestations",
                      description="Write a fresh HMAC key (0600) that the app's back end "
                      "signs enrolment attestations with and collectors started with "
                      "--attestation-key-file verify (docs/privacy.md).")
    s.add_argument("--out", required=True, help="the key file to write")
    s.add_argument("--force", action="store_true", help="replace an existing key")
    s.set_defaults(func=_cmd_attestation_key)
    s = sc.add_parser("attest", help="issue an app attestation (what the app's back end "
                      "does)", description="Print an attestation for --subject signed with "
                      "the key in --key-file (format: proto/uldp/v1/device.proto, "
                      "EnrollRequest.attestation).")
    s.add_argument("--key-file", required=True, help="the attestation key")
    s.add_argument("--subject", required=True,
                   help="the app user or install vouched for (1..128 characters)")
    s.add_argument("--ttl", type=positive_float, default=600.0,
                   help="seconds the attestation stays valid (default 600, at most 86400)")
    s.set_defaults(func=_cmd_attest)


def _cmd_health(a: argparse.Namespace) -> int:
    """Exit 0 iff the collector answers grpc.health.v1 Check with SERVING (TLS)."""
    from grpc_health.v1 import health_pb2

    from uldp.collector.cli.util import describe_rpc_error
    ep = conn_endpoint(a)
    try:
        status = health_check(ep, a.service, a.timeout)
    except grpc.RpcError as exc:
        print(f"unhealthy: {describe_rpc_error(exc)}", file=sys.stderr)
        return 1
    print(health_pb2.HealthCheckResponse.ServingStatus.Name(status))
    return 0 if status == health_pb2.HealthCheckResponse.SERVING else 1


def _cmd_wait(a: argparse.Namespace) -> int:
    """Poll the health check until SERVING (exit 0) or --timeout (exit 1)."""
    from grpc_health.v1 import health_pb2

    from uldp.collector.cli.util import describe_rpc_error
    ep = conn_endpoint(a)
    end = time.monotonic() + a.timeout
    last = "no answer yet"
    while True:
        left = end - time.monotonic()
        try:
            status = health_check(ep, "", max(0.2, min(left, 5.0)))
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


def _cmd_token_public_key(a: argparse.Namespace) -> int:
    """Print the device-token verification key (PEM), for a party that checks tokens."""
    from uldp.collector.security.tokens import TokenKey

    if a.token_key_file:
        readable_file(Path(a.token_key_file), "--token-key-file")
        key = TokenKey.from_file(a.token_key_file)
    else:
        from uldp.collector.service.server import load_token_key
        from uldp.collector.storage.db import open_database

        db = open_database(a.db)
        try:
            key = load_token_key(db, None)
        finally:
            db.dispose()
    sys.stdout.write(key.public_pem().decode())
    return 0


def _cmd_shuffle_ticket_key(a: argparse.Namespace) -> int:
    """Write the shuffler-ticket key (shared with the shuffler) to ``--out``, 0600."""
    from uldp.collector.security.files import write_private
    from uldp.collector.security.tickets import TicketKey
    from uldp.collector.service.tasks import TICKET_KEY_META
    from uldp.collector.storage.db import open_database

    out = Path(a.out)
    if out.is_dir() or not out.resolve().parent.is_dir():
        raise OperatorError(f"--out {out}: give a file in an existing directory")
    if out.exists() and not a.force:
        raise OperatorError(f"--out {out} exists; pass --force to replace it")
    db = open_database(a.db)
    try:
        text = db.get_or_create_meta(TICKET_KEY_META, lambda: TicketKey.generate().to_text())
    finally:
        db.dispose()
    write_private(out, (text + "\n").encode())
    print(f"{out} (key id {TicketKey.from_text(text).key_id})")
    return 0


def _ticket_key_parser(sc: Any) -> None:
    s = sc.add_parser("shuffle-ticket-key", help="write the shuffler-ticket key for a "
                      "shuffler (shuffle mode)", description="Write the secret key with "
                      "which this collector issues shuffler tickets (Task.shuffle_ticket) to "
                      "--out (0600), for `uldp shuffler serve --ticket-key-file`: the "
                      "shuffler admits a sealed report only with a ticket of that key. The "
                      "key lives in the collector's database (made on first use); replicas "
                      "sharing the database share it.")
    s.add_argument("--db", default=env("ULDP_DB", "uldp-collector.db"),
                   help="the collector's database")
    s.add_argument("--out", required=True, help="file to write (created 0600)")
    s.add_argument("--force", action="store_true", help="replace an existing file")
    s.set_defaults(func=_cmd_shuffle_ticket_key)


def register(subparsers: Any) -> None:
    """Add ``collector`` to the ``uldp`` parser."""
    pc = subparsers.add_parser("collector", help="run the collector service")
    sc = pc.add_subparsers(dest="collector_cmd", required=True)
    add_serve_parser(sc)
    s = sc.add_parser("certs", help="write a development CA, server and client certificates",
                      description="Write what a collector needs into --out (server "
                      "certificate and key, the CA certificate, an admin token and a "
                      "token-signing key: give this directory to every collector as "
                      "--tls-dir) and what only the operator keeps into --admin-out (the "
                      "CA key, a client certificate and key, the CA certificate and the "
                      "admin token). Keys and tokens are 0600; missing parent directories "
                      "are created. Refuses to touch an existing CA without --force.")
    s.add_argument("--out", required=True,
                   help="the server's directory (created with its parents; must not hold a "
                        "CA unless --force)")
    s.add_argument("--admin-out", default=None,
                   help="the operator's directory: CA key, client credentials, admin token "
                        "(default: OUT-admin beside --out; never ship it to a server)")
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
    conn_flags(s, admin=False)
    s.add_argument("--service", default="", help="service name ('' = whole server)")
    s.add_argument("--timeout", type=positive_float, default=3.0,
                   help="seconds to wait for the answer (default 3)")
    unused_admin_flag(s)
    s.set_defaults(func=_cmd_health)
    s = sc.add_parser("wait", help="wait until a collector serves (for scripts)",
                      description="Poll the collector's health check until it is SERVING "
                      "(exit 0) or --timeout passes (exit 1). A wrong --ca fails at once "
                      "(exit 2).")
    conn_flags(s, admin=False)
    s.add_argument("--timeout", type=positive_float, default=30.0,
                   help="seconds to wait at most (default 30)")
    s.add_argument("--quiet", action="store_true", help="print nothing when it is up")
    unused_admin_flag(s)
    s.set_defaults(func=_cmd_wait)
    s = sc.add_parser("token-public-key", help="print the device-token verification key "
                      "(PEM)", description="Print the Ed25519 public key that verifies "
                      "device tokens: a party holding it can check a token (an audit, a "
                      "gateway), never issue one. A shuffler needs no token key: devices show "
                      "it shuffler tickets (`uldp collector shuffle-ticket-key`).")
    s.add_argument("--token-key-file", help="the collector's token signing key (PEM)")
    s.add_argument("--db", default=env("ULDP_DB", "uldp-collector.db"),
                   help="the collector's database (its key, when there is no key file)")
    s.set_defaults(func=_cmd_token_public_key)
    _ticket_key_parser(sc)
    _attestation_parsers(sc)
