"""Explicit variance formulas (the primary acceptance tests of the estimators).

Spec: ``user_level_ldp.md`` §4.5 (Algorithm 1:
``Var μ̂ = σ²/(m|S_II|) + 2(3h+2Δ)²/(|S_II| ε_c²)``), §5.5 (sum over components), §6.1
(``Σ_c ‖u_c‖² Var θ̂_c`` through the output transform), §12 (SSL and baselines A/B:
``σ²/n + 2(2D_c)²/(n ε_c²)`` per component with the matching reporter counts).

The Laplace term uses the exact variance of the discrete noise actually added (grid-unit
``DLap`` variance rescaled, plus the randomized-rounding variance bound ``1/4`` grid step²),
which equals ``2 (width/ε_c)²`` up to ``O(1/GRID_STEPS²)``.
"""

from __future__ import annotations

import numpy as np

from uldp.client.noise import discrete_laplace_variance, laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.collector.estimators.transforms import output_transform

__all__ = ["noise_variance", "predicted_mse"]


def noise_variance(width: float, eps_c: float) -> float:
    """Variance of one grid-encoded report of an interval of ``width`` at budget ε_c."""
    t = laplace_scale(GRID_STEPS, eps_c).value
    step = width / GRID_STEPS
    return (discrete_laplace_variance(t) + 0.25) * step**2


def predicted_mse(plan, sample_var: np.ndarray) -> float:
    """Predicted ``E‖μ̂ − μ‖²`` of a plan, given each component's per-sample variance σ_c².

    ``plan`` is a ``uldp.collector.planner.Plan``; ``sample_var[c]`` is ``Var φ_c(X)`` of
    one sample (user means have ``σ_c²/m`` for i.i.d. samples).
    """
    spec = plan.spec
    m = spec.samples
    C = plan.n_components
    v = np.zeros(C)
    params = plan.kind.params(plan.template)
    if spec.method == "baseline-a":
        t = plan.template
        G = len(t.virtual_groups)
        n_virtual = spec.users * m
        for g, (comps, e) in enumerate(zip(t.virtual_groups, t.virtual_eps, strict=True)):
            k = n_virtual // G + (1 if g < n_virtual % G else 0)
            for c in comps:
                v[c] = (sample_var[c] + noise_variance(2 * params[c].bound, e)) / k
    else:
        for g, grp in enumerate(plan.grouping.groups):
            gp = plan.kind.params(plan.task_for(g, 1 if plan.two_stage else 0)) \
                if spec.moment_p is not None else params
            for c in grp.components:
                if spec.method == "two-stage":
                    k = plan.stage_size(g, 2)
                    v[c] = (sample_var[c] / m + noise_variance(gp[c].stage2_width, grp.eps_c)) / k
                elif spec.method == "ssl":
                    k = plan.stage_size(g, 0)
                    v[c] = (sample_var[c] / m + noise_variance(2 * gp[c].bound, grp.eps_c)) / k
                else:  # baseline-b: one sample per user
                    k = plan.stage_size(g, 0)
                    v[c] = (sample_var[c] + noise_variance(2 * gp[c].bound, grp.eps_c)) / k
    T = output_transform(plan.template, C)
    if T is None:
        return float(v.sum())
    return float(np.sum(np.square(T) @ v))
