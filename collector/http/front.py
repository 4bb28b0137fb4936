"""Serving the collector's HTTP application next to the native gRPC port.

``uldp collector serve --http-port P`` starts an :class:`HttpFront` beside the gRPC
server, in the same process, over the same :class:`~uldp.collector.service.core.CollectorCore`
(storage, token keys, group-commit writer, phase closer): the Device and Analyst services
over Connect and gRPC-Web (``uldp.collector.http.connect``), ``GET /healthz``, and the
CORS policy (``uldp.collector.http.app``). TLS with the server's certificate and key
(mutual TLS when the gRPC port requires it). Replicas behind one PostgreSQL database
serve both ports; nothing is kept in the front itself.

The ASGI server is uvicorn with its httptools parser on its own event loop thread
(chosen by measurement: ``bench/results/ingest_http.md``), behind the connection guard
(``uldp.collector.http.guard``): a connection cap sized from the descriptor limit, header
and body time, header size. ``X-Forwarded-For`` (and ``X-Forwarded-Proto``) are read only
from the proxies the operator names (``--trusted-proxy``): otherwise the peer of a call is
the address that connected, whatever the request says (``docs/privacy.md`` §8).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES, analyst_pb2, device_pb2
from uldp.collector.http.app import CorsPolicy, HttpApp, Receive, Scope, Send, respond
from uldp.collector.http.connect import service_app
from uldp.collector.http.console import PREFIX as CONSOLE
from uldp.collector.http.console import ConsoleApp
from uldp.collector.http.guard import (
    ConnectionGuard,
    GuardedListener,
    GuardMetrics,
    HttpLimits,
    guarded_protocol,
)
from uldp.collector.http.metrics import MetricsEndpoint
from uldp.collector.observe import instrument, metrics_of
from uldp.collector.security.tokens import AdminAuth
from uldp.collector.service.connections import defer_accept
from uldp.collector.service.core import CollectorCore
from uldp.collector.service.servicers import AsyncAnalystServicer, AsyncDeviceServicer

__all__ = ["HttpConfig", "HttpFront", "attach_front", "build_app"]

log = logging.getLogger("uldp.collector")

_DEVICE = device_pb2.DESCRIPTOR.services_by_name["DeviceService"]
_ANALYST = analyst_pb2.DESCRIPTOR.services_by_name["AnalystService"]


@dataclass
class HttpConfig:
    """The HTTP port of ``uldp collector serve`` (``--http-port``, ``--cors-origin``)."""

    tls_cert: Path
    tls_key: Path
    host: str = "127.0.0.1"
    port: int = 8443
    tls_client_ca: Path | None = None
    cors_origins: frozenset[str] = field(default_factory=frozenset)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    reuse_port: bool = False
    #: the token a Prometheus scraper presents at ``/metrics`` (besides the admin token)
    metrics_token_file: Path | None = None
    #: connections, header/body time, header size (``uldp.collector.http.guard``)
    limits: HttpLimits = field(default_factory=HttpLimits)
    #: addresses or networks (CIDR) of proxies whose X-Forwarded-For is believed
    trusted_proxies: tuple[str, ...] = ()
    #: development mode: serve the built example page from this directory under /example/
    #: (``uldp.collector.http.example``; ``--dev-example``, checked by the CLI)
    dev_example: Path | None = None


def build_app(core: CollectorCore, pool: Executor, *, cors: CorsPolicy | None = None,
              max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
              metrics_auth: AdminAuth | None = None) -> HttpApp:
    """The HTTP application over ``core``: Device and Analyst services (the servicers of
    the native port), ``/healthz``, ``/metrics`` (``uldp.collector.http.metrics``) and the
    analyst console under ``/console/`` (``uldp.collector.http.console``); mount more
    with :meth:`HttpApp.mount`."""
    app = HttpApp(cors)
    m = metrics_of(core)
    device = AsyncDeviceServicer(core, pool)
    for servicer, service, cap in ((device, _DEVICE, device.logic.cap),
                                   (AsyncAnalystServicer(core, pool), _ANALYST, None)):
        app.mount(f"/{service.full_name}/",
                  service_app(instrument(servicer, service, m, "http"), service, pool,
                              max_message_bytes, batch_cap=cap))
    app.route("/healthz", app.healthz)
    app.route("/metrics", MetricsEndpoint(core, pool, metrics_auth))
    app.mount(CONSOLE, ConsoleApp(core, pool))
    app.route(CONSOLE.rstrip("/"), _to_console)
    return app


async def _to_console(scope: Scope, receive: Receive, send: Send) -> None:
    await respond(send, 308, b"", [(b"location", CONSOLE.encode())])


def _listen(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when the
    # listening socket says TCP (proto 0 would leave Nagle on: 40 ms per response)
    s = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    s.listen(1024)
    s.set_inheritable(True)
    return s


#: bytes asyncio reads from a TLS connection at once. Its default, 256 KiB, is a buffer
#: every TLS connection allocates and fills with zeros when it is accepted: 300 KB of
#: resident memory per connection before it has sent a byte (400 idle connections: 121
#: MiB; with 32 KiB: 26 MiB). A TLS record is at most ~16.7 KB, so reads stay whole.
TLS_READ_BYTES = 32 << 10


def _small_tls_buffers() -> None:
    """Lower asyncio's per-connection TLS read buffer (see :data:`TLS_READ_BYTES`); the
    attribute is a class default of :class:`asyncio.sslproto.SSLProtocol`."""
    import asyncio.sslproto

    proto = asyncio.sslproto.SSLProtocol
    if getattr(proto, "max_size", 0) > TLS_READ_BYTES:
        proto.max_size = TLS_READ_BYTES


def _forwarding(trusted: tuple[str, ...]) -> dict[str, object]:
    """uvicorn's proxy-header settings: off unless proxies are named (uvicorn's own
    default would believe X-Forwarded-For from loopback)."""
    if not trusted:
        return {"proxy_headers": False, "forwarded_allow_ips": []}
    return {"proxy_headers": True, "forwarded_allow_ips": list(trusted)}


class HttpFront:
    """A running HTTP port (see the module docstring); ``start``/``stop``."""

    def __init__(self, app: HttpApp, config: HttpConfig) -> None:
        import uvicorn

        self.app = app
        self.config = config
        lim = config.limits
        _small_tls_buffers()
        self.guard = ConnectionGuard(lim)
        self._sock = GuardedListener.wrap(
            _listen(config.host, config.port, config.reuse_port), self.guard)
        defer_accept(self._sock)
        self.port = int(self._sock.getsockname()[1])
        mtls = config.tls_client_ca is not None
        self._server = uvicorn.Server(uvicorn.Config(
            app, lifespan="off", log_level="warning", access_log=False,
            http=guarded_protocol(self.guard), loop="asyncio",
            ssl_certfile=str(config.tls_cert), ssl_keyfile=str(config.tls_key),
            ssl_ca_certs=str(config.tls_client_ca) if mtls else None,
            ssl_cert_reqs=ssl.CERT_REQUIRED if mtls else ssl.CERT_NONE,
            timeout_keep_alive=max(1, int(lim.header_timeout_s)), server_header=False,
            date_header=False, **_forwarding(config.trusted_proxies)))  # type: ignore[arg-type]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        started = threading.Event()

        def run() -> None:
            async def serve() -> None:
                task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
                sweeper = asyncio.create_task(self.guard.run_sweeper(
                    f"HTTP port {self.config.host}:{self.port}"))
                while not self._server.started and not task.done():
                    await asyncio.sleep(0.01)
                started.set()
                try:
                    await task
                finally:
                    sweeper.cancel()
            try:
                asyncio.run(serve())
            finally:
                started.set()
        self._thread = threading.Thread(target=run, name="uldp-http", daemon=True)
        self._thread.start()
        started.wait(30)
        if not self._server.started:
            raise OSError(f"the HTTP port {self.config.host}:{self.port} did not start")
        lim = self.guard.limits
        log.info("HTTP port (Connect, gRPC-Web, /healthz) on %s:%d (TLS%s; at most %d "
                 "connections, header time %g s, body time %g s)", self.config.host,
                 self.port, ", mutual" if self.config.tls_client_ca else "",
                 lim.max_connections, lim.header_timeout_s, lim.body_timeout_s)

    def stop(self, grace: float = 5.0) -> None:
        self.app.serving = False
        if self._thread is None:
            self._sock.close()
            return
        self._server.config.timeout_graceful_shutdown = max(int(grace), 1)
        self._server.should_exit = True
        self._thread.join(grace + 10)
        self._thread = None
        self._sock.close()


def attach_front(core: CollectorCore, pool: Executor, config: HttpConfig) -> HttpFront:
    """Build the application over ``core`` and bind its port (not started yet)."""
    metrics_auth = (AdminAuth.from_file(config.metrics_token_file)
                    if config.metrics_token_file is not None else None)
    app = build_app(core, pool, cors=CorsPolicy(config.cors_origins),
                    max_message_bytes=config.max_message_bytes, metrics_auth=metrics_auth)
    if config.dev_example is not None:
        from uldp.collector.http.example import PREFIX, ExampleApp, to_example

        app.mount(PREFIX, ExampleApp(config.dev_example))
        app.route(PREFIX.rstrip("/"), to_example)
        log.warning("development mode: serving the example page from %s at /example/ "
                    "(--dev-example)", config.dev_example)
    front = HttpFront(app, config)
    metrics_of(core).registry.register(GuardMetrics(front.guard))
    return front


