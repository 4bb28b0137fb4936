"""One MeanEst invocation as a program: the plan's stages are the phases.

See ``docs/architecture.md`` ("Programs"). Sections of ``docs/algorithms.md``: §2.2, §4.3.
Phase ``p`` runs stage ``plan.phases[p-1]`` of every group (two-stage: stage I then stage
II; single-stage methods: one phase). Closing a non-final phase publishes what the next
needs (``k̂`` and the stage-II intervals per group); closing the last publishes the
estimate. ``finish`` turns the estimate into a kind's result (classifier/regressor
models); by default the result is the estimate itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import Accumulator
from uldp.collector.planner import Plan, QuerySpec, compile_query
from uldp.collector.programs.base import PublishedPhases

__all__ = ["MeanEstProgram", "jsonable"]

Finish = Callable[[QuerySpec, dict[str, Any]], dict[str, Any]]


def jsonable(x: Any) -> Any:
    """``x`` as plain JSON values (what a database round trip gives back)."""
    return json.loads(json.dumps(x))


@dataclass
class MeanEstProgram:
    """A program of one plan (see the module docstring)."""

    spec: QuerySpec
    finish: Finish | None = None
    plan: Plan | None = None

    def __post_init__(self) -> None:
        if self.plan is None:
            self.plan = compile_query(self.spec)

    @property
    def _plan(self) -> Plan:
        assert self.plan is not None
        return self.plan

    @property
    def num_phases(self) -> int:
        return len(self._plan.phases)

    def placements(self) -> np.ndarray:
        """Every slot's placement (for simulations; computed on each call, never kept:
        the service places one slot at a time)."""
        group, stage = self._plan.assign_all()
        phase_of = {s: i + 1 for i, s in enumerate(self._plan.phases)}
        phase = np.vectorize(phase_of.__getitem__, otypes=[np.int64])(stage) \
            if stage.size else np.zeros(0, dtype=np.int64)
        return np.stack([group, stage, phase], axis=1).astype(np.int64)

    def place(self, slot: int) -> tuple[int, int, int]:
        g, s = self._plan.assign(slot)
        return g, s, self._plan.phases.index(s) + 1

    def slot_in(self, phase: int, group: int, stage: int) -> int | None:
        if not 1 <= phase <= self.num_phases or self._plan.phases[phase - 1] != stage:
            return None
        return self._plan.representative(group, stage)

    def quotas(self) -> list[int]:
        return [sum(n for _, _, n in self.cells(p)) for p in range(1, self.num_phases + 1)]

    def cells(self, phase: int) -> list[tuple[int, int, int]]:
        plan = self._plan
        stage = plan.phases[phase - 1]
        return [(g, stage, plan.stage_size(g, stage)) for g in range(plan.n_groups)
                if plan.stage_size(g, stage) > 0]

    def task(self, phase: int, group: int, stage: int, published: PublishedPhases,
             slot: int | None = None) -> TaskSpec:
        plan = self._plan
        return plan.method.task(plan, group, stage, published.get(phase - 1), slot)

    def accumulator(self, phase: int, group: int, stage: int,
                    published: PublishedPhases) -> Accumulator:
        plan = self._plan
        return plan.method.accumulator(plan, self.task(phase, group, stage, published))

    def offsets(self, phase: int, slots: np.ndarray) -> np.ndarray | None:
        return self._plan.method.device_offsets(self._plan, slots)

    def close(self, phase: int, accs: dict[int, Any],
              published: PublishedPhases) -> dict[str, Any]:
        plan = self._plan
        if phase < self.num_phases:
            return jsonable(plan.publish(plan.phases[phase - 1], accs))
        est = plan.finalize(accs, published.get(phase - 1))
        return jsonable({"reports": int(est.counts.get("reports", 0)),
                         "estimate": est.to_dict()})

    def result(self, published: PublishedPhases) -> dict[str, Any]:
        est = published[self.num_phases]["estimate"]
        return self.finish(self.spec, est) if self.finish is not None else dict(est)
