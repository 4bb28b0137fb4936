"""Methods, collector half: the phases of a MeanEst invocation and how they aggregate.

See ``docs/algorithms.md`` ("Methods") and ``docs/architecture.md``. Each method here is the
collector half of the device method of the same name in ``uldp.client.methods``: it says
which stages run, builds the public task of every (group, stage) from the plan and from
what the previous stage published, makes the accumulator of a task, decides what a closed
stage publishes, turns the final accumulators into an :class:`Estimate`, and predicts the
per-component variance (the explicit error formula).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import Accumulator
from uldp.collector.estimators.estimate import Estimate

__all__ = ["MethodPlan", "Published"]

#: What a closed stage published for the next one (JSON-able; e.g. per-group intervals).
Published = dict[str, Any]


class MethodPlan(Protocol):
    """Collector half of a method (see the module docstring). ``plan`` is a
    ``uldp.collector.planner.Plan``."""

    name: str
    device_method: str  # the device half it runs (``uldp.client.methods``)
    stages: tuple[int, ...]

    def n_groups(self, plan: Any) -> int:
        """Groups of users the invocation splits its users into."""

    def grouping_budget(self, spec: Any) -> tuple[float, int]:
        """``(ε, n)`` the ε-regime grouping of the components is chosen for."""

    def effective_sizes(self, n: int, m: int, epsilon: float) -> tuple[int, int, float]:
        """``(n, m, ε)`` the rate formulas of the learning queries see (§9.4, §12)."""

    def noise_constant(self, n: int, K: int) -> float:
        """``c²`` with ``Var q̂_l ≈ c² / (n m (ε²∧ε))`` per grid cell (§9.4)."""

    def task(self, plan: Any, group: int, stage: int, previous: Published | None,
             slot: int | None = None) -> TaskSpec:
        """The public task of ``(group, stage)`` (``previous``: what the previous stage
        published; ``slot``: the device's enrolment slot, for per-device parameters)."""

    def accumulator(self, plan: Any, task: TaskSpec) -> Accumulator:
        """An empty accumulator for the reports of ``task``."""

    def publish(self, plan: Any, stage: int, accs: dict[int, Accumulator]) -> Published:
        """What a closed non-final stage publishes (the next stage's tasks depend on it)."""

    def finalize(self, plan: Any, accs: dict[int, Accumulator],
                 previous: Published | None) -> Estimate:
        """The estimate from the last stage's accumulators (one per group)."""

    def component_variance(self, plan: Any, sample_var: np.ndarray,
                           stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        """Predicted variance of every component estimate given each component's
        per-sample variance ``Var φ_c(X)`` (and, if known, the variance of the user
        statistics across users, which replaces ``Var φ_c / m`` for unequal users, and
        their mean, for mechanisms whose noise depends on where the values lie)."""

    def device_offsets(self, plan: Any, slots: np.ndarray) -> np.ndarray | None:
        """Per-device task parameter of the given enrolment slots (baseline A's virtual
        offsets), or None when every device of a group gets the same task."""
