"""Test-only: the changes of ``uldp.collector.learning.service.INTEGRATION`` applied to the
gRPC collector with ``monkeypatch`` (the service files are owned by another engineer).

Every patched method delegates to the original for non-``sgd`` kinds; for ``sgd`` it
uses :class:`~uldp.collector.learning.service.LearningProgram`, so the query runs as
``2·t0`` phases with θ published between steps, persisted by the collector's own
database calls (``create_query``, ``report_blocks``, ``published``, ``finish_close``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import warnings
from typing import Any

import numpy as np

from uldp.client.tasks import report_length, report_limit
from uldp.client.wire import MAX_ABS_REPORT_VALUE
from uldp.collector.learning.service import LearningProgram
from uldp.collector.planner import QuerySpec
from uldp.collector.service import core as svc
from uldp.collector.storage.db import now_ms

_PROGRAMS: dict[str, LearningProgram] = {}


def _program(query_id: str, spec: QuerySpec) -> LearningProgram:
    prog = _PROGRAMS.get(query_id)
    if prog is None:
        prog = _PROGRAMS[query_id] = LearningProgram.from_spec(spec)
    return prog


def _published(core: Any, query_id: str, upto: int) -> dict[int, dict[str, Any]]:
    return {p: core.db.published(query_id, p) for p in range(1, upto)}


def install(monkeypatch: Any) -> None:
    _PROGRAMS.clear()
    Core = svc.CollectorCore
    monkeypatch.setattr(svc, "_SPEC_EXTRA", (*svc._SPEC_EXTRA, "extra"))
    orig_create, orig_placer = Core.create_query, Core._placer
    orig_task_info, orig_close = Core.task_info, Core.close_phase

    def create_query(self: Any, **kw: Any) -> dict[str, Any]:
        if kw["kind"] != "sgd":
            return orig_create(self, **kw)
        params = json.loads(kw["params_json"] or "{}")
        qid = kw["query_id"] or "q-" + secrets.token_hex(6)
        spec = QuerySpec(kind="sgd", epsilon=float(kw["epsilon"]), users=int(kw["users"]),
                         samples=int(kw["samples"]), dim=int(kw["dim"] or 1),
                         bound=float(kw["bound"]), method=kw["method"] or "two-stage",
                         query_id=qid, extra=params["extra"], seed=secrets.randbits(63))
        prog = LearningProgram.from_spec(spec)
        timeout = kw["phase_timeout_s"] or self.config.default_phase_timeout_s
        row = dict(query_id=qid, kind="sgd", dataset=kw["dataset"], epsilon=spec.epsilon,
                   spec_json=json.dumps(spec.to_dict(), sort_keys=True), seed=str(spec.seed),
                   state="running", current_phase=1, num_phases=prog.num_phases,
                   target_users=spec.users, phase_timeout_s=float(timeout), result_json=None)
        stored, _ = self.db.create_query(row, prog.quotas(), now_ms() + int(timeout * 1000))
        return stored

    def _placer(st: Any) -> Any:
        if st.kind != "sgd":
            return orig_placer(st)
        return _program(st.query_id, st.plan.spec).place

    def task_info(self: Any, st: Any, assignment: dict[str, Any],
                  phase_row: dict[str, Any]) -> Any:
        if st.kind != "sgd":
            return orig_task_info(self, st, assignment, phase_row)
        grp, stage, phase = assignment["grp"], assignment["stage"], assignment["phase"]
        key = (st.query_id, phase, grp, stage, -1)
        with self._lock:
            info = self._tasks.get(key)
        if info is not None:
            return info
        prog = _program(st.query_id, st.plan.spec)
        task = prog.task_for(phase, grp, stage, _published(self, st.query_id, phase))
        text = task.to_json()
        info = svc.TaskInfo(st.query_id, phase, grp, stage, st.dataset, text,
                          hashlib.sha256(text.encode()).hexdigest(), report_length(task),
                          min(report_limit(task), MAX_ABS_REPORT_VALUE), 0)
        with self._lock:
            self._tasks[key] = info
        return info

    def close_phase(self: Any, query_id: str, phase: int, force: bool = False) -> bool:
        st = self._static(query_id)
        if st is None or st.kind != "sgd":
            return orig_close(self, query_id, phase, force)
        if not self.db.begin_close(query_id, phase, self.name, self.config.close_lease_ms,
                                   force=force):
            return False
        prog = _program(query_id, st.plan.spec)
        published = _published(self, query_id, phase)
        accs: dict[int, Any] = {}
        for grp, stage, count, blob in self.db.report_blocks(query_id, phase, prog.spec.users):
            acc = accs.get(grp)
            if acc is None:
                acc = accs[grp] = prog.new_accumulator(phase, grp, stage, published)
            acc.add(np.frombuffer(blob, "<i8").reshape(count, -1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pub = prog.close(phase, accs, published)
        if phase < prog.num_phases:
            row = self.db.get_query(query_id)
            timeout = float(row["phase_timeout_s"]) if row else 3600.0
            ok = self.db.finish_close(query_id, phase, self.name, pub,
                                      next_deadline_ms=now_ms() + int(timeout * 1000),
                                      result=None)
        else:
            result = prog.result({**published, phase: pub})
            ok = self.db.finish_close(query_id, phase, self.name, pub, next_deadline_ms=None,
                                      result=result)
        with self._lock:
            self._phase_cache.pop(query_id, None)
        return ok

    monkeypatch.setattr(Core, "create_query", create_query)
    monkeypatch.setattr(Core, "_placer", staticmethod(_placer))
    monkeypatch.setattr(Core, "task_info", task_info)
    monkeypatch.setattr(Core, "close_phase", close_phase)


def wait_for_phase(analyst: Any, query_id: str, phase: int, timeout_s: float = 120) -> None:
    """Block until the query's current phase is at least ``phase`` (or it finished)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        q = analyst.get(query_id)
        if q.current_phase == 0 or q.current_phase >= phase:
            return
        time.sleep(0.05)
    raise TimeoutError(f"query {query_id} did not reach phase {phase}")
