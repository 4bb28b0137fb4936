"""The device's shuffle-mode half: sealing a charged report and sending it to a shuffler.

See ``docs/device-protocol.md`` §16 and ``docs/privacy.md`` ("Shuffle mode").
:class:`ShuffleMode` is a mixin of :class:`uldp.client.device.Device`. A task whose text
carries ``"seal"`` asks for its report sealed to the collector's HPKE key
(``uldp.client.sealing``) and sent with ``SubmitSealed`` to a shuffler. The shuffler's
address comes from the device's own configuration (``Device(shuffler=...)``), never from
the collector — a collector that could name the shuffler could name itself. A device
without one refuses such tasks before anything is charged (code ``seal``), and so does a
device given a sealed task without a shuffler ticket (``Task.shuffle_ticket``). The device
shows the shuffler that ticket — never its collector token — and, when the app gives one
(``Device(shuffler_attestation=...)``), an attestation for the shuffler's own enrolment
check. The sealed bytes are what the ledger stores, so every resend sends the identical
ciphertext.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from uldp.client.ledger import LedgerEntry
from uldp.client.sealing import parse_seal, plaintext, seal, seal_info
from uldp.client.taskspec import TaskRefused, TaskSpec
from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import device_pb2, shuffler_pb2, shuffler_pb2_grpc

__all__ = ["AnyReport", "ShuffleMode", "sealed_task"]

#: what a device owes for a task: a report in the clear, or a sealed one (shuffle mode)
AnyReport = device_pb2.Report | shuffler_pb2.SealedReport


def sealed_task(task: device_pb2.Task, spec: TaskSpec, values: Sequence[int] | np.ndarray,
                simulated: bool) -> bytes:
    """The sealed bytes of ``values`` for ``task`` (whose seal was checked with the task)."""
    info = seal_info(task.query_id, task.phase, task.group, task.stage, task.task_digest)
    return seal(parse_seal(spec.seal), info, plaintext(values, simulated))


@lru_cache(maxsize=1024)
def _is_sealed(task_json: str, task_digest: str) -> bool:
    """Whether a stored (checked) task asks for a sealed report; cached by digest."""
    return TaskSpec.from_json(task_json).seal is not None


class ShuffleMode:
    """Mixin: the shuffler endpoint, the refusal without one, sealing and sending."""

    simulation: bool
    _meta: Callable[[], Any]
    _stub_: Callable[[], Any]

    def _init_shuffler(self, shuffler: str | Endpoint | None, channel: grpc.Channel | None,
                       ca_cert: str | Path | None,
                       attestation: str | Callable[[], str] = "") -> None:
        if isinstance(shuffler, str):
            shuffler = Endpoint(shuffler, Path(ca_cert) if ca_cert else None)
        self.shuffler = shuffler
        self.shuffler_attestation = attestation
        self._shuffler_channel = channel
        self._own_shuffler_channel = channel is None
        self._shuffler_stub: shuffler_pb2_grpc.ShufflerServiceStub | None = None

    @property
    def has_shuffler(self) -> bool:
        """Whether sealed reports have somewhere to go (a shuffler endpoint or channel)."""
        return self.shuffler is not None or self._shuffler_channel is not None

    def _shuffler_stub_(self) -> shuffler_pb2_grpc.ShufflerServiceStub:
        if self._shuffler_stub is None:
            if self._shuffler_channel is None:
                assert self.shuffler is not None
                self._shuffler_channel = secure_channel(self.shuffler)
            self._shuffler_stub = shuffler_pb2_grpc.ShufflerServiceStub(self._shuffler_channel)
        return self._shuffler_stub

    def _close_shuffler(self) -> None:
        if self._own_shuffler_channel and self._shuffler_channel is not None:
            self._shuffler_channel.close()
        self._shuffler_channel = self._shuffler_stub = None

    def _check_sealable(self, spec: TaskSpec, task: device_pb2.Task) -> None:
        """Refuse (code ``seal``) a shuffle-mode task on a device without a shuffler, or
        one that carries no shuffler ticket (the device could not show the shuffler
        anything but its collector token, which it never does)."""
        if spec.seal is None:
            return
        if not self.has_shuffler:
            raise TaskRefused("the task asks for a sealed report for a shuffler, and this "
                              "device has no shuffler configured", code="seal")
        if not task.shuffle_ticket:
            raise TaskRefused("the task asks for a sealed report but carries no shuffler "
                              "ticket (Task.shuffle_ticket)", code="seal")

    def _report_bytes(self, entry: LedgerEntry, spec: TaskSpec,
                      values: Sequence[int] | np.ndarray) -> bytes:
        """What the ledger stores for a computed report: the sealed bytes in shuffle
        mode, else the values as int64 little-endian."""
        if spec.seal is not None:
            return sealed_task(device_pb2.Task.FromString(entry.task), spec, values,
                               self.simulation)
        return np.asarray(values, dtype="<i8").tobytes()

    def _message(self, entry: LedgerEntry) -> AnyReport:
        """The message of a stored report (the same bytes on every send)."""
        task = device_pb2.Task.FromString(entry.task)
        if _is_sealed(task.task_json, task.task_digest):
            return shuffler_pb2.SealedReport(
                query_id=entry.query_id, phase=task.phase, group=task.group,
                stage=task.stage, task_digest=entry.task_digest, sealed=entry.report,
                ticket=task.shuffle_ticket)
        vals = np.frombuffer(entry.report, dtype="<i8").tolist()
        return device_pb2.Report(query_id=entry.query_id, phase=entry.phase, values=vals,
                                 task_digest=entry.task_digest, simulated=self.simulation)

    def attested(self, report: shuffler_pb2.SealedReport) -> shuffler_pb2.SealedReport:
        """``report`` as sent: with the app's attestation for the shuffler's enrolment
        check, when the app gives one (asked at each send: attestations expire)."""
        att = self.shuffler_attestation
        text = att() if callable(att) else att
        if not text:
            return report
        out = shuffler_pb2.SealedReport()
        out.CopyFrom(report)
        out.attestation = text
        return out

    def _submit_call(self, report: AnyReport) -> Callable[[float], Any]:
        """The call submitting ``report`` (``fn(timeout)``, the same report bytes on every
        retry): SubmitSealed to the shuffler for a sealed report — with its ticket and no
        token —, else SubmitReport."""
        if isinstance(report, shuffler_pb2.SealedReport):
            sreq = shuffler_pb2.SubmitSealedRequest(report=self.attested(report))
            return lambda t: self._shuffler_stub_().SubmitSealed(sreq, timeout=t)
        req = device_pb2.SubmitReportRequest(report=report)
        return lambda t: self._stub_().SubmitReport(req, timeout=t, metadata=self._meta())
