"""Real-socket probes of the connection limits (``tests/service/test_http_limits.py``,
``tests/service/test_connection_flood.py`` and ``bench/connection_flood.py``): idle and
slow connections, raw HTTP/1.1 over TLS, ``/healthz`` and gRPC health probes, and what a
process holds (descriptors, memory, CPU) read from ``/proc``."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import selectors
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from uldp.client.transport import Endpoint, secure_channel

HOST = "127.0.0.1"


@dataclass(frozen=True)
class ProcStats:
    fds: int
    rss_mib: float
    hwm_mib: float  # peak resident memory so far
    cpu_s: float    # user + system CPU so far


def proc_stats(pid: int) -> ProcStats:
    status = Path(f"/proc/{pid}/status").read_text()
    kib = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
           if line.startswith(("VmRSS", "VmHWM"))}
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return ProcStats(len(os.listdir(f"/proc/{pid}/fd")), kib["VmRSS"] / 1024,
                     kib["VmHWM"] / 1024, (int(fields[11]) + int(fields[12])) / ticks)


def open_idle(port: int, n: int, first: bytes = b"") -> list[socket.socket]:
    """``n`` TCP connections to ``port`` that send ``first`` and then nothing. Without
    ``first`` the kernel never hands them to the server (TCP_DEFER_ACCEPT); one byte
    (``\\x16``, the start of a TLS record) makes them a slow client the server holds."""
    out = []
    for _ in range(n):
        if first:
            s = socket.create_connection((HOST, port), timeout=10)
            s.sendall(first)
            s.setblocking(False)
        else:
            s = socket.socket()
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect((HOST, port))
        out.append(s)
    return out


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()
    socks.clear()


def tls(port: int, ca: Path, timeout: float = 10.0) -> ssl.SSLSocket:
    """A TLS connection to the HTTP port (handshake done)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection((HOST, port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def read_response(sock: socket.socket, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-case headers, body) of one HTTP/1.1 response; (0, {}, b"") when
    the connection ends (or fails) first."""
    sock.settimeout(timeout)
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                return 0, {}, b""
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (x.partition(":") for x in lines[1:])}
        want = int(headers.get("content-length", "0"))
        while len(body) < want:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return int(lines[0].split()[1]), headers, body
    except (OSError, ValueError):
        return 0, {}, b""


def closed_within(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the server ends ``sock`` (EOF or reset), None if not by ``timeout``."""
    t0 = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - t0


def healthz(port: int, ca: Path, timeout: float = 10.0) -> tuple[bool, float]:
    """``GET /healthz`` on a new connection: (answered 200, seconds)."""
    t0 = time.monotonic()
    try:
        with tls(port, ca, timeout) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
            status = read_response(s, timeout)[0]
    except OSError:
        status = 0
    return status == 200, time.monotonic() - t0


def grpc_health(port: int, ca: Path, timeout: float = 10.0,
                channel: grpc.Channel | None = None) -> tuple[bool, float]:
    """gRPC ``Health/Check`` (on ``channel``, else a new connection): (SERVING, seconds)."""
    t0 = time.monotonic()
    ch = channel or secure_channel(Endpoint(f"{HOST}:{port}", ca))
    try:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                 timeout=timeout)
        ok = r.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        ok = False
    finally:
        if channel is None:
            ch.close()
    return ok, time.monotonic() - t0


# ---- a persistent attacker ---------------------------------------------------------------
def _attack(port: int, n: int, first: bytes, ca: str | None, source: str, stop: Any,
            reopened: Any) -> None:
    """``n`` connections to ``port`` held open; each one the server ends is opened again
    at once (see :class:`Attacker`)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * n + 256), hard))
    sel = selectors.DefaultSelector()

    def open_one() -> None:
        s: socket.socket
        try:
            if ca is not None:  # slowloris: a TLS connection dripping a request head
                ctx = ssl.create_default_context(cafile=ca)
                raw = socket.create_connection((HOST, port), timeout=5,
                                               source_address=(source, 0))
                s = ctx.wrap_socket(raw, server_hostname="localhost")
                s.sendall(b"POST /uldp.v1.DeviceService/Enroll HTTP/1.1\r\nhost: x\r\n")
            elif first:
                s = socket.create_connection((HOST, port), timeout=5,
                                             source_address=(source, 0))
                s.sendall(first)
            else:
                s = socket.socket()
                s.bind((source, 0))
                s.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    s.connect((HOST, port))
        except OSError:
            return
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)

    for _ in range(n):
        open_one()
    last_drip = time.monotonic()
    while not stop.is_set():
        for key, _ in sel.select(0.1):
            s = key.fileobj
            try:
                gone = not s.recv(4096)  # type: ignore[union-attr]
            except (BlockingIOError, ssl.SSLWantReadError):
                gone = False
            except OSError:
                gone = True
            if gone:
                sel.unregister(s)
                s.close()  # type: ignore[union-attr]
                with reopened.get_lock():
                    reopened.value += 1
                open_one()
        if len(sel.get_map()) < n:  # refused at connect: try again
            open_one()
        if ca is not None and time.monotonic() - last_drip >= 1.0:
            last_drip = time.monotonic()
            for key in list(sel.get_map().values()):
                with contextlib.suppress(OSError):
                    key.fileobj.send(b"x")  # type: ignore[union-attr]
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]


class Attacker:
    """``n`` connections to ``port`` from ``source`` held open by a process of its own;
    each one the server ends is opened again at once. ``first``: the bytes each sends
    (``\\x16``: the start of a TLS record) — none: a connection that never speaks;
    ``slowloris_ca``: TLS connections sending a request head one byte a second."""

    def __init__(self, port: int, n: int, *, first: bytes = b"",
                 slowloris_ca: Path | None = None, source: str = HOST) -> None:
        self.n = n
        ctx = multiprocessing.get_context("spawn")  # no fork of a process running gRPC
        self.stop = ctx.Event()
        self._reopened = ctx.Value("q", 0)
        self.proc = ctx.Process(target=_attack, daemon=True, args=(
            port, n, first, None if slowloris_ca is None else str(slowloris_ca), source,
            self.stop, self._reopened))

    @property
    def reopened(self) -> int:
        return int(self._reopened.value)

    def __enter__(self) -> Attacker:
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
