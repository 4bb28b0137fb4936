"""User-level statistics of each query kind: the per-sample maps φ_c and their averages.

Spec: ``user_level_ldp.md`` §3.3 (components), §4.1/§4.6 (1-d mean, bounded and heavy
tails), §5.1 (ℓ∞ coordinates), §6.1 (ℓ2 via Kashin coefficients, per sample, [D8]),
§6.2 (ℓ1 via Hadamard), §6.3 (discrete distributions), §7 (multi-d heavy tails),
[D10] (unequal m), [D21] (support enforcement).

A *kind* knows how many scalar components it has, the Algorithm-1 parameters of each, and
how to turn a batch of local datasets (users × samples × ...) into the matrix of user
statistics ``Y`` (users × components). Kinds are looked up by name in ``KINDS``; the learning
kinds of later sections register themselves here too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from uldp.client.hadamard import fwht, next_pow2
from uldp.client.params import Alg1Params, bounded_params, heavy_tailed_params

if TYPE_CHECKING:
    from uldp.client.tasks import TaskSpec

__all__ = ["KINDS", "DataError", "Kind", "check_samples", "register_kind"]


class DataError(ValueError):
    """The local dataset cannot be used for this task (shape, NaN/inf, wrong labels)."""


def check_samples(samples: np.ndarray, vector: bool, dim: int | None = None) -> np.ndarray:
    """Batch ``(users, m)`` or ``(users, m, d)`` float array, finite, right shape."""
    try:
        x = np.asarray(samples, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"samples must be numeric: {exc}") from None
    want = 3 if vector else 2
    if x.ndim != want:
        axes = "(users, samples, dim)" if vector else "(users, samples)"
        raise DataError(f"samples must have {want} axes {axes}, got shape {x.shape}")
    if vector and dim is not None and x.shape[2] != dim:
        raise DataError(f"samples have dimension {x.shape[2]}, the task needs {dim}")
    if not np.isfinite(x).all():
        raise DataError("samples contain NaN or infinity")
    return x


def _mean_over_samples(x: np.ndarray) -> np.ndarray:
    """Average over the sample axis; a user with no samples contributes 0 ([D10])."""
    if x.shape[1] == 0:
        return np.zeros((x.shape[0],) + x.shape[2:])
    return x.mean(axis=1)


@dataclass(frozen=True)
class Kind:
    """A query kind: component count, Alg-1 parameters, per-sample map and user statistic.

    ``sample_map(task, x)`` maps a batch of samples ``(S, ...)`` to ``(S, C)`` per-sample
    component values (the φ_c, already clamped into their support); ``user_stats(task, X)``
    maps ``(users, m, ...)`` to ``(users, C)``. For linear maps the latter averages first.
    """

    name: str
    vector: bool
    n_components: Callable[[TaskSpec], int]
    sample_map: Callable[[TaskSpec, np.ndarray], np.ndarray]
    user_stats: Callable[[TaskSpec, np.ndarray], np.ndarray] | None = None
    bounds: Callable[[TaskSpec], np.ndarray] | None = None  # per-component D_c (bounded)
    uses_labels: bool = False  # if True, samples arrive as (..., d + 1): label last

    def params(self, task: TaskSpec) -> list[Alg1Params]:
        """Alg-1 parameters of every component (bounded or heavy-tailed), from public values."""
        C = self.n_components(task)
        if task.moment_p is not None:
            p_c = heavy_tailed_params(task.moment_p, self._component_moment(task), task.m_ref,
                                      task.n_run, task.eps_c)
            return [p_c] * C
        bounds = self.bounds(task) if self.bounds is not None else np.full(C, task.bound)
        cache: dict[float, Alg1Params] = {}
        out = []
        for b in np.asarray(bounds, dtype=np.float64):
            key = float(b)
            if key not in cache:
                cache[key] = bounded_params(key, task.m_ref, task.n_delta)
            out.append(cache[key])
        return out

    def _component_moment(self, task: TaskSpec) -> float:
        """M_p of one component (Case B of §7 rescales the norm moment for Kashin)."""
        assert task.moment_p is not None and task.moment_m is not None
        if self.name == "mean-l2":
            N = self.n_components(task)
            return task.kashin_level**task.moment_p * task.moment_m * N ** (-task.moment_p / 2)
        return task.moment_m

    def statistics(self, task: TaskSpec, X: np.ndarray) -> np.ndarray:
        """User statistics ``(users, C)``; heavy-tailed kinds clamp user means to ``[-D, D]``."""
        if self.user_stats is not None:
            Y = self.user_stats(task, X)
        else:
            n, m = X.shape[:2]
            flat = X.reshape((n * m,) + X.shape[2:])
            Y = _mean_over_samples(self.sample_map(task, flat).reshape(n, m, -1))
        if task.moment_p is not None:
            D = self.params(task)[0].bound
            Y = np.clip(Y, -D, D)
        return Y


KINDS: dict[str, Kind] = {}


def register_kind(kind: Kind) -> Kind:
    KINDS[kind.name] = kind
    return kind


# ---- 1-d mean and ℓ∞ mean ---------------------------------------------------------------
def _clamp_support(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    """Clamp samples to the declared support ``[-D, D]`` ([D21]); a no-op copy-free pass
    when they already lie inside (the common case for well-behaved apps)."""
    if task.bound is None or x.size == 0:
        return x
    if x.min() >= -task.bound and x.max() <= task.bound:
        return x
    return np.clip(x, -task.bound, task.bound)


register_kind(Kind(
    name="mean", vector=False,
    n_components=lambda t: 1,
    sample_map=lambda t, x: _clamp_support(t, x).reshape(-1, 1),
    user_stats=lambda t, X: _mean_over_samples(_clamp_support(t, X)).reshape(-1, 1),
))
register_kind(Kind(
    name="mean-linf", vector=True,
    n_components=lambda t: t.dim,
    sample_map=lambda t, x: _clamp_support(t, x),
    user_stats=lambda t, X: _mean_over_samples(_clamp_support(t, X)),
))


# ---- ℓ2 mean via Kashin coefficients (per sample, [D8]) ---------------------------------
def _radial(x: np.ndarray, bound: float | None, ord: float) -> np.ndarray:
    """Project rows onto the ℓ_ord ball of radius ``bound`` ([D21]); None = no projection."""
    if bound is None:
        return x
    norms = np.linalg.norm(x, ord=ord, axis=-1, keepdims=True)
    scale = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    return x * scale


def kashin_frame(task: TaskSpec):  # -> KashinFrame
    """The task's public Kashin frame (rebuilt deterministically from its seed, cached)."""
    return _frame(task.dim, task.frame_seed, task.frame_kind)


@functools.lru_cache(maxsize=32)
def _frame(dim: int, seed: int, kind: str):
    from uldp.client.kashin import KashinFrame

    return KashinFrame.from_seed(dim, seed, kind=kind)


def _kashin_map(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    from uldp.client.kashin import kashin_coefficients

    frame = kashin_frame(task)
    a = kashin_coefficients(frame, _radial(x, task.bound, 2), delta=task.kashin_delta)
    if task.bound is not None:  # mandatory clamp to [-D', D'] (INV-6)
        Dp = task.kashin_level * task.bound / math.sqrt(frame.N)
        a = np.clip(a, -Dp, Dp)
    return a


def _kashin_components(task: TaskSpec) -> int:
    return kashin_frame(task).N


register_kind(Kind(
    name="mean-l2", vector=True,
    n_components=_kashin_components,
    sample_map=_kashin_map,
    bounds=lambda t: np.full(_kashin_components(t),
                             t.kashin_level * t.bound / math.sqrt(_kashin_components(t))),
))


# ---- ℓ1 mean via Hadamard (§6.2) ------------------------------------------------------
def _l1_dim(task: TaskSpec) -> int:
    return next_pow2(task.dim)


def _hadamard_rows(v: np.ndarray, K: int) -> np.ndarray:
    """Rows ``v`` (…, d) zero-padded to K and transformed: ``H v / √K``."""
    pad = np.zeros(v.shape[:-1] + (K,))
    pad[..., : v.shape[-1]] = v
    return fwht(pad, axis=-1) / math.sqrt(K)


register_kind(Kind(
    name="mean-l1", vector=True,
    n_components=_l1_dim,
    sample_map=lambda t, x: _hadamard_rows(_radial(x, t.bound, 1), _l1_dim(t)),
    user_stats=lambda t, X: _hadamard_rows(_mean_over_samples(_radial(X, t.bound, 1)),
                                           _l1_dim(t)),
    bounds=lambda t: np.full(_l1_dim(t), t.bound / math.sqrt(_l1_dim(t))),
))


# ---- discrete distribution over {0..A-1} (§6.3) ---------------------------------------
def _categories(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    cats = np.asarray(x)
    if cats.size and (np.any(cats != np.floor(cats)) or cats.min() < 0 or cats.max() >= task.dim):
        raise DataError(f"distribution samples must be integer categories in [0, {task.dim})")
    return cats.astype(np.int64)


def _dist_user_stats(task: TaskSpec, X: np.ndarray) -> np.ndarray:
    cats = _categories(task, X)
    n, m = cats.shape
    freq = np.zeros((n, task.dim))
    if m:
        np.add.at(freq, (np.repeat(np.arange(n), m), cats.ravel()), 1.0 / m)
    return _hadamard_rows(freq, _l1_dim(task))


def _dist_sample_map(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    cats = _categories(task, x).ravel()
    onehot = np.zeros((cats.size, task.dim))
    onehot[np.arange(cats.size), cats] = 1.0
    return _hadamard_rows(onehot, _l1_dim(task))


register_kind(Kind(
    name="distribution", vector=False,
    n_components=_l1_dim,
    sample_map=_dist_sample_map,
    user_stats=_dist_user_stats,
    bounds=lambda t: np.full(_l1_dim(t), 1.0 / math.sqrt(_l1_dim(t))),
))
