"""The task server: assigning devices to slots and handing them their public tasks.

See ``docs/architecture.md`` ("Service") and ``proto/uldp/v1/device.proto``. Spec:
``docs/algorithms.md`` §2.2, §3.7 / [D1] [D2] (random balanced assignment drawn before data
use). Devices take *slots* 0 .. users − 1 (from blocks each replica leases:
``uldp.collector.storage.assignments``); the query's program places a slot in (group,
stage, phase) through the permutation drawn from the query's public seed. The slot
counter, the blocks, the assignment and its unique keys live in the database, so the same
device always gets the same answer, from any replica, across restarts. A task is the
program's task for the slot given what the closed phases published. In shuffle mode each
answer also carries the device's shuffler ticket for its slot
(``uldp.collector.security.tickets``, ``docs/privacy.md`` §7).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from uldp.client.tasks import report_length, report_limit
from uldp.client.wire import MAX_ABS_REPORT_VALUE
from uldp.collector.mechanisms.validity import ProbeRule, Rule, report_rule
from uldp.collector.security.tickets import Ticket, TicketKey
from uldp.collector.service.catalogue import QueryCatalogue, QueryRuntime
from uldp.collector.service.errors import ServiceError, echo
from uldp.collector.service.phases import PhaseView
from uldp.collector.storage.db import Database
from uldp.collector.storage.writer import GroupCommitWriter, WriterUnavailable

__all__ = ["TICKET_KEY_META", "AssignmentLoader", "TaskAnswer", "TaskInfo", "TaskServer"]

#: the ``uldp_meta`` key of the shuffler-ticket key (hex)
TICKET_KEY_META = "shuffle_ticket_key"


@dataclass(frozen=True)
class TaskInfo:
    """A task as handed to a device (public)."""

    query_id: str
    phase: int
    group: int
    stage: int
    dataset: str
    task_json: str
    digest: str
    length: int
    limit: int
    deadline_ms: int
    ticket: str = ""  # shuffle mode: the device's shuffler ticket (Task.shuffle_ticket)
    #: which reports of the task are valid (``uldp.collector.mechanisms.validity``)
    rule: Rule | None = field(default=None, compare=False, repr=False)


#: a GetTasks answer: (tasks to run now, (query, phase) assignments waiting, retry-after ms)
TaskAnswer = tuple[list[TaskInfo], list[tuple[str, int]], int]


class TaskServer:
    """GetTasks: assignments (cached) and tasks (cached per phase, group and stage)."""

    def __init__(self, db: Database, writer: GroupCommitWriter, catalogue: QueryCatalogue,
                 phases: PhaseView) -> None:
        self.db, self.writer, self.catalogue, self.phases = db, writer, catalogue, phases
        self._tasks: OrderedDict[tuple[Any, ...], TaskInfo] = OrderedDict()
        self._assignments: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._running: tuple[float, list[dict[str, Any]]] = (0.0, [])
        self._lock = threading.Lock()
        self._ticket_key: TicketKey | None = None

    def ticket_key(self) -> TicketKey:
        """The shuffler-ticket key in the database (created on first use; replicas sharing
        the database share it, like the sealing keys)."""
        if self._ticket_key is None:
            self._ticket_key = TicketKey.from_text(self.db.get_or_create_meta(
                TICKET_KEY_META, lambda: TicketKey.generate().to_text()))
        return self._ticket_key

    # ---- assignments --------------------------------------------------------------------
    def remember(self, a: dict[str, Any]) -> None:
        with self._lock:
            self._assignments[(a["query_id"], a["device_id"])] = a
            if len(self._assignments) > 500_000:
                self._assignments.popitem(last=False)

    def cached(self, query_id: str, device_id: str) -> bool:
        """Is the device's assignment to the query in this replica's cache?"""
        with self._lock:
            return (query_id, device_id) in self._assignments

    def assignment(self, query_id: str, device_id: str) -> dict[str, Any] | None:
        with self._lock:
            a = self._assignments.get((query_id, device_id))
        if a is None:
            a = self.db.get_assignment(query_id, device_id)
            if a is not None:
                self.remember(a)
        return a

    def prefetch_assignments(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Load the uncached assignments of many (query, device) pairs, one SELECT per
        query (batched ingestion from gateways)."""
        with self._lock:
            missing: dict[str, list[str]] = {}
            for q, d in pairs:
                if (q, d) not in self._assignments:
                    missing.setdefault(q, []).append(d)
        for q, devs in missing.items():
            for a in self.db.get_assignments(q, devs):
                self.remember(a)

    def prefetch_devices(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Load the uncached assignments of many (query, device) pairs together with the
        same devices' assignments to every other running query, in one statement: a
        device that reports to several queries through a balancer that spreads its calls
        over the replicas (``--route any``) then misses once per replica, not once per
        query and replica. Committed assignments never change, so caching the extra
        rows is exact (issue 28)."""
        with self._lock:
            missing = [(q, d) for q, d in pairs if (q, d) not in self._assignments]
        if not missing:
            return
        # the running queries as last read (no read here: a query started since then is
        # only missed once more; one that ended meanwhile only adds rows that are right)
        queries = [q for q, _ in missing] + [r["query_id"] for r in self._running[1]]
        for a in self.db.get_assignments_of(queries, [d for _, d in missing]):
            self.remember(a)

    # ---- tasks ------------------------------------------------------------------------
    def task_info(self, rt: QueryRuntime, a: dict[str, Any]) -> TaskInfo:
        """The task of assignment ``a`` (its phase must be open, or closed: its earlier
        phases have published)."""
        grp, stage, phase, slot = a["grp"], a["stage"], a["phase"], a["slot"]
        per_device = rt.program.offsets(phase, np.array([slot])) is not None
        key = (rt.query_id, phase, grp, stage, slot if per_device else -1)
        with self._lock:
            info = self._tasks.get(key)
        if info is not None:
            return info
        published = self.phases.published_before(rt.query_id, phase)
        task = rt.program.task(phase, grp, stage, published, slot if per_device else None)
        if rt.seal_json is not None:  # shuffle mode: the report is sealed to this key
            task = replace(task, seal=rt.seal_json)
        text = task.to_json()
        rule = report_rule(task) or ProbeRule(rt.program.accumulator(phase, grp, stage,
                                                                     published))
        info = TaskInfo(rt.query_id, phase, grp, stage, rt.dataset, text,
                        hashlib.sha256(text.encode()).hexdigest(), report_length(task),
                        min(report_limit(task), MAX_ABS_REPORT_VALUE), 0, rule=rule)
        with self._lock:
            self._tasks[key] = info
            if len(self._tasks) > 100_000:
                self._tasks.popitem(last=False)
        return info

    def _running_queries(self) -> list[dict[str, Any]]:
        t, rows = self._running
        if time.monotonic() - t > 0.25:
            rows = self.db.running_queries()
            self._running = (time.monotonic(), rows)
        return rows

    def _queries_of(self, running: list[dict[str, Any]], datasets: Sequence[str],
                    query_id: str) -> list[dict[str, Any]] | ServiceError:
        """The running queries a device with ``datasets`` asks about (NOT_FOUND for an
        unknown ``query_id``)."""
        wanted = set(datasets)
        queries = [q for q in running
                   if q["dataset"] in wanted and (not query_id or q["query_id"] == query_id)
                   and self._has_groups(q, wanted)]
        if query_id and not queries and self.db.get_query(query_id) is None:
            return ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        return queries

    def _has_groups(self, q: dict[str, Any], wanted: set[str]) -> bool:
        """A grouped mean goes only to devices that also registered its groups' dataset
        (``by``): the names a device registers are public, its group never is."""
        if q["kind"] != "mean-by":
            return True
        rt = self.catalogue.runtime(q["query_id"])
        return rt is not None and rt.spec.by in wanted

    def _statuses(self, asks: list[tuple[str, list[dict[str, Any]]]]
                  ) -> dict[tuple[str, str], dict[str, Any] | None]:
        """(query, device) -> assignment of every pair still to report (None: no slot
        yet); pairs whose report is stored are left out. Assigns the devices that have no
        slot yet, in the order of ``asks`` (one status read per query, one writer ticket)."""
        by_query: dict[str, list[str]] = {}
        for device_id, queries in asks:
            for q in queries:
                by_query.setdefault(q["query_id"], []).append(device_id)
        todo: dict[tuple[str, str], dict[str, Any] | None] = {}
        need: list[tuple[str, str, Any]] = []
        for qid, devices in by_query.items():
            rt = self.catalogue.runtime(qid)
            if rt is None:
                continue
            found = self.db.device_statuses(qid, devices)
            for d in dict.fromkeys(devices):
                a, reported = found.get(d, (None, False))
                if reported:
                    continue
                todo[(qid, d)] = a
                if a is None:
                    need.append((qid, d, rt.program.place))
        if need:
            try:
                made = self.writer.assign(need)
            except WriterUnavailable as exc:
                raise ServiceError("UNAVAILABLE", str(exc)) from None
            todo.update({key: made.get(key) for key in todo if todo[key] is None})
        return todo

    def get_tasks(self, device_id: str, datasets: Sequence[str],
                  query_id: str = "") -> tuple[list[TaskInfo], list[tuple[str, int]], int]:
        """(tasks to run now, (query, phase) assignments waiting, retry-after ms)."""
        out = self.get_tasks_many([(device_id, datasets, query_id)])[0]
        if isinstance(out, ServiceError):
            raise out
        return out

    def get_tasks_many(self, asks: Sequence[tuple[str, Sequence[str], str]]
                       ) -> list[TaskAnswer | ServiceError]:
        """:meth:`get_tasks` of many devices ``[(device id, datasets, query id)]`` at once:
        one answer (or the ServiceError of that device) per ask, in order. Raises
        ServiceError UNAVAILABLE when the assignments cannot be stored."""
        running = self._running_queries()
        scopes = [self._queries_of(running, ds, qid) for _, ds, qid in asks]
        todo = self._statuses([(dev, qs) for (dev, _, _), qs in zip(asks, scopes, strict=True)
                               if not isinstance(qs, ServiceError)])
        out: list[TaskAnswer | ServiceError] = []
        for (device_id, _, _), queries in zip(asks, scopes, strict=True):
            if isinstance(queries, ServiceError):
                out.append(queries)
                continue
            out.append(self._answer(device_id, queries, todo))
        return out

    def _answer(self, device_id: str, queries: list[dict[str, Any]],
                todo: dict[tuple[str, str], dict[str, Any] | None]) -> TaskAnswer:
        tasks: list[TaskInfo] = []
        waiting: list[tuple[str, int]] = []
        for q in queries:
            key = (q["query_id"], device_id)
            a = todo.get(key)
            rt = self.catalogue.runtime(q["query_id"])
            if a is None or rt is None:
                continue  # reported already, or all slots taken
            self.remember(a)
            ph = self.phases.rows(rt.query_id).get(a["phase"])
            if ph is None:
                continue
            if ph["state"] == "open":
                info = self.task_info(rt, a)
                ticket = "" if rt.seal_json is None else self.ticket_key().issue(Ticket(
                    rt.query_id, info.phase, info.group, info.stage, info.digest,
                    int(a["slot"])))
                tasks.append(replace(info, deadline_ms=int(ph["deadline_ms"]), ticket=ticket))
            elif ph["state"] in ("pending", "closing"):
                waiting.append((rt.query_id, a["phase"]))
        retry = 300 if waiting else (0 if tasks else 2000)
        return tasks, waiting, retry


class AssignmentLoader:
    """Loads the assignments a replica has not cached yet for the asyncio servicer: off
    the event loop (in ``pool``) and many at a time. Misses that arrive while one read is
    under way wait for the next one, which fetches them all (``prefetch_assignments``:
    one SELECT, which also takes the devices' assignments to the other running queries:
    ``TaskServer.prefetch_devices``) — group commit for reads. Without it each miss was a database
    round trip *on the loop*, stalling every other call of the replica; with N replicas
    N − 1 in N devices miss on their first report (issue 28)."""

    def __init__(self, tasks: TaskServer, pool: Any) -> None:
        self.tasks, self.pool = tasks, pool
        self._pending: dict[tuple[str, str], list[asyncio.Future[None]]] = {}
        self._running = False
        self._task: asyncio.Task[None] | None = None
        self.reads = 0  # reads run (each for every miss pending at its start)

    async def load(self, query_id: str, device_id: str) -> None:
        """Return once the pair's assignment is cached or known to be missing (the read
        failed: the caller's own look-up then fails the same way)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._pending.setdefault((query_id, device_id), []).append(fut)
        if not self._running:
            self._running = True
            self._task = loop.create_task(self._drain(loop))
        await fut

    async def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, {}
                self.reads += 1
                # a failed read: each caller's own look-up then fails and reports it
                with contextlib.suppress(Exception):
                    await loop.run_in_executor(self.pool, self.tasks.prefetch_devices,
                                               list(batch))
                for futs in batch.values():
                    for f in futs:
                        if not f.done():
                            f.set_result(None)
        finally:
            self._running = False
