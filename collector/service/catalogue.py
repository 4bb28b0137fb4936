"""The query catalogue: creating, listing and cancelling queries, and each query's program.

See ``docs/architecture.md`` ("Service"). A query row stores its spec JSON; the
:class:`QueryRuntime` of a query is rebuilt from it on first use (any replica, after any
restart) and holds the query's program (``uldp.collector.programs.program_for``) — the
only thing the task server and the phase closer consult about the query's phases.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from uldp.collector.planner import QuerySpec
from uldp.collector.programs import Program, program_for
from uldp.collector.security.sealkeys import SealKeyring
from uldp.collector.service.errors import ServiceError, echo
from uldp.collector.service.odometer import PrivacyOdometer
from uldp.collector.service.requests import (
    REQUEST_PARAMS,
    SPEC_PARAMS,
    CreateRequest,
    build_spec,
    check_limits,
    check_shape,
    same_query,
)
from uldp.collector.storage.db import Database, now_ms

__all__ = ["ALLOW_SIMULATED", "SHUFFLE", "CheckedQuery", "QueryCatalogue", "QueryRuntime",
           "check_create", "check_message"]

log = logging.getLogger("uldp.collector")

_QUERY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: CreateQuery params key (JSON bool): the query accepts reports marked simulated; stored
#: with the query (not part of its statistical spec)
ALLOW_SIMULATED = "allow_simulated"
#: CreateQuery params key: shuffle mode, {"min_batch": T, "delta": δ} (or true: defaults);
#: stored with the query (uldp.collector.service.shuffled, docs/privacy.md)
SHUFFLE = "shuffle"
SHUFFLE_DEFAULTS = {"min_batch": 100, "delta": 1e-8}


@dataclass
class QueryRuntime:
    """What the service keeps in memory about one query (rebuilt from its row)."""

    query_id: str
    dataset: str
    kind: str
    spec: QuerySpec
    program: Program
    num_phases: int
    allow_simulated: bool = False  # the query accepts reports marked simulated
    #: shuffle mode: {"min_batch", "delta", "key_id"} (None: reports in the clear)
    shuffle: dict[str, Any] | None = None
    seal_json: dict[str, Any] | None = None  # the task's "seal" object in shuffle mode


def _shuffle(value: Any) -> dict[str, Any] | None:
    """The shuffle-mode parameters of a CreateQuery (INVALID_ARGUMENT if malformed)."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict) or set(value) - set(SHUFFLE_DEFAULTS):
        raise ServiceError("INVALID_ARGUMENT", f"params_json {SHUFFLE!r} must be true or an "
                           f"object with keys among {tuple(SHUFFLE_DEFAULTS)}")
    out = {**SHUFFLE_DEFAULTS, **value}
    t, d = out["min_batch"], out["delta"]
    if not isinstance(t, int) or isinstance(t, bool) or not 2 <= t <= 1_000_000:
        raise ServiceError("INVALID_ARGUMENT", "shuffle min_batch must be an integer in "
                           f"[2, 1000000], got {echo(t)}")
    if not isinstance(d, (int, float)) or isinstance(d, bool) or not 0 < d <= 1e-3:
        raise ServiceError("INVALID_ARGUMENT", f"shuffle delta must be in (0, 1e-3], got {echo(d)}")
    return {"min_batch": t, "delta": float(d)}


def cell_sizes(program: Program) -> dict[tuple[int, int, int], int]:
    """Devices placed in each (phase, group, stage) of ``program``, from the plan's sizes
    (``Program.cells``: O(cells), no per-slot array)."""
    return {(p, g, s): n for p in range(1, program.num_phases + 1)
            for g, s, n in program.cells(p)}


def _check_shuffle(program: Program, min_batch: int) -> None:
    """A shuffled query needs one task per (phase, group, stage) — a per-device task would
    name its device — and at least ``min_batch`` slots in each."""
    (g, s, _), *_ = program.cells(1)
    slot = program.slot_in(1, g, s)
    if slot is not None and program.offsets(1, np.array([slot])) is not None:
        raise ServiceError("INVALID_ARGUMENT", "shuffle mode needs one task per group: this "
                           "method gives every device its own task (baseline-a)")
    p, g, s, n = min(((p, g, s, n) for (p, g, s), n in cell_sizes(program).items()),
                     key=lambda c: c[3])
    if n < min_batch:
        raise ServiceError("INVALID_ARGUMENT", f"shuffle min_batch {min_batch} is above the "
                           f"{n} devices of phase {p} group {g} stage {s}: no "
                           "batch of it could ever be forwarded")


#: characters of CreateQuery's params_json, at most
MAX_PARAMS_JSON = 65_536


def _params(params_json: str) -> tuple[dict[str, Any], bool]:
    if len(params_json) > MAX_PARAMS_JSON:
        raise ServiceError("INVALID_ARGUMENT", f"params_json must be at most "
                           f"{MAX_PARAMS_JSON} characters, got {len(params_json)}")
    try:
        params = json.loads(params_json) if params_json else {}
    except json.JSONDecodeError as exc:
        raise ServiceError("INVALID_ARGUMENT", f"params_json is not JSON: {exc}") from None
    except RecursionError:
        raise ServiceError("INVALID_ARGUMENT", "params_json is nested too deeply") from None
    allowed = {*SPEC_PARAMS, *REQUEST_PARAMS, ALLOW_SIMULATED, SHUFFLE}
    if not isinstance(params, dict) or set(params) - allowed:
        raise ServiceError("INVALID_ARGUMENT", "params_json must be an object with keys "
                           f"among {tuple(sorted(allowed))}")
    allow = params.pop(ALLOW_SIMULATED, False)
    if not isinstance(allow, bool):
        raise ServiceError("INVALID_ARGUMENT",
                           f"params_json {ALLOW_SIMULATED!r} must be true or false")
    return params, allow


def _same_shuffle(stored: dict[str, Any] | None, asked: dict[str, Any] | None) -> bool:
    if stored is None or asked is None:
        return stored is None and asked is None
    return (int(stored["min_batch"]), float(stored["delta"])) == (asked["min_batch"],
                                                                  asked["delta"])


@dataclass
class CheckedQuery:
    """A CreateQuery request that passed every check (:func:`check_create`)."""

    query_id: str
    spec: QuerySpec
    drawn: bool  # the collector drew the spec's seeds
    allow_simulated: bool
    shuffle: dict[str, Any] | None
    program: Program | None = None  # None when asked without it (a preview)
    quotas: list[int] | None = None


def check_create(*, kind: str, epsilon: float, dataset: str, bound: float, samples: int,
                 users: int, dim: int, method: str, params_json: str, phase_timeout_s: float,
                 query_id: str, max_users: int | None, program: bool = True,
                 plan: bool = True) -> CheckedQuery | None:
    """Every check of CreateQuery, in its documented order, without storing anything
    (ServiceError INVALID_ARGUMENT naming what is wrong). The analyst console's preview
    runs the same function (``uldp.collector.analyst.preview``); ``program=False`` skips
    drawing the placement of every slot (the program), which a preview does not need
    unless the query is shuffled; ``plan=False`` stops before planning (the checks of the
    request's fields alone: what a client runs before it sends, returning None)."""
    if query_id and not _QUERY_ID.match(query_id):
        raise ServiceError("INVALID_ARGUMENT", "query_id must match [A-Za-z0-9_.-]{1,64}")
    if not dataset or len(dataset) > 256:
        raise ServiceError("INVALID_ARGUMENT", "dataset must be a name of 1..256 chars")
    params, allow = _params(params_json)
    shuffle = _shuffle(params.pop(SHUFFLE, None))
    qid = query_id or "q-" + secrets.token_hex(6)
    lo, hi, by, groups = (params.pop(k, None) for k in ("lo", "hi", "by", "groups"))
    req = CreateRequest(kind, epsilon, bound, samples, users, dim, method, params, qid,
                        lo, hi, "" if by is None else by,
                        tuple(groups) if isinstance(groups, list)
                        else () if groups is None else groups)
    check_limits(req, phase_timeout_s, max_users)
    req = check_shape(req)
    if not plan:
        return None
    prog, quotas = None, None
    try:
        spec, drawn = build_spec(req)
        if program or shuffle is not None:
            prog = program_for(spec)
            quotas = prog.quotas()
    except (ValueError, TypeError, KeyError, ArithmeticError, RecursionError) as exc:
        # the planner's refusals of a combination of bounded values (e.g. an unknown
        # kind, too few users for the grouping)
        raise ServiceError("INVALID_ARGUMENT", f"invalid query: {exc}") from None
    if shuffle is not None:
        assert prog is not None
        _check_shuffle(prog, shuffle["min_batch"])
    return CheckedQuery(qid, spec, drawn, allow, shuffle, prog, quotas)


def check_message(msg: Any, max_users: int | None, **kw: Any) -> CheckedQuery | None:
    """:func:`check_create` of a ``CreateQueryRequest`` message."""
    return check_create(kind=msg.kind, epsilon=msg.epsilon, dataset=msg.dataset,
                        bound=msg.bound, samples=msg.samples, users=msg.users, dim=msg.dim,
                        method=msg.method, params_json=msg.params_json,
                        phase_timeout_s=msg.phase_timeout_seconds, query_id=msg.query_id,
                        max_users=max_users, **kw)


class QueryCatalogue:
    """Create, look up, list and cancel queries; cache each query's runtime."""

    def __init__(self, db: Database, *, max_users: int, default_phase_timeout_s: float,
                 seal_keys: SealKeyring | None = None) -> None:
        self.db = db
        self.seal_keys = seal_keys or SealKeyring(db)
        self.max_users = max_users
        self.default_phase_timeout_s = default_phase_timeout_s
        self._runtimes: dict[str, QueryRuntime] = {}
        self._lock = threading.Lock()
        #: shuffle mode: the dataset's central budget (uldp.collector.service.odometer)
        self.odometer: PrivacyOdometer | None = None

    def runtime(self, query_id: str) -> QueryRuntime | None:
        """The runtime of a stored query (None if there is no such query)."""
        with self._lock:
            rt = self._runtimes.get(query_id)
        if rt is not None:
            return rt
        row = self.db.get_query(query_id)
        if row is None:
            return None
        spec = QuerySpec.from_dict(json.loads(row["spec_json"]))
        program = program_for(spec)
        rt = QueryRuntime(query_id, row["dataset"], row["kind"], spec, program,
                          int(row["num_phases"]), bool(row["allow_simulated"]))
        rt.shuffle = self.db.shuffle_query(query_id)
        if rt.shuffle is not None:
            rt.seal_json = self.seal_keys.public(str(rt.shuffle["key_id"])).to_json()
        with self._lock:
            self._runtimes[query_id] = rt
        return rt

    def create(self, *, kind: str, epsilon: float, dataset: str, bound: float,
               samples: int, users: int, dim: int, method: str, params_json: str,
               phase_timeout_s: float, query_id: str, **more: Any) -> dict[str, Any]:
        """CreateQuery: validate, build the spec, store it (idempotent on the same id)."""
        c = check_create(kind=kind, epsilon=epsilon, dataset=dataset, bound=bound,
                         samples=samples, users=users, dim=dim, method=method,
                         params_json=params_json, phase_timeout_s=phase_timeout_s,
                         query_id=query_id, max_users=self.max_users, **more)
        assert c is not None
        qid, spec, drawn, allow, shuffle = (c.query_id, c.spec, c.drawn, c.allow_simulated,
                                            c.shuffle)
        program, quotas = c.program, c.quotas
        assert program is not None and quotas is not None
        also = None
        if shuffle is not None and self.odometer is not None:
            self.odometer.check_create(dataset=dataset, query_id=qid, epsilon=float(
                spec.epsilon), min_batch=int(shuffle["min_batch"]))
        if shuffle is not None:
            shuffle["key_id"] = self.seal_keys.current().key_id
            sh, odometer = shuffle, self.odometer

            def also(conn: Any) -> None:
                if odometer is not None:  # again, under the dataset's lock: check + insert
                    # are one step (two racing creates cannot both pass the budget)
                    odometer.check_create(dataset=dataset, query_id=qid, epsilon=float(
                        spec.epsilon), min_batch=int(sh["min_batch"]), conn=conn)
                self.db.add_shuffle_query_in(conn, qid, sh["min_batch"], sh["delta"],
                                             sh["key_id"])
        timeout = phase_timeout_s or self.default_phase_timeout_s
        row = dict(query_id=qid, kind=spec.kind, dataset=dataset, epsilon=float(spec.epsilon),
                   spec_json=json.dumps(spec.to_dict(), sort_keys=True), seed=str(spec.seed),
                   state="running", current_phase=1, num_phases=program.num_phases,
                   target_users=int(spec.users), phase_timeout_s=float(timeout),
                   result_json=None, allow_simulated=allow)
        stored, created = self.db.create_query(row, quotas, now_ms() + int(timeout * 1000),
                                               also)
        if not created and (not same_query(json.loads(stored["spec_json"]), spec, drawn)
                            or stored["dataset"] != dataset
                            or bool(stored["allow_simulated"]) != allow
                            or not _same_shuffle(self.db.shuffle_query(qid), shuffle)):
            raise ServiceError("ALREADY_EXISTS", f"query {qid} exists with different parameters")
        log.info("query %s (%s, %d phases) %s", qid, kind, program.num_phases,
                 "created" if created else "exists")
        return stored

    def get(self, query_id: str) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        """(query row, phase rows, devices assigned so far)."""
        row = self.db.get_query(query_id)
        if row is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        return row, self.db.get_phases(query_id), min(self.db.slots_taken(query_id),
                                                      int(row["target_users"]))

    def list(self, state: str | None) -> list[dict[str, Any]]:
        return self.db.list_queries(state)

    def cancel(self, query_id: str) -> None:
        if self.db.get_query(query_id) is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        if not self.db.cancel_query(query_id):
            row = self.db.get_query(query_id)
            raise ServiceError("FAILED_PRECONDITION",
                               f"query {query_id} is {row['state'] if row else 'gone'}; "
                               "only a running query can be cancelled")
