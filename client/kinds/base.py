"""Query kinds, device half: what statistic of a local dataset a task privatizes.

See ``docs/algorithms.md`` ("Kinds") and ``docs/privacy.md`` (sanitizing rules). Spec:
``docs/algorithms.md`` §3.3 (components), [D10] (unequal m), [D21] (support enforcement).

A :class:`Kind` knows how many scalar components it has and how to turn a batch of local
datasets (users × samples × ...) with a validity mask into the matrix of user statistics
``Y`` (users × components), finite for every input. It also carries the public math the
collector needs around it: per-component support bounds (Algorithm-1 parameters), the
``N_Δ`` and moment rules, and the *output transform* ``T`` (output = ``T θ̂``, pure
post-processing). Kinds are registered by name in :data:`KINDS`; the package
``uldp.client.kinds`` imports every kind module, so importing it registers them all.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from uldp.client.kashin import KashinFrame
from uldp.client.kashin_frames import frame_size
from uldp.client.numerics import norms, seq_sum
from uldp.client.numerics import radial as numerics_radial
from uldp.client.taskspec import TaskRefused, TaskSpec

__all__ = [
    "HEAVY_GUARD",
    "KINDS",
    "DataError",
    "Kind",
    "centre",
    "check_range",
    "check_samples",
    "count_clamped",
    "finite_number",
    "kashin_frame",
    "kashin_size",
    "masked_mean",
    "radial",
    "register_kind",
    "safe_norms",
    "value_range",
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

    Canonical (``docs/device-protocol.md`` §12.1): a sequential sum over the valid samples
    in index order, starting from ``+0.0``, then one division by their count ``m_i``
    (invalid entries are replaced by ``0.0``, which leaves a sequential sum unchanged). The
    sum overflows only when ``m_i · max|x|`` exceeds the largest double; the statistic is
    then ±∞, which :meth:`Kind.statistics` maps to ±2^500 and the mechanism clamps.
    """
    n, m = x.shape[:2]
    if m == 0:
        return np.zeros((n,) + x.shape[2:])
    count = np.full(n, float(m)) if valid is None else valid.sum(axis=1).astype(np.float64)
    terms = x
    if valid is not None:
        terms = np.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), x, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        total = seq_sum(terms, axis=1)
        return total / np.maximum(count, 1.0).reshape((n,) + (1,) * (x.ndim - 2))


Transform = Callable[[TaskSpec, int], "np.ndarray | None"]


def _identity(task: TaskSpec, n_components: int) -> np.ndarray | None:
    return None


@dataclass(frozen=True)
class Kind:
    """A query kind (see the module docstring).

    Device half: ``n_components(task)`` (also validates kind-specific public values,
    raising :class:`TaskRefused`); ``sample_map(task, x)`` maps a batch of samples
    ``(S, ...)`` to ``(S, C)`` per-sample component values (the φ_c, clamped into their
    support); ``user_stats(task, X, valid)`` maps ``(users, m, ...)`` with a validity
    mask ``(users, m)`` to ``(users, C)`` (invalid samples ignored; a user without valid
    samples gets the zero statistic) — for linear maps it averages first;
    ``valid_value(task, X)`` adds a kind's own validity rule per sample (e.g. categories
    inside the alphabet) to the common one (every coordinate finite).

    Collector half (public math): ``bounds(task)`` per-component support ``D_c`` of a
    bounded task; ``transform(task, C)`` the output transform; ``delta_users(task)`` the
    factor of ``N_Δ`` per user ([D5]); ``moment_scale(task, p, M)`` the per-component
    moment bound of a heavy-tailed task (§7); ``output_range(task)`` the public range of
    every output coordinate (invariant 7: releases are post-processed into it).
    """

    name: str
    vector: bool
    n_components: Callable[[TaskSpec], int]
    sample_map: Callable[[TaskSpec, np.ndarray], np.ndarray]
    user_stats: Callable[[TaskSpec, np.ndarray, np.ndarray], np.ndarray] | None = None
    bounds: Callable[[TaskSpec], np.ndarray] | None = None  # per-component D_c (bounded)
    uses_labels: bool = False  # if True, samples arrive as (..., d + 1): label last
    valid_value: Callable[[TaskSpec, np.ndarray], np.ndarray] | None = None
    transform: Transform = _identity
    heavy_tails: bool = False  # may run without a support bound (moment parameters)
    delta_users: Callable[[TaskSpec], int] = lambda task: 1
    moment_scale: Callable[[TaskSpec, float, float], float] = lambda task, p, M: M
    #: public range ``(lo, hi)`` of every output coordinate (estimates are post-processed
    #: into it), or None when there is none
    output_range: Callable[[TaskSpec], tuple[float, float] | None] = lambda task: None
    #: a categorical kind: the number of categories ``A`` of a usable sample, whose value
    #: is its category (method ``oracle`` reports sampled records); None otherwise
    categories: Callable[[TaskSpec], int] | None = None
    #: the kind's values may have a public range ``[lo, hi]`` (the task's ``range``):
    #: samples are centred on it (:func:`centre`) before the per-sample map, and the
    #: collector adds the centre back to every output (:meth:`offset`)
    ranged: bool = False
    #: how many finite entries of a dataset's samples the task clamps into its range (a
    #: device logs it locally, never sends it); None: the kind has no value range
    clamped: Callable[[TaskSpec, np.ndarray], int] | None = None
    #: the device methods a task of this kind may use (None: every method)
    methods: tuple[str, ...] | None = None
    #: a grouped kind: its samples' codes come from the categorical dataset the task names
    #: in ``by`` (``uldp.client.kinds.grouped``); only such kinds take ``by``
    grouped: bool = False

    def check(self, task: TaskSpec) -> int:
        """Validate the kind's public values; returns the number of components."""
        if self.methods is not None and task.method not in self.methods:
            raise TaskRefused(f"kind {self.name!r} runs with method "
                              f"{' or '.join(self.methods)}, not {task.method!r}")
        if (task.by is not None) != self.grouped:
            raise TaskRefused(f"kind {self.name!r} needs by (its groups' dataset)"
                              if self.grouped else f"kind {self.name!r} takes no by")
        if task.stat_bound is not None and not self.heavy_tails:
            raise TaskRefused(f"kind {self.name!r} has no heavy-tailed form (stat_bound)")
        if task.bound is None and task.stat_bound is None and self.needs_bound:
            raise TaskRefused(f"kind {self.name!r} needs a support bound")
        for name in ("bound", "stat_bound"):
            v = getattr(task, name)
            if v is not None:
                finite_number(name, v, positive=True)
        if task.range is not None:
            check_range(task, self)
        return self.n_components(task)

    def offset(self, task: TaskSpec) -> float:
        """What the collector adds to every output: the range's centre (0 without one)."""
        return centre(task) if self.ranged else 0.0

    @property
    def needs_bound(self) -> bool:
        return self.bounds is None or self.name in ("mean-l2", "mean-l1")

    def component_bounds(self, task: TaskSpec) -> np.ndarray:
        """``D_c`` of every component of a bounded task (collector: Algorithm-1 bins)."""
        C = self.n_components(task)
        if self.bounds is not None:
            return np.asarray(self.bounds(task), dtype=np.float64)
        return np.full(C, float(task.bound))  # type: ignore[arg-type]

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
        before any map runs and then ignored. Heavy-tailed tasks clamp user means to
        ``[-stat_bound, stat_bound]``. A non-finite result of a custom map is replaced by
        0 (NaN) or clamped (±inf), so the mechanism always receives finite numbers.
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
                if m == 0:
                    Y = np.zeros((n, self.n_components(task)))
                else:
                    flat = Xc.reshape((n * m,) + Xc.shape[2:])
                    Y = masked_mean(self.sample_map(task, flat).reshape(n, m, -1), valid)
        Y = np.nan_to_num(np.asarray(Y, dtype=np.float64), nan=0.0, posinf=HEAVY_GUARD,
                          neginf=-HEAVY_GUARD)
        if task.stat_bound is not None:
            Y = np.clip(Y, -task.stat_bound, task.stat_bound)
        return Y


KINDS: dict[str, Kind] = {}


def check_range(task: TaskSpec, kind: Kind) -> None:
    """A task's ``range`` (protocol §11.2): a ranged kind, a bounded task, finite
    ``lo < hi`` with a finite width ``hi − lo`` and ``bound`` exactly ``hi/2 − lo/2``;
    else refused (code ``param``)."""
    assert task.range is not None
    if not kind.ranged:
        raise TaskRefused(f"kind {kind.name!r} has no range [lo, hi]")
    if task.bound is None:
        raise TaskRefused("a task with a range needs bound (hi/2 - lo/2)")
    lo = finite_number("range lo", task.range[0])
    hi = finite_number("range hi", task.range[1])
    if not lo < hi:
        raise TaskRefused(f"range needs lo < hi, got [{lo!r}, {hi!r}]")
    if not math.isfinite(hi - lo):
        raise TaskRefused(f"range [{lo!r}, {hi!r}] is wider than the largest double")
    if float(task.bound) != hi / 2 - lo / 2:
        raise TaskRefused(f"bound must be hi/2 - lo/2 = {hi / 2 - lo / 2!r} for the range "
                          f"[{lo!r}, {hi!r}], got {task.bound!r}")


def centre(task: TaskSpec) -> float:
    """The centre ``lo/2 + hi/2`` of a task's range (0.0 without one): devices subtract
    it from every sample before clamping to ``±bound`` (protocol §12.3)."""
    if task.range is None:
        return 0.0
    return float(task.range[0]) / 2 + float(task.range[1]) / 2


def value_range(task: TaskSpec) -> tuple[float, float] | None:
    """The public range of one value: the task's ``range``, else ``[-bound, bound]``
    (None for a heavy-tailed task)."""
    if task.range is not None:
        return float(task.range[0]), float(task.range[1])
    return None if task.bound is None else (-float(task.bound), float(task.bound))


def count_clamped(task: TaskSpec, samples: np.ndarray) -> int:
    """How many of a dataset's values the task's public range clamps (0 for a kind that
    does not clamp, and on any failure: a local hint is never worth an exception)."""
    kind = KINDS.get(task.kind)
    if kind is None or kind.clamped is None:
        return 0
    try:
        return int(kind.clamped(task, samples))
    except Exception:
        return 0


def register_kind(kind: Kind) -> Kind:
    """Add a kind to :data:`KINDS` (its module is imported by ``uldp.client.kinds``)."""
    KINDS[kind.name] = kind
    return kind


def finite_number(name: str, v: Any, positive: bool = False, nonneg: bool = False) -> float:
    """``v`` as a float if it is a finite (positive / non-negative) number; else refused."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TaskRefused(f"{name} must be a number, got {v!r}")
    f = float(v)
    if not math.isfinite(f) or (positive and f <= 0) or (nonneg and f < 0):
        what = "positive " if positive else "non-negative " if nonneg else ""
        raise TaskRefused(f"{name} must be a finite {what}number, got {v!r}")
    return f


def safe_norms(x: np.ndarray, ord: float) -> np.ndarray:
    """ℓ_ord norms of the rows of ``x`` (last axis), canonical and without overflow for finite
    input (``uldp.client.numerics.norms``: rows scaled by their largest magnitude first)."""
    return norms(x, int(ord))[..., None]


def radial(x: np.ndarray, bound: float | None, ord: float) -> np.ndarray:
    """Project rows onto the ℓ_ord ball of radius ``bound`` ([D21]); ``None`` (heavy tails)
    projects onto the numerical-guard ball of radius 2^500 instead (canonical:
    ``uldp.client.numerics.radial``)."""
    if x.size == 0:
        return x
    radius = HEAVY_GUARD if bound is None else float(bound)
    return numerics_radial(x, radius, int(ord))


def kashin_size(task: TaskSpec) -> int:
    """``N`` of the task's Kashin frame, from the public parameters alone (no frame built)."""
    return frame_size(task.dim, task.frame_kind)


def kashin_frame(task: TaskSpec) -> KashinFrame:
    """The task's public Kashin frame (rebuilt deterministically from its seed, cached)."""
    return _frame(task.dim, task.frame_seed, task.frame_kind)


@functools.lru_cache(maxsize=32)
def _frame(dim: int, seed: int, kind: str) -> KashinFrame:
    return KashinFrame.from_seed(dim, seed, kind=kind)  # type: ignore[arg-type]
