"""Bounded connections: how many a process may hold, and for how long (invariant 9).

A process has ``RLIMIT_NOFILE`` descriptors; every accepted connection holds one until it
is closed. When they run out, nothing can be opened — not the database, not a health
check, not the next device's connection — and the accept loops of asyncio and grpc-core
log an error per retry. So the caps are fixed at start, before any connection:

* :func:`raise_descriptor_limit` lifts the soft limit to the hard one (systemd's default
  soft limit is 1 024, its hard limit much higher; ``LimitNOFILE`` in the unit raises both);
* :func:`plan_connections` keeps a *reserve* for what is not a client connection — the
  database pool (two descriptors per pooled SQLite connection, one per PostgreSQL one),
  log files, epoll and wake-up descriptors, listening sockets, the shuffler port, and room
  for connections being closed — and shares the rest between the ports (the native gRPC
  port and, when it is served, the HTTP port), never more than :data:`CEILING` per port
  (memory: each connection holds TLS state and buffers);
* :func:`grpc_options` turns the plan into grpc-core channel arguments: the connection cap
  (``grpc.max_allowed_incoming_connections``: a connection over it is closed as soon as it
  is accepted), the handshake timeout (TLS and the HTTP/2 preface: the header time of
  gRPC), streams per connection, idle and maximum connection age (the body time of a
  call is bounded by the age plus its grace), keepalive enforcement and the metadata
  (header) size.

The HTTP port enforces the same plan itself (``uldp.collector.http.guard``). On both
ports :func:`defer_accept` makes the kernel hand over a connection only once its first
bytes arrived (``TCP_DEFER_ACCEPT``, Linux): a client that connects and sends nothing
waits in the kernel, without a descriptor or a slot, while clients that speak (a TLS
handshake starts with the client's first message) are accepted at once. See
``docs/operations.md`` ("Connections and descriptors").
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["CEILING", "DEFER_S", "ConnectionLimits", "defer_accept", "descriptor_reserve",
           "grpc_options", "plan_connections", "raise_descriptor_limit"]

#: TCP_DEFER_ACCEPT: a connection that has sent nothing waits this long in the kernel
#: (the kernel rounds up to its SYN-ACK retransmissions: 1+2+4+8+16 = 31 s) before it is
#: handed over anyway; longer against the header time = a smaller share of the time an
#: idle flood can hold the gRPC port's slots (with ``--grpc-front off``: grpc-core cannot
#: evict them; the front can)
DEFER_S = 30.0
#: at most this many connections per port unless ``--max-connections`` says more
CEILING = 4096
#: descriptors kept besides the database pool (stdio, logs, epoll/eventfd/pipes of
#: grpc-core and asyncio, listening sockets, TLS files, the shuffler port, closing slack)
BASE_RESERVE = 96


@dataclass(frozen=True)
class ConnectionLimits:
    """Connection limits of one process (``uldp collector serve`` / ``uldp shuffler
    serve``); see the module docstring and ``docs/operations.md``."""

    #: client connections the native gRPC port holds at once
    grpc_connections: int = 448
    #: client connections the HTTP port holds at once (0: no HTTP port)
    http_connections: int = 448
    #: seconds from accept (or the end of the previous response) to a complete request
    #: head, TLS handshake included; on gRPC the TLS + HTTP/2 handshake
    header_timeout_s: float = 10.0
    #: seconds from a complete request head to the end of its body (HTTP port)
    body_timeout_s: float = 60.0
    #: request line + headers (HTTP port), metadata (gRPC port), bytes
    max_header_bytes: int = 16384
    #: HTTP/2 streams one gRPC connection may have open
    max_streams: int = 64
    #: a gRPC connection without calls is closed after this long
    idle_timeout_s: float = 300.0
    #: a gRPC connection is asked to go away after this long, and closed ``age_grace_s``
    #: later: the longest any call (its request body included) can take on that port
    max_age_s: float = 1800.0
    age_grace_s: float = 60.0


def raise_descriptor_limit() -> int:
    """Lift the soft ``RLIMIT_NOFILE`` to the hard limit; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20) if soft != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= hard:
        return int(min(soft, hard)) if soft != resource.RLIM_INFINITY else int(hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return int(hard)
    except (ValueError, OSError):  # pragma: no cover - a container forbidding it
        return int(soft)


def descriptor_reserve(db_connections: int = 32) -> int:
    """Descriptors kept for everything that is not a client connection (see the module
    docstring): :data:`BASE_RESERVE` plus two per database connection."""
    return BASE_RESERVE + 2 * db_connections


def plan_connections(nofile: int, *, http: bool, total: int | None = None,
                     reserve: int | None = None, **timeouts: Any) -> ConnectionLimits:
    """The per-port caps for a process with ``nofile`` descriptors: ``total`` client
    connections (default: all the descriptors past the reserve, at most :data:`CEILING`
    per port) shared evenly by the gRPC port and, with ``http``, the HTTP port.
    ``timeouts``: the other :class:`ConnectionLimits` fields. ValueError (naming what to
    change) when ``total`` does not fit in the descriptors or is below 2 per port."""
    keep = descriptor_reserve() if reserve is None else reserve
    room = nofile - keep
    ports = 2 if http else 1
    if total is None:
        if room < 2 * ports:
            raise ValueError(f"only {nofile} file descriptors (RLIMIT_NOFILE) and {keep} are "
                             "kept for the database and the process itself; raise the limit "
                             "(ulimit -n, systemd LimitNOFILE=)")
        total = min(room, CEILING * ports)
    elif total < 2 * ports:
        raise ValueError(f"{total} is below {2 * ports} (at least 2 connections per port)")
    elif total > room:
        raise ValueError(f"{total} connections need more than the {nofile} file descriptors "
                         f"of this process ({keep} are kept for the database and the process "
                         f"itself): give at most {max(room, 0)}, or raise the limit "
                         "(ulimit -n, systemd LimitNOFILE=)")
    per = total // ports
    return ConnectionLimits(grpc_connections=total - per * (ports - 1),
                            http_connections=per if http else 0, **timeouts)


def grpc_options(limits: ConnectionLimits) -> list[tuple[str, Any]]:
    """grpc-core channel arguments of a server port under ``limits``."""
    ms = 1000
    return [
        ("grpc.max_allowed_incoming_connections", limits.grpc_connections),
        ("grpc.server_handshake_timeout_ms", int(limits.header_timeout_s * ms)),
        ("grpc.max_concurrent_streams", limits.max_streams),
        ("grpc.max_connection_idle_ms", int(limits.idle_timeout_s * ms)),
        ("grpc.max_connection_age_ms", int(limits.max_age_s * ms)),
        ("grpc.max_connection_age_grace_ms", int(limits.age_grace_s * ms)),
        ("grpc.max_metadata_size", limits.max_header_bytes),
        # keepalive enforcement: a client pinging more often than every 5 minutes
        # without calls is sent GOAWAY after 2 strikes (grpc-core's defaults, stated)
        ("grpc.http2.min_ping_interval_without_data_ms", 300 * ms),
        ("grpc.http2.max_ping_strikes", 2),
        # the server's own pings find peers that vanished without closing
        ("grpc.keepalive_time_ms", 120 * ms),
        ("grpc.keepalive_timeout_ms", 20 * ms),
    ]


def defer_accept(sock_or_port: socket.socket | int, seconds: float = DEFER_S) -> bool:
    """``TCP_DEFER_ACCEPT`` for ``seconds`` on a listening socket, given as the socket or
    as its port number (grpc-core does not expose its listening sockets: they are found
    among this process's descriptors by port). True if set (Linux only)."""
    opt = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if opt is None:  # pragma: no cover - not Linux
        return False
    secs = max(1, int(seconds + 0.999))
    if isinstance(sock_or_port, socket.socket):
        sock_or_port.setsockopt(socket.IPPROTO_TCP, opt, secs)
        return True
    done = False
    for fd in _socket_fds():
        with contextlib.suppress(OSError), \
                socket.socket(fileno=os.dup(fd)) as s:
            if (s.type == socket.SOCK_STREAM and s.family in (socket.AF_INET, socket.AF_INET6)
                    and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                    and s.getsockname()[1] == sock_or_port):
                s.setsockopt(socket.IPPROTO_TCP, opt, secs)
                done = True
    return done


def _socket_fds() -> list[int]:
    out = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError, ValueError):
                if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                    out.append(int(name))
    return out
