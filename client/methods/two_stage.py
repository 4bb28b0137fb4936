"""Algorithm 1 (two-stage mean), device half of the method: stage-I bins, stage-II values.

See ``docs/algorithms.md`` ("Two-stage"). Sections of ``docs/algorithms.md``: §4.3 (client steps
1–3 and 7–8), §5.3 ([D23]: all served components in one message). The mechanism and its
privacy argument are in ``uldp.client.mechanisms.two_stage``; the collector half is
``uldp.collector.methods.two_stage``.

A stage-I task carries the bins ``(D_c, h_c, B_c)`` of each served component; the report
is the concatenation of the components' frequency-oracle reports of their bin (default:
``B_c`` noisy bin indicators). A stage-II task carries the clamp interval ``[lo_c, hi_c]``
of each served component (the collector derives it from stage I); the report is one
scalar-randomizer integer per component (default: a noisy grid value). The task's
``mechanism`` names the oracle (stage I) or the randomizer (values).
"""

from __future__ import annotations

import numpy as np

from uldp.client.kinds.base import Kind
from uldp.client.mechanisms.two_stage import bin_reports, grid_reports, value_reports
from uldp.client.methods.base import (
    MAX_BINS,
    bin_params,
    check_bins,
    check_intervals,
    component_units,
    intervals,
    oracle_of,
    scalar_of,
    single_record,
)
from uldp.client.randomness import RandomSource
from uldp.client.taskspec import TaskRefused, TaskSpec

__all__ = ["TwoStage", "TwoStageSized", "UserValues"]


class UserValues:
    """A single-stage value report of the user statistic (SSL, §12): every served
    component's statistic clamped to its interval, one noisy grid value each."""

    name = "ssl"
    stages: tuple[int, ...] = (0,)

    def check(self, task: TaskSpec, n_components: int) -> None:
        single_record(task)
        scalar_of(task)
        check_intervals(task)

    def report_length(self, task: TaskSpec) -> int:
        return len(task.components)

    def epsilon_units(self, task: TaskSpec) -> int:
        return len(task.components) * component_units("eps_c", task.eps_c)

    def report_limit(self, task: TaskSpec) -> int:
        return scalar_of(task).limit(task.eps_c)

    def statistics(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                   rng: RandomSource) -> np.ndarray:
        return kind.statistics(task, X, valid)[:, list(task.components)]

    def compute(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                rng: RandomSource, offsets: np.ndarray | None) -> np.ndarray:
        Y = self.statistics(task, kind, X, valid, rng)
        return value_reports(Y, intervals(task), scalar_of(task), task.eps_c, rng)


class TwoStage(UserValues):
    """Stage I (``stage = 1``): bins; stage II (``stage = 2``): values."""

    name = "two-stage"
    stages = (1, 2)

    def check(self, task: TaskSpec, n_components: int) -> None:
        if task.stage == 1:
            single_record(task)
            oracle_of(task)
            check_bins(task)
        else:
            super().check(task, n_components)

    def report_length(self, task: TaskSpec) -> int:
        if task.stage == 1:
            oracle = oracle_of(task)
            return sum(oracle.length(int(B), task.eps_c) for _, _, B in task.bins)
        return len(task.components)

    def report_limit(self, task: TaskSpec) -> int:
        if task.stage == 1:
            oracle = oracle_of(task)
            return max(oracle.limit(int(B), task.eps_c) for _, _, B in task.bins)
        return super().report_limit(task)

    def compute(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                rng: RandomSource, offsets: np.ndarray | None) -> np.ndarray:
        Y = self.statistics(task, kind, X, valid, rng)
        if task.stage == 1:
            return bin_reports(Y, bin_params(task), oracle_of(task), task.eps_c, rng)
        return value_reports(Y, intervals(task), scalar_of(task), task.eps_c, rng)


class TwoStageSized(TwoStage):
    """``two-stage-sized``: stage I reports each component's statistic rounded unbiasedly
    to the ``B_c + 1`` edges of its bins (``uldp.client.mechanisms.two_stage.grid_reports``),
    so the collector can both size the stage-II window from it and count the stage-I
    users' reports in the estimate (``E`` of a grid point is the statistic); stage II as
    ``two-stage``. Collector half: ``uldp.collector.methods.sized``."""

    name = "two-stage-sized"

    def check(self, task: TaskSpec, n_components: int) -> None:
        super().check(task, n_components)
        if task.stage == 1 and any(int(B) > MAX_BINS - 1 for _, _, B in task.bins):
            raise TaskRefused(f"two-stage-sized has at most {MAX_BINS - 1} bins (its "
                              f"{MAX_BINS} grid points are the categories)", code="limit")

    def report_length(self, task: TaskSpec) -> int:
        if task.stage == 1:
            oracle = oracle_of(task)
            return sum(oracle.length(int(B) + 1, task.eps_c) for _, _, B in task.bins)
        return len(task.components)

    def report_limit(self, task: TaskSpec) -> int:
        if task.stage == 1:
            oracle = oracle_of(task)
            return max(oracle.limit(int(B) + 1, task.eps_c) for _, _, B in task.bins)
        return super().report_limit(task)

    def compute(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                rng: RandomSource, offsets: np.ndarray | None) -> np.ndarray:
        if task.stage != 1:
            return super().compute(task, kind, X, valid, rng, offsets)
        Y = self.statistics(task, kind, X, valid, rng)
        return grid_reports(Y, bin_params(task), oracle_of(task), task.eps_c, rng)
