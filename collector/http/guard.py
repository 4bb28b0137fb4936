"""Bounded connections on an HTTP port: a cap, header and body time, header size.

uvicorn has no connection cap and no header or body timeout, and its httptools parser no
header size limit: ~1 000 connections that never send a request exhaust the descriptors
of the whole process (the native gRPC port and the database included), and one 64 MiB
header is read into memory. This module bounds all of it (invariant 9;
``docs/operations.md``, "Connections and descriptors"):

* :class:`GuardedListener` is the listening socket: every accepted connection is counted
  from the moment it is accepted (the TLS handshake included, which uvicorn never sees)
  until its descriptor is closed. At the cap (:class:`ConnectionGuard`, sized from the
  descriptor limit by ``uldp.collector.service.connections``) a new connection *evicts*
  the oldest connection that has not sent a byte, else the one idle the longest among
  those that have not sent a complete request head (in the TLS handshake, sending its
  head, or idle between requests), else among those sending a body; a connection whose
  request is being answered is never evicted. Slow connections therefore cannot keep a
  load balancer's ``/healthz`` or a device out: each newcomer takes the place of the
  slowest. Only when every connection is being answered is a newcomer closed at once.
* A sweeper closes connections past their time: the *header time* (from accept, or from
  the end of the previous response on a kept-alive connection, to a complete request head)
  and the *body time* (from the head to the end of the body).
* :func:`guarded_protocol` is uvicorn's httptools protocol with the head counted in bytes
  (``431`` past ``max_header_bytes``, before the rest is read), a malformed request
  answered ``400`` without a log line per request, a request past its header or body time
  answered ``408``, and the connection's state reported to the guard. A refused
  connection gets its status, then is drained for at most a second and closed. (A body
  over the message size limit is refused by the service itself, RESOURCE_EXHAUSTED in the
  caller's protocol, once that many bytes have arrived: ``uldp.collector.http.connect``.)

What was closed and why is counted (:attr:`ConnectionGuard.stats`, exported by
:class:`GuardMetrics` as ``uldp_http_connections`` and
``uldp_http_connections_closed_total{reason}``) and logged once per interval by the
sweeper, never once per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import logging
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["ConnectionGuard", "GuardMetrics", "GuardedListener", "HttpLimits",
           "guarded_protocol"]

log = logging.getLogger("uldp.collector.http")

#: how often the sweeper looks for connections past their time, and logs its counts
SWEEP_S = 0.5
LOG_EVERY_S = 10.0
#: a refused connection is drained (its unread request discarded) this long, then closed
DRAIN_S = 1.0
#: connections being closed by the guard that may still hold their descriptor, beyond
#: the cap (they are gone within a loop iteration; the reserve covers them)
MAX_DYING = 32
#: a connection that has sent nothing is evicted first once it is this old (younger, its
#: first bytes may simply not have been read yet)
FRESH_GRACE_S = 1.0
#: closed connections after which the sweeper frees their cycles (see ``run_sweeper``)
GC_AFTER = 64


@dataclass(frozen=True)
class HttpLimits:
    """The limits of one HTTP port (``docs/operations.md``)."""

    max_connections: int = 448
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_header_bytes: int = 16384


class State(enum.IntEnum):
    WAITING = 0  # TLS handshake, or idle before a request head
    HEAD = 1     # a request head is arriving
    BODY = 2     # the head is complete, the body is arriving
    BUSY = 3     # the request is being answered
    CLOSING = 4  # refused: its status is written, the rest drained


@dataclass(eq=False)
class _Entry:
    sock: socket.socket
    since: float
    state: State = State.WAITING
    transport: Any = None
    protocol: Any = None
    dying: bool = False
    fresh: bool = True  # nothing received yet


@dataclass
class ConnectionGuard:
    """The connections of one HTTP port (see the module docstring)."""

    limits: HttpLimits
    #: open connections, least recently active first
    conns: OrderedDict[_Conn, _Entry] = field(default_factory=OrderedDict)
    by_fd: dict[int, _Conn] = field(default_factory=dict)
    dying: int = 0
    #: connections closed since the sweeper last ran
    gone: int = 0
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("accepted", "evicted", "refused", "header_timeout", "body_timeout",
         "header_too_large", "bad_request"), 0))
    _logged: dict[str, int] = field(default_factory=dict)

    # ---- accepting ---------------------------------------------------------------------
    def admit(self, conn: _Conn) -> bool:
        """Count ``conn`` in, evicting the slowest connection at the cap; False: it must
        be closed at once (every connection is being answered)."""
        if len(self.conns) >= self.limits.max_connections:
            victim = self._victim() if self.dying < MAX_DYING else None
            if victim is None:
                self.stats["refused"] += 1
                return False
            self.stats["evicted"] += 1
            self._kill(victim)
        self.conns[conn] = _Entry(conn, time.monotonic())
        self.by_fd[conn.fileno()] = conn
        self.stats["accepted"] += 1
        return True

    def must_wait(self) -> bool:
        """At the cap with connections still closing: accept nothing until they are."""
        return len(self.conns) >= self.limits.max_connections and self.dying >= MAX_DYING

    def _victim(self) -> _Entry | None:
        """A connection that has sent nothing for :data:`FRESH_GRACE_S` (the oldest),
        else the one idle the longest before a request head, else the one idle the
        longest in its body."""
        idle: _Entry | None = None
        body: _Entry | None = None
        old = time.monotonic() - FRESH_GRACE_S
        for e in self.conns.values():
            if e.dying:
                continue
            if e.fresh and e.since < old:
                return e
            if idle is None and (e.state <= State.HEAD or e.state is State.CLOSING):
                idle = e
            elif body is None and e.state is State.BODY:
                body = e
        return idle or body

    def _kill(self, e: _Entry) -> None:
        if e.dying:
            return
        e.dying = True
        self.dying += 1
        if e.transport is not None:
            e.transport.abort()
        else:  # still in the TLS handshake: asyncio closes it on the end of stream
            with contextlib.suppress(OSError):
                e.sock.shutdown(socket.SHUT_RDWR)

    def touched(self, conn: _Conn) -> None:
        e = self.conns.get(conn)
        if e is not None:
            e.fresh = False
            self.conns.move_to_end(conn)

    def closed(self, conn: _Conn) -> None:
        e = self.conns.pop(conn, None)
        if e is None:
            return
        self.gone += 1
        if self.by_fd.get(conn.fileno()) is conn:
            del self.by_fd[conn.fileno()]
        if e.dying:
            self.dying -= 1

    def entry(self, transport: Any) -> _Entry | None:
        sock = transport.get_extra_info("socket")
        conn = self.by_fd.get(sock.fileno()) if sock is not None else None
        e = self.conns.get(conn) if conn is not None else None
        if e is not None:
            e.transport = transport
        return e

    def attach(self, transport: Any, protocol: Any) -> _Entry | None:
        """The entry of ``transport``'s connection, now served by ``protocol``."""
        e = self.entry(transport)
        if e is not None:
            e.protocol = protocol
        return e

    # ---- time --------------------------------------------------------------------------
    def sweep(self, now: float) -> None:
        lim = self.limits
        for e in list(self.conns.values()):
            if e.dying:
                continue
            if e.state <= State.HEAD and now - e.since > lim.header_timeout_s:
                self.stats["header_timeout"] += 1
                self._expire(e, "the request head did not arrive within "
                             f"{lim.header_timeout_s:g} s")
            elif e.state is State.BODY and now - e.since > lim.body_timeout_s:
                self.stats["body_timeout"] += 1
                self._expire(e, f"the request body did not arrive within "
                             f"{lim.body_timeout_s:g} s")
            elif e.state is State.CLOSING and now - e.since > DRAIN_S + 1.0:
                self._kill(e)

    def _expire(self, e: _Entry, why: str) -> None:
        """A connection past its time: ``408`` if a request had begun, then closed."""
        if e.protocol is not None and e.state in (State.HEAD, State.BODY):
            e.protocol.refuse(_Refused(408, why), count=False)
        else:
            self._kill(e)

    def report(self, name: str) -> None:
        """One WARNING with what was closed since the last one, if anything was."""
        quiet = ("accepted",)
        new = {k: v - self._logged.get(k, 0) for k, v in self.stats.items()
               if k not in quiet and v != self._logged.get(k, 0)}
        if new:
            log.warning("%s: %d connections open (cap %d); in the last %.0f s: %s", name,
                        len(self.conns), self.limits.max_connections, LOG_EVERY_S,
                        ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in new.items()))
        self._logged = dict(self.stats)

    async def run_sweeper(self, name: str) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(SWEEP_S)
            now = time.monotonic()
            self.sweep(now)
            if self.gone >= GC_AFTER:
                # a closed connection is a reference cycle (transport, TLS and HTTP
                # protocols; a 256 KiB read buffer): free it now, not at the next
                # full collection (the server raises the GC thresholds)
                self.gone = 0
                gc.collect()
            if now - last >= LOG_EVERY_S:
                self.report(name)
                last = now


class _Conn(socket.socket):
    """An accepted connection: reports its reads and its close to the guard."""

    guard: ConnectionGuard

    def recv(self, *a: Any) -> bytes:
        self.guard.touched(self)
        return super().recv(*a)

    def recv_into(self, *a: Any) -> int:
        self.guard.touched(self)
        return super().recv_into(*a)

    def close(self) -> None:
        self.guard.closed(self)
        super().close()


class GuardedListener(socket.socket):
    """A listening socket whose ``accept`` admits connections through ``guard`` (asyncio
    calls it in a loop until it raises BlockingIOError)."""

    guard: ConnectionGuard

    @classmethod
    def wrap(cls, sock: socket.socket, guard: ConnectionGuard) -> GuardedListener:
        out = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        out.guard = guard
        return out

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            if self.guard.must_wait():
                raise BlockingIOError
            fd, addr = self._accept()  # type: ignore[attr-defined]
            conn = _Conn(self.family, self.type, self.proto, fileno=fd)
            conn.guard = self.guard
            if self.guard.admit(conn):
                return conn, addr
            conn.close()


class _Refused(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


_REASONS = {400: b"Bad Request", 408: b"Request Timeout",
            431: b"Request Header Fields Too Large"}


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol reporting to :attr:`guard` and enforcing its limits
    (a subclass per port, :func:`guarded_protocol`)."""

    guard: ConnectionGuard
    _entry: _Entry | None = None
    _head = 0  # bytes fed while a request head was incomplete
    _in_head = False
    _draining = False

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._entry = self.guard.attach(transport, self)

    def _state(self, s: State, restart: bool = False) -> None:
        e = self._entry
        if e is not None and e.state is not State.CLOSING:
            e.state = s
            if restart:
                e.since = time.monotonic()

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.refuse(_Refused(400, "protocol upgrades are not served here"))
            return
        except httptools.HttpParserError as exc:
            why = exc.__context__
            self.refuse(why if isinstance(why, _Refused) else
                        _Refused(400, "malformed HTTP request"))
            return
        if self._in_head:
            self._head += len(data)
            if self._head > self.guard.limits.max_header_bytes:
                self.refuse(_too_large_head(self.guard.limits.max_header_bytes))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head = True, 0
        e = self._entry
        if e is None or e.state is State.WAITING:
            self._state(State.HEAD)

    def on_headers_complete(self) -> None:
        size = len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers)
        if size > self.guard.limits.max_header_bytes:
            raise _too_large_head(self.guard.limits.max_header_bytes)
        self._in_head = False
        if self._entry is not None and self._entry.state is State.HEAD:
            self._state(State.BODY, restart=True)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._entry is not None and self._entry.state is State.BODY:
            self._entry.state = State.BUSY
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._state(State.WAITING, restart=True)
        super().on_response_complete()

    def refuse(self, r: _Refused, count: bool = True) -> None:
        """Answer ``r``'s status, drain the connection for a moment, close it."""
        if self._draining or self.transport.is_closing():
            return
        if count:
            key = "header_too_large" if r.status == 431 else "bad_request"
            self.guard.stats[key] += 1
        if self._entry is not None:
            self._entry.state, self._entry.since = State.CLOSING, time.monotonic()
        self._draining = True
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app (if it started) stops there
            self.cycle.message_event.set()
        body = (r.text + "\n").encode()
        self.transport.write(b"".join((
            b"HTTP/1.1 %d %s\r\n" % (r.status, _REASONS[r.status]),
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body), body)))
        self.loop.call_later(DRAIN_S, self.transport.close)



def guarded_protocol(guard: ConnectionGuard) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol reporting to ``guard`` and enforcing its limits."""
    return type("GuardedHttp", (GuardedHttp,), {"guard": guard})


def _too_large_head(limit: int) -> _Refused:
    return _Refused(431, "the request head (request line and headers) is over the limit "
                    f"of {limit} bytes")


class GuardMetrics:
    """A Prometheus collector of ``guard`` (registered on the replica's registry by the
    collector's HTTP port): open connections, their cap, and connections closed or
    refused by reason (``evicted``, ``refused``, ``header_timeout``, ``body_timeout``,
    ``header_too_large``, ``bad_request``)."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        g = self.guard
        yield GaugeMetricFamily("uldp_http_connections", "Connections the HTTP port holds",
                                value=len(g.conns))
        yield GaugeMetricFamily("uldp_http_connections_cap",
                                "Connections the HTTP port holds at most",
                                value=g.limits.max_connections)
        closed = CounterMetricFamily("uldp_http_connections_closed",
                                     "Connections the HTTP port's guard closed or refused",
                                     labels=["reason"])
        for reason, n in g.stats.items():
            if reason != "accepted":
                closed.add_metric([reason], n)
        yield closed
