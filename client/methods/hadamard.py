"""Method ``hadamard``, device half: one Hadamard coefficient of the whole dataset, clamped
to a window sized from what the earlier stages measured of the users' spread.

See ``docs/algorithms.md`` ("Hadamard windows") and ``docs/device-protocol.md`` §17.13; the
collector half is ``uldp.collector.methods.hadamard``. Kinds whose components are
Hadamard coefficients: ``distribution`` (of the category frequencies, §6.3) and
``mean-l1`` (of the user mean, §6.2). Three stages, each one of the audited report
computations of the other methods:

* stage 1, the **centre**: for a categorical kind the report of method ``oracle``
  (sampled records through a frequency oracle, every component, §17.10); otherwise the
  values of the served components on the task's intervals through a scalar randomizer
  (the ``ssl`` report, §9.2 and §17.11);
* stage 2, the **spread**: whether each served component's statistic lies in the task's
  interval (the window the centre placed) — category 0 inside ``[lo_c, hi_c]`` (closed),
  1 outside — through a frequency oracle over ``k = 2`` categories;
* stage 3, the **window**: the values of the served components on the task's intervals
  (the windows) through a scalar randomizer (the ``ssl`` report).

The statistic of stages 2 and 3 is the kind's, except that a ``distribution`` user without
usable records takes the coefficients of the uniform distribution over the alphabet — the
category stage 1 draws for it is uniform too — so every stage measures the same mean.

Privacy: each stage is the report of an audited mechanism on a statistic of the whole
dataset (a frequency oracle is ε_c-LDP between any two categories, a scalar randomizer
between any two grid values), so a report spends what ``oracle`` / two-stage / ``ssl``
spend for the same task fields.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uldp.client.kinds.base import KINDS, Kind
from uldp.client.kinds.means import hadamard_rows
from uldp.client.mechanisms import FrequencyOracle
from uldp.client.mechanisms.two_stage import value_reports
from uldp.client.methods.base import (
    check_intervals,
    component_units,
    intervals,
    oracle_of,
    scalar_of,
    single_record,
)
from uldp.client.methods.oracle import SampledRecords
from uldp.client.randomness import RandomSource
from uldp.client.taskspec import TaskRefused, TaskSpec
from uldp.client.trace import record_statistic

__all__ = ["HADAMARD_KINDS", "HadamardWindows", "outside_reports", "uniform_statistic"]

#: the kinds whose components are Hadamard coefficients of the user's data
HADAMARD_KINDS = ("distribution", "mean-l1")

_RECORDS = SampledRecords()


def uniform_statistic(task: TaskSpec) -> np.ndarray:
    """The coefficients of the uniform distribution over the ``A = dim`` categories:
    ``hadamardRows(u, K)`` with ``u_j = 1/A`` (one correctly rounded division)."""
    K = KINDS[task.kind].n_components(task)
    return hadamard_rows(np.full((1, task.dim), 1.0 / task.dim), K)[0]


def outside_reports(Y: np.ndarray, ivs: Sequence[tuple[float, float]],
                    oracle: FrequencyOracle, eps_c: float, rng: RandomSource) -> np.ndarray:
    """Stage 2: per served component, category 1 if its statistic lies outside its
    interval ``[lo, hi]`` and 0 inside, through ``oracle`` over two categories; the
    components' reports concatenated (``privatize_many``: component by component, or one
    noise call for all entries with discrete Laplace, as in a stage-I report)."""
    record_statistic(Y)
    lo = np.array([a for a, _ in ivs], dtype=np.float64)
    hi = np.array([b for _, b in ivs], dtype=np.float64)
    items = ((lo > Y) | (hi < Y)).astype(np.int64)
    return oracle.privatize_many(items, [2] * len(ivs), eps_c, rng)


def _centre_by_records(task: TaskSpec) -> bool:
    return KINDS[task.kind].categories is not None


class HadamardWindows:
    """The device half of method ``hadamard`` (module docstring)."""

    name = "hadamard"
    stages: tuple[int, ...] = (1, 2, 3)

    def check(self, task: TaskSpec, n_components: int) -> None:
        if task.kind not in HADAMARD_KINDS:
            raise TaskRefused(f"method 'hadamard' reports Hadamard coefficients "
                              f"({', '.join(HADAMARD_KINDS)}), not kind {task.kind!r}")
        if task.stage == 1 and _centre_by_records(task):
            _RECORDS.check(task, n_components)
            return
        single_record(task)
        if task.stage == 2:
            oracle_of(task)
        else:
            scalar_of(task)
        check_intervals(task)

    def report_length(self, task: TaskSpec) -> int:
        if task.stage == 1 and _centre_by_records(task):
            return _RECORDS.report_length(task)
        if task.stage == 2:
            return len(task.components) * oracle_of(task).length(2, task.eps_c)
        return len(task.components)

    def epsilon_units(self, task: TaskSpec) -> int:
        if task.stage == 1 and _centre_by_records(task):
            return _RECORDS.epsilon_units(task)
        return len(task.components) * component_units("eps_c", task.eps_c)

    def report_limit(self, task: TaskSpec) -> int:
        if task.stage == 1 and _centre_by_records(task):
            return _RECORDS.report_limit(task)
        if task.stage == 2:
            return oracle_of(task).limit(2, task.eps_c)
        return scalar_of(task).limit(task.eps_c)

    def statistics(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray
                   ) -> np.ndarray:
        """The served components' statistics (module docstring: a distribution user
        without usable records has the uniform distribution's)."""
        Y = kind.statistics(task, X, valid)
        if kind.categories is not None:
            empty = valid.sum(axis=1) == 0 if valid.ndim == 2 and valid.shape[1] \
                else np.ones(Y.shape[0], dtype=bool)
            if empty.any():
                Y[empty] = uniform_statistic(task)
        return Y[:, list(task.components)]

    def compute(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                rng: RandomSource, offsets: np.ndarray | None) -> np.ndarray:
        if task.stage == 1 and _centre_by_records(task):
            return _RECORDS.compute(task, kind, X, valid, rng, offsets)
        Y = self.statistics(task, kind, X, valid)
        if task.stage == 2:
            return outside_reports(Y, intervals(task), oracle_of(task), task.eps_c, rng)
        return value_reports(Y, intervals(task), scalar_of(task), task.eps_c, rng)
