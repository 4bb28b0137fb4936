"""The shuffler's HTTP port (``uldp shuffler serve --http-port``): ``ShufflerService`` over
Connect and gRPC-Web, for browsers and React Native apps in shuffle mode.

The same :class:`~uldp.collector.shuffler.service.ShufflerServicer` instance as the
shuffler's gRPC port, behind the same wrapper (``uldp.collector.http.connect``), so every
check, code and message is the gRPC port's; its synchronous methods run in the gRPC
port's thread pool. With ``GET /healthz`` and the CORS allow-list (``--cors-origin``) of
:class:`~uldp.collector.http.app.HttpApp`, and — given a metrics token
(``--metrics-token-file``) — ``GET /metrics``: the shuffler's aggregate Prometheus metrics
(``uldp.collector.shuffler.metrics``) for a scraper presenting that token as a bearer
token (401 otherwise, before any work). See ``docs/device-protocol.md`` §16.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from uldp.client.wire import shuffler_pb2
from uldp.collector.http.app import CorsPolicy, HttpApp, Receive, Scope, Send, respond
from uldp.collector.http.connect import service_app
from uldp.collector.http.front import HttpConfig, HttpFront
from uldp.collector.http.metrics import CHALLENGE, bearer_of
from uldp.collector.security.tokens import AdminAuth
from uldp.collector.shuffler.server import ShufflerServer
from uldp.collector.shuffler.service import MAX_SEALED_BATCH

__all__ = ["ShufflerMetricsEndpoint", "serve_shuffler", "shuffler_front"]

_SERVICE = shuffler_pb2.DESCRIPTOR.services_by_name["ShufflerService"]


def shuffler_front(config: HttpConfig) -> HttpFront:
    """The shuffler's HTTP port, bound (raises OSError if it cannot be) but serving
    nothing but ``/healthz`` until :func:`serve_shuffler`; not started."""
    app = HttpApp(CorsPolicy(config.cors_origins))
    app.route("/healthz", app.healthz)
    return HttpFront(app, config)


def serve_shuffler(front: HttpFront, shuffler: ShufflerServer,
                   metrics_token: AdminAuth | None = None) -> None:
    """Mount ``shuffler``'s servicer on ``front`` (before ``front.start()``), and its
    metrics at ``/metrics`` when a metrics token is given."""
    front.app.mount(f"/{_SERVICE.full_name}/", service_app(
        shuffler.servicer, _SERVICE, shuffler.pool, front.config.max_message_bytes,
        who="shuffler", batch_cap=MAX_SEALED_BATCH))
    if metrics_token is not None:
        front.app.route("/metrics", ShufflerMetricsEndpoint(shuffler, metrics_token))


class ShufflerMetricsEndpoint:
    """The ASGI handler of the shuffler's ``GET /metrics``."""

    def __init__(self, shuffler: ShufflerServer, token: AdminAuth) -> None:
        self.shuffler, self.token = shuffler, token
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(shuffler.metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "GET":
            await respond(send, 405, b"GET only\n", [(b"allow", b"GET")])
            return
        if not self.token.check(bearer_of(scope)):
            await respond(send, 401, b"/metrics needs the metrics token (--metrics-token-"
                          b"file) as 'authorization: Bearer <token>'\n", [CHALLENGE])
            return
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(self.shuffler.pool, generate_latest, self.registry)
        await respond(send, 200, body, [(b"cache-control", b"no-store")],
                      content_type=CONTENT_TYPE_LATEST.encode())
