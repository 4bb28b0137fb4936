"""Checks 1 to 5 of a sealed report (``proto/uldp/v1/shuffler.proto``), and the pool of
processes that runs them for the shuffler's batch calls.

See ``docs/privacy.md`` §7 ("Credentials", "Throughput"). :func:`precheck` is what the
shuffler asks of one ``SealedReport`` before it looks at the query: the ticket's MAC and
grant, the shuffler's own enrolment check (the attestation's MAC, subject and times), the
request's own fields, and that they are the ticket's. It needs nothing but the two keys,
so it is a plain function of the report.

Those checks are most of what the shuffler spends on a report (two HMACs, the base64 and
the attestation's payload: ~25 of its ~90 µs), all under the GIL. :class:`Checkers` runs
them, for the reports of a batch call, in a pool of processes the shuffler starts itself
(same party, same keys, nothing leaves the shuffler): the gRPC thread hands the pool the
request's bytes and gets back, per report, the :class:`~uldp.collector.shuffler.store.
Submission` it admits or the refusal it gets — the same answers, in the same order, as
checking in the thread (``tests/shuffle/test_shuffler_checkers.py``). Checks 6 and on (the
query's view, the store) stay in the shuffler's main process, which alone holds its state.

The pool starts in the background when the shuffler starts (:meth:`Checkers.warm`), or on
the first batch call large enough to use it (:data:`POOL_MIN_REPORTS`): until its processes
are up — a second or two of imports — calls are checked in their own thread, so no call
waits for it. A pool that breaks is replaced the same way. Its processes end when the
shuffler's process is gone, also after a kill -9.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from uldp.client.sealing import ENC_BYTES, TAG_BYTES
from uldp.client.wire import shuffler_pb2
from uldp.collector.security.attestation import AttestationRefused, EnrolmentVerifier
from uldp.collector.security.tickets import TicketError, TicketKey
from uldp.collector.service.errors import ServiceError
from uldp.collector.shuffler.store import Submission, subject_hash

__all__ = ["MAX_CHECKERS", "MAX_SEALED", "MIN_SEALED", "POOL_MIN_REPORTS", "Checkers",
           "Refusal", "default_checkers", "precheck"]

log = logging.getLogger("uldp.shuffler")

_HEX64 = re.compile(r"[0-9a-f]{64}")
MIN_SEALED = ENC_BYTES + 1 + 8 + TAG_BYTES  # one value
MAX_SEALED = ENC_BYTES + 1 + 8 * (1 << 18) + TAG_BYTES  # the device limit of 2^18 values

#: a batch call of at least this many reports is checked in the pool (smaller ones cost
#: less in their own thread than the round trip to another process)
POOL_MIN_REPORTS = 64
#: reports per piece of work sent to one process, at least (a large call is split over
#: the processes; each piece parses the request's bytes, which costs ~0.1 µs a report)
MIN_PIECE = 250
#: processes of the pool, at most
MAX_CHECKERS = 4

#: a report refused by checks 1 to 5: (status code name, message)
Refusal = tuple[str, str]


def default_checkers() -> int:
    """``--checkers`` when not given: one process per core up to :data:`MAX_CHECKERS`, none
    on a machine with one core (the thread would only wait for the process)."""
    try:
        cores = len(os.sched_getaffinity(0))  # the cores this process may run on
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return 0 if cores < 2 else min(cores, MAX_CHECKERS)


def precheck(tickets: TicketKey, verifier: EnrolmentVerifier | None,
             r: shuffler_pb2.SealedReport) -> Submission:
    """Checks 1 to 5 of one report, in shuffler.proto's order: the submission it asks
    to store; :class:`ServiceError` with the status it gets otherwise."""
    try:
        t = tickets.verify(r.ticket)
    except TicketError as exc:
        raise ServiceError("UNAUTHENTICATED", str(exc)) from None
    subject = None
    if verifier is not None:
        try:
            subject = subject_hash(t.query_id, verifier.verify(r.attestation))
        except AttestationRefused as exc:
            raise ServiceError("UNAUTHENTICATED", f"this shuffler admits reports only "
                               f"from attested devices (SealedReport.attestation): {exc}"
                               ) from None
    # each field read once (a protobuf field read decodes it again every time)
    query_id, task_digest, sealed = r.query_id, r.task_digest, r.sealed
    if not query_id or len(query_id) > 64:
        raise ServiceError("INVALID_ARGUMENT", "query_id must have 1 to 64 characters")
    if not _HEX64.fullmatch(task_digest):
        raise ServiceError("INVALID_ARGUMENT", "task_digest must be 64 lowercase hex "
                           "digits")
    if not MIN_SEALED <= len(sealed) <= MAX_SEALED:
        raise ServiceError("INVALID_ARGUMENT", f"a sealed report has {MIN_SEALED} to "
                           f"{MAX_SEALED} bytes, got {len(sealed)}")
    if (query_id, r.phase, r.group, r.stage, task_digest) != (
            t.query_id, t.phase, t.group, t.stage, t.task_digest):
        raise ServiceError("PERMISSION_DENIED", "the ticket was issued for another task "
                           "(query, phase, group, stage or task digest)")
    return Submission(t.query_id, t.phase, t.group, t.stage, t.task_digest, bytes(sealed),
                      t.slot, subject)


def precheck_all(tickets: TicketKey, verifier: EnrolmentVerifier | None,
                 reports: Sequence[shuffler_pb2.SealedReport]) -> list[Submission | Refusal]:
    """:func:`precheck` of each report: its submission or its refusal, in order."""
    out: list[Submission | Refusal] = []
    for r in reports:
        try:
            out.append(precheck(tickets, verifier, r))
        except ServiceError as exc:
            out.append((exc.code, exc.message))
    return out


# ---- the pool's processes ---------------------------------------------------------------
_KEYS: tuple[TicketKey, EnrolmentVerifier | None] | None = None


def _init(keys: bytes, parent: int) -> None:
    global _KEYS
    _KEYS = pickle.loads(keys)
    # ``parent`` comes from the shuffler itself: a shuffler killed before this process got
    # here leaves it with another parent already, and it ends at once
    threading.Thread(target=_exit_with, args=(parent,), daemon=True,
                     name="uldp-checker-parent").start()


def _exit_with(parent: int) -> None:
    """End this process once the shuffler that started it is gone (a kill -9 of the
    shuffler leaves no checking process behind)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _check_piece(raw: bytes, start: int, stop: int) -> list[Submission | Refusal]:
    """In a pool process: :func:`precheck_all` of reports ``start:stop`` of the
    SubmitSealedBatch request ``raw``."""
    assert _KEYS is not None, "the pool's initializer sets the keys"
    reports = shuffler_pb2.SubmitSealedBatchRequest.FromString(raw).reports
    return precheck_all(*_KEYS, reports[start:stop])


def _ready() -> int:
    return os.getpid()


class Checkers:
    """Checks 1 to 5 of a batch call's reports, in a pool of ``processes`` when that is
    possible (module docstring), else in the calling thread: the answers are the same."""

    def __init__(self, tickets: TicketKey, verifier: EnrolmentVerifier | None,
                 processes: int) -> None:
        self.tickets, self.verifier = tickets, verifier
        self.processes = max(0, processes)
        self._keys: bytes | None = None
        if self.processes:
            try:  # the keys go to the processes by pickle (a verifier that cannot — e.g.
                # one with a test clock — is checked in the thread)
                self._keys = pickle.dumps((tickets, verifier))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                log.info("checking reports in the gRPC threads: %s", exc)
        self._pool: ProcessPoolExecutor | None = None
        self._starting: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.pooled = 0  # reports checked in the pool (metrics, tests)

    def warm(self) -> None:
        """Start the processes now, in the background (``uldp shuffler serve`` does at
        start: the first large calls are then checked in the pool, not in their thread)."""
        if self.processes:
            self._ready_pool()

    @property
    def available(self) -> bool:
        """Whether this shuffler checks large batch calls in a pool of processes."""
        return self._keys is not None

    def _ready_pool(self) -> ProcessPoolExecutor | None:
        """The pool if it is up; else start it in the background (once) and None."""
        with self._lock:
            if self._pool is not None or self._closed or self._keys is None:
                return self._pool
            if self._starting is None:
                pool = ProcessPoolExecutor(
                    self.processes, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init, initargs=(self._keys, os.getpid()))
                self._starting = pool
                warm = [pool.submit(_ready) for _ in range(self.processes)]
                threading.Thread(target=self._up, args=(pool, warm), daemon=True,
                                 name="uldp-checkers-start").start()
            return None

    def _up(self, pool: ProcessPoolExecutor, warm: list[Future[int]]) -> None:
        try:
            for f in warm:
                f.result()
        except Exception as exc:  # a process that cannot start: keep checking in threads
            log.warning("the shuffler's checking processes did not start: %s", exc)
            pool.shutdown(wait=False, cancel_futures=True)
            return
        with self._lock:
            if self._starting is pool and not self._closed:
                self._pool, self._starting = pool, None
                return
        pool.shutdown(wait=False, cancel_futures=True)

    def check(self, request: shuffler_pb2.SubmitSealedBatchRequest
              ) -> list[Submission | Refusal]:
        """:func:`precheck` of every report of ``request``, in order."""
        reports = request.reports
        n = len(reports)
        pool = self._ready_pool() if n >= POOL_MIN_REPORTS else None
        if pool is None:
            return precheck_all(self.tickets, self.verifier, reports)
        raw = request.SerializeToString()
        step = max(MIN_PIECE, -(-n // self.processes))
        try:
            pieces = [pool.submit(_check_piece, raw, i, min(n, i + step))
                      for i in range(0, n, step)]
            out = [x for p in pieces for x in p.result()]
        except Exception as exc:  # a broken pool (a process killed): replace it
            log.warning("the shuffler's checking processes failed (%s); checking in the "
                        "thread, restarting them", exc)
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            return precheck_all(self.tickets, self.verifier, reports)
        self.pooled += n
        return out

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools = [p for p in (self._pool, self._starting) if p is not None]
            self._pool = self._starting = None
        for p in pools:
            p.shutdown(wait=True, cancel_futures=True)
