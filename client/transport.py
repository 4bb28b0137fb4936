"""Client transport: TLS channels to the collector and retries with backoff and jitter.

A TLS set-up mistake (``uldp.client.tls``) is raised at once as one line
(:class:`~uldp.client.tls.TLSSetupError`): a credential file is checked before the
channel is made, and a handshake that failed verification is never retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc

from uldp.client.tls import TLSSetupError, load_credentials, tls_failure
from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["RETRYABLE", "RETRYABLE_CODES", "Endpoint", "RetryPolicy", "TLSSetupError",
           "call_with_retry", "secure_channel"]

T = TypeVar("T")

#: The one retry rule of the device contract (docs/device-protocol.md §10, device.proto
#: "Status codes"): the codes that say nothing happened, or that the outcome is unknown, are
#: retried with the identical request bytes (every device call is idempotent: the collector
#: answers an identical report again with ``duplicate = true``); after the last attempt the
#: report stays pending and is re-sent at the next poll. Every other code is the collector's
#: definitive answer (UNAUTHENTICATED: re-enrol once, §10).
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED,
                       grpc.StatusCode.INTERNAL})
#: The same rule as gRPC status code numbers (batch results carry numbers).
RETRYABLE_CODES = frozenset(c.value[0] for c in RETRYABLE)


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach a collector: ``target`` is ``host:port``; TLS always.

    ``ca_cert`` verifies the server (PEM path); ``client_cert``/``client_key`` are for
    mutual TLS; ``server_name`` overrides the name checked against the certificate.
    """

    target: str
    ca_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    server_name: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


def secure_channel(ep: Endpoint) -> grpc.Channel:
    """A TLS channel to ``ep`` (system roots when ``ca_cert`` is None); raises
    :class:`TLSSetupError` when a credential file is not what it should be."""
    roots, key, chain = load_credentials(ep.ca_cert, ep.client_cert, ep.client_key)
    creds = grpc.ssl_channel_credentials(root_certificates=roots, private_key=key,
                                         certificate_chain=chain)
    opts: list[tuple[str, object]] = [
        ("grpc.max_receive_message_length", ep.max_message_bytes),
        ("grpc.max_send_message_length", ep.max_message_bytes),
        ("grpc.enable_retries", 0),  # retries are ours: same bytes, backoff with jitter
    ]
    if ep.server_name:
        opts.append(("grpc.ssl_target_name_override", ep.server_name))
    return grpc.secure_channel(ep.target, creds, options=opts)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: attempt k waits U(0, min(cap, base·2^k))."""

    attempts: int = 8
    base_s: float = 0.1
    cap_s: float = 10.0
    timeout_s: float = 30.0  # per call

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.cap_s, self.base_s * (2 ** attempt)))


def call_with_retry(fn: Callable[[float], T], policy: RetryPolicy,
                    rng: random.Random | None = None,
                    sleep: Callable[[float], None] = time.sleep) -> T:
    """Call ``fn(timeout)``; on a retryable :class:`grpc.RpcError` wait and try again.

    The caller makes ``fn`` idempotent (e.g. it re-sends the same stored report bytes).
    A handshake that failed verification raises :class:`TLSSetupError` at once.
    """
    rng = rng or random.Random()
    for attempt in range(policy.attempts):
        try:
            return fn(policy.timeout_s)
        except grpc.RpcError as exc:
            if (tls := tls_failure(exc)) is not None:
                raise tls from None
            code = exc.code() if hasattr(exc, "code") else None
            if code not in RETRYABLE or attempt == policy.attempts - 1:
                raise
            sleep(policy.delay(attempt, rng))
    raise AssertionError("unreachable")  # pragma: no cover
