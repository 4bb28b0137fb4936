"""The shuffler's HTTP port (``uldp shuffler serve --http-port``): ``ShufflerService`` over
Connect and gRPC-Web, for browsers and React Native apps in shuffle mode.

The same :class:`~uldp.collector.shuffler.service.ShufflerServicer` instance as the
shuffler's gRPC port, behind the same wrapper (``uldp.collector.http.connect``), so every
check, code and message is the gRPC port's; its synchronous methods run in the gRPC
port's thread pool. With ``GET /healthz`` and the CORS allow-list (``--cors-origin``) of
:class:`~uldp.collector.http.app.HttpApp`. See ``docs/device-protocol.md`` §16.
"""

from __future__ import annotations

from uldp.client.wire import shuffler_pb2
from uldp.collector.http.app import CorsPolicy, HttpApp
from uldp.collector.http.connect import service_app
from uldp.collector.http.front import HttpConfig, HttpFront
from uldp.collector.shuffler.server import ShufflerServer

__all__ = ["serve_shuffler", "shuffler_front"]

_SERVICE = shuffler_pb2.DESCRIPTOR.services_by_name["ShufflerService"]


def shuffler_front(config: HttpConfig) -> HttpFront:
    """The shuffler's HTTP port, bound (raises OSError if it cannot be) but serving
    nothing but ``/healthz`` until :func:`serve_shuffler`; not started."""
    app = HttpApp(CorsPolicy(config.cors_origins))
    app.route("/healthz", app.healthz)
    return HttpFront(app, config)


def serve_shuffler(front: HttpFront, shuffler: ShufflerServer) -> None:
    """Mount ``shuffler``'s servicer on ``front`` (before ``front.start()``)."""
    front.app.mount(f"/{_SERVICE.full_name}/", service_app(
        shuffler.servicer, _SERVICE, shuffler.pool, front.config.max_message_bytes,
        who="shuffler"))
