"""Explicit variance formulas (the primary acceptance tests of the estimators).

See ``docs/algorithms.md`` ("Predicted error"). Spec: ``user_level_ldp.md`` §4.5
(Algorithm 1: ``Var μ̂ = σ²/(m|S_II|) + 2(3h+2Δ)²/(|S_II| ε_c²)``), §5.5 (sum over
components), §6.1 (``Σ_c ‖u_c‖² Var θ̂_c`` through the output transform), §12 (SSL and
baselines A/B). Each method's collector half gives the per-component variances
(``component_variance``); the Laplace term uses the exact variance of the discrete noise
actually added plus the randomized-rounding bound (``uldp.collector.methods.common``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from uldp.collector.methods.common import noise_variance

__all__ = ["noise_variance", "predicted_mse"]


def predicted_mse(plan: Any, sample_var: np.ndarray) -> float:
    """Predicted ``E‖μ̂ − μ‖²`` of a plan, given each component's per-sample variance σ_c².

    ``plan`` is a ``uldp.collector.planner.Plan``; ``sample_var[c]`` is ``Var φ_c(X)`` of
    one sample (user means have ``σ_c²/m`` for i.i.d. samples).
    """
    v = plan.method.component_variance(plan, np.asarray(sample_var, dtype=np.float64))
    T = plan.kind.transform(plan.template, plan.n_components)
    if T is None:
        return float(v.sum())
    return float(np.sum(np.square(T) @ v))
