"""The collector's shuffler port: ``uldp.v1.ShuffleIntakeService`` over mutual TLS.

See ``proto/uldp/v1/shuffler.proto`` and ``docs/privacy.md`` ("Shuffle mode"). A separate
gRPC server on its own port (``--shuffler-port``), so the device service never shares its
credentials: the TLS handshake requires a client certificate signed by ``--shuffler-ca``,
and every call also checks that the certificate's subject common name is the shuffler's
(``--shuffler-name``) — another client of the same CA gets PERMISSION_DENIED. The logic
is :class:`uldp.collector.service.shuffled.ShuffleIntake`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES, shuffler_pb2, shuffler_pb2_grpc
from uldp.collector.observe import instrument, metrics_of
from uldp.collector.service.connections import ConnectionLimits, defer_accept, grpc_options
from uldp.collector.service.core import CollectorCore
from uldp.collector.service.errors import ServiceError
from uldp.collector.service.handlers import add_service
from uldp.collector.service.servicers import refusal
from uldp.collector.service.shuffled import ForwardedBatch

__all__ = ["IntakeServer", "ShuffleIntakeServicer"]

log = logging.getLogger("uldp.collector")
_SERVICE = shuffler_pb2.DESCRIPTOR.services_by_name["ShuffleIntakeService"]
#: connections the shuffler port holds at once (shufflers only; counted in the reserve of
#: ``connections.BASE_RESERVE``)
INTAKE_CONNECTIONS = 32


def peer_names(context: grpc.ServicerContext) -> list[str]:
    """The subject common names of the caller's verified client certificate."""
    auth = context.auth_context() or {}
    return [n.decode("utf-8", "replace") for n in auth.get("x509_common_name", [])]


class ShuffleIntakeServicer(shuffler_pb2_grpc.ShuffleIntakeServiceServicer):
    """GetShuffleQuery and ForwardBatch, for the shuffler identity only."""

    def __init__(self, core: CollectorCore, identity: str) -> None:
        self.core, self.identity = core, identity

    def _run(self, context: grpc.ServicerContext, fn: Any) -> Any:
        try:
            if self.identity not in peer_names(context):
                raise ServiceError("PERMISSION_DENIED", "only the shuffler may call this "
                                   f"service (client certificate name {self.identity!r})")
            return fn()
        except Exception as exc:
            err = refusal(exc)
            context.abort(getattr(grpc.StatusCode, err.code), err.message)

    def GetShuffleQuery(self, request: shuffler_pb2.GetShuffleQueryRequest,
                        context: grpc.ServicerContext) -> shuffler_pb2.ShuffleQuery:
        def run() -> shuffler_pb2.ShuffleQuery:
            q = self.core.shuffled.query(request.query_id)
            return shuffler_pb2.ShuffleQuery(
                query_id=q["query_id"], shuffled=q["shuffled"], min_batch=q["min_batch"],
                users=q["users"],
                phases=[shuffler_pb2.ShufflePhase(phase=p, state=s, deadline_ms=d,
                                                  quota=quota, declined=declined)
                        for p, s, d, quota, declined in q["phases"]],
                cells=[shuffler_pb2.ShuffleCell(phase=p, group=g, stage=st, devices=n,
                                                declined=declined)
                       for p, g, st, n, declined in q["cells"]])
        return self._run(context, run)

    def ForwardBatch(self, requests: Iterator[shuffler_pb2.ForwardBatchRequest],
                     context: grpc.ServicerContext) -> shuffler_pb2.ForwardBatchResponse:
        def run() -> shuffler_pb2.ForwardBatchResponse:
            first = next(requests, None)
            if first is None:
                raise ServiceError("INVALID_ARGUMENT", "a ForwardBatch stream with no piece")
            out = self.core.shuffled.forward(ForwardedBatch(
                first.batch_id, first.query_id, first.phase, first.group,
                first.stage, first.task_digest, list(first.sealed),
                first.attested, first.verifier, first.size), _later(requests))
            if not out.duplicate:
                log.info("query %s phase %d group %d stage %d: shuffled batch of %d stored "
                         "(%d dropped)", first.query_id, first.phase, first.group,
                         first.stage, out.stored, out.refused)
            return shuffler_pb2.ForwardBatchResponse(duplicate=out.duplicate,
                                                     stored=out.stored, refused=out.refused)
        return self._run(context, run)


def _later(requests: Iterator[shuffler_pb2.ForwardBatchRequest]) -> Iterator[list[bytes]]:
    """The sealed reports of each later piece of a ForwardBatch stream; a later piece that
    sets any other field is refused (only the first piece names the batch)."""
    for r in requests:
        if r.ListFields() and any(f.name != "sealed" for f, _ in r.ListFields()):
            raise ServiceError("INVALID_ARGUMENT", "only the first piece of a ForwardBatch "
                               "stream names the batch: a later piece carries only sealed")
        yield list(r.sealed)


class IntakeServer:
    """The shuffler port: its own gRPC server, mutual TLS against the shuffler's CA."""

    def __init__(self, core: CollectorCore, *, host: str, port: int, tls_cert: Path,
                 tls_key: Path, shuffler_ca: Path, identity: str,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 limits: ConnectionLimits | None = None) -> None:
        creds = grpc.ssl_server_credentials(
            [(Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())],
            root_certificates=Path(shuffler_ca).read_bytes(), require_client_auth=True)
        # the main port's connection options (its times, metadata size, keepalive
        # enforcement), with a cap of its own: only shufflers connect here
        self.limits = replace(limits or ConnectionLimits(), grpc_connections=min(
            (limits or ConnectionLimits()).grpc_connections, INTAKE_CONNECTIONS))
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="uldp-intake"),
            options=[("grpc.max_receive_message_length", max_message_bytes),
                     ("grpc.max_send_message_length", max_message_bytes),
                     *grpc_options(self.limits)])
        self.core = core
        add_service(self.server, instrument(ShuffleIntakeServicer(core, identity), _SERVICE,
                                            metrics_of(core), "shuffler"), _SERVICE)
        self.port = self.server.add_secure_port(f"{host}:{port}", creds)
        if self.port == 0:
            raise OSError(f"cannot listen on {host}:{port} (--shuffler-port)")

    def start(self) -> None:
        self.server.start()
        if not defer_accept(self.port):
            log.debug("TCP_DEFER_ACCEPT not set on the shuffler port %d", self.port)
        self.core.shuffled.warm()

    def stop(self, grace: float = 5.0) -> None:
        self.server.stop(grace).wait()
