"""Gauges read from the database at scrape time: the same numbers on every replica.

See ``docs/operations.md`` ("Metrics"). Counters (``uldp.collector.observe.metrics``)
say what one replica did; the state of the service — devices, queries, phases, the ε
asked of each dataset — lives in the database that every replica shares, so these
gauges are read from it (at most once per ``cache_s`` per replica, whoever scrapes),
from its small tables: the phases' counters and the queries' slots taken, never a scan
of the reports or assignments (issue 28: 10⁸ rows each):

* ``uldp_devices{state}``: ``enrolled`` (the device registry), ``assigned`` (an
  assignment in a running query whose report is not in yet) and ``reported`` (a report
  stored for a running query); a device in two running queries counts in each;
* ``uldp_queries{state}``, ``uldp_phases{state}``, ``uldp_reports_stored`` (every
  stored report, the database's count of what ``uldp_reports_accepted_total`` counts);
* ``uldp_dataset_epsilon_requested{dataset}`` and ``uldp_dataset_queries{dataset}``: the
  sum of ε and the number of queries over each dataset name (every query ever created,
  whatever its state: a device that holds the dataset is asked for that much);
* ``uldp_dataset_central_epsilon{dataset}`` and ``uldp_dataset_central_budget{dataset}``:
  the privacy odometer of each dataset with a shuffled query (its shuffled queries
  composed with a PLD accountant, docs/privacy.md §7.2) and its budget (absent: none);
* for the admin credential only, per query (the :data:`MAX_QUERIES` most recent):
  ``uldp_query_epsilon{query_id, dataset, kind, state}`` and
  ``uldp_query_phase_reports{query_id, phase}`` / ``uldp_query_phase_quota``.

Dataset names and query ids are strings an analyst chose when creating a query (an
admin call): no device can add a label value. Their number is capped
(:data:`MAX_DATASETS`, :data:`MAX_QUERIES`, most recent first).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import and_, distinct, func, select

from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.db import Database

__all__ = ["MAX_DATASETS", "MAX_QUERIES", "DatabaseGauges", "Snapshot"]

MAX_DATASETS = 500
MAX_QUERIES = 200
QUERY_STATES = ("running", "done", "cancelled", "failed")
PHASE_STATES = ("pending", "open", "closing", "closed", "cancelled")


@dataclass
class Snapshot:
    """What one scrape reads from the database."""

    enrolled: int = 0
    assigned: int = 0
    reported: int = 0
    stored: int = 0
    queries: dict[str, int] = field(default_factory=dict)
    phases: dict[str, int] = field(default_factory=dict)
    datasets: list[tuple[str, float, int]] = field(default_factory=list)  # name, Σε, n
    recent: list[dict[str, Any]] = field(default_factory=list)  # per query (admin)
    recent_phases: list[tuple[str, int, int, int]] = field(default_factory=list)
    odometer: list[dict[str, Any]] = field(default_factory=list)  # per dataset (shuffled)


def _count(conn: Any, stmt: Any) -> int:
    return int(conn.execute(stmt).scalar_one() or 0)


def _received(conn: Any, running: bool) -> int:
    """Reports stored (every query's, or the running queries'): the phases' counters —
    each phase row's ``received`` plus every writer's counter rows — never a scan of the
    reports."""
    q, p, c = S.queries, S.phases, S.phase_counts
    rows = select(func.coalesce(func.sum(p.c.received), 0))
    more = select(func.coalesce(func.sum(c.c.received), 0))
    if running:
        rows = rows.select_from(p.join(q, p.c.query_id == q.c.query_id)).where(
            q.c.state == "running")
        more = more.select_from(c.join(q, c.c.query_id == q.c.query_id)).where(
            q.c.state == "running")
    return _count(conn, rows) + _count(conn, more)


def read_snapshot(db: Database) -> Snapshot:
    """Every gauge's value, read in a few aggregate statements over the small tables
    (queries, phases and their counters, the per-writer device counters): nothing reads the
    reports or the assignments, whose rows grow with the users."""
    q = S.queries
    running = q.c.state == "running"
    out = Snapshot()
    with db.read() as conn:
        out.enrolled = db.enrolled_devices(conn)  # per-writer counters, summed
        out.stored = _received(conn, running=False)
        out.reported = _received(conn, running=True)
        # a running query's assignments are its slots taken: leased from its counter
        # (next_slot) less the free slots of its blocks
        b = S.slot_blocks
        free = _count(conn, select(func.coalesce(func.sum(b.c.block_end - b.c.next_slot), 0))
                      .where(b.c.query_id.in_(select(q.c.query_id).where(running))))
        out.assigned = _count(conn, select(func.coalesce(func.sum(q.c.next_slot), 0))
                              .where(running)) - free - out.reported
        out.queries = {s: int(n) for s, n in conn.execute(
            select(q.c.state, func.count()).group_by(q.c.state))}
        out.phases = {s: int(n) for s, n in conn.execute(
            select(S.phases.c.state, func.count()).group_by(S.phases.c.state))}
        out.datasets = [(str(d), float(e or 0.0), int(n)) for d, e, n, _ in conn.execute(
            select(q.c.dataset, func.sum(q.c.epsilon), func.count(distinct(q.c.query_id)),
                   func.max(q.c.created_at_ms).label("last"))
            .group_by(q.c.dataset).order_by(func.max(q.c.created_at_ms).desc())
            .limit(MAX_DATASETS))]
        out.recent = [dict(row._mapping) for row in conn.execute(
            select(q.c.query_id, q.c.dataset, q.c.kind, q.c.state, q.c.epsilon)
            .order_by(q.c.created_at_ms.desc()).limit(MAX_QUERIES))]
        ids = [row["query_id"] for row in out.recent]
        if ids:
            p, c = S.phases, S.phase_counts
            counted = (select(func.coalesce(func.sum(c.c.received), 0))
                       .where(and_(c.c.query_id == p.c.query_id, c.c.phase == p.c.phase))
                       .scalar_subquery())  # every writer's counter rows, merged
            out.recent_phases = [(str(i), int(ph), int(rc), int(qu)) for i, ph, rc, qu in
                                 conn.execute(select(p.c.query_id, p.c.phase,
                                                     p.c.received + counted, p.c.quota)
                                              .where(p.c.query_id.in_(ids)))]
    return out


class DatabaseGauges:
    """The database-derived gauges of one replica, cached for ``cache_s`` seconds."""

    def __init__(self, db: Database, cache_s: float = 5.0,
                 odometer: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self.db = db
        self.odometer = odometer  # the service's PrivacyOdometer.states
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._at = -1e18
        self._snap = Snapshot()

    def snapshot(self) -> Snapshot:
        with self._lock:
            if time.monotonic() - self._at >= self.cache_s:
                self._snap = read_snapshot(self.db)
                if self.odometer is not None:
                    self._snap.odometer = self.odometer()[:MAX_DATASETS]
                self._at = time.monotonic()
            return self._snap

    def collector(self, admin: bool) -> Collector:
        """A collector of the gauges (per-query series only when ``admin``)."""
        return _Families(self, admin)


class _Families(Collector):
    def __init__(self, gauges: DatabaseGauges, admin: bool) -> None:
        self.gauges, self.admin = gauges, admin

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self.gauges.snapshot()
        g = GaugeMetricFamily("uldp_devices", "Devices by state (from the database)",
                              labels=["state"])
        for state, n in (("enrolled", s.enrolled), ("assigned", s.assigned),
                         ("reported", s.reported)):
            g.add_metric([state], n)
        yield g
        yield GaugeMetricFamily("uldp_reports_stored", "Reports stored in the database "
                                "(every query)", value=s.stored)
        for name, states, got in (("uldp_queries", QUERY_STATES, s.queries),
                                  ("uldp_phases", PHASE_STATES, s.phases)):
            g = GaugeMetricFamily(name, f"{name[5:].capitalize()} by state (from the "
                                  "database)", labels=["state"])
            for state in states:
                g.add_metric([state], got.get(state, 0))
            yield g
        eps = GaugeMetricFamily("uldp_dataset_epsilon_requested", "Sum of the ε of every "
                                "query over a dataset", labels=["dataset"])
        count = GaugeMetricFamily("uldp_dataset_queries", "Queries over a dataset",
                                  labels=["dataset"])
        for dataset, total, n in s.datasets:
            eps.add_metric([dataset], total)
            count.add_metric([dataset], n)
        yield eps
        yield count
        central = GaugeMetricFamily("uldp_dataset_central_epsilon", "Central ε the shuffled "
                                    "queries over a dataset compose to (PLD accountant)",
                                    labels=["dataset"])
        budget = GaugeMetricFamily("uldp_dataset_central_budget", "Central ε budget of a "
                                   "dataset's shuffled queries", labels=["dataset"])
        for o in s.odometer:
            central.add_metric([o["dataset"]], float(o["central_epsilon"]))
            if o.get("budget") is not None:
                budget.add_metric([o["dataset"]], float(o["budget"]))
        yield central
        yield budget
        if self.admin:
            yield from _per_query(s)


def _per_query(s: Snapshot) -> Iterator[GaugeMetricFamily]:
    eps = GaugeMetricFamily("uldp_query_epsilon", "The ε of a query (its devices spend it)",
                            labels=["query_id", "dataset", "kind", "state"])
    for row in s.recent:
        eps.add_metric([row["query_id"], row["dataset"], row["kind"], row["state"]],
                       float(row["epsilon"]))
    yield eps
    got = GaugeMetricFamily("uldp_query_phase_reports", "Reports stored for a phase",
                            labels=["query_id", "phase"])
    quota = GaugeMetricFamily("uldp_query_phase_quota", "Reports a phase waits for",
                              labels=["query_id", "phase"])
    for qid, phase, received, q in s.recent_phases:
        got.add_metric([qid, str(phase)], received)
        quota.add_metric([qid, str(phase)], q)
    yield got
    yield quota
