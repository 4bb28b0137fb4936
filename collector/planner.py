"""Query compiler: from a query to groups, stages, tasks, accumulators and the estimate.

Spec: ``user_level_ldp.md`` §2.2 (round template), §3.7 (random balanced partition),
§5.2–5.3 (regimes and grouping), §12 (baselines and SSL), [D1], [D2], [D5], [D7], [D11],
[D12], [D22], [D23].

A :class:`QuerySpec` is what an analyst asks for. ``compile_query`` turns it into a
:class:`Plan`, which the in-process simulation and the gRPC collector use alike:

* ``assign(slot)`` maps the r-th enrolled device to its group and stage through a
  permutation drawn from the query's public seed *before* any data are used (INV-3);
* ``task_for(group, stage, khat)`` is the public task that device receives;
* ``new_accumulator`` / ``khat_from`` / ``finalize`` are the collector's aggregation.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from typing import Any

import numpy as np

from uldp.client.regimes import MODES, Grouping, group_components
from uldp.client.statistics import KINDS, Kind
from uldp.client.tasks import METHODS, TaskSpec, report_limit, validate_task
from uldp.collector.estimators.estimate import Estimate, combine
from uldp.collector.estimators.transforms import output_transform, project_simplex
from uldp.collector.estimators.two_stage import BinAccumulator, ValueAccumulator

__all__ = ["MEAN_KINDS", "Plan", "QuerySpec", "VirtualAccumulator", "compile_query"]

MEAN_KINDS = ("mean", "mean-linf", "mean-l2", "mean-l1", "distribution")


@dataclass(frozen=True)
class QuerySpec:
    """An analyst's query (all public).

    ``users``: target number of devices ``n``; ``samples``: reference ``m`` ([D10]);
    ``bound``: support ``D`` (``None`` with ``moment_p``/``moment_m`` for heavy tails);
    ``dim``: ``d`` (alphabet size ``A`` for ``distribution``).
    """

    kind: str
    epsilon: float
    users: int
    samples: int
    dim: int = 1
    bound: float | None = 1.0
    method: str = "two-stage"
    moment_p: float | None = None
    moment_m: float | None = None
    frame_kind: str = "gaussian"
    frame_seed: int = 0
    mode: str = "default"
    seed: int = 0
    query_id: str = "query"
    confidence: float = 0.95
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # learning kinds

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}, got {self.method!r}")
        if not isinstance(self.epsilon, (int, float)) or not math.isfinite(self.epsilon) \
                or self.epsilon <= 0:
            raise ValueError(f"epsilon must be a finite positive number, got {self.epsilon!r}")
        for name in ("users", "samples", "dim"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.users < 2:
            raise ValueError(f"users must be >= 2 (one per stage at least), got {self.users}")
        heavy = self.moment_p is not None
        if heavy == (self.bound is not None):
            raise ValueError("give either bound (bounded support) or moment_p and moment_m "
                             "(heavy tails), exactly one of them")
        if self.bound is not None and (not math.isfinite(self.bound) or self.bound <= 0):
            raise ValueError(f"bound must be a finite positive number, got {self.bound!r}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QuerySpec:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown query fields: {sorted(unknown)}")
        return cls(**d)


@dataclass
class VirtualAccumulator:
    """Baseline A: one value accumulator per virtual group; reports split per sample."""

    task: TaskSpec
    parts: list[ValueAccumulator]

    def add(self, reports: np.ndarray, offsets: np.ndarray) -> None:
        r = np.asarray(reports)
        if r.ndim == 1:
            r = r[None]
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
        if offsets.size != r.shape[0]:
            raise ValueError("baseline-a needs one offset per report")
        G = len(self.task.virtual_groups)
        lens = np.array([len(g) for g in self.task.virtual_groups])
        gidx = (offsets[:, None] + np.arange(self.task.m_ref)[None]) % G
        total = lens[gidx].sum(axis=1)
        if np.any(total > r.shape[1]):
            raise ValueError("baseline-a report is shorter than its layout")
        pos = np.cumsum(lens[gidx], axis=1) - lens[gidx]
        for g, acc in enumerate(self.parts):
            ii, jj = np.nonzero(gidx == g)
            if ii.size:
                cols = pos[ii, jj][:, None] + np.arange(lens[g])[None]
                acc.add(r[ii[:, None], cols])

    def merge(self, other: VirtualAccumulator) -> None:
        for a, b in zip(self.parts, other.parts, strict=True):
            a.merge(b)

    @property
    def count(self) -> int:
        return sum(p.count for p in self.parts)


@dataclass(frozen=True)
class Plan:
    spec: QuerySpec
    kind: Kind
    grouping: Grouping
    template: TaskSpec  # a valid task of group 0, stage 1 (or 0), for public parameters

    # ---- public structure ---------------------------------------------------------------
    @property
    def two_stage(self) -> bool:
        return self.spec.method == "two-stage"

    @property
    def phases(self) -> list[int]:
        return [1, 2] if self.two_stage else [0]

    @property
    def n_groups(self) -> int:
        return 1 if self.spec.method == "baseline-a" else len(self.grouping.groups)

    @cached_property
    def n_components(self) -> int:
        return self.kind.n_components(self.template)

    def group_size(self, g: int) -> int:
        n, G = self.spec.users, self.n_groups
        return n // G + (1 if g < n % G else 0)

    def stage_size(self, g: int, stage: int) -> int:
        size = self.group_size(g)
        if stage == 0:
            return size
        return size // 2 if stage == 1 else size - size // 2

    @cached_property
    def _ranks(self) -> np.ndarray:
        perm = np.random.default_rng(self.spec.seed).permutation(self.spec.users)
        ranks = np.empty_like(perm)
        ranks[perm] = np.arange(perm.size)
        return ranks

    def assign(self, slot: int) -> tuple[int, int]:
        """``(group, stage)`` of the device that took enrolment slot ``slot`` (0-based)."""
        if not 0 <= slot < self.spec.users:
            raise ValueError(f"slot {slot} outside [0, {self.spec.users})")
        g, s = self.assign_all()
        return int(g[slot]), int(s[slot])

    def assign_all(self) -> tuple[np.ndarray, np.ndarray]:
        """Group and stage of every slot (vectorized; [D1], [D2]); computed once."""
        return self._assignment

    @cached_property
    def _assignment(self) -> tuple[np.ndarray, np.ndarray]:
        r = self._ranks
        G = self.n_groups
        group = r % G
        if not self.two_stage:
            return group, np.zeros_like(group)
        q = r // G
        sizes = np.array([self.group_size(g) for g in range(G)])
        stage = np.where(q < sizes[group] // 2, 1, 2)
        return group, stage

    def offset_for(self, slot: int | np.ndarray) -> np.ndarray:
        """Baseline A: virtual offset of a slot (its virtual users are balanced)."""
        G = len(self.grouping.groups)
        return (self._ranks[slot] * self.spec.samples) % G

    # ---- tasks ------------------------------------------------------------------------
    def task_for(self, group: int, stage: int, khat: tuple[int, ...] | None = None,
                 slot: int | None = None) -> TaskSpec:
        if self.spec.method == "baseline-a":
            off = int(self.offset_for(slot)) if slot is not None else 0
            return replace(self.template, virtual_offset=off)
        grp = self.grouping.groups[group]
        task = replace(self.template, components=grp.components, eps_c=grp.eps_c,
                       n_run=max(self.group_size(group), 1), stage=stage,
                       khat=tuple(khat) if stage == 2 else ())
        if stage == 2 and khat is None:
            raise ValueError("a stage-2 task needs khat from stage 1")
        validate_task(task)
        return task

    # ---- aggregation --------------------------------------------------------------------
    def new_accumulator(self, group: int, stage: int,
                        khat: tuple[int, ...] | None = None):
        """Accumulator for the reports of ``(group, stage)``; stage 2 needs the ``k̂``."""
        if self.spec.method == "baseline-a":
            t = self.template
            params = self.kind.params(t)
            parts = [ValueAccumulator([(-params[c].bound, params[c].bound) for c in comps],
                                      report_limit(t)) for comps in t.virtual_groups]
            return VirtualAccumulator(t, parts)
        task = self.task_for(group, stage, khat)
        allp = self.kind.params(task)
        served = [allp[c] for c in task.components]
        if stage == 1:
            return BinAccumulator(served, report_limit(task))
        if stage == 2:
            intervals = [p.clamp_interval(k) for p, k in zip(served, task.khat, strict=True)]
        else:
            intervals = [(-p.bound, p.bound) for p in served]
        return ValueAccumulator(intervals, report_limit(task))

    def khat_from(self, stage1: dict[int, BinAccumulator]) -> dict[int, tuple[int, ...]]:
        """``k̂`` per group from its stage-I accumulator (0 = fallback when it is missing)."""
        out = {}
        for g in range(self.n_groups):
            acc = stage1.get(g)
            comps = self.grouping.groups[g].components
            out[g] = acc.khat() if acc is not None else tuple(0 for _ in comps)
        return out

    def finalize(self, final: dict[int, Any]) -> Estimate:
        """The estimate from the last phase's accumulators (per group)."""
        blocks = []
        counts = {"reports": 0}
        if self.spec.method == "baseline-a":
            acc = final.get(0)
            for comps, part in zip(self.template.virtual_groups, acc.parts, strict=True):
                blocks.append((comps, part.means(), part.covariance()))
            counts["reports"] = acc.count // max(self.spec.samples, 1)
        else:
            for g, grp in enumerate(self.grouping.groups):
                acc = final.get(g)
                if acc is None:
                    k = len(grp.components)
                    bounds = [self.kind.params(self.template)[c].bound for c in grp.components]
                    blocks.append((grp.components, np.zeros(k), np.diag(np.square(bounds))))
                    continue
                blocks.append((grp.components, acc.means(), acc.covariance()))
                counts["reports"] += acc.count
        T = output_transform(self.template, self.n_components)
        est = combine(self.n_components, blocks, T, self.spec.confidence, counts)
        if self.spec.kind == "distribution":
            est.extra["projected"] = project_simplex(est.values)
        est.extra["regime"] = self.grouping.regime
        return est


def _grouping_for(spec: QuerySpec, kind: Kind, probe: TaskSpec) -> Grouping:
    C = kind.n_components(probe)
    if spec.method == "baseline-a":
        return group_components(C, spec.epsilon / spec.samples, spec.users * spec.samples,
                                spec.mode)
    return group_components(C, spec.epsilon, spec.users, spec.mode)


def compile_query(spec: QuerySpec) -> Plan:
    """Compile a query into its plan (raises ValueError for an impossible configuration)."""
    kind = KINDS[spec.kind]
    base = TaskSpec(
        query_id=spec.query_id, kind=spec.kind, epsilon=float(spec.epsilon),
        m_ref=spec.samples, n_delta=spec.users, n_run=spec.users, components=(0,),
        eps_c=float(spec.epsilon), method=spec.method,
        stage=1 if spec.method == "two-stage" else 0, dim=spec.dim,
        bound=None if spec.bound is None else float(spec.bound),
        moment_p=spec.moment_p, moment_m=spec.moment_m,
        frame_seed=spec.frame_seed, frame_kind=spec.frame_kind, extra=dict(spec.extra),
    )
    grouping = _grouping_for(spec, kind, base)
    if spec.method == "baseline-a":
        template = replace(base, components=(0,), eps_c=float(spec.epsilon),
                           virtual_groups=tuple(g.components for g in grouping.groups),
                           virtual_eps=tuple(g.eps_c for g in grouping.groups))
    else:
        g0 = grouping.groups[0]
        template = replace(base, components=g0.components, eps_c=g0.eps_c)
    validate_task(template)
    plan = Plan(spec, kind, grouping, template)
    if spec.method == "two-stage":
        smallest = min(plan.group_size(g) for g in range(plan.n_groups))
        if smallest < 2:
            raise ValueError(
                f"{spec.users} users are too few for {plan.n_groups} groups of the "
                f"{grouping.regime} regime: every Algorithm-1 run needs >= 2 users ([D2])")
        worst = min(plan.stage_size(g, 1) * grp.eps_c**2
                    for g, grp in enumerate(grouping.groups))
        if worst < 200:
            warnings.warn(
                f"stage I of the smallest group has n_I·ε_c² = {worst:.0f} < 200: the interval "
                "may miss the mean (spec §4.5 rule of thumb n·ε_c² >= 400)", stacklevel=2)
    return plan
