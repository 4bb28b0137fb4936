"""Registering gRPC services whose request decoding the collector controls.

grpcio decodes a request with the handler's ``request_deserializer`` before our code runs.
When the bytes are not a valid message, the thread-pool server answers INTERNAL
("Exception deserializing request!") and the asyncio server UNKNOWN with the protobuf
exception's text, and both log an ERROR with a traceback: for every such call, which is
a log flood anyone on the network can trigger.

:func:`add_service` registers every method of a service descriptor with a deserializer
that never raises: undecodable bytes become an :class:`Undecodable` marker, and the
wrapped handler answers INVALID_ARGUMENT with a fixed message naming only the method and
the expected message type of the public contract (no Python class names, no traceback),
after logging one WARNING line. The wrapper keeps the kind of the servicer method (plain
function, coroutine, sync or async generator) so both server modes run it as before.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, MethodDescriptor, ServiceDescriptor

__all__ = ["Undecodable", "add_service", "checked_method", "decoder", "undecodable_message"]

log = logging.getLogger("uldp.collector")

#: message class used to (de)serialize a message type (default: the registered class)
ClassOf = Callable[[Descriptor], Any]


@dataclass(frozen=True)
class Undecodable:
    """What the deserializer returns for bytes that are not a valid request."""

    size: int
    reason: str


def decoder(cls: Any) -> Callable[[bytes], Any]:
    """``cls.FromString`` that returns :class:`Undecodable` instead of raising."""
    parse = cls.FromString

    def decode(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # DecodeError, or anything else the parser raises
            return Undecodable(len(data), f"{type(exc).__name__}: {exc}")
    return decode


def undecodable_message(method: str, type_name: str) -> str:
    """The INVALID_ARGUMENT details of an undecodable request (public names only)."""
    return (f"the request to {method} is not a valid {type_name} message "
            "(protobuf decoding failed)")


def _warn(method: str, context: Any, bad: Undecodable) -> None:
    log.warning("undecodable request to %s from %s (%d bytes): %s", method,
                context.peer(), bad.size, bad.reason)


def checked_method(fn: Callable[..., Any], m: MethodDescriptor) -> Callable[..., Any]:
    """``fn`` behind a check that refuses :class:`Undecodable` requests, with the same
    calling convention (grpc.aio dispatches on it). The HTTP front
    (``uldp.collector.http``) wraps the same servicer methods with it."""
    method = f"/{m.containing_service.full_name}/{m.name}"
    text = undecodable_message(method, m.input_type.full_name)
    code = grpc.StatusCode.INVALID_ARGUMENT

    if m.client_streaming:
        def checked(requests: Iterator[Any], context: Any) -> Iterator[Any]:
            for r in requests:
                if isinstance(r, Undecodable):
                    _warn(method, context, r)
                    context.abort(code, text)
                yield r

        async def achecked(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            async for r in requests:
                if isinstance(r, Undecodable):
                    _warn(method, context, r)
                    await context.abort(code, text)
                yield r

        if inspect.isasyncgenfunction(fn):
            async def agen_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
                async for x in fn(achecked(requests, context), context):
                    yield x
            return agen_stream
        if inspect.iscoroutinefunction(fn):
            async def coro_stream(requests: Any, context: Any) -> Any:
                return await fn(achecked(requests, context), context)
            return coro_stream

        def sync_stream(requests: Any, context: Any) -> Any:
            return fn(checked(requests, context), context)
        return sync_stream

    if inspect.isasyncgenfunction(fn):
        async def agen(request: Any, context: Any) -> AsyncIterator[Any]:
            if isinstance(request, Undecodable):
                _warn(method, context, request)
                await context.abort(code, text)
            async for x in fn(request, context):
                yield x
        return agen
    if inspect.iscoroutinefunction(fn):
        async def coro(request: Any, context: Any) -> Any:
            if isinstance(request, Undecodable):
                _warn(method, context, request)
                await context.abort(code, text)
            return await fn(request, context)
        return coro

    def sync(request: Any, context: Any) -> Any:  # unary or a function returning an iterator
        if isinstance(request, Undecodable):
            _warn(method, context, request)
            context.abort(code, text)
        return fn(request, context)
    return sync


_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def method_handlers(servicer: Any, service: ServiceDescriptor,
                    class_of: ClassOf = message_factory.GetMessageClass
                    ) -> dict[str, grpc.RpcMethodHandler]:
    """One handler per method of ``service``, calling ``servicer.<Method>``."""
    out = {}
    for m in service.methods:
        factory = _FACTORIES[(m.client_streaming, m.server_streaming)]
        out[m.name] = factory(checked_method(getattr(servicer, m.name), m),
                              request_deserializer=decoder(class_of(m.input_type)),
                              response_serializer=class_of(m.output_type).SerializeToString)
    return out


def add_service(server: Any, servicer: Any, service: ServiceDescriptor,
                class_of: ClassOf = message_factory.GetMessageClass) -> None:
    """Register ``servicer`` for ``service`` on a ``grpc.Server`` or ``grpc.aio.Server``
    (what the generated ``add_XServicer_to_server`` does, with the safe decoding)."""
    handlers = method_handlers(servicer, service, class_of)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)
