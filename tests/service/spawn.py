"""Starting a server process from a process that runs gRPC, with a lower descriptor limit
(the test harness's subprocess collectors, ``bench/connection_flood.py``).

Never ``subprocess.Popen(..., preexec_fn=...)`` here: a ``preexec_fn`` makes Python
``fork()`` (not ``vfork()``), and a ``fork()`` of a process with live gRPC threads runs
grpc-core's fork handlers, which restart its EventEngine poller thread **in the child**.
The child then closes every inherited descriptor before ``exec`` (``close_fds``), the
poller's epoll descriptor among them, and the restarted poller aborts the child:
``Epoll1Poller ... epoll_wait error: Bad file descriptor``, SIGABRT, before the server's
first line of Python (grpc/grpc#43055; grpcio 1.80 to at least 1.85). The test harness
lowered ``RLIMIT_NOFILE`` that way (every subprocess collector, limit or not), and CI
lost collector starts to it (``bench/collector_starts.py`` counts them).

:func:`with_nofile` sets the limit in a fresh interpreter that then ``exec``\\ s the
command instead: the caller's ``Popen`` needs no ``preexec_fn``, so Python starts the
child with ``vfork()``, which runs no fork handlers, and the process keeps its pid.
"""

from __future__ import annotations

import sys

__all__ = ["with_nofile"]

#: the whole program of the interim interpreter: the limit, then the command in its place
_LIMIT_THEN_EXEC = ("import os, resource, sys; n = int(sys.argv[1]); "
                    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                    "os.execvp(sys.argv[2], sys.argv[2:])")


def with_nofile(cmd: list[str], nofile: int | None) -> list[str]:
    """``cmd`` started with RLIMIT_NOFILE = ``nofile`` (soft and hard; None: ``cmd``
    unchanged), through an interim interpreter (``-I -S``: no site packages, no PYTHON*
    variables, ~10 ms) that sets the limit and execs ``cmd`` with the same environment."""
    if nofile is None:
        return list(cmd)
    if nofile < 1:
        raise ValueError(f"nofile must be positive, got {nofile}")
    return [sys.executable, "-I", "-S", "-c", _LIMIT_THEN_EXEC, str(int(nofile)), *cmd]
