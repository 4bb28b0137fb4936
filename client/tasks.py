"""Tasks: checking a public task, and the device function that computes its report.

See ``docs/device-protocol.md`` (task schema, refusal rules, report layouts) and
``docs/privacy.md`` (totality). Sections of ``docs/algorithms.md``: §2.2–2.3 (round template,
messages), §1.3 INV-1…INV-7, §4.3/§5.3 (client steps), §12 (baselines and SSL), [D10].

* :func:`validate_task` refuses (:class:`TaskRefused`) every task whose public parameters
  are inconsistent, unusable or above the device limits — from the task alone, never from
  data; the kind (``uldp.client.kinds``) and the method (``uldp.client.methods``) add their
  own checks.
* :func:`compute_report` is the one device function for one user: a report for *every*
  dataset of the declared structure. :func:`compute_reports` is the same code over a
  batch of users (fleet simulations).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from uldp.client import numerics
from uldp.client.budget import units_to_epsilon
from uldp.client.dataset import align_labels, coerce_values
from uldp.client.kinds import KINDS, DataError, Kind, check_samples
from uldp.client.mechanisms import ORACLES, SCALARS
from uldp.client.methods import METHODS, Method
from uldp.client.methods.base import component_units
from uldp.client.randomness import RandomSource, as_source
from uldp.client.sealing import parse_seal
from uldp.client.taskspec import SCHEMA, TaskRefused, TaskSpec

__all__ = [
    "MAX_COUNT",
    "MAX_DIM",
    "MAX_GAUSSIAN_FRAME_DIM",
    "MAX_RECORDS",
    "MAX_REPORT_VALUES",
    "SCHEMA",
    "DataError",
    "TaskRefused",
    "TaskSpec",
    "compute_report",
    "compute_reports",
    "empty_report",
    "report_length",
    "report_limit",
    "task_epsilon",
    "task_epsilon_units",
    "validate_task",
]

#: Public limits a device enforces before it builds anything from a task.
MAX_REPORT_VALUES = 1 << 18  # values per report (≤ 10 bytes each on the wire)
MAX_DIM = 1 << 16  # d (vector kinds) or alphabet size A (distribution)
MAX_GAUSSIAN_FRAME_DIM = 1024  # a Gaussian Kashin frame is a dense 2d × d matrix
MAX_COUNT = 1 << 40  # dim and components
MAX_RECORDS = 1 << 10  # records a device samples for one report (method oracle)

_INT_FIELDS = ("dim", "stage", "frame_seed", "virtual_offset", "m_ref", "records")
_NUM_FIELDS = ("epsilon", "eps_c", "kashin_level", "kashin_delta")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _check_types(task: TaskSpec) -> None:
    """Every field has its JSON type (hostile tasks must be refused, never crash)."""
    for name in ("query_id", "kind", "method", "frame_kind", "mechanism"):
        if not isinstance(getattr(task, name), str):
            raise TaskRefused(f"{name} must be a string", code="field")
    if task.by is not None and not isinstance(task.by, str):
        raise TaskRefused("by must be a string", code="field")
    for name in _INT_FIELDS:
        if not _is_int(getattr(task, name)):
            raise TaskRefused(f"{name} must be an integer, got {getattr(task, name)!r}",
                              code="field")
    for name in _NUM_FIELDS:
        if not _is_num(getattr(task, name)):
            raise TaskRefused(f"{name} must be a number, got {getattr(task, name)!r}",
                              code="field")
    for name in ("bound", "stat_bound"):
        v = getattr(task, name)
        if v is not None and not _is_num(v):
            raise TaskRefused(f"{name} must be a number or null, got {v!r}", code="field")
    if not all(_is_int(c) for c in task.components):
        raise TaskRefused("components must be a list of integers", code="field")
    if not all(_is_num(x) for row in task.bins + task.intervals for x in row):
        raise TaskRefused("bins and intervals must hold numbers", code="field")
    if task.range is not None and (len(task.range) != 2
                                   or not all(_is_num(v) for v in task.range)):
        raise TaskRefused("range must be a list of two numbers [lo, hi]", code="field")
    if not all(_is_num(e) for e in task.virtual_eps):
        raise TaskRefused("virtual_eps must be a list of numbers", code="field")
    if not all(_is_int(c) for g in task.virtual_groups for c in g):
        raise TaskRefused("virtual_groups must be a list of lists of integers",
                          code="field")
    if not isinstance(task.extra, dict):
        raise TaskRefused("extra must be an object", code="field")


def _parts(task: TaskSpec) -> tuple[Kind, Method]:
    try:
        kind = KINDS[task.kind]
    except KeyError:
        raise TaskRefused(f"unknown task kind {task.kind!r}; known: {sorted(KINDS)}",
                          code="kind") from None
    try:
        method = METHODS[task.method]
    except KeyError:
        raise TaskRefused(f"unknown method {task.method!r}; known: {sorted(METHODS)}",
                          code="method") from None
    return kind, method


def validate_task(task: TaskSpec) -> Kind:
    """Check that the public parameters are consistent; raise :class:`TaskRefused` if not.

    Looks at the task only (never at data). Any failure while deriving the public
    parameters (a frame, the report length) is a refusal too, never an exception.
    """
    _check_types(task)
    kind, method = _parts(task)
    try:
        _validate(task, kind, method)
    except TaskRefused:
        raise
    except (ArithmeticError, ValueError, TypeError, MemoryError) as exc:
        raise TaskRefused(f"task parameters are unusable: {exc}") from None
    return kind


def _validate(task: TaskSpec, kind: Kind, method: Method) -> None:
    if task.stage not in method.stages:
        raise TaskRefused(f"stage {task.stage} is not valid for method {task.method!r}",
                          code="stage")
    if task.mechanism not in ORACLES and task.mechanism not in SCALARS:
        raise TaskRefused(f"unknown mechanism {task.mechanism!r}; known: "
                          f"{sorted(set(ORACLES) | set(SCALARS))}", code="method")
    budget = component_units("epsilon", task.epsilon)
    component_units("eps_c", task.eps_c)
    if task.dim < 1:
        raise TaskRefused(f"dim must be >= 1, got {task.dim}")
    if task.dim > MAX_DIM:
        raise TaskRefused(f"dim must be at most {MAX_DIM}, got {task.dim}", code="limit")
    if task.virtual_offset < 0 or task.m_ref < 1 or task.records < 1:
        raise TaskRefused("virtual_offset must be >= 0, m_ref and records >= 1")
    if task.records > MAX_RECORDS:
        raise TaskRefused(f"records must be at most {MAX_RECORDS}, got {task.records}",
                          code="limit")
    if task.frame_kind == "gaussian" and kind.name in ("mean-l2", "sgd") \
            and task.dim > MAX_GAUSSIAN_FRAME_DIM:
        raise TaskRefused(f"a gaussian Kashin frame is limited to dim <= "
                          f"{MAX_GAUSSIAN_FRAME_DIM}; use frame_kind hadamard", code="limit")
    C = kind.check(task)
    comps = task.components
    if not comps:
        raise TaskRefused("a task must serve at least one component")
    if len(set(comps)) != len(comps):
        raise TaskRefused(f"components must be distinct, got {list(comps)}")
    if min(comps) < 0 or max(comps) >= C:
        raise TaskRefused(f"components must lie in [0, {C}), got {list(comps)}")
    method.check(task, C)
    spent = method.epsilon_units(task)
    if spent > budget:
        raise TaskRefused(
            f"task would spend epsilon={units_to_epsilon(spent):.10g} "
            f"({spent} units of 2^-24), above the query budget {task.epsilon!r} "
            f"({budget} units)", code="over-budget")
    n = method.report_length(task)
    if n > MAX_REPORT_VALUES:
        raise TaskRefused(f"the report would have {n} values, above the device limit "
                          f"{MAX_REPORT_VALUES}", code="limit")
    if task.seal is not None:
        parse_seal(task.seal)


def report_length(task: TaskSpec) -> int:
    """Number of integers in this task's report."""
    validate_task(task)
    return METHODS[task.method].report_length(task)


def report_limit(task: TaskSpec) -> int:
    """Largest absolute report integer the collector accepts (noise tail beyond e^-60)."""
    validate_task(task)
    return METHODS[task.method].report_limit(task)


def task_epsilon_units(task: TaskSpec) -> int:
    """What this report spends, in units of 2^-24 (each component's ε rounded down to the
    grid, exactly as its noise is; basic composition over the components it carries)."""
    return METHODS[task.method].epsilon_units(task)


def task_epsilon(task: TaskSpec) -> float:
    """What this report spends, as a real number (``task_epsilon_units · 2^-24``)."""
    return units_to_epsilon(task_epsilon_units(task))


def compute_reports(task: TaskSpec, samples: np.ndarray, rng: RandomSource,
                    labels: np.ndarray | None = None,
                    offsets: np.ndarray | None = None,
                    exact: bool | None = None) -> np.ndarray:
    """Reports of a batch of users: ``(users, report_length)``.

    ``samples``: ``(users, m)`` (scalar kinds) or ``(users, m, d)``; NaN/inf and other
    unusable values are allowed and ignored per user (so users may effectively have
    different counts, including none). ``labels``: ``(users, m)`` for the labelled kinds
    (NaN = missing). ``offsets`` (baseline A only) overrides ``task.virtual_offset`` per
    user. The same code as ``compute_report``.

    ``exact``: canonical numerics (``uldp.client.numerics``; the device contract, the same
    bits in every SDK) or the fast batch kernels; ``None`` = canonical for one user. The
    batch kernels agree with the canonical statistic up to rounding (protocol §12.7).
    """
    kind = validate_task(task)
    X = check_samples(samples, kind.vector, task.dim if kind.vector else None)
    if kind.uses_labels:  # labels travel as one extra last column of the samples
        X = _attach_labels(X, labels)
    with numerics.canonical(X.shape[0] == 1 if exact is None else exact):
        valid = kind.valid_samples(task, X)
        return METHODS[task.method].compute(task, kind, X, valid, rng, offsets)


def _attach_labels(X: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    """Append the labels as a last column; absent labels are missing (NaN)."""
    if labels is None:
        lab = np.full(X.shape[:2], np.nan)
    else:
        lab = np.asarray(labels, dtype=np.float64)
        if lab.shape != X.shape[:2]:
            raise DataError(f"labels must have one value per sample, shape {X.shape[:2]}, "
                            f"got {lab.shape}")
    Xv = X if X.ndim == 3 else X[..., None]
    return np.concatenate([Xv, lab[..., None]], axis=2)


#: How often :func:`compute_report` fell back to its backstop because the computation on
#: the data raised (a bug: the tests assert it stays 0). Local only, never sent.
FALLBACKS = 0


def empty_report(task: TaskSpec, rng: RandomSource) -> np.ndarray:
    """The report of the empty dataset: the backstop of protocol §13.2, a function of the
    public task and the keystream only. A :class:`~uldp.client.device.Device` computes it
    *before* it charges the ledger (a task whose backstop fails is refused, code
    ``param``), so the report owed after the charge always exists."""
    kind = validate_task(task)
    shape: tuple[int, ...] = (1, 0, task.dim) if kind.vector else (1, 0)
    labels = np.zeros((1, 0)) if kind.uses_labels else None
    return compute_reports(task, np.zeros(shape), rng, labels=labels, exact=True)[0]


def compute_report(task: TaskSpec, samples: Any, labels: Any = None,
                   rng: RandomSource | None = None, *, dim: int | None = None,
                   fallback: np.ndarray | None = None) -> np.ndarray:
    """The report of one device: ``samples`` is its whole local dataset (``(m,)`` or
    ``(m, d)``, any values; ``None`` is the empty dataset); returns a flat int64 vector of
    ``report_length(task)`` integers — for *every* dataset of that structure (totality,
    ``docs/privacy.md``).

    Values are sanitized (``uldp.client.dataset.coerce_values``; labels aligned by
    ``align_labels``) and unusable samples ignored; a user with no usable sample reports
    the zero statistic ([D10]). Only a structure that contradicts the task (a scalar
    dataset for a vector task, another dimension) raises :class:`DataError` — a public
    fact the device checks before it accepts a task. ``rng=None`` uses a fresh OS-keyed
    ChaCha20 source (production). Should the computation on the data raise (a bug), the
    result is ``fallback`` (the device's precomputed :func:`empty_report`) or else the
    empty dataset's report continuing the same keystream.
    """
    global FALLBACKS
    rng = as_source(rng)
    kind = validate_task(task)
    want = task.dim if kind.vector else None
    try:
        x = coerce_values(samples, dim if dim is not None else want)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    if kind.vector and (x.ndim != 2 or x.shape[1] != task.dim):
        raise DataError(f"samples have dimension {x.shape[1:]}, the task needs {task.dim}")
    if not kind.vector and x.ndim == 2:
        if x.shape[1] != 1:
            raise DataError("a scalar task needs scalar samples")
        x = x[:, 0]
    lab = align_labels(labels, x.shape[0])[None] if kind.uses_labels else None
    try:
        return compute_reports(task, x[None], rng, labels=lab, exact=True)[0]
    except Exception:  # totality backstop: never silence, never an exception
        FALLBACKS += 1
        return np.array(fallback, dtype=np.int64) if fallback is not None \
            else empty_report(task, rng)


def finite_positive(name: str, v: Any) -> float:
    """``v`` if it is a finite positive number, else a refusal."""
    if not _is_num(v) or not math.isfinite(float(v)) or float(v) <= 0:
        raise TaskRefused(f"{name} must be a finite positive number, got {v!r}")
    return float(v)
