"""Learning queries on the collector's phase machinery (spec §2.2, §8.3, §9.3, §10.3).

The gRPC collector (``uldp.collector.service``) runs a query as numbered phases: devices
take slots, a slot maps to (group, stage, phase), a phase closes when its quota is in (or
at its deadline), the closer aggregates the stored reports and *publishes* a JSON value
that the next phase's tasks depend on, and the last phase stores a result JSON. Everything
that survives a restart is the query's spec JSON, the phase rows and the published JSON.

:class:`LearningProgram` expresses Algorithms 3–5 in exactly those terms, as pure
functions of (spec, published JSON of earlier phases), so a collector can run them and
resume them after a crash from its database alone:

* ``classify`` / ``regress`` — one MeanEst invocation: the ordinary plan (2 phases);
  :func:`grid_result` turns the finished estimate into the classifier/regressor result
  dict (q̂ = H Q̂ / K_H by fast WHT, p̂, grid) read by the estimators' ``from_result``.
* ``sgd`` — ``2·t0`` phases. Slots are split into ``t0`` balanced groups from the public
  seed (one group per step, INV-3); phase ``2t+1`` is stage I and ``2t+2`` stage II of
  step ``t``, whose plan is ``compile_query(step_spec(config, θ_t, ...))``. Closing phase
  ``2t+2`` finalizes the step (``g_t = Uᵀ θ̂``) and publishes ``θ_{t+1}``; the last phase
  stores the SGD result dict (final θ + trajectory).

``run_in_process`` drives a program with the production device function, persisting only
JSON between phases (and optionally rebuilding the program mid-run, as a restart would).
How the gRPC collector calls this is described in the module's ``INTEGRATION`` note.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec, compute_reports
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.learning.classify import GridModel, hadamard_inverse
from uldp.collector.learning.sgd import SGDConfig, choose_steps, partition, project, step_spec
from uldp.collector.planner import Plan, QuerySpec, compile_query

__all__ = ["INTEGRATION", "LearningProgram", "grid_result", "run_in_process", "sgd_query"]

INTEGRATION = """
DONE: all five changes below are implemented in the gRPC collector
(collector/service/core.py: CollectorCore._create_sgd, _QueryStatic.program, _placer,
task_info, _close_program_phase); `uldp query create --kind sgd --extra '{"model": ...,
"sgd": {...}}'` creates an sgd query. tests/learning/test_service_grpc.py (classify,
regress) and test_service_sgd_grpc.py (sgd with a restart mid-run) run the unpatched
service over real gRPC. The list is kept as the description of the integration.
1. _SPEC_EXTRA: add "extra", so CreateQuery params_json can carry the public values of
   the learning kinds (grid, lo, hi, label_bound; for sgd the dict built by sgd_query).
2. create_query: for kind "sgd" build the stored spec with sgd_query(...) semantics (t0
   fixed at creation) and take num_phases = program.num_phases and the per-phase quotas
   from program.quotas() instead of plan.phases / the stage counts.
3. _QueryStatic: keep program = LearningProgram.from_spec(spec) for kind "sgd";
   _placer(st) returns program.place (slot -> (group, stage, phase), phase = 2t + stage)
   instead of phase_of_stage(stage).
4. task_info: for kind "sgd" the task is program.task_for(phase, grp, stage, published)
   where published = {p: json.loads(published_json)} of the closed phases (the phase
   cache already reads them); its query_id is the service query id.
5. close_phase: for kind "sgd" accumulate into program.new_accumulator(phase, grp, stage,
   published); publish program.close(phase, accs, published) (k̂ after a stage-I phase,
   θ_{t+1} after a stage-II phase) with finish_close; after the last phase store
   result = program.result(published). Everything is a function of the stored spec and
   the published JSON, so a restart resumes in the phase it was in (INV-4).
For classify/regress the final estimate becomes the estimator result dict with
grid_result(spec, estimate_dict).
"""


def sgd_query(config: SGDConfig, users: int, samples: int, dim: int,
              query_id: str = "sgd") -> QuerySpec:
    """The stored query of an SGD run: t0 is fixed *at creation* (public, [D13])."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = choose_steps(users, samples, dim, config)
    cfg = asdict(config)
    cfg["t0"] = t0
    cfg["query_id"] = query_id
    cfg["theta0"] = None if cfg["theta0"] is None else [float(v) for v in cfg["theta0"]]
    return QuerySpec(kind="sgd", epsilon=config.epsilon, users=users, samples=samples,
                     dim=dim, bound=config.clip, method=config.method, seed=config.seed,
                     query_id=query_id,
                     extra={"sgd": cfg, "model": config.model,
                            "theta": [0.0] * dim if config.theta0 is None else
                            cfg["theta0"]})


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x))


@dataclass
class LearningProgram:
    """Phase layout, tasks and closing rules of one learning query (see module doc)."""

    spec: QuerySpec
    _plans: dict[Any, Plan] = field(default_factory=dict, repr=False)

    @classmethod
    def from_spec(cls, spec: QuerySpec | dict[str, Any]) -> LearningProgram:
        s = spec if isinstance(spec, QuerySpec) else QuerySpec.from_dict(spec)
        if s.kind not in ("sgd", "classify", "regress"):
            raise ValueError(f"not a learning query kind: {s.kind!r}")
        if s.kind == "sgd" and "sgd" not in s.extra:
            raise ValueError("an sgd query needs extra['sgd'] (build it with sgd_query)")
        return cls(s)

    # ---- SGD configuration -----------------------------------------------------------
    @cached_property
    def config(self) -> SGDConfig:
        cfg = dict(self.spec.extra["sgd"])
        return SGDConfig(**cfg)

    @property
    def t0(self) -> int:
        return int(self.config.t0) if self.spec.kind == "sgd" else 1

    @property
    def num_phases(self) -> int:
        return 2 * self.t0 if self.spec.kind == "sgd" else 2

    @cached_property
    def _groups(self) -> list[np.ndarray]:
        return partition(self.spec.users, self.t0, self.config.seed)

    @cached_property
    def _slot_step(self) -> tuple[np.ndarray, np.ndarray]:
        """Step of each slot and its rank inside the step's group."""
        step = np.empty(self.spec.users, dtype=np.int64)
        rank = np.empty(self.spec.users, dtype=np.int64)
        for t, members in enumerate(self._groups):
            step[members] = t
            rank[members] = np.arange(members.size)
        return step, rank

    # ---- plans ------------------------------------------------------------------------
    def theta_at(self, t: int, published: dict[int, dict[str, Any]]) -> np.ndarray:
        """θ_t: θ_0 from the config, θ_{t+1} published when phase 2t+2 closed."""
        if t == 0:
            th0 = self.config.theta0
            return np.zeros(self.spec.dim) if th0 is None else np.asarray(th0, float)
        pub = published.get(2 * t)
        if pub is None or "theta" not in pub:
            raise ValueError(f"theta_{t} is not published yet (phase {2 * t} is not closed)")
        return np.asarray(pub["theta"], dtype=np.float64)

    def plan_for(self, phase: int, published: dict[int, dict[str, Any]]) -> Plan:
        if not 1 <= phase <= self.num_phases:
            raise ValueError(f"phase must be in [1, {self.num_phases}], got {phase}")
        if self.spec.kind != "sgd":
            key: Any = "plan"
            if key not in self._plans:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._plans[key] = compile_query(self.spec)
            return self._plans[key]
        t = (phase - 1) // 2
        theta = self.theta_at(t, published)
        key = (t, tuple(float(v) for v in theta))
        if key not in self._plans:
            spec = self._step_spec(theta, t)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._plans[key] = compile_query(spec)
        return self._plans[key]

    def _step_spec(self, theta: np.ndarray, t: int) -> QuerySpec:
        """Step ``t``'s MeanEst query; its tasks carry the service query id (the device
        checks that the task text names the query it was fetched for)."""
        spec = step_spec(self.config, theta, int(self._groups[t].size), self.spec.samples,
                         self.spec.dim, t)
        return replace(spec, query_id=self.spec.query_id)

    def place(self, slot: int) -> tuple[int, int, int]:
        """``(group, stage, phase)`` of enrolment slot ``slot`` (drawn before data, INV-3)."""
        if not 0 <= slot < self.spec.users:
            raise ValueError(f"slot {slot} outside [0, {self.spec.users})")
        if self.spec.kind != "sgd":
            g, s = self.plan_for(1, {}).assign(slot)
            return g, s, s
        step, rank = self._slot_step
        t, r = int(step[slot]), int(rank[slot])
        g, s = self._step_assign(t)
        return int(g[r]), int(s[r]), 2 * t + int(s[r])

    def _step_assign(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        # the step's grouping does not depend on θ: compile with θ = 0 for the layout
        key = ("layout", t)
        if key not in self._plans:
            spec = self._step_spec(np.zeros(self.spec.dim), t)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._plans[key] = compile_query(spec)
        return self._plans[key].assign_all()

    def quotas(self) -> list[int]:
        """Reports expected per phase (the phase closes early when its quota is in)."""
        counts = [0] * self.num_phases
        for slot in range(self.spec.users):
            counts[self.place(slot)[2] - 1] += 1
        return counts

    def task_for(self, phase: int, group: int, stage: int,
                 published: dict[int, dict[str, Any]]) -> TaskSpec:
        plan = self.plan_for(phase, published)
        khat = None
        if stage == 2:
            khat = tuple(int(k) for k in published[phase - 1]["khat"][str(group)])
        return plan.task_for(group, stage, khat)

    def new_accumulator(self, phase: int, group: int, stage: int,
                        published: dict[int, dict[str, Any]]) -> Any:
        plan = self.plan_for(phase, published)
        khat = None
        if stage == 2:
            khat = tuple(int(k) for k in published[phase - 1]["khat"][str(group)])
        return plan.new_accumulator(group, stage, khat)

    # ---- closing ----------------------------------------------------------------------
    def close(self, phase: int, accs: dict[int, Any],
              published: dict[int, dict[str, Any]]) -> dict[str, Any]:
        """The JSON published when ``phase`` closes (k̂ after stage I; θ after a step)."""
        plan = self.plan_for(phase, published)
        n = int(sum(a.count for a in accs.values()))
        if phase % 2 == 1:
            kh = plan.khat_from(accs)
            return {"khat": {str(g): [int(x) for x in k] for g, k in kh.items()},
                    "reports": n}
        est = plan.finalize(accs)
        if self.spec.kind != "sgd":
            return _jsonable({"reports": n, "estimate": est.to_dict()})
        t = (phase - 1) // 2
        theta = self.theta_at(t, published)
        g = np.asarray(est.values, dtype=np.float64)
        new = project(theta - self.config.step_size * g, self.config.radius)
        return _jsonable({"reports": n, "step": t, "theta": new.tolist(),
                          "gradient": g.tolist(), "std_error": est.std_error.tolist(),
                          "regime": plan.grouping.regime})

    def result(self, published: dict[int, dict[str, Any]]) -> dict[str, Any]:
        """The result dict after the last phase (estimators' ``from_result`` format)."""
        last = published[self.num_phases]
        if self.spec.kind != "sgd":
            return grid_result(self.spec, last["estimate"])
        traj, iterates = [], []
        for t in range(self.t0):
            pub = published[2 * t + 2]
            traj.append({"step": t, "users": int(self._groups[t].size),
                         "theta": self.theta_at(t, published).tolist(),
                         "gradient": pub["gradient"], "std_error": pub["std_error"],
                         "regime": pub["regime"]})
            iterates.append(np.asarray(pub["theta"]))
        theta = (np.mean(iterates[len(iterates) // 2:], axis=0) if self.config.average
                 else iterates[-1])
        cfg = dict(self.spec.extra["sgd"])
        # Estimate-shaped fields for the collector's GetResult: values = θ̂; the standard
        # error is η × that of the last step's gradient (the noise of the final update
        # only — a lower bound on the uncertainty of θ̂, which also carries earlier steps)
        se = self.config.step_size * np.asarray(traj[-1]["std_error"], dtype=np.float64)
        z = 1.959963984540054
        return {"values": theta.tolist(), "std_error": se.tolist(),
                "ci_low": (theta - z * se).tolist(), "ci_high": (theta + z * se).tolist(),
                "level": 0.95,
                "kind": "sgd", "model": self.config.model, "theta": theta.tolist(),
                "trajectory": traj, "t0": self.t0, "eta": self.config.step_size,
                "users": self.spec.users, "samples": self.spec.samples,
                "dim": self.spec.dim, "epsilon": self.spec.epsilon, "config": cfg}


def grid_result(spec: QuerySpec, estimate: dict[str, Any] | Estimate) -> dict[str, Any]:
    """A finished classify/regress estimate → the GridModel result dict (§9.3, §10.3)."""
    est = estimate.to_dict() if isinstance(estimate, Estimate) else estimate
    theta = np.asarray(est["components"], dtype=np.float64)
    ex = spec.extra
    M, d = int(ex["grid"]), spec.dim
    lo = np.asarray(ex.get("lo", [0.0] * d), float)
    hi = np.asarray(ex.get("hi", [1.0] * d), float)
    info = {"regime": est.get("regime"), "users": spec.users, "samples": spec.samples,
            "epsilon": spec.epsilon, "method": spec.method}
    if spec.kind == "classify":
        mdl = GridModel("classify", M, d, lo, hi, hadamard_inverse(theta),
                        info={"Q": theta.tolist(), **info})
        return mdl.to_dict()
    K = theta.size // 2
    T = float(ex["label_bound"])
    tau = float(ex.get("density_floor", 0.5)) / (2 * M**d)
    mdl = GridModel("regress", M, d, lo, hi, hadamard_inverse(theta[:K]),
                    hadamard_inverse(theta[K:]), T, tau,
                    info={"Q": theta[:K].tolist(), "P": theta[K:].tolist(), **info})
    return mdl.to_dict()


def run_in_process(spec: QuerySpec, datasets: Callable[[np.ndarray], tuple[np.ndarray,
                                                                            np.ndarray]],
                   seed: int, restart_after: int | None = None,
                   store: dict[str, Any] | None = None) -> dict[str, Any]:
    """Drive a learning query phase by phase as the collector would, with the production
    device function; between phases only JSON persists (``store``). ``restart_after=k``
    rebuilds the program from the stored spec JSON after phase ``k`` (a collector restart).
    ``datasets(slots)`` returns the local datasets ``(X, y)`` of those slots' devices."""
    db = store if store is not None else {}
    db.setdefault("spec_json", json.dumps(spec.to_dict(), sort_keys=True))
    db.setdefault("published", {})
    program = LearningProgram.from_spec(json.loads(db["spec_json"]))
    places = np.array([program.place(s) for s in range(program.spec.users)])
    for phase in range(1, program.num_phases + 1):
        if str(phase) in db["published"]:
            continue  # closed before the restart
        published = {int(k): v for k, v in db["published"].items()}
        rng = RandomSource.seeded(seed * 1000 + phase)
        accs: dict[int, Any] = {}
        in_phase = np.flatnonzero(places[:, 2] == phase)
        for g in np.unique(places[in_phase, 0]):
            slots = in_phase[places[in_phase, 0] == g]
            stage = int(places[slots[0], 1])
            task = program.task_for(phase, int(g), stage, published)
            # the device side: the task travels as JSON and is rebuilt on the device
            dev_task = TaskSpec.from_json(task.to_json())
            X, y = datasets(slots)
            reports = compute_reports(dev_task, X, rng, labels=y)
            acc = program.new_accumulator(phase, int(g), stage, published)
            acc.add(reports)
            accs[int(g)] = acc
        db["published"][str(phase)] = _jsonable(program.close(phase, accs, published))
        if restart_after is not None and phase == restart_after:
            program = LearningProgram.from_spec(json.loads(db["spec_json"]))
    published = {int(k): v for k, v in db["published"].items()}
    return program.result(published)
