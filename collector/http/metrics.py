"""``GET /metrics`` on the HTTP port: the replica's Prometheus metrics.

See ``docs/operations.md`` ("Metrics"). The scraper authenticates with a bearer token
(Prometheus ``authorization: {credentials_file: ...}``):

* the **metrics token** (``uldp collector serve --metrics-token-file``): every counter and
  histogram of the replica (``uldp.collector.observe.metrics``) and the database gauges
  without per-query series — what a monitoring system needs, no query id;
* the **admin token**: the same plus the per-query gauges
  (``uldp.collector.observe.gauges``).

Anything else gets 401 before any work. Metrics name counts, codes, methods and the
names analysts gave to datasets and queries; never a device id, a token or a report.
With mutual TLS on the port, the scraper also needs a client certificate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from uldp.collector.http.app import Receive, Scope, Send, respond
from uldp.collector.observe import DatabaseGauges, metrics_of
from uldp.collector.security.tokens import AdminAuth

__all__ = ["MetricsEndpoint", "bearer_of"]

CHALLENGE = (b"www-authenticate", b'Bearer realm="uldp-metrics"')


def bearer_of(scope: Scope) -> str | None:
    """The bearer token of a request's ``authorization`` header, or None."""
    for k, v in scope.get("headers", ()):
        if k == b"authorization":
            value = bytes(v).decode("latin-1")
            return value[7:].strip() if value.startswith("Bearer ") else None
    return None


class _Joined(Collector):
    def __init__(self, parts: Iterable[Any]) -> None:
        self.parts = list(parts)

    def collect(self) -> Iterator[Any]:
        for p in self.parts:
            yield from p.collect()


class MetricsEndpoint:
    """The ASGI handler of ``GET /metrics`` over one replica's core."""

    def __init__(self, core: Any, pool: Executor, metrics_auth: AdminAuth | None = None,
                 cache_s: float = 5.0) -> None:
        self.core, self.pool, self.metrics_auth = core, pool, metrics_auth
        self.metrics = metrics_of(core)
        odometer = getattr(core, "odometer", None)  # shuffle mode's privacy odometer
        self.gauges = DatabaseGauges(core.db, cache_s=cache_s,
                                     odometer=odometer.states if odometer else None)

    def scope_of(self, token: str | None) -> str | None:
        """``admin``, ``metrics`` or None (refused) for a presented token."""
        if self.core.admin.check(token):
            return "admin"
        if self.metrics_auth is not None and self.metrics_auth.check(token):
            return "metrics"
        return None

    def render(self, admin: bool) -> bytes:
        """The exposition (blocking: reads the database gauges)."""
        return generate_latest(_Joined([self.metrics.registry,
                                        self.gauges.collector(admin)]))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "GET":
            await respond(send, 405, b"GET only\n", [(b"allow", b"GET")])
            return
        who = self.scope_of(bearer_of(scope))
        if who is None:
            await respond(send, 401, b"/metrics needs the metrics token (--metrics-token-"
                          b"file) or the admin token as 'authorization: Bearer <token>'\n",
                          [CHALLENGE])
            return
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(self.pool, self.render, who == "admin")
        await respond(send, 200, body, [(b"cache-control", b"no-store")],
                      content_type=CONTENT_TYPE_LATEST.encode())
