"""The shuffler's gRPC port and the collector's shuffler port take the connection limits of
the collector's main port (``uldp.collector.service.connections``, invariant 9): a client
that connects and sends nothing stays in the kernel (``TCP_DEFER_ACCEPT`` on the listening
socket), and one that starts a TLS handshake and stalls is closed after the handshake time.
In process, on loopback, with the dev PKI of a shuffle deployment (no collector needed:
neither check makes a call)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path

import pytest

from uldp.collector.security.tokens import AdminAuth, TokenKey, new_admin_token
from uldp.collector.service.connections import ConnectionLimits
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.intake import INTAKE_CONNECTIONS, IntakeServer
from uldp.collector.shuffler.launch import make_shuffle_pki
from uldp.collector.shuffler.server import ShufflerServer, ShufflerServerConfig
from uldp.collector.storage.db import open_database

LIMITS = ConnectionLimits(grpc_connections=8, header_timeout_s=1.0)


def _deferred(port: int) -> int:
    """TCP_DEFER_ACCEPT of this process's listening socket on ``port`` (0: not set)."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(name))) as s:
                if (s.type == socket.SOCK_STREAM
                        and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                        and s.getsockname()[1] == port):
                    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT)
    raise AssertionError(f"no listening socket on port {port}")


def _stalled_is_closed(port: int, within_s: float) -> bool:
    """A connection that sends the first byte of a TLS record and nothing more: closed by
    the server within ``within_s``?"""
    with socket.create_connection(("127.0.0.1", port), timeout=within_s) as s:
        s.sendall(b"\x16")
        end = time.monotonic() + within_s
        while time.monotonic() < end:
            try:
                if s.recv(1024) == b"":
                    return True
            except TimeoutError:
                continue
            except ConnectionError:
                return True
    return False


@pytest.mark.skipif(not hasattr(socket, "TCP_DEFER_ACCEPT"), reason="Linux only")
def test_both_shuffle_ports_defer_accept_and_bound_the_handshake(tmp_path: Path):
    sp = make_shuffle_pki(tmp_path)
    core = CollectorCore(open_database(f"sqlite:///{tmp_path / 'c.db'}"), TokenKey.generate(),
                         AdminAuth(new_admin_token()), CoreConfig(commit_linger_ms=0.0))
    intake = IntakeServer(core, host="127.0.0.1", port=0, tls_cert=sp.pki.server_cert,
                          tls_key=sp.pki.server_key, shuffler_ca=sp.ca,
                          identity="uldp-shuffler", limits=LIMITS)
    shuffler = ShufflerServer(ShufflerServerConfig(
        db_path=tmp_path / "shuffler.db", tls_cert=sp.shuffler_cert, tls_key=sp.shuffler_key,
        ticket_key=sp.ticket_key, collector="127.0.0.1:9", collector_ca=sp.ca,
        client_cert=sp.client_cert, client_key=sp.client_key, port=0, connections=LIMITS))
    try:
        intake.start()
        shuffler.start()
        assert intake.limits.grpc_connections == min(8, INTAKE_CONNECTIONS)
        assert intake.limits.header_timeout_s == shuffler.limits.header_timeout_s == 1.0
        for port in (intake.port, shuffler.port):
            assert _deferred(port) > 0
            assert _stalled_is_closed(port, within_s=6.0), port
    finally:
        shuffler.stop(0)
        intake.stop(0)
        core.stop()
