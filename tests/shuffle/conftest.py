"""A shuffle-mode deployment on loopback for the end-to-end tests: a real collector
process (SQLite, TLS, the shuffler port with mutual TLS) and a real shuffler process,
started with the code ``uldp demo --shuffle`` uses (``uldp.collector.shuffler.launch``);
the shuffler also serves its HTTP port (Connect, gRPC-Web)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from uldp.client.transport import Endpoint
from uldp.collector.service.client import AnalystClient
from uldp.collector.shuffler.launch import (
    ShufflePki,
    free_port,
    make_shuffle_pki,
    start_shuffler_process,
)
from uldp.collector.simulation.demo import start_shuffled_collector

#: the web origin the shuffler's HTTP port allows (--cors-origin)
APP_ORIGIN = "https://app.example"
#: the token a scraper presents at the shuffler's GET /metrics (--metrics-token-file)
METRICS_TOKEN = "shuffler-metrics-token-0123456789"


@dataclass
class Deployment:
    work: Path
    sp: ShufflePki
    collector: subprocess.Popen[bytes]
    port: int
    intake: int
    http: int = 0  # the HTTP port (GET /metrics)
    shuffler: subprocess.Popen[bytes] | None = None
    shuffler_port: int = 0
    shuffler_args: list[str] = field(default_factory=list)
    shuffler_http: int = 0  # the shuffler's HTTP port (Connect, gRPC-Web)

    @property
    def db_path(self) -> Path:
        return self.work / "collector.db"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(f"127.0.0.1:{self.port}", self.sp.ca)

    @property
    def shuffler_endpoint(self) -> Endpoint:
        return Endpoint(f"127.0.0.1:{self.shuffler_port}", self.sp.ca)

    def analyst(self) -> AnalystClient:
        return AnalystClient(self.endpoint, (self.sp.pki.directory / "admin.token").read_text())

    def start_shuffler(self, env: dict[str, str] | None = None) -> None:
        self.shuffler, self.shuffler_port = start_shuffler_process(
            self.work, self.sp, f"127.0.0.1:{self.intake}", extra=self.shuffler_args,
            env=env)

    def kill_shuffler(self) -> None:
        assert self.shuffler is not None
        self.shuffler.send_signal(signal.SIGKILL)
        self.shuffler.wait()
        self.shuffler = None

    def stop(self) -> None:
        for p in (self.shuffler, self.collector):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    work = tmp_path_factory.mktemp("shuffle")
    sp = make_shuffle_pki(work)
    http = free_port()
    proc, port, intake = start_shuffled_collector(work, sp, ["--http-port", str(http)])
    shuffler_http = free_port()
    metrics = work / "shuffler-metrics.token"
    metrics.write_text(METRICS_TOKEN + "\n")
    metrics.chmod(0o600)
    d = Deployment(work, sp, proc, port, intake, http,
                   shuffler_args=["--min-batch", "20", "--linger", "0.5", "--max-batch", "400",
                                  "--http-port", str(shuffler_http),
                                  "--cors-origin", APP_ORIGIN,
                                  "--metrics-token-file", str(metrics)],
                   shuffler_http=shuffler_http)
    try:
        d.start_shuffler()
        yield d
    finally:
        d.stop()
