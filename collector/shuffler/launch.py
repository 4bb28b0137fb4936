"""Starting a shuffle-mode deployment on one machine: the PKI, a shuffler process.

Used by ``uldp demo --shuffle``, the end-to-end tests and ``bench/shuffle_throughput.py``.
:func:`make_shuffle_pki` writes a development PKI for both parties: the collector's server
directory (with a token signing key, so the shuffler can be given its public half), and
the shuffler's own server certificate plus the client certificate (common name
``uldp-shuffler``) the collector's shuffler port accepts. In a real deployment the two
parties hold separate PKIs; only the public pieces cross (the collector's CA certificate
and token verification key to the shuffler; the shuffler's CA to the collector).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from uldp.client.transport import Endpoint, secure_channel
from uldp.collector.security.certs import DevPki, issue_leaf, make_dev_pki
from uldp.collector.security.files import write_private
from uldp.collector.security.tokens import TokenKey, new_admin_token

__all__ = ["SHUFFLER_NAME", "ShufflePki", "free_port", "make_shuffle_pki",
           "start_shuffler_process", "wait_serving"]

SHUFFLER_NAME = "uldp-shuffler"


@dataclass(frozen=True)
class ShufflePki:
    pki: DevPki  # the collector's (server directory = its --tls-dir)
    token_key: Path  # the collector's token signing key (private)
    token_public: Path  # its public half: all the shuffler gets
    shuffler_cert: Path  # the shuffler's server certificate (devices verify it)
    shuffler_key: Path
    client_cert: Path  # the shuffler's identity on the collector's shuffler port
    client_key: Path

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
    public = work / "token-public.pem"
    public.write_bytes(key.public_pem())
    sdir = work / "shuffler-pki"
    cert, skey = issue_leaf(pki.ca_cert, pki.ca_key, sdir, "server", "localhost",
                            ["localhost", "127.0.0.1"], client=False)
    ccert, ckey = issue_leaf(pki.ca_cert, pki.ca_key, sdir, "client", SHUFFLER_NAME,
                             client=True)
    return ShufflePki(pki, tls / "token-signing.key", public, cert, skey, ccert, ckey)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_shuffler_process(work: Path, sp: ShufflePki, collector_intake: str, *,
                           db: Path | None = None, extra: list[str] | None = None,
                           env: dict[str, str] | None = None, timeout_s: float = 60.0
                           ) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``uldp shuffler serve`` on 127.0.0.1 (free port) forwarding to the
    collector's shuffler port ``collector_intake``; wait until it serves."""
    ready = work / f"shuffler-{os.getpid()}-{time.monotonic_ns()}.ready"
    log = open(work / "shuffler.log", "ab")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "uldp.collector.cli.service", "shuffler", "serve",
         "--db", str(db or work / "shuffler.db"), "--port", "0", "--ready-file", str(ready),
         "--tls-cert", str(sp.shuffler_cert), "--tls-key", str(sp.shuffler_key),
         "--token-public-key", str(sp.token_public), "--collector", collector_intake,
         "--collector-ca", str(sp.ca), "--client-cert", str(sp.client_cert),
         "--client-key", str(sp.client_key),
         "--log-level", os.environ.get("ULDP_LOG_LEVEL", "warning"), *(extra or [])],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
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
    proc.kill()
    proc.wait()
    raise TimeoutError(f"{what} did not start")
