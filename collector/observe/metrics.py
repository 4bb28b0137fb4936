"""The collector's Prometheus metrics: one registry per replica, counted where things happen.

See ``docs/operations.md`` ("Metrics"). :func:`metrics_of` gives the one
:class:`CollectorMetrics` of a :class:`~uldp.collector.service.core.CollectorCore`
(created on first use, hooked into its group-commit writer and phase closer). Both ports
count into it: the servicers of the native gRPC port and of the HTTP port are wrapped by
:func:`uldp.collector.observe.calls.instrument`, so a report counts the same whether it
came over gRPC, Connect or gRPC-Web.

Every label value is bounded: gRPC status code names, method names of the proto, the
port (``grpc`` / ``http``), the batch call. No device id, token, query id or any other
caller-supplied string is ever a label of these counters (the per-query and per-dataset
series come from the database, for authenticated scrapers only:
``uldp.collector.observe.gauges``). Each replica exports its own counters; sum them over
replicas in the dashboard (``deploy/grafana/uldp-collector.json``).
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["GRPC_CODES", "CollectorMetrics", "code_label", "metrics_of"]

#: the gRPC status code names (google.rpc.Code): the only values of a ``code`` label
GRPC_CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
              "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
              "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
              "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
_BY_NUMBER = dict(enumerate(GRPC_CODES))
_NAMES = frozenset(GRPC_CODES)

#: call latencies (seconds)
CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                5.0, 10.0, 30.0)
#: items in one batch call (up to the wire cap of 1000) and reports in one commit
ITEM_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
#: how long a phase stays open (seconds: from opening to its close)
PHASE_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
                 21600.0, 86400.0)


def code_label(code: Any) -> str:
    """The ``code`` label of a status: a gRPC code name, its number, a ``StatusCode``
    (anything else is ``UNKNOWN``, so the label stays bounded)."""
    if isinstance(code, int):
        return _BY_NUMBER.get(code, "UNKNOWN")
    name = code if isinstance(code, str) else getattr(code, "name", "")
    return name if name in _NAMES else "UNKNOWN"


class CollectorMetrics:
    """The counters and histograms of one replica (see the module docstring)."""

    def __init__(self, replica: str) -> None:
        self.registry = r = CollectorRegistry()
        Gauge("uldp_replica_info", "This replica's name (--name), value 1", ["replica"],
              registry=r).labels(replica).set(1)
        self.calls = Counter("uldp_rpc_requests", "Calls answered, by port, service, method "
                             "and status code", ["front", "service", "method", "code"],
                             registry=r)
        self.latency = Histogram("uldp_rpc_duration_seconds", "Time to answer a call",
                                 ["front", "service", "method"], buckets=CALL_BUCKETS,
                                 registry=r)
        self.accepted = Counter("uldp_reports_accepted", "Reports stored (acknowledged, not "
                                "duplicates)", ["front"], registry=r)
        self.duplicate = Counter("uldp_reports_duplicate", "Identical re-sends of a stored "
                                 "report (acknowledged, stored once)", ["front"], registry=r)
        self.refused = Counter("uldp_reports_refused", "Reports refused, by status code "
                               "(device.proto)", ["front", "code"], registry=r)
        self.enrolments = Counter("uldp_enrolments", "Enrolments (new identity or renewal) "
                                  "by status code", ["front", "kind", "code"], registry=r)
        self.tasks = Counter("uldp_tasks_issued", "Tasks handed to devices", ["front"],
                             registry=r)
        self.batch = Histogram("uldp_batch_items", "Items in one batch call",
                               ["front", "method"], buckets=ITEM_BUCKETS, registry=r)
        self.commit_seconds = Histogram("uldp_storage_commit_seconds", "Duration of one "
                                        "group-commit write transaction", buckets=CALL_BUCKETS,
                                        registry=r)
        self.commit_reports = Histogram("uldp_storage_commit_reports", "Reports in one "
                                        "group-commit transaction", buckets=ITEM_BUCKETS,
                                        registry=r)
        self.commit_failures = Counter("uldp_storage_commit_failures", "Group-commit "
                                       "transactions that failed (nothing acknowledged)",
                                       registry=r)
        self.phase_open = Histogram("uldp_phase_open_seconds", "How long a phase stayed open "
                                    "(opened to closed), phases this replica closed",
                                    buckets=PHASE_BUCKETS, registry=r)
        self.phase_close = Histogram("uldp_phase_close_seconds", "Time to close a phase "
                                     "(claim, aggregate, publish)", buckets=CALL_BUCKETS,
                                     registry=r)
        self._bound: dict[tuple[Any, tuple[str, ...]], Any] = {}
        for front in ("grpc", "http"):  # present from the start, at 0
            self.accepted.labels(front)
            self.duplicate.labels(front)

    def bound(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once (the hot path calls this per
        report: a dictionary hit instead of the client library's locked lookup)."""
        key = (metric, labels)
        got = self._bound.get(key)
        if got is None:
            got = self._bound[key] = metric.labels(*labels)
        return got

    # ---- the hooks of the writer and the closer ---------------------------------------
    def commit_observed(self, seconds: float, reports: int, failed: bool) -> None:
        """One group-commit transaction (``GroupCommitWriter.on_commit``)."""
        self.commit_seconds.observe(seconds)
        if reports:
            self.commit_reports.observe(reports)
        if failed:
            self.commit_failures.inc()

    def phase_closed(self, open_seconds: float | None, close_seconds: float) -> None:
        """A phase this replica closed (``PhaseCloser.on_closed``)."""
        if open_seconds is not None and open_seconds >= 0:
            self.phase_open.observe(open_seconds)
        self.phase_close.observe(close_seconds)


_LOCK = threading.Lock()


def metrics_of(core: Any) -> CollectorMetrics:
    """The metrics of ``core`` (a ``CollectorCore``): made on the first call, which also
    hooks them into its writer (commit latency, size) and closer (phase latencies)."""
    with _LOCK:
        m = getattr(core, "_uldp_metrics", None)
        if m is None:
            m = CollectorMetrics(core.name)
            core.writer.on_commit = m.commit_observed
            db = core.db

            def closed(query_id: str, phase: int, seconds: float) -> None:
                row = next((p for p in db.get_phases(query_id) if int(p["phase"]) == phase),
                           None)
                span = None
                if row is not None and row["opened_at_ms"] and row["closed_at_ms"]:
                    span = (int(row["closed_at_ms"]) - int(row["opened_at_ms"])) / 1000
                m.phase_closed(span, seconds)
            core.closer.on_closed = closed
            core._uldp_metrics = m
        return m
