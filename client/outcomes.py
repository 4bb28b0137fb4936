"""What a device's calls can end in: the poll's outcome (:class:`PollResult`) and the
device-side failures that are not task refusals (see ``docs/device-protocol.md`` §10 and
``uldp.client.device``, which re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from uldp.client.transport import RETRYABLE

__all__ = ["DeviceError", "EnrollmentError", "PollResult", "ReportRejected"]


class DeviceError(Exception):
    """Base class of device-side failures that are not task refusals."""


class EnrollmentError(DeviceError):
    """The collector refused to enroll this device (wrong secret, bad previous token)."""


class ReportRejected(DeviceError):
    """The collector refused a report (the budget stays spent: the bytes were sent)."""

    def __init__(self, query_id: str, code: grpc.StatusCode, message: str,
                 pending: bool = False) -> None:
        super().__init__(f"report for query {query_id} rejected: {code.name}: {message}")
        self.query_id = query_id
        self.code = code
        self.message = message
        #: the report is still pending in the ledger (sent again later)
        self.pending = pending or code in RETRYABLE


@dataclass
class PollResult:
    """What one :meth:`Device.poll` did."""

    submitted: list[str] = field(default_factory=list)  # query ids acknowledged now
    refused: list[tuple[str, str]] = field(default_factory=list)  # (query id, reason)
    #: query ids of refused tasks the collector was told about (DeclineTask: the slot is
    #: counted, so the phase does not wait for this device)
    declined: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # collector refusals
    #: (query id, reason): a charged task whose report could not be computed or stored
    #: now (a local fault: disk, memory, a bug); it stays owed and is tried again at the
    #: next poll, without holding up any other task
    failed: list[tuple[str, str]] = field(default_factory=list)
    #: reports whose computation overran the deadline of the poll's ``send_delay`` (sent at
    #: once, so their send time told something about the computation: widen the window)
    late: int = 0
    waiting: int = 0  # assignments whose phase is not open yet, plus pending reports
    pending: int = 0  # persisted reports not acknowledged (collector unreachable)
    retry_after_ms: int = 0
