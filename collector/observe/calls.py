"""Observing every call of the collector's services once, for both ports.

See ``docs/operations.md`` ("Metrics", "Logs"). :func:`instrument` wraps a servicer (the
object the native gRPC server and the HTTP port register) so that every method call:

* counts in ``uldp_rpc_requests_total`` by port, service, method and status code, and
  its latency in ``uldp_rpc_duration_seconds``;
* updates the counters of what the call did (:data:`OUTCOMES`): reports accepted,
  duplicate or refused by status code (each item of a batch on its own; in shuffle mode
  the reports of each forwarded batch, port ``shuffler``), enrolments, tasks handed out,
  batch sizes;
* writes one access-log record (logger ``uldp.collector.access``: call, status code,
  latency, port) when that logger is enabled (``--log-format json``).

The status code is read where the servicer sets it: its ``context.abort(code, ...)`` is
recorded by a thin proxy of the context (the same servicer code runs under grpcio's sync
and asyncio contexts and under the HTTP port's context). Nothing of a request's content
is logged or used as a label. Requests refused before the servicer runs (over the
message size limit, undecodable bytes) are answered by the decoding layer and are not
counted here; they are logged as warnings (``uldp.collector.service.handlers``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from uldp.collector.observe.metrics import CollectorMetrics, code_label

__all__ = ["ACCESS_LOG", "OUTCOMES", "instrument"]

#: the access log: one record per call (call, code, latency, port), never content
ACCESS_LOG = logging.getLogger("uldp.collector.access")

#: what a call did, counted from (metrics, port, request, response or None, status code)
Outcome = Callable[[CollectorMetrics, str, Any, Any, str], None]


def _report(m: CollectorMetrics, front: str, code: str, duplicate: bool, n: int = 1) -> None:
    if code == "OK":
        m.bound(m.duplicate if duplicate else m.accepted, front).inc(n)
    else:
        m.bound(m.refused, front, code).inc(n)


def _submit(m: CollectorMetrics, front: str, req: Any, resp: Any, code: str) -> None:
    _report(m, front, code, bool(resp is not None and resp.duplicate))


def _submit_batch(m: CollectorMetrics, front: str, req: Any, resp: Any, code: str) -> None:
    items = getattr(req, "reports", None)
    if items is None:  # not a decoded request
        return
    m.bound(m.batch, front, "SubmitReportBatch").observe(len(items))
    if resp is None or code != "OK":
        if items:
            _report(m, front, code, False, len(items))
        return
    for r in resp.results:
        _report(m, front, code_label(r.code), r.duplicate)


def _enrol(m: CollectorMetrics, front: str, req: Any, resp: Any, code: str) -> None:
    kind = "renewal" if getattr(req, "previous_token", "") else "new"
    m.bound(m.enrolments, front, kind, code).inc()


def _enrol_batch(m: CollectorMetrics, front: str, req: Any, resp: Any, code: str) -> None:
    items = getattr(req, "requests", None)
    if items is None:
        return
    m.bound(m.batch, front, "EnrollBatch").observe(len(items))
    if resp is None or code != "OK":
        for r in items:
            _enrol(m, front, r, None, code)
        return
    for r, got in zip(items, resp.results, strict=False):
        _enrol(m, front, r, None, code_label(got.code))


def _tasks(m: CollectorMetrics, front: str, req: Any, resp: Any, code: str) -> None:
    if resp is not None and code == "OK":
        m.bound(m.tasks, front).inc(len(resp.tasks))


def _tasks_batch(m: CollectorMetrics, front: str, req: Any, resp: Any, code: str) -> None:
    items = getattr(req, "items", None)
    if items is None:
        return
    m.bound(m.batch, front, "GetTasksBatch").observe(len(items))
    if resp is not None and code == "OK":
        m.bound(m.tasks, front).inc(sum(len(r.response.tasks) for r in resp.results))


def _forwarded(m: CollectorMetrics, front: str, req: Any, resp: Any, code: str) -> None:
    """A shuffled batch (shuffle mode, ``ShuffleIntakeService``): its reports stored, or
    dropped as not opening to a valid report (INVALID_ARGUMENT); a re-sent batch is
    duplicates."""
    items = getattr(req, "sealed", None)  # None: a stream of pieces (the answer counts)
    if items is None and (resp is None or code != "OK"):
        return
    n = len(items) if items is not None else resp.stored + resp.refused
    m.bound(m.batch, front, "ForwardBatch").observe(n)
    if resp is None or code != "OK":
        if n:
            _report(m, front, code, False, n)
    elif resp.duplicate:
        _report(m, front, "OK", True, n)
    else:
        if resp.stored:
            _report(m, front, "OK", False, resp.stored)
        if resp.refused:
            _report(m, front, "INVALID_ARGUMENT", False, resp.refused)


#: method name -> what its calls count beyond the call itself
OUTCOMES: dict[str, Outcome] = {
    "SubmitReport": _submit, "SubmitReportBatch": _submit_batch, "Enroll": _enrol,
    "EnrollBatch": _enrol_batch, "GetTasks": _tasks, "GetTasksBatch": _tasks_batch,
    "ForwardBatch": _forwarded,
}


class _Recorder:
    """The servicer's context, recording the status code it aborts with."""

    __slots__ = ("_ctx", "code")

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self.code: str | None = None

    def abort(self, code: Any, details: str) -> Any:
        self.code = code_label(code)
        return self._ctx.abort(code, details)  # raises, or a coroutine that raises

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _failed(rec: _Recorder, exc: BaseException) -> str:
    if rec.code is not None:
        return rec.code
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return "CANCELLED"
    code = getattr(exc, "code", None)  # a ServiceError's name, or a ConnectError's Code
    if isinstance(code, str):
        return code_label(code)
    return code_label(getattr(code, "name", "INTERNAL").replace("CANCELED", "CANCELLED"))


class _Call:
    """One method's observation: counters, latency, outcome, access log."""

    def __init__(self, m: CollectorMetrics, method: MethodDescriptor, front: str) -> None:
        self.m, self.front = m, front
        self.service, self.method = method.containing_service.name, method.name
        self.path = f"/{method.containing_service.full_name}/{method.name}"
        self.outcome = OUTCOMES.get(method.name)
        self.latency = m.latency.labels(front, self.service, self.method)

    def done(self, t0: float, request: Any, response: Any, code: str) -> None:
        spent = time.perf_counter() - t0
        self.m.bound(self.m.calls, self.front, self.service, self.method, code).inc()
        self.latency.observe(spent)
        if self.outcome is not None:
            try:
                self.outcome(self.m, self.front, request, response, code)
            except Exception:  # never fail a call for its metrics
                ACCESS_LOG.exception("metrics of %s", self.path)
        if ACCESS_LOG.isEnabledFor(logging.INFO):
            ACCESS_LOG.info("%s %s %.1f ms", self.path, code, spent * 1000, extra={
                "call": self.path, "code": code, "ms": round(spent * 1000, 3),
                "front": self.front})


def observed(fn: Callable[..., Any], call: _Call) -> Callable[..., Any]:
    """``fn(request, context)`` observed by ``call``, with the same calling convention
    (plain function, coroutine, sync or async generator: the servers dispatch on it)."""
    if inspect.isasyncgenfunction(fn):
        async def agen(request: Any, context: Any) -> AsyncIterator[Any]:
            t0, rec, code = time.perf_counter(), _Recorder(context), "OK"
            try:
                async for x in fn(request, rec):
                    yield x
            except BaseException as exc:
                code = _failed(rec, exc)
                raise
            finally:
                call.done(t0, request, None, code)
        return agen
    if inspect.iscoroutinefunction(fn):
        async def coro(request: Any, context: Any) -> Any:
            t0, rec = time.perf_counter(), _Recorder(context)
            try:
                response = await fn(request, rec)
            except BaseException as exc:
                call.done(t0, request, None, _failed(rec, exc))
                raise
            call.done(t0, request, response, "OK")
            return response
        return coro
    if inspect.isgeneratorfunction(fn):
        def gen(request: Any, context: Any) -> Iterator[Any]:
            t0, rec, code = time.perf_counter(), _Recorder(context), "OK"
            try:
                yield from fn(request, rec)
            except BaseException as exc:
                code = _failed(rec, exc)
                raise
            finally:
                call.done(t0, request, None, code)
        return gen

    def sync(request: Any, context: Any) -> Any:
        t0, rec = time.perf_counter(), _Recorder(context)
        try:
            response = fn(request, rec)
        except BaseException as exc:
            call.done(t0, request, None, _failed(rec, exc))
            raise
        call.done(t0, request, response, "OK")
        return response
    return sync


class Instrumented:
    """A servicer whose every method of ``service`` is observed; any other attribute is
    the servicer's own."""

    def __init__(self, servicer: Any, service: ServiceDescriptor, metrics: CollectorMetrics,
                 front: str) -> None:
        self._servicer = servicer
        for m in service.methods:
            setattr(self, m.name, observed(getattr(servicer, m.name), _Call(metrics, m, front)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._servicer, name)


def instrument(servicer: Any, service: ServiceDescriptor, metrics: CollectorMetrics,
               front: str) -> Instrumented:
    """``servicer`` for ``service`` with every call observed (``front``: ``grpc`` or
    ``http``, the port it serves)."""
    return Instrumented(servicer, service, metrics, front)
