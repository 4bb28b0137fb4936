"""Copying an admitted connection of the gRPC front in two threads of its own (issue 28;
``docs/operations.md``, "Connections and descriptors").

Once :class:`uldp.collector.service.grpc_front.GrpcFront` has seen a connection past its
TLS handshake it never evicts it, so nothing needs the event loop's view of it any more:
:func:`relay` hands its two blocking sockets to two threads, one per direction, each a
``recv_into`` / ``sendall`` loop. No selector wake-up, callback or buffer object per
chunk (``bench/connection_flood.py --overhead``: 80–100 against 120–200 µs of the front's
CPU per report on the loop), and the kernel's socket buffers are the back-pressure.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

__all__ = ["RELAY_THREAD", "name_os_thread", "relay"]

#: the relay threads' name, also as the operating system names them (``top -H``, /proc)
RELAY_THREAD = "uldp-grpc-relay"
#: bytes one ``recv_into`` reads at most
CHUNK = 65536


def name_os_thread(name: str) -> None:
    """Name the calling thread for the OS (Linux ``prctl(PR_SET_NAME)``; Python 3.11 names
    threads for itself only); nothing elsewhere."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)


def relay(a: socket.socket, b: socket.socket, owed_b: bytes, owed_a: bytes,
          done: Callable[[], None]) -> None:
    """Copy ``a`` to ``b`` and ``b`` to ``a`` (blocking sockets) in two daemon threads,
    after writing first what was already owed to each (``owed_b`` to ``b``, ``owed_a`` to
    ``a``). When either side ends or fails, both sockets are shut down (which wakes the
    other thread); the last thread out closes them and calls ``done`` once. Shutting
    either socket down from elsewhere ends the relay the same way."""
    lock = threading.Lock()
    left = [2]

    def pump(src: socket.socket, dst: socket.socket, owed: bytes) -> None:
        name_os_thread(RELAY_THREAD)
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        try:
            if owed:
                dst.sendall(owed)
            recv, send = src.recv_into, dst.sendall
            while n := recv(buf):
                send(view[:n])
        except OSError:
            pass
        finally:
            for sk in (src, dst):
                with contextlib.suppress(OSError):
                    sk.shutdown(socket.SHUT_RDWR)
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                src.close()
                dst.close()
                done()
    for src, dst, owed in ((a, b, owed_b), (b, a, owed_a)):
        threading.Thread(target=pump, args=(src, dst, owed), name=RELAY_THREAD,
                         daemon=True).start()
