"""gRPC servicers of ``uldp.v1``: translate messages and map refusals to status codes.

Every exception leaving a servicer becomes a status with a message written for the
caller (:func:`refusal`): refusals keep their code, a failing database is UNAVAILABLE,
anything else INTERNAL (logged with its traceback on the collector). The status codes
and the order of the checks are documented in ``proto/uldp/v1/*.proto``."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from uldp.client.wire import (
    AUTH_METADATA_KEY,
    MAX_BATCH_ITEMS,
    analyst_pb2,
    analyst_pb2_grpc,
    common_pb2,
    device_pb2_grpc,
)
from uldp.client.wire import device_pb2 as dpb
from uldp.collector.service.core import CollectorCore, ServiceError
from uldp.collector.service.errors import (  # noqa: F401 - re-exported
    DATABASE_UNAVAILABLE,
    INTERNAL_ERROR,
    MAX_MESSAGE_BYTES,
    batch_too_large,
    clip,
    refusal,
)
from uldp.collector.service.grpc_front import peer_of
from uldp.collector.service.tasks import AssignmentLoader, TaskAnswer
from uldp.collector.storage.db import PendingReport, ReportOutcome
from uldp.collector.storage.writer import WRITE_FAILED

__all__ = [
    "RESULT_BOUND_BYTES",
    "AnalystServicer",
    "AsyncAnalystServicer",
    "AsyncDeviceServicer",
    "DeviceLogic",
    "DeviceServicer",
    "batch_cap",
    "bearer_from",
]

log = logging.getLogger("uldp.collector")
T = TypeVar("T")

_QSTATE = {"running": common_pb2.QUERY_STATE_RUNNING, "done": common_pb2.QUERY_STATE_DONE,
           "cancelled": common_pb2.QUERY_STATE_CANCELLED, "failed": common_pb2.QUERY_STATE_FAILED}
_QSTATE_NAME = {v: k for k, v in _QSTATE.items()}
_QSTATE_UNKNOWN = common_pb2.QUERY_STATE_UNSPECIFIED
_PSTATE_UNKNOWN = common_pb2.PHASE_STATE_UNSPECIFIED
_PSTATE = {"pending": common_pb2.PHASE_STATE_PENDING, "open": common_pb2.PHASE_STATE_OPEN,
           "closing": common_pb2.PHASE_STATE_CLOSING, "closed": common_pb2.PHASE_STATE_CLOSED,
           "cancelled": common_pb2.PHASE_STATE_CLOSED}


def bearer_from(context: grpc.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == AUTH_METADATA_KEY and isinstance(value, str):
            return value[7:].strip() if value.startswith("Bearer ") else None
    return None


def _abort(context: grpc.ServicerContext, exc: Exception) -> None:
    err = refusal(exc)
    context.abort(getattr(grpc.StatusCode, err.code), err.message)


async def _abort_aio(context: Any, exc: Exception) -> None:
    err = refusal(exc)
    await context.abort(getattr(grpc.StatusCode, err.code), err.message)


def _guard(context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except Exception as exc:
        _abort(context, exc)
    raise AssertionError("unreachable")  # pragma: no cover


def _code(name: str) -> int:
    return int(getattr(grpc.StatusCode, name).value[0])


#: serialized bytes one item of an EnrollBatch, SubmitReportBatch or DeclineTaskBatch
#: answer takes at most: a result is a code (≤ 2 bytes), a message of at most
#: MAX_MESSAGE_BYTES (≤ 3 + 384 bytes), a flag (2 bytes) or an enrolment (a device id, a
#: token and an expiry: < 300 bytes), plus 3 bytes of framing in the repeated field
RESULT_BOUND_BYTES = 400
assert MAX_MESSAGE_BYTES + 16 <= RESULT_BOUND_BYTES


def batch_cap(max_message_bytes: int) -> int:
    """Most items a batch call takes on a collector whose answers are at most
    ``max_message_bytes``: MAX_BATCH_ITEMS, fewer when that many results could exceed
    the message limit (every answered batch fits in one message, invariant 9)."""
    return max(1, min(MAX_BATCH_ITEMS, max_message_bytes // RESULT_BOUND_BYTES))


def _result(out: ReportOutcome) -> dpb.ReportResult:
    """A batch item's result from its outcome."""
    return dpb.ReportResult(code=_code(out.code), message=clip(out.message),
                            duplicate=out.duplicate)


def _tasks_response(answer: TaskAnswer) -> dpb.GetTasksResponse:
    tasks, waiting, retry = answer
    return dpb.GetTasksResponse(
        tasks=[dpb.Task(query_id=t.query_id, phase=t.phase, group=t.group,
                        stage=t.stage, dataset=t.dataset, task_json=t.task_json,
                        report_length=t.length, task_digest=t.digest,
                        deadline_ms=t.deadline_ms, max_abs_value=t.limit,
                        shuffle_ticket=t.ticket)
               for t in tasks],
        waiting=[dpb.WaitingAssignment(query_id=q, phase=p) for q, p in waiting],
        retry_after_ms=retry)


class DeviceLogic:
    """The device service's steps without gRPC plumbing, shared by the thread-pool and
    the asyncio servers (so both run exactly the same checks)."""

    def __init__(self, core: CollectorCore) -> None:
        self.core = core
        #: items per batch call (``batch_cap`` of the collector's message limit)
        self.cap = batch_cap(core.config.max_message_bytes)

    def _check_batch_size(self, n: int) -> None:
        """Refuse a batch of more than :attr:`cap` items whole, before any item is read."""
        if n > self.cap:
            raise ServiceError("INVALID_ARGUMENT", batch_too_large(self.cap, n))

    def enroll(self, request: dpb.EnrollRequest, peer: str) -> dpb.EnrollResponse:
        """Enroll, for a caller at network address ``peer`` (``peer_of(context)``: the
        client's own address, also behind the gRPC front)."""
        device_id, token, exp = self.core.enroll(request.enrollment_secret, request.label,
                                                 request.previous_token,
                                                 request.attestation, peer)
        return dpb.EnrollResponse(device_id=device_id, token=token, expires_at_ms=exp)

    def enroll_batch(self, request: dpb.EnrollBatchRequest, peer: str
                     ) -> dpb.EnrollBatchResponse:
        self._check_batch_size(len(request.requests))
        got = self.core.enroll_many([(r.enrollment_secret, r.label, r.previous_token,
                                      r.attestation) for r in request.requests], peer)
        return dpb.EnrollBatchResponse(results=[
            dpb.EnrollResult(code=_code(g.code), message=g.message)
            if isinstance(g, ServiceError) else
            dpb.EnrollResult(enrollment=dpb.EnrollResponse(device_id=g[0], token=g[1],
                                                           expires_at_ms=g[2]))
            for g in got])

    def get_tasks(self, token: str | None, request: dpb.GetTasksRequest
                  ) -> dpb.GetTasksResponse:
        device = self.core.device_from_token(token)
        return _tasks_response(self.core.get_tasks(device, list(request.datasets),
                                                   request.query_id))

    def get_tasks_batch(self, request: dpb.GetTasksBatchRequest) -> dpb.GetTasksBatchResponse:
        self._check_batch_size(len(request.items))
        devices = self.core.devices_from_tokens([it.device_token for it in request.items])
        asks = [(d, list(it.request.datasets), it.request.query_id)
                for d, it in zip(devices, request.items, strict=True) if isinstance(d, str)]
        answers = iter(self.core.get_tasks_many(asks))
        results = []
        for d in devices:
            got = d if isinstance(d, ServiceError) else next(answers)
            results.append(dpb.GetTasksResult(code=_code(got.code), message=got.message)
                           if isinstance(got, ServiceError) else
                           dpb.GetTasksResult(response=_tasks_response(got)))
        return dpb.GetTasksBatchResponse(results=results)

    def check_one(self, token: str | None, request: dpb.SubmitReportRequest
                  ) -> PendingReport | ReportOutcome:
        """The report to commit, or the final answer of an identical re-send whose phase
        is no longer open; ServiceError for a refusal."""
        device = self.core.device_from_token(token)
        r = request.report
        if r.device_token:
            raise ServiceError("INVALID_ARGUMENT", "device_token is only used in "
                               "SubmitReportBatch; authenticate with call metadata")
        return self.core.validate_report(device, r.query_id, r.phase, r.values,
                                         r.task_digest, r.simulated)

    @staticmethod
    def answer_one(out: ReportOutcome) -> dpb.SubmitReportResponse:
        if out.code != "OK":
            raise ServiceError(out.code, out.message)
        return dpb.SubmitReportResponse(duplicate=out.duplicate,
                                        received_at_ms=out.received_at_ms)

    def check_batch(self, request: dpb.SubmitReportBatchRequest
                    ) -> tuple[list[dpb.ReportResult | None], list[PendingReport], list[int]]:
        self._check_batch_size(len(request.reports))
        results: list[dpb.ReportResult | None] = [None] * len(request.reports)
        devices: list[str | None] = []
        for i, r in enumerate(request.reports):
            try:
                devices.append(self.core.device_from_token(r.device_token))
            except ServiceError as exc:
                devices.append(None)
                results[i] = dpb.ReportResult(code=_code(exc.code), message=exc.message)
        self.core.prefetch_assignments([(r.query_id, d) for r, d in
                                        zip(request.reports, devices, strict=True) if d])
        items, where = [], []
        for i, (r, device) in enumerate(zip(request.reports, devices, strict=True)):
            if device is None:
                continue
            try:
                got = self.core.validate_report(device, r.query_id, r.phase, r.values,
                                                r.task_digest, r.simulated)
            except ServiceError as exc:
                results[i] = dpb.ReportResult(code=_code(exc.code), message=exc.message)
                continue
            if isinstance(got, ReportOutcome):  # answered without a commit (duplicate)
                results[i] = _result(got)
            else:
                items.append(got)
                where.append(i)
        return results, items, where

    def check_decline(self, token: str | None, request: dpb.DeclineTaskRequest
                      ) -> PendingReport | ReportOutcome:
        """The decline to commit, or the final answer of a repeat whose phase is no
        longer open; ServiceError for a refusal (device.proto, "Checks of a decline")."""
        device = self.core.device_from_token(token)
        d = request.decline
        if d.device_token:
            raise ServiceError("INVALID_ARGUMENT", "device_token is only used in "
                               "DeclineTaskBatch; authenticate with call metadata")
        return self.core.validate_decline(device, d.query_id, d.phase, d.task_digest,
                                          d.reason)

    @staticmethod
    def answer_decline(out: ReportOutcome) -> dpb.DeclineTaskResponse:
        if out.code != "OK":
            raise ServiceError(out.code, out.message)
        return dpb.DeclineTaskResponse(duplicate=out.duplicate)

    def check_decline_batch(self, request: dpb.DeclineTaskBatchRequest
                            ) -> tuple[list[dpb.ReportResult | None], list[PendingReport],
                                       list[int]]:
        """Each decline of a batch judged on its own: (results so far, declines to
        commit, their indices)."""
        self._check_batch_size(len(request.declines))
        results: list[dpb.ReportResult | None] = [None] * len(request.declines)
        items, where = [], []
        for i, d in enumerate(request.declines):
            try:
                device = self.core.device_from_token(d.device_token)
                got = self.core.validate_decline(device, d.query_id, d.phase, d.task_digest,
                                                 d.reason)
            except ServiceError as exc:
                results[i] = dpb.ReportResult(code=_code(exc.code), message=exc.message)
                continue
            if isinstance(got, ReportOutcome):
                results[i] = _result(got)
            else:
                items.append(got)
                where.append(i)
        return results, items, where

    @staticmethod
    def answer_batch(results: list[dpb.ReportResult | None], where: list[int],
                     outcomes: list[ReportOutcome]) -> dpb.SubmitReportBatchResponse:
        for i, out in zip(where, outcomes, strict=True):
            results[i] = _result(out)
        done = [r for r in results if r is not None]
        assert len(done) == len(results), "every report of a batch gets a result"
        return dpb.SubmitReportBatchResponse(results=done)


class DeviceServicer(device_pb2_grpc.DeviceServiceServicer):
    """Thread-pool servicer (``grpc.server``)."""

    def __init__(self, core: CollectorCore) -> None:
        self.core = core
        self.logic = DeviceLogic(core)

    def Enroll(self, request: dpb.EnrollRequest, context: grpc.ServicerContext
               ) -> dpb.EnrollResponse:
        return _guard(context, lambda: self.logic.enroll(request, peer_of(context)))

    def GetTasks(self, request: dpb.GetTasksRequest, context: grpc.ServicerContext
                 ) -> dpb.GetTasksResponse:
        return _guard(context, lambda: self.logic.get_tasks(bearer_from(context), request))

    def EnrollBatch(self, request: dpb.EnrollBatchRequest, context: grpc.ServicerContext
                    ) -> dpb.EnrollBatchResponse:
        return _guard(context, lambda: self.logic.enroll_batch(request, peer_of(context)))

    def GetTasksBatch(self, request: dpb.GetTasksBatchRequest,
                      context: grpc.ServicerContext) -> dpb.GetTasksBatchResponse:
        return _guard(context, lambda: self.logic.get_tasks_batch(request))

    def SubmitReport(self, request: dpb.SubmitReportRequest, context: grpc.ServicerContext
                     ) -> dpb.SubmitReportResponse:
        def run() -> dpb.SubmitReportResponse:
            item = self.logic.check_one(bearer_from(context), request)
            if isinstance(item, ReportOutcome):
                return self.logic.answer_one(item)
            return self.logic.answer_one(self.core.store([item])[0])
        return _guard(context, run)

    def SubmitReportBatch(self, request: dpb.SubmitReportBatchRequest,
                          context: grpc.ServicerContext) -> dpb.SubmitReportBatchResponse:
        def run() -> dpb.SubmitReportBatchResponse:
            results, items, where = self.logic.check_batch(request)
            outcomes = self.core.store(items) if items else []
            return self.logic.answer_batch(results, where, outcomes)
        return _guard(context, run)

    def DeclineTask(self, request: dpb.DeclineTaskRequest, context: grpc.ServicerContext
                    ) -> dpb.DeclineTaskResponse:
        def run() -> dpb.DeclineTaskResponse:
            item = self.logic.check_decline(bearer_from(context), request)
            if isinstance(item, ReportOutcome):
                return self.logic.answer_decline(item)
            return self.logic.answer_decline(self.core.store_declines([item])[0])
        return _guard(context, run)

    def DeclineTaskBatch(self, request: dpb.DeclineTaskBatchRequest,
                         context: grpc.ServicerContext) -> dpb.DeclineTaskBatchResponse:
        def run() -> dpb.DeclineTaskBatchResponse:
            results, items, where = self.logic.check_decline_batch(request)
            outcomes = self.core.store_declines(items) if items else []
            done = self.logic.answer_batch(results, where, outcomes).results
            return dpb.DeclineTaskBatchResponse(results=done)
        return _guard(context, run)


class AsyncDeviceServicer(device_pb2_grpc.DeviceServiceServicer):
    """asyncio servicer (``grpc.aio.server``): cheap steps run on the event loop, database
    reads in ``pool``, and commits are awaited through the group-commit writer's
    callback, so no thread is parked per in-flight report."""

    def __init__(self, core: CollectorCore, pool: Any) -> None:
        self.core = core
        self.logic = DeviceLogic(core)
        self.pool = pool
        self.misses = AssignmentLoader(core.tasks, pool)

    async def _store(self, items: list[PendingReport]) -> list[ReportOutcome]:
        ticket = await self.core.writer.submit_reports_aio(items, asyncio.get_running_loop())
        if ticket.error is not None:  # the writer logged it
            raise ServiceError("UNAVAILABLE", WRITE_FAILED)
        return ticket.outcomes

    async def _run(self, context: Any, fn: Callable[[], Any]) -> Any:
        try:
            return await fn()
        except Exception as exc:
            await _abort_aio(context, exc)

    async def _in_pool(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def Enroll(self, request: dpb.EnrollRequest, context: Any) -> dpb.EnrollResponse:
        peer = peer_of(context)

        async def run() -> dpb.EnrollResponse:
            return self.logic.enroll(request, peer)
        return await self._run(context, run)

    async def GetTasks(self, request: dpb.GetTasksRequest, context: Any
                       ) -> dpb.GetTasksResponse:
        token = bearer_from(context)

        async def run() -> dpb.GetTasksResponse:
            return await self._in_pool(self.logic.get_tasks, token, request)
        return await self._run(context, run)

    async def EnrollBatch(self, request: dpb.EnrollBatchRequest, context: Any
                          ) -> dpb.EnrollBatchResponse:
        peer = peer_of(context)

        async def run() -> dpb.EnrollBatchResponse:
            return await self._in_pool(self.logic.enroll_batch, request, peer)
        return await self._run(context, run)

    async def GetTasksBatch(self, request: dpb.GetTasksBatchRequest, context: Any
                            ) -> dpb.GetTasksBatchResponse:
        async def run() -> dpb.GetTasksBatchResponse:
            return await self._in_pool(self.logic.get_tasks_batch, request)
        return await self._run(context, run)

    async def SubmitReport(self, request: dpb.SubmitReportRequest, context: Any
                           ) -> dpb.SubmitReportResponse:
        # the hot path: inline (no per-call closure), validation on the loop (µs); an
        # assignment this replica has not cached is read off the loop, batched
        try:
            token = bearer_from(context)
            qid = request.report.query_id
            device = self.core.device_from_token(token)
            if not self.core.tasks.cached(qid, device):
                await self.misses.load(qid, device)
            item = self.logic.check_one(token, request)
            if isinstance(item, ReportOutcome):  # a re-send after the phase closed
                return self.logic.answer_one(item)
            return self.logic.answer_one((await self._store([item]))[0])
        except Exception as exc:
            await _abort_aio(context, exc)
            raise AssertionError("unreachable") from None  # pragma: no cover

    async def SubmitReportBatch(self, request: dpb.SubmitReportBatchRequest, context: Any
                                ) -> dpb.SubmitReportBatchResponse:
        async def run() -> dpb.SubmitReportBatchResponse:
            results, items, where = await self._in_pool(self.logic.check_batch, request)
            outcomes = await self._store(items) if items else []
            return self.logic.answer_batch(results, where, outcomes)
        return await self._run(context, run)

    async def DeclineTask(self, request: dpb.DeclineTaskRequest, context: Any
                          ) -> dpb.DeclineTaskResponse:
        token = bearer_from(context)

        def run() -> dpb.DeclineTaskResponse:
            item = self.logic.check_decline(token, request)
            if isinstance(item, ReportOutcome):
                return self.logic.answer_decline(item)
            return self.logic.answer_decline(self.core.store_declines([item])[0])
        return await self._run(context, lambda: self._in_pool(run))

    async def DeclineTaskBatch(self, request: dpb.DeclineTaskBatchRequest, context: Any
                               ) -> dpb.DeclineTaskBatchResponse:
        def run() -> dpb.DeclineTaskBatchResponse:
            results, items, where = self.logic.check_decline_batch(request)
            outcomes = self.core.store_declines(items) if items else []
            done = self.logic.answer_batch(results, where, outcomes).results
            return dpb.DeclineTaskBatchResponse(results=done)
        return await self._run(context, lambda: self._in_pool(run))


def query_message(row: dict[str, Any], phases: list[dict[str, Any]],
                  assigned: int) -> analyst_pb2.Query:
    return analyst_pb2.Query(
        query_id=row["query_id"], kind=row["kind"], dataset=row["dataset"],
        epsilon=row["epsilon"], state=_QSTATE.get(row["state"], _QSTATE_UNKNOWN),
        current_phase=row["current_phase"],
        phases=[analyst_pb2.PhaseStatus(
            index=p["phase"], state=_PSTATE.get(p["state"], _PSTATE_UNKNOWN), quota=p["quota"],
            received=p["received"], opened_at_ms=p["opened_at_ms"],
            deadline_ms=p["deadline_ms"], closed_at_ms=p["closed_at_ms"],
            published_json=p["published_json"], declined=p["declined"]) for p in phases],
        assigned=assigned, target_users=row["target_users"],
        created_at_ms=row["created_at_ms"], finished_at_ms=row["finished_at_ms"],
        spec_json=row["spec_json"], error=row["error"],
        allow_simulated=bool(row["allow_simulated"]))


class AnalystServicer(analyst_pb2_grpc.AnalystServiceServicer):
    def __init__(self, core: CollectorCore, watch_interval_s: float = 0.2) -> None:
        self.core = core
        self.watch_interval_s = watch_interval_s

    def _auth(self, context: grpc.ServicerContext) -> None:
        self.core.check_admin(bearer_from(context))

    def _query(self, query_id: str) -> analyst_pb2.Query:
        return query_message(*self.core.get_query(query_id))

    def CreateQuery(self, request: analyst_pb2.CreateQueryRequest,
                    context: grpc.ServicerContext) -> analyst_pb2.Query:
        def run() -> analyst_pb2.Query:
            self._auth(context)
            row = self.core.create_query(
                kind=request.kind, epsilon=request.epsilon, dataset=request.dataset,
                bound=request.bound, samples=request.samples, users=request.users,
                dim=request.dim, method=request.method, params_json=request.params_json,
                phase_timeout_s=request.phase_timeout_seconds, query_id=request.query_id)
            return self._query(row["query_id"])
        return _guard(context, run)

    def ListQueries(self, request: analyst_pb2.ListQueriesRequest,
                    context: grpc.ServicerContext) -> analyst_pb2.ListQueriesResponse:
        def run() -> analyst_pb2.ListQueriesResponse:
            self._auth(context)
            rows = self.core.list_queries(_QSTATE_NAME.get(request.state))
            return analyst_pb2.ListQueriesResponse(
                queries=[self._query(r["query_id"]) for r in rows])
        return _guard(context, run)

    def GetQuery(self, request: analyst_pb2.GetQueryRequest,
                 context: grpc.ServicerContext) -> analyst_pb2.Query:
        def run() -> analyst_pb2.Query:
            self._auth(context)
            return self._query(request.query_id)
        return _guard(context, run)

    def CancelQuery(self, request: analyst_pb2.CancelQueryRequest,
                    context: grpc.ServicerContext) -> analyst_pb2.Query:
        def run() -> analyst_pb2.Query:
            self._auth(context)
            self.core.cancel_query(request.query_id)
            return self._query(request.query_id)
        return _guard(context, run)

    def GetResult(self, request: analyst_pb2.GetResultRequest,
                  context: grpc.ServicerContext) -> analyst_pb2.QueryResult:
        def run() -> analyst_pb2.QueryResult:
            self._auth(context)
            row, phases, _ = self.core.get_query(request.query_id)
            if row["state"] != "done" or not row["result_json"]:
                raise ServiceError("FAILED_PRECONDITION",
                                   f"query {request.query_id} is {row['state']}; the result "
                                   "is available once it is done"
                                   + (f" (error: {row['error']})" if row["error"] else ""))
            est = json.loads(row["result_json"])
            return analyst_pb2.QueryResult(
                query_id=row["query_id"], kind=row["kind"], values=est["values"],
                ci_low=est["ci_low"], ci_high=est["ci_high"], confidence=est["level"],
                reports_per_phase=[p["received"] for p in phases],
                estimate_json=row["result_json"])
        return _guard(context, run)

    def WatchQuery(self, request: analyst_pb2.WatchQueryRequest,
                   context: grpc.ServicerContext) -> Iterator[analyst_pb2.Query]:
        try:
            self._auth(context)
            last = None
            while context.is_active():
                q = self._query(request.query_id)
                if q != last:
                    yield q
                    last = q
                if q.state != common_pb2.QUERY_STATE_RUNNING:
                    return
                time.sleep(self.watch_interval_s)
        except Exception as exc:
            _abort(context, exc)


class AsyncAnalystServicer(AnalystServicer):
    """Analyst service for ``grpc.aio``: unary calls stay synchronous (they run in the
    server's thread pool); the progress stream is an async generator on the loop that
    stops as soon as the client goes away."""

    def __init__(self, core: CollectorCore, pool: Any, watch_interval_s: float = 0.2) -> None:
        super().__init__(core, watch_interval_s)
        self.pool = pool

    async def WatchQuery(self, request: analyst_pb2.WatchQueryRequest,
                         context: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            self.core.check_admin(bearer_from(context))
            last = None
            while True:
                q = await loop.run_in_executor(self.pool, self._query, request.query_id)
                if q != last:
                    yield q
                    last = q
                if q.state != common_pb2.QUERY_STATE_RUNNING:
                    return
                await asyncio.sleep(self.watch_interval_s)
        except Exception as exc:
            await _abort_aio(context, exc)
