"""The client SDK entry point: a :class:`Device` that enrolls, fetches tasks, checks them
against its own rules, privatizes on the device and reports exactly once per query.

Spec: ``user_level_ldp.md`` §1.3 (INV-1 single participation, INV-4 budget, INV-7 the
device derives clip interval and noise scale itself), §2.2 (round template), [D22].

Usage (an app)::

    dev = Device("collector.example:443", "/var/lib/myapp/uldp",
                 ca_cert="ca.pem", budget=4.0)
    dev.add_dataset("steps", samples=np.array([...]), support=(-1e4, 1e4))
    result = dev.poll()          # enroll if needed, run every task available now

What the device checks before it touches its data (refusals raise / are reported as
:class:`TaskRefused`): the task parses and names a known kind and method
(``uldp.client.tasks.validate_task`` — public parameters consistent, k̂ inside the bin
range so the clip interval derived on the device is well defined, ε share ≤ the query
budget), the digest matches the task text, the named dataset is registered, the report
length matches, and the ledger accepts it (ε within the remaining budget, no other task
for the same query). The report is persisted in the ledger before it is sent and every
retry re-sends the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from uldp.client.ledger import AlreadyParticipated, BudgetExceeded, Ledger, LedgerError
from uldp.client.randomness import RandomSource
from uldp.client.tasks import (
    TaskRefused,
    TaskSpec,
    compute_report,
    report_length,
    task_epsilon,
    validate_task,
)
from uldp.client.transport import (
    RETRYABLE,
    Endpoint,
    RetryPolicy,
    call_with_retry,
    secure_channel,
)
from uldp.client.wire import bearer, device_pb2, device_pb2_grpc

__all__ = [
    "AlreadyParticipated",
    "BudgetExceeded",
    "Dataset",
    "Device",
    "DeviceError",
    "EnrollmentError",
    "PollResult",
    "ReportRejected",
    "TaskRefused",
]

log = logging.getLogger("uldp.client")


class DeviceError(Exception):
    """Base class of device-side failures that are not task refusals."""


class EnrollmentError(DeviceError):
    """The collector refused to enroll this device (wrong secret, bad previous token)."""


class ReportRejected(DeviceError):
    """The collector refused a report (the budget stays spent: the bytes were sent)."""

    def __init__(self, query_id: str, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"report for query {query_id} rejected: {code.name}: {message}")
        self.query_id = query_id
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Dataset:
    """A named local dataset: ``samples`` (m,) or (m, d), optional ``labels`` (m,)."""

    name: str
    samples: np.ndarray
    labels: np.ndarray | None = None
    support: tuple[float, float] | None = None


@dataclass
class PollResult:
    """What one :meth:`Device.poll` did."""

    submitted: list[str] = field(default_factory=list)  # query ids acknowledged now
    refused: list[tuple[str, str]] = field(default_factory=list)  # (query id, reason)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # collector refusals
    waiting: int = 0  # assignments whose phase is not open yet, plus pending reports
    pending: int = 0  # persisted reports not acknowledged (collector unreachable)
    retry_after_ms: int = 0


class Device:
    """One device: identity and ledger in ``state_dir``, datasets registered by the app."""

    def __init__(self, target: str | Endpoint, state_dir: str | Path, *,
                 ca_cert: str | Path | None = None, client_cert: str | Path | None = None,
                 client_key: str | Path | None = None, budget: float = 10.0,
                 enrollment_secret: str = "", label: str = "",
                 channel: grpc.Channel | None = None, retry: RetryPolicy | None = None,
                 rng: RandomSource | None = None, durable: bool = True) -> None:
        """``rng``: leave None in production (a fresh OS-keyed source per report); a
        seeded source is accepted only for simulations and tests (``rng.simulation``)."""
        self.endpoint = target if isinstance(target, Endpoint) else Endpoint(
            target, Path(ca_cert) if ca_cert else None,
            Path(client_cert) if client_cert else None,
            Path(client_key) if client_key else None)
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(self.state_dir / "ledger.sqlite", budget, durable=durable)
        self.enrollment_secret = enrollment_secret
        self.label = label
        self.retry = retry or RetryPolicy()
        self._rng = rng
        self._own_channel = channel is None
        self._channel = channel
        self._stub: device_pb2_grpc.DeviceServiceStub | None = None
        self._datasets: dict[str, Dataset] = {}
        self._identity: dict[str, Any] | None = None
        self._jitter = random.Random()
        self._lock = threading.Lock()
        #: test hook: called with the query id after the report is persisted, before send
        self.before_send: Callable[[str], None] | None = None

    # ---- setup ----------------------------------------------------------------------
    def add_dataset(self, name: str, samples: Any, labels: Any = None,
                    support: tuple[float, float] | None = None) -> None:
        x = np.asarray(samples, dtype=np.float64)
        if x.ndim not in (1, 2):
            raise ValueError("samples must be (m,) or (m, d)")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"dataset {name!r} contains NaN or inf")
        y = None if labels is None else np.asarray(labels, dtype=np.float64)
        if y is not None and y.shape[0] != x.shape[0]:
            raise ValueError("labels must have one entry per sample")
        self._datasets[name] = Dataset(name, x, y, support)

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
        self.ledger.close()

    # ---- identity -------------------------------------------------------------------
    @property
    def _identity_path(self) -> Path:
        return self.state_dir / "identity.json"

    def _load_identity(self) -> dict[str, Any] | None:
        if self._identity is None and self._identity_path.exists():
            self._identity = json.loads(self._identity_path.read_text())
        return self._identity

    def _save_identity(self, ident: dict[str, Any]) -> None:
        tmp = self._identity_path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(ident, f)
            f.flush()
            if self.ledger.durable:
                os.fsync(f.fileno())
        os.replace(tmp, self._identity_path)
        self._identity = ident

    @property
    def device_id(self) -> str | None:
        ident = self._load_identity()
        return ident["device_id"] if ident else None

    def enroll(self, force: bool = False) -> str:
        """Enroll (or renew an expiring token); returns the device id."""
        ident = self._load_identity()
        if ident and not force and ident["expires_at_ms"] > time.time() * 1000 + 60_000:
            return ident["device_id"]
        req = device_pb2.EnrollRequest(enrollment_secret=self.enrollment_secret,
                                       label=self.label,
                                       previous_token=ident["token"] if ident else "")
        try:
            resp = call_with_retry(lambda t: self._stub_().Enroll(req, timeout=t), self.retry,
                                   self._jitter)
        except grpc.RpcError as exc:
            raise EnrollmentError(f"enrollment failed: {exc.code().name}: {exc.details()}"
                                  ) from None
        if ident and resp.device_id != ident["device_id"]:
            raise EnrollmentError("collector issued a different identity on renewal")
        self._save_identity({"device_id": resp.device_id, "token": resp.token,
                             "expires_at_ms": resp.expires_at_ms})
        return resp.device_id

    def _meta(self) -> tuple[tuple[str, str], ...]:
        self.enroll()
        ident = self._load_identity()
        assert ident is not None
        return bearer(ident["token"])

    # ---- task checks ----------------------------------------------------------------
    def check_task(self, task: device_pb2.Task) -> tuple[TaskSpec, Dataset, float]:
        """Apply the device's rules to a task; raise :class:`TaskRefused` if it fails."""
        if hashlib.sha256(task.task_json.encode()).hexdigest() != task.task_digest:
            raise TaskRefused("task digest does not match the task text")
        spec = TaskSpec.from_json(task.task_json)
        if spec.query_id != task.query_id:
            raise TaskRefused(f"task text is for query {spec.query_id!r}, "
                              f"not {task.query_id!r}")
        validate_task(spec)  # kind, method, parameters, k̂ range, ε share <= query ε
        ds = self._datasets.get(task.dataset)
        if ds is None:
            raise TaskRefused(f"dataset {task.dataset!r} is not registered on this device")
        n = report_length(spec)
        if n != task.report_length:
            raise TaskRefused(f"task announces {task.report_length} report values but its "
                              f"public parameters give {n}")
        eps = task_epsilon(spec)
        try:
            self.ledger.check(task.query_id, task.task_digest, eps)
        except LedgerError as exc:
            raise TaskRefused(str(exc)) from exc
        return spec, ds, eps

    def _source(self) -> RandomSource:
        if self._rng is None:
            return RandomSource.secure()
        if not self._rng.simulation:
            raise TypeError("pass rng=None for production devices")
        return self._rng.spawn("report")

    def prepare(self, task: device_pb2.Task) -> device_pb2.Report:
        """Check the task, compute and persist the report; the returned message is what
        must be sent (also for a retry: the stored bytes, never a new draw)."""
        entry = self.ledger.get(task.query_id)
        if entry is not None and entry.task_digest == task.task_digest:
            return self._message(entry.query_id, entry.phase, entry.report, entry.task_digest)
        spec, ds, eps = self.check_task(task)
        with self._lock:  # one report computation at a time per device
            values = compute_report(spec, ds.samples, ds.labels, rng=self._source())
            data = np.asarray(values, dtype="<i8").tobytes()
            try:
                entry = self.ledger.record(task.query_id, task.task_digest, task.phase, eps,
                                           data)
            except LedgerError as exc:
                raise TaskRefused(str(exc)) from exc
        return self._message(entry.query_id, entry.phase, entry.report, entry.task_digest)

    @staticmethod
    def _message(query_id: str, phase: int, data: bytes, digest: str) -> device_pb2.Report:
        vals = np.frombuffer(data, dtype="<i8").tolist()
        return device_pb2.Report(query_id=query_id, phase=phase, values=vals,
                                 task_digest=digest)

    def send(self, report: device_pb2.Report) -> device_pb2.SubmitReportResponse:
        """Send a persisted report (retrying the same bytes); update the ledger."""
        if self.before_send is not None:
            self.before_send(report.query_id)
        req = device_pb2.SubmitReportRequest(report=report)
        try:
            resp = call_with_retry(
                lambda t: self._stub_().SubmitReport(req, timeout=t, metadata=self._meta()),
                self.retry, self._jitter)
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                self.enroll(force=True)
                return self.send(report)
            if code not in RETRYABLE:
                self.ledger.mark(report.query_id, "rejected", f"{code.name}: {exc.details()}")
            raise ReportRejected(report.query_id, code, exc.details() or "") from None
        self.ledger.mark(report.query_id, "acked", "duplicate" if resp.duplicate else "")
        return resp

    # ---- main loop ------------------------------------------------------------------
    def resend_pending(self, out: PollResult | None = None) -> list[str]:
        """Re-send every persisted but unacknowledged report (after a crash or an
        outage). Reports still unacknowledged because the collector is unreachable stay
        pending and count as ``waiting`` in ``out``."""
        done = []
        for e in self.ledger.entries("pending"):
            try:
                self.send(self._message(e.query_id, e.phase, e.report, e.task_digest))
                done.append(e.query_id)
            except ReportRejected as exc:
                log.warning("%s", exc)
                if out is not None:
                    self._note_failure(out, e.query_id, exc)
        return done

    @staticmethod
    def _note_failure(out: PollResult, query_id: str, exc: ReportRejected) -> None:
        if exc.code in RETRYABLE:  # still pending in the ledger: try again later
            out.pending += 1
        else:
            out.rejected.append((query_id, f"{exc.code.name}: {exc.message}"))

    def fetch_tasks(self, query_id: str = "") -> device_pb2.GetTasksResponse:
        req = device_pb2.GetTasksRequest(datasets=self.datasets, query_id=query_id)
        try:
            return call_with_retry(
                lambda t: self._stub_().GetTasks(req, timeout=t, metadata=self._meta()),
                self.retry, self._jitter)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                self.enroll(force=True)
                return self._stub_().GetTasks(req, timeout=self.retry.timeout_s,
                                              metadata=self._meta())
            raise

    def poll(self, query_id: str = "") -> PollResult:
        """Enroll if needed, re-send pending reports, then run every task offered now."""
        out = PollResult()
        out.submitted.extend(self.resend_pending(out))
        resp = self.fetch_tasks(query_id)
        for task in resp.tasks:
            try:
                report = self.prepare(task)
            except TaskRefused as exc:
                out.refused.append((task.query_id, str(exc)))
                log.info("refused task of query %s: %s", task.query_id, exc)
                continue
            try:
                self.send(report)
                out.submitted.append(task.query_id)
            except ReportRejected as exc:
                self._note_failure(out, task.query_id, exc)
        out.waiting = len(resp.waiting) + out.pending
        out.retry_after_ms = max(resp.retry_after_ms, 1000 if out.pending else 0)
        return out

    def run(self, timeout_s: float = 600.0, query_id: str = "") -> PollResult:
        """Poll until nothing is waiting (or ``timeout_s``); returns the merged result."""
        total = PollResult()
        end = time.monotonic() + timeout_s
        while True:
            r = self.poll(query_id)
            total.submitted += r.submitted
            total.refused += r.refused
            total.rejected += r.rejected
            total.waiting, total.retry_after_ms = r.waiting, r.retry_after_ms
            if not r.waiting or time.monotonic() > end:
                return total
            time.sleep(max(r.retry_after_ms, 50) / 1000 * self._jitter.uniform(0.5, 1.5))
