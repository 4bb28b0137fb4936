"""Baseline A (item-level reports of ``m_ref`` samples at ε/m), collector half.

See ``docs/algorithms.md`` ("Baselines"). Sections of ``docs/algorithms.md``: §12, Proposition 1.1
(group privacy). The device half is ``uldp.client.methods.baselines``; both read the report
layout from :func:`uldp.client.methods.baselines.slot_layout`, its one definition.

The ``n·m`` virtual users (one per report slot) are split into the groups of the ε/m
regime; slot ``j`` of the device in enrolment slot ``r`` belongs to virtual group
``(offset(r) + j) mod G``, with offsets spread so every virtual group gets its share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from uldp.client.methods.base import values_limit
from uldp.client.methods.baselines import slot_layout
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import ValueAccumulator
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.methods.base import Published
from uldp.collector.methods.common import Block, estimate_from_blocks, noise_variance

__all__ = ["BaselineA", "VirtualAccumulator"]


@dataclass
class VirtualAccumulator:
    """One value accumulator per virtual group; each report is split by its layout."""

    task: TaskSpec
    parts: list[ValueAccumulator]
    offset_of: Callable[[np.ndarray], np.ndarray]  # enrolment slots -> virtual offsets
    needs_slots = True

    def add(self, reports: np.ndarray, slots: np.ndarray | None = None) -> None:
        r = np.asarray(reports)
        if r.ndim == 1:
            r = r[None]
        if slots is None:
            raise ValueError("baseline-a reports need the devices' enrolment slots")
        lay = slot_layout(self.task, self.offset_of(np.asarray(slots).reshape(-1)))
        if lay.group.shape[0] != r.shape[0]:
            raise ValueError("baseline-a needs one slot per report")
        if np.any(lay.total > r.shape[1]):
            raise ValueError("baseline-a report is shorter than its layout")
        for g, acc in enumerate(self.parts):
            ii, jj = np.nonzero(lay.group == g)
            if ii.size:
                acc.add(r[ii[:, None], lay.columns(g, ii, jj)])

    def merge(self, other: VirtualAccumulator) -> None:
        for a, b in zip(self.parts, other.parts, strict=True):
            a.merge(b)

    @property
    def count(self) -> int:
        return sum(p.count for p in self.parts)


class BaselineA:
    """Collector half of baseline A (module docstring)."""

    name = "baseline-a"
    device_method = "baseline-a"
    stages: tuple[int, ...] = (0,)
    #: the one randomizer its device half accepts (``with_best_mechanisms``)
    fixed_randomizer = "laplace"

    def n_groups(self, plan: Any) -> int:
        return 1

    def grouping_budget(self, spec: Any) -> tuple[float, int]:
        """The ``n·m`` virtual users at ``ε/m`` each (Proposition 1)."""
        return spec.epsilon / spec.samples, spec.users * spec.samples

    def effective_sizes(self, n: int, m: int, epsilon: float) -> tuple[int, int, float]:
        return n * m, 1, epsilon / m

    def noise_constant(self, n: int, K: int) -> float:
        return 8.0

    def task(self, plan: Any, group: int, stage: int, previous: Published | None,
             slot: int | None = None) -> TaskSpec:
        params = plan.group_params(0)
        C = plan.n_components
        off = int(plan.offset_for(slot)) if slot is not None else 0
        return plan.group_task(
            0, 0, components=tuple(range(C)),
            intervals=tuple((-params[c].bound, params[c].bound) for c in range(C)),
            virtual_groups=tuple(g.components for g in plan.grouping.groups),
            virtual_eps=tuple(g.eps_c for g in plan.grouping.groups),
            m_ref=plan.spec.samples, virtual_offset=off, eps_c=plan.spec.epsilon)

    def accumulator(self, plan: Any, task: TaskSpec) -> VirtualAccumulator:
        iv = dict(zip(task.components, task.intervals, strict=True))
        limit = values_limit(min(task.virtual_eps))
        parts = [ValueAccumulator([(float(iv[c][0]), float(iv[c][1])) for c in comps], limit)
                 for comps in task.virtual_groups]
        return VirtualAccumulator(task, parts, plan.offset_for)

    def publish(self, plan: Any, stage: int, accs: dict[int, Any]) -> Published:
        raise ValueError("baseline-a has a single stage")

    def finalize(self, plan: Any, accs: dict[int, Any], previous: Published | None
                 ) -> Estimate:
        acc = accs.get(0)
        task = self.task(plan, 0, 0, None)
        if acc is None:
            acc = self.accumulator(plan, task)
        blocks: list[Block] = [(comps, part.means(), part.covariance())
                               for comps, part in zip(task.virtual_groups, acc.parts,
                                                      strict=True)]
        return estimate_from_blocks(plan, blocks, acc.count // max(plan.spec.samples, 1))

    def device_offsets(self, plan: Any, slots: np.ndarray) -> np.ndarray | None:
        return np.asarray(plan.offset_for(np.asarray(slots)), dtype=np.int64)

    def component_variance(self, plan: Any, sample_var: np.ndarray,
                           stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        v = np.zeros(plan.n_components)
        params = plan.group_params(0)
        groups = plan.grouping.groups
        n_virtual = plan.spec.users * plan.spec.samples
        for g, grp in enumerate(groups):
            k = n_virtual // len(groups) + (1 if g < n_virtual % len(groups) else 0)
            for c in grp.components:
                v[c] = (sample_var[c] + noise_variance(2 * params[c].bound, grp.eps_c)) / k
        return v
