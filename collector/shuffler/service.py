"""The shuffler: ``uldp.v1.ShufflerService`` for devices, and the forwarder to the collector.

See ``proto/uldp/v1/shuffler.proto`` (the checks, in order, and their codes) and
``docs/privacy.md`` §7. The shuffler is run by a party independent of the collector. It
holds the key that checks shuffler tickets (``uldp.collector.security.tickets``; it never
sees a collector token), optionally an enrolment check of its own (an
:class:`~uldp.collector.security.attestation.EnrolmentVerifier`, e.g. app attestations
under a key the app's back end shares with it and not with the collector), its own TLS
identity for devices, and a client certificate the collector accepts on its shuffler port.
It never holds a key that opens a report.

Admission (:class:`ShufflerServicer`): one report per ticket (= per assigned slot), at most
as many per (phase, group, stage) as the query placed there, never the same ciphertext
twice; every limit is checked before anything is stored, and a batch call over its item
cap is refused before it is decoded.

The forwarder (:class:`Forwarder`) ticks every ``tick_s``: for each bucket of unbatched
reports of one (query, phase, group, stage, task digest) it draws a batch (uniform subset,
uniform order, an OS-keyed ChaCha20 stream; ``ShufflerStore.draw``) when

* the bucket holds at least ``T + B`` reports: it draws ``B``, so that at least ``T``
  remain for the next batch (``B`` = max(T, ⌈placed / ``batch_parts``⌉), at most
  ``max_batch``: a cell goes out in about ``batch_parts`` batches, the first opened at the
  collector while the rest still arrive); or
* it holds at least ``T`` and its cell is complete, or its phase's deadline is less than
  ``deadline_margin_s`` away: it draws them all; or
* it holds at least ``2T`` and has been quiet for ``linger_s``: it draws all but ``T``;

with ``T`` = max(``--min-batch``, the query's minimum batch). The forwarder is woken by
every call that admits a report — the round runs in that call's thread when no other is
running — and by every answered batch, so a batch that is due is drawn and sent at once;
``tick_s`` bounds the wait otherwise. Holding ``T`` back means the
last reports of a cell always make a batch of at least ``T`` — which is why a cell is
forwarded before it is complete only once it holds ``2T``. A cell is *complete* when no
more reports can come: the shuffler has admitted as many as the query placed devices in
it, less the devices of the cell that declined their task at the collector
(``ShuffleCell.declined``), or every slot of its phase has either a report here or a
decline (``ShufflePhase.declined``), so a device that declines never stalls its cell
until the deadline. A bucket below ``T`` waits; when its phase is no longer open it is
dropped (counted, logged): those reports could only have been released in a batch smaller than
promised. Drawn batches are sent with ``ForwardBatch`` under their id, with the number of
distinct attested subjects in them, until the collector answers; a definitive refusal is
recorded and the batch dropped. A batch is streamed in pieces of at most
:data:`FORWARD_PIECE` reports (and one message), in its drawn order: the collector opens
each piece as it arrives and stores the batch once the last is in, so its opening runs
while the rest of the batch is still on the wire. A complete cell's single batch starts
streaming while its draw is being recorded, its last piece only once the record has
committed (:meth:`Forwarder._draw_and_send`). Once a batch is answered the shuffler
forgets which slot sent which of its reports.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc

from uldp.client.transport import RETRYABLE
from uldp.client.wire import (
    AUTH_METADATA_KEY,
    MAX_BATCH_ITEMS,
    MAX_FORWARD_REPORTS,
    shuffler_pb2,
    shuffler_pb2_grpc,
)
from uldp.collector.security.attestation import EnrolmentVerifier
from uldp.collector.security.tickets import TicketKey
from uldp.collector.service.errors import ServiceError, batch_too_large, echo
from uldp.collector.shuffler.checks import Checkers, precheck
from uldp.collector.shuffler.link import CollectorLink, PhaseInfo, QueryInfo
from uldp.collector.shuffler.store import (
    Admission,
    Bucket,
    DrawnBatch,
    ShufflerStore,
    Submission,
    judge,
)

__all__ = ["DEFAULT_BATCH_PARTS", "FORWARD_PIECE", "MAX_SEALED_BATCH", "TEST_PAUSE_ENV",
           "CollectorLink", "Forwarder", "PhaseInfo", "QueryInfo", "ShufflerConfig",
           "ShufflerServicer"]

log = logging.getLogger("uldp.shuffler")

#: test-only environment variable: seconds the forwarder stalls between the collector's
#: acknowledgement of a batch and recording it (to kill the shuffler there); unset: 0
TEST_PAUSE_ENV = "ULDP_TEST_FORWARD_PAUSE_S"

#: items of a SubmitSealedBatch, at most (counted in the bytes before decoding)
MAX_SEALED_BATCH = MAX_BATCH_ITEMS

#: the default ``--batch-parts``: one batch per cell, the smallest stated ε (the
#: collector opens nothing until the cell is complete). ``--batch-parts 4`` lets the first
#: batches be opened while the rest still arrive, at about 2× the stated ε (the bounds scale
#: as 1/√n); docs/privacy.md §7 "Batch sizes"
DEFAULT_BATCH_PARTS = 1

#: reports per piece of a forwarded batch, at most (fewer when the piece would not fit in
#: one message): the collector starts opening a batch once its first piece is in
FORWARD_PIECE = 1000

#: the forwarder ticks at most this often when woken by admissions (seconds)
MIN_TICK_GAP_S = 0.02



@dataclass(frozen=True)
class ShufflerConfig:
    min_batch: int = 100  # the shuffler's own floor on every batch
    max_batch: int = 50_000  # at most this many reports per batch (<= MAX_FORWARD_REPORTS)
    #: a cell is forwarded in about this many batches of at least ceil(placed / parts)
    #: (1: each cell in one batch once complete; docs/privacy.md §7 "Batch sizes")
    batch_parts: int = DEFAULT_BATCH_PARTS
    linger_s: float = 2.0  # a bucket quiet this long is flushed (if it holds >= 2T)
    deadline_margin_s: float = 5.0  # flush this long before the phase's deadline
    tick_s: float = 0.2
    query_ttl_s: float = 1.0  # how long the collector's answer about a query is reused
    #: processes that run checks 1 to 5 of batch calls (0: the calls' own threads;
    #: ``uldp shuffler serve`` defaults to one per core, at most 4)
    checkers: int = 0
    senders: int = 2  # batches sent to the collector at once (it opens one while storing one)
    max_message_bytes: int = 4 * 1024 * 1024


_MISSING = PhaseInfo("missing", 0)
_UNASKED: Any = object()  # a query not asked for yet in this call


def _status(code: str) -> int:
    return int(getattr(grpc.StatusCode, code).value[0])


#: one item's answer: (code name, duplicate, message)
Answer = tuple[str, bool, str]


class ShufflerServicer(shuffler_pb2_grpc.ShufflerServiceServicer):
    """SubmitSealed / SubmitSealedBatch: the checks of shuffler.proto, then the store."""

    def __init__(self, store: ShufflerStore, tickets: TicketKey, link: CollectorLink,
                 verifier: EnrolmentVerifier | None = None, verifier_name: str = "",
                 cap: int = MAX_SEALED_BATCH,
                 on_admit: Callable[[], None] | None = None, checkers: int = 0) -> None:
        self.store, self.tickets, self.link = store, tickets, link
        self.verifier, self.cap = verifier, cap
        #: checks 1 to 5 of a batch call's reports, in ``checkers`` processes (0: in the
        #: call's thread; uldp.collector.shuffler.checks)
        self.checkers = Checkers(tickets, verifier, checkers)
        #: called after a call admitted reports (the forwarder's wake-up: a bucket that
        #: is now due is drawn at once, not at the next tick)
        self.on_admit = on_admit
        self.verifier_name = verifier_name if verifier is not None else ""
        self.refused: dict[str, int] = {}  # refusals by code (metrics)

    def _admission(self, r: shuffler_pb2.SealedReport,
                   seen: dict[str, QueryInfo | ServiceError | None] | None = None
                   ) -> Admission | Answer:
        """Checks 1 to 6 of one report: its admission, or the answer it gets now
        (``seen``: the queries' views asked for already in this call)."""
        return self._placed_admission(precheck(self.tickets, self.verifier, r), seen)

    def _placed_admission(self, item: Submission,
                          seen: dict[str, QueryInfo | ServiceError | None] | None = None
                          ) -> Admission | Answer:
        """Check 6 of a report that passed checks 1 to 5 (:func:`precheck`)."""
        try:
            placed = self._placed(item.query_id, item.phase, item.group, item.stage,
                                  item.slot, seen)
        except ServiceError:
            # step 5 before 6: a slot that stored its report answers for itself, also
            # once its phase closed (the store judges it again in the normal path)
            judged = judge(self.store.prior(item.query_id, item.slot), item)
            if judged is None:
                raise
            return (*judged, "" if judged[0] == "OK" else f"slot {item.slot} of query "
                    f"{item.query_id} already sent a different report")
        return Admission(item, placed)

    def _query(self, query_id: str) -> QueryInfo | None:
        try:
            return self.link.query(query_id)
        except grpc.RpcError:
            raise ServiceError("UNAVAILABLE", "the collector cannot be reached to check the "
                               "query; retry later") from None

    def _placed(self, query_id: str, phase: int, group: int, stage: int, slot: int,
                seen: dict[str, QueryInfo | ServiceError | None] | None = None) -> int:
        """Check 6 against the collector's public view of the query: the devices it
        placed in the report's cell. ``seen`` keeps the view (or the failure to get it)
        per query for the rest of a batch call: asked once per call, not per report."""
        if seen is None:
            q = self._query(query_id)
        else:
            got = seen.get(query_id, _UNASKED)
            if got is _UNASKED:
                try:
                    got = self._query(query_id)
                except ServiceError as exc:
                    got = exc
                seen[query_id] = got
            if isinstance(got, ServiceError):
                raise ServiceError(got.code, got.message)
            q = got
        if q is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        if not q.shuffled:
            raise ServiceError("FAILED_PRECONDITION", f"query {query_id} is not in shuffle "
                               "mode")
        state = q.phases.get(phase, _MISSING).state
        if state != "open":
            raise ServiceError("FAILED_PRECONDITION", f"phase {phase} of query "
                               f"{query_id} is not open (state: {state})")
        placed = q.cells.get((phase, group, stage), 0)
        if slot >= q.users or placed == 0:
            raise ServiceError("PERMISSION_DENIED", f"the ticket names slot {slot} of phase "
                               f"{phase} group {group} stage {stage}, which query {query_id} "
                               f"does not have ({q.users} slots)")
        return placed

    def _store(self, items: list[Admission]) -> list[Answer]:
        try:
            out = self.store.submit(items)
        except Exception as exc:
            log.warning("store failed: %s", exc)
            raise ServiceError("UNAVAILABLE", "shuffler storage failed; not acknowledged, "
                               "retry later") from None
        if self.on_admit is not None and any(a[0] == "OK" and not a[1] for a in out):
            self.on_admit()
        return out

    def _count(self, code: str) -> None:
        if code != "OK":
            self.refused[code] = self.refused.get(code, 0) + 1

    def SubmitSealed(self, request: shuffler_pb2.SubmitSealedRequest,
                     context: grpc.ServicerContext) -> shuffler_pb2.SubmitSealedResponse:
        try:
            _no_token(context)
            adm = self._admission(request.report)
            code, dup, msg = self._store([adm])[0] if isinstance(adm, Admission) else adm
            if code != "OK":
                raise ServiceError(code, msg)
            return shuffler_pb2.SubmitSealedResponse(duplicate=dup)
        except ServiceError as exc:
            self._count(exc.code)
            context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
        raise AssertionError("unreachable")  # pragma: no cover

    def SubmitSealedBatch(self, request: shuffler_pb2.SubmitSealedBatchRequest,
                          context: grpc.ServicerContext
                          ) -> shuffler_pb2.SubmitSealedBatchResponse:
        try:
            _no_token(context)
            if len(request.reports) > self.cap:
                raise ServiceError("INVALID_ARGUMENT", batch_too_large(
                    self.cap, len(request.reports)))
        except ServiceError as exc:
            self._count(exc.code)
            context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
        answers: list[Answer | None] = []
        todo: list[tuple[int, Admission]] = []
        seen: dict[str, QueryInfo | ServiceError | None] = {}
        for pre in self.checkers.check(request):  # checks 1 to 5, maybe in the pool
            if isinstance(pre, tuple):
                answers.append((pre[0], False, pre[1]))
                continue
            try:
                adm = self._placed_admission(pre, seen)
            except ServiceError as exc:
                adm = (exc.code, False, exc.message)
            if isinstance(adm, Admission):
                todo.append((len(answers), adm))
                answers.append(None)
            else:
                answers.append(adm)
        try:
            outs = self._store([a for _, a in todo]) if todo else []
        except ServiceError as exc:
            context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
        for (i, _), out in zip(todo, outs, strict=True):
            answers[i] = out
        resp = shuffler_pb2.SubmitSealedBatchResponse()
        add = resp.results.add
        for a in answers:
            assert a is not None
            if a[0] == "OK" and not a[2]:  # the common answer: no code, no message
                add(duplicate=a[1])
                continue
            self._count(a[0])
            add(code=_status(a[0]), duplicate=a[1], message=a[2])
        return resp


def _no_token(context: grpc.ServicerContext) -> None:
    """Refuse a call that carries a token: the shuffler takes tickets only, and a
    device must never hand it the token it uses with the collector."""
    for key, _ in context.invocation_metadata() or ():
        if key == AUTH_METADATA_KEY:
            raise ServiceError("INVALID_ARGUMENT", "the shuffler takes no token (metadata "
                               "'authorization'): send the task's shuffle_ticket in "
                               "SealedReport.ticket, never the collector token")


class _Gate:
    """Whether a batch sent while its draw was being recorded got recorded (set once)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._ok = False

    def open(self, ok: bool) -> None:
        self._ok = ok
        self._done.set()

    def wait(self) -> bool:
        self._done.wait()
        return self._ok


class Forwarder:
    """Draws batches from quiet or full buckets and sends them (module docstring)."""

    def __init__(self, store: ShufflerStore, link: CollectorLink, config: ShufflerConfig,
                 clock: Callable[[], float] = time.time, verifier_name: str = "") -> None:
        self.store, self.link, self.config, self.clock = store, link, config, clock
        self.verifier_name = verifier_name  # the enrolment check of the admitted reports
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by wake(): tick now, not at the next tick_s
        self._tick_lock = threading.Lock()  # one round (draws and sends) at a time
        self._thread = threading.Thread(target=self._loop, name="uldp-forwarder", daemon=True)
        self._senders = ThreadPoolExecutor(max(1, config.senders),
                                           thread_name_prefix="uldp-forward")
        self._sending: set[str] = set()
        self._lock = threading.Lock()
        self.dropped = 0
        self.forwarded = 0  # reports in batches the collector stored (metrics)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Tick as soon as possible (reports were admitted, or a send finished): a
        bucket that became due is drawn and sent without waiting for ``tick_s``."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._senders.shutdown(wait=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.config.tick_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.tick()
            except Exception:  # keep ticking: the collector may be briefly unreachable
                log.exception("forwarder tick")
            self._stop.wait(min(self.config.tick_s, MIN_TICK_GAP_S))  # bounded rate

    def admitted(self) -> None:
        """Reports were just admitted (called in the admitting call's thread): draw and
        start sending what became due now, in this thread — the forwarder's own thread
        would wait for the store behind the next admissions — unless a round is running
        already (then the forwarder runs another right after it)."""
        if self._stop.is_set() or not self._tick_lock.acquire(blocking=False):
            self._wake.set()
            return
        try:
            self._round(False)
        except Exception:  # the device's call is answered regardless
            log.exception("forwarder round after an admission")
        finally:
            self._tick_lock.release()

    def tick(self, wait: bool = False) -> None:
        """One round: draw what is due, then start sending the batches not yet answered
        (at most ``senders`` at once; ``wait``: until those are answered). One round at
        a time (the draws read the counts they keep T back from)."""
        with self._tick_lock:
            self._round(wait)

    def _round(self, wait: bool) -> None:
        started: list[Future[None]] = []
        for b in self.store.buckets():
            started += self._consider(b)
        with self._lock:
            busy, free = frozenset(self._sending), self.config.senders - len(self._sending)
        for batch in self.store.unsent(busy, max(0, free)):
            if self._stop.is_set():
                break
            with self._lock:
                self._sending.add(batch.batch_id)
            started.append(self._senders.submit(self._send_then_free, batch))
        if wait:
            for f in started:
                f.result()

    def _send_then_free(self, batch: DrawnBatch, gate: _Gate | None = None) -> None:
        answered = False
        try:
            answered = self._send(batch, gate)
        except Exception:
            log.exception("forwarding batch %s", batch.batch_id)
        finally:
            with self._lock:
                self._sending.discard(batch.batch_id)
        if answered:
            self.wake()  # a sender is free: the next drawn batch goes now

    def _per_batch(self) -> int:
        return max(1, min(self.config.max_batch, MAX_FORWARD_REPORTS))

    def _batch_size(self, b: Bucket, q: QueryInfo, t: int) -> int:
        """The size of the batches drawn from ``b`` before its cell completes: at least
        ``ceil(placed / batch_parts)`` and at least ``t``, at most ``--max-batch``."""
        placed = q.cells.get((b.phase, b.group, b.stage), 0)
        want = max(t, -(-placed // max(1, self.config.batch_parts)))
        return min(self._per_batch(), want)

    def _consider(self, b: Bucket) -> list[Future[None]]:
        """Draw what is due in bucket ``b``; the sends started already (a complete cell's
        single batch goes out while its draw is being recorded: :meth:`_draw_and_send`)."""
        try:
            q = self.link.query(b.query_id)
        except grpc.RpcError:
            return []  # ask again next tick
        ph = q.phases.get(b.phase, _MISSING) if q else _MISSING
        if q is None or not q.shuffled or ph.state not in ("open", "pending"):
            n = self.store.drop_bucket(b)
            self.dropped += n
            log.warning("query %s phase %d group %d stage %d is %s: dropped %d reports that "
                        "never made a batch", b.query_id, b.phase, b.group, b.stage,
                        ph.state, n)
            return []
        t = max(self.config.min_batch, q.min_batch)
        if t > self._per_batch():
            return []  # cannot form a batch this large: wait for the phase end
        now_ms = self.clock() * 1000
        near = bool(ph.deadline_ms) and (
            ph.deadline_ms - now_ms <= self.config.deadline_margin_s * 1000)
        quiet = now_ms - b.last_ms >= self.config.linger_s * 1000
        # completeness first, then the count: once complete, no report can come after
        # the count is read, so "draw them all" leaves nothing behind (``b`` is a
        # snapshot from the start of the tick; admissions go on meanwhile)
        complete = self._complete(q, ph, b)
        done = near or complete
        count = self.store.pending(b)
        big = self._batch_size(b, q, t)
        while count >= t + big:  # full batches, keeping at least T for the next
            self._draw(b, big, count)
            count -= big
        if count >= t and done:
            if count > self._per_batch() and count >= 2 * t:  # two, each >= T
                self._draw(b, count // 2, count)
                count -= count // 2
            elif complete:  # the whole (complete) cell: no report can join it any more
                return [f for f in (self._draw_and_send(b, count),) if f is not None]
            self._draw(b, count, count)
        elif count >= 2 * t and quiet:
            self._draw(b, count - t, count)  # keep T back: the cell's tail goes with them
        return []

    def _complete(self, q: QueryInfo, ph: PhaseInfo, b: Bucket) -> bool:
        """Whether no more reports can come to ``b``'s cell: every device the query
        placed there reported here or declined its task, or so did every slot of its
        phase."""
        admitted = self.store.admitted(b.query_id, b.phase)
        cell = (b.phase, b.group, b.stage)
        placed = q.cells.get(cell, 0)
        if admitted.get((b.group, b.stage), 0) + q.declined.get(cell, 0) >= placed > 0:
            return True
        return ph.quota > 0 and sum(admitted.values()) + ph.declined >= ph.quota

    def _draw(self, b: Bucket, size: int, count: int) -> None:
        batch = self.store.draw(b, size, self.verifier_name)
        log.info("query %s phase %d group %d stage %d: drew batch %s of %d reports (%d left)",
                 b.query_id, b.phase, b.group, b.stage, batch, size, count - size)

    def _draw_and_send(self, b: Bucket, size: int) -> Future[None] | None:
        """Draw a complete cell's whole bucket as one batch and start sending it while
        the draw is being recorded: every piece but the last goes out (and is opened at
        the collector) during the draw's transaction; the last — without which the
        collector stores nothing — only once that transaction has committed. If it fails
        (or the shuffler dies first), the stream is broken, nothing is stored, and the
        same reports — the cell is complete: no other can join them — are drawn again."""
        plan = self.store.plan(b, size, self.verifier_name)
        if plan is None:
            return None
        gate = _Gate()
        with self._lock:
            self._sending.add(plan.batch.batch_id)
        fut = self._senders.submit(self._send_then_free, plan.batch, gate)
        try:
            self.store.commit(plan)
        except BaseException:
            gate.open(False)
            raise
        gate.open(True)
        log.info("query %s phase %d group %d stage %d: drew batch %s of %d reports (the "
                 "cell's last)", b.query_id, b.phase, b.group, b.stage, plan.batch.batch_id,
                 size)
        return fut

    def _pieces(self, batch: DrawnBatch, gate: _Gate | None = None
                ) -> Iterator[shuffler_pb2.ForwardBatchRequest]:
        """The ForwardBatch stream of a batch: the header and the first reports, then the
        rest in pieces of at most :data:`FORWARD_PIECE` reports and one message; the last
        piece only once ``gate`` says the batch is recorded (raises if it was not: the
        stream breaks and the collector stores nothing)."""
        widest = max((len(s) for s in batch.sealed), default=1)
        step = max(1, min(FORWARD_PIECE,
                          (self.config.max_message_bytes - 4096) // (widest + 8)))
        starts = range(0, max(1, len(batch.sealed)), step)
        for i in starts:
            if gate is not None and i == starts[-1] and not gate.wait():
                raise RuntimeError(f"batch {batch.batch_id} was not recorded: not sent")
            if i == 0:
                yield shuffler_pb2.ForwardBatchRequest(
                    batch_id=batch.batch_id, query_id=batch.query_id, phase=batch.phase,
                    group=batch.group, stage=batch.stage, task_digest=batch.task_digest,
                    sealed=batch.sealed[:step], attested=batch.attested,
                    verifier=batch.verifier, size=len(batch.sealed))
            else:
                yield shuffler_pb2.ForwardBatchRequest(sealed=batch.sealed[i:i + step])

    def _send(self, batch: DrawnBatch, gate: _Gate | None = None) -> bool:
        """Send one batch; whether the collector answered it (False: retry later)."""
        try:
            resp = self.link.stub.ForwardBatch(self._pieces(batch, gate), timeout=60)
        except grpc.RpcError as exc:
            if gate is not None and not gate.wait():
                return False  # its draw was never recorded: nothing to retry or record
            if exc.code() in RETRYABLE or exc.code() == grpc.StatusCode.CANCELLED:
                log.info("batch %s: collector unavailable (%s); retrying", batch.batch_id,
                         exc.code().name)
                return False
            log.warning("batch %s of %d reports refused by the collector: %s: %s",
                        batch.batch_id, len(batch.sealed), exc.code().name, exc.details())
            self.store.finish(batch.batch_id, "refused",
                              message=f"{exc.code().name}: {exc.details()}")
            return True
        pause = float(os.environ.get(TEST_PAUSE_ENV) or 0)
        if pause > 0:  # test hook: acknowledged by the collector, not yet recorded here
            time.sleep(pause)
        self.store.finish(batch.batch_id, "forwarded", resp.stored, resp.refused)
        self.forwarded += resp.stored
        log.info("batch %s forwarded: %d reports (%d stored, %d dropped%s)", batch.batch_id,
                 len(batch.sealed), resp.stored, resp.refused,
                 ", duplicate" if resp.duplicate else "")
        return True
