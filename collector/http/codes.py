"""gRPC status codes ↔ Connect error codes (docs/device-protocol.md §10.3).

A refusal is a :class:`~uldp.collector.service.errors.ServiceError` whose ``code`` is a gRPC
status code name. Over Connect and gRPC-Web the same refusal keeps its code and message:
the Connect code is the gRPC name in lower case (``CANCELLED`` is spelled ``canceled``), a
gRPC-Web response carries the numeric gRPC status in ``grpc-status`` as native gRPC does.
A Connect unary error also has an HTTP status (Connect protocol specification); clients
read the code from the JSON body, never from the HTTP status.
"""

from __future__ import annotations

from connectrpc.code import Code

__all__ = ["CONNECT_HTTP_STATUS", "GRPC_NUMBER", "connect_code", "grpc_name"]

#: gRPC status code names and numbers (google.rpc.Code)
GRPC_NUMBER: dict[str, int] = {
    "OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12,
    "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

#: HTTP status of a Connect unary error response, by gRPC name (Connect specification)
CONNECT_HTTP_STATUS: dict[str, int] = {
    "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404, "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429, "FAILED_PRECONDITION": 400, "ABORTED": 409,
    "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501, "INTERNAL": 500, "UNAVAILABLE": 503,
    "DATA_LOSS": 500, "UNAUTHENTICATED": 401,
}


def connect_code(grpc_code: str) -> Code:
    """The Connect code of a gRPC status code name (``INTERNAL`` for an unknown name)."""
    if grpc_code == "CANCELLED":
        return Code.CANCELED
    try:
        return Code[grpc_code]
    except KeyError:
        return Code.INTERNAL


def grpc_name(code: Code) -> str:
    """The gRPC status code name of a Connect code."""
    return "CANCELLED" if code is Code.CANCELED else code.name
