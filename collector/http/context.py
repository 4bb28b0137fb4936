"""The servicer context of a call that arrived over HTTP (Connect or gRPC-Web).

The collector's servicers (``uldp.collector.service.servicers``) read the caller's
credential from ``context.invocation_metadata()``, name the caller with ``context.peer()``
and refuse with ``context.abort(code, message)``. :class:`HttpCallContext` offers exactly
that surface over a Connect :class:`~connectrpc.request.RequestContext`, so one servicer
instance serves both ports with the same checks, codes and messages: the HTTP front has
no logic of its own. ``abort`` raises a :class:`~connectrpc.errors.ConnectError` with the
mapped code (``uldp.collector.http.codes``), which the Connect runtime writes in the wire
format the caller speaks.
"""

from __future__ import annotations

from typing import Any, NoReturn

from connectrpc.errors import ConnectError

from uldp.collector.http.codes import connect_code

__all__ = ["HttpCallContext"]


def _grpc_peer(address: str | None) -> str:
    """``host:port`` as gRPC names peers (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    if not address:
        return "unknown"
    host, _, port = address.rpartition(":")
    if ":" in host:
        return f"ipv6:[{host.strip('[]')}]:{port}"
    return f"ipv4:{host}:{port}"


class HttpCallContext:
    """What a servicer method may use of ``grpc.ServicerContext`` (and its aio twin)."""

    __slots__ = ("_headers", "_peer")

    def __init__(self, headers: Any, client_address: str | None) -> None:
        self._headers = headers
        self._peer = _grpc_peer(client_address)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        """The request headers as gRPC metadata (lower-case keys)."""
        return tuple((k.lower(), v) for k, v in self._headers.allitems())

    def peer(self) -> str:
        return self._peer

    def abort(self, code: Any, details: str) -> NoReturn:
        """Refuse the call (a ``grpc.StatusCode`` or its name); raises at once, so both
        ``context.abort(...)`` and ``await context.abort(...)`` end the handler."""
        name = code if isinstance(code, str) else code.name
        raise ConnectError(connect_code(name), details)

    def is_active(self) -> bool:
        return True

    def time_remaining(self) -> float | None:
        return None

    def set_code(self, code: Any) -> None:  # pragma: no cover - unused by the servicers
        pass

    def set_details(self, details: str) -> None:  # pragma: no cover
        pass
