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

Batch requests (``*BatchRequest`` with one repeated field) are counted in their bytes
before they are decoded (``uldp.collector.service.wirescan``): one with more items than
the collector's batch cap becomes an :class:`Oversized` marker, answered INVALID_ARGUMENT
with the message of the servicers' own check, without decoding it (invariant 9). The
servicers still check the count themselves (other fronts call them directly).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, MethodDescriptor, ServiceDescriptor

from uldp.collector.service.errors import ServiceError, batch_too_large, refusal
from uldp.collector.service.grpc_front import peer_of
from uldp.collector.service.wirescan import count_items

__all__ = ["Oversized", "Undecodable", "add_service", "answering", "batch_field", "checked_method",
           "decoder", "undecodable_message"]

log = logging.getLogger("uldp.collector")

#: message class used to (de)serialize a message type (default: the registered class)
ClassOf = Callable[[Descriptor], Any]


@dataclass(frozen=True)
class Undecodable:
    """What the deserializer returns for bytes that are not a valid request."""

    size: int
    reason: str


@dataclass(frozen=True)
class Oversized:
    """What the deserializer returns for a batch request over the item cap (undecoded)."""

    cap: int


def batch_field(desc: Descriptor) -> int | None:
    """The field number of the items of a ``*BatchRequest`` message (its one repeated
    field), else None."""
    rep = [f for f in desc.fields if f.is_repeated]
    return rep[0].number if desc.name.endswith("BatchRequest") and len(rep) == 1 else None


def decoder(cls: Any, batch: tuple[int, int] | None = None) -> Callable[[bytes], Any]:
    """``cls.FromString`` that returns :class:`Undecodable` instead of raising; with
    ``batch = (field number, cap)``, :class:`Oversized` for a request with more than
    ``cap`` entries of that field (counted in the bytes, before decoding)."""
    parse = cls.FromString

    def decode(data: bytes) -> Any:
        if batch is not None and (count_items(data, *batch) or 0) > batch[1]:
            return Oversized(batch[1])
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
                peer_of(context), bad.size, bad.reason)


_INVALID = "INVALID_ARGUMENT"


def _status(code: str) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, code, grpc.StatusCode.INTERNAL)


def _abort_types() -> tuple[type[BaseException], ...]:
    """What a context's ``abort`` raises in coroutine servicers: grpc.aio's AbortError,
    and the HTTP port's ConnectError (``uldp.collector.http.context``)."""
    out: list[type[BaseException]] = [grpc.aio.AbortError]
    try:
        from connectrpc.errors import ConnectError
        out.append(ConnectError)
    except ImportError:  # pragma: no cover - the HTTP port is not installed
        pass
    return tuple(out)


_ABORTS = _abort_types()


class _Refusing:
    """The context a synchronous servicer method sees: ``abort(code, details)`` raises
    a :class:`ServiceError`, which the wrapper answers on the real context. So the
    same servicer code refuses alike under ``grpc.server`` (whose ``abort`` raises a
    bare Exception), ``grpc.aio`` (a sync method gets a thread-bound context whose
    ``abort`` races the stream's writes, and a coroutine context's ``abort`` does
    nothing unless awaited) and the HTTP port; everything else is the real context."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def abort(self, code: Any, details: str = "") -> NoReturn:
        raise ServiceError(code if isinstance(code, str) else code.name, details)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


Check = Callable[[Any, Any], None]


def _no_check(request: Any, context: Any) -> None:
    pass


async def _answer(context: Any, exc: Exception, who: str) -> None:
    """Answer ``exc`` on a coroutine context (an abort already done passes through)."""
    if isinstance(exc, _ABORTS):
        raise exc
    err = refusal(exc, who)
    await context.abort(_status(err.code), err.message)


def _async(fn: Callable[..., Any], who: str, check: Check) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(fn):
        async def agen(request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                check(request, context)
                async for x in fn(request, context):
                    yield x
            except Exception as exc:
                await _answer(context, exc, who)
        return agen

    async def coro(request: Any, context: Any) -> Any:
        try:
            check(request, context)
            return await fn(request, context)
        except Exception as exc:
            await _answer(context, exc, who)
    return coro


def _sync(fn: Callable[..., Any], who: str, check: Check, streaming: bool
          ) -> Callable[..., Any]:
    def unary(request: Any, context: Any) -> Any:
        try:
            check(request, context)
            return fn(request, _Refusing(context))
        except Exception as exc:
            err = refusal(exc, who)
        context.abort(_status(err.code), err.message)

    def stream(request: Any, context: Any) -> Iterator[Any]:
        # a refusal ends the stream with set_code/set_details: never abort from the
        # generator's thread, which grpc.aio answers with DEADLINE_EXCEEDED when a write
        # is in flight
        try:
            check(request, context)
            yield from fn(request, _Refusing(context))
        except Exception as exc:
            err = refusal(exc, who)
            context.set_code(_status(err.code))
            context.set_details(err.message)
    return stream if streaming else unary


def answering(fn: Callable[..., Any], server_streaming: bool, who: str = "collector",
              check: Check = _no_check) -> Callable[..., Any]:
    """``fn(request, context)`` (after ``check(request, context)``) with every exception
    — a :class:`ServiceError`, an ``abort`` or anything else (:func:`refusal`: INTERNAL,
    logged) — answered as a status with its message, under every server kind, with the
    same calling convention (plain function, coroutine, sync or async generator: the
    servers dispatch on it)."""
    if inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn):
        return _async(fn, who, check)
    return _sync(fn, who, check, server_streaming)


def _wrap_stream(fn: Callable[..., Any], method: str, text: str) -> Callable[..., Any]:
    """:func:`checked_method` of a client-streaming method (each request checked)."""
    def checked(requests: Iterator[Any], context: Any) -> Iterator[Any]:
        for r in requests:
            if isinstance(r, Undecodable):
                _warn(method, context, r)
                raise ServiceError(_INVALID, text)
            yield r

    async def achecked(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async for r in requests:
            if isinstance(r, Undecodable):
                _warn(method, context, r)
                raise ServiceError(_INVALID, text)
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


def checked_method(fn: Callable[..., Any], m: MethodDescriptor,
                   who: str = "collector") -> Callable[..., Any]:
    """``fn`` behind a check that refuses :class:`Undecodable` (and :class:`Oversized`)
    requests, and behind :func:`answering`, with the same calling convention (grpc.aio
    dispatches on it). The HTTP ports (``uldp.collector.http``) wrap the same servicer
    methods with it."""
    method = f"/{m.containing_service.full_name}/{m.name}"
    text = undecodable_message(method, m.input_type.full_name)
    if m.client_streaming:
        return answering(_wrap_stream(fn, method, text), m.server_streaming, who)

    def refused(request: Any, context: Any) -> None:
        """A :class:`ServiceError` for a marker the decoder returned."""
        if isinstance(request, Undecodable):
            _warn(method, context, request)
            raise ServiceError(_INVALID, text)
        if isinstance(request, Oversized):
            raise ServiceError(_INVALID, batch_too_large(request.cap))

    return answering(fn, m.server_streaming, who, refused)


_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def method_handlers(servicer: Any, service: ServiceDescriptor,
                    class_of: ClassOf = message_factory.GetMessageClass,
                    batch_cap: int | None = None, who: str = "collector"
                    ) -> dict[str, grpc.RpcMethodHandler]:
    """One handler per method of ``service``, calling ``servicer.<Method>``; with
    ``batch_cap``, batch requests over it are refused before decoding."""
    out = {}
    for m in service.methods:
        factory = _FACTORIES[(m.client_streaming, m.server_streaming)]
        field = batch_field(m.input_type) if batch_cap is not None else None
        batch = (field, batch_cap) if field is not None and batch_cap is not None else None
        out[m.name] = factory(checked_method(getattr(servicer, m.name), m, who),
                              request_deserializer=decoder(class_of(m.input_type), batch),
                              response_serializer=class_of(m.output_type).SerializeToString)
    return out


def add_service(server: Any, servicer: Any, service: ServiceDescriptor,
                class_of: ClassOf = message_factory.GetMessageClass,
                batch_cap: int | None = None, who: str = "collector") -> None:
    """Register ``servicer`` for ``service`` on a ``grpc.Server`` or ``grpc.aio.Server``
    (what the generated ``add_XServicer_to_server`` does, with the safe decoding, every
    exception answered as its status (:func:`answering`; ``who`` names the server in an
    INTERNAL message) and, given ``batch_cap``, the item count of batch requests checked
    before decoding)."""
    handlers = method_handlers(servicer, service, class_of, batch_cap, who)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)
