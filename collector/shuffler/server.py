"""A running shuffler process: its store, the device-facing gRPC server and the forwarder.

See ``uldp.collector.shuffler.service`` and ``docs/privacy.md`` ("Shuffle mode"). The
device port is TLS with the shuffler's own certificate; the link to the collector's
shuffler port is mutual TLS with the shuffler's client certificate. Started by
``uldp shuffler serve`` (``uldp.collector.cli.shuffler``).

``uldp shuffler serve --http-port`` also serves :attr:`ShufflerServer.servicer` over
Connect and gRPC-Web (``uldp.collector.http.shuffler``), in :attr:`ShufflerServer.pool`,
and — with ``--metrics-token-file`` — :attr:`ShufflerServer.metrics` at ``GET /metrics``.
"""

from __future__ import annotations

import logging
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2

from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES, shuffler_pb2
from uldp.collector.security.attestation import HmacAttestation
from uldp.collector.security.tickets import TicketKey
from uldp.collector.service.connections import (
    ConnectionLimits,
    defer_accept,
    grpc_options,
    plan_connections,
    raise_descriptor_limit,
)
from uldp.collector.service.handlers import add_service
from uldp.collector.shuffler.metrics import ShufflerMetrics
from uldp.collector.shuffler.service import (
    MAX_SEALED_BATCH,
    CollectorLink,
    Forwarder,
    ShufflerConfig,
    ShufflerServicer,
)
from uldp.collector.shuffler.store import ShufflerStore

__all__ = ["ShufflerServer", "ShufflerServerConfig"]

log = logging.getLogger("uldp.shuffler")
_SERVICE = shuffler_pb2.DESCRIPTOR.services_by_name["ShufflerService"]
_HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"]


@dataclass
class ShufflerServerConfig:
    db_path: Path
    tls_cert: Path  # the shuffler's server certificate (devices verify it)
    tls_key: Path
    ticket_key: Path  # the shuffler-ticket key shared with the collector (hex)
    collector: str  # host:port of the collector's shuffler port
    collector_ca: Path  # the CA that signed the collector's certificate
    client_cert: Path  # the shuffler's identity on the collector's shuffler port
    client_key: Path
    host: str = "127.0.0.1"
    port: int = 50061
    workers: int = 16
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    collector_server_name: str | None = None
    shuffle: ShufflerConfig = field(default_factory=ShufflerConfig)
    #: the shuffler's own enrolment check: an HMAC attestation key shared with the app's
    #: back end (not with the collector); None: it runs none, and no result counts its
    #: reports towards an amplified guarantee
    attestation_key: Path | None = None
    #: the gRPC port's connection limits (``uldp.collector.service.connections``; None:
    #: planned from the descriptor limit, as ``uldp shuffler serve`` does from its flags)
    connections: ConnectionLimits | None = None


class ShufflerServer:
    """One shuffler process (see the module docstring)."""

    def __init__(self, cfg: ShufflerServerConfig) -> None:
        self.config = cfg
        limit = cfg.max_message_bytes
        self.pool = futures.ThreadPoolExecutor(max_workers=cfg.workers,
                                               thread_name_prefix="shuffler")
        # the collector's main port's connection options: a cap, handshake, idle and age
        # times, metadata size, keepalive enforcement (invariant 9)
        self.limits = cfg.connections or plan_connections(raise_descriptor_limit(),
                                                          http=False)
        self.server = grpc.server(
            self.pool,
            options=[("grpc.max_receive_message_length", limit),
                     ("grpc.max_send_message_length", limit), *grpc_options(self.limits)],
            maximum_concurrent_rpcs=cfg.workers * 64)
        # the port first: an operator's mistake there leaves nothing behind (no database)
        creds = grpc.ssl_server_credentials([(Path(cfg.tls_key).read_bytes(),
                                              Path(cfg.tls_cert).read_bytes())])
        self.port = self.server.add_secure_port(f"{cfg.host}:{cfg.port}", creds)
        if self.port == 0:
            raise OSError(f"cannot listen on {cfg.host}:{cfg.port}")
        tickets = TicketKey.from_file(cfg.ticket_key)
        verifier = (HmacAttestation.from_file(cfg.attestation_key)
                    if cfg.attestation_key is not None else None)
        name = "hmac-attestation" if verifier is not None else ""
        self.store = ShufflerStore(cfg.db_path)
        self.channel = secure_channel(Endpoint(
            cfg.collector, Path(cfg.collector_ca), Path(cfg.client_cert), Path(cfg.client_key),
            server_name=cfg.collector_server_name, max_message_bytes=limit))
        self.link = CollectorLink(self.channel, cfg.shuffle.query_ttl_s)
        self.forwarder = Forwarder(self.store, self.link, cfg.shuffle, verifier_name=name)
        self.servicer = ShufflerServicer(self.store, tickets, self.link, verifier, name,
                                         on_admit=self.forwarder.admitted,
                                         checkers=cfg.shuffle.checkers)
        add_service(self.server, self.servicer, _SERVICE, batch_cap=MAX_SEALED_BATCH,
                    who="shuffler")
        self.metrics = ShufflerMetrics(self.store, self.servicer, self.forwarder, self.link)
        self.health = health.HealthServicer()
        add_service(self.server, self.health, _HEALTH)

    def start(self) -> None:
        self.server.start()
        for name in ("", _SERVICE.full_name):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.forwarder.start()
        self.servicer.checkers.warm()
        if not defer_accept(self.port):
            log.debug("TCP_DEFER_ACCEPT not set on the shuffler's gRPC port %d", self.port)
        log.info("shuffler listening on %s:%d (TLS), forwarding to %s (mutual TLS); "
                 "enrolment check: %s", self.config.host, self.port, self.config.collector,
                 self.servicer.verifier_name or "none (no result will state an amplified ε)")

    def stop(self, grace: float = 5.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self.forwarder.stop()
        self.servicer.checkers.close()
        self.channel.close()
        log.info("shuffler stopped: %s", self.store.counts())
        self.store.close()

