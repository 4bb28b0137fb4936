"""Query compiler: one MeanEst invocation, from a query to groups, stages and tasks.

See ``docs/architecture.md`` and ``docs/algorithms.md``. Sections of ``docs/algorithms.md``: §2.2
(round template), §3.7 (random balanced partition), §4.2/§4.6 (Algorithm-1 parameters),
§5.2–5.3 (regimes and grouping), §12 (baselines and SSL), [D1], [D2], [D5], [D7], [D11],
[D12].

A :class:`QuerySpec` is what an analyst asks for. ``compile_query`` turns it into a
:class:`Plan`: the grouping of its components, the random balanced assignment of
enrolment slots to (group, stage) drawn from the query's public seed *before* any data are
used (INV-3), the Algorithm-1 parameters of every group, and the method's collector half
(``uldp.collector.methods``), which builds the public tasks, accumulators and the estimate.
Programs (``uldp.collector.programs``) run plans phase by phase, in simulation and in the
service alike.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.kinds import KINDS, Kind
from uldp.client.mechanisms import ORACLES, SCALARS
from uldp.client.params import Alg1Params, bounded_params, heavy_tailed_params
from uldp.client.regimes import MODES, Grouping, group_components
from uldp.client.tasks import MAX_RECORDS, validate_task
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import Accumulator
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.methods import METHOD_PLANS, MethodPlan, Published
from uldp.collector.methods.alike import ASSUMPTIONS, note_assumption
from uldp.collector.methods.auto import resolve_auto
from uldp.collector.methods.sizing import OBJECTIVES
from uldp.collector.placement import KeyedPermutation, stage_sizes
from uldp.collector.plan_advice import too_few_users as _too_few_users

__all__ = ["MEAN_KINDS", "MECHANISM_FIELDS", "Plan", "QuerySpec", "compile_query",
           "predicted_mse", "with_best_mechanisms"]

MEAN_KINDS = ("mean", "mean-linf", "mean-l2", "mean-l1", "distribution")
#: ways of placing enrolment slots (``QuerySpec.placement``)
PLACEMENTS = ("feistel", "permutation")
#: the default method: chosen per query by ``uldp.collector.methods.auto``
AUTO = "auto"
#: the method of a grouped mean (``uldp.collector.methods.grouped``)
GROUPED = "grouped-ssl"
#: method names that resolve to a concrete method at compile time (public values only)
RESOLVERS = {AUTO: resolve_auto}


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
    method: str = "auto"
    moment_p: float | None = None
    moment_m: float | None = None
    frame_kind: str = "gaussian"
    frame_seed: int = 0
    mode: str = "default"
    seed: int = 0
    query_id: str = "query"
    confidence: float = 0.95
    stage1_share: float = 0.5  # two-stage: the share of each group's users in stage I
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # learning kinds
    #: the frequency oracle of categorical reports (stage-I bins, method ``oracle``): a
    #: name of ``uldp.client.mechanisms.ORACLES`` or ``best`` (least variance for the
    #: public (k, ε), ``docs/mechanisms.md``)
    oracle: str = "laplace"
    #: the scalar randomizer of value reports: a name of ``SCALARS``, ``best`` (the
    #: worst-case best for ε) or ``adaptive`` (two-stage-sized: chosen from stage I)
    randomizer: str = "laplace"
    records: int = 1  # method ``oracle``: records each device samples
    #: what ``auto`` and a sized stage-II window minimize: ``width`` — the expected width
    #: of the interval at ``confidence`` (what a result prints) — or ``mse``
    objective: str = "width"
    #: what the analyst states about the users (``none``, ``users-alike``), as publicly as
    #: the range: ``uldp.collector.methods.alike``
    assume: str = "none"
    #: the public range ``[lo, hi]`` of one value (kinds with ``Kind.ranged``); None: the
    #: range is ``[-bound, bound]``. With a range, ``bound`` is ``hi/2 − lo/2`` (set here)
    lo: float | None = None
    hi: float | None = None
    #: group-by (kind ``mean-by``): the devices' categorical dataset of the groups, and the
    #: groups' public names in code order (``dim`` is their number)
    by: str | None = None
    groups: tuple[str, ...] = ()
    #: how enrolment slots are placed: ``feistel`` (a keyed permutation computed on demand,
    #: ``uldp.collector.placement``) or ``permutation`` (an array of every slot's rank
    #: drawn with numpy: queries stored before the keyed permutation existed)
    placement: str = "feistel"

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        if self.by is not None or self.groups or (self.kind in KINDS
                                                  and KINDS[self.kind].grouped):
            self._check_groups()
        if self.lo is not None or self.hi is not None:
            self._check_range()
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        if self.method not in METHOD_PLANS and self.method not in RESOLVERS:
            raise ValueError(f"method must be one of {[*RESOLVERS, *METHOD_PLANS]}, got "
                             f"{self.method!r}")
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
        if not (isinstance(self.stage1_share, (int, float)) and 0 < self.stage1_share < 1):
            raise ValueError(f"stage1_share must be in (0, 1), got {self.stage1_share!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name, allowed in (("oracle", [*ORACLES, "best"]), ("objective", list(OBJECTIVES)),
                              ("randomizer", [*SCALARS, "best", "adaptive"]),
                              ("assume", list(ASSUMPTIONS))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if not isinstance(self.records, int) or isinstance(self.records, bool) \
                or not 1 <= self.records <= MAX_RECORDS:
            raise ValueError(f"records must be an integer in [1, {MAX_RECORDS}], got "
                             f"{self.records!r}")

    def _check_groups(self) -> None:
        if self.kind not in KINDS or not KINDS[self.kind].grouped:
            raise ValueError(f"by/groups go with kind mean-by, not {self.kind}")
        if not isinstance(self.by, str) or not self.by:
            raise ValueError("a grouped mean names its groups' dataset (by)")
        if self.groups and len(self.groups) != self.dim:
            raise ValueError(f"{len(self.groups)} group names for dim {self.dim} groups")

    def _check_range(self) -> None:
        lo, hi = self.lo, self.hi
        if lo is None or hi is None:
            raise ValueError("lo and hi go together (the public range of one value)")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                   and math.isfinite(v) for v in (lo, hi)) or not lo < hi:
            raise ValueError(f"the range needs finite lo < hi, got [{lo!r}, {hi!r}]")
        if self.kind in KINDS and not KINDS[self.kind].ranged:
            raise ValueError(f"kind {self.kind} has no range [lo, hi] (give bound)")
        if self.moment_p is not None:
            raise ValueError("a range [lo, hi] and moment_p/moment_m are alternatives")
        D = float(hi) / 2 - float(lo) / 2
        if self.bound is not None and self.bound not in (1.0, D):
            raise ValueError(f"bound {self.bound!r} contradicts the range [{lo!r}, {hi!r}] "
                             f"(its bound is {D!r}); give one of them")
        object.__setattr__(self, "lo", float(lo))
        object.__setattr__(self, "hi", float(hi))
        object.__setattr__(self, "bound", D)

    @property
    def value_range(self) -> tuple[float, float] | None:
        """The public range of one value: ``[lo, hi]``, else ``[-bound, bound]`` (None for
        a heavy-tailed query)."""
        if self.lo is not None and self.hi is not None:
            return (self.lo, self.hi)
        return None if self.bound is None else (-float(self.bound), float(self.bound))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["groups"] = list(self.groups)  # JSON's form: a stored spec compares equal
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QuerySpec:
        """A stored spec (one stored before ``placement`` existed keeps its permutation)."""
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown query fields: {sorted(unknown)}")
        return cls(**{"placement": "permutation", **d})


@dataclass(frozen=True)
class Plan:
    """One compiled MeanEst invocation (see the module docstring)."""

    spec: QuerySpec
    kind: Kind
    grouping: Grouping
    template: TaskSpec  # the kind-level public fields every task of the plan shares
    #: notes for whoever shows the plan to a person (e.g. a weak stage I); never raised or
    #: warned here: the CLI prints them, the scikit-style estimators warn with them
    advisories: list[str] = field(default_factory=list, compare=False)
    #: what ``method="auto"`` chose and why (empty when the query named its method)
    auto: dict[str, Any] = field(default_factory=dict, compare=False)
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- public structure ---------------------------------------------------------------
    @property
    def method(self) -> MethodPlan:
        return METHOD_PLANS[self.spec.method]

    @property
    def phases(self) -> list[int]:
        """The stages of the method in phase order (two-stage: [1, 2]; else [0])."""
        return list(self.method.stages)

    @property
    def two_stage(self) -> bool:
        return len(self.phases) == 2

    @property
    def n_groups(self) -> int:
        return self.method.n_groups(self)

    @cached_property
    def n_components(self) -> int:
        return self.kind.n_components(self.template)

    def group_size(self, g: int) -> int:
        n, G = self.spec.users, self.n_groups
        return n // G + (1 if g < n % G else 0)

    def stage1_size(self, g: int) -> int:
        """Stage-I users of group ``g``: ``⌊share·size⌋``, at least 1 and leaving 1 ([D2])."""
        return self.stage_sizes(g)[0]

    def stage_shares(self) -> tuple[float, ...]:
        """The shares of every stage but the last (two-stage: ``stage1_share``; a method
        with more stages says its own, ``stage_shares(spec)``)."""
        own = getattr(self.method, "stage_shares", None)
        return tuple(own(self.spec)) if own is not None else (self.spec.stage1_share,)

    def stage_sizes(self, g: int) -> list[int]:
        """Users of group ``g`` in each of the method's stages, in phase order: every stage
        but the last ``⌊share·size⌋`` users, at least 1 and leaving 1 to the rest ([D2])."""
        key = ("sizes", g)
        if key not in self._cache:
            self._cache[key] = stage_sizes(self.group_size(g), self.stage_shares(),
                                           len(self.phases))
        return self._cache[key]

    def stage_size(self, g: int, stage: int) -> int:
        if stage == 0:
            return self.group_size(g)
        return self.stage_sizes(g)[self.phases.index(stage)]

    @cached_property
    def permutation(self) -> KeyedPermutation:
        """The public permutation of enrolment slots (``rank = π(slot)``)."""
        return KeyedPermutation(self.spec.users, self.spec.seed)

    @cached_property
    def _legacy_ranks(self) -> np.ndarray:
        """``placement = "permutation"``: every slot's rank, drawn with numpy."""
        perm = np.random.default_rng(self.spec.seed).permutation(self.spec.users)
        ranks = np.empty_like(perm)
        ranks[perm] = np.arange(perm.size)
        return ranks

    def rank(self, slot: int | np.ndarray) -> np.ndarray:
        """The rank of enrolment slot(s) ``slot`` in the public permutation."""
        if self.spec.placement == "permutation":
            return self._legacy_ranks[slot]
        return self.permutation.rank(slot)

    def slot_of_rank(self, rank: int) -> int:
        """The enrolment slot of rank ``rank`` (the inverse of :meth:`rank`)."""
        if self.spec.placement == "permutation":
            return int(np.flatnonzero(self._legacy_ranks == rank)[0])
        return self.permutation.slot_of(rank)

    def _cell(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(group, stage)`` of rank(s) ``r``: the first ``size`` ranks of a group (by
        ``r // G``) are its stage I ([D1], [D2])."""
        G = self.n_groups
        group = r % G
        if len(self.phases) == 1:
            return group, np.zeros_like(group)
        q = r // G
        bounds = np.array([np.cumsum(self.stage_sizes(g))[:-1] for g in range(G)])
        pos = (q[..., None] >= bounds[group]).sum(axis=-1)
        stage = np.asarray(self.phases)[pos]
        return group, stage

    def assign(self, slot: int) -> tuple[int, int]:
        """``(group, stage)`` of the device that took enrolment slot ``slot`` (0-based)."""
        if not 0 <= slot < self.spec.users:
            raise ValueError(f"slot {slot} outside [0, {self.spec.users})")
        r = (int(self._legacy_ranks[slot]) if self.spec.placement == "permutation"
             else self.permutation.rank_of(int(slot)))
        G = self.n_groups
        g = r % G
        if len(self.phases) == 1:
            return g, 0
        pos = int(np.searchsorted(np.cumsum(self.stage_sizes(g))[:-1], r // G, side="right"))
        return g, self.phases[pos]

    def assign_all(self) -> tuple[np.ndarray, np.ndarray]:
        """Group and stage of every slot (vectorized; [D1], [D2]): an array per slot, for
        simulations — the service places one slot at a time (:meth:`assign`)."""
        return self._cell(self.rank(np.arange(self.spec.users)))

    def representative(self, group: int, stage: int) -> int | None:
        """Some enrolment slot of ``(group, stage)`` (None if it has none): its first
        rank, mapped back through the permutation."""
        G = self.n_groups
        if not 0 <= group < G or stage not in self.phases or self.stage_size(group, stage) <= 0:
            return None
        before = sum(self.stage_sizes(group)[:self.phases.index(stage)])
        r = group + G * before
        return self.slot_of_rank(r) if r < self.spec.users else None

    def offset_for(self, slot: int | np.ndarray) -> np.ndarray:
        """Baseline A: virtual offset of a slot (its virtual users are balanced)."""
        G = len(self.grouping.groups)
        return (self.rank(slot) * self.spec.samples) % G

    # ---- Algorithm-1 parameters ---------------------------------------------------------
    def group_params(self, g: int) -> list[Alg1Params]:
        """Algorithm-1 parameters of every component for group ``g``'s runs (cached)."""
        # bounded support: the same parameters for every group (one list, not one per group)
        key = ("params", g if self.spec.moment_p is not None else -1)
        if key not in self._cache:
            self._cache[key] = self._params(g)
        return self._cache[key]

    def _params(self, g: int) -> list[Alg1Params]:
        spec, t = self.spec, self.template
        C = self.n_components
        if spec.moment_p is not None:
            assert spec.moment_m is not None
            if self.n_groups == len(self.grouping.groups):  # one Algorithm-1 run per group
                eps_c, n_run = self.grouping.groups[g].eps_c, self.group_size(g)
            else:  # virtual groups (baseline A): the whole population at the query's ε
                eps_c, n_run = spec.epsilon, spec.users
            M_c = self.kind.moment_scale(t, spec.moment_p, spec.moment_m)
            p = heavy_tailed_params(spec.moment_p, M_c, spec.samples, max(n_run, 1), eps_c)
            return [p] * C
        n_delta = spec.users * self.kind.delta_users(t)
        cache: dict[float, Alg1Params] = {}
        out = []
        for b in self.kind.component_bounds(t):
            key = float(b)
            if key not in cache:
                cache[key] = bounded_params(key, spec.samples, n_delta)
            out.append(cache[key])
        return out

    # ---- tasks ------------------------------------------------------------------------
    def group_task(self, group: int, stage: int, **fields_: Any) -> TaskSpec:
        """The task of ``(group, stage)``: the template with the group's components and
        ε share, the heavy-tail clamp, and the method's fields (bins or intervals)."""
        grp = self.grouping.groups[min(group, len(self.grouping.groups) - 1)]
        stat = self.group_params(group)[0].bound if self.spec.moment_p is not None else None
        base: dict[str, Any] = dict(components=grp.components, eps_c=grp.eps_c, stage=stage,
                                    stat_bound=stat)
        base.update(fields_)
        task = replace(self.template, **base)
        validate_task(task)
        return task

    def task_for(self, group: int, stage: int, khat: tuple[int, ...] | None = None,
                 slot: int | None = None, previous: Published | None = None) -> TaskSpec:
        """The public task of ``(group, stage)``; a stage-II task needs what stage I
        published (``previous``) or, for the paper's rule, the group's ``k̂``."""
        if stage == 2 and previous is None:
            if khat is None:
                raise ValueError("a stage-2 task needs khat (or what stage 1 published)")
            from uldp.collector.methods.two_stage import paper_intervals

            previous = {"intervals": {str(group): paper_intervals(self, group, tuple(khat))}}
        return self.method.task(self, group, stage, previous, slot)

    # ---- aggregation --------------------------------------------------------------------
    def new_accumulator(self, group: int, stage: int, khat: tuple[int, ...] | None = None,
                        previous: Published | None = None) -> Accumulator:
        """Accumulator for the reports of ``(group, stage)``."""
        return self.method.accumulator(self, self.task_for(group, stage, khat,
                                                           previous=previous))

    def publish(self, stage: int, accs: dict[int, Any], previous: Published | None = None
                ) -> Published:
        """What closing ``stage`` publishes (two-stage: ``k̂`` and intervals per group; a
        method with more stages may read what the stage before published, ``previous``)."""
        with_previous = getattr(self.method, "publish_with", None)
        if with_previous is not None:
            return with_previous(self, stage, accs, previous)
        return self.method.publish(self, stage, accs)

    def khat_from(self, stage1: dict[int, Any]) -> dict[int, tuple[int, ...]]:
        """``k̂`` per group from its stage-I accumulator (0 = fallback when it is missing)."""
        pub = self.publish(1, stage1)
        return {int(g): tuple(k) for g, k in pub["khat"].items()}

    def finalize(self, final: dict[int, Any], previous: Published | None = None) -> Estimate:
        """The estimate from the last phase's accumulators (per group), with the
        assumption its interval rests on (``uldp.collector.methods.alike.note_assumption``)."""
        return note_assumption(self, self.method.finalize(self, final, previous))

    def predicted_mse(self, sample_var: np.ndarray, stat_var: np.ndarray | None = None,
                      stat_mean: np.ndarray | None = None) -> float:
        """Predicted ``E‖μ̂ − μ‖²`` given each component's per-sample variance ``σ_c²``
        (and optionally the variance ``stat_var`` of the user statistics across users:
        with unequal counts and spread-out user means it replaces ``σ_c²/m``).

        Spec §4.5 (``Var μ̂ = σ²/(m|S_II|) + 2(3h+2Δ)²/(|S_II| ε_c²)``), §5.5 (sum over
        components), §6.1 (through the output transform), §12 (SSL, baselines). The
        method gives the per-component variances; the Laplace term is the exact variance
        of the discrete noise plus the randomized-rounding bound.
        """
        return float(self.predicted_variance(sample_var, stat_var, stat_mean).sum())

    def predicted_variance(self, sample_var: np.ndarray, stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        """Predicted variance of every *output* (what :meth:`predicted_mse` sums): the
        method's per-component variances through the output transform. The analyst
        console's preview turns it into interval widths before a query runs."""
        sv = None if stat_var is None else np.asarray(stat_var, dtype=np.float64)
        sm = None if stat_mean is None else np.asarray(stat_mean, dtype=np.float64)
        v = self.method.component_variance(self, np.asarray(sample_var, dtype=np.float64), sv,
                                           sm)
        T = self.kind.transform(self.template, self.n_components)
        return np.asarray(v if T is None else np.square(T) @ v, dtype=np.float64)


    def reference_prediction(self, population: str, draws: int | None = None
                             ) -> tuple[np.ndarray, np.ndarray]:
        """``(mse, half_width)`` of every output on a reference population of users
        (``uldp.collector.methods.sizing.reference_population``: ``alike`` — every user's
        statistic the mean of ``m`` samples of the support's largest variance ``D²``;
        ``spread`` — statistics uniform on the support; ``ends`` — half at each end):
        what ``auto`` compares and the preview shows before any data exist. A method that
        sizes its stage II from stage I predicts itself (``predict``); for the others the
        interval is the normal one of their predicted variance."""
        C = self.n_components
        z = NormalDist().inv_cdf(0.5 + self.spec.confidence / 2)
        D2 = np.array([self.group_params(g)[c].bound ** 2
                       for g, grp in enumerate(self.grouping.groups)
                       for c in grp.components])
        order = [c for grp in self.grouping.groups for c in grp.components]
        bound2 = np.zeros(C)
        bound2[order] = D2
        predict = getattr(self.method, "predict", None)
        if predict is not None:
            kw = {} if draws is None else {"draws": draws}
            mse, half = predict(self, np.zeros(C), population=population, **kw)
            sd = half / z
        else:
            share = {"alike": 1.0 / self.spec.samples, "spread": 1.0 / 3.0, "ends": 1.0}
            if population not in share:
                raise ValueError(f"unknown reference population {population!r}")
            sample = bound2 if population != "spread" else bound2 / 3.0
            mse = self.method.component_variance(self, sample, bound2 * share[population],
                                                 np.zeros(C))
            sd = np.sqrt(np.maximum(mse, 0.0))
        T = self.kind.transform(self.template, C)
        if T is None:
            return mse, z * sd
        T2 = np.square(np.asarray(T, dtype=np.float64))
        return T2 @ mse, z * np.sqrt(T2 @ (sd * sd))


#: the fields an analyst's query may set to choose the report mechanisms and the objective
MECHANISM_FIELDS = ("oracle", "randomizer", "objective", "stage1_share", "records", "assume")


def with_best_mechanisms(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields of an analyst's query with the mechanisms filled in: a query that names
    its method (``--method X``) but not its mechanisms runs that method with the best ones
    for its public parameters — the oracle of least variance for its categories
    (``oracle="best"``) and the worst-case best scalar randomizer (``randomizer="best"``;
    ``two-stage-sized``: the one stage I points to, ``"adaptive"``). ``auto`` picks its
    own, and baseline A reports with discrete Laplace only. A mechanism the query names is
    kept (issue 24 item 4: what ``auto`` would run with the same method, not Laplace)."""
    out = dict(fields)
    plan = METHOD_PLANS.get(out.get("method", "auto"))
    if plan is None or getattr(plan, "fixed_randomizer", None):  # auto; baseline A
        return out
    out.setdefault("oracle", "best")
    out.setdefault("randomizer",
                   "adaptive" if getattr(plan, "adaptive_randomizer", False) else "best")
    return out


def predicted_mse(plan: Plan, sample_var: np.ndarray,
                  stat_var: np.ndarray | None = None,
                  stat_mean: np.ndarray | None = None) -> float:
    """:meth:`Plan.predicted_mse` as a function."""
    return plan.predicted_mse(sample_var, stat_var, stat_mean)


def _grouping_for(spec: QuerySpec, kind: Kind, probe: TaskSpec) -> Grouping:
    """The ε-regime grouping of the components ([D7], [D11]) over the method's runs (a
    method whose reports serve every component at once groups them itself)."""
    method = METHOD_PLANS[spec.method]
    own = getattr(method, "grouping", None)
    if own is not None:
        return own(spec, kind.n_components(probe))
    eps, n = method.grouping_budget(spec)
    return group_components(kind.n_components(probe), eps, n, spec.mode)


def _template(spec: QuerySpec) -> TaskSpec:
    return TaskSpec(
        query_id=spec.query_id, kind=spec.kind, method=METHOD_PLANS[spec.method].device_method,
        stage=METHOD_PLANS[spec.method].stages[0], epsilon=float(spec.epsilon),
        eps_c=float(spec.epsilon), components=(0,), dim=spec.dim,
        bound=None if spec.bound is None else float(spec.bound),
        frame_seed=spec.frame_seed, frame_kind=spec.frame_kind, extra=dict(spec.extra),
        range=_task_range(spec), by=spec.by)


def _task_range(spec: QuerySpec) -> tuple[float, float] | None:
    """The task's ``range`` of a ranged query; None (omitted: ``[-bound, bound]``) when the
    range is symmetric, so such tasks keep the bytes of ``bound`` alone."""
    if spec.lo is None or spec.hi is None or spec.lo == -spec.hi:
        return None
    return (spec.lo, spec.hi)


def compile_query(spec: QuerySpec, grouping: Grouping | None = None) -> Plan:
    """Compile a query into its plan (raises ValueError for an impossible configuration).

    ``method="auto"`` resolves to a concrete method and grouping first
    (``uldp.collector.methods.auto``: public values only, the same on every replica).
    ``grouping`` replaces the ε-regime grouping of the components by one a program chose
    itself (the windowed SGD rounds, ``uldp.collector.models.windows``)."""
    if grouping is not None:
        return _compile(spec, grouping)
    kind = KINDS.get(spec.kind)
    if kind is not None and kind.grouped:  # one report over every group: grouped-ssl
        if spec.method not in (AUTO, GROUPED):
            raise ValueError(f"a grouped mean runs method {GROUPED} (or auto), not "
                             f"{spec.method}")
        plan = _compile(replace(spec, method=GROUPED))
        if spec.method != GROUPED:  # auto
            plan.auto.update({"chosen": GROUPED, "why": "a grouped mean: every device "
                              "reports all groups in one single-stage report"})
        return plan
    resolve = RESOLVERS.get(spec.method)
    if resolve is None:
        return _compile(spec)
    concrete, record = resolve(spec, _compile)
    plan = _compile(concrete)
    plan.auto.update(record)
    return plan


def _compile(spec: QuerySpec, grouping: Grouping | None = None) -> Plan:
    kind = KINDS[spec.kind]
    template = _template(spec)
    if grouping is None:
        grouping = _grouping_for(spec, kind, template)
    plan = Plan(spec, kind, grouping, template)
    plan.task_for(0, plan.phases[0])  # the first task must pass the device's checks
    try:  # a note, never a reason to refuse: extreme ranges may overflow the prediction
        with np.errstate(over="ignore", invalid="ignore"):
            few = _too_few_users(plan)
    except (ArithmeticError, ValueError):
        few = None
    if few:
        plan.advisories.append(few)
    if len(plan.phases) > 1:
        smallest = min(plan.group_size(g) for g in range(plan.n_groups))
        if smallest < len(plan.phases):
            raise ValueError(
                f"{spec.users} users are too few for {plan.n_groups} groups of the "
                f"{grouping.regime} regime: every group needs >= {len(plan.phases)} users "
                "(one per stage, [D2])")
    if plan.two_stage:
        worst = min(plan.stage_size(g, 1) * grp.eps_c**2
                    for g, grp in enumerate(grouping.groups))
        if worst < 200:
            plan.advisories.append(
                f"stage I of the smallest group has n_I·ε_c² = {worst:.0f} < 200: its bin is "
                "unreliable and the adaptive interval falls back to wide ones (§4.5 rule of "
                "thumb n·ε_c² >= 400)")
    return plan
