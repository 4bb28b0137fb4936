"""A ``grpc.Channel`` look-alike that carries the calls over Connect or gRPC-Web.

The generated gRPC stubs (``device_pb2_grpc.DeviceServiceStub(channel)``) only call
``channel.unary_unary`` / ``unary_stream`` with a method path and the message
(de)serializers, so the same test code drives the collector's HTTP port: the bytes go
through ``connectrpc``'s client (an independent implementation of both protocols, on
the pyqwest HTTP client) and a refusal comes back as a ``grpc.RpcError`` with the
mapped ``grpc.StatusCode`` and the message. Used by the HTTP parity tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from connectrpc.client import ConnectClientSync
from connectrpc.codec import Codec
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.protocol import ProtocolType
from pyqwest import SyncClient, SyncHTTPTransport

from uldp.collector.http.codes import grpc_name

__all__ = ["ConnectChannel", "ConnectRpcError", "https_call"]

PROTOCOLS = {"connect": ProtocolType.CONNECT, "grpc-web": ProtocolType.GRPC_WEB}


class _Bytes(Codec[bytes, bytes]):
    """The stubs serialize; the client moves bytes."""

    def name(self) -> str:
        return "proto"

    def encode(self, message: bytes) -> bytes:
        return message

    def decode(self, data: bytes | bytearray, message_class: type[bytes]) -> bytes:
        return bytes(data)


class ConnectRpcError(grpc.RpcError):
    """A refusal over HTTP, shaped like a gRPC call error."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def _rpc_error(exc: ConnectError) -> ConnectRpcError:
    return ConnectRpcError(getattr(grpc.StatusCode, grpc_name(exc.code)), exc.message)


def _method(path: str, stream: StreamType) -> MethodInfo[bytes, bytes]:
    _, service, name = path.split("/")
    return MethodInfo(name=name, service_name=service, input=bytes, output=bytes,
                      idempotency_level=IdempotencyLevel.UNKNOWN, stream_type=stream)


class ConnectChannel:
    """``base_url`` (``https://127.0.0.1:PORT``) over ``protocol`` (connect | grpc-web)."""

    def __init__(self, base_url: str, ca_cert: Path | bytes, protocol: str = "connect",
                 client_cert: Path | None = None, client_key: Path | None = None,
                 origin: str | None = None) -> None:
        ca = ca_cert if isinstance(ca_cert, bytes) else Path(ca_cert).read_bytes()
        transport = SyncHTTPTransport(
            tls_ca_cert=ca, tls_cert=client_cert.read_bytes() if client_cert else None,
            tls_key=client_key.read_bytes() if client_key else None)
        self._http = SyncClient(transport)
        self._client = ConnectClientSync(base_url, codec=_Bytes(),
                                         protocol=PROTOCOLS[protocol], send_compression=None,
                                         accept_compression=(), http_client=self._http)
        self._origin = origin

    def _headers(self, metadata: Any) -> dict[str, str]:
        h = {k: v for k, v in (metadata or ())}
        if self._origin:
            h["origin"] = self._origin
        return h

    def unary_unary(self, path: str, request_serializer: Callable[[Any], bytes] = bytes,
                    response_deserializer: Callable[[bytes], Any] = bytes, **_: Any
                    ) -> Callable[..., Any]:
        method = _method(path, StreamType.UNARY)

        def call(request: Any, timeout: float | None = None, metadata: Any = None,
                 **_kw: Any) -> Any:
            try:
                raw = self._client.execute_unary(
                    request=request_serializer(request), method=method,
                    headers=self._headers(metadata),
                    timeout_ms=int(timeout * 1000) if timeout else None)
            except ConnectError as exc:
                raise _rpc_error(exc) from None
            return response_deserializer(raw)
        return call

    def unary_stream(self, path: str, request_serializer: Callable[[Any], bytes] = bytes,
                     response_deserializer: Callable[[bytes], Any] = bytes, **_: Any
                     ) -> Callable[..., Iterator[Any]]:
        method = _method(path, StreamType.SERVER_STREAM)

        def call(request: Any, timeout: float | None = None, metadata: Any = None,
                 **_kw: Any) -> Iterator[Any]:
            try:
                for raw in self._client.execute_server_stream(
                        request=request_serializer(request), method=method,
                        headers=self._headers(metadata),
                        timeout_ms=int(timeout * 1000) if timeout else None):
                    yield response_deserializer(raw)
            except ConnectError as exc:
                raise _rpc_error(exc) from None
        return call

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ConnectChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def https_call(url: str, ca_cert: Path, method: str = "GET",
               headers: dict[str, str] | None = None, body: bytes | None = None
               ) -> tuple[int, dict[str, str], bytes]:
    """One plain HTTPS request trusting ``ca_cert``: (status, lower-case headers, body),
    also for an error status (the CORS, /healthz and raw-body checks of the HTTP ports)."""
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(ca_cert))
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
