"""A bench stopped by its outer ``timeout`` (SIGTERM) stops the PostgreSQL it started:
``bench/ingest.py``'s ``local_postgres`` turns SIGTERM into ``SystemExit`` while it holds a
server, so its ``finally`` (``pg_ctl stop``, remove the directory) runs."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .conftest import Postgres

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPT = f"""
import sys, time
sys.path.insert(0, {str(BENCH)!r})
import ingest
with ingest.local_postgres() as pg:
    print(pg.port, flush=True)
    time.sleep(120)
"""


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_bench_stopped_by_sigterm_stops_its_postgres(postgres: Postgres) -> None:
    # ``postgres`` only makes sure the binaries are there (installed under CI).
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        assert _accepts(port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while _accepts(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _accepts(port), "the bench's PostgreSQL outlived the bench"
