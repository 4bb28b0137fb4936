"""Shared pieces of the collector halves: the estimate from per-group value accumulators,
and the variance of one grid-encoded report.

See ``docs/algorithms.md`` ("Estimates"). Sections of ``docs/algorithms.md``: §4.5 (variance
formula), §5.5 / §6.1 (per-component variances through the output transform), [D12].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from uldp.client.mechanisms import ORACLES, SCALARS
from uldp.client.noise import discrete_laplace_variance, laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import BinAccumulator, ValueAccumulator
from uldp.collector.estimators.estimate import Estimate, combine
from uldp.collector.estimators.transforms import project_simplex
from uldp.collector.mechanisms import ORACLE_DECODERS, SCALAR_DECODERS
from uldp.collector.mechanisms.choice import best_oracle, best_scalar, scalar_variance

__all__ = [
    "Block",
    "bin_accumulator",
    "bin_mechanism",
    "estimate_from_blocks",
    "finite_population",
    "noise_variance",
    "plan_mechanisms",
    "report_noise_variance",
    "second_moment",
    "value_accumulator",
    "value_blocks",
    "value_mechanism",
    "value_noise_variance",
]

Block = tuple[Sequence[int], np.ndarray, np.ndarray]


def noise_variance(width: float, eps_c: float) -> float:
    """Variance of one grid-encoded report of an interval of ``width`` at budget ε_c: the
    exact discrete Laplace variance plus the randomized-rounding bound ``1/4`` step²."""
    t = laplace_scale(GRID_STEPS, eps_c).value
    step = np.float64(width) / GRID_STEPS
    with np.errstate(over="ignore"):  # a range of 1e300: the variance is +inf, not an error
        return float((discrete_laplace_variance(t) + 0.25) * step * step)


def value_mechanism(spec: Any, eps_c: float) -> str:
    """The scalar randomizer of a query's value reports at ``ε_c``: the query's, or the
    worst-case best for ``best`` / ``adaptive`` (``docs/mechanisms.md``)."""
    name = spec.randomizer
    return best_scalar(eps_c) if name in ("best", "adaptive") else name


def bin_mechanism(spec: Any, bins: int, eps_c: float) -> str:
    """The frequency oracle of a query's categorical reports over ``bins`` categories."""
    return best_oracle(bins, eps_c) if spec.oracle == "best" else spec.oracle


def second_moment(mean: float, var: float, lo: float, hi: float) -> float:
    """``E t²`` of statistics with this mean and variance on ``t = 2(y − lo)/(hi − lo) − 1``
    (at most 1: the clamp only moves values inward)."""
    w = hi - lo
    return float(min(((2 * mean - lo - hi) / w) ** 2 + 4 * var / w**2, 1.0))


def value_noise_variance(mech: str, width: float, eps_c: float, t2: float | None = None
                         ) -> float:
    """Variance of one value report on an interval of ``width`` with ``mech`` at ``ε_c``,
    the randomized rounding included; ``t2`` = ``E t²`` of the statistics on the interval
    (None: the worst case over t). Discrete Laplace does not depend on it."""
    if mech == "laplace":
        return noise_variance(width, eps_c)
    w = np.float64(width)
    with np.errstate(over="ignore"):
        return float(scalar_variance(mech, eps_c, t2) * (w / 2) ** 2
                     + 0.25 * (w / GRID_STEPS) ** 2)


def report_noise_variance(mech: str, width: float, eps_c: float, mean_t2: float,
                          mean_t: float = 0.0, t2_lower: float = 0.0) -> float:
    """The noise variance of a group's value reports, from the reports themselves: for
    every randomizer ``Var(t̂ | t) = a + b t²`` exactly, so ``E t̂² = E t² + a + b E t²``
    gives ``E t²`` (``mean_t2``: the mean of the decoded ``t̂²``) — except where
    ``1 + b = 0`` (Duchi's outputs are ``±C`` whatever t): there the largest of the lower
    bounds ``E t² ≥ (E t̂)²`` and ``t2_lower`` (a bound for *all* users from stage I,
    ``sizing.t2_bounds``), which bounds the noise from above. (Stage I's *estimate* of
    ``E t²`` is not used: it is about the stage-I users only, a sample that may miss part
    of the others — a skewed minority made Duchi's noise look 0.19 where it was 0.25.)"""
    if mech == "laplace":
        return noise_variance(width, eps_c)
    a, one = scalar_variance(mech, eps_c, 0.0), scalar_variance(mech, eps_c, 1.0)
    slope = 1 + one - a
    floor = min(max(mean_t * mean_t, t2_lower if slope <= 1e-6 else 0.0), 1.0)
    t2 = (mean_t2 - a) / slope if slope > 1e-6 else floor
    return value_noise_variance(mech, width, eps_c, min(max(t2, floor), 1.0))


def value_accumulator(task: TaskSpec) -> ValueAccumulator:
    """The accumulator of a value task: its intervals, limit and mechanism's decoder."""
    mech = task.mechanism
    return ValueAccumulator([(float(lo), float(hi)) for lo, hi in task.intervals],
                            SCALARS[mech].limit(task.eps_c),
                            None if mech == "laplace" else SCALAR_DECODERS[mech], task.eps_c)


def bin_accumulator(task: TaskSpec, params: Sequence[Any]) -> BinAccumulator:
    """The accumulator of a stage-I task with its oracle's decoder."""
    mech = task.mechanism
    oracle = ORACLES[mech]
    limit = max(oracle.limit(int(B), task.eps_c) for _, _, B in task.bins)
    if mech == "laplace":
        return BinAccumulator(params, limit, None, task.eps_c)
    return BinAccumulator(params, limit, ORACLE_DECODERS[mech], task.eps_c,
                          [oracle.length(int(B), task.eps_c) for _, _, B in task.bins])


def finite_population(cov: np.ndarray, noise_var: np.ndarray, k: int, n: int) -> np.ndarray:
    """Covariance of a group's mean of ``k`` reports as an estimate of the mean over all
    ``n`` users who reported (the estimand the truth is computed on), not over a larger
    population they were drawn from.

    A report is the user's statistic ``Y_i`` plus noise ``Z_i`` of known variance
    ``noise_var`` (independent coordinates). Over a random ``k`` of ``n`` users,
    ``Cov(mean − mean over the n) = Σ_Z/k + (1 − k/n)·S_Y/k`` (sampling without
    replacement); the report covariance ``cov`` estimates ``(S_Y + Σ_Z)/k``, so
    ``S_Y/k`` is its excess over ``Σ_Z/k``, kept positive semidefinite. With ``k = n``
    (single stage, one group) only the exact noise remains.
    """
    if k < 2 or n < 1:
        return cov
    Z = np.diag(np.asarray(noise_var, dtype=np.float64)) / k
    excess = cov - Z
    w, V = np.linalg.eigh((excess + excess.T) / 2)
    excess = (V * np.maximum(w, 0.0)) @ V.T
    return Z + max(1.0 - k / n, 0.0) * excess


def value_blocks(plan: Any, accs: dict[int, Any]) -> tuple[list[Block], int]:
    """``(components, means, covariance)`` of every group and the reports counted; a group
    without reports gets 0 with the variance of a value known only to lie in its support."""
    blocks: list[Block] = []
    n = 0
    for g in range(plan.n_groups):
        comps = plan.grouping.groups[g].components
        acc: ValueAccumulator | None = accs.get(g)
        if acc is None:
            D = np.array([plan.group_params(g)[c].bound for c in comps])
            blocks.append((comps, np.zeros(len(comps)), np.diag(D**2)))
            continue
        blocks.append((comps, acc.means(), acc.covariance()))
        n += acc.count
    return blocks, n


def plan_mechanisms(plan: Any) -> dict[str, Any]:
    """The report mechanisms a compiled plan's devices use, as far as public values fix
    them: the frequency oracle of categorical reports and the scalar randomizer of value
    reports (``"from stage I"`` where stage I picks it; the estimate then names the one
    it picked)."""
    eps_c = plan.grouping.groups[0].eps_c
    out: dict[str, Any] = {"oracle": None, "randomizer": None}
    sampled = getattr(plan.method, "mechanism", None)  # method oracle: its records' oracle
    fixed = getattr(plan.method, "fixed_randomizer", None)
    if sampled is not None:
        out["oracle"] = sampled(plan)
    elif plan.two_stage:
        out["oracle"] = plan.task_for(0, 1).mechanism
        out["randomizer"] = ("from stage I" if plan.spec.randomizer == "adaptive"
                             else value_mechanism(plan.spec, eps_c))
    elif fixed is not None:
        out["randomizer"] = fixed
    else:
        out["randomizer"] = value_mechanism(plan.spec, eps_c)
    return out


def estimate_from_blocks(plan: Any, blocks: list[Block], reports: int,
                         bias: tuple[np.ndarray, np.ndarray] | None = None) -> Estimate:
    """Combine the blocks, map them through the kind's output transform (widening the
    interval by the clamping-bias bounds, if any), post-process into the kind's public
    range, attach extras."""
    T = plan.kind.transform(plan.template, plan.n_components)
    est = combine(plan.n_components, blocks, T, plan.spec.confidence, {"reports": reports},
                  bias=bias, output_range=plan.kind.output_range(plan.template),
                  offset=plan.kind.offset(plan.template))
    if plan.spec.kind == "distribution":
        est.extra["projected"] = project_simplex(est.values)
    est.extra["regime"] = plan.grouping.regime
    est.extra["method"] = plan.spec.method
    est.extra["mechanisms"] = plan_mechanisms(plan)
    if plan.advisories:  # the plan's notes travel with its result (e.g. too few users)
        est.extra["advisories"] = list(plan.advisories)
    if plan.auto:
        est.extra["auto"] = dict(plan.auto)
    return est
