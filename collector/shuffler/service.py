"""The shuffler: ``uldp.v1.ShufflerService`` for devices, and the forwarder to the collector.

See ``proto/uldp/v1/shuffler.proto`` (the checks, in order, and their codes) and
``docs/privacy.md`` ("Shuffle mode"). The shuffler is run by a party independent of the
collector. It holds the collector's token *verification* key only
(:class:`uldp.collector.security.tokens.TokenVerifier`: it can check a device token, never
issue one), its own TLS identity for devices, and a client certificate the collector
accepts on its shuffler port. It never holds a key that opens a report.

The forwarder (:class:`Forwarder`) ticks every ``tick_s``: for each bucket of unbatched
reports of one (query, phase, group, stage, task digest) it draws a batch (uniform subset,
uniform order, OS CSPRNG; ``ShufflerStore.draw``) when

* the bucket holds at least ``T + B`` reports (``B`` = the largest batch a message
  carries): it draws ``B``, so that at least ``T`` remain for the next batch; or
* it holds at least ``T`` and its cell is complete, or its phase's deadline is less than
  ``deadline_margin_s`` away: it draws them all; or
* it holds at least ``2T`` and has been quiet for ``linger_s``: it draws all but ``T``;

with ``T`` = max(``--min-batch``, the query's minimum batch). Holding ``T`` back means the
last reports of a cell always make a batch of at least ``T``; they leave when the cell is
complete (its reports here and already batched reach the number of devices the query
placed in it, which the collector publishes) or near the deadline. A bucket below ``T``
waits; when its phase is no longer open it is dropped (counted, logged): those reports could only
have been released in a batch smaller than promised. Drawn batches are sent with
``ForwardBatch`` under their id until the collector answers; a definitive refusal is
recorded and the batch dropped.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from uldp.client.sealing import ENC_BYTES, TAG_BYTES
from uldp.client.transport import RETRYABLE
from uldp.client.wire import AUTH_METADATA_KEY, shuffler_pb2, shuffler_pb2_grpc
from uldp.collector.security.tokens import TokenVerifier
from uldp.collector.service.errors import ServiceError, authenticate, echo
from uldp.collector.shuffler.store import Bucket, ShufflerStore, Submission

__all__ = ["TEST_PAUSE_ENV", "Forwarder", "QueryInfo", "ShufflerConfig", "ShufflerServicer"]

log = logging.getLogger("uldp.shuffler")

#: test-only environment variable: seconds the forwarder stalls between the collector's
#: acknowledgement of a batch and recording it (to kill the shuffler there); unset: 0
TEST_PAUSE_ENV = "ULDP_TEST_FORWARD_PAUSE_S"

_HEX64 = re.compile(r"[0-9a-f]{64}")
MIN_SEALED = ENC_BYTES + 1 + 8 + TAG_BYTES  # one value
MAX_SEALED = ENC_BYTES + 1 + 8 * (1 << 18) + TAG_BYTES  # the device limit of 2^18 values


@dataclass(frozen=True)
class ShufflerConfig:
    min_batch: int = 100  # the shuffler's own floor on every batch
    max_batch: int = 50_000  # at most this many reports per batch (and per message)
    linger_s: float = 2.0  # a bucket quiet this long is flushed (if it holds >= T)
    deadline_margin_s: float = 5.0  # flush this long before the phase's deadline
    tick_s: float = 0.2
    query_ttl_s: float = 1.0  # how long the collector's answer about a query is reused
    max_message_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class QueryInfo:
    """What the collector says about a query (public): GetShuffleQuery."""

    shuffled: bool
    min_batch: int
    phases: dict[int, tuple[str, int]]  # phase -> (state, deadline ms)
    cells: dict[tuple[int, int, int], int]  # (phase, group, stage) -> devices placed there


class CollectorLink:
    """The shuffler's client of the collector's shuffler port (mutual TLS), with a short
    cache of each query's public parameters."""

    def __init__(self, channel: grpc.Channel, ttl_s: float) -> None:
        self.stub = shuffler_pb2_grpc.ShuffleIntakeServiceStub(channel)
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, QueryInfo | None]] = {}
        self._lock = threading.Lock()

    def query(self, query_id: str, fresh: bool = False) -> QueryInfo | None:
        """The query's info; None if the collector knows no such query. Raises
        grpc.RpcError when the collector cannot be asked."""
        with self._lock:
            hit = self._cache.get(query_id)
        if hit is not None and not fresh and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        try:
            q = self.stub.GetShuffleQuery(
                shuffler_pb2.GetShuffleQueryRequest(query_id=query_id), timeout=10)
            info: QueryInfo | None = QueryInfo(
                q.shuffled, q.min_batch, {p.phase: (p.state, p.deadline_ms) for p in q.phases},
                {(c.phase, c.group, c.stage): c.devices for c in q.cells})
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            info = None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[query_id] = (time.monotonic(), info)
        return info


def _status(code: str) -> int:
    return int(getattr(grpc.StatusCode, code).value[0])


class ShufflerServicer(shuffler_pb2_grpc.ShufflerServiceServicer):
    """SubmitSealed / SubmitSealedBatch: the checks of shuffler.proto, then the store."""

    def __init__(self, store: ShufflerStore, verifier: TokenVerifier,
                 link: CollectorLink) -> None:
        self.store, self.verifier, self.link = store, verifier, link

    def _device(self, token: str | None) -> str:
        return authenticate(self.verifier, token)

    def _checked(self, device_id: str, r: shuffler_pb2.SealedReport) -> Submission:
        if not r.query_id or len(r.query_id) > 64:
            raise ServiceError("INVALID_ARGUMENT", "query_id must have 1 to 64 characters")
        if not _HEX64.fullmatch(r.task_digest):
            raise ServiceError("INVALID_ARGUMENT", "task_digest must be 64 lowercase hex "
                               "digits")
        if not MIN_SEALED <= len(r.sealed) <= MAX_SEALED:
            raise ServiceError("INVALID_ARGUMENT", f"a sealed report has {MIN_SEALED} to "
                               f"{MAX_SEALED} bytes, got {len(r.sealed)}")
        try:
            q = self.link.query(r.query_id)
        except grpc.RpcError:
            raise ServiceError("UNAVAILABLE", "the collector cannot be reached to check the "
                               "query; retry later") from None
        if q is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(r.query_id)}")
        if not q.shuffled:
            raise ServiceError("FAILED_PRECONDITION", f"query {r.query_id} is not in shuffle "
                               "mode")
        state = q.phases.get(r.phase, ("missing", 0))[0]
        if state != "open":
            raise ServiceError("FAILED_PRECONDITION", f"phase {r.phase} of query "
                               f"{r.query_id} is not open (state: {state})")
        return Submission(device_id, r.query_id, r.phase, r.group, r.stage, r.task_digest,
                          bytes(r.sealed))

    def _store(self, items: list[Submission]) -> list[tuple[str, bool]]:
        try:
            return self.store.submit(items)
        except Exception as exc:
            log.warning("store failed: %s", exc)
            raise ServiceError("UNAVAILABLE", "shuffler storage failed; not acknowledged, "
                               "retry later") from None

    def SubmitSealed(self, request: shuffler_pb2.SubmitSealedRequest,
                     context: grpc.ServicerContext) -> shuffler_pb2.SubmitSealedResponse:
        try:
            device = self._device(_bearer(context))
            if request.report.device_token:
                raise ServiceError("INVALID_ARGUMENT", "SealedReport.device_token must be "
                                   "empty in SubmitSealed (the token is call metadata)")
            code, dup = self._store([self._checked(device, request.report)])[0]
            if code != "OK":
                raise ServiceError(code, f"device already sent a different report for "
                                   f"query {request.report.query_id}")
            return shuffler_pb2.SubmitSealedResponse(duplicate=dup)
        except ServiceError as exc:
            context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
        raise AssertionError("unreachable")  # pragma: no cover

    def SubmitSealedBatch(self, request: shuffler_pb2.SubmitSealedBatchRequest,
                          context: grpc.ServicerContext
                          ) -> shuffler_pb2.SubmitSealedBatchResponse:
        results: list[Any] = []
        todo: list[tuple[int, Submission]] = []
        for r in request.reports:
            try:
                todo.append((len(results), self._checked(self._device(r.device_token), r)))
                results.append(None)
            except ServiceError as exc:
                results.append(shuffler_pb2.SealedResult(code=_status(exc.code),
                                                         message=exc.message))
        try:
            outs = self._store([s for _, s in todo]) if todo else []
        except ServiceError as exc:
            context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
        for (i, s), (code, dup) in zip(todo, outs, strict=True):
            results[i] = shuffler_pb2.SealedResult(
                code=_status(code), duplicate=dup, message="" if code == "OK" else
                f"device already sent a different report for query {s.query_id}")
        return shuffler_pb2.SubmitSealedBatchResponse(results=results)


def _bearer(context: grpc.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == AUTH_METADATA_KEY and isinstance(value, str) and value.startswith("Bearer "):
            return value[7:].strip()
    return None


class Forwarder:
    """Draws batches from quiet or full buckets and sends them (module docstring)."""

    def __init__(self, store: ShufflerStore, link: CollectorLink, config: ShufflerConfig,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.link, self.config, self.clock = store, link, config, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="uldp-forwarder", daemon=True)
        self.dropped = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.config.tick_s):
            try:
                self.tick()
            except Exception:  # keep ticking: the collector may be briefly unreachable
                log.exception("forwarder tick")

    def tick(self) -> None:
        """One round: draw what is due, then send every batch not yet answered."""
        for b in self.store.buckets():
            self._consider(b)
        for batch in self.store.unsent():
            if self._stop.is_set():
                return
            self._send(batch)

    def _per_message(self, b: Bucket) -> int:
        fit = (self.config.max_message_bytes - 4096) // (b.max_bytes + 8)
        return max(1, min(self.config.max_batch, fit))

    def _consider(self, b: Bucket) -> None:
        try:
            q = self.link.query(b.query_id)
        except grpc.RpcError:
            return  # ask again next tick
        state, deadline = q.phases.get(b.phase, ("missing", 0)) if q else ("missing", 0)
        if q is None or not q.shuffled or state not in ("open", "pending"):
            n = self.store.drop_bucket(b)
            self.dropped += n
            log.warning("query %s phase %d group %d stage %d is %s: dropped %d reports that "
                        "never made a batch", b.query_id, b.phase, b.group, b.stage,
                        state, n)
            return
        t = max(self.config.min_batch, q.min_batch)
        big = self._per_message(b)
        if t > big:
            return  # cannot form a batch this large in one message: wait for the phase end
        now_ms = self.clock() * 1000
        placed = q.cells.get((b.phase, b.group, b.stage), 0)
        complete = b.count + self.store.batched(b) >= placed > 0  # nothing more can come
        near = bool(deadline) and deadline - now_ms <= self.config.deadline_margin_s * 1000
        quiet = now_ms - b.last_ms >= self.config.linger_s * 1000
        if b.count >= t + big:
            self.store.draw(b, big)
        elif b.count >= t and (complete or near):
            self.store.draw(b, b.count)
        elif b.count >= 2 * t and quiet:
            self.store.draw(b, b.count - t)  # keep T back: the cell's tail goes with them

    def _send(self, batch: Any) -> None:
        req = shuffler_pb2.ForwardBatchRequest(
            batch_id=batch.batch_id, query_id=batch.query_id, phase=batch.phase,
            group=batch.group, stage=batch.stage, task_digest=batch.task_digest,
            sealed=batch.sealed)
        try:
            resp = self.link.stub.ForwardBatch(req, timeout=60)
        except grpc.RpcError as exc:
            if exc.code() in RETRYABLE:
                log.info("batch %s: collector unavailable (%s); retrying", batch.batch_id,
                         exc.code().name)
                return
            log.warning("batch %s of %d reports refused by the collector: %s: %s",
                        batch.batch_id, len(batch.sealed), exc.code().name, exc.details())
            self.store.finish(batch.batch_id, "refused",
                              message=f"{exc.code().name}: {exc.details()}")
            return
        pause = float(os.environ.get(TEST_PAUSE_ENV) or 0)
        if pause > 0:  # test hook: acknowledged by the collector, not yet recorded here
            time.sleep(pause)
        self.store.finish(batch.batch_id, "forwarded", resp.stored, resp.refused)
        log.info("batch %s forwarded: %d reports (%d stored, %d dropped%s)", batch.batch_id,
                 len(batch.sealed), resp.stored, resp.refused,
                 ", duplicate" if resp.duplicate else "")
