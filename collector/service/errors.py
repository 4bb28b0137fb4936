"""The one refusal type of the collector's logic (no gRPC types below the servicers), and
the bounds on what a refusal's message may carry.

See ``proto/uldp/v1/device.proto`` and ``analyst.proto`` for every status code, its
meaning and the order of the checks. A message quotes a caller's string only through
:func:`echo` (at most :data:`ECHO_CHARS` characters of it), and a whole message is at most
:data:`MAX_MESSAGE_BYTES` bytes of UTF-8 (:func:`clip`): an answer's size is bounded by
the number of items it answers, never by what a caller sent (invariant 9).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

__all__ = ["DATABASE_UNAVAILABLE", "ECHO_CHARS", "INTERNAL_ERROR", "MAX_MESSAGE_BYTES",
           "ServiceError", "authenticate", "batch_too_large", "clip", "echo", "refusal"]

log = logging.getLogger("uldp.collector")

#: characters of a caller's string an error message quotes
ECHO_CHARS = 40
#: bytes (UTF-8) of a status or item message, at most
MAX_MESSAGE_BYTES = 384


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """A caller-supplied value as an error message quotes it: ``repr`` of at most
    ``limit`` characters of it, then ``…`` and its length when it was longer. The result
    is at most ``4·limit + 30`` characters whatever the value (``repr`` writes a control
    character as ``\\xNN``)."""
    s = value if isinstance(value, str) else str(value)
    if len(s) <= limit:
        return repr(s)
    return f"{s[:limit]!r}… ({len(s)} characters)"


def clip(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``message`` cut to at most ``limit`` bytes of UTF-8 (at a character boundary,
    ending in ``…`` when cut)."""
    data = message.encode("utf-8", "replace")
    if len(data) <= limit:
        return message
    return data[:limit - 3].decode("utf-8", "ignore") + "…"


def batch_too_large(cap: int, n: int | None = None) -> str:
    """The INVALID_ARGUMENT message of a batch call over its item cap (``n`` None: the
    items were not all counted, the request was refused as soon as it had more)."""
    return f"a batch holds at most {cap} items, got {n if n is not None else f'more than {cap}'}"


def authenticate(verifier: Any, token: str | None) -> str:
    """The device id of a genuine, unexpired device token (``verifier``: a
    ``uldp.collector.security.tokens.TokenVerifier``); UNAUTHENTICATED otherwise — the
    collector and the shuffler answer the same."""
    from uldp.collector.security.tokens import TokenError

    if not token:
        raise ServiceError("UNAUTHENTICATED", "missing device token "
                           "(metadata 'authorization: Bearer <token>')")
    try:
        return str(verifier.verify(token).device_id)
    except TokenError as exc:
        raise ServiceError("UNAUTHENTICATED", str(exc)) from None


class ServiceError(Exception):
    """A request is refused: ``code`` is a gRPC status code name, ``message`` says why
    (clipped to :data:`MAX_MESSAGE_BYTES`)."""

    def __init__(self, code: str, message: str) -> None:
        message = clip(message)
        super().__init__(message)
        self.code = code
        self.message = message


DATABASE_UNAVAILABLE = "the collector's database is unavailable; retry later"
INTERNAL_ERROR = "internal collector error (the collector logged it)"


@functools.cache
def database_errors() -> tuple[type[BaseException], ...]:
    """Exception types of a failing database (SQLAlchemy's and the drivers')."""
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    errors: list[type[BaseException]] = [SQLAlchemyError, sqlite3.Error]
    try:
        import psycopg
        errors.append(psycopg.Error)
    except ImportError:  # pragma: no cover - PostgreSQL support not installed
        pass
    return tuple(errors)


def refusal(exc: Exception, who: str = "collector") -> ServiceError:
    """The status of an exception raised while serving a call. A :class:`ServiceError`
    is itself; a database failure is UNAVAILABLE (nothing was acknowledged: retry); any
    other exception is INTERNAL, logged here with its traceback (``who``: the server, as
    its message names it). The wire never carries a Python class name or a traceback."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, database_errors()):
        log.warning("database error while serving a call: %s", exc)
        return ServiceError("UNAVAILABLE", DATABASE_UNAVAILABLE)
    log.error("unexpected error while serving a call", exc_info=exc)
    return ServiceError("INTERNAL", INTERNAL_ERROR.replace("collector", who))
