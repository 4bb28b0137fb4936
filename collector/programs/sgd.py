"""Algorithm 3 (private SGD) as a program: ``t0`` rounds of one phase each, or two for a
two-stage Kashin step.

See ``docs/algorithms.md`` ("SGD"). Sections of ``docs/algorithms.md``: §8.3 (protocol), §8.4
(privacy), [D13] (``t0`` fixed at creation), [D14]. The SGD configuration and its math are
in ``uldp.collector.models`` (``sgd``: configuration; ``rounds``: which rounds, how many;
``windows``: each round's clipping window).

Per-coordinate rounds (``method`` ``windowed`` or ``baseline-b``, what ``auto`` resolves to
unless Kashin steps promise less risk): round ``t`` is one phase in which every user of its
group reports the coordinates of its mean clipped gradient at ``θ_t`` (one record's, for
``baseline-b``) through the scalar randomizer of least predicted variance, each clamped to
the round's window. Closing round ``t`` publishes ``θ_{t+1}`` and the windows of round
``t+1``, sized from what round ``t`` saw (``uldp.collector.models.windows``) — public
post-processing, so a restart resumes from the published JSON alone.

Slots are split into ``t0`` balanced groups from the public seed (one group per step,
INV-3); step ``t`` runs the phases of its MeanEst plan ``compile_query(step_spec(config,
θ_t, ...))`` — two (stage I, stage II) for two-stage, one for the single-stage methods;
``auto`` resolves per step from public values, the same for every θ. Closing a step's last
phase finalizes it (``g_t = Uᵀ θ̂``) and publishes ``θ_{t+1} = Π(θ_t − η g_t)``; the result
is the final θ (or the tail average) with the trajectory. Every user reports once, inside one ε-LDP
invocation; θ_t is post-processing of earlier groups (§8.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from uldp.client.regimes import Grouping
from uldp.client.tasks import validate_task
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import Accumulator
from uldp.collector.models.rounds import round_design, round_spec, sgd_advisories, supports_at
from uldp.collector.models.sgd import (
    SGDConfig,
    partition,
    project,
    step_spec,
    theta_std_error,
)
from uldp.collector.models.windows import next_window, pinned, window_mechanism
from uldp.collector.placement import KeyedPermutation
from uldp.collector.planner import Plan, QuerySpec, compile_query
from uldp.collector.programs.accounting import accounting
from uldp.collector.programs.base import PublishedPhases
from uldp.collector.programs.meanest import jsonable

__all__ = ["SGDProgram"]


@dataclass
class SGDProgram:
    """Phase layout, tasks and closing rules of an SGD query (module docstring)."""

    spec: QuerySpec
    _plans: dict[Any, Any] = field(default_factory=dict, repr=False)  # plans and tasks

    def __post_init__(self) -> None:
        if self.spec.kind != "sgd" or "sgd" not in self.spec.extra:
            raise ValueError("an sgd program needs a query built by sgd_query (extra['sgd'])")

    @cached_property
    def config(self) -> SGDConfig:
        return SGDConfig(**dict(self.spec.extra["sgd"]))

    @property
    def t0(self) -> int:
        return int(self.config.t0)  # type: ignore[arg-type]

    @cached_property
    def _first_phase(self) -> list[int]:
        """Phase number of each step's first phase, and one past the last step's last."""
        out = [1]
        for t in range(self.t0):
            out.append(out[-1] + len(self._layout(t).phases))
        return out

    @property
    def num_phases(self) -> int:
        return self._first_phase[-1] - 1

    def step_of(self, phase: int) -> int:
        """The SGD step a phase belongs to."""
        if not 1 <= phase <= self.num_phases:
            raise ValueError(f"phase must be in [1, {self.num_phases}], got {phase}")
        return max(t for t in range(self.t0) if self._first_phase[t] <= phase)

    def _last_of_step(self, phase: int) -> bool:
        return phase == self._first_phase[self.step_of(phase) + 1] - 1

    @cached_property
    def _groups(self) -> list[np.ndarray]:
        """``placement = "permutation"`` (queries stored before the keyed permutation):
        each step's slots, drawn with numpy."""
        return partition(self.spec.users, self.t0, self.config.seed)

    @cached_property
    def _step_sizes(self) -> list[int]:
        n, t0 = self.spec.users, self.t0
        return [n // t0 + (1 if t < n % t0 else 0) for t in range(t0)]

    @cached_property
    def _steps(self) -> KeyedPermutation:
        """The public permutation splitting slots into steps: slot ``s`` of rank ``r``
        is user ``r // t0`` of step ``r % t0`` (balanced, §3.7 [D1])."""
        return KeyedPermutation(self.spec.users, f"sgd/{self.config.seed}")

    @property
    def _legacy(self) -> bool:
        return self.spec.placement == "permutation"

    def _step_slot(self, slot: int) -> tuple[int, int]:
        """(step, the slot's index among the step's users)."""
        if not 0 <= slot < self.spec.users:
            raise ValueError(f"slot {slot} outside [0, {self.spec.users})")
        if self._legacy:
            for t, members in enumerate(self._groups):
                i = int(np.searchsorted(members, slot))
                if i < members.size and members[i] == slot:
                    return t, i
            raise AssertionError("a slot in no step")
        r = self._steps.rank_of(slot)
        return r % self.t0, r // self.t0

    # ---- plans --------------------------------------------------------------------------
    def theta_at(self, t: int, published: PublishedPhases) -> np.ndarray:
        """θ_t: θ_0 from the config, θ_t published when step t-1's last phase closed."""
        if t == 0:
            th0 = self.config.theta0
            return np.zeros(self.spec.dim) if th0 is None else np.asarray(th0, float)
        last = self._first_phase[t] - 1
        pub = published.get(last)
        if pub is None or "theta" not in pub:
            raise ValueError(f"theta_{t} is not published yet (phase {last} is not closed)")
        return np.asarray(pub["theta"], dtype=np.float64)

    @property
    def per_coordinate(self) -> bool:
        """Per-coordinate rounds (windowed or one record) rather than Kashin steps."""
        return self.config.per_coordinate

    @property
    def record(self) -> bool:
        return self.config.rounds_kind == "record"

    @cached_property
    def _round_grouping(self) -> Grouping:
        """The coordinates' grouping of every per-coordinate round (public values only,
        the same for every θ: sized for the smallest round)."""
        n_t = min(self._step_sizes)
        return round_design(self.config, n_t, self.spec.samples, self.spec.dim,
                            self.record).grouping

    def _compiled(self, key: Any, theta: np.ndarray, t: int) -> Plan:
        if key not in self._plans:
            n_t, m, d = self._step_sizes[t], self.spec.samples, self.spec.dim
            if self.per_coordinate:
                spec = replace(round_spec(self.config, theta, n_t, m, d, t),
                               query_id=self.spec.query_id,  # devices check the query id
                               placement=self.spec.placement)
                self._plans[key] = compile_query(spec, self._round_grouping)
            else:
                spec = replace(step_spec(self.config, theta, n_t, m, d, t),
                               query_id=self.spec.query_id, placement=self.spec.placement)
                self._plans[key] = compile_query(spec)
        return self._plans[key]

    def windows_at(self, t: int, published: PublishedPhases) -> np.ndarray:
        """The windows of round ``t`` (``(d, 2)``): the support at ``θ_0`` for round 0 and
        for one-record rounds, else what closing round ``t − 1`` published."""
        if t == 0 or self.record:
            return supports_at(self.config, self.theta_at(t, published))
        pub = published[self._first_phase[t] - 1]
        return np.asarray(pub["windows"], dtype=np.float64)

    def plan_for(self, phase: int, published: PublishedPhases) -> Plan:
        t = self.step_of(phase)
        theta = self.theta_at(t, published)
        return self._compiled((t, tuple(float(v) for v in theta)), theta, t)

    def _layout(self, t: int) -> Plan:
        # the step's grouping does not depend on θ: compile with θ = 0 for the layout
        return self._compiled(("layout", t), np.zeros(self.spec.dim), t)

    # ---- placement --------------------------------------------------------------------
    def placements(self) -> np.ndarray:
        """Every slot's placement (for simulations; computed on each call, never kept)."""
        out = np.zeros((self.spec.users, 3), dtype=np.int64)
        if self._legacy:
            members_of = list(self._groups)
        else:
            r = self._steps.rank(np.arange(self.spec.users))
            order = np.argsort(r % self.t0 * self.spec.users + r // self.t0, kind="stable")
            bounds = np.cumsum([0, *self._step_sizes])
            members_of = [order[bounds[t]:bounds[t + 1]] for t in range(self.t0)]
        for t, members in enumerate(members_of):
            plan = self._layout(t)
            g, s = plan.assign_all()
            index = {stage: i for i, stage in enumerate(plan.phases)}
            out[members, 0] = g
            out[members, 1] = s
            out[members, 2] = self._first_phase[t] + np.array([index[int(x)] for x in s],
                                                             dtype=np.int64)
        return out

    def place(self, slot: int) -> tuple[int, int, int]:
        t, local = self._step_slot(slot)
        plan = self._layout(t)
        g, s = plan.assign(local)
        return g, s, self._first_phase[t] + plan.phases.index(s)

    def slot_in(self, phase: int, group: int, stage: int) -> int | None:
        if not 1 <= phase <= self.num_phases:
            return None
        t = self.step_of(phase)
        plan = self._layout(t)
        if plan.phases[phase - self._first_phase[t]] != stage:
            return None
        local = plan.representative(group, stage)
        if local is None:
            return None
        if self._legacy:
            return int(self._groups[t][local])
        return self._steps.slot_of(local * self.t0 + t)

    def quotas(self) -> list[int]:
        return [sum(n for _, _, n in self.cells(p)) for p in range(1, self.num_phases + 1)]

    def cells(self, phase: int) -> list[tuple[int, int, int]]:
        t = self.step_of(phase)
        plan = self._layout(t)
        stage = plan.phases[phase - self._first_phase[t]]
        return [(g, stage, plan.stage_size(g, stage)) for g in range(plan.n_groups)
                if plan.stage_size(g, stage) > 0]

    # ---- phases -------------------------------------------------------------------------
    def _previous(self, phase: int, published: PublishedPhases) -> dict[str, Any] | None:
        """What the step's previous phase published (None for a step's first phase)."""
        t = self.step_of(phase)
        return published.get(phase - 1) if phase > self._first_phase[t] else None

    def task(self, phase: int, group: int, stage: int, published: PublishedPhases,
             slot: int | None = None) -> TaskSpec:
        plan = self.plan_for(phase, published)
        task = plan.method.task(plan, group, stage, self._previous(phase, published), slot)
        if not self.per_coordinate:
            return task
        t = self.step_of(phase)
        windows = self.windows_at(t, published)
        key = ("task", phase, group, stage, slot, task.extra.get("theta") and
               tuple(task.extra["theta"]), windows.tobytes())
        if key not in self._plans:  # the plans' cache also keeps the rounds' tasks
            self._plans[key] = self._windowed_task(task, t, windows, published)
        return self._plans[key]

    def _windowed_task(self, task: TaskSpec, t: int, windows: np.ndarray,
                       published: PublishedPhases) -> TaskSpec:
        """A round's task: its coordinates' windows and the randomizer of least predicted
        variance for them."""
        comps = list(task.components)
        win = windows[comps]
        h = (supports_at(self.config, self.theta_at(t, published))[comps]
             @ np.array([-0.5, 0.5]))
        sd = h if self.record else h / np.sqrt(max(self.spec.samples, 1))
        mech = window_mechanism(task.eps_c, win[:, 1] - win[:, 0], sd)
        task = replace(task, intervals=tuple((float(a), float(b)) for a, b in win),
                       mechanism=mech)
        validate_task(task)
        return task

    def accumulator(self, phase: int, group: int, stage: int,
                    published: PublishedPhases) -> Accumulator:
        plan = self.plan_for(phase, published)
        return plan.method.accumulator(plan, self.task(phase, group, stage, published))

    def offsets(self, phase: int, slots: np.ndarray) -> np.ndarray | None:
        plan = self._layout(self.step_of(phase))
        return plan.method.device_offsets(plan, slots)

    def close(self, phase: int, accs: dict[int, Any],
              published: PublishedPhases) -> dict[str, Any]:
        """k̂ and intervals after a stage-I phase; θ_{t+1} after a step's last phase."""
        plan = self.plan_for(phase, published)
        t = self.step_of(phase)
        if not self._last_of_step(phase):
            return jsonable(plan.publish(plan.phases[phase - self._first_phase[t]], accs))
        prev = published.get(phase - 1) if phase > self._first_phase[t] else None
        est = plan.finalize(accs, prev)
        theta = self.theta_at(t, published)
        g = np.asarray(est.values, dtype=np.float64)
        new = project(theta - self.config.step_size * g, self.config.radius)
        out = {"reports": int(est.counts.get("reports", 0)), "step": t,
               "theta": new.tolist(), "gradient": g.tolist(),
               "std_error": est.std_error.tolist(), "regime": plan.grouping.regime}
        if self.per_coordinate:
            out.update(self._next_windows(t, published, g, est, new))
        return jsonable(out)

    def _next_windows(self, t: int, published: PublishedPhases, g: np.ndarray, est: Any,
                      theta: np.ndarray) -> dict[str, Any]:
        """Round ``t + 1``'s windows from round ``t``'s estimate, with the evidence of
        clamping (``uldp.collector.models.windows``); one-record rounds keep the support."""
        se = np.asarray(est.extra.get("std_error_superpopulation", est.std_error), float)
        windows = self.windows_at(t, published)
        mechanisms = {str(gr): task.mechanism for gr, task in self._tasks_of(t, published)}
        if self.record:
            return {"windows_used": windows.tolist(), "mechanisms": mechanisms}
        factor = 1.0 if t == 0 else float(published[self._first_phase[t] - 1]
                                          .get("spread_factor", 1.0))
        clamped = pinned(windows, g, se) if t > 0 else []
        step = self.config.step_bounds(self.spec.dim)
        nxt = next_window(supports_at(self.config, theta), g, se, step, self.spec.samples,
                          factor, clamped, self.config.coordinate_shares(self.spec.dim))
        return {**nxt.to_json(), "windows_used": windows.tolist(), "mechanisms": mechanisms}

    def _tasks_of(self, t: int, published: PublishedPhases) -> list[tuple[int, TaskSpec]]:
        phase = self._first_phase[t]
        plan = self.plan_for(phase, published)
        return [(g, self.task(phase, g, plan.phases[0], published))
                for g in range(plan.n_groups)]

    def result(self, published: PublishedPhases) -> dict[str, Any]:
        """The result dict after the last phase (the estimators' ``from_result`` format)."""
        traj, iterates = [], []
        for t in range(self.t0):
            pub = published[self._first_phase[t + 1] - 1]
            row = {"step": t, "users": self._step_sizes[t],
                   "theta": self.theta_at(t, published).tolist(),
                   "gradient": pub["gradient"], "std_error": pub["std_error"],
                   "regime": pub["regime"]}
            for key in ("windows_used", "mechanisms", "pinned"):
                if key in pub:
                    row[key] = pub[key]
            traj.append(row)
            iterates.append(np.asarray(pub["theta"]))
        theta = (np.mean(iterates[len(iterates) // 2:], axis=0) if self.config.average
                 else iterates[-1])
        cfg = dict(self.spec.extra["sgd"])
        # Estimate-shaped fields for GetResult: values = θ̂; the standard error carries
        # every round's noise through the public curvature bounds (models.sgd)
        se = theta_std_error(np.array([r["std_error"] for r in traj], dtype=np.float64),
                             self.config.step_size, self.config.step_bounds(self.spec.dim))
        z = 1.959963984540054
        return {"values": theta.tolist(), "std_error": se.tolist(),
                "ci_low": (theta - z * se).tolist(), "ci_high": (theta + z * se).tolist(),
                "level": 0.95,
                "kind": "sgd", "model": self.config.model, "theta": theta.tolist(),
                "trajectory": traj, "t0": self.t0, "eta": self.config.step_size,
                "users": self.spec.users, "samples": self.spec.samples,
                "dim": self.spec.dim, "epsilon": self.spec.epsilon, "config": cfg,
                "method": self.config.method, "rounds": self.spec.extra.get("rounds", {}),
                "accounting": accounting(self, published),
                # the rounds/steps advisory (Result.advisories, `uldp query result`)
                "advisories": sgd_advisories(self.spec)}
