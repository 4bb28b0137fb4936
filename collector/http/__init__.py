"""The collector's HTTP port: Connect and gRPC-Web for browsers and mobile apps.

See ``docs/device-protocol.md`` §10.3 and ``docs/architecture.md`` ("The HTTP port").
:func:`build_app` builds the ASGI application (servicers of the native gRPC port, CORS,
``/healthz``), which other parts extend with :meth:`HttpApp.mount`; :class:`HttpFront`
serves it with TLS beside the gRPC port (``uldp collector serve --http-port``).
"""

from uldp.collector.http.app import CorsPolicy, HttpApp
from uldp.collector.http.front import HttpConfig, HttpFront, attach_front, build_app

__all__ = ["CorsPolicy", "HttpApp", "HttpConfig", "HttpFront", "attach_front", "build_app"]
