"""Output transforms ``T`` (output = ``T θ̂``) of the learning kinds.

Spec: ``user_level_ldp.md`` §8.3 step 2d (``g_t = Uᵀ θ̂``), §9.3 (``q̂ = H Q̂ / K_H``),
§10.3 (``q̂ = H Q̂ / K_H``, ``p̂ = H P̂ / K_H``). Post-processing only (INV-5).

The dense Hadamard transform is registered up to :data:`DENSE_LIMIT` components (it also
carries the standard errors of q̂, p̂); above it the transform is the identity (the values
are then Q̂, P̂) and ``uldp.collector.learning`` computes q̂, p̂ with the fast WHT.
"""

from __future__ import annotations

import numpy as np

from uldp.client.hadamard import hadamard_matrix
from uldp.client.tasks import TaskSpec
from uldp.collector.estimators.transforms import kashin_transform, register_transform

__all__ = ["DENSE_LIMIT", "classify_transform", "regress_transform"]

DENSE_LIMIT = 2048


def classify_transform(task: TaskSpec, C: int) -> np.ndarray | None:
    """``H / K_H`` (``C = K_H``), or None above :data:`DENSE_LIMIT`."""
    if C > DENSE_LIMIT:
        return None
    return hadamard_matrix(C).astype(np.float64) / C


def regress_transform(task: TaskSpec, C: int) -> np.ndarray | None:
    """Block diagonal ``diag(H/K_H, H/K_H)`` (``C = 2K_H``), or None above the limit."""
    if C > DENSE_LIMIT:
        return None
    K = C // 2
    H = hadamard_matrix(K).astype(np.float64) / K
    T = np.zeros((C, C))
    T[:K, :K] = H
    T[K:, K:] = H
    return T


register_transform("sgd", kashin_transform)
register_transform("classify", classify_transform)
register_transform("regress", regress_transform)
