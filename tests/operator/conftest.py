"""Fixtures of the operator tests (issue 12); helpers in ``opcli.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opcli import Running, start_serve, stop_serve, uldp


@pytest.fixture(scope="session")
def pki_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("op") / "pki"
    r = uldp("collector", "certs", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def collector(pki_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    c = start_serve(pki_dir, tmp_path_factory.mktemp("collector"))
    yield c
    assert stop_serve(c) == 0  # graceful stop on SIGTERM
