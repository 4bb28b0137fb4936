"""Fixtures of the service tests: dev PKI, real collectors on loopback (in-process or as
subprocesses), a real PostgreSQL started from the local binaries, and fleets.

PostgreSQL: ``initdb``/``pg_ctl``/``postgres`` are looked up on PATH and in
/usr/local/bin and /usr/lib/postgresql/*/bin; tests marked ``postgres`` are skipped with
the reason when they are absent — except under ``CI=true``, where
``scripts/ensure-postgres.sh`` installs them (as root) and a PostgreSQL that is still
missing **fails** the run: CI never passes without the PostgreSQL tests. As root, the
server runs as the ``postgres`` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import grpc
import pytest

from tests.service.spawn import with_nofile
from uldp.client.transport import Endpoint, secure_channel
from uldp.collector.http import HttpConfig, HttpFront, attach_front
from uldp.collector.security.certs import DevPki, make_dev_pki
from uldp.collector.service.client import AnalystClient
from uldp.collector.service.core import CoreConfig
from uldp.collector.service.server import CollectorServer, ServerConfig
from uldp.collector.storage import open_database
from uldp.collector.storage.db import Database

ADMIN_TOKEN = "test-admin-token-0123456789abcdef"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    d = tmp_path_factory.mktemp("pki")
    p = make_dev_pki(d)
    (d / "admin.token").write_text(ADMIN_TOKEN + "\n")
    return p


@dataclass
class Collector:
    """A running collector (in-process server or subprocess) and clients for it."""

    port: int
    db_url: str
    pki: DevPki
    server: CollectorServer | None = None
    proc: subprocess.Popen[bytes] | None = None
    front: HttpFront | None = None
    http_port: int = 0  # the HTTP port (Connect, gRPC-Web), when started with http=True

    @property
    def http_url(self) -> str:
        return f"https://127.0.0.1:{self.http_port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.target, self.pki.ca_cert)

    def analyst(self) -> AnalystClient:
        return AnalystClient(self.endpoint, ADMIN_TOKEN)

    def channel(self) -> grpc.Channel:
        return secure_channel(self.endpoint)

    def stop(self) -> None:
        if self.front is not None:
            self.front.stop(grace=1.0)
            self.front = None
        if self.server is not None:
            self.server.stop(grace=1.0)
            self.server = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collector_argv(pki: DevPki, db_url: str, port: int, *, name: str,
                   server_mode: str = "aio", allow_simulated: bool = True,
                   extra_args: list[str] | None = None) -> list[str]:
    """The command line of a subprocess collector (``launch_collector``)."""
    return [sys.executable, "-m", "uldp.collector.cli.service", "collector", "serve",
            "--db", db_url, "--port", str(port), "--tls-dir", str(pki.directory),
            "--log-level", "info", "--name", name, "--server-mode", server_mode,
            *(["--allow-simulated"] if allow_simulated else []), *(extra_args or [])]


def start_process(cmd: list[str], log: IO[bytes], env: dict[str, str],
                  nofile: int | None) -> subprocess.Popen[bytes]:
    """``cmd`` as a process writing to ``log``, with RLIMIT_NOFILE = ``nofile`` (None: this
    process's). No ``preexec_fn``: a fork() of this process, which runs gRPC, can abort the
    child before its exec (``tests/service/spawn.py``, grpc/grpc#43055)."""
    return subprocess.Popen(with_nofile(cmd, nofile), stdout=log, stderr=subprocess.STDOUT,
                            env=env)


def launch_collector(pki: DevPki, workdir: Path, db_url: str | None = None, *,
                     subprocess_: bool = False, port: int = 0, name: str | None = None,
                     extra_args: list[str] | None = None, server_mode: str = "aio",
                     env: dict[str, str] | None = None, http: bool = False,
                     cors_origins: tuple[str, ...] = (), http_port: int = 0,
                     server: dict[str, object] | None = None,
                     http_config: dict[str, object] | None = None,
                     nofile: int | None = None, **core_kw: object) -> Collector:
    """Start a collector on 127.0.0.1 (in-process, or ``uldp collector serve`` as a
    subprocess with ``env`` added to its environment); the caller stops it. ``http``:
    also the HTTP port (Connect, gRPC-Web; ``cors_origins`` allowed).

    Test collectors accept reports marked simulated (the fleets' seeded devices) unless
    ``allow_simulated=False`` is given. ``server``: further ``ServerConfig`` fields of an
    in-process collector (e.g. ``max_message_bytes``); ``http_config``: further
    ``HttpConfig`` fields of its HTTP port (e.g. ``limits``, ``trusted_proxies``);
    ``nofile``: the subprocess's RLIMIT_NOFILE (soft and hard)."""
    url = db_url or f"sqlite:///{workdir / 'collector.db'}"
    allow_simulated = bool(core_kw.setdefault("allow_simulated", True))
    if not subprocess_:
        cfg = ServerConfig(db_url=url, tls_cert=pki.server_cert, tls_key=pki.server_key,
                           port=port, admin_token_file=pki.directory / "admin.token",
                           name=name, mode=server_mode, **(server or {}),  # type: ignore[arg-type]
                           core=CoreConfig(**core_kw))  # type: ignore[arg-type]
        srv = CollectorServer(cfg)
        srv.start()
        c = Collector(srv.port, url, pki, server=srv)
        if http:
            c.front = attach_front(srv.core, srv.executor, HttpConfig(
                pki.server_cert, pki.server_key, port=http_port,
                cors_origins=frozenset(cors_origins), **(http_config or {})))
            c.front.start()
            c.http_port = c.front.port
        return c
    port = port or _free_port()
    if http:
        http_port = http_port or _free_port()
        extra_args = [*(extra_args or []), "--http-port", str(http_port),
                      *[x for o in cors_origins for x in ("--cors-origin", o)]]
    log = open(workdir / f"collector-{port}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
    cmd = collector_argv(pki, url, port, name=name or f"proc-{port}", server_mode=server_mode,
                         allow_simulated=allow_simulated, extra_args=extra_args)
    proc = start_process(cmd, log, {**os.environ, **(env or {})}, nofile)
    log.close()
    c = Collector(port, url, pki, proc=proc, http_port=http_port)
    try:
        _wait_healthy(c, proc)
        if http:
            wait_http_healthy(c, proc)
    except Exception:
        c.stop()
        raise
    return c


@pytest.fixture
def start_collector(pki: DevPki, tmp_path: Path) -> Iterator:
    """Factory fixture: ``start_collector(db_url=None, subprocess_=False, port=0, ...)``;
    every collector it started is stopped at teardown."""
    started: list[Collector] = []

    def start(db_url: str | None = None, **kw: object) -> Collector:
        c = launch_collector(pki, tmp_path, db_url, **kw)  # type: ignore[arg-type]
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


def _wait_healthy(c: Collector, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    """Wait for SERVING. The limits are for a heavily loaded machine, where starting the
    interpreter and the TLS handshake alone can take many seconds: each attempt's deadline
    grows (1 s, 2 s, ... 10 s) so a slow handshake is not cut off again and again."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    end = time.monotonic() + timeout
    per_try = 1.0
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"collector exited with {proc.returncode}")
        try:
            with c.channel() as ch:
                r = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(),
                    timeout=max(0.1, min(per_try, end - time.monotonic())))
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.RpcError:
            per_try = min(per_try + 1.0, 10.0)
            time.sleep(0.1)
    raise TimeoutError("collector did not become healthy")


def wait_http_healthy(c: Collector, proc: subprocess.Popen[bytes] | None = None,
                      timeout: float = 60) -> None:
    """Wait until ``GET /healthz`` on the HTTP port answers 200."""
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(c.pki.ca_cert))
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"collector exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(c.http_url + "/healthz", context=ctx,
                                        timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError("the HTTP port did not become healthy")


# ---- PostgreSQL ----------------------------------------------------------------------------
def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for cand in [f"/usr/local/bin/{name}", *sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))]:
        if os.access(cand, os.X_OK):
            return cand
    return None


@dataclass
class Postgres:
    port: int
    root: Path

    def url(self, db: str) -> str:
        return f"postgresql+psycopg://uldp@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=uldp dbname=postgres",
                             autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def in_ci() -> bool:
    """``CI=true`` (the project's CI, .ci/run): a missing prerequisite fails, never skips."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing_prerequisite(reason: str) -> None:
    """Skip with ``reason`` on a developer's machine; fail under CI (``in_ci``)."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a missing prerequisite fails the run instead of "
                    "skipping its tests)", pytrace=False)
    pytest.skip(reason)


def _pg_binaries() -> tuple[str | None, str | None, str | None]:
    found = _pg_bin("initdb"), _pg_bin("pg_ctl"), _pg_bin("postgres")
    if all(found) or not in_ci():
        return found
    script = Path(__file__).resolve().parents[2] / "scripts" / "ensure-postgres.sh"
    subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900)
    return _pg_bin("initdb"), _pg_bin("pg_ctl"), _pg_bin("postgres")


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    initdb, pg_ctl, postgres_bin = _pg_binaries()
    if not (initdb and pg_ctl and postgres_bin):
        missing_prerequisite("PostgreSQL binaries (initdb, pg_ctl, postgres) not found on "
                             "PATH, /usr/local/bin or /usr/lib/postgresql/*/bin (Debian: "
                             "apt-get install postgresql; scripts/ensure-postgres.sh)")
    # directly under /tmp: the pytest temp tree is private to root, PostgreSQL may not be
    root = Path(tempfile.mkdtemp(prefix="uldp-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        try:
            import pwd
            pwd.getpwnam("postgres")
        except KeyError:
            missing_prerequisite("running as root and there is no 'postgres' user to run "
                                 "PostgreSQL")
        if not runuser:
            missing_prerequisite("running as root and runuser is missing")
        prefix = [runuser, "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data = root / "data"
    port = _free_port()
    r = subprocess.run([*prefix, initdb, "-D", str(data), "-U", "uldp", "--auth=trust", "-E",
                        "UTF8", "--no-sync"], capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {r.stderr or r.stdout}")
    # fsync=off: the tests crash the collector, never PostgreSQL itself (speed only)
    opts = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200 -c shared_buffers=128MB")
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-o", opts, "-l", str(root / "log"),
                    "-w", "start"], check=True, capture_output=True)
    try:
        yield Postgres(port, root)
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def launcher():
    """``launch_collector`` itself, for module-scoped fixtures that manage their own."""
    return launch_collector


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated collector database, once on a SQLite file and once on PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 's.db'}"
    else:
        url = request.getfixturevalue("postgres").new_database()
    d = open_database(url)
    yield d
    d.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A collector database URL: once a SQLite file, once a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'collector.db'}"
    return request.getfixturevalue("postgres").new_database()
