"""One gRPC service of the collector served over Connect and gRPC-Web (``connectrpc``).

:func:`service_app` turns a servicer — the same class the native gRPC server registers —
and its service descriptor into an ASGI application answering
``POST /<package.Service>/<Method>`` in the Connect protocol (binary or JSON) and in
gRPC-Web (``application/grpc-web+proto``, trailers in the body, for HTTP/1.1 clients).
Nothing is generated per service: any service of ``proto/uldp/v1`` (a later shuffler
service too) is served by passing its servicer and descriptor.

Every request goes through the servicer code of the native port, behind the same
safe-decoding wrapper (``uldp.collector.service.handlers``: undecodable bytes get
INVALID_ARGUMENT with the same message, and every exception a servicer lets out is
answered as its status, as on the native port), with the same message size limit
(RESOURCE_EXHAUSTED above it, before the message is decoded) and the same batch item cap,
counted in the bytes before decoding, binary or JSON (``uldp.collector.service.wirescan``;
INVALID_ARGUMENT with the message of the native port). A request over
:data:`OFFLOAD_BYTES` is counted and decoded in a small decoding pool, never on the event
loop that answers every other connection (``/healthz`` included). A plain servicer
method runs in the collector's thread pool, a coroutine or async generator on the loop.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from connectrpc.codec import Codec
from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.request import RequestContext
from connectrpc.server import ConnectASGIApplication, Endpoint
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from uldp.collector.http.context import HttpCallContext
from uldp.collector.service.handlers import Oversized, Undecodable, batch_field, checked_method
from uldp.collector.service.wirescan import count_items, count_json_items

__all__ = ["OFFLOAD_BYTES", "ServiceApp", "service_app"]

#: requests larger than this are counted and decoded off the event loop
OFFLOAD_BYTES = 64 << 10
#: the pool that decodes them: two threads (the box's cores), apart from the collector's
#: pool, so a flood of large requests queues here and never starves database work
_DECODING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="uldp-decode")


class _SafeCodec(Codec[Any, Any]):
    """A codec whose ``decode`` never raises: undecodable bytes become
    :class:`Undecodable`, answered by the servicer wrapper as over native gRPC; a batch
    request over ``batch_cap`` items becomes :class:`Oversized` without being decoded;
    a large request becomes :class:`_Pending` (decoded later, off the loop)."""

    def __init__(self, inner: Codec[Any, Any], batch_cap: int | None = None) -> None:
        self._inner = inner
        self._cap = batch_cap
        self._json = inner.name() == "json"

    def name(self) -> str:
        return self._inner.name()

    def encode(self, message: Any) -> bytes:
        return self._inner.encode(message)

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        if len(data) > OFFLOAD_BYTES:
            return _Pending(self, bytes(data), message_class)
        return self.decode_now(data, message_class)

    def decode_now(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        if self._cap is not None and self._over_cap(bytes(data), message_class):
            return Oversized(self._cap)
        try:
            return self._inner.decode(data, message_class)
        except Exception as exc:  # DecodeError / ParseError, or anything else
            return Undecodable(len(data), f"{type(exc).__name__}: {exc}")

    def _over_cap(self, data: bytes, message_class: type[Any]) -> bool:
        desc = message_class.DESCRIPTOR
        number = batch_field(desc)
        if number is None or self._cap is None:
            return False
        if self._json:
            f = desc.fields_by_number[number]
            n = count_json_items(data, frozenset((f.json_name, f.name)), self._cap)
        else:
            n = count_items(data, number, self._cap)
        return (n or 0) > self._cap


@dataclass(frozen=True)
class _Pending:
    """A large request, decoded by :func:`_resolved` in the decoding pool."""

    codec: _SafeCodec
    data: bytes
    message_class: type[Any]

    def decode(self) -> Any:
        return self.codec.decode_now(self.data, self.message_class)


async def _resolved(request: Any) -> Any:
    if isinstance(request, _Pending):
        return await asyncio.get_running_loop().run_in_executor(_DECODING, request.decode)
    return request


def _stream_type(m: MethodDescriptor) -> StreamType:
    return {(False, False): StreamType.UNARY, (False, True): StreamType.SERVER_STREAM,
            (True, False): StreamType.CLIENT_STREAM,
            (True, True): StreamType.BIDI_STREAM}[(m.client_streaming, m.server_streaming)]


def _context(ctx: RequestContext[Any, Any]) -> HttpCallContext:
    return HttpCallContext(ctx.request_headers, ctx.client_address)


def _unary(fn: Callable[..., Any], pool: Executor) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):
        async def coro(request: Any, ctx: RequestContext[Any, Any]) -> Any:
            return await fn(await _resolved(request), _context(ctx))
        return coro

    async def in_pool(request: Any, ctx: RequestContext[Any, Any]) -> Any:
        call = _context(ctx)
        request = await _resolved(request)
        return await asyncio.get_running_loop().run_in_executor(pool, fn, request, call)
    return in_pool


def _server_stream(fn: Callable[..., Any]) -> Callable[..., Any]:
    if not inspect.isasyncgenfunction(fn):
        raise TypeError("a server-streaming method served over HTTP must be an async "
                        f"generator (use the asyncio servicer): {fn!r}")

    async def stream(request: Any, ctx: RequestContext[Any, Any]) -> AsyncIterator[Any]:
        async for item in fn(await _resolved(request), _context(ctx)):
            yield item
    return stream


def endpoints(servicer: Any, service: ServiceDescriptor, pool: Executor,
              who: str = "collector") -> dict[str, Endpoint[Any, Any]]:
    """The Connect endpoints of every unary and server-streaming method of ``service``,
    each calling ``servicer.<Method>`` behind the safe-decoding wrapper."""
    out: dict[str, Endpoint[Any, Any]] = {}
    for m in service.methods:
        info: MethodInfo[Any, Any] = MethodInfo(
            name=m.name, service_name=service.full_name,
            input=message_factory.GetMessageClass(m.input_type),
            output=message_factory.GetMessageClass(m.output_type),
            idempotency_level=IdempotencyLevel.UNKNOWN, stream_type=_stream_type(m))
        fn = checked_method(getattr(servicer, m.name), m, who)
        path = f"/{service.full_name}/{m.name}"
        if info.stream_type is StreamType.UNARY:
            out[path] = Endpoint.unary(info, _unary(fn, pool))
        elif info.stream_type is StreamType.SERVER_STREAM:
            out[path] = Endpoint.server_stream(info, _server_stream(fn))
    return out


class ServiceApp(ConnectASGIApplication[Any]):
    """The ASGI application of one service (Connect and gRPC-Web)."""

    def __init__(self, service_name: str, table: Mapping[str, Endpoint[Any, Any]],
                 read_max_bytes: int, codecs: Iterable[Codec[Any, Any]]) -> None:
        self._path = f"/{service_name}"
        super().__init__(service=table, endpoints=lambda t: t,
                         read_max_bytes=read_max_bytes, codecs=codecs)

    @property
    def path(self) -> str:
        return self._path


def service_app(servicer: Any, service: ServiceDescriptor, pool: Executor,
                max_message_bytes: int, who: str = "collector",
                batch_cap: int | None = None) -> ServiceApp:
    """``servicer`` (a servicer class of the native gRPC server) for ``service``, over
    Connect (binary protobuf and JSON) and gRPC-Web, requests up to
    ``max_message_bytes`` (``who``: the server an INTERNAL message names); with
    ``batch_cap``, batch requests over it are refused before decoding."""
    codecs = [_SafeCodec(google_protobuf_binary_codec(), batch_cap),
              _SafeCodec(google_protobuf_json_codec(ignore_unknown_fields=False), batch_cap)]
    return ServiceApp(service.full_name, endpoints(servicer, service, pool, who),
                      max_message_bytes, codecs)
