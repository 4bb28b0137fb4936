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
from functools import cached_property
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

    @cached_property
    def _placements(self) -> np.ndarray:
        group, stage = self._plan.assign_all()
        phase_of = {s: i + 1 for i, s in enumerate(self._plan.phases)}
        phase = np.vectorize(phase_of.__getitem__, otypes=[np.int64])(stage) \
            if stage.size else np.zeros(0, dtype=np.int64)
        return np.stack([group, stage, phase], axis=1).astype(np.int64)

    def placements(self) -> np.ndarray:
        return self._placements

    def place(self, slot: int) -> tuple[int, int, int]:
        if not 0 <= slot < self.spec.users:
            raise ValueError(f"slot {slot} outside [0, {self.spec.users})")
        g, s, p = self._placements[slot]
        return int(g), int(s), int(p)

    def quotas(self) -> list[int]:
        counts = np.bincount(self._placements[:, 2], minlength=self.num_phases + 1)
        return [int(c) for c in counts[1:]]

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
            return jsonable(plan.publish(plan.phases[phase - 1], accs, published.get(phase - 1)))
        est = plan.finalize(accs, published.get(phase - 1))
        return jsonable({"reports": int(est.counts.get("reports", 0)),
                         "estimate": est.to_dict()})

    def result(self, published: PublishedPhases) -> dict[str, Any]:
        est = published[self.num_phases]["estimate"]
        return self.finish(self.spec, est) if self.finish is not None else dict(est)
