"""The device's main loop: re-send what is owed, fetch the tasks, run each one, and send
every report at its time (``docs/device-protocol.md`` §10, ``docs/privacy.md`` §2).

A mixin of :class:`uldp.client.device.Device` (which supplies the ledger, the checks and
the computation, ``prepare``, and the transport, ``send`` and ``fetch_tasks``). One task's
failure never stops the others: a refusal, a local fault or a rejection goes into the
poll's :class:`~uldp.client.outcomes.PollResult`. With a
:class:`~uldp.client.schedule.SendDelay` every report computed in the poll is sent at a
deadline drawn from a public window, so that send times do not depend on the computation.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Literal

from uldp.client.ledger import Ledger
from uldp.client.outcomes import PollResult, ReportRejected
from uldp.client.randomness import RandomSource
from uldp.client.schedule import DEADLINE_MARGIN_S, DEVICE_DEFAULT, SendDelay
from uldp.client.taskspec import TaskRefused
from uldp.client.wire import device_pb2

__all__ = ["PollLoop"]

log = logging.getLogger("uldp.client")


class PollLoop:
    """Mixin: :meth:`poll`, :meth:`run` and :meth:`resend_pending` (module docstring)."""

    ledger: Ledger
    _rng: RandomSource | None
    _jitter: random.Random
    prepare: Callable[[device_pb2.Task], Any]
    send: Callable[[Any], Any]
    fetch_tasks: Callable[[str], device_pb2.GetTasksResponse]
    pending_reports: Callable[[PollResult | None], list[Any]]
    decline: Callable[[device_pb2.Task, TaskRefused], bool]
    send_delay: SendDelay | None

    def _delay(self, send_delay: SendDelay | Literal["device"] | None) -> SendDelay | None:
        return self.send_delay if isinstance(send_delay, str) else send_delay

    def resend_pending(self, out: PollResult | None = None,
                       send_delay: SendDelay | Literal["device"] | None = DEVICE_DEFAULT
                       ) -> list[str]:
        """Re-send every persisted but unacknowledged report (after a crash or an
        outage). Reports still unacknowledged because the collector is unreachable stay
        pending and count as ``waiting`` in ``out``. With ``send_delay``, reports computed
        now (a charged task whose report was never stored) go out at a deadline drawn from
        the window, measured from the start of this call."""
        send_delay = self._delay(send_delay)
        start = send_delay.clock() if send_delay is not None else 0.0
        recomputed = send_delay is not None and bool(self.ledger.entries("reserved"))
        pending = self.pending_reports(out)
        if recomputed and pending and send_delay is not None:
            self._wait(send_delay, start, out)
        done = []
        for rep in pending:
            try:
                self.send(rep)
                done.append(rep.query_id)
            except ReportRejected as exc:
                log.warning("%s", exc)
                if out is not None:
                    self._note_failure(out, rep.query_id, exc)
        return done

    @staticmethod
    def _note_failure(out: PollResult, query_id: str, exc: ReportRejected) -> None:
        if exc.pending:  # still pending in the ledger: try again later
            out.pending += 1
        else:
            out.rejected.append((query_id, f"{exc.code.name}: {exc.message}"))

    def poll(self, query_id: str = "", *,
             send_delay: SendDelay | Literal["device"] | None = DEVICE_DEFAULT) -> PollResult:
        """Enroll if needed, re-send pending reports, then run every task offered now.

        Each report is sent at a deadline drawn uniformly from the public window
        ``send_delay`` — by default the device's own (:data:`~uldp.client.schedule.
        DEFAULT_SEND_DELAY` unless ``Device(send_delay=...)`` says otherwise) —, measured
        from the moment its task was received, never later than 1 s before the task's own
        deadline, so that the send times do not depend on the dataset or the noise
        (``docs/privacy.md`` §2, "Timing"). ``send_delay=None``: send as soon as computed."""
        send_delay = self._delay(send_delay)
        out = PollResult()
        out.submitted.extend(self.resend_pending(out, send_delay))
        resp = self.fetch_tasks(query_id)
        for task in resp.tasks:
            self._run_task(task, out, send_delay)
        out.waiting = len(resp.waiting) + out.pending
        out.retry_after_ms = max(resp.retry_after_ms, 1000 if out.pending else 0)
        return out

    def _run_task(self, task: device_pb2.Task, out: PollResult,
                  send_delay: SendDelay | None) -> None:
        """Check, charge, compute, store, (wait,) send one task; the outcome goes to ``out``."""
        start = send_delay.clock() if send_delay is not None else 0.0
        try:
            report = self.prepare(task)
        except TaskRefused as exc:
            out.refused.append((task.query_id, str(exc)))
            log.info("refused task of query %s: %s", task.query_id, exc)
            if self.decline(task, exc):  # a function of public facts, like the refusal
                out.declined.append(task.query_id)
            return
        except (OSError, sqlite3.Error, MemoryError) as exc:  # a local fault: others go on
            out.failed.append((task.query_id, str(exc)))
            log.error("task of query %s failed on this device: %s", task.query_id, exc)
            return
        if send_delay is not None:
            self._wait(send_delay, start, out, task.deadline_ms)
        try:
            self.send(report)
            out.submitted.append(task.query_id)
        except ReportRejected as exc:
            self._note_failure(out, task.query_id, exc)

    def _wait(self, send_delay: SendDelay, start: float, out: PollResult | None,
              deadline_ms: int = 0) -> None:
        """Wait until ``start`` plus a delay drawn from the window (a fresh OS key, or the
        simulation's seeded source), but not past 1 s before the task's deadline (wall
        clock ms, public; 0: none); count an overrun in ``out``."""
        src = RandomSource.secure() if self._rng is None else self._rng.spawn("delay")
        target = start + send_delay.draw(src)
        if deadline_ms > 0:
            left = deadline_ms / 1000 - time.time() - DEADLINE_MARGIN_S
            target = min(target, send_delay.clock() + max(0.0, left))
        if not send_delay.wait_until(target) and out is not None:
            out.late += 1
            log.warning("a report was computed after its send deadline: widen the window")

    def run(self, timeout_s: float = 600.0, query_id: str = "", *,
            send_delay: SendDelay | Literal["device"] | None = DEVICE_DEFAULT) -> PollResult:
        """Poll until nothing is waiting (or ``timeout_s``); returns the merged result."""
        total = PollResult()
        end = time.monotonic() + timeout_s
        while True:
            r = self.poll(query_id, send_delay=send_delay)
            total.submitted += r.submitted
            total.refused += r.refused
            total.declined += r.declined
            total.rejected += r.rejected
            total.failed += r.failed
            total.late += r.late
            total.waiting, total.retry_after_ms = r.waiting, r.retry_after_ms
            if not r.waiting or time.monotonic() > end:
                return total
            time.sleep(max(r.retry_after_ms, 50) / 1000 * self._jitter.uniform(0.5, 1.5))
