"""Methods, device half: how a task's statistic becomes a report.

See ``docs/algorithms.md`` ("Methods") and ``docs/device-protocol.md``. A *method* owns its
stages, the public parameters a task of each stage carries (bins or intervals), the report
length and layout, the ε a report spends, and the device computation; its collector half
(accumulators, what a closed phase publishes, the estimate) sits beside it in
``uldp.collector.methods``. Methods are registered by name in
``uldp.client.methods.METHODS``.

A task's ``mechanism`` (``uldp.client.mechanisms``) says how the method's categorical
values (stage-I bins, sampled records) or clamped values (stage II, SSL, baseline B) become
integers: a frequency oracle or a scalar randomizer; the default is discrete Laplace
(``uldp.client.mechanisms.two_stage``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from uldp.client.budget import EpsilonError, epsilon_units
from uldp.client.kinds.base import Kind
from uldp.client.mechanisms import DEFAULT, ORACLES, SCALARS, FrequencyOracle, ScalarMechanism
from uldp.client.params import GRID_STEPS, Alg1Params, support_bins
from uldp.client.randomness import RandomSource
from uldp.client.taskspec import TaskRefused, TaskSpec

__all__ = [
    "MAX_BINS",
    "Method",
    "bin_params",
    "bins_limit",
    "check_bins",
    "check_intervals",
    "component_units",
    "oracle_of",
    "scalar_of",
    "single_record",
    "values_limit",
]

#: Largest number of stage-I bins of one component a device accepts.
MAX_BINS = 1 << 16


class Method(Protocol):
    """Device half of a method (see the module docstring)."""

    name: str
    stages: tuple[int, ...]

    def check(self, task: TaskSpec, n_components: int) -> None:
        """Refuse (:class:`TaskRefused`) a task whose method parameters are inconsistent."""

    def report_length(self, task: TaskSpec) -> int:
        """Number of integers in the report."""

    def epsilon_units(self, task: TaskSpec) -> int:
        """What the report spends, in units of 2^-24."""

    def report_limit(self, task: TaskSpec) -> int:
        """Largest absolute report integer a collector accepts (noise tail beyond e^-60)."""

    def compute(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                rng: RandomSource, offsets: np.ndarray | None) -> np.ndarray:
        """Reports ``(users, report_length)`` of a batch ``X`` with validity mask."""


def component_units(name: str, eps: object) -> int:
    """Units of 2^-24 of one ε (a refusal, not a crash, when it cannot be counted)."""
    try:
        return epsilon_units(eps, name)
    except EpsilonError as exc:
        raise TaskRefused(str(exc), code="epsilon") from None
    except OverflowError:  # an integer too large for a double
        raise TaskRefused(f"{name} is too large to count", code="epsilon") from None


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_bins(task: TaskSpec) -> None:
    """A stage-I task carries ``(D_c, h_c, B_c)`` for every served component, with
    ``B_c = max(1, ⌈2D_c/h_c − 10^-9⌉)`` (protocol §14.1 step 10): the B bins of width h
    cover the support exactly, so every bin index the device derives lies in [1, B].

    Rows are checked in order and the first failing check gives the code: in a row, D
    and h (``param``), B an integer ≥ 1 (``param``), B ≤ 2^16 (``limit``), B as above
    (``param``)."""
    if task.intervals:
        raise TaskRefused("a stage-I task carries bins, not intervals")
    if len(task.bins) != len(task.components):
        raise TaskRefused(f"a stage-I task needs bins for each of its {len(task.components)} "
                          f"components, got {len(task.bins)}")
    for row in task.bins:
        if len(row) != 3:
            raise TaskRefused("bins are [D, h, B] triples")
        D, h, B = row
        if not (_finite(D) and _finite(h) and D > 0 and h > 0):
            raise TaskRefused(f"bins need finite positive D and h, got {list(row)}")
        if isinstance(B, bool) or not isinstance(B, int) or B < 1:
            raise TaskRefused(f"a component has at least one bin, got {B!r}")
        if B > MAX_BINS:
            raise TaskRefused(f"a component has at most {MAX_BINS} bins, got {B!r}",
                              code="limit")
        want = support_bins(float(D), float(h))
        if want != B:
            raise TaskRefused(f"B must be the number of bins of width h covering [-D, D], "
                              f"max(1, ceil(2D/h - 1e-9)) = {want}, got {B!r}")


def check_intervals(task: TaskSpec, count: int | None = None) -> None:
    """A value task carries ``[lo_c, hi_c]`` for every served component."""
    if task.bins:
        raise TaskRefused("a value task carries intervals, not bins")
    want = len(task.components) if count is None else count
    if len(task.intervals) != want:
        raise TaskRefused(f"the task needs {want} intervals, got {len(task.intervals)}")
    for row in task.intervals:
        if len(row) != 2:
            raise TaskRefused("intervals are [lo, hi] pairs")
        lo, hi = row
        if not (_finite(lo) and _finite(hi) and lo < hi and math.isfinite(hi - lo)):
            raise TaskRefused(f"an interval needs finite lo < hi, got {list(row)}")


def bin_params(task: TaskSpec) -> list[Alg1Params]:
    """The served components' bins as :class:`Alg1Params` (the margin plays no role)."""
    return [Alg1Params(float(D), float(h), 0.0, int(B)) for D, h, B in task.bins]


def bins_limit(eps_c: float) -> int:
    return int(1 + 60 * 2 / eps_c) + 1


def values_limit(eps_c: float) -> int:
    return int(GRID_STEPS * (1 + 60 / eps_c)) + 1


def intervals(task: TaskSpec) -> Sequence[tuple[float, float]]:
    return [(float(lo), float(hi)) for lo, hi in task.intervals]


def oracle_of(task: TaskSpec) -> FrequencyOracle:
    """The task's frequency oracle (a refusal when its mechanism is not one)."""
    mech = ORACLES.get(task.mechanism)
    if mech is None:
        raise TaskRefused(f"mechanism {task.mechanism!r} is not a frequency oracle (this "
                          f"task reports categories: {sorted(ORACLES)})")
    return mech


def scalar_of(task: TaskSpec) -> ScalarMechanism:
    """The task's scalar randomizer (a refusal when its mechanism is not one)."""
    mech = SCALARS.get(task.mechanism)
    if mech is None:
        raise TaskRefused(f"mechanism {task.mechanism!r} is not a scalar randomizer (this "
                          f"task reports values: {sorted(SCALARS)})")
    return mech


def single_record(task: TaskSpec) -> None:
    """Only method ``oracle`` samples several records."""
    if task.records != 1:
        raise TaskRefused(f"method {task.method!r} has no records parameter (it must be 1)")


def laplace_only(task: TaskSpec) -> None:
    if task.mechanism != DEFAULT:
        raise TaskRefused(f"method {task.method!r} reports with discrete Laplace only")
