"""Output transforms from component estimates ``θ̂`` to the quantity a query asks for.

Spec: ``user_level_ldp.md`` §6.1 (ℓ2: ``μ̂ = Uᵀ θ̂``), §6.2 (ℓ1: first ``d`` entries of
``H θ̂ / √d'``), §6.3 (distribution: first ``A`` entries of ``H θ̂ / √A'``, optional
projection onto the simplex). Pure post-processing (INV-5): no privacy cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from uldp.client.hadamard import hadamard_matrix, next_pow2
from uldp.client.tasks import TaskSpec

__all__ = ["OUTPUT_TRANSFORMS", "kashin_transform", "output_transform", "project_simplex",
           "register_transform"]

Transform = Callable[[TaskSpec, int], "np.ndarray | None"]
OUTPUT_TRANSFORMS: dict[str, Transform] = {}


def register_transform(kind: str, fn: Transform) -> Transform:
    """Register the output transform of a kind (learning kinds add theirs)."""
    OUTPUT_TRANSFORMS[kind] = fn
    return fn


def output_transform(task: TaskSpec, n_components: int) -> np.ndarray | None:
    """The matrix ``T`` with ``output = T θ̂`` (``None`` = identity)."""
    try:
        fn = OUTPUT_TRANSFORMS[task.kind]
    except KeyError:
        raise ValueError(f"no output transform for kind {task.kind!r}") from None
    return fn(task, n_components)


def kashin_transform(task: TaskSpec, n_components: int) -> np.ndarray:
    """``Uᵀ`` (d × N) of the task's public Kashin frame (§6.1)."""
    from uldp.client.statistics import kashin_frame

    frame = kashin_frame(task)
    return frame.synthesis(np.eye(frame.N)).T


def _hadamard_transform(task: TaskSpec, n_components: int) -> np.ndarray:
    K = next_pow2(task.dim)
    return hadamard_matrix(K)[: task.dim].astype(np.float64) / math.sqrt(K)


register_transform("mean", lambda task, C: None)
register_transform("mean-linf", lambda task, C: None)
register_transform("mean-l2", kashin_transform)
register_transform("mean-l1", _hadamard_transform)
register_transform("distribution", _hadamard_transform)


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex (sort-based, exact)."""
    v = np.asarray(v, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    idx = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / idx > 0)[0][-1]
    theta = css[rho] / (rho + 1)
    return np.maximum(v - theta, 0.0)


# Output transforms of the learning kinds (§8–§10) register themselves on import.
import uldp.collector.learning.transforms  # noqa: E402,F401
