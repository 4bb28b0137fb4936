"""Shared pieces of the collector halves: the estimate from per-group value accumulators,
and the variance of one grid-encoded report.

See ``docs/algorithms.md`` ("Estimates"). Sections of ``docs/algorithms.md``: §4.5 (variance
formula), §5.5 / §6.1 (per-component variances through the output transform), [D12].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from uldp.client.noise import discrete_laplace_variance, laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.collector.estimators.accumulators import ValueAccumulator
from uldp.collector.estimators.estimate import Estimate, combine
from uldp.collector.estimators.transforms import project_simplex

__all__ = ["Block", "estimate_from_blocks", "finite_population", "noise_variance",
           "value_blocks"]

Block = tuple[Sequence[int], np.ndarray, np.ndarray]


def noise_variance(width: float, eps_c: float) -> float:
    """Variance of one grid-encoded report of an interval of ``width`` at budget ε_c: the
    exact discrete Laplace variance plus the randomized-rounding bound ``1/4`` step²."""
    t = laplace_scale(GRID_STEPS, eps_c).value
    step = width / GRID_STEPS
    return (discrete_laplace_variance(t) + 0.25) * step**2


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


def estimate_from_blocks(plan: Any, blocks: list[Block], reports: int,
                         bias: tuple[np.ndarray, np.ndarray] | None = None) -> Estimate:
    """Combine the blocks, map them through the kind's output transform (widening the
    interval by the clamping-bias bounds, if any), post-process into the kind's public
    range, attach extras."""
    T = plan.kind.transform(plan.template, plan.n_components)
    est = combine(plan.n_components, blocks, T, plan.spec.confidence, {"reports": reports},
                  bias=bias, output_range=plan.kind.output_range(plan.template))
    if plan.spec.kind == "distribution":
        est.extra["projected"] = project_simplex(est.values)
    est.extra["regime"] = plan.grouping.regime
    est.extra["method"] = plan.spec.method
    if plan.auto:
        est.extra["auto"] = dict(plan.auto)
    return est
