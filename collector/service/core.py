"""Collector logic behind the gRPC servicers (no gRPC types in here).

Spec: ``user_level_ldp.md`` §2.2 (round template: phases, assignment, broadcast of k̂),
§3.7 / [D1] [D2] (random balanced assignment drawn before data use), §2.4 / [D12]
(dropouts: a phase closes at its deadline with the reports received), [D22] (broadcast
k̂, devices derive [L, R]), [D23] (one message per device and query).

* A query compiles (``uldp.collector.planner.compile_query``) into a plan; phase ``p`` of
  the database is the ``p``-th entry of ``plan.phases`` (two-stage: 1 = stage I of every
  group, 2 = stage II; single-stage methods: one phase).
* Devices take *slots* 0, 1, 2, ... in check-in order; ``plan.assign(slot)`` maps a slot
  to (group, stage) through the permutation drawn from the query's public seed. The slot
  counter, the assignment and its unique keys live in the database, so the same device
  always gets the same answer, from any replica, across restarts.
* Reports are validated here (query, simulated flag, assignment, phase, length, range,
  task digest; the order is documented in ``proto/uldp/v1/device.proto``) and then
  committed by the group-commit writer, which re-checks under the phase-row lock that the
  phase is open and enforces one report per (query, device). An identical re-send is an
  OK duplicate even after its phase closed (the stored report is judged before the
  phase refusal).
* A background ticker closes due phases. ``Database.begin_close`` is a conditional update,
  so exactly one replica aggregates a phase under a short lease it renews while working
  (``uldp.collector.service.lease``: a dead closer is taken over within one lease, a
  restarted one frees its own leases at start); it streams the stored reports into the
  plan's accumulators, publishes k̂ (or the final estimate) and opens the next phase.
* Kind ``sgd`` (Algorithm 3, §8.3) runs as ``2·t0`` phases driven by a
  ``uldp.collector.learning.service.LearningProgram`` built from the stored spec: a slot
  maps to (group, stage, phase = 2t + stage) of step ``t``; a phase's tasks and closing
  rule are functions of the published JSON of the closed phases (k̂ after stage I, θ_{t+1}
  after stage II), so a restart resumes in the phase it was in (INV-4).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import struct
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.exc import DBAPIError

from uldp.client.tasks import TaskSpec, report_length, report_limit
from uldp.client.wire import MAX_ABS_REPORT_VALUE
from uldp.collector.planner import Plan, QuerySpec, compile_query
from uldp.collector.security.tokens import AdminAuth, TokenError, TokenKey
from uldp.collector.service.lease import LeaseKeeper, LeaseLost, closer_id, owned_by
from uldp.collector.storage.db import (
    Database,
    PendingReport,
    ReportOutcome,
    judge_stored,
    now_ms,
)
from uldp.collector.storage.writer import GroupCommitWriter, WriterUnavailable

__all__ = ["CollectorCore", "CoreConfig", "ServiceError", "TaskInfo"]

log = logging.getLogger("uldp.collector")

_QUERY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SPEC_EXTRA = ("moment_p", "moment_m", "frame_kind", "frame_seed", "mode", "confidence",
               "extra")  # extra: public values of the learning kinds (grid, label bound)
#: CreateQuery params key (JSON bool): the query accepts reports marked simulated; stored
#: with the query (not part of its statistical spec)
_ALLOW_SIMULATED = "allow_simulated"
#: environment variable of the slow-close test hook (seconds; unset in production)
TEST_CLOSE_DELAY_ENV = "ULDP_TEST_CLOSE_DELAY_S"
SIMULATED_REFUSED = ("report is from a simulation (seeded noise); this query does not "
                     "accept simulated reports")


class ServiceError(Exception):
    """A request is refused: ``code`` is a gRPC status code name, ``message`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class CoreConfig:
    token_ttl_s: float = 7 * 24 * 3600.0
    token_grace_s: float = 90 * 24 * 3600.0  # re-enrolment with an expired token
    default_phase_timeout_s: float = 3600.0
    #: closing lease: renewed every third of it while a phase is aggregated; a replica
    #: that dies mid-close is taken over within this long (uldp.collector.service.lease)
    close_lease_ms: int = 5_000
    tick_s: float = 0.2
    enrollment_secret: str | None = None
    max_users: int = 10_000_000
    commit_linger_ms: float = 2.0  # group commit: wait this long for more reports
    #: accept reports marked ``simulated`` (seeded noise) for every query; otherwise only
    #: queries created with ``"allow_simulated": true`` in their params accept them
    allow_simulated: bool = False


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


@dataclass
class _QueryStatic:
    query_id: str
    dataset: str
    kind: str
    plan: Plan  # for kind "sgd": the plan of step 0 (the program drives every phase)
    num_phases: int
    _slots: tuple[np.ndarray, np.ndarray] | None = None
    program: Any = None  # LearningProgram of a kind "sgd" query
    allow_simulated: bool = False  # the query accepts reports marked simulated

    def slots(self) -> tuple[np.ndarray, np.ndarray]:
        """(group, stage) of every slot, computed once (``Plan.assign`` is O(n) per call)."""
        if self._slots is None:
            g, s = self.plan.assign_all()
            self._slots = (np.asarray(g), np.asarray(s))
        return self._slots


def _learning() -> Any:
    """``uldp.collector.learning.service``, imported on first use (keeps this module's
    import light; the learning package is only needed for kind ``sgd``)."""
    from uldp.collector.learning import service
    return service


def _test_close_delay_s() -> float:
    """Seconds every close stalls after its claim, from the test-only environment
    variable ``ULDP_TEST_CLOSE_DELAY_S`` (unset: 0, no stall)."""
    return float(os.environ.get(TEST_CLOSE_DELAY_ENV) or 0)


def _not_open(query_id: str, phase: int, state: str) -> str:
    """The FAILED_PRECONDITION message of a report for a phase that is not open."""
    return f"phase {phase} of query {query_id} is not open (state: {state})"


def phase_of_stage(stage: int) -> int:
    """Database phase (1-based) of a stage: stage I and single-stage → 1, stage II → 2."""
    return 2 if stage == 2 else 1


class CollectorCore:
    """All collector behaviour; thread-safe; one per process."""

    PHASE_CACHE_S = 0.25

    def __init__(self, db: Database, token_key: TokenKey, admin: AdminAuth,
                 config: CoreConfig | None = None, name: str | None = None) -> None:
        self.db = db
        self.token_key = token_key
        self.admin = admin
        self.config = config or CoreConfig()
        self.name = name or f"collector-{secrets.token_hex(4)}"
        #: this process's holder id in closing leases (a restart gets a new one)
        self.closer_id = closer_id(self.name)
        self.writer = GroupCommitWriter(db, linger_s=self.config.commit_linger_ms / 1000)
        self._statics: dict[str, _QueryStatic] = {}
        self._tasks: OrderedDict[tuple[Any, ...], TaskInfo] = OrderedDict()
        self._assign_cache: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._running_cache: tuple[float, list[dict[str, Any]]] = (0.0, [])
        self._stop = threading.Event()
        self._phase_cache: dict[str, tuple[float, dict[int, dict[str, Any]]]] = {}
        self._ticker = threading.Thread(target=self._tick_loop, name="uldp-closer", daemon=True)

    # ---- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        # an earlier incarnation of this replica killed mid-close cannot still be working:
        # free its leases now instead of waiting for them to run out
        freed = self.db.expire_leases(owned_by(self.name), keep=self.closer_id)
        for qid, phase in freed:
            log.warning("query %s phase %d: took back the closing lease of an earlier "
                        "incarnation of %s", qid, phase, self.name)
        self._ticker.start()

    def stop(self) -> None:
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join(timeout=30)
        self.writer.close()

    # ---- authentication -------------------------------------------------------------
    def device_from_token(self, token: str | None) -> str:
        if not token:
            raise ServiceError("UNAUTHENTICATED", "missing device token "
                               "(metadata 'authorization: Bearer <token>')")
        try:
            return self.token_key.verify(token).device_id
        except TokenError as exc:
            raise ServiceError("UNAUTHENTICATED", str(exc)) from None

    def check_admin(self, token: str | None) -> None:
        if not self.admin.check(token):
            raise ServiceError("UNAUTHENTICATED", "analyst calls need the admin credential "
                               "(metadata 'authorization: Bearer <admin token>')")

    # ---- enrollment -----------------------------------------------------------------
    def enroll(self, secret: str, label: str, previous_token: str) -> tuple[str, str, int]:
        want = self.config.enrollment_secret
        if want is not None and not secrets.compare_digest(secret.encode(), want.encode()):
            raise ServiceError("UNAUTHENTICATED", "wrong or missing enrollment secret")
        device_id = None
        if previous_token:
            try:
                claims = self.token_key.verify(previous_token, allow_expired=True)
            except TokenError as exc:
                raise ServiceError("UNAUTHENTICATED", f"previous token rejected: {exc}") from None
            if now_ms() - claims.expires_at_ms > self.config.token_grace_s * 1000:
                raise ServiceError("UNAUTHENTICATED", "previous token expired too long ago")
            device_id = claims.device_id
        if device_id is None:
            device_id = "d-" + secrets.token_hex(12)
            # the registry row is informational (tokens are stateless): do not wait for it
            self.writer.register_device(device_id, label)
        token, exp = self.token_key.issue(device_id, self.config.token_ttl_s)
        return device_id, token, exp

    # ---- queries --------------------------------------------------------------------
    def _static(self, query_id: str) -> _QueryStatic | None:
        with self._lock:
            st = self._statics.get(query_id)
        if st is not None:
            return st
        row = self.db.get_query(query_id)
        if row is None:
            return None
        spec = QuerySpec.from_dict(json.loads(row["spec_json"]))
        program = None
        if row["kind"] == "sgd":
            program = _learning().LearningProgram.from_spec(spec)
            plan = program.plan_for(1, {})
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                plan = compile_query(spec)
        st = _QueryStatic(query_id, row["dataset"], row["kind"], plan, int(row["num_phases"]),
                          program=program, allow_simulated=bool(row["allow_simulated"]))
        with self._lock:
            self._statics[query_id] = st
        return st

    def create_query(self, *, kind: str, epsilon: float, dataset: str, bound: float,
                     samples: int, users: int, dim: int, method: str, params_json: str,
                     phase_timeout_s: float, query_id: str) -> dict[str, Any]:
        if query_id and not _QUERY_ID.match(query_id):
            raise ServiceError("INVALID_ARGUMENT",
                               "query_id must match [A-Za-z0-9_.-]{1,64}")
        if not dataset or len(dataset) > 256:
            raise ServiceError("INVALID_ARGUMENT", "dataset must be a name of 1..256 chars")
        try:
            params = json.loads(params_json) if params_json else {}
        except json.JSONDecodeError as exc:
            raise ServiceError("INVALID_ARGUMENT", f"params_json is not JSON: {exc}") from None
        if not isinstance(params, dict) or set(params) - {*_SPEC_EXTRA, _ALLOW_SIMULATED}:
            raise ServiceError("INVALID_ARGUMENT", "params_json must be an object with keys "
                               f"among {(*_SPEC_EXTRA, _ALLOW_SIMULATED)}")
        allow_simulated = params.pop(_ALLOW_SIMULATED, False)
        if not isinstance(allow_simulated, bool):
            raise ServiceError("INVALID_ARGUMENT",
                               f"params_json {_ALLOW_SIMULATED!r} must be true or false")
        if users > self.config.max_users:
            raise ServiceError("INVALID_ARGUMENT", f"users must be <= {self.config.max_users}")
        if not (phase_timeout_s >= 0 and np.isfinite(phase_timeout_s)):
            raise ServiceError("INVALID_ARGUMENT", "phase_timeout_seconds must be >= 0")
        qid = query_id or "q-" + secrets.token_hex(6)
        if kind == "sgd":
            return self._create_sgd(epsilon=epsilon, dataset=dataset, bound=bound,
                                    samples=samples, users=users, dim=dim, method=method,
                                    params=params, phase_timeout_s=phase_timeout_s, qid=qid,
                                    allow_simulated=allow_simulated)
        heavy = params.get("moment_p") is not None
        fields: dict[str, Any] = dict(
            kind=kind, epsilon=float(epsilon), users=int(users), samples=int(samples),
            dim=int(dim) if dim else 1, bound=None if heavy and not bound else float(bound),
            method=method or "two-stage", query_id=qid, **params)
        try:
            probe = QuerySpec(**{**fields, "seed": 0})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile_query(probe)
        except (ValueError, TypeError) as exc:
            raise ServiceError("INVALID_ARGUMENT", f"invalid query: {exc}") from None
        # the slot permutation's seed: public, drawn now, before any data exist (INV-3)
        spec = QuerySpec(**{**fields, "seed": secrets.randbits(63)})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plan = compile_query(spec)
        _, stage = plan.assign_all()
        phase_per_slot = np.where(stage == 2, 2, 1)
        quotas = [int(np.count_nonzero(phase_per_slot == p + 1))
                  for p in range(len(plan.phases))]
        timeout = phase_timeout_s or self.config.default_phase_timeout_s
        row = dict(query_id=qid, kind=kind, dataset=dataset, epsilon=float(epsilon),
                   spec_json=json.dumps(spec.to_dict(), sort_keys=True), seed=str(spec.seed),
                   state="running", current_phase=1, num_phases=len(plan.phases),
                   target_users=int(users), phase_timeout_s=float(timeout), result_json=None,
                   allow_simulated=allow_simulated)
        stored, created = self.db.create_query(row, quotas, now_ms() + int(timeout * 1000))
        if not created:
            old = json.loads(stored["spec_json"])
            old.pop("seed", None)
            new = spec.to_dict()
            new.pop("seed", None)
            if (old != new or stored["dataset"] != dataset
                    or bool(stored["allow_simulated"]) != allow_simulated):
                raise ServiceError("ALREADY_EXISTS",
                                   f"query {qid} exists with different parameters")
        log.info("query %s (%s) %s", qid, kind, "created" if created else "exists")
        return stored

    def _create_sgd(self, *, epsilon: float, dataset: str, bound: float, samples: int,
                    users: int, dim: int, method: str, params: dict[str, Any],
                    phase_timeout_s: float, qid: str,
                    allow_simulated: bool = False) -> dict[str, Any]:
        """CreateQuery for kind ``sgd``: the stored spec is ``sgd_query(config, ...)`` (t0
        fixed now, public); ``2·t0`` phases with the program's per-phase quotas.

        ``params_json`` carries the public SGD configuration in ``extra``: ``model`` and
        an ``sgd`` object of ``SGDConfig`` fields (e.g. the ``extra`` of ``sgd_query``);
        the request's epsilon, bound (the clip D) and method fill the fields not given
        there and must agree with those given. ``frame_kind`` / ``mode`` may also be
        top-level params. Without ``sgd.seed`` the collector draws the seed of the step
        partition and slot permutation now, before any data exist (INV-3)."""
        lrn = _learning()
        bad = set(params) - {"extra", "frame_kind", "mode"}
        if bad:
            raise ServiceError("INVALID_ARGUMENT",
                               f"params {sorted(bad)} do not apply to kind sgd")
        extra = params.get("extra") or {}
        cfg_in = extra.get("sgd") if isinstance(extra, dict) else None
        if not isinstance(extra, dict) or not isinstance(cfg_in or {}, dict):
            raise ServiceError("INVALID_ARGUMENT",
                               "params_json extra must be an object whose 'sgd' is an object")
        cfg = dict(cfg_in or {})
        given = {"epsilon": float(epsilon), "clip": float(bound) if bound else None,
                 "method": method or None, "model": extra.get("model"),
                 "frame_kind": params.get("frame_kind"), "mode": params.get("mode")}
        for k, v in given.items():
            if v is None:
                continue
            if k in cfg and cfg[k] is not None and cfg[k] != v:
                raise ServiceError("INVALID_ARGUMENT",
                                   f"sgd {k} = {cfg[k]!r} disagrees with the request's {v!r}")
            cfg[k] = v
        seed_drawn = "seed" not in cfg
        if seed_drawn:
            cfg["seed"] = secrets.randbits(48)
        cfg["query_id"] = qid
        d = int(dim) if dim else 1
        try:
            config = lrn.SGDConfig(**cfg)
            if config.theta0 is not None and len(config.theta0) != d:
                raise ValueError(f"theta0 has {len(config.theta0)} values, dim is {d}")
            if int(users) < 2 or int(samples) < 1:
                raise ValueError("sgd needs users >= 2 and samples >= 1")
            spec = lrn.sgd_query(config, int(users), int(samples), d, query_id=qid)
            program = lrn.LearningProgram.from_spec(spec)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quotas = program.quotas()
                program.plan_for(1, {})  # step 0 compiles (θ_0, model, frame)
        except (ValueError, TypeError, KeyError) as exc:
            raise ServiceError("INVALID_ARGUMENT", f"invalid sgd query: {exc}") from None
        timeout = phase_timeout_s or self.config.default_phase_timeout_s
        row = dict(query_id=qid, kind="sgd", dataset=dataset, epsilon=spec.epsilon,
                   spec_json=json.dumps(spec.to_dict(), sort_keys=True), seed=str(spec.seed),
                   state="running", current_phase=1, num_phases=program.num_phases,
                   target_users=spec.users, phase_timeout_s=float(timeout), result_json=None,
                   allow_simulated=allow_simulated)
        stored, created = self.db.create_query(row, quotas, now_ms() + int(timeout * 1000))
        if not created:
            old, new = json.loads(stored["spec_json"]), spec.to_dict()
            if seed_drawn:  # the same request again: only the drawn seed differs
                for sd in (old, new):
                    sd.pop("seed", None)
                    sd.get("extra", {}).get("sgd", {}).pop("seed", None)
            if (old != new or stored["dataset"] != dataset
                    or bool(stored["allow_simulated"]) != allow_simulated):
                raise ServiceError("ALREADY_EXISTS",
                                   f"query {qid} exists with different parameters")
        log.info("query %s (sgd, t0=%d) %s", qid, program.t0,
                 "created" if created else "exists")
        return stored

    def get_query(self, query_id: str) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        row = self.db.get_query(query_id)
        if row is None:
            raise ServiceError("NOT_FOUND", f"unknown query {query_id!r}")
        return row, self.db.get_phases(query_id), min(int(row["next_slot"]),
                                                      int(row["target_users"]))

    def list_queries(self, state: str | None) -> list[dict[str, Any]]:
        return self.db.list_queries(state)

    def cancel_query(self, query_id: str) -> None:
        if self.db.get_query(query_id) is None:
            raise ServiceError("NOT_FOUND", f"unknown query {query_id!r}")
        ok = self.db.cancel_query(query_id)
        with self._lock:
            self._phase_cache.pop(query_id, None)
        if not ok:
            row = self.db.get_query(query_id)
            raise ServiceError("FAILED_PRECONDITION",
                               f"query {query_id} is {row['state'] if row else 'gone'}; "
                               "only a running query can be cancelled")

    # ---- tasks ----------------------------------------------------------------------
    def _running(self) -> list[dict[str, Any]]:
        t, rows = self._running_cache
        if time.monotonic() - t > 0.25:
            rows = self.db.running_queries()
            self._running_cache = (time.monotonic(), rows)
        return rows

    def _published_before(self, query_id: str, phase: int) -> dict[int, dict[str, Any]]:
        """Published JSON of phases ``1 .. phase-1`` (all closed once ``phase`` is open)."""
        rows = self._phase_rows(query_id)
        if any(not (rows.get(p) or {}).get("published_json") for p in range(1, phase)):
            rows = self._phase_rows(query_id, fresh=True)
        out: dict[int, dict[str, Any]] = {}
        for p in range(1, phase):
            text = (rows.get(p) or {}).get("published_json")
            if not text:
                raise ServiceError("FAILED_PRECONDITION",
                                   f"phase {phase} of query {query_id} is not open yet")
            out[p] = json.loads(text)
        return out

    def task_info(self, st: _QueryStatic, assignment: dict[str, Any],
                  phase_row: dict[str, Any]) -> TaskInfo:
        grp, stage, phase = assignment["grp"], assignment["stage"], assignment["phase"]
        baseline_a = st.program is None and st.plan.spec.method == "baseline-a"
        key = (st.query_id, phase, grp, stage, assignment["slot"] if baseline_a else -1)
        with self._lock:
            info = self._tasks.get(key)
        if info is not None:
            return info
        if st.program is not None:  # sgd: step t's task with θ_t (and k̂ in stage II)
            task = st.program.task_for(phase, grp, stage,
                                       self._published_before(st.query_id, phase))
            return self._cache_task(key, st, assignment, task)
        khat = None
        if stage == 2:
            pub = json.loads(phase_row["_prev_published"] or "{}")
            if "khat" not in pub:
                raise ServiceError("FAILED_PRECONDITION",
                                   f"phase {phase} of query {st.query_id} is not open yet")
            khat = tuple(int(k) for k in pub["khat"][str(grp)])
        task: TaskSpec = st.plan.task_for(grp, stage, khat, slot=assignment["slot"])
        return self._cache_task(key, st, assignment, task)

    def _cache_task(self, key: tuple[Any, ...], st: _QueryStatic, assignment: dict[str, Any],
                    task: TaskSpec) -> TaskInfo:
        grp, stage, phase = assignment["grp"], assignment["stage"], assignment["phase"]
        text = task.to_json()
        info = TaskInfo(st.query_id, phase, grp, stage, st.dataset, text,
                        hashlib.sha256(text.encode()).hexdigest(), report_length(task),
                        min(report_limit(task), MAX_ABS_REPORT_VALUE), 0)
        with self._lock:
            self._tasks[key] = info
            if len(self._tasks) > 100_000:
                self._tasks.popitem(last=False)
        return info

    def _phase_rows(self, query_id: str, fresh: bool = False) -> dict[int, dict[str, Any]]:
        """Phase rows of a query, cached for ``PHASE_CACHE_S`` (the writer re-checks the
        phase state under the row lock, so a stale answer can delay, never corrupt)."""
        now = time.monotonic()
        with self._lock:
            hit = self._phase_cache.get(query_id)
        if hit is not None and not fresh and now - hit[0] < self.PHASE_CACHE_S:
            return hit[1]
        rows = {r["phase"]: r for r in self.db.get_phases(query_id)}
        for p, r in rows.items():
            prev = rows.get(p - 1)
            r["_prev_published"] = prev["published_json"] if prev else ""
        with self._lock:  # never let an older read replace a newer one
            cur = self._phase_cache.get(query_id)
            if cur is None or cur[0] <= now:
                self._phase_cache[query_id] = (now, rows)
        return rows

    @staticmethod
    def _placer(st: _QueryStatic) -> Any:
        if st.program is not None:  # sgd: slot -> (group, stage, phase = 2t + stage)
            return st.program.place
        groups, stages = st.slots()

        def place(slot: int) -> tuple[int, int, int]:
            g, s = int(groups[slot]), int(stages[slot])
            return g, s, phase_of_stage(s)
        return place

    def _remember(self, a: dict[str, Any]) -> None:
        with self._lock:
            self._assign_cache[(a["query_id"], a["device_id"])] = a
            if len(self._assign_cache) > 500_000:
                self._assign_cache.popitem(last=False)

    def get_tasks(self, device_id: str, datasets: Sequence[str],
                  query_id: str = "") -> tuple[list[TaskInfo], list[tuple[str, int]], int]:
        """(tasks to run now, (query, phase) assignments waiting, retry-after ms)."""
        wanted = set(datasets)
        queries = [q for q in self._running()
                   if q["dataset"] in wanted and (not query_id or q["query_id"] == query_id)]
        if query_id and not queries:
            row = self.db.get_query(query_id)
            if row is None:
                raise ServiceError("NOT_FOUND", f"unknown query {query_id!r}")
        todo: list[tuple[_QueryStatic, dict[str, Any] | None]] = []
        need_assign = []
        for q in queries:
            st = self._static(q["query_id"])
            if st is None:
                continue
            a, reported = self.db.device_status(st.query_id, device_id)
            if reported:
                continue
            todo.append((st, a))
            if a is None:
                need_assign.append(st)
        if need_assign:
            try:
                made = self.writer.assign([(st.query_id, device_id, self._placer(st))
                                           for st in need_assign])
            except WriterUnavailable as exc:
                raise ServiceError("UNAVAILABLE", str(exc)) from None
            todo = [(st, a if a is not None else made.get(st.query_id)) for st, a in todo]
        tasks: list[TaskInfo] = []
        waiting: list[tuple[str, int]] = []
        for st, a in todo:
            if a is None:
                continue  # all slots taken
            self._remember(a)
            rows = self._phase_rows(st.query_id)
            ph = rows.get(a["phase"])
            if ph is None:
                continue
            if ph["state"] == "open":
                info = self.task_info(st, a, ph)
                tasks.append(TaskInfo(**{**info.__dict__, "deadline_ms": int(ph["deadline_ms"])}))
            elif ph["state"] in ("pending", "closing"):
                waiting.append((st.query_id, a["phase"]))
        retry = 300 if waiting else (0 if tasks else 2000)
        return tasks, waiting, retry

    # ---- reports --------------------------------------------------------------------
    def _assignment(self, query_id: str, device_id: str) -> dict[str, Any] | None:
        with self._lock:
            a = self._assign_cache.get((query_id, device_id))
        if a is None:
            a = self.db.get_assignment(query_id, device_id)
            if a is not None:
                self._remember(a)
        return a

    def prefetch_assignments(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Load the uncached assignments of many (query, device) pairs, one SELECT per
        query (batched ingestion from gateways)."""
        with self._lock:
            missing: dict[str, list[str]] = {}
            for q, d in pairs:
                if (q, d) not in self._assign_cache:
                    missing.setdefault(q, []).append(d)
        for q, devs in missing.items():
            for a in self.db.get_assignments(q, devs):
                self._remember(a)

    def validate_report(self, device_id: str, query_id: str, phase: int,
                        values: Sequence[int], digest: str, simulated: bool = False
                        ) -> PendingReport | ReportOutcome:
        """Check a report against the device's assignment and task.

        Returns the report to commit, or the final answer (OK, ``duplicate``) when the
        identical report is already stored and its phase is no longer open (a re-send
        after a lost acknowledgement); raises :class:`ServiceError` for a refusal. The
        order of the checks is the one documented in ``proto/uldp/v1/device.proto``."""
        st = self._static(query_id)
        if st is None:
            raise ServiceError("NOT_FOUND", f"unknown query {query_id!r}")
        if simulated and not (self.config.allow_simulated or st.allow_simulated):
            raise ServiceError("FAILED_PRECONDITION", SIMULATED_REFUSED)
        a = self._assignment(query_id, device_id)
        if a is None:
            raise ServiceError("PERMISSION_DENIED",
                               f"device {device_id} is not assigned to query {query_id}")
        if phase != a["phase"]:
            raise ServiceError("FAILED_PRECONDITION",
                               f"device {device_id} is assigned to phase {a['phase']} of query "
                               f"{query_id}, not phase {phase}")
        rows = self._phase_rows(query_id)
        ph = rows.get(phase)
        if ph is None or ph["state"] != "open":  # the cache may be behind: look again
            ph = self._phase_rows(query_id, fresh=True).get(phase)
        if ph is None:
            raise ServiceError("FAILED_PRECONDITION", f"query {query_id} has no phase {phase}")
        if not ph["opened_at_ms"]:  # never opened: no report of it can be stored
            raise ServiceError("FAILED_PRECONDITION", _not_open(query_id, phase, ph["state"]))
        info = self.task_info(st, a, ph)
        if len(values) != info.length:
            raise ServiceError("INVALID_ARGUMENT",
                               f"report has {len(values)} values; the task of group "
                               f"{a['grp']} stage {a['stage']} needs exactly {info.length}")
        vals = list(values)
        lim = info.limit
        if vals and (max(vals) > lim or min(vals) < -lim):
            i = next(k for k, v in enumerate(vals) if abs(v) > lim)
            raise ServiceError("INVALID_ARGUMENT",
                               f"report value #{i} = {vals[i]} is outside [-{lim}, {lim}]")
        if digest != info.digest:
            raise ServiceError("FAILED_PRECONDITION",
                               "report was computed for a different task (task_digest "
                               f"{digest[:16] or '<empty>'}… != {info.digest[:16]}…); "
                               "fetch the current task")
        item = PendingReport(query_id, phase, device_id, a["grp"], a["stage"], a["slot"],
                             struct.pack(f"<{len(vals)}q", *vals))
        if ph["state"] == "open":
            return item  # the writer judges a stored report under the phase-row lock
        # closing, closed or cancelled: a stored report is answered before the phase
        # refusal (a committed report never changes, so this read is authoritative)
        out = judge_stored(item, self.db.stored_report(query_id, device_id))
        if out is None:
            raise ServiceError("FAILED_PRECONDITION", _not_open(query_id, phase, ph["state"]))
        if out.code != "OK":
            raise ServiceError(out.code, out.message)
        return out

    def store(self, items: Sequence[PendingReport]) -> list[ReportOutcome]:
        try:
            return self.writer.store_reports(items)
        except WriterUnavailable as exc:
            raise ServiceError("UNAVAILABLE", str(exc)) from None

    # ---- phase closing --------------------------------------------------------------
    def _tick_loop(self) -> None:
        last_checkpoint = time.monotonic()
        while not self._stop.wait(self.config.tick_s):
            if time.monotonic() - last_checkpoint > 1.0:
                last_checkpoint = time.monotonic()
                try:
                    self.db.checkpoint()
                except Exception:
                    log.exception("WAL checkpoint")
            try:
                for qid, phase in self.db.phases_due():
                    if self._stop.is_set():
                        break
                    self.close_phase(qid, phase)
            except Exception:  # keep ticking: the database may be briefly unavailable
                log.exception("phase ticker")

    def close_phase(self, query_id: str, phase: int, force: bool = False) -> bool:
        """Aggregate a due phase if this replica wins the claim; True if it closed it.

        The claim is a lease renewed by a :class:`LeaseKeeper` while the phase is
        aggregated (``uldp.collector.service.lease``). Losing it stops the close without
        publishing; a database error leaves the phase ``closing`` for a retry once the
        lease runs out; any other error fails the query (if the lease is still ours)."""
        closer, lease_ms = self.closer_id, self.config.close_lease_ms
        if not self.db.begin_close(query_id, phase, closer, lease_ms, force=force):
            return False
        t0 = time.perf_counter()
        try:
            with LeaseKeeper(self.db, query_id, phase, closer, lease_ms) as keeper:
                delay = _test_close_delay_s()
                if delay > 0:  # test hook: a slow close to kill or take over
                    keeper.sleep(delay)
                n, ok = self._aggregate_and_publish(query_id, phase, keeper)
        except LeaseLost as exc:
            log.warning("stopped closing: %s", exc)
            return False
        except Exception as exc:
            if isinstance(exc, (DBAPIError, self.db.dbapi_error)):
                log.warning("closing phase %d of query %s hit a database error (retried "
                            "when the lease runs out): %s", phase, query_id, exc)
                return False
            log.exception("closing phase %d of query %s failed", phase, query_id)
            self.db.fail_close(query_id, phase, closer,
                               f"closing phase {phase} failed: {exc}")
            return False
        finally:
            with self._lock:
                self._phase_cache.pop(query_id, None)
        st = self._static(query_id)
        total = st.num_phases if st is not None else phase
        if ok:
            log.info("query %s phase %d closed by %s (phase %d of %d): %d reports in %.2fs",
                     query_id, phase, self.name, phase, total, n, time.perf_counter() - t0)
        else:
            log.warning("query %s phase %d: lost the closing lease before publishing",
                        query_id, phase)
        return ok

    def _aggregate_and_publish(self, query_id: str, phase: int,
                               keeper: LeaseKeeper) -> tuple[int, bool]:
        """Stream the phase's reports into the plan's accumulators, then publish k̂ (and
        open the next phase) or store the result. Returns (reports, published); the
        caller holds the lease, checked between report blocks."""
        st = self._static(query_id)
        assert st is not None
        if st.program is not None:
            return self._close_program_phase(st, phase, keeper)
        plan = st.plan
        khat: dict[int, tuple[int, ...]] = {}
        if phase > 1:
            pub = self.db.published(query_id, phase - 1)
            khat = {int(g): tuple(int(x) for x in k) for g, k in pub.get("khat", {}).items()}
        accs: dict[int, Any] = {}
        n = 0

        def acc_for(grp: int, stage: int) -> Any:
            acc = accs.get(grp)
            if acc is None:
                acc = plan.new_accumulator(grp, stage, khat.get(grp) if stage == 2 else None)
                accs[grp] = acc
            return acc
        if plan.spec.method == "baseline-a":  # needs each report's slot (its offset)
            for grp, stage, slots, payloads in self.db.stream_reports(query_id, phase):
                keeper.check()
                arr = np.frombuffer(b"".join(payloads), "<i8").reshape(len(payloads), -1)
                acc_for(grp, stage).add(arr, plan.offset_for(np.asarray(slots)))
                n += len(payloads)
        else:
            for grp, stage, count, blob in self.db.report_blocks(query_id, phase,
                                                                 plan.spec.users):
                keeper.check()
                acc_for(grp, stage).add(np.frombuffer(blob, "<i8").reshape(count, -1))
                n += count
        keeper.check()
        if phase < st.num_phases:
            kh = plan.khat_from(accs)
            published = {"khat": {str(g): [int(x) for x in k] for g, k in kh.items()},
                         "reports": n}
            row = self.db.get_query(query_id)
            timeout = float(row["phase_timeout_s"]) if row else 3600.0
            ok = self.db.finish_close(query_id, phase, keeper.closer, published,
                                      next_deadline_ms=now_ms() + int(timeout * 1000),
                                      result=None)
        else:
            est = plan.finalize(accs)
            result = est.to_dict()
            if phase > 1:
                result["khat"] = {str(g): list(k) for g, k in khat.items()}
            ok = self.db.finish_close(query_id, phase, keeper.closer, {"reports": n},
                                      next_deadline_ms=None, result=result)
        return n, ok

    def _close_program_phase(self, st: _QueryStatic, phase: int,
                             keeper: LeaseKeeper) -> tuple[int, bool]:
        """Close a phase of an ``sgd`` query (the caller holds the closing lease): publish
        ``program.close`` (k̂ after stage I, θ_{t+1} after stage II); after the last phase
        store ``program.result``. Returns (reports aggregated, published)."""
        prog, qid = st.program, st.query_id
        published = {p: self.db.published(qid, p) for p in range(1, phase)}
        accs: dict[int, Any] = {}
        n = 0
        for grp, stage, count, blob in self.db.report_blocks(qid, phase, prog.spec.users):
            keeper.check()
            acc = accs.get(grp)
            if acc is None:
                acc = accs[grp] = prog.new_accumulator(phase, grp, stage, published)
            acc.add(np.frombuffer(blob, "<i8").reshape(count, -1))
            n += count
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pub = prog.close(phase, accs, published)
        keeper.check()
        if phase < st.num_phases:
            row = self.db.get_query(qid)
            timeout = float(row["phase_timeout_s"]) if row else 3600.0
            ok = self.db.finish_close(qid, phase, keeper.closer, pub,
                                      next_deadline_ms=now_ms() + int(timeout * 1000),
                                      result=None)
        else:
            result = prog.result({**published, phase: pub})
            ok = self.db.finish_close(qid, phase, keeper.closer, pub, next_deadline_ms=None,
                                      result=result)
        return n, ok
