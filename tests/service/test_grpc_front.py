"""The native gRPC port's front (``uldp.collector.service.grpc_front``) on real loopback
sockets, with an echo server standing in for grpc-core (the front never reads inside
TLS: it only walks record headers). A client is a socket that sends a TLS record header
and body; ``127.0.0.2`` is a second address on Linux's loopback."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from uldp.collector.service import grpc_front
from uldp.collector.service.grpc_front import FrontLimits, GrpcFront

HELLO = b"\x16\x03\x01\x00\x40" + bytes(64)     # a handshake record (a ClientHello's size)
APP = b"\x17\x03\x03\x00\x05" + b"hello"       # an application-data record: proven
OTHER = "127.0.0.2"


class Echo:
    """grpc-core's stand-in on an abstract unix socket: echoes, and remembers the peer
    name of each connection as grpc-core would give it."""

    def __init__(self) -> None:
        self.name = grpc_front.inner_address()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + self.name)
        self.sock.listen(64)
        self.peers: list[str] = []
        self.conns: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            self.peers.append("unix-abstract:" + addr.lstrip(b"\0").decode()
                              if isinstance(addr, bytes) else
                              "unix-abstract:" + addr.lstrip("\0"))
            self.conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)

    def close_connections(self) -> None:
        """End every accepted connection (grpc-core closing its side)."""
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def front(request) -> Iterator[tuple[GrpcFront, Echo]]:  # type: ignore[no-untyped-def]
    echo = Echo()
    f = GrpcFront("127.0.0.1", 0, echo.name, FrontLimits(max_fds=12, handshake_s=2.0,
                                                         per_peer=3),
                  relay=getattr(request, "param", "threads"))
    f.start()
    yield f, echo
    f.stop()
    echo.close()


def connect(port: int, first: bytes = b"", source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5,
                                 source_address=(source, 0))
    if first:
        s.sendall(first)
    return s


def read_exactly(s: socket.socket, n: int, timeout: float = 5.0) -> bytes:
    s.settimeout(timeout)
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def is_closed(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def wait_for(cond, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("front", grpc_front.RELAYS, indirect=True)
def test_bytes_pass_unchanged_and_the_core_learns_the_clients_address(front):
    f, echo = front
    with connect(f.port, HELLO + APP, source=OTHER) as s:
        assert read_exactly(s, len(HELLO + APP)) == HELLO + APP
        big = APP * 40_000  # 400 KB: past the high-water mark, back-pressure on the way
        threading.Thread(target=s.sendall, args=(big,), daemon=True).start()
        assert read_exactly(s, len(big), timeout=20) == big
        assert wait_for(lambda: f.stats["proven"] == 1)
        name = echo.peers[-1]
        client = s.getsockname()
        assert grpc_front._PEERS[name] == f"ipv4:{OTHER}:{client[1]}"

        class Ctx:
            def peer(self) -> str:
                return name
        assert grpc_front.peer_of(Ctx()) == f"ipv4:{OTHER}:{client[1]}"
    assert wait_for(lambda: name not in grpc_front._PEERS and f.fds == 0)


def _relays() -> int:
    return sum(t.name == grpc_front.RELAY_THREAD for t in threading.enumerate())


def test_a_relayed_connection_ends_with_either_side_and_with_the_front(front):
    """A proven connection is copied by two threads of its own: they end, and its
    descriptors are given back, when the client leaves, when grpc-core's side ends, and
    when the front stops."""
    f, echo = front
    before = _relays()
    s = connect(f.port, HELLO + APP)
    assert read_exactly(s, len(HELLO + APP)) == HELLO + APP
    assert wait_for(lambda: f.stats["proven"] == 1 and _relays() == before + 2)
    s.close()  # the client leaves
    assert wait_for(lambda: f.fds == 0 and _relays() == before and not f.proven)
    with connect(f.port, HELLO + APP) as s:  # grpc-core's side ends: the client sees it
        assert read_exactly(s, len(HELLO + APP)) == HELLO + APP
        assert wait_for(lambda: f.stats["proven"] == 2)
        echo.close_connections()
        assert is_closed(s)
        assert wait_for(lambda: f.fds == 0 and _relays() == before)
    s = connect(f.port, HELLO + APP)  # the front stops under a proven connection
    assert read_exactly(s, len(HELLO + APP)) == HELLO + APP
    assert wait_for(lambda: _relays() == before + 2)
    f.stop()
    assert is_closed(s) and wait_for(lambda: _relays() == before)
    s.close()


def test_wake_ups_queued_before_the_relay_leave_its_sockets_alone(front):
    """One selector pass can queue a read of both sides; if the first hands the connection
    to the relay threads, the later callbacks must not read (its sockets are blocking now:
    the loop would hang, or steal the relay's bytes) nor register it again."""
    f, _ = front
    with connect(f.port, HELLO + APP) as s:
        assert read_exactly(s, len(HELLO + APP)) == HELLO + APP
        assert wait_for(lambda: len(f.proven) == 1)
        (c,) = list(f.proven)
        assert c.relayed

        def stale() -> None:
            f._on_client(c)
            f._on_upstream(c)
            f._on_writable(c, c.up, bytearray(b"x"), c.sock)
            f._on_connected(c)
        t0 = time.monotonic()
        f._call(stale)
        assert time.monotonic() - t0 < 5.0  # did not block the front's loop
        selector = f.loop._selector  # type: ignore[attr-defined]
        assert all(selector.get_map().get(sk.fileno()) is None for sk in (c.sock, c.up))
        s.sendall(APP)  # the relay still owns the stream: nothing stolen or reordered
        assert read_exactly(s, len(APP)) == APP


def test_anything_but_a_tls_handshake_record_is_closed_at_once(front):
    f, _ = front
    for first in (b"GET / HTTP/1.1\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                  b"\x16\x02", b"\x16\x03\x01\xff\xff"):  # bad version, record too large
        with connect(f.port, first) as s:
            assert is_closed(s, 2.0), first
    assert wait_for(lambda: f.stats["not_tls"] == 4 and f.fds == 0)


def test_slow_openings_are_evicted_for_a_new_client_and_time_out(front):
    f, _ = front
    slow = [connect(f.port, b"\x16", source=f"127.0.0.{10 + i}") for i in range(12)]
    assert wait_for(lambda: f.fds == 12)
    with connect(f.port, HELLO + APP) as s:  # at the cap: the oldest slow one makes room
        assert read_exactly(s, len(HELLO + APP)) == HELLO + APP
        assert is_closed(slow[0]) and is_closed(slow[1]) and is_closed(slow[2])
        assert wait_for(lambda: f.stats["evicted"] == 3)  # 1 fd each; a forwarded one: 3
        # the handshake time closes the rest; the proven connection stays
        assert all(is_closed(x, 6.0) for x in slow[3:])
        assert wait_for(lambda: f.stats["timeout"] == 9 and f.fds == 3)
        s.sendall(APP)
        assert read_exactly(s, len(APP)) == APP
    for x in slow:
        x.close()


def test_one_address_holds_few_unproven_connections_and_evicts_its_own(front):
    f, _ = front
    own = [connect(f.port, b"\x16\x03", source=OTHER) for _ in range(3)]
    assert wait_for(lambda: f.fds == 3)
    mine = connect(f.port, HELLO)  # handshaking, from the other address: untouched
    assert wait_for(lambda: f.fds == 6)
    late = connect(f.port, b"\x16", source=OTHER)
    assert is_closed(own[0]) and not is_closed(own[1], 0.3)
    assert wait_for(lambda: f.stats["evicted_per_peer"] == 1) and f.stats["evicted"] == 0
    mine.sendall(APP)
    assert read_exactly(mine, len(HELLO + APP)) == HELLO + APP
    for x in (*own, mine, late):
        x.close()


def test_proven_connections_are_never_evicted_a_newcomer_is_refused(front):
    f, _ = front
    kept = [connect(f.port, HELLO + APP, source=f"127.0.0.{20 + i}") for i in range(4)]
    for s in kept:
        assert read_exactly(s, len(HELLO + APP)) == HELLO + APP
    assert wait_for(lambda: f.fds == 12 and f.stats["proven"] == 4)
    with connect(f.port, HELLO) as s:
        assert is_closed(s)
    assert wait_for(lambda: f.stats["refused"] == 1)
    for s in kept:
        s.sendall(APP)
        assert read_exactly(s, len(APP)) == APP
        s.close()


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_a_servicer_sees_the_clients_address_behind_the_front(start_collector, mode,
                                                               caplog):
    """Through a real collector (both server kinds): an undecodable call is logged with
    the client's own address (``peer_of``), the one the per-address enrolment limit
    keys on, and never the front's end towards grpc-core."""
    import logging

    import grpc

    c = start_collector(server_mode=mode)
    assert c.server.front is not None and c.server.front.port == c.port
    with c.channel() as ch, caplog.at_level(logging.INFO):
        with pytest.raises(grpc.RpcError) as ei:
            ch.unary_unary("/uldp.v1.DeviceService/Enroll")(b"\xff\xff\xff", timeout=30)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        (front_end, client), = grpc_front._PEERS.items()
    line, = [r.getMessage() for r in caplog.records if "undecodable" in r.getMessage()]
    assert f"from {client} " in line and front_end not in line, (line, front_end)


def test_an_unknown_relay_is_refused_before_the_port_is_bound():
    with pytest.raises(ValueError, match="relay must be one of threads, loop"):
        GrpcFront("127.0.0.1", 0, "x", FrontLimits(), relay="splice")
