"""The native gRPC port's front: admission before grpc-core (invariant 9; issue 28 item 5;
``docs/operations.md``, "Connections and descriptors").

grpc-core caps its connections (``grpc.max_allowed_incoming_connections``) by closing every
newcomer while the cap is reached, and it cannot evict a connection that holds a slot
without finishing its handshake: a few hundred clients that send one byte and stop keep
every new device out until the handshake timeout, and take the freed slots again at once
(measured: 2 of 60 new gRPC connections got through such a flood). So the public gRPC port
is a :class:`GrpcFront`, and grpc-core listens on a loopback port behind it:

* The front accepts every connection (``TCP_DEFER_ACCEPT``: only once its first bytes
  arrived) and holds it, with one descriptor, until its **opening** — the complete first
  TLS record, the ClientHello — has arrived. Anything but a TLS handshake record is closed
  at once; an opening not complete within the handshake time is closed by the sweeper.
* Only then it connects to grpc-core (two more descriptors) and copies bytes both ways,
  unchanged: TLS stays end to end between the device and grpc-core, which listens on an
  abstract unix socket (cheaper than a second trip through loopback TCP). The connection is
  *handshaking* until the client sends its first TLS application-data record (the TLS
  1.3 Finished, or the first HTTP/2 bytes of TLS 1.2), then *proven*. grpc-core's own
  handshake timeout, idle time and maximum age apply to it as before.
* The front counts descriptors, not connections, against the port's share of the plan
  (``ConnectionLimits.grpc_connections``): 1 per opening connection, 3 per forwarded one.
  At the limit a newcomer **evicts** the oldest connection still in its opening, else the
  oldest handshaking one; a proven connection is never evicted (only when every slot is
  proven is the newcomer closed at once). One address (IPv4, or an IPv6 /64) holds at most
  ``per_peer`` connections that are not proven: its newcomers evict its own oldest. A slow
  flood therefore cannot keep a device out: the device's ClientHello arrives with its
  first bytes, and a forwarded connection outlives every connection still in its opening.
* grpc-core sees the front's end of each unix connection, bound to a name of its own;
  :func:`peer_of` gives a servicer the client's address instead (the per-address
  enrolment limit, logs).

The bytes of a connection in its handshake pass through the front's event loop (the
collector runs it in a thread of its own): one ``recv`` and one ``send`` per chunk and
direction, with back-pressure (a side whose peer has more than :data:`HIGH_WATER` bytes
unsent is not read). A proven connection is never evicted, so the loop hands it to two
threads of its own (``relay="threads"``, the default): each a blocking ``recv_into`` /
``sendall`` loop for one direction — no selector wake-up, callback or buffer object per
chunk, and the kernel's own back-pressure. ``relay="loop"`` keeps it on the loop.
``bench/connection_flood.py --overhead`` measures the CPU each adds per report.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uldp.collector.service.connections import defer_accept
from uldp.collector.service.enrolment import peer_key
from uldp.collector.service.grpc_relay import RELAY_THREAD, name_os_thread, relay

__all__ = ["RELAYS", "RELAY_THREAD", "FrontLimits", "GrpcFront", "inner_address", "peer_of"]

log = logging.getLogger("uldp.collector")

#: descriptors a forwarded connection holds: the client's, the front's end towards
#: grpc-core and grpc-core's accepted end
FORWARDED_FDS = 3
#: a side whose other end has more than this many bytes unsent is not read
HIGH_WATER = 256 * 1024
#: the largest TLS record (2^14 plaintext + 2 048 expansion, RFC 8446 §5.2)
MAX_RECORD = (1 << 14) + 2048
#: accepts per wake-up of the listening socket (others wait for the next loop turn: a
#: flood's churn cannot hold the loop away from forwarded connections for long)
ACCEPT_BURST = 16
SWEEP_S = 0.5
LOG_EVERY_S = 10.0
_TLS_HANDSHAKE, _TLS_APPLICATION_DATA = 22, 23
CHUNK = 65536
#: how a proven connection's bytes are copied: ``threads`` — two threads of its own, each
#: a blocking ``recv_into`` / ``sendall`` loop (no event-loop turn, no Python callback per
#: chunk); ``loop`` — on the front's event loop like a connection still handshaking
RELAYS = ("threads", "loop")

#: the front's thread, also as the operating system names it (``top -H``, /proc)
THREAD = "uldp-grpc-front"

#: grpc-core's name of a front connection (``unix-abstract:uldp-front-...``) -> the
#: client's address (``ipv4:203.0.113.5:40112``)
_PEERS: dict[str, str] = {}


def inner_address() -> str:
    """A fresh name for grpc-core's listening socket behind a front: an abstract unix
    socket (no file, gone with the process; ``unix-abstract:<name>`` to grpc-core)."""
    return f"uldp-grpc-{os.getpid()}-{secrets.token_hex(6)}"


def peer_of(context: Any) -> str:
    """``context.peer()`` with a connection through a :class:`GrpcFront` named by the
    client's own address (``ipv4:203.0.113.5:40112``), not the front's loopback one."""
    p: str = context.peer()
    return _PEERS.get(p, p)


@dataclass(frozen=True)
class FrontLimits:
    """The front's limits (planned by ``uldp.collector.service.connections``)."""

    #: descriptors the port's connections may hold (1 per opening, 3 per forwarded one)
    max_fds: int = 448
    #: seconds from accept to a complete opening, and to a proven connection
    handshake_s: float = 10.0
    #: connections one address holds that are not proven
    per_peer: int = 32


OPENING, HANDSHAKE, PROVEN = 0, 1, 2


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    key: str
    since: float
    stage: int = OPENING
    up: socket.socket | None = None
    up_name: str = ""
    connected: bool = False
    head: bytearray = field(default_factory=bytearray)
    to_up: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    #: TLS record scan of the client's bytes: header bytes seen, body bytes to skip
    hdr: bytes = b""
    skip: int = 0
    closing: bool = False  # one side ended: close once the other's bytes are written
    gone: bool = False
    #: handed to relay threads (:meth:`GrpcFront._relay`): the loop no longer watches it
    relayed: bool = False


def _grpc_peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        return f"ipv6:[{host}]:{addr[1]}" if ":" in host else f"ipv4:{host}:{addr[1]}"
    return str(addr)


class GrpcFront:
    """The public gRPC listening socket and its connections (see the module docstring).

    ``start`` and ``stop`` are called from any thread; everything else runs on ``loop``
    (None: the front runs a loop in a thread of its own)."""

    def __init__(self, host: str, port: int, inner: str, limits: FrontLimits, *,
                 loop: asyncio.AbstractEventLoop | None = None,
                 reuse_port: bool = False, relay: str = "threads") -> None:
        if relay not in RELAYS:
            raise ValueError(f"relay must be one of {', '.join(RELAYS)}, got {relay!r}")
        self.limits = limits
        #: how a proven connection's bytes are copied (:data:`RELAYS`)
        self.relay = relay
        #: grpc-core's listening socket: an abstract unix socket (:func:`inner_address`)
        self.inner = "\0" + inner
        self._names = itertools.count()
        self._prefix = f"uldp-front-{os.getpid()}-{secrets.token_hex(4)}-"
        self._own_loop = loop is None
        self.loop = loop or asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.lsock = socket.socket(family, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.lsock.bind((host, port))
        self.lsock.listen(1024)
        self.lsock.setblocking(False)
        defer_accept(self.lsock)
        self.port: int = self.lsock.getsockname()[1]
        self.fds = 0
        #: connections that are not proven, oldest first: opening ones, handshaking ones
        self.opening: OrderedDict[_Conn, None] = OrderedDict()
        self.handshaking: OrderedDict[_Conn, None] = OrderedDict()
        self.proven: set[_Conn] = set()
        self.by_key: dict[str, OrderedDict[_Conn, None]] = {}
        self.stats: dict[str, int] = dict.fromkeys(
            ("accepted", "forwarded", "proven", "evicted", "evicted_per_peer", "refused",
             "not_tls", "timeout", "accept_errors"), 0)
        self._logged: dict[str, int] = {}
        self._last_log = time.monotonic()
        self._sweep: asyncio.TimerHandle | None = None
        self._paused = False
        self._stopped = False

    # ---- life cycle (any thread) ------------------------------------------------------
    def start(self) -> None:
        if self._own_loop:
            self._thread = threading.Thread(target=self._run, name=THREAD, daemon=True)
            self._thread.start()
        self._call(self._start)

    def _run(self) -> None:
        name_os_thread(THREAD)
        self.loop.run_forever()

    def stop(self) -> None:
        """Close the port and every connection (again: nothing)."""
        if self._stopped:
            return
        self._stopped = True
        self._call(self._stop)
        if self._own_loop:
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=10)
            self.loop.close()

    def _call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop and wait for it."""
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()
        self.loop.call_soon_threadsafe(run)
        done.wait(timeout=10)

    def _start(self) -> None:
        self.loop.add_reader(self.lsock, self._on_accept)
        self._sweep = self.loop.call_later(SWEEP_S, self._sweeper)

    def _stop(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.lsock)
        if self._sweep is not None:
            self._sweep.cancel()
        self.lsock.close()
        for c in [*self.opening, *self.handshaking, *self.proven]:
            self._close(c)

    # ---- accepting ----------------------------------------------------------------------
    def _on_accept(self) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                sock, addr = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: wait, then accept again
                self.stats["accept_errors"] += 1
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause_accepting(0.1)
                return
            sock.setblocking(False)
            peer = _grpc_peer(addr)
            self._admit(_Conn(sock, peer, peer_key(peer), time.monotonic()))

    def _pause_accepting(self, seconds: float) -> None:
        if self._paused:
            return
        self._paused = True
        self.loop.remove_reader(self.lsock)

        def resume() -> None:
            self._paused = False
            if self.lsock.fileno() >= 0:
                self.loop.add_reader(self.lsock, self._on_accept)
        self.loop.call_later(seconds, resume)

    def _admit(self, c: _Conn) -> None:
        mine = self.by_key.get(c.key)
        if mine is not None and len(mine) >= self.limits.per_peer:
            # its oldest connection still in its opening, else its oldest handshaking one
            self.stats["evicted_per_peer"] += 1
            self._close(next((v for v in mine if v.stage == OPENING), None)
                        or next(iter(mine)))
        while self.fds + 1 > self.limits.max_fds:
            victim = next(iter(self.opening), None) or next(iter(self.handshaking), None)
            if victim is None:
                self.stats["refused"] += 1
                c.sock.close()
                return
            self.stats["evicted"] += 1
            self._close(victim)
        self.stats["accepted"] += 1
        self.fds += 1
        self.opening[c] = None
        self.by_key.setdefault(c.key, OrderedDict())[c] = None
        # TCP_DEFER_ACCEPT: its first bytes are there, usually the whole ClientHello —
        # read them now, before the next accept can evict it; wait for more only if not
        self._on_client(c)
        if c.stage == OPENING and not c.gone:
            self.loop.add_reader(c.sock, self._on_client, c)

    # ---- the client's side --------------------------------------------------------------
    def _on_client(self, c: _Conn) -> None:
        if c.relayed:  # a wake-up queued before the relay took it (its threads own it)
            return
        data = self._recv(c, c.sock, client=True)
        if not data:
            return
        if c.stage == OPENING:
            self._opening(c, data)
            return
        if c.stage == HANDSHAKE:
            self._scan(c, data)
        self._send(c, c.up, c.to_up, data, reading=c.sock)  # type: ignore[arg-type]
        self._maybe_relay(c)

    def _opening(self, c: _Conn, data: bytes) -> None:
        c.head += data
        h = c.head
        if h[0] != _TLS_HANDSHAKE or (len(h) >= 2 and h[1] != 3):
            self.stats["not_tls"] += 1
            self._close(c)
            return
        if len(h) < 5:
            return
        size = 5 + ((h[3] << 8) | h[4])
        if size - 5 > MAX_RECORD:
            self.stats["not_tls"] += 1
            self._close(c)
            return
        if len(h) < size:
            return
        # the ClientHello is complete: forward it, and what followed it, to grpc-core
        if self.fds + FORWARDED_FDS - 1 > self.limits.max_fds:
            self._make_room(c, FORWARDED_FDS - 1)
            if c.gone:
                return
        with contextlib.suppress(OSError):
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        del self.opening[c]
        self.handshaking[c] = None
        self.fds += FORWARDED_FDS - 1
        c.stage = HANDSHAKE
        self.stats["forwarded"] += 1
        rest = bytes(h[size:])
        c.to_up += h[:size]
        c.head = bytearray()
        if rest:
            self._scan(c, rest)
            c.to_up += rest
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.up = up
        up.setblocking(False)
        # bound to a name of its own: grpc-core names the peer by it (``peer_of``)
        name = f"{self._prefix}{next(self._names)}"
        try:
            up.bind("\0" + name)
        except OSError:
            self._close(c)
            return
        c.up_name = f"unix-abstract:{name}"
        err = up.connect_ex(self.inner)
        if err not in (0, errno.EINPROGRESS):  # EAGAIN: grpc-core's backlog is full
            self._close(c)
            return
        self.loop.remove_reader(c.sock)  # read on once grpc-core's end is connected
        if err == 0:
            self._on_connected(c)
        else:
            self.loop.add_writer(up, self._on_connected, c)

    def _make_room(self, c: _Conn, need: int) -> None:
        """Evict for ``need`` descriptors more, never ``c`` itself nor a proven one."""
        while self.fds + need > self.limits.max_fds:
            victim = next((v for v in self.opening if v is not c), None) \
                or next((v for v in self.handshaking if v is not c), None)
            if victim is None:
                self.stats["refused"] += 1
                self._close(c)
                return
            self.stats["evicted"] += 1
            self._close(victim)

    def _scan(self, c: _Conn, data: bytes) -> None:
        """Walk the client's TLS records until the first application-data one: proven."""
        i, n = 0, len(data)
        while i < n:
            if c.skip:
                take = min(c.skip, n - i)
                c.skip -= take
                i += take
                continue
            need = 5 - len(c.hdr)
            c.hdr += data[i:i + need]
            i += need
            if len(c.hdr) < 5:
                return
            if c.hdr[0] == _TLS_APPLICATION_DATA:
                self._prove(c)
                return
            c.skip = (c.hdr[3] << 8) | c.hdr[4]
            c.hdr = b""

    def _prove(self, c: _Conn) -> None:
        if c.stage != HANDSHAKE:
            return
        c.stage = PROVEN
        self.stats["proven"] += 1
        self.handshaking.pop(c, None)
        mine = self.by_key.get(c.key)
        if mine is not None:
            mine.pop(c, None)
            if not mine:
                del self.by_key[c.key]
        self.proven.add(c)

    # ---- relaying a proven connection in threads of its own -------------------------------
    def _maybe_relay(self, c: _Conn) -> None:
        if (c.stage == PROVEN and c.connected and self.relay == "threads" and not c.gone
                and not c.closing and not c.relayed):
            self._relay(c)

    def _relay(self, c: _Conn) -> None:
        """Hand a proven connection, with the bytes the loop still owed each side, to
        :func:`~uldp.collector.service.grpc_relay.relay`: the loop never touches it again,
        except to end it (:meth:`_close` shuts its sockets down)."""
        up = c.up
        assert up is not None
        for sk in (c.sock, up):
            self.loop.remove_reader(sk)
            self.loop.remove_writer(sk)
            sk.setblocking(True)
        c.relayed = True
        owed_up, owed_client = bytes(c.to_up), bytes(c.to_client)
        c.to_up.clear()
        c.to_client.clear()

        def done() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone (stopped)
                self.loop.call_soon_threadsafe(self._close, c)
        relay(c.sock, up, owed_up, owed_client, done)

    # ---- grpc-core's side ---------------------------------------------------------------
    def _on_connected(self, c: _Conn) -> None:
        up = c.up
        assert up is not None
        if c.gone or c.relayed:
            return
        self.loop.remove_writer(up)
        err = up.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._close(c)
            return
        c.connected = True
        _PEERS[c.up_name] = c.peer
        self.loop.add_reader(c.sock, self._on_client, c)
        self.loop.add_reader(up, self._on_upstream, c)
        pending = bytes(c.to_up)
        c.to_up.clear()
        self._send(c, up, c.to_up, pending, reading=c.sock)
        self._maybe_relay(c)

    def _on_upstream(self, c: _Conn) -> None:
        if c.relayed:  # a wake-up queued before the relay took it (its threads own it)
            return
        assert c.up is not None
        data = self._recv(c, c.up, client=False)
        if data:
            self._send(c, c.sock, c.to_client, data, reading=c.up)

    def _recv(self, c: _Conn, sock: socket.socket, *, client: bool) -> bytes | None:
        """What ``sock`` has to read: ``None`` when nothing is there yet (a spurious
        wake-up); at its end or on an error, ``b""`` after ending ``c`` (``client``: the
        client's side ended)."""
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            data = b""
        if not data:
            self._end(c, client=client)
        return data

    # ---- copying --------------------------------------------------------------------------
    def _send(self, c: _Conn, dst: socket.socket, buf: bytearray, data: bytes,
              reading: socket.socket) -> None:
        """Write ``data`` to ``dst`` (after what ``buf`` holds for it); past the high water
        mark stop reading ``reading`` until ``dst`` drained."""
        if not c.connected and dst is c.up:
            buf += data
            return
        if buf:
            buf += data
        else:
            try:
                sent = dst.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._close(c)
                return
            if sent == len(data):
                return
            buf += data[sent:]
            self.loop.add_writer(dst, self._on_writable, c, dst, buf, reading)
        if len(buf) > HIGH_WATER:
            self.loop.remove_reader(reading)

    def _on_writable(self, c: _Conn, dst: socket.socket, buf: bytearray,
                     reading: socket.socket) -> None:
        if c.relayed:  # queued before the relay took its bytes over (``_relay``)
            return
        try:
            sent = dst.send(buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        del buf[:sent]
        if buf:
            return
        self.loop.remove_writer(dst)
        if c.closing:
            self._close(c)
            return
        if reading.fileno() >= 0:
            self.loop.add_reader(reading, self._on_client if reading is c.sock
                                 else self._on_upstream, c)

    def _end(self, c: _Conn, client: bool) -> None:
        """One side ended: close once the bytes still owed to the other are written."""
        owed = c.to_up if client else c.to_client
        if owed and c.connected:
            c.closing = True
            self.loop.remove_reader(c.sock if client else c.up)  # type: ignore[arg-type]
        else:
            self._close(c)

    # ---- closing --------------------------------------------------------------------------
    def _close(self, c: _Conn) -> None:
        if c.gone:
            return
        c.gone = True
        for s in (c.sock, c.up):
            if s is None:
                continue
            if c.relayed:  # its threads close it once they are out of their calls
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                continue
            try:
                self.loop.remove_reader(s)
                if c.stage != OPENING:
                    self.loop.remove_writer(s)
            except (ValueError, OSError):  # pragma: no cover - already closed
                pass
            s.close()
        if c.up_name:
            _PEERS.pop(c.up_name, None)
        self.fds -= 1 if c.stage == OPENING else FORWARDED_FDS
        self.opening.pop(c, None)
        self.handshaking.pop(c, None)
        self.proven.discard(c)
        mine = self.by_key.get(c.key)
        if mine is not None:
            mine.pop(c, None)
            if not mine:
                del self.by_key[c.key]

    def _sweeper(self) -> None:
        now = time.monotonic()
        limit = now - self.limits.handshake_s
        for pool in (self.opening, self.handshaking):
            while pool:
                c = next(iter(pool))
                if c.since > limit:
                    break
                self.stats["timeout"] += 1
                self._close(c)
        if now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            news = {k: v - self._logged.get(k, 0) for k, v in self.stats.items()
                    if k not in ("accepted", "forwarded", "proven")}
            if any(news.values()):
                log.warning("gRPC port under pressure in the last %.0f s: %s (%d descriptors "
                            "of %d held)", LOG_EVERY_S,
                            ", ".join(f"{k} {v}" for k, v in news.items() if v),
                            self.fds, self.limits.max_fds)
            self._logged = dict(self.stats)
        self._sweep = self.loop.call_later(SWEEP_S, self._sweeper)
