"""The analyst console: plain HTML, JavaScript and SVG served by the collector itself.

See ``docs/analyst.md`` ("Console"). ``GET /console/`` on the HTTP port serves the page and
its two files from package data (``static/``: no CDN, no build step, works offline);
everything the page shows comes from the collector over the same origin:

* the Analyst service over Connect with JSON (``POST /uldp.v1.AnalystService/<Method>``,
  ``WatchQuery`` as a Connect server stream) — the same servicer, checks and codes as the
  native port;
* ``POST /console/api/preview``: the preview of a CreateQuery request
  (:func:`uldp.collector.analyst.preview.preview_message`, the collector's own request
  checks), JSON in (the request in proto3 JSON, as Connect reads it) and JSON out;
  ``?simulate=0`` leaves out the simulated width of a two-stage plan (the curves);
* ``GET /console/api/odometer``: each dataset's privacy odometer — the central ε its
  shuffled queries compose to and the budget (``uldp.collector.service.odometer``).

The page asks for the admin token and keeps it in the tab's ``sessionStorage`` (gone with
the tab); every call carries it as ``authorization: Bearer``. With mutual TLS on the port,
the browser also needs a client certificate. The static files are not secret; every
answer with data needs the token. Responses carry a strict Content-Security-Policy (only
this origin's scripts, styles and connections; no inline script, no frames).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import Executor
from importlib import resources
from typing import Any

from google.protobuf import json_format

from uldp.client.wire import analyst_pb2
from uldp.collector.analyst.preview import preview_message
from uldp.collector.http.app import Receive, Scope, Send, respond
from uldp.collector.http.codes import CONNECT_HTTP_STATUS
from uldp.collector.http.metrics import bearer_of
from uldp.collector.service.errors import ServiceError

__all__ = ["PREFIX", "ConsoleApp"]

PREFIX = "/console/"
#: the console's files: path under /console/ -> (file in static/, content type)
FILES = {"": ("index.html", b"text/html; charset=utf-8"),
         "console.js": ("console.js", b"text/javascript; charset=utf-8"),
         "console.css": ("console.css", b"text/css; charset=utf-8")}
SECURITY = [
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self'; "
     b"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
     b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache")]
MAX_BODY = 64 * 1024  # a preview request is a CreateQuery request: small


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


async def _body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None when it is larger than ``limit`` bytes."""
    out = bytearray()
    while True:
        msg = await receive()
        out += msg.get("body", b"")
        if len(out) > limit:
            return None
        if not msg.get("more_body"):
            return bytes(out)


async def _json(send: Send, status: int, obj: Any) -> None:
    await respond(send, status, json.dumps(obj).encode(), SECURITY,
                  content_type=b"application/json")


async def _error(send: Send, code: str, message: str) -> None:
    """A refusal in the shape of a Connect error (``code`` in lower case)."""
    await _json(send, CONNECT_HTTP_STATUS.get(code, 500),
                {"code": code.lower(), "message": message})


class ConsoleApp:
    """The ASGI app under ``/console/`` (see the module docstring)."""

    def __init__(self, core: Any, pool: Executor) -> None:
        self.core, self.pool = core, pool
        self.files = {path: (_static(name), ctype) for path, (name, ctype) in FILES.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"][len(PREFIX):]
        if path == "api/preview":
            await self.preview(scope, receive, send)
            return
        if path == "api/odometer":
            await self.odometer(scope, send)
            return
        got = self.files.get(path)
        if got is None:
            await respond(send, 404, b"not found\n")
        elif scope["method"] not in ("GET", "HEAD"):
            await respond(send, 405, b"GET only\n", [(b"allow", b"GET")])
        else:
            await respond(send, 200, got[0], SECURITY, content_type=got[1])

    def _preview(self, body: bytes, simulate: bool) -> dict[str, Any]:
        try:
            msg = json_format.Parse(body or b"{}", analyst_pb2.CreateQueryRequest())
        except json_format.ParseError as exc:
            raise ServiceError("INVALID_ARGUMENT", f"not a CreateQueryRequest: {exc}"
                               ) from None
        return preview_message(msg, self.core.config.max_users, simulate).to_dict()

    async def preview(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /console/api/preview``: admin token, then the request, then the
        collector's CreateQuery checks; a Connect-shaped error for any refusal."""
        if scope["method"] != "POST":
            await respond(send, 405, b"POST only\n", [(b"allow", b"POST")])
            return
        if not self.core.admin.check(bearer_of(scope)):
            await _error(send, "UNAUTHENTICATED", "analyst calls need the admin credential "
                         "(authorization: Bearer <admin token>)")
            return
        body = await _body(receive, MAX_BODY)
        if body is None:
            await _error(send, "RESOURCE_EXHAUSTED", f"a preview request holds at most "
                         f"{MAX_BODY} bytes")
            return
        loop = asyncio.get_running_loop()
        try:
            simulate = scope.get("query_string", b"") != b"simulate=0"
            out = await loop.run_in_executor(self.pool, self._preview, body, simulate)
        except ServiceError as exc:
            await _error(send, exc.code, exc.message)
            return
        await _json(send, 200, out)

    async def odometer(self, scope: Scope, send: Send) -> None:
        """``GET /console/api/odometer``: admin token, then every dataset's odometer."""
        if scope["method"] != "GET":
            await respond(send, 405, b"GET only\n", [(b"allow", b"GET")])
            return
        if not self.core.admin.check(bearer_of(scope)):
            await _error(send, "UNAUTHENTICATED", "analyst calls need the admin credential "
                         "(authorization: Bearer <admin token>)")
            return
        loop = asyncio.get_running_loop()
        out = await loop.run_in_executor(self.pool, self.core.odometer.states)
        await _json(send, 200, {"datasets": out})
