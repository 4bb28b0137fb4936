"""Starting a shuffle-mode deployment on one machine: the PKI, a shuffler process.

Used by ``uldp demo --shuffle``, the end-to-end tests and ``bench/shuffle_throughput.py``.
:func:`make_shuffle_pki` writes a development PKI for both parties: the collector's server
directory (with its token signing key), the shuffler's own server certificate plus the
client certificate (common name ``uldp-shuffler``) the collector's shuffler port accepts,
the shuffler-ticket key the two share (:func:`seed_ticket_key` puts it into the
collector's database before it starts), and the shuffler's attestation key (its own
enrolment check; in a deployment the app's back end holds it with the shuffler, never the
collector). In a real deployment the two parties hold separate PKIs; what crosses is the
collector's CA certificate and the ticket key to the shuffler, the shuffler's CA to the
collector.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from uldp.client.transport import Endpoint, secure_channel
from uldp.collector.security.attestation import new_attestation_key
from uldp.collector.security.certs import DevPki, issue_leaf, make_dev_pki
from uldp.collector.security.files import write_private
from uldp.collector.security.tickets import TicketKey
from uldp.collector.security.tokens import TokenKey, new_admin_token

__all__ = ["SHUFFLER_NAME", "ShufflePki", "free_port", "make_shuffle_pki", "seed_ticket_key",
           "start_shuffler_process", "wait_serving"]

SHUFFLER_NAME = "uldp-shuffler"


@dataclass(frozen=True)
class ShufflePki:
    pki: DevPki  # the collector's (server directory = its --tls-dir)
    token_key: Path  # the collector's token signing key (private; never the shuffler's)
    shuffler_cert: Path  # the shuffler's server certificate (devices verify it)
    shuffler_key: Path
    client_cert: Path  # the shuffler's identity on the collector's shuffler port
    client_key: Path
    ticket_key: Path  # the shuffler-ticket key the collector and the shuffler share
    attestation_key: Path  # the shuffler's enrolment check (the app back end's key)

    def attestation_hex(self) -> str:
        """The shuffler's attestation key as the fleets take it."""
        return self.attestation_key.read_text().strip()

    @property
    def ca(self) -> Path:
        return self.pki.ca_cert


def make_shuffle_pki(work: Path) -> ShufflePki:
    """The dev PKI of a collector and its shuffler under ``work`` (module docstring)."""
    tls = work / "pki"
    pki = make_dev_pki(tls, ["localhost", "127.0.0.1"], admin_directory=work / "pki-admin")
    write_private(tls / "admin.token", (new_admin_token() + "\n").encode())
    key = TokenKey.generate()
    write_private(tls / "token-signing.key", key.private_pem())
    sdir = work / "shuffler-pki"
    cert, skey = issue_leaf(pki.ca_cert, pki.ca_key, sdir, "server", "localhost",
                            ["localhost", "127.0.0.1"], client=False)
    ccert, ckey = issue_leaf(pki.ca_cert, pki.ca_key, sdir, "client", SHUFFLER_NAME,
                             client=True)
    write_private(sdir / "ticket.key", (TicketKey.generate().to_text() + "\n").encode())
    write_private(sdir / "attestation.key", (new_attestation_key() + "\n").encode())
    return ShufflePki(pki, tls / "token-signing.key", cert, skey, ccert, ckey,
                      sdir / "ticket.key", sdir / "attestation.key")


def seed_ticket_key(db_url: str, sp: ShufflePki) -> None:
    """Store ``sp``'s ticket key as the collector's (in its database, before it starts),
    as ``uldp collector shuffle-ticket-key`` would have handed the collector's to the
    shuffler."""
    from uldp.collector.service.tasks import TICKET_KEY_META
    from uldp.collector.storage.db import open_database

    text = TicketKey.from_file(sp.ticket_key).to_text()
    db = open_database(db_url)
    try:
        if db.get_or_create_meta(TICKET_KEY_META, lambda: text) != text:
            raise RuntimeError(f"the collector database {db_url} holds another ticket key")
    finally:
        db.dispose()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_shuffler_process(work: Path, sp: ShufflePki, collector_intake: str, *,
                           db: Path | None = None, extra: list[str] | None = None,
                           env: dict[str, str] | None = None, timeout_s: float = 120.0,
                           attest: bool = True) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``uldp shuffler serve`` on 127.0.0.1 (free port) forwarding to the
    collector's shuffler port ``collector_intake``; wait until it serves. ``attest``:
    with its enrolment check (``--attestation-key-file``)."""
    ready = work / f"shuffler-{os.getpid()}-{time.monotonic_ns()}.ready"
    log = open(work / "shuffler.log", "ab")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "uldp.collector.cli.service", "shuffler", "serve",
         "--db", str(db or work / "shuffler.db"), "--port", "0", "--ready-file", str(ready),
         "--tls-cert", str(sp.shuffler_cert), "--tls-key", str(sp.shuffler_key),
         "--ticket-key-file", str(sp.ticket_key), "--collector", collector_intake,
         *(["--attestation-key-file", str(sp.attestation_key)] if attest else []),
         "--collector-ca", str(sp.ca), "--client-cert", str(sp.client_cert),
         "--client-key", str(sp.client_key),
         "--log-level", os.environ.get("ULDP_LOG_LEVEL", "warning"), *(extra or [])],
        stdout=log, stderr=subprocess.STDOUT,
        env={"PYTHONFAULTHANDLER": "1", **os.environ, **(env or {})})
    log.close()
    return proc, wait_serving(proc, ready, work / "shuffler.log", sp.ca, "shuffler", timeout_s)


def wait_serving(proc: subprocess.Popen[bytes], ready: Path, log: Path, ca: Path, what: str,
                 timeout_s: float) -> int:
    """The port of a server process once its ready file exists and its health check says
    SERVING (RuntimeError if it exits first, TimeoutError after ``timeout_s``)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip()
            last = tail.splitlines()[-1] if tail else ""
            raise RuntimeError(f"{what} exited with {proc.returncode}: {last} (see {log})")
        if ready.exists():
            port = int(ready.read_text().strip().rsplit(":", 1)[1])
            try:
                with secure_channel(Endpoint(f"127.0.0.1:{port}", ca)) as ch:
                    r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                             timeout=5)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return port
            except grpc.RpcError:
                pass
        time.sleep(0.05)
    # a start that hangs: ask for every thread's stack in its log first (the process runs
    # with PYTHONFAULTHANDLER=1, so SIGABRT dumps them), then kill it
    if proc.poll() is None:
        proc.send_signal(signal.SIGABRT)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()
    dump = log.read_text(errors="replace").strip().splitlines()[-12:] if log.exists() else []
    raise TimeoutError(f"{what} did not start in {timeout_s:.0f} s (see {log}): "
                       + " | ".join(dump))
