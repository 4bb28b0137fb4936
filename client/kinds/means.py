"""Mean kinds: 1-d mean, ℓ∞, ℓ2 (Kashin) and ℓ1 (Hadamard) means of vectors.

See ``docs/algorithms.md`` ("Kinds"). Sections of ``docs/algorithms.md``: §4.1/§4.6 (1-d mean,
bounded and heavy tails), §5.1 (ℓ∞ coordinates), §6.1 (ℓ2 via Kashin coefficients, per
sample, [D8]), §6.2 (ℓ1 via Hadamard), §7 (multi-d heavy tails), [D21] (support).
"""

from __future__ import annotations

import math

import numpy as np

from uldp.client.hadamard import fwht, hadamard_matrix, next_pow2
from uldp.client.kashin import kashin_coefficients
from uldp.client.kinds.base import (
    HEAVY_GUARD,
    Kind,
    centre,
    finite_number,
    kashin_frame,
    kashin_size,
    masked_mean,
    radial,
    register_kind,
    value_range,
)
from uldp.client.taskspec import TaskRefused, TaskSpec

__all__ = ["check_frame", "clamped_values", "hadamard_rows", "hadamard_transform",
           "kashin_transform"]


def _support(task: TaskSpec) -> tuple[float, float] | None:
    """``[-D, D]`` of a bounded task; a heavy-tailed one has no public range."""
    return None if task.bound is None else (-float(task.bound), float(task.bound))


# ---- 1-d mean and ℓ∞ mean ---------------------------------------------------------------
def _clamp_support(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    """Samples centred on the task's range (``x − c``, ``c = lo/2 + hi/2``; no range: as
    they are) and clamped to the declared support ``[-D, D]`` ([D21]); heavy-tailed tasks
    (no support) clamp to the numerical guard ±2^500 instead. A no-op copy-free pass when
    the samples already lie inside (the common case for well-behaved apps)."""
    if x.size == 0:
        return x
    c = centre(task)
    if c != 0.0:
        with np.errstate(over="ignore"):
            x = x - c
    b = HEAVY_GUARD if task.bound is None else task.bound
    if x.min() >= -b and x.max() <= b:
        return x
    return np.clip(x, -b, b)


def clamped_values(task: TaskSpec, x: np.ndarray) -> int:
    """How many finite entries of ``x`` the kind clamps into the task's range (what a
    device logs locally and never sends)."""
    if x.size == 0 or task.bound is None:
        return 0
    lo, hi = value_range(task)  # type: ignore[misc]
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero(np.isfinite(x) & ((x < lo) | (x > hi))))


register_kind(Kind(
    name="mean", vector=False,
    n_components=lambda t: 1,
    sample_map=lambda t, x: _clamp_support(t, x).reshape(-1, 1),
    user_stats=lambda t, X, v: masked_mean(_clamp_support(t, X), v).reshape(-1, 1),
    heavy_tails=True,
    output_range=value_range,
    ranged=True,
    clamped=lambda t, x: clamped_values(t, x),
))
register_kind(Kind(
    name="mean-linf", vector=True,
    n_components=lambda t: t.dim,
    sample_map=lambda t, x: _clamp_support(t, x),
    user_stats=lambda t, X, v: masked_mean(_clamp_support(t, X), v),
    heavy_tails=True,
    output_range=value_range,
    ranged=True,
    clamped=lambda t, x: clamped_values(t, x),
))


# ---- ℓ2 mean via Kashin coefficients (per sample, [D8]) ---------------------------------
def check_frame(task: TaskSpec, kinds: tuple[str, ...] = ("gaussian", "hadamard")) -> None:
    """The frame rules of a Kashin task (``sgd`` also accepts ``identity``)."""
    finite_number("kashin_level", task.kashin_level, positive=True)
    if not 0 < task.kashin_delta <= 1:
        raise TaskRefused(f"kashin_delta must be in (0, 1], got {task.kashin_delta!r}")
    if task.frame_kind not in kinds:
        raise TaskRefused(f"frame_kind must be {' or '.join(kinds)}, got "
                          f"{task.frame_kind!r}")


def _kashin_components(task: TaskSpec) -> int:
    check_frame(task)
    return kashin_size(task)


def _kashin_bound(task: TaskSpec) -> float:
    """``D' = K_LV·D/√N``: every Kashin coefficient of a sample of norm ``<= D``."""
    return task.kashin_level * float(task.bound) / math.sqrt(_kashin_components(task))  # type: ignore[arg-type]


def _kashin_map(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    frame = kashin_frame(task)
    a = kashin_coefficients(frame, radial(x, task.bound, 2), delta=task.kashin_delta)
    if task.bound is not None:  # mandatory clamp to [-D', D'] (INV-6)
        Dp = _kashin_bound(task)
        a = np.clip(a, -Dp, Dp)
    return a


def kashin_transform(task: TaskSpec, n_components: int) -> np.ndarray:
    """``Uᵀ`` (d × N) of the task's public Kashin frame (§6.1)."""
    frame = kashin_frame(task)
    return frame.synthesis(np.eye(frame.N)).T


register_kind(Kind(
    name="mean-l2", vector=True,
    n_components=_kashin_components,
    sample_map=_kashin_map,
    bounds=lambda t: np.full(_kashin_components(t), _kashin_bound(t)),
    transform=kashin_transform,
    heavy_tails=True,
    output_range=lambda t: _support(t),  # the ℓ2 ball of radius D lies in [-D, D]^d
    # Case B of §7: the norm moment M becomes K^p M N^{-p/2} per Kashin coefficient
    moment_scale=lambda t, p, M: t.kashin_level**p * M * _kashin_components(t) ** (-p / 2),
))


# ---- ℓ1 mean via Hadamard (§6.2) ------------------------------------------------------
def _l1_dim(task: TaskSpec) -> int:
    return next_pow2(task.dim)


def hadamard_rows(v: np.ndarray, K: int) -> np.ndarray:
    """Rows ``v`` (…, d) zero-padded to K and transformed: ``H v / √K``."""
    pad = np.zeros(v.shape[:-1] + (K,))
    pad[..., : v.shape[-1]] = v
    return fwht(pad, axis=-1) / math.sqrt(K)


def hadamard_transform(task: TaskSpec, n_components: int) -> np.ndarray:
    """The first ``d`` rows of ``H / √K`` (§6.2, §6.3): back from Hadamard coefficients."""
    K = next_pow2(task.dim)
    return hadamard_matrix(K)[: task.dim].astype(np.float64) / math.sqrt(K)


register_kind(Kind(
    name="mean-l1", vector=True,
    n_components=_l1_dim,
    sample_map=lambda t, x: hadamard_rows(radial(x, t.bound, 1), _l1_dim(t)),
    user_stats=lambda t, X, v: hadamard_rows(masked_mean(radial(X, t.bound, 1), v),
                                             _l1_dim(t)),
    bounds=lambda t: np.full(_l1_dim(t), float(t.bound or 0.0) / math.sqrt(_l1_dim(t))),
    transform=hadamard_transform,
    output_range=lambda t: _support(t),  # the ℓ1 ball of radius D lies in [-D, D]^d
))
