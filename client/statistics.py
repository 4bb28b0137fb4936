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

__all__ = [
    "HEAVY_GUARD",
    "KINDS",
    "DataError",
    "Kind",
    "check_samples",
    "masked_mean",
    "register_kind",
    "safe_norms",
]


class DataError(ValueError):
    """A batch of samples has the wrong *structure* for a task (axes, dimension, not numeric).

    Only structure — public facts the app declared — can raise it. Values never do: NaN,
    infinities, huge numbers, off-alphabet categories and missing labels are sanitized by
    the documented rules (``docs/privacy.md``, "Totality"), so a device reports for every
    possible dataset.
    """


#: Numerical guard of the heavy-tailed kinds (no public support): samples are clamped
#: (ℓ2 kinds: radially projected) to magnitude 2^500 before use, so no sum overflows.
#: It changes nothing for any dataset whose samples are below 3·10^150 in magnitude.
HEAVY_GUARD = 2.0**500


def check_samples(samples: np.ndarray, vector: bool, dim: int | None = None) -> np.ndarray:
    """Batch ``(users, m)`` or ``(users, m, d)`` float array of the right structure.

    Values are not checked (NaN/inf are allowed: :func:`valid_samples` masks them).
    """
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
    return x


def masked_mean(x: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """Mean over the sample axis (1) of the valid samples; 0 for a user with none ([D10]).

    Computed as ``Σ_j x_j / m_i`` (each term divided first), so finite inputs never
    overflow; invalid entries contribute exactly 0.
    """
    n, m = x.shape[:2]
    if m == 0:
        return np.zeros((n,) + x.shape[2:])
    count = np.full(n, float(m)) if valid is None else valid.sum(axis=1).astype(np.float64)
    scale = (1.0 / np.maximum(count, 1.0)).reshape((n, 1) + (1,) * (x.ndim - 2))
    terms = x * scale
    if valid is not None:
        terms = np.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), terms, 0.0)
    return terms.sum(axis=1)


@dataclass(frozen=True)
class Kind:
    """A query kind: component count, Alg-1 parameters, per-sample map and user statistic.

    ``sample_map(task, x)`` maps a batch of *valid* samples ``(S, ...)`` to ``(S, C)``
    per-sample component values (the φ_c, already clamped into their support);
    ``user_stats(task, X, valid)`` maps ``(users, m, ...)`` with a validity mask
    ``(users, m)`` to ``(users, C)`` (invalid samples are ignored; a user without valid
    samples gets the zero statistic). For linear maps it averages first.
    ``valid_value(task, X)`` (optional) adds a kind's own validity rule per sample (e.g.
    categories inside the alphabet) to the common one (every coordinate finite).
    """

    name: str
    vector: bool
    n_components: Callable[[TaskSpec], int]
    sample_map: Callable[[TaskSpec, np.ndarray], np.ndarray]
    user_stats: Callable[[TaskSpec, np.ndarray, np.ndarray], np.ndarray] | None = None
    bounds: Callable[[TaskSpec], np.ndarray] | None = None  # per-component D_c (bounded)
    uses_labels: bool = False  # if True, samples arrive as (..., d + 1): label last
    valid_value: Callable[[TaskSpec, np.ndarray], np.ndarray] | None = None

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

    def valid_samples(self, task: TaskSpec, X: np.ndarray) -> np.ndarray:
        """``(users, m)`` mask of the samples a statistic may use (see class docstring)."""
        finite = np.isfinite(X)
        ok = finite.all(axis=2) if X.ndim == 3 else finite
        if self.valid_value is not None and X.size:
            with np.errstate(invalid="ignore"):
                ok &= self.valid_value(task, np.where(finite, X, 0.0))
        return ok

    def statistics(self, task: TaskSpec, X: np.ndarray,
                   valid: np.ndarray | None = None) -> np.ndarray:
        """User statistics ``(users, C)``, finite for every input.

        ``valid`` defaults to :meth:`valid_samples`; invalid samples are replaced by 0
        before any map runs and then ignored. Heavy-tailed kinds clamp user means to
        ``[-D, D]``. A non-finite result of a custom map is replaced by 0 (NaN) or
        clamped (±inf), so the mechanism always receives finite numbers.
        """
        if valid is None:
            valid = self.valid_samples(task, X)
        mask = valid.reshape(valid.shape + (1,) * (X.ndim - 2))
        Xc = np.where(mask, X, 0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.user_stats is not None:
                Y = self.user_stats(task, Xc, valid)
            else:
                n, m = Xc.shape[:2]
                C = self.n_components(task)
                if m == 0:
                    Y = np.zeros((n, C))
                else:
                    flat = Xc.reshape((n * m,) + Xc.shape[2:])
                    Y = masked_mean(self.sample_map(task, flat).reshape(n, m, -1), valid)
        Y = np.nan_to_num(np.asarray(Y, dtype=np.float64), nan=0.0, posinf=HEAVY_GUARD,
                          neginf=-HEAVY_GUARD)
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
    """Clamp samples to the declared support ``[-D, D]`` ([D21]); heavy-tailed tasks (no
    support) clamp to the numerical guard ±2^500 instead. A no-op copy-free pass when the
    samples already lie inside (the common case for well-behaved apps)."""
    if x.size == 0:
        return x
    b = HEAVY_GUARD if task.bound is None else task.bound
    if x.min() >= -b and x.max() <= b:
        return x
    return np.clip(x, -b, b)


register_kind(Kind(
    name="mean", vector=False,
    n_components=lambda t: 1,
    sample_map=lambda t, x: _clamp_support(t, x).reshape(-1, 1),
    user_stats=lambda t, X, v: masked_mean(_clamp_support(t, X), v).reshape(-1, 1),
))
register_kind(Kind(
    name="mean-linf", vector=True,
    n_components=lambda t: t.dim,
    sample_map=lambda t, x: _clamp_support(t, x),
    user_stats=lambda t, X, v: masked_mean(_clamp_support(t, X), v),
))


# ---- ℓ2 mean via Kashin coefficients (per sample, [D8]) ---------------------------------
def safe_norms(x: np.ndarray, ord: float) -> np.ndarray:
    """ℓ_ord norms of the rows of ``x`` (last axis) without overflow for finite input:
    rows are scaled by their largest magnitude first (``‖x‖ = a·‖x/a‖``)."""
    amax = np.abs(x).max(axis=-1, keepdims=True, initial=0.0)
    safe = np.where(amax > 0, amax, 1.0)
    with np.errstate(over="ignore"):
        return amax * np.linalg.norm(x / safe, ord=ord, axis=-1, keepdims=True)


def _radial(x: np.ndarray, bound: float | None, ord: float) -> np.ndarray:
    """Project rows onto the ℓ_ord ball of radius ``bound`` ([D21]); ``None`` (heavy tails)
    projects onto the numerical-guard ball of radius 2^500 instead."""
    if x.size == 0:
        return x
    radius = HEAVY_GUARD if bound is None else bound
    norms = safe_norms(x, ord)
    if np.all(norms <= radius):
        return x
    scale = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
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
    user_stats=lambda t, X, v: _hadamard_rows(masked_mean(_radial(X, t.bound, 1), v),
                                              _l1_dim(t)),
    bounds=lambda t: np.full(_l1_dim(t), t.bound / math.sqrt(_l1_dim(t))),
))


# ---- discrete distribution over {0..A-1} (§6.3) ---------------------------------------
def _in_alphabet(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    """Sanitizing rule of ``distribution``: a sample is a category iff it is an integer in
    ``[0, A)``; anything else (fractions, negatives, ≥ A) is ignored like a missing value."""
    return (x == np.floor(x)) & (x >= 0) & (x < task.dim)


def _dist_user_stats(task: TaskSpec, X: np.ndarray, valid: np.ndarray) -> np.ndarray:
    n, m = X.shape[:2]
    freq = np.zeros((n, task.dim))
    if m:
        cats = np.where(valid, X, 0).astype(np.int64)
        w = valid / np.maximum(valid.sum(axis=1, keepdims=True), 1)
        np.add.at(freq, (np.repeat(np.arange(n), m), cats.ravel()), w.ravel())
    return _hadamard_rows(freq, _l1_dim(task))


def _dist_sample_map(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    cats = np.asarray(x).ravel()
    ok = _in_alphabet(task, cats)
    onehot = np.zeros((cats.size, task.dim))
    onehot[np.flatnonzero(ok), cats[ok].astype(np.int64)] = 1.0
    return _hadamard_rows(onehot, _l1_dim(task))


register_kind(Kind(
    name="distribution", vector=False,
    n_components=_l1_dim,
    sample_map=_dist_sample_map,
    user_stats=_dist_user_stats,
    valid_value=_in_alphabet,
    bounds=lambda t: np.full(_l1_dim(t), 1.0 / math.sqrt(_l1_dim(t))),
))
