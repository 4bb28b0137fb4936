"""Algorithm 5: nonparametric regression on a grid with Hadamard features.

Spec: ``user_level_ldp.md`` §10.2 (components ``Q_k`` with bound ``T_y`` and ``P_k`` with
bound 1), §10.3 (protocol: ``2K_H`` components through the Algorithm-2 grouping,
``N_Δ = K_H n``; ``q̂ = H Q̂/K_H``, ``p̂ = H P̂/K_H``; predictor
``η̂(x) = clamp(q̂_k / max(p̂_k, τ), −T_y, T_y)``), §10.4 (bin side, circularity resolved by
:func:`uldp.collector.learning.classify.choose_grid` with ``task="regress"``), [D18],
[D19] (``τ = f_L/(2B)``, default ``f_L = 0.5``), §15 erratum 8 (``p̂`` uses ``P̂``).
"""

from __future__ import annotations

import math
from typing import Any

from uldp.client.randomness import RandomSource
from uldp.collector.learning.classify import (
    GridModel,
    _box,
    components_of,
    hadamard_inverse,
    run_grid_query,
)
from uldp.collector.learning.runner import as_source

__all__ = ["run_regress"]


def run_regress(users: Any, labels: Any = None, *, epsilon: float, label_bound: float,
                rng: RandomSource, lo: Any = None, hi: Any = None, M: int | None = None,
                beta: float = 1.0, density_floor: float = 0.5, fix_p1: bool = False,
                method: str = "two-stage", seed: int = 0, m_ref: int | None = None,
                progress: bool | None = None, query_id: str = "regress") -> GridModel:
    """Algorithm 5 over ``users``; ``label_bound`` is ``T_y`` (labels clamped on device).

    ``fix_p1`` sets ``P̂_1 = 1`` (known: Σ p_l = 1; optional, privacy-neutral, §10.3).
    """
    if not isinstance(label_bound, (int, float)) or not math.isfinite(label_bound) \
            or label_bound <= 0:
        raise ValueError(f"label_bound must be a finite positive number, got {label_bound!r}")
    if not math.isfinite(density_floor) or density_floor <= 0:
        raise ValueError(f"density_floor must be positive, got {density_floor!r}")
    source = as_source(users, labels)
    lo_a, hi_a = _box(source.dim, lo, hi)
    choice, est, n, m = run_grid_query(
        "regress", source, None, epsilon=epsilon, lo=lo_a, hi=hi_a, M=M, beta=beta,
        method=method, seed=seed, rng=rng, m_ref=m_ref,
        extra={"label_bound": float(label_bound)}, progress=progress, query_id=query_id)
    theta = components_of(est)
    K = theta.size // 2
    Q, P = theta[:K].copy(), theta[K:].copy()
    if fix_p1:
        P[0] = 1.0
    q, p = hadamard_inverse(Q), hadamard_inverse(P)
    B = choice.M ** source.dim
    tau = density_floor / (2 * B)
    info = {"Q": Q.tolist(), "P": P.tolist(), "regime": choice.regime, "side": choice.side,
            "users": n, "samples": m, "epsilon": epsilon, "method": method,
            "density_floor": density_floor}
    return GridModel("regress", choice.M, source.dim, lo_a, hi_a, q, p, float(label_bound),
                     tau, info)
