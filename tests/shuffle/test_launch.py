"""``wait_serving``: a server process that hangs at start is not just killed — its threads'
stacks land in its log and in the error first (one once hung for 60 s under CI load with an
empty log, and nothing said where)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from uldp.collector.shuffler.launch import wait_serving


def test_a_start_that_hangs_dumps_its_stacks_into_the_error(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time\ndef stuck_here():\n    time.sleep(120)\n"
                                   "stuck_here()\n"],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    with pytest.raises(TimeoutError) as e:
        wait_serving(proc, tmp_path / "never.ready", log_path, tmp_path / "ca.pem", "server",
                     timeout_s=1.0)
    assert proc.poll() is not None  # it does not outlive the error
    assert "server did not start in 1 s" in str(e.value)
    assert "stuck_here" in str(e.value)  # the hung frame, from faulthandler's dump
    assert "stuck_here" in log_path.read_text()
