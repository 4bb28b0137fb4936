"""Assembling and running the collector's gRPC server (``uldp collector serve``).

Every port is TLS (server certificate + key; optional client CA for mutual TLS). The
server exposes ``uldp.v1.DeviceService``, ``uldp.v1.AnalystService``, the standard
``grpc.health.v1.Health`` service and server reflection (``grpc.reflection.v1`` and
``v1alpha``), with message size limits in both directions and bounded connections
(``uldp.collector.service.connections``: a cap from the descriptor limit, handshake
timeout, streams per connection, idle and maximum age, keepalive enforcement, metadata
size). Every service is registered
through ``uldp.collector.service.handlers``: an undecodable request gets
INVALID_ARGUMENT and one WARNING log line, never an ERROR traceback. State lives in the
database only, so any number of replicas can serve one PostgreSQL database and a
restarted process resumes every query.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import secrets
import signal
import sys
import threading
from concurrent import futures
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from uldp.client.wire import (
    DEFAULT_MAX_MESSAGE_BYTES,
    SERVICE_NAMES,
    analyst_pb2,
    device_pb2,
)
from uldp.collector.observe import instrument, metrics_of
from uldp.collector.security.tokens import AdminAuth, TokenKey, new_admin_token
from uldp.collector.service.connections import (
    ConnectionLimits,
    defer_accept,
    grpc_options,
    plan_connections,
    raise_descriptor_limit,
)
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.grpc_front import (
    FORWARDED_FDS,
    FrontLimits,
    GrpcFront,
    inner_address,
)
from uldp.collector.service.handlers import add_service
from uldp.collector.service.reflection import add_reflection
from uldp.collector.service.servicers import (
    AnalystServicer,
    AsyncAnalystServicer,
    AsyncDeviceServicer,
    DeviceServicer,
)
from uldp.collector.storage.db import Database, open_database

__all__ = ["CollectorServer", "ServerConfig", "load_admin_token", "load_token_key"]

log = logging.getLogger("uldp.collector")

_DEVICE = device_pb2.DESCRIPTOR.services_by_name["DeviceService"]
_ANALYST = analyst_pb2.DESCRIPTOR.services_by_name["AnalystService"]
_HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"]


@dataclass
class ServerConfig:
    """Everything ``uldp collector serve`` needs (see its --help for each flag)."""

    db_url: str
    tls_cert: Path
    tls_key: Path
    host: str = "127.0.0.1"
    port: int = 50051
    tls_client_ca: Path | None = None  # set -> mutual TLS (clients must present a cert)
    admin_token_file: Path | None = None
    token_key_file: Path | None = None
    enrollment_secret_file: Path | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    workers: int = 32
    reuse_port: bool = False  # share the port with sibling processes (--processes)
    #: "aio": grpc.aio server, device calls on an event loop (default, fewer threads);
    #: "threads": classic grpc.server with one thread per in-flight call
    mode: str = "aio"
    name: str | None = None
    core: CoreConfig = field(default_factory=CoreConfig)
    #: shuffle mode: the shuffler port (mutual TLS against ``shuffler_ca``, client
    #: certificate name ``shuffler_name``; uldp.collector.service.intake); None: no port
    shuffler_port: int | None = None
    shuffler_ca: Path | None = None
    shuffler_name: str = "uldp-shuffler"
    #: connection limits of the ports (None: planned from the descriptor limit, with
    #: room for an HTTP port)
    connections: ConnectionLimits | None = None
    #: the gRPC port's front (``uldp.collector.service.grpc_front``: admission, eviction
    #: of slow handshakes, per-address caps; grpc-core behind it on loopback); False:
    #: grpc-core listens on the port itself (e.g. behind a load balancer that does this)
    grpc_front: bool = True
    #: how the front copies a proven connection's bytes (``grpc_front.RELAYS``): in two
    #: threads of its own (default, least CPU per report) or on the front's event loop
    grpc_front_relay: str = "threads"


def load_token_key(db: Database, path: Path | None) -> TokenKey:
    """The device-token signing key: from ``path`` (PEM), else the database-managed key."""
    if path is not None:
        return TokenKey.from_file(path)
    pem = db.get_or_create_meta("token_signing_key",
                                lambda: TokenKey.generate().private_pem().decode())
    return TokenKey.from_pem(pem.encode())


def load_admin_token(path: Path) -> AdminAuth:
    """The admin credential in ``path``; a fresh one is written (0600) if it is missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x") as f:
            f.write(new_admin_token() + "\n")
        path.chmod(0o600)
        log.warning("wrote a new admin token to %s", path)
    return AdminAuth.from_file(path)


class CollectorServer:
    """A running collector process: database, core logic and the gRPC server."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        # Thread-pool mode: handler threads are CPU-bound while the writer thread releases
        # the GIL for every SQLite call; a short switch interval keeps the writer from
        # starving (convoy). The asyncio mode has few threads and keeps the default
        # interval (fewer GIL hand-offs, fewer futex calls per report).
        if config.mode == "threads":
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self.db = open_database(config.db_url)
        core_cfg = replace(config.core, max_message_bytes=config.max_message_bytes)
        if config.enrollment_secret_file is not None:
            secret = Path(config.enrollment_secret_file).read_text().strip()
            core_cfg = CoreConfig(**{**core_cfg.__dict__, "enrollment_secret": secret})
        admin_path = config.admin_token_file or config.tls_cert.parent / "admin.token"
        self.core = CollectorCore(self.db, load_token_key(self.db, config.token_key_file),
                                  load_admin_token(Path(admin_path)), core_cfg,
                                  name=config.name or f"collector-{secrets.token_hex(4)}")
        self.limits = config.connections or plan_connections(raise_descriptor_limit(),
                                                             http=True)
        options = self._core_options(config)
        client_ca = (Path(config.tls_client_ca).read_bytes()
                     if config.tls_client_ca is not None else None)
        creds = grpc.ssl_server_credentials(
            [(Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes())],
            root_certificates=client_ca, require_client_auth=client_ca is not None)
        self._names = (*SERVICE_NAMES, _HEALTH.full_name)
        self._pool = futures.ThreadPoolExecutor(max_workers=config.workers,
                                                thread_name_prefix="uldp-rpc")
        if config.mode not in ("aio", "threads"):
            raise ValueError(f"server mode must be aio or threads, got {config.mode!r}")
        self._loop: asyncio.AbstractEventLoop | None = None
        if config.mode == "threads":
            self.server = grpc.server(self._pool, options=options,
                                      maximum_concurrent_rpcs=config.workers * 64)
            m = metrics_of(self.core)
            device = DeviceServicer(self.core)
            add_service(self.server, instrument(device, _DEVICE, m, "grpc"), _DEVICE,
                        batch_cap=device.logic.cap)
            add_service(self.server, instrument(AnalystServicer(self.core), _ANALYST, m,
                                                "grpc"), _ANALYST)
            self.health = health.HealthServicer()
            add_service(self.server, self.health, _HEALTH)
            add_reflection(self.server, self._names, aio=False)
            self.port = self.server.add_secure_port(self._core_address, creds)
        else:
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever,
                                                 name="uldp-aio", daemon=True)
            self._loop_thread.start()
            self.port = self._on_loop(self._build_aio(options, creds))
        if self.port == 0:
            raise OSError(f"cannot listen on {self._core_address}")
        self.front = self._front(config)
        if self.front is not None:
            self.port = self.front.port
        self._stopped = threading.Event()
        self.intake = self._intake(config)

    def _front(self, config: ServerConfig) -> GrpcFront | None:
        """The gRPC port's front (``uldp.collector.service.grpc_front``), or None. It runs
        an event loop in a thread of its own, not on the aio server's: a flood's churn
        then never holds up the servicers (measured: new connections during a one-byte
        flood answered in a third of the time)."""
        if not config.grpc_front:
            return None
        return GrpcFront(config.host, config.port, self._inner,
                         FrontLimits(max_fds=self.limits.grpc_connections,
                                     handshake_s=self.limits.header_timeout_s),
                         reuse_port=config.reuse_port, relay=config.grpc_front_relay)

    def _core_options(self, config: ServerConfig) -> list[tuple[str, Any]]:
        """grpc-core's channel arguments, and where it listens (``_core_address``): the
        port itself, or an abstract unix socket behind the front — where it holds one
        descriptor of the three of each forwarded connection, and only forwarded ones
        reach it."""
        front = config.grpc_front
        core_limits = (replace(self.limits, grpc_connections=self.limits.grpc_connections
                               // FORWARDED_FDS + 8) if front else self.limits)
        self._inner = inner_address() if front else ""
        self._core_address = (f"unix-abstract:{self._inner}" if front
                              else f"{config.host}:{config.port}")
        return [("grpc.max_receive_message_length", config.max_message_bytes),
                ("grpc.max_send_message_length", config.max_message_bytes),
                ("grpc.so_reuseport", 1 if config.reuse_port and not front else 0),
                *grpc_options(core_limits)]

    @property
    def executor(self) -> futures.ThreadPoolExecutor:
        """The thread pool of database reads and analyst calls (shared with the HTTP
        port, ``uldp.collector.http``)."""
        return self._pool

    def _intake(self, config: ServerConfig) -> Any:
        """Shuffle mode: the shuffler port (``uldp.collector.service.intake``), or None."""
        if config.shuffler_port is None:
            return None
        from uldp.collector.service.intake import IntakeServer
        if config.shuffler_ca is None:
            raise ValueError("a shuffler port needs the shuffler's CA (--shuffler-ca)")
        return IntakeServer(self.core, host=config.host, port=config.shuffler_port,
                            tls_cert=config.tls_cert, tls_key=config.tls_key,
                            shuffler_ca=config.shuffler_ca, identity=config.shuffler_name,
                            max_message_bytes=config.max_message_bytes, limits=self.limits)

    def _on_loop(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _build_aio(self, options: list[tuple[str, Any]],
                         creds: grpc.ServerCredentials) -> int:
        # sync handlers (analyst calls, reflection) run in the migration thread pool
        self.server = grpc.aio.server(migration_thread_pool=self._pool, options=options,
                                      maximum_concurrent_rpcs=self.config.workers * 64)
        m = metrics_of(self.core)
        device = AsyncDeviceServicer(self.core, self._pool)
        add_service(self.server, instrument(device, _DEVICE, m, "grpc"), _DEVICE,
                    batch_cap=device.logic.cap)
        add_service(self.server, instrument(AsyncAnalystServicer(self.core, self._pool),
                                            _ANALYST, m, "grpc"), _ANALYST)
        self.health = health.aio.HealthServicer()
        add_service(self.server, self.health, _HEALTH)
        add_reflection(self.server, self._names, aio=True)
        return self.server.add_secure_port(self._core_address, creds)

    async def _set_health(self, status: Any) -> None:
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, status)

    def start(self) -> None:
        # long-lived objects out of the cyclic GC's way: fewer, shorter collections
        gc.collect()
        gc.freeze()
        # per-request garbage is freed by reference counting; young-generation scans every
        # 700 allocations only cost CPU on the ingest path (~3 % of it)
        gc.set_threshold(50_000, 20, 20)
        if self._loop is not None:
            self._on_loop(self.server.start())
            self._on_loop(self._set_health(health_pb2.HealthCheckResponse.SERVING))
        else:
            self.server.start()
            for name in ("", *SERVICE_NAMES):
                self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.intake is not None:
            self.intake.start()
        if self.front is not None:
            self.front.start()
        elif not defer_accept(self.port):
            log.debug("TCP_DEFER_ACCEPT not set on the gRPC port %d", self.port)
        self.core.start()
        log.info("collector %s listening on %s:%d (TLS%s; at most %d connections, "
                 "handshake time %g s%s)", self.core.name, self.config.host, self.port,
                 ", mutual" if self.config.tls_client_ca else "",
                 self.limits.grpc_connections, self.limits.header_timeout_s,
                 "; front: slow handshakes evicted" if self.front is not None else "")

    def stop(self, grace: float = 5.0) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.front is not None:
            self.front.stop()
        if self._loop is not None:
            self._on_loop(self.health.enter_graceful_shutdown())
            self._on_loop(self.server.stop(grace))
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=10)
            self._loop.close()
        else:
            self.health.enter_graceful_shutdown()
            self.server.stop(grace).wait()
        self._pool.shutdown(wait=False)
        if self.intake is not None:
            self.intake.stop(grace)
        self.core.stop()
        log.info("collector %s stopped; writer %s", self.core.name, self.core.writer.stats())
        self.db.dispose()

    def serve_forever(self) -> None:
        """Start, then block until SIGTERM/SIGINT; shut down gracefully."""
        done = threading.Event()

        def _handler(signum: int, _frame: object) -> None:
            log.info("signal %d: shutting down", signum)
            done.set()
        signal.signal(signal.SIGTERM, _handler)
        signal.signal(signal.SIGINT, _handler)
        self.start()
        done.wait()
        self.stop()
