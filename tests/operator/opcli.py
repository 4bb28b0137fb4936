"""Helpers of the operator tests (issue 12): the ``uldp`` CLI as a real subprocess and a
collector started by ``uldp collector serve --ready-file`` (waited for through its ready
file, never by sleeping a fixed time)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def uldp(*args: str, env: dict[str, str] | None = None, cwd: Path | str | None = None,
         timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``uldp ARGS`` in a fresh interpreter; stdout/stderr captured (not a terminal)."""
    return subprocess.run([sys.executable, "-m", "uldp.collector.cli", *args],
                          env={**os.environ, **(env or {})}, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, input=stdin)


def one_line_error(r: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> str:
    """Assert the operator-error contract: exit code, no traceback, one line on stderr
    naming what is wrong."""
    err = r.stderr.strip()
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert len(err.splitlines()) == 1, r.stderr
    for n in needles:
        assert n in err, (n, err)
    return err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    target: str
    pki: Path
    db: Path
    proc: subprocess.Popen[bytes]

    def conn(self, admin: bool = True) -> list[str]:
        a = ["--target", self.target, "--ca", str(self.pki / "ca.pem")]
        return a + (["--admin-token-file", str(self.pki / "admin.token")] if admin else [])


def start_serve(pki: Path, workdir: Path, *extra: str, timeout: float = 120) -> Running:
    """``uldp collector serve`` on a free loopback port; returns once its ready file
    exists (the server answers by then)."""
    ready = workdir / "collector.ready"
    db = workdir / "collector.db"
    log = open(workdir / "collector.log", "wb")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "uldp.collector.cli", "collector", "serve", "--db", str(db),
         "--tls-dir", str(pki), "--port", "0", "--ready-file", str(ready),
         "--log-level", "warning", "--allow-simulated", *extra], stdout=log,
        stderr=subprocess.STDOUT)
    log.close()
    end = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"collector exited {proc.returncode}: "
                               f"{(workdir / 'collector.log').read_text()}")
        if time.monotonic() > end:
            proc.kill()
            raise TimeoutError("collector did not write its ready file")
        time.sleep(0.05)
    return Running(ready.read_text().strip(), pki, db, proc)


def stop_serve(c: Running) -> int:
    if c.proc.poll() is None:
        c.proc.send_signal(signal.SIGTERM)
        try:
            return c.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait()
    return int(c.proc.returncode)


