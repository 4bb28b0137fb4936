"""Closing a phase where the data are: the per-window reduction and who runs it.

See ``docs/architecture.md`` ("Closing a phase"). A closing phase's stored reports are
read in *windows* (``Database.close_windows``: heap-block ranges of the query's partition
on PostgreSQL, slot ranges on SQLite), each bounded in rows and so in bytes whatever the
phase's size. :func:`reduce_window` turns one window into one partial accumulator per
group, taking for each group the cheapest route its accumulator allows:

* **in the database** — an accumulator whose statistic is an integer sum
  (``reduction()``: Laplace bins and values, GRR counts) gets the window's sums as the
  database computed them from the typed columns (``Database.window_sums`` /
  ``window_counts``);
* **streamed** — every other one gets the window's reports as one ``(n, width)`` array
  built from their packed payloads (PostgreSQL concatenates them, ``string_agg``) and
  decodes them itself; the frequency oracles' decoders scatter-add sparse supports.

The partials are merged **in window order**, so the result is the same whoever reduced
the windows: the in-process :class:`LocalEngine` (a few threads, each on its own database
connection) or a Dask cluster (``uldp.collector.service.dask_close``), bit for bit.

A stored report that breaks its task's rule (``uldp.collector.mechanisms.validity``:
stored before ingest checked it) never fails the close: where the database's sums or the
accumulator refuse a window, the window's reports of that group are streamed, the bad
ones left out and counted (:attr:`Partial.skipped`), and the rest added.
"""

from __future__ import annotations

import copy
import json
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from uldp.collector.estimators.reductions import ColumnSums, PieceSums, Reduction, ValueCounts
from uldp.collector.mechanisms import ReportError
from uldp.collector.mechanisms.validity import ProbeRule, Rule, report_rule
from uldp.collector.planner import QuerySpec
from uldp.collector.programs import Program, program_for
from uldp.collector.storage.closing import Window
from uldp.collector.storage.db import Database
from uldp.collector.storage.records import TYPED_VALUES

__all__ = ["CloseEngine", "LocalEngine", "Partial", "PhaseSums", "PhaseWork", "WindowTask",
           "close_phase_accumulators", "merge_partials", "reduce_task", "reduce_window",
           "remember_program"]

#: SQLite sums integers in int64 and raises on overflow: rows × largest |product| < this
_SQLITE_SUM_ROOM = 1 << 62



@dataclass(frozen=True)
class PhaseWork:
    """What a worker needs to reduce windows of one closing phase (plain data: it is
    sent to other processes). ``published``: JSON of the phases before ``phase``."""

    db_url: str
    query_id: str
    phase: int
    spec_json: str
    published_json: str

    def program(self) -> Program:
        return _program(self.spec_json)

    def published(self) -> dict[int, Any]:
        return {int(k): v for k, v in json.loads(self.published_json).items()}

    def accumulators(self) -> dict[int, Any]:
        """An empty accumulator per group of the phase (built once per process and
        phase, then copied: building one compiles its task)."""
        return copy.deepcopy(self._templates()[0])

    def rules(self) -> dict[int, Rule]:
        """The report rule of every group's task (``mechanisms.validity``; a method
        without a layout there: its accumulator's own, :class:`ProbeRule`)."""
        return self._templates()[1]

    def _templates(self) -> tuple[dict[int, Any], dict[int, Rule]]:
        key = (self.spec_json, self.phase, self.published_json)
        with _PROGRAMS_LOCK:
            got = _TEMPLATES.get(key)
        if got is None:
            program, published = self.program(), self.published()
            accs = {g: program.accumulator(self.phase, g, s, published)
                    for g, s, _ in program.cells(self.phase)}
            rules: dict[int, Rule] = {}
            for g, s, _ in program.cells(self.phase):
                rule = report_rule(program.task(self.phase, g, s, published))
                rules[g] = rule if rule is not None else ProbeRule(copy.deepcopy(accs[g]))
            got = (accs, rules)
            with _PROGRAMS_LOCK:
                _TEMPLATES[key] = got
                while len(_TEMPLATES) > 16:
                    _TEMPLATES.popitem(last=False)
        return got


@dataclass(frozen=True)
class WindowTask:
    """One window of one phase: the unit of work an engine runs."""

    work: PhaseWork
    window: Window


#: programs by spec JSON (a worker builds each once; the in-process closer hands its own)
_PROGRAMS: OrderedDict[str, Program] = OrderedDict()
#: empty accumulators and report rules by (spec JSON, phase, published JSON)
_TEMPLATES: OrderedDict[tuple[str, int, str], tuple[dict[int, Any], dict[int, Rule]]] = \
    OrderedDict()
_PROGRAMS_LOCK = threading.Lock()


def remember_program(spec_json: str, program: Program) -> None:
    """Use ``program`` (already built) for the phases of the query ``spec_json``."""
    with _PROGRAMS_LOCK:
        _PROGRAMS[spec_json] = program
        _PROGRAMS.move_to_end(spec_json)
        while len(_PROGRAMS) > 32:
            _PROGRAMS.popitem(last=False)


def _program(spec_json: str) -> Program:
    with _PROGRAMS_LOCK:
        got = _PROGRAMS.get(spec_json)
    if got is None:
        got = program_for(QuerySpec.from_dict(json.loads(spec_json)))
        remember_program(spec_json, got)
    return got


def _route(acc: Any, sqlite: bool) -> Reduction | None:
    """The database route of an accumulator (None: streamed)."""
    red = acc.reduction() if hasattr(acc, "reduction") else None
    if isinstance(red, (ValueCounts, PieceSums)):
        return red
    if isinstance(red, ColumnSums) and red.width <= TYPED_VALUES:
        if sqlite and red.gram and red.limit >= 1 << 31:
            return None  # a product could leave int64 on SQLite
        return red
    return None


@dataclass(frozen=True)
class WindowShape:
    """What bounds a phase's windows: the largest streamed report (bytes as int64; None:
    nothing is streamed) and, on SQLite, the rows whose sums stay in int64."""

    report_bytes: int | None
    max_rows: int | None


def window_shape(db: Database, accs: dict[int, Any]) -> WindowShape:
    """The :class:`WindowShape` of a phase from the routes of its accumulators."""
    report_bytes: int | None = None
    rows: int | None = None
    for acc in accs.values():
        route = _route(acc, db.is_sqlite)
        if route is None:
            report_bytes = max(report_bytes or 0, 8 * _width(acc))
            continue
        if not db.is_sqlite or isinstance(route, ValueCounts):
            continue
        m = (route.limit + (1 << 16) if isinstance(route, ColumnSums)
             else max(max(abs(lo), abs(hi)) for lo, hi in route.pieces))
        squares = isinstance(route, PieceSums) or route.gram
        bound = max(1, _SQLITE_SUM_ROOM // (m * m if squares else m))
        rows = bound if rows is None else min(rows, bound)
    return WindowShape(report_bytes, rows)


def _width(acc: Any) -> int:
    """Integers per report of an accumulator's task (4096 when it does not say)."""
    for get in (lambda a: a.width, lambda a: len(a.intervals),
                lambda a: a.records * a.length, lambda a: sum(len(p.intervals)
                                                               for p in a.parts)):
        try:
            return max(int(get(acc)), 1)
        except (AttributeError, TypeError):
            continue
    return 4096


@dataclass
class Partial:
    """One window's partial accumulators (one per group) and the stored reports it left
    out because they break their task's rule."""

    accs: dict[int, Any]
    skipped: int = 0


@dataclass
class PhaseSums:
    """A closing phase's accumulators (groups with reports), its reports counted, and
    the stored reports left out because they break their task's rule."""

    accs: dict[int, Any]
    reports: int
    skipped: int = 0


def reduce_window(db: Database, query_id: str, phase: int, window: Window,
                  accs: dict[int, Any], rules: dict[int, Rule] | None = None) -> Partial:
    """Add one window of a closing phase to ``accs`` (one empty accumulator per group):
    the database's sums where the accumulator allows, else its reports; a group whose
    sums or reports the accumulator refuses gets its valid reports only (``rules``:
    each group's report rule; None: a refusal fails the close)."""
    empty = {g: copy.deepcopy(a) for g, a in accs.items()}
    sums: dict[int, ColumnSums] = {}
    counts: list[int] = []
    pieces: dict[tuple[tuple[int, int], ...], list[int]] = {}
    stream: list[int] = []
    for g, acc in accs.items():
        route = _route(acc, db.is_sqlite)
        if isinstance(route, ColumnSums):
            sums[g] = route
        elif isinstance(route, ValueCounts):
            counts.append(g)
        elif isinstance(route, PieceSums):
            pieces.setdefault(route.pieces, []).append(g)
        else:
            stream.append(g)
    refused: list[int] = []  # groups whose sums break a rule: streamed instead

    def absorb(g: int, w: Any) -> None:
        try:
            accs[g].absorb(w)  # checks before it adds: a refusal changes nothing
        except ReportError:
            if rules is None:
                raise
            refused.append(g)
    if sums:
        width = max(r.width for r in sums.values())
        gram = any(r.gram for r in sums.values())
        for (g, _), w in db.window_sums(query_id, phase, window, sorted(sums), width,
                                        gram).items():
            absorb(g, w)
    if counts:
        for (g, _), c in db.window_counts(query_id, phase, window, counts).items():
            absorb(g, c)
    for ranges, grps in pieces.items():
        for (g, _), m in db.window_pieces(query_id, phase, window, grps, ranges).items():
            absorb(g, m)
    skipped = 0
    if stream or refused:
        grps = stream + refused
        slots = any(getattr(accs[g], "needs_slots", False) for g in grps)
        for block in db.window_reports(query_id, phase, window, grps, slots):
            g = block.grp
            skipped += _add_block(accs[g], empty[g], None if rules is None else rules[g],
                                  block.reports(), block.slots)
    return Partial(accs, skipped)


def _add_block(acc: Any, empty: Any, rule: Rule | None, reports: Any, slots: Any) -> int:
    """Add a block of one group's reports to ``acc`` through a fresh copy of ``empty``
    (a refusal changes nothing; the merge adds exactly what adding would); with a
    ``rule``, the reports that break it are left out: how many."""
    part = copy.deepcopy(empty)
    try:
        part.add(reports, slots)
    except ReportError:
        if rule is None:
            raise
        bad = rule.invalid(reports, slots)
        if not bad.any():  # the accumulator refuses more than the rule: ask it row by row
            bad = ProbeRule(empty).invalid(reports, slots)
        keep = ~bad
        part = copy.deepcopy(empty)
        if keep.any():
            part.add(reports[keep], None if slots is None else slots[keep])
        acc.merge(part)
        return int(bad.sum())
    acc.merge(part)
    return 0


def merge_partials(partials: Iterator[Partial], empty: dict[int, Any]) -> PhaseSums:
    """Merge the windows' partials in window order into ``empty`` (one empty accumulator
    per group): the groups that received at least one report, how many reports there
    were, and how many stored reports were left out."""
    skipped = 0
    for part in partials:
        skipped += part.skipped
        for g, acc in part.accs.items():
            empty[g].merge(acc)
    out = {g: acc for g, acc in empty.items() if acc.count > 0}
    return PhaseSums(out, sum(int(acc.count) for acc in out.values()), skipped)


class CloseEngine(Protocol):
    """Runs the windows of a closing phase; yields their partials in window order."""

    def run(self, db: Database, tasks: Sequence[WindowTask],
            check: Callable[[], None]) -> Iterator[Partial]: ...


@dataclass
class LocalEngine:
    """The in-process engine: ``threads`` windows at a time, each on its own database
    connection (the statements run in the database; numpy releases the GIL)."""

    threads: int = 2

    def run(self, db: Database, tasks: Sequence[WindowTask],
            check: Callable[[], None]) -> Iterator[Partial]:
        if not tasks:
            return
        work = tasks[0].work
        template, rules = work.accumulators(), work.rules()

        def one(task: WindowTask) -> Partial:
            return reduce_window(db, work.query_id, work.phase, task.window,
                                 copy.deepcopy(template), rules)
        if self.threads <= 1 or len(tasks) == 1:
            for t in tasks:
                check()
                yield one(t)
            return
        with ThreadPoolExecutor(self.threads, thread_name_prefix="uldp-close") as ex:
            ahead = self.threads * 2  # windows in flight (bounded: their partials wait here)
            pending = deque(ex.submit(one, t) for t in tasks[:ahead])
            for t in tasks[ahead:]:
                check()
                yield pending.popleft().result()
                pending.append(ex.submit(one, t))
            while pending:
                check()
                yield pending.popleft().result()


def reduce_task(task: WindowTask) -> Partial:
    """A worker's side of one :class:`WindowTask` (another process): its own database
    handle per URL and its own program per spec, then :func:`reduce_window`."""
    w = task.work
    return reduce_window(_database(w.db_url), w.query_id, w.phase, task.window,
                         w.accumulators(), w.rules())


@lru_cache(maxsize=8)
def _database(url: str) -> Database:
    """A worker's database handle. A URL whose password was hidden (``***``: the closer
    never ships one) is completed from the worker's own ``ULDP_DB``."""
    if ":***@" in url:
        full = os.environ.get("ULDP_DB", "")
        if not full:
            raise RuntimeError("this Dask worker needs ULDP_DB (the collector's database "
                               "URL, with its password) to read closing phases")
        url = full
    return Database(url, pool_size=2)


def close_phase_accumulators(db: Database, work: PhaseWork, users: int,
                             engine: CloseEngine, check: Callable[[], None]) -> PhaseSums:
    """The accumulators of a closing phase (groups with reports), the number of reports
    and of stored reports left out, reduced window by window by ``engine`` and merged in
    window order."""
    empty = work.accumulators()
    shape = window_shape(db, empty)
    windows = db.close_windows(work.query_id, work.phase, users, shape.report_bytes,
                               shape.max_rows)
    tasks = [WindowTask(work, w) for w in windows]
    return merge_partials(engine.run(db, tasks, check), empty)
