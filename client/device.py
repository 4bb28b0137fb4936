"""The client SDK entry point: a :class:`Device` that enrolls, fetches tasks, checks them
against its own rules, privatizes on the device and reports exactly once per query.

Sections of ``docs/algorithms.md``: §1.3 (INV-1 single participation, INV-4 budget, INV-7 the
device derives clip interval and noise scale itself), §2.2 (round template), [D22];
``docs/privacy.md`` (totality, the ledger, randomness).

Usage (an app)::

    dev = Device("collector.example:443", "/var/lib/myapp/uldp",
                 ca_cert="ca.pem", budget=4.0)
    dev.add_dataset("steps", samples=np.array([...]))   # any values: NaN, empty, huge
    result = dev.poll()  # enroll, run every task now; each report sent 2-8 s after its task

**Totality (invariant 6, docs/architecture.md).** Whether the device reports, and how many
messages it sends, depend only on public facts: the task, the device's ledger and what the app
declared when it registered the dataset (name, dimension, kind of values, labels). The
checks before a task is accepted look at nothing else (refusals are
:class:`TaskRefused`): the task parses and names a known kind and method
(``uldp.client.tasks.validate_task`` — public parameters consistent, bins and intervals inside
the support, ε share ≤ the query budget, sizes within the device limits), the digest matches
the task text, the named dataset is registered and its declaration fits the task, the
report length matches, and the ledger accepts it (ε within the remaining budget, no
other task for the same query). Then the ε is charged in the ledger, and only then is
the data touched: the report is computed for *any* dataset (unusable values are
sanitized, never an error), persisted, and sent; every retry re-sends the same bytes.

**Shuffle mode** (a task carrying ``"seal"``): sealed, sent to a shuffler (``client/shuffled.py``).

**Randomness.** A production device draws every report's noise from a fresh OS-keyed
ChaCha20 source. A seeded source is accepted only with ``simulation=True``, and every
report of such a device carries ``simulated = true`` on the wire; collectors refuse
those unless the query or the server allows simulations.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import grpc
import numpy as np

from uldp.client.dataset import DatasetSchema, LocalDataset, align_labels, coerce_values
from uldp.client.ledger import (
    AlreadyParticipated,
    BudgetExceeded,
    Ledger,
    LedgerEntry,
    LedgerError,
    StateFile,
    StateSlot,
)
from uldp.client.outcomes import DeviceError, EnrollmentError, PollResult, ReportRejected
from uldp.client.polling import PollLoop
from uldp.client.randomness import RandomSource, check_device_rng
from uldp.client.schedule import SendDelay, default_send_delay
from uldp.client.shuffled import AnyReport, ShuffleMode
from uldp.client.task_checks import (
    check_declaration,
    check_groups_dataset,
    clamp_note,
    parsed_task,
    report_labels,
)
from uldp.client.tasks import (
    TaskRefused,
    TaskSpec,
    compute_report,
    empty_report,
)
from uldp.client.transport import (
    RETRYABLE,
    Endpoint,
    RetryPolicy,
    call_with_retry,
    secure_channel,
)
from uldp.client.wire import bearer, device_pb2, device_pb2_grpc, shuffler_pb2

__all__ = [
    "AlreadyParticipated",
    "BudgetExceeded",
    "DatasetSchema",
    "Device",
    "DeviceError",
    "EnrollmentError",
    "PollResult",
    "ReportRejected",
    "StateFile",
    "StateSlot",
    "TaskRefused",
]

log = logging.getLogger("uldp.client")

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: one process per state directory
    fcntl = None  # type: ignore[assignment]


class Device(PollLoop, ShuffleMode):
    """One device: identity and ledger in ``state_dir`` (a directory of its own, or its
    :class:`~uldp.client.ledger.StateSlot` in a file shared with other devices), datasets
    registered by the app."""

    def __init__(self, target: str | Endpoint, state_dir: str | Path | StateSlot, *,
                 ca_cert: str | Path | None = None, client_cert: str | Path | None = None,
                 client_key: str | Path | None = None, budget: float = 10.0,
                 enrollment_secret: str = "", label: str = "",
                 channel: grpc.Channel | None = None, retry: RetryPolicy | None = None,
                 rng: RandomSource | None = None, durable: bool = True,
                 simulation: bool = False, shuffler: str | Endpoint | None = None,
                 shuffler_channel: grpc.Channel | None = None,
                 attestation: str | Callable[[], str] = "",
                 shuffler_attestation: str | Callable[[], str] = "",
                 send_delay: SendDelay | Literal["default"] | None = "default") -> None:
        """``attestation``: what the app's back end vouches for this install with, for a
        collector that enrols new identities only with one (a string, or a callable
        asked once per new identity; protocol §10). ``rng``: leave None in production (a
        fresh OS-keyed source per report); a seeded source only with ``simulation=True``
        (fleets, tests), and every report is then marked ``simulated``.
        ``shuffler`` / ``shuffler_channel``: where sealed reports go (shuffle mode);
        ``shuffler_attestation``: the app's attestation for a shuffler's own enrolment
        check (a string, or a callable asked at every send; §16). ``send_delay``: the
        public window reports are sent in after their task arrived (default 2–8 s,
        ``schedule.DEFAULT_SEND_DELAY``; None: at once; ``docs/privacy.md`` §2).
        ``state_dir`` as a :class:`StateSlot`: the device's state lives in its rows of a
        shared :class:`StateFile`, whose own ``durable`` setting applies."""
        check_device_rng(rng, simulation)
        self.endpoint = target if isinstance(target, Endpoint) else Endpoint(
            target, Path(ca_cert) if ca_cert else None,
            Path(client_cert) if client_cert else None,
            Path(client_key) if client_key else None)
        self._slot: StateSlot | None = None
        self.state_dir: Path | None = None
        if isinstance(state_dir, StateSlot):
            self._slot = state_dir
            self.ledger = state_dir.file.ledger(state_dir.owner, budget)
        else:
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.ledger = Ledger(self.state_dir / "ledger.sqlite", budget, durable=durable)
        self.enrollment_secret = enrollment_secret
        self.label = label
        self.attestation = attestation
        self.retry = retry or RetryPolicy()
        self.simulation = bool(simulation)
        self._rng = rng
        self._own_channel = channel is None
        self._channel = channel
        self._stub: device_pb2_grpc.DeviceServiceStub | None = None
        self._init_shuffler(shuffler, shuffler_channel, ca_cert, shuffler_attestation)
        self.send_delay = default_send_delay() if send_delay == "default" else send_delay
        self._datasets: dict[str, LocalDataset] = {}
        #: per query: how many values its report clamped into the task's public range
        #: (local only, never sent: a hint that the app's values are on another scale)
        self.clamped: dict[str, int] = {}
        self._identity: dict[str, Any] | None = None
        self._jitter = random.Random()
        self._lock = threading.Lock()
        #: test hook: called with the query id after the report is persisted, before send
        self.before_send: Callable[[str], None] | None = None

    # ---- setup ----------------------------------------------------------------------
    def add_dataset(self, name: str, samples: Any, labels: Any = None, *,
                    dim: int | None = None, values: str = "any",
                    alphabet: int | None = None) -> DatasetSchema:
        """Register (or replace) a local dataset; returns its public declaration.

        The declaration is public: ``name``; ``dim`` — None for scalar samples ``(m,)``,
        ``d`` for vectors ``(m, d)`` (never inferred from the data: an empty list would
        otherwise declare another structure than a full one); ``values`` — ``"real"``,
        ``"categorical"`` (integer codes ``0..alphabet-1``) or ``"any"``; whether
        ``labels`` are given. Tasks that contradict it are refused. The values
        themselves are private and never rejected: NaN, ±inf, huge numbers, non-numbers,
        missing labels are kept as missing values and ignored by the statistics
        (``uldp.client.dataset``). Only a structure that contradicts the declaration
        (e.g. a matrix for a scalar dataset) raises ``ValueError``.
        """
        schema = DatasetSchema(name, dim, values, labels is not None, alphabet)
        x = coerce_values(samples, dim)
        y = align_labels(labels, x.shape[0]) if labels is not None else None
        self._datasets[name] = LocalDataset(schema, x, y)
        return schema

    @property
    def datasets(self) -> list[str]:
        return sorted(self._datasets)

    def _stub_(self) -> device_pb2_grpc.DeviceServiceStub:
        if self._stub is None:
            if self._channel is None:
                self._channel = secure_channel(self.endpoint)
            self._stub = device_pb2_grpc.DeviceServiceStub(self._channel)
        return self._stub

    def close(self) -> None:
        if self._own_channel and self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None
        self._close_shuffler()
        self.ledger.close()

    # ---- identity -------------------------------------------------------------------
    @property
    def _identity_path(self) -> Path:
        assert self.state_dir is not None
        return self.state_dir / "identity.json"

    def _load_identity(self) -> dict[str, Any] | None:
        if self._identity is None:
            self._identity = self._read_identity()
        return self._identity

    def _read_identity(self) -> dict[str, Any] | None:
        """The identity in the store now (not the cached one)."""
        if self._slot is not None:
            return self._slot.file.load_identity(self._slot.owner)
        if self._identity_path.exists():
            return dict(json.loads(self._identity_path.read_text()))
        return None

    @contextlib.contextmanager
    def _identity_locked(self) -> Iterator[None]:
        """Hold the store's identity lock: the shared StateFile's lock, or an advisory
        lock on ``identity.lock`` in the state directory, which every Device instance over
        the directory (any process) takes before it reads and replaces the identity."""
        if self._slot is not None:
            with self._slot.file.locked():
                yield
            return
        with _PROCESS_LOCK, open(self._identity_path.with_suffix(".lock"), "a") as f:
            if fcntl is not None:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _write_identity(self, ident: dict[str, Any]) -> None:
        if self._slot is not None:
            self._slot.file.save_identity(self._slot.owner, ident)
            return
        tmp = self._identity_path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(ident, f)
            f.flush()
            if self.ledger.durable:
                os.fsync(f.fileno())
        os.replace(tmp, self._identity_path)

    @property
    def device_id(self) -> str | None:
        ident = self._load_identity()
        return ident["device_id"] if ident else None

    @property
    def token(self) -> str | None:
        """The device token from the last enrolment (None before the first)."""
        ident = self._load_identity()
        return str(ident["token"]) if ident else None

    def enroll(self, force: bool = False) -> str:
        """Enroll (or renew an expiring token); returns the device id.

        A renewal whose previous token the collector no longer accepts (UNAUTHENTICATED)
        enrols once more as a new identity; any other failure raises
        :class:`EnrollmentError` and changes nothing (protocol §10, re-enrolment)."""
        req = self.enrollment_request(force)
        if req is None:
            return str(self.device_id)
        try:
            return self.enrolled(self._enroll_call(req))
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAUTHENTICATED or not req.previous_token:
                raise EnrollmentError(f"enrollment failed: {exc.code().name}: "
                                      f"{exc.details()}") from None
        log.warning("the collector no longer accepts this device's token: enrolling anew")
        fresh = self.enrollment_request(new_identity=True)
        assert fresh is not None
        try:
            return self.enrolled(self._enroll_call(fresh), new_identity=True)
        except grpc.RpcError as exc:
            raise EnrollmentError(f"enrollment failed: {exc.code().name}: {exc.details()}"
                                  ) from None

    def _enroll_call(self, req: device_pb2.EnrollRequest) -> device_pb2.EnrollResponse:
        return call_with_retry(lambda t: self._stub_().Enroll(req, timeout=t), self.retry,
                               self._jitter)

    def enrollment_request(self, force: bool = False, new_identity: bool = False
                           ) -> device_pb2.EnrollRequest | None:
        """The EnrollRequest this device needs answered, or None while its token is valid
        for more than another minute (and not ``force``). A gateway relays it (e.g. in an
        EnrollBatch call) and hands the answer to :meth:`enrolled`. ``new_identity``: the
        request for a new identity (no previous token), for when the collector refused
        the previous token (UNAUTHENTICATED; protocol §10); its answer goes to
        ``enrolled(..., new_identity=True)``."""
        ident = None if new_identity else self._load_identity()
        if ident and not force and ident["expires_at_ms"] > time.time() * 1000 + 60_000:
            return None
        return device_pb2.EnrollRequest(enrollment_secret=self.enrollment_secret,
                                        label=self.label,
                                        previous_token=ident["token"] if ident else "",
                                        attestation="" if ident else self._attest())

    def _attest(self) -> str:
        """The app's attestation for a new identity ("" when the app gives none)."""
        return self.attestation() if callable(self.attestation) else self.attestation

    def enrolled(self, resp: device_pb2.EnrollResponse, new_identity: bool = False) -> str:
        """Keep the identity the collector issued (the answer to
        :meth:`enrollment_request`); returns the device id. A renewal must keep the
        device id (:class:`EnrollmentError` otherwise), unless ``new_identity`` (an
        enrolment without the previous token, protocol §10).

        Atomic through the store: when another Device instance over the same state
        enrolled first, its identity stays and this answer is dropped (one device, one
        identity: two identities would let one user answer a query twice); a renewal
        that another instance already superseded is dropped too."""
        with self._identity_locked():
            had = self._identity
            stored = self._read_identity()
            if had and resp.device_id != had["device_id"] and not new_identity:
                raise EnrollmentError("collector issued a different identity on renewal")
            if new_identity:  # keep a replacement another instance made meanwhile
                superseded = bool(stored and had and stored["device_id"] != had["device_id"])
            else:
                superseded = bool(stored and (stored["device_id"] != resp.device_id
                                              or stored["expires_at_ms"] >= resp.expires_at_ms))
            if stored and superseded:
                self._identity = stored
                return str(stored["device_id"])
            ident = {"device_id": resp.device_id, "token": resp.token,
                     "expires_at_ms": resp.expires_at_ms}
            self._write_identity(ident)
            self._identity = ident
        return resp.device_id

    def _meta(self) -> tuple[tuple[str, str], ...]:
        self.enroll()
        ident = self._load_identity()
        assert ident is not None
        return bearer(ident["token"])

    # ---- task checks ----------------------------------------------------------------
    def check_task(self, task: device_pb2.Task) -> tuple[TaskSpec, LocalDataset, int]:
        """Apply the device's rules to a task; raise :class:`TaskRefused` if it fails.

        Looks only at the task, the dataset's public declaration and the ledger. Returns
        the parsed task, the dataset and the ε it spends in units of 2^-24.
        """
        try:
            return self._check_task(task)
        except TaskRefused:
            raise
        except Exception as exc:  # a hostile task must be refused, never crash the poll
            raise TaskRefused(f"task could not be checked: {exc}") from None

    def _check_task(self, task: device_pb2.Task) -> tuple[TaskSpec, LocalDataset, int]:
        if hashlib.sha256(task.task_json.encode()).hexdigest() != task.task_digest:
            raise TaskRefused("task digest does not match the task text", code="digest")
        known = parsed_task(task.task_json, task.task_digest)
        spec = known.spec
        if spec.query_id != task.query_id:
            raise TaskRefused(f"task text is for query {spec.query_id!r}, "
                              f"not {task.query_id!r}", code="query")
        kind, n, units = known.validated()  # kind, method, parameters, k̂ range, ε share, limits
        ds = self._datasets.get(task.dataset)
        if ds is None:
            raise TaskRefused(f"dataset {task.dataset!r} is not registered on this device",
                              code="dataset")
        check_declaration(spec, kind, ds.schema)
        check_groups_dataset(spec, self._datasets)  # a grouped mean's groups (by)
        if n != task.report_length:
            raise TaskRefused(f"task announces {task.report_length} report values but its "
                              f"public parameters give {n}", code="length")
        self._check_sealable(spec, task)
        try:
            self.ledger.check(task.query_id, task.task_digest, units)
        except LedgerError as exc:
            raise TaskRefused(str(exc), code=ledger_code(exc)) from exc
        return spec, ds, units

    def _source(self) -> RandomSource:
        if self._rng is None:
            return RandomSource.secure()
        if not self._rng.simulation:
            raise TypeError("pass rng=None for production devices")
        return self._rng.spawn("report")

    def prepare(self, task: device_pb2.Task) -> AnyReport:
        """Check the task, charge its ε, compute and persist the report; the returned
        message is what must be sent (also for a retry: the stored bytes, never a new
        draw). Raises :class:`TaskRefused` only from public facts, before any charge."""
        entry = self.ledger.get(task.query_id)
        if entry is not None and entry.task_digest == task.task_digest and entry.report:
            return self._message(entry)
        spec, ds, units = self.check_task(task)
        rng = self._source()  # before the charge: a misconfigured source charges nothing
        fallback = self._fallback(spec)  # the report owed if the data fail: before the charge
        try:
            entry = self.ledger.reserve(task.query_id, task.task_digest, task.phase, units,
                                        task.SerializeToString())
        except LedgerError as exc:
            raise TaskRefused(str(exc), code=ledger_code(exc)) from exc
        if entry.report:  # a concurrent poll stored it meanwhile
            return self._message(entry)
        return self._compute_and_store(entry, spec, ds, rng, fallback)

    def _fallback(self, spec: TaskSpec) -> np.ndarray:
        """The task's backstop report (the empty dataset's, protocol §13.2), computed from
        public facts only and *before* the charge, on a keystream of its own: a task whose
        backstop cannot be computed is refused (code ``param``), so whether the device
        reports never depends on its data (invariant 6)."""
        src = RandomSource.secure() if self._rng is None else self._rng.spawn("fallback")
        try:
            return empty_report(spec, src)
        except TaskRefused:
            raise
        except Exception as exc:
            raise TaskRefused(f"the task's backstop report cannot be computed: {exc}"
                              ) from None

    def _compute_and_store(self, entry: LedgerEntry, spec: TaskSpec, ds: LocalDataset | None,
                           rng: RandomSource, fallback: np.ndarray) -> AnyReport:
        """The charged task's report over the dataset (the precomputed backstop if the
        dataset is gone or the computation fails: one report is owed whatever happens),
        persisted."""
        with self._lock:  # one report computation at a time per device
            values = fallback
            if ds is not None:
                try:
                    labels = report_labels(spec, ds, self._datasets)
                    values = compute_report(spec, ds.samples, labels, rng=rng,
                                            dim=ds.schema.dim, fallback=fallback)
                except Exception:  # totality backstop (compute_report is total itself)
                    log.error("report of query %s fell back to the empty dataset",
                              entry.query_id)
                note = clamp_note(spec, ds.samples)  # local only: never sent
                if note is not None:
                    self.clamped[spec.query_id] = note[0]
                    if note[0]:
                        log.info(note[1])
            data = self._report_bytes(entry, spec, values)  # sealed in shuffle mode
            entry = self.ledger.store_report(entry.query_id, data, reserved=entry)
        return self._message(entry)

    def send(self, report: AnyReport) -> Any:
        """Send a persisted report (the same bytes on every retry; a sealed one to the
        shuffler); update the ledger. On UNAUTHENTICATED the device re-enrolls once and
        tries again (a second one is a rejection); from a shuffler (its ticket or
        attestation refused: enrolling fixes nothing) it tries once more with a fresh
        attestation and then keeps the report pending."""
        if self.before_send is not None:
            self.before_send(report.query_id)
        sealed = isinstance(report, shuffler_pb2.SealedReport)
        for attempt in (0, 1):
            call = self._submit_call(report)
            try:
                resp = call_with_retry(call, self.retry, self._jitter)
            except grpc.RpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.UNAUTHENTICATED and attempt == 0:
                    if not sealed:
                        self.enroll(force=True)
                    continue
                pending = sealed and code == grpc.StatusCode.UNAUTHENTICATED
                if code not in RETRYABLE and not pending:
                    self.ledger.mark(report.query_id, "rejected",
                                     f"{code.name}: {exc.details()}")
                raise ReportRejected(report.query_id, code, exc.details() or "",
                                     pending) from None
            self.ledger.mark(report.query_id, "acknowledged",
                             "duplicate" if resp.duplicate else "")
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def decline_message(task: device_pb2.Task, refusal: TaskRefused
                        ) -> device_pb2.Decline | None:
        """The Decline of a refused task (protocol §10), or None when there is nothing to
        decline: a ``participated`` refusal means this device already holds another task
        of the query, whose report it still owes. A gateway relays it
        (DeclineTaskBatch, with the device's token)."""
        if refusal.code == "participated":
            return None
        return device_pb2.Decline(query_id=task.query_id, phase=task.phase,
                                  task_digest=task.task_digest, reason=refusal.code)

    def decline(self, task: device_pb2.Task, refusal: TaskRefused) -> bool:
        """Tell the collector that this device will not report for the task's query
        (DeclineTask), so that its slot does not hold up the phase; True once the
        collector acknowledged it. What is sent is the public task's coordinates and the
        refusal's code: a function of public facts only (``docs/privacy.md`` §2). A
        failure is logged and changes nothing (the task comes again at the next poll)."""
        d = self.decline_message(task, refusal)
        if d is None:
            return False
        req = device_pb2.DeclineTaskRequest(decline=d)
        for attempt in (0, 1):
            try:
                call_with_retry(lambda t: self._stub_().DeclineTask(
                    req, timeout=t, metadata=self._meta()), self.retry, self._jitter)
                return True
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED and attempt == 0:
                    self.enroll(force=True)
                    continue
                log.warning("decline of query %s not acknowledged: %s: %s", task.query_id,
                            exc.code().name, exc.details())
                return False
        return False  # pragma: no cover

    # ---- main loop ------------------------------------------------------------------
    def pending_reports(self, out: PollResult | None = None) -> list[AnyReport]:
        """The reports this device owes without an acknowledgement: the stored ones (the
        same bytes again) and, first, the report of a charged task that was never stored
        (a crash between charge and store: computed now; nothing had been sent). A gateway
        sends them itself; :meth:`resend_pending` sends them directly."""
        for e in self.ledger.entries("reserved"):
            self._recompute(e, out)
        return [self._message(e) for e in self.ledger.entries("pending")]

    def _recompute(self, e: LedgerEntry, out: PollResult | None = None) -> None:
        """The report owed for a charged task whose report was never stored (a crash
        between charge and store): computed now from the stored task (nothing was sent).
        A failure here (a disk or memory fault, or a task this SDK version no longer
        accepts) leaves the entry reserved and is noted in ``out``; it never stops the
        other entries and tasks."""
        try:
            task = device_pb2.Task.FromString(e.task)
            spec = TaskSpec.from_json(task.task_json)
            self._compute_and_store(e, spec, self._datasets.get(task.dataset),
                                    self._source(), self._fallback(spec))
        except Exception as exc:
            log.error("the report owed for query %s could not be computed: %s", e.query_id,
                      exc)
            if out is not None:
                out.failed.append((e.query_id, str(exc)))

    def tasks_request(self, query_id: str = "") -> device_pb2.GetTasksRequest:
        """The GetTasksRequest of this device (its datasets' names; optionally one query)."""
        return device_pb2.GetTasksRequest(datasets=self.datasets, query_id=query_id)

    def answered(self, query_id: str, code: int, message: str = "",
                 duplicate: bool = False) -> bool:
        """Record the collector's answer to this device's report for ``query_id`` when
        someone else sent it (a gateway's SubmitReportBatch item: a gRPC status code
        number). OK: acknowledged; a retryable code (protocol §10: UNAVAILABLE,
        DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED, INTERNAL): still pending, returns
        False (send the same report again); anything else: rejected (the budget stays
        spent: the bytes were sent)."""
        if code == 0:
            self.ledger.mark(query_id, "acknowledged", "duplicate" if duplicate else "")
            return True
        status = _STATUS.get(code)
        if status in RETRYABLE:
            return False
        name = status.name if status is not None else str(code)
        self.ledger.mark(query_id, "rejected", f"{name}: {message}")
        return True

    def fetch_tasks(self, query_id: str = "") -> device_pb2.GetTasksResponse:
        req = self.tasks_request(query_id)
        for attempt in (0, 1):
            try:
                return call_with_retry(
                    lambda t: self._stub_().GetTasks(req, timeout=t, metadata=self._meta()),
                    self.retry, self._jitter)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED and attempt == 0:
                    self.enroll(force=True)
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover


_STATUS = {c.value[0]: c for c in grpc.StatusCode}
#: identity updates of this process (flock alone does not exclude two threads that open
#: the lock file separately on every platform)
_PROCESS_LOCK = threading.Lock()


def ledger_code(exc: LedgerError) -> str:
    """The refusal code of a ledger refusal."""
    return "participated" if isinstance(exc, AlreadyParticipated) else "budget"
