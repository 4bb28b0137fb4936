"""Tasks: the public description of one report, and the device function that computes it.

Spec: ``user_level_ldp.md`` §2.2–2.3 (round template, messages), §1.3 INV-1…INV-7,
§4.3/§5.3 (client steps), §12 (baselines A/B and SSL), [D10], [D12], [D22], [D23].

A :class:`TaskSpec` holds only public values (kind, method, stage, ε share, support,
reference m, run sizes, the components served, ``k̂`` for stage II, the Kashin frame seed).
The device derives every clip interval and noise scale from it (INV-7): nothing in a task
is a noise scale. ``compute_report`` is the one device function for one user;
``compute_reports`` is the same code over a batch of users for fleet simulations.

Report layouts (flat int64 vectors):

* ``two-stage`` stage 1: for each served component, its ``B_c`` noisy bin indicators;
* ``two-stage`` stage 2, ``ssl``, ``baseline-b``: one noisy grid value per component;
* ``baseline-a``: for each of ``m_ref`` samples, one value per component of that sample's
  virtual group (sample ``j`` serves ``virtual_groups[(virtual_offset + j) % G]``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from uldp.client.budget import EpsilonError, epsilon_units, units_to_epsilon
from uldp.client.dataset import align_labels, coerce_values
from uldp.client.mechanisms.two_stage import stage1_reports, stage2_reports
from uldp.client.params import GRID_STEPS, Alg1Params
from uldp.client.randomness import RandomSource, as_source
from uldp.client.statistics import KINDS, DataError, Kind, check_samples

__all__ = [
    "METHODS",
    "DataError",
    "TaskRefused",
    "TaskSpec",
    "compute_report",
    "compute_reports",
    "report_length",
    "report_limit",
    "task_epsilon",
    "task_epsilon_units",
    "validate_task",
]

METHODS = ("two-stage", "ssl", "baseline-a", "baseline-b")

#: Largest report a device computes (values); also bounds the message (≤ 10 bytes each).
MAX_REPORT_VALUES = 1 << 18


class TaskRefused(ValueError):
    """The device will not run this task (inconsistent or over-budget public parameters)."""


@dataclass(frozen=True)
class TaskSpec:
    """Public parameters of one report (see module docstring)."""

    query_id: str
    kind: str
    epsilon: float  # the query's user-level budget: what this task may spend at most
    m_ref: int
    n_delta: int  # N_Δ of [D5]
    n_run: int  # users of this Algorithm-1 run (heavy-tail Δ, [D6])
    components: tuple[int, ...]
    eps_c: float
    method: str = "two-stage"
    stage: int = 1  # 1 or 2 for two-stage; 0 for single-stage methods
    dim: int = 1  # d, or alphabet size A for "distribution"
    bound: float | None = None  # D (bounded support)
    moment_p: float | None = None  # heavy tails: E|X|^p <= M_p (§4.6, §7)
    moment_m: float | None = None
    khat: tuple[int, ...] = ()  # stage 2: one per served component
    frame_seed: int = 0  # ℓ2: public Kashin frame seed
    frame_kind: str = "gaussian"
    kashin_level: float = 4.0  # K_LV [D9]
    kashin_delta: float = 0.5
    virtual_groups: tuple[tuple[int, ...], ...] = ()  # baseline A
    virtual_eps: tuple[float, ...] = ()  # baseline A: ε_c per virtual group
    virtual_offset: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # learning kinds

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["components"] = list(self.components)
        d["khat"] = list(self.khat)
        d["virtual_groups"] = [list(g) for g in self.virtual_groups]
        d["virtual_eps"] = list(self.virtual_eps)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskSpec:
        if not isinstance(d, dict):
            raise TaskRefused("a task is a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise TaskRefused(f"task has unknown fields: {sorted(unknown)}")
        d = dict(d)
        for key in ("components", "khat", "virtual_eps"):
            if key in d:
                if not isinstance(d[key], list):
                    raise TaskRefused(f"{key} must be a list")
                d[key] = tuple(d[key])
        if "virtual_groups" in d:
            groups = d["virtual_groups"]
            if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
                raise TaskRefused("virtual_groups must be a list of lists")
            d["virtual_groups"] = tuple(tuple(g) for g in groups)
        try:
            return cls(**d)
        except TypeError as exc:
            raise TaskRefused(f"malformed task: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        try:
            return cls.from_dict(json.loads(text))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TaskRefused(f"task is not valid JSON: {exc}") from None


def _kind(task: TaskSpec) -> Kind:
    try:
        return KINDS[task.kind]
    except KeyError:
        raise TaskRefused(f"unknown task kind {task.kind!r}; known: {sorted(KINDS)}") from None


def _finite_pos(name: str, v: Any) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise TaskRefused(f"{name} must be a finite positive number, got {v!r}")


def _units(name: str, v: Any) -> int:
    try:
        return epsilon_units(v, name)
    except EpsilonError as exc:
        raise TaskRefused(str(exc)) from None


def task_epsilon_units(task: TaskSpec) -> int:
    """What this report spends, in units of 2^-24 (basic composition over the components
    it carries; each component's ε is rounded down to the grid, exactly as its noise is)."""
    if task.method == "baseline-a":
        G = len(task.virtual_groups)
        per = [len(g) * _units("virtual_eps", e)
               for g, e in zip(task.virtual_groups, task.virtual_eps, strict=True)]
        full, rest = divmod(task.m_ref, G)
        return full * sum(per) + sum(per[(task.virtual_offset + j) % G] for j in range(rest))
    return len(task.components) * _units("eps_c", task.eps_c)


def task_epsilon(task: TaskSpec) -> float:
    """What this report spends, as a real number (``task_epsilon_units · 2^-24``)."""
    return units_to_epsilon(task_epsilon_units(task))


#: Public limits a device enforces before it builds anything from a task.
MAX_DIM = 1 << 16  # d (vector kinds) or alphabet size A (distribution)
MAX_GAUSSIAN_FRAME_DIM = 1024  # a Gaussian Kashin frame is a dense 2d × d matrix
MAX_COUNT = 1 << 40  # m_ref, n_delta, n_run
MAX_MOMENT_P = 64.0

_INT_FIELDS = ("m_ref", "n_delta", "n_run", "dim", "stage", "frame_seed", "virtual_offset")
_NUM_FIELDS = ("epsilon", "eps_c", "kashin_level", "kashin_delta")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _check_types(task: TaskSpec) -> None:
    """Every field has its JSON type (hostile tasks must be refused, never crash)."""
    for name in ("query_id", "kind", "method", "frame_kind"):
        if not isinstance(getattr(task, name), str):
            raise TaskRefused(f"{name} must be a string")
    for name in _INT_FIELDS:
        if not _is_int(getattr(task, name)):
            raise TaskRefused(f"{name} must be an integer, got {getattr(task, name)!r}")
    for name in _NUM_FIELDS:
        if not _is_num(getattr(task, name)):
            raise TaskRefused(f"{name} must be a number, got {getattr(task, name)!r}")
    for name in ("bound", "moment_p", "moment_m"):
        v = getattr(task, name)
        if v is not None and not _is_num(v):
            raise TaskRefused(f"{name} must be a number or null, got {v!r}")
    for name in ("components", "khat"):
        if not all(_is_int(c) for c in getattr(task, name)):
            raise TaskRefused(f"{name} must be a list of integers")
    if not all(_is_num(e) for e in task.virtual_eps):
        raise TaskRefused("virtual_eps must be a list of numbers")
    if not all(isinstance(g, tuple) and all(_is_int(c) for c in g)
               for g in task.virtual_groups):
        raise TaskRefused("virtual_groups must be a list of lists of integers")
    if not isinstance(task.extra, dict):
        raise TaskRefused("extra must be an object")


def validate_task(task: TaskSpec) -> Kind:
    """Check that the public parameters are consistent; raise :class:`TaskRefused` if not.

    Looks at the task only (never at data). Any failure while deriving the public
    parameters (a frame, bins, report length) is a refusal too, never an exception.
    """
    _check_types(task)
    kind = _kind(task)
    try:
        _validate(task, kind)
    except TaskRefused:
        raise
    except (ArithmeticError, ValueError, TypeError, MemoryError) as exc:
        raise TaskRefused(f"task parameters are unusable: {exc}") from None
    return kind


def _validate(task: TaskSpec, kind: Kind) -> None:
    if task.method not in METHODS:
        raise TaskRefused(f"unknown method {task.method!r}; known: {list(METHODS)}")
    expected_stages = (1, 2) if task.method == "two-stage" else (0,)
    if task.stage not in expected_stages:
        raise TaskRefused(f"stage {task.stage} is not valid for method {task.method!r}")
    budget = _units("epsilon", task.epsilon)
    _units("eps_c", task.eps_c)
    for name in ("m_ref", "n_delta", "n_run", "dim"):
        v = getattr(task, name)
        if not 1 <= v <= MAX_COUNT:
            raise TaskRefused(f"{name} must be a positive integer <= 2^40, got {v!r}")
    if task.dim > MAX_DIM:
        raise TaskRefused(f"dim {task.dim} is above the device limit {MAX_DIM}")
    if task.virtual_offset < 0:
        raise TaskRefused("virtual_offset must be >= 0")
    heavy = task.moment_p is not None or task.moment_m is not None
    if heavy:
        if task.bound is not None:
            raise TaskRefused("a task has either a support bound or moment parameters, not both")
        _finite_pos("moment_m", task.moment_m)
        p = task.moment_p
        if p is None or not math.isfinite(p) or not 2 <= p <= MAX_MOMENT_P:
            raise TaskRefused(f"moment_p must be in [2, {MAX_MOMENT_P:g}], got {p!r}")
        if task.kind not in ("mean", "mean-linf", "mean-l2"):
            raise TaskRefused(f"heavy-tailed moments are not defined for kind {task.kind!r}")
    elif kind.bounds is None or task.kind == "mean-l2" or task.kind == "mean-l1":
        _finite_pos("bound", task.bound)
    if task.kind in ("mean-l2", "sgd"):
        _finite_pos("kashin_level", task.kashin_level)
        if not 0 < task.kashin_delta <= 1:
            raise TaskRefused(f"kashin_delta must be in (0, 1], got {task.kashin_delta!r}")
        if task.frame_kind not in ("gaussian", "hadamard"):
            raise TaskRefused(f"frame_kind must be gaussian or hadamard, got {task.frame_kind!r}")
        if task.frame_kind == "gaussian" and task.dim > MAX_GAUSSIAN_FRAME_DIM:
            raise TaskRefused(f"a gaussian Kashin frame is limited to dim <= "
                              f"{MAX_GAUSSIAN_FRAME_DIM}; use frame_kind hadamard")
    C = kind.n_components(task)
    comp_sets = task.virtual_groups if task.method == "baseline-a" else (task.components,)
    if task.method == "baseline-a":
        if not task.virtual_groups or len(task.virtual_eps) != len(task.virtual_groups):
            raise TaskRefused("baseline-a needs virtual_groups with one virtual_eps each")
        for e in task.virtual_eps:
            _units("virtual_eps", e)
    for comps in comp_sets:
        if not comps:
            raise TaskRefused("a task must serve at least one component")
        if len(set(comps)) != len(comps):
            raise TaskRefused(f"components must be distinct, got {list(comps)}")
        if min(comps) < 0 or max(comps) >= C:
            raise TaskRefused(f"components must lie in [0, {C}), got {list(comps)}")
    spent = task_epsilon_units(task)
    if spent > budget:
        raise TaskRefused(
            f"task would spend epsilon={units_to_epsilon(spent):.10g} "
            f"({spent} units of 2^-24), above the query budget {task.epsilon!r} "
            f"({budget} units)")
    params = kind.params(task)
    if task.stage == 2:
        if len(task.khat) != len(task.components):
            raise TaskRefused(f"stage 2 needs one khat per component ({len(task.components)}), "
                              f"got {len(task.khat)}")
        for c, k in zip(task.components, task.khat, strict=True):
            if not 0 <= k <= params[c].bins:
                raise TaskRefused(f"khat {k!r} of component {c} is outside [0, {params[c].bins}]")
    elif task.khat:
        raise TaskRefused("only a stage-2 task carries khat")
    n = _length(task, params)
    if n > MAX_REPORT_VALUES:
        raise TaskRefused(f"the report would have {n} values, above the device limit "
                          f"{MAX_REPORT_VALUES}")


def _length(task: TaskSpec, params: list[Alg1Params]) -> int:
    if task.method == "two-stage" and task.stage == 1:
        return sum(params[c].bins for c in task.components)
    if task.method == "baseline-a":
        G = len(task.virtual_groups)
        lens = [len(g) for g in task.virtual_groups]
        full, rest = divmod(task.m_ref, G)
        return full * sum(lens) + sum(lens[(task.virtual_offset + j) % G] for j in range(rest))
    return len(task.components)


def _served_params(task: TaskSpec, kind: Kind) -> list[Alg1Params]:
    allp = kind.params(task)
    return [allp[c] for c in task.components]


def report_length(task: TaskSpec) -> int:
    """Number of integers in this task's report."""
    kind = validate_task(task)
    return _length(task, kind.params(task))


def report_limit(task: TaskSpec) -> int:
    """Largest absolute report integer the collector accepts (noise tail beyond e^-60)."""
    if task.method == "two-stage" and task.stage == 1:
        return int(1 + 60 * 2 / task.eps_c) + 1
    eps = min(task.virtual_eps) if task.method == "baseline-a" else task.eps_c
    return int(GRID_STEPS * (1 + 60 / eps)) + 1


def _ssl_intervals(params: list[Alg1Params]) -> list[tuple[float, float]]:
    return [(-p.bound, p.bound) for p in params]


def compute_reports(task: TaskSpec, samples: np.ndarray, rng: RandomSource,
                    labels: np.ndarray | None = None,
                    offsets: np.ndarray | None = None) -> np.ndarray:
    """Reports of a batch of users: ``(users, report_length)``.

    ``samples``: ``(users, m)`` (scalar kinds) or ``(users, m, d)``; NaN/inf and other
    unusable values are allowed and ignored per user (so users may effectively have
    different counts, including none). ``labels``: ``(users, m)`` for the labelled kinds
    (NaN = missing). ``offsets`` (baseline A only) overrides ``task.virtual_offset`` per
    user. The same code as ``compute_report``.
    """
    kind = validate_task(task)
    X = check_samples(samples, kind.vector, task.dim if kind.vector else None)
    if kind.uses_labels:  # labels travel as one extra last column of the samples
        X = _attach_labels(X, labels)
    valid = kind.valid_samples(task, X)
    if task.method == "baseline-a":
        return _baseline_a(task, kind, X, valid, rng, offsets)
    if task.method == "baseline-b":
        X, valid = _pick_one(X, valid, rng)
    Y = kind.statistics(task, X, valid)[:, list(task.components)]
    params = _served_params(task, kind)
    if task.method == "two-stage" and task.stage == 1:
        return stage1_reports(Y, params, task.eps_c, rng)
    if task.method == "two-stage":
        intervals = [p.clamp_interval(int(k)) for p, k in zip(params, task.khat, strict=True)]
    else:
        intervals = _ssl_intervals(params)
    return stage2_reports(Y, intervals, task.eps_c, rng)


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


def _pick_one(X: np.ndarray, valid: np.ndarray, rng: RandomSource,
              ) -> tuple[np.ndarray, np.ndarray]:
    """Baseline B: each user's own uniform choice of one valid sample (none if it has none).

    The index is ``r``-th valid sample with ``r`` uniform below the user's count."""
    n, m = X.shape[:2]
    if m == 0:
        return X[:, :0], valid[:, :0]
    count = valid.sum(axis=1)
    r = rng.below(np.maximum(count, 1))
    pick = np.argmax(np.cumsum(valid, axis=1) > r[:, None], axis=1)
    rows = np.arange(n)
    return X[rows, pick][:, None], (valid[rows, pick] & (count > 0))[:, None]


def _slot_sources(valid: np.ndarray, m_ref: int, rng: RandomSource,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Baseline A: which sample fills each of the ``m_ref`` report slots of every user.

    With ``m_i`` valid samples: if ``m_i > m_ref``, a uniformly random subset of
    ``m_ref`` of them ([D10]; the samples with the ``m_ref`` smallest random 64-bit
    keys), in index order; otherwise slot ``j`` takes the ``(j mod m_i)``-th valid sample
    in index order (samples are reused in turn when there are fewer than ``m_ref``); a
    user without valid samples fills every slot with the zero value. Returns the source
    index of every slot and whether the slot is filled.
    """
    n, m = valid.shape
    count = valid.sum(axis=1)
    if m == 0:
        return np.zeros((n, m_ref), dtype=np.int64), np.zeros((n, m_ref), dtype=bool)
    in_order = np.argsort(~valid, axis=1, kind="stable")  # valid samples first, in order
    pos = np.arange(m_ref)[None, :] % np.maximum(count, 1)[:, None]
    src = np.take_along_axis(in_order, pos, axis=1)
    more = count > m_ref
    if more.any():
        rows = np.flatnonzero(more)
        keys = rng.words(rows.size * m).reshape(rows.size, m)
        keys = np.where(valid[rows], keys, np.uint64(np.iinfo(np.uint64).max))
        subset = np.argsort(keys, axis=1, kind="stable")[:, :m_ref]
        src[rows] = np.sort(subset, axis=1)
    return src, np.broadcast_to((count > 0)[:, None], (n, m_ref))


def _baseline_a(task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                rng: RandomSource, offsets: np.ndarray | None) -> np.ndarray:
    """Item-level reports of ``m_ref`` samples at ε/m each (group privacy, Proposition 1.1)."""
    n = X.shape[0]
    m = task.m_ref
    src, filled = _slot_sources(valid, m, rng)
    Xs = np.take_along_axis(X, src.reshape(src.shape + (1,) * (X.ndim - 2)), axis=1) \
        if X.shape[1] else np.zeros((n, m) + X.shape[2:])
    Xs = np.where(filled.reshape(filled.shape + (1,) * (X.ndim - 2)), Xs, 0.0)
    offs = (np.full(n, task.virtual_offset) if offsets is None
            else np.asarray(offsets, dtype=np.int64))
    with np.errstate(over="ignore", invalid="ignore"):
        phi = kind.sample_map(task, Xs.reshape((n * m,) + Xs.shape[2:])).reshape(n, m, -1)
    phi = np.where(filled[..., None], np.nan_to_num(phi, nan=0.0), 0.0)
    if task.moment_p is not None:
        D = kind.params(task)[0].bound
        phi = np.clip(phi, -D, D)
    params = kind.params(task)
    G = len(task.virtual_groups)
    lens = np.array([len(g) for g in task.virtual_groups], dtype=np.int64)
    gidx = (offs[:, None] + np.arange(m)[None, :]) % G  # virtual group of each slot
    pos = np.cumsum(lens[gidx], axis=1) - lens[gidx]  # where its values start in the report
    out = np.zeros((n, int(lens[gidx].sum(axis=1).max())), dtype=np.int64)
    for g, comps in enumerate(task.virtual_groups):
        ii, jj = np.nonzero(gidx == g)
        if ii.size == 0:
            continue
        vals = phi[ii, jj][:, list(comps)]
        enc = stage2_reports(vals, _ssl_intervals([params[c] for c in comps]),
                             task.virtual_eps[g], rng)
        out[ii[:, None], pos[ii, jj][:, None] + np.arange(len(comps))[None, :]] = enc
    return out


#: How often :func:`compute_report` fell back to the empty-dataset report because the
#: statistic raised (a bug: the tests assert it stays 0). Local only, never sent.
FALLBACKS = 0


def compute_report(task: TaskSpec, samples: Any, labels: Any = None,
                   rng: RandomSource | None = None, *, dim: int | None = None) -> np.ndarray:
    """The report of one device: ``samples`` is its whole local dataset (``(m,)`` or
    ``(m, d)``, any values); returns a flat int64 vector of ``report_length(task)``
    integers — for *every* dataset of that structure (totality, ``docs/privacy.md``).

    Values are sanitized (``uldp.client.dataset.coerce_values``; labels aligned by
    ``align_labels``) and unusable samples ignored; a user with no usable sample reports
    the zero statistic ([D10]). Only a structure that contradicts the task (a scalar
    dataset for a vector task, another dimension) raises :class:`DataError` — a public
    fact the device checks before it accepts a task. ``rng=None`` uses a fresh OS-keyed
    ChaCha20 source (production).
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
        return compute_reports(task, x[None], rng, labels=lab)[0]
    except Exception:  # totality backstop: never silence, never an exception
        FALLBACKS += 1
        empty = np.zeros((1, 0) + x.shape[1:])
        return compute_reports(task, empty, rng,
                               labels=np.zeros((1, 0)) if kind.uses_labels else None)[0]


# The learning kinds (sgd, classify, regress; spec §8–§10) register themselves in KINDS on
# import; importing them here makes every device and collector that loads tasks know them.
import uldp.client.learning  # noqa: E402,F401
