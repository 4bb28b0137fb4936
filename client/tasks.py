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
    "validate_task",
]

METHODS = ("two-stage", "ssl", "baseline-a", "baseline-b")
_EPS_SLACK = 1e-9  # relative float slack when comparing budget sums


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
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise TaskRefused(f"task has unknown fields: {sorted(unknown)}")
        d = dict(d)
        for key in ("components", "khat", "virtual_eps"):
            if key in d:
                d[key] = tuple(d[key])
        if "virtual_groups" in d:
            d["virtual_groups"] = tuple(tuple(g) for g in d["virtual_groups"])
        try:
            return cls(**d)
        except TypeError as exc:
            raise TaskRefused(f"malformed task: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise TaskRefused(f"task is not valid JSON: {exc}") from None


def _kind(task: TaskSpec) -> Kind:
    try:
        return KINDS[task.kind]
    except KeyError:
        raise TaskRefused(f"unknown task kind {task.kind!r}; known: {sorted(KINDS)}") from None


def _finite_pos(name: str, v: Any) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise TaskRefused(f"{name} must be a finite positive number, got {v!r}")


def task_epsilon(task: TaskSpec) -> float:
    """What this report spends (basic composition over the components it carries)."""
    if task.method == "baseline-a":
        G = len(task.virtual_groups)
        return float(sum(len(task.virtual_groups[(task.virtual_offset + j) % G])
                         * task.virtual_eps[(task.virtual_offset + j) % G]
                         for j in range(task.m_ref)))
    return len(task.components) * task.eps_c


def validate_task(task: TaskSpec) -> Kind:
    """Check that the public parameters are consistent; raise :class:`TaskRefused` if not."""
    kind = _kind(task)
    if task.method not in METHODS:
        raise TaskRefused(f"unknown method {task.method!r}; known: {list(METHODS)}")
    expected_stages = (1, 2) if task.method == "two-stage" else (0,)
    if task.stage not in expected_stages:
        raise TaskRefused(f"stage {task.stage} is not valid for method {task.method!r}")
    _finite_pos("epsilon", task.epsilon)
    _finite_pos("eps_c", task.eps_c)
    for name in ("m_ref", "n_delta", "n_run", "dim"):
        v = getattr(task, name)
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise TaskRefused(f"{name} must be a positive integer, got {v!r}")
    heavy = task.moment_p is not None or task.moment_m is not None
    if heavy:
        if task.bound is not None:
            raise TaskRefused("a task has either a support bound or moment parameters, not both")
        _finite_pos("moment_m", task.moment_m)
        if not isinstance(task.moment_p, (int, float)) or task.moment_p < 2:
            raise TaskRefused(f"moment_p must be >= 2, got {task.moment_p!r}")
        if task.kind not in ("mean", "mean-linf", "mean-l2"):
            raise TaskRefused(f"heavy-tailed moments are not defined for kind {task.kind!r}")
    elif kind.bounds is None or task.kind == "mean-l2" or task.kind == "mean-l1":
        _finite_pos("bound", task.bound)
    if task.kind == "mean-l2":
        _finite_pos("kashin_level", task.kashin_level)
        if not 0 < task.kashin_delta <= 1:
            raise TaskRefused(f"kashin_delta must be in (0, 1], got {task.kashin_delta!r}")
        if task.frame_kind not in ("gaussian", "hadamard"):
            raise TaskRefused(f"frame_kind must be gaussian or hadamard, got {task.frame_kind!r}")
    C = kind.n_components(task)
    comp_sets = task.virtual_groups if task.method == "baseline-a" else (task.components,)
    if task.method == "baseline-a":
        if not task.virtual_groups or len(task.virtual_eps) != len(task.virtual_groups):
            raise TaskRefused("baseline-a needs virtual_groups with one virtual_eps each")
        for e in task.virtual_eps:
            _finite_pos("virtual_eps", e)
    for comps in comp_sets:
        if not comps:
            raise TaskRefused("a task must serve at least one component")
        if len(set(comps)) != len(comps):
            raise TaskRefused(f"components must be distinct, got {list(comps)}")
        if min(comps) < 0 or max(comps) >= C:
            raise TaskRefused(f"components must lie in [0, {C}), got {list(comps)}")
    spent = task_epsilon(task)
    if spent > task.epsilon * (1 + _EPS_SLACK):
        raise TaskRefused(
            f"task would spend epsilon={spent:.6g}, above the query budget {task.epsilon:.6g}")
    if task.stage == 2:
        if len(task.khat) != len(task.components):
            raise TaskRefused(f"stage 2 needs one khat per component ({len(task.components)}), "
                              f"got {len(task.khat)}")
        params = kind.params(task)
        for c, k in zip(task.components, task.khat, strict=True):
            if not isinstance(k, (int, np.integer)) or not 0 <= k <= params[c].bins:
                raise TaskRefused(f"khat {k!r} of component {c} is outside [0, {params[c].bins}]")
    elif task.khat:
        raise TaskRefused("only a stage-2 task carries khat")
    return kind


def _served_params(task: TaskSpec, kind: Kind) -> list[Alg1Params]:
    allp = kind.params(task)
    return [allp[c] for c in task.components]


def report_length(task: TaskSpec) -> int:
    """Number of integers in this task's report."""
    kind = validate_task(task)
    if task.method == "two-stage" and task.stage == 1:
        return sum(p.bins for p in _served_params(task, kind))
    if task.method == "baseline-a":
        G = len(task.virtual_groups)
        return sum(len(task.virtual_groups[(task.virtual_offset + j) % G])
                   for j in range(task.m_ref))
    return len(task.components)


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
    """Reports of a batch of users with equal sample counts: ``(users, report_length)``.

    ``samples``: ``(users, m)`` (scalar kinds) or ``(users, m, d)``. ``offsets`` (baseline A
    only) overrides ``task.virtual_offset`` per user. Same code as ``compute_report``.
    """
    kind = validate_task(task)
    X = check_samples(samples, kind.vector, task.dim if kind.vector else None)
    if kind.uses_labels:  # labels travel as one extra last column of the samples
        X = _attach_labels(X, labels)
    if task.method == "baseline-a":
        return _baseline_a(task, kind, X, rng, offsets)
    if task.method == "baseline-b":
        n, m = X.shape[:2]
        if m == 0:
            raise DataError("baseline-b needs at least one sample per user")
        pick = rng.below(m, size=n)  # the device's own uniform choice of one sample
        X = X[np.arange(n), pick][:, None]
    Y = kind.statistics(task, X)[:, list(task.components)]
    params = _served_params(task, kind)
    if task.method == "two-stage" and task.stage == 1:
        return stage1_reports(Y, params, task.eps_c, rng)
    if task.method == "two-stage":
        intervals = [p.clamp_interval(int(k)) for p, k in zip(params, task.khat, strict=True)]
    else:
        intervals = _ssl_intervals(params)
    return stage2_reports(Y, intervals, task.eps_c, rng)


def _attach_labels(X: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    if labels is None:
        raise DataError("this task needs labels for every sample")
    lab = np.asarray(labels, dtype=np.float64)
    if lab.shape != X.shape[:2]:
        raise DataError(f"labels must have one value per sample, shape {X.shape[:2]}, "
                        f"got {lab.shape}")
    if not np.isfinite(lab).all():
        raise DataError("labels contain NaN or infinity")
    Xv = X if X.ndim == 3 else X[..., None]
    return np.concatenate([Xv, lab[..., None]], axis=2)


def _baseline_a(task: TaskSpec, kind: Kind, X: np.ndarray, rng: RandomSource,
                offsets: np.ndarray | None) -> np.ndarray:
    """Item-level reports of every sample at ε/m (group privacy, Proposition 1.1)."""
    n, m = X.shape[:2]
    if m < task.m_ref:
        raise DataError(f"baseline-a needs at least m_ref={task.m_ref} samples, got {m}")
    if m > task.m_ref:  # [D10]: a random subset of size m_ref, chosen on the device
        idx = np.argsort(rng.words(n * m).reshape(n, m), axis=1)[:, : task.m_ref]
        X = np.take_along_axis(X, idx.reshape(idx.shape + (1,) * (X.ndim - 2)), axis=1)
        m = task.m_ref
    offs = (np.full(n, task.virtual_offset) if offsets is None
            else np.asarray(offsets, dtype=np.int64))
    phi = kind.sample_map(task, X.reshape((n * m,) + X.shape[2:])).reshape(n, m, -1)
    if task.moment_p is not None:
        D = kind.params(task)[0].bound
        phi = np.clip(phi, -D, D)
    params = kind.params(task)
    G = len(task.virtual_groups)
    lens = np.array([len(g) for g in task.virtual_groups], dtype=np.int64)
    gidx = (offs[:, None] + np.arange(m)[None, :]) % G  # virtual group of each sample
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


def compute_report(task: TaskSpec, samples: np.ndarray, labels: np.ndarray | None = None,
                   rng: RandomSource | None = None) -> np.ndarray:
    """The report of one device: ``samples`` is its whole local dataset (``(m,)`` or
    ``(m, d)``); returns a flat int64 vector of ``report_length(task)`` integers.

    ``rng=None`` uses a fresh OS-keyed ChaCha20 source (production).
    """
    rng = as_source(rng)
    x = np.asarray(samples)
    lab = None if labels is None else np.asarray(labels)[None]
    return compute_reports(task, x[None], rng, labels=lab)[0]


# The learning kinds (sgd, classify, regress; spec §8–§10) register themselves in KINDS on
# import; importing them here makes every device and collector that loads tasks know them.
import uldp.client.learning  # noqa: E402,F401
