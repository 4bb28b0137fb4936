"""The collector's HTTP application: one ASGI app that others extend with routes.

:class:`HttpApp` dispatches on the request path: each service of the collector under
``/<package.Service>/`` (Connect and gRPC-Web, ``uldp.collector.http.connect``),
``GET /healthz`` for load balancers, and whatever a later part mounts with
:meth:`HttpApp.mount` (a metrics endpoint, a console). In front of every route sits the
CORS policy: a request that carries an ``Origin`` header not on the allow-list
(``--cors-origin``; nothing by default) is refused with HTTP 403 before any route sees
it, and a preflight is answered only for allowed origins. Requests without ``Origin``
(apps, gateways, curl) are not affected: CORS protects browsers' users, the device token
protects the service. A page the collector serves itself (the analyst console) is of the
collector's own origin: its calls are same-origin, never refused by the allow-list.

Native gRPC (``content-type: application/grpc``) needs HTTP/2 trailers, which this port
does not serve: such a request is answered ``415`` with ``grpc-status: 12``
(UNIMPLEMENTED) and a message naming the gRPC port, before any route sees it. An
exception a route lets out is answered ``500`` and logged as one line (the log filter of
``uldp.collector.observe.logs`` bounds how many per second), never as a traceback per
request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ASGIApp", "CorsPolicy", "HttpApp", "respond"]

log = logging.getLogger("uldp.collector.http")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: request headers a browser client of the collector sends (Connect, gRPC-Web, auth)
ALLOWED_HEADERS = ("authorization, content-type, connect-protocol-version, "
                   "connect-timeout-ms, connect-accept-encoding, connect-content-encoding, "
                   "grpc-timeout, grpc-accept-encoding, x-grpc-web, x-user-agent")
#: response headers a browser client may read (status and message of gRPC-Web errors)
EXPOSED_HEADERS = ("grpc-status, grpc-message, grpc-status-details-bin, "
                   "connect-content-encoding, connect-accept-encoding, content-encoding")


async def respond(send: Send, status: int, body: bytes = b"",
                  headers: Iterable[tuple[bytes, bytes]] = (),
                  content_type: bytes = b"text/plain; charset=utf-8") -> None:
    """Send a complete plain HTTP response."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class CorsPolicy:
    """Origins (``scheme://host[:port]``) whose pages may call the collector; ``"*"``
    allows every origin. Empty: no browser page may call it."""

    origins: frozenset[str] = frozenset()

    def allows(self, origin: str) -> bool:
        return "*" in self.origins or origin in self.origins


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return bytes(v).decode("latin-1")
    return None


class HttpApp:
    """The ASGI application of the HTTP port (see the module docstring)."""

    def __init__(self, cors: CorsPolicy | None = None) -> None:
        self.cors = cors or CorsPolicy()
        self._exact: dict[str, ASGIApp] = {}
        self._prefixes: list[tuple[str, ASGIApp]] = []
        self.serving = True  # /healthz answers 503 once False (graceful shutdown)

    def route(self, path: str, app: ASGIApp) -> None:
        """Serve ``path`` exactly with ``app``."""
        self._exact[path] = app

    def mount(self, prefix: str, app: ASGIApp) -> None:
        """Serve every path under ``prefix`` (``/a/`` serves ``/a/...``) with ``app``;
        the longest matching prefix wins."""
        self._prefixes.append((prefix, app))
        self._prefixes.sort(key=lambda p: -len(p[0]))

    def _find(self, path: str) -> ASGIApp | None:
        app = self._exact.get(path)
        if app is not None:
            return app
        for prefix, a in self._prefixes:
            if path.startswith(prefix):
                return a
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":
            return  # no websockets
        origin = _header(scope, b"origin")
        cors: list[tuple[bytes, bytes]] = []
        if origin is not None and not _same_origin(scope, origin):
            if not self.cors.allows(origin):
                await respond(send, 403, b"origin not allowed by the collector's CORS "
                              b"policy (--cors-origin)\n")
                return
            cors = [(b"access-control-allow-origin", origin.encode("latin-1")),
                    (b"vary", b"origin")]
            if scope["method"] == "OPTIONS":
                await respond(send, 204, headers=[
                    *cors, (b"access-control-allow-methods", b"POST, GET"),
                    (b"access-control-allow-headers", ALLOWED_HEADERS.encode()),
                    (b"access-control-max-age", b"7200")])
                return
            cors.append((b"access-control-expose-headers", EXPOSED_HEADERS.encode()))
        if _native_grpc(scope):
            await respond(send, 415, b"native gRPC is served on the collector's gRPC port, "
                          b"not here: this port speaks Connect and gRPC-Web\n",
                          [*cors, (b"grpc-status", b"12"), (b"grpc-message",
                           b"native%20gRPC%20is%20served%20on%20the%20gRPC%20port")])
            return
        app = self._find(scope["path"])
        if app is None:
            await respond(send, 404, b"not found\n", cors)
            return
        sent = _Started(_with_headers(send, cors) if cors else send)
        try:
            await app(scope, receive, sent)
        except Exception as exc:  # a bug or a broken connection: one line, no traceback
            log.error("HTTP %s %s failed: %s: %s", scope.get("method"), scope["path"],
                      type(exc).__name__, exc)
            if not sent.started:
                await respond(send, 500, b"internal error\n", cors)

    async def healthz(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /healthz``: 200 while serving, 503 during shutdown (plain HTTP)."""
        if self.serving:
            await respond(send, 200, b"SERVING\n")
        else:
            await respond(send, 503, b"NOT_SERVING\n")


def _same_origin(scope: Scope, origin: str) -> bool:
    """Does ``origin`` name this server as the request reached it (a page the collector
    served itself, e.g. the analyst console, calling it back)? Browsers send ``Origin``
    on same-origin POSTs too; CORS is for other origins."""
    host = _header(scope, b"host")
    return host is not None and origin == f"{scope.get('scheme', 'https')}://{host}"


def _native_grpc(scope: Scope) -> bool:
    ctype = (_header(scope, b"content-type") or "").lower()
    return ctype == "application/grpc" or ctype.startswith(("application/grpc+",
                                                            "application/grpc;"))


class _Started:
    """``send``, remembering whether the response has started."""

    __slots__ = ("_send", "started")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


def _with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    async def wrapped(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)
    return wrapped


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
