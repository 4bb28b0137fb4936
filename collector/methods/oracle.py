"""Method ``oracle``, collector half: sampled records through a frequency oracle.

See ``docs/algorithms.md`` ("Frequency oracles") and ``docs/mechanisms.md`` ("Sampled
records"). The device half is ``uldp.client.methods.oracle``: every device samples
``records`` of its usable records and privatizes each with the query's frequency oracle at
``ε/records``. One group of all users serves every component.

The estimate of category ``v`` is ``f̂_v = (C_v/(n r) − q*)/(p* − q*)`` (``C_v``: the
supports counted over the ``n`` reports of ``r`` records), unbiased for the mean over users
of their frequency of ``v`` (a user without usable records counts as uniform, the device's
fallback). Its standard error is the empirical one of the users' debiased reports (exact
for users drawn from a population; conservative by their spread ``Var_i f_iv`` for exactly
these users, ``docs/mechanisms.md``). The predicted error is exact:
``Σ_v [V(f_v; ε/r)/r + E_i f_iv(1 − f_iv)·(m − r)/(r(m − 1))] / n``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.budget import split_epsilon
from uldp.client.kinds.means import hadamard_rows
from uldp.client.mechanisms import ORACLES
from uldp.client.regimes import Group, Grouping
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import absorb_counts
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.estimators.reductions import (
    Reduction,
    ValueCounts,
    WindowCounts,
    WindowSums,
)
from uldp.collector.estimators.transforms import project_simplex
from uldp.collector.mechanisms import ORACLE_DECODERS, OracleDecoder, ReportError
from uldp.collector.mechanisms.base import support_rows, support_sum
from uldp.collector.mechanisms.choice import best_oracle, oracle_total_variance
from uldp.collector.methods.base import Published

__all__ = ["OracleAccumulator", "SampledRecords"]


@dataclass
class OracleAccumulator:
    """Supports of the reports per category, and per category the sum over users of the
    square of their support count (for the empirical variance)."""

    categories: int
    records: int
    decoder: OracleDecoder
    eps: float
    length: int  # report integers per record
    limit: int
    counts: np.ndarray = field(init=False)
    sq: np.ndarray = field(init=False)
    count: int = field(default=0, init=False)
    needs_slots = False

    def __post_init__(self) -> None:
        self.counts = np.zeros(self.categories, dtype=np.int64)
        self.sq = np.zeros(self.categories, dtype=np.int64)

    def add(self, reports: np.ndarray, slots: np.ndarray | None = None) -> None:
        r = np.asarray(reports)
        if r.ndim == 1:
            r = r[None]
        if r.ndim != 2 or r.shape[1] != self.records * self.length:
            raise ReportError(f"report must have {self.records * self.length} integers, "
                              f"got shape {tuple(r.shape)}")
        if r.size and (int(r.max()) > self.limit or int(r.min()) < -self.limit):
            raise ReportError(f"report entry out of range (limit {self.limit})")
        if not np.issubdtype(r.dtype, np.integer):
            raise ReportError(f"report entries must be integers, got dtype {r.dtype}")
        k, L = self.categories, self.length
        if self.records == 1 and getattr(self.decoder, "binary", False):
            # one record, 0/1 supports: s² = s, so both sums are the support sum
            got = support_sum(self.decoder, r, k, self.eps)
            self.counts += got
            self.sq += got
        elif hasattr(self.decoder, "support_pairs"):
            # sparse supports: per (report, category), how many records support it
            keys = np.concatenate([
                rows * k + cols for rows, cols in (
                    self.decoder.support_pairs(r[:, j * L:(j + 1) * L], k, self.eps)
                    for j in range(self.records))])
            cells, mult = np.unique(keys, return_counts=True)
            cat = cells % k
            self.counts += np.bincount(cat, weights=mult, minlength=k).astype(np.int64)
            self.sq += np.bincount(cat, weights=mult * mult, minlength=k).astype(np.int64)
        else:
            step = support_rows(k)
            for lo in range(0, r.shape[0], step):
                s = np.zeros((min(step, r.shape[0] - lo), k), dtype=np.int64)
                for j in range(self.records):
                    s += self.decoder.support(r[lo:lo + step, j * L:(j + 1) * L], k, self.eps)
                self.counts += s.sum(axis=0)
                self.sq += (s * s).sum(axis=0)
        self.count += r.shape[0]

    def reduction(self) -> Reduction | None:
        """GRR with one record: the database counts the reported values."""
        if self.records == 1 and getattr(self.decoder, "name", "") == "grr":
            return ValueCounts(self.categories)
        return None

    def absorb(self, w: WindowSums | WindowCounts) -> None:
        """Add the database's value counts of a window of reports (:meth:`reduction`)."""
        if not isinstance(w, WindowCounts):
            raise TypeError("an oracle accumulator absorbs value counts")
        got = np.zeros(self.categories, dtype=np.int64)
        absorb_counts(got, w, self.categories)
        self.counts += got
        self.sq += got  # 0/1 supports
        self.count += w.count

    def merge(self, other: OracleAccumulator) -> None:
        self.counts += other.counts
        self.sq += other.sq
        self.count += other.count

    def estimate(self) -> tuple[np.ndarray, np.ndarray]:
        """``(f̂, se)`` per category (zeros and 1/2 without reports)."""
        if self.count == 0:
            return np.zeros(self.categories), np.full(self.categories, 0.5)
        p, q = self.decoder.pq(self.categories, self.eps)
        n, r = self.count, self.records
        mean = self.counts / (n * r)
        f = (mean - q) / (p - q)
        if n < 2:
            return f, np.full(self.categories, 0.5)
        var = (self.sq / r**2 - n * mean**2) / (n - 1) / (p - q) ** 2
        return f, np.sqrt(np.maximum(var, 0.0) / n)


class SampledRecords:
    """Collector half of method ``oracle`` (module docstring)."""

    name = "oracle"
    device_method = "oracle"
    stages: tuple[int, ...] = (0,)

    def grouping(self, spec: Any, n_components: int) -> Grouping:
        return Grouping("oracle", (Group(tuple(range(n_components)),
                                         split_epsilon(spec.epsilon, spec.records)),))

    def n_groups(self, plan: Any) -> int:
        return 1

    def grouping_budget(self, spec: Any) -> tuple[float, int]:
        return spec.epsilon, spec.users

    def effective_sizes(self, n: int, m: int, epsilon: float) -> tuple[int, int, float]:
        return n, 1, epsilon

    def noise_constant(self, n: int, K: int) -> float:
        return 4.0 * K  # OUE's 4/ε² per category

    def mechanism(self, plan: Any) -> str:
        eps_c = plan.grouping.groups[0].eps_c
        A = plan.kind.categories(plan.template)
        return best_oracle(A, eps_c) if plan.spec.oracle == "best" else plan.spec.oracle

    def task(self, plan: Any, group: int, stage: int, previous: Published | None,
             slot: int | None = None) -> TaskSpec:
        if plan.kind.categories is None:
            raise ValueError(f"method 'oracle' needs a categorical kind, not {plan.spec.kind!r}")
        return plan.group_task(0, 0, mechanism=self.mechanism(plan),
                               records=plan.spec.records)

    def accumulator(self, plan: Any, task: TaskSpec) -> OracleAccumulator:
        A = plan.kind.categories(task)
        oracle = ORACLES[task.mechanism]
        return OracleAccumulator(A, task.records, ORACLE_DECODERS[task.mechanism], task.eps_c,
                                 oracle.length(A, task.eps_c), oracle.limit(A, task.eps_c))

    def publish(self, plan: Any, stage: int, accs: dict[int, Any]) -> Published:
        raise ValueError("method oracle has a single stage")

    def finalize(self, plan: Any, accs: dict[int, Any], previous: Published | None
                 ) -> Estimate:
        acc: OracleAccumulator | None = accs.get(0)
        A = plan.kind.categories(plan.template)
        f, se = acc.estimate() if acc is not None else (np.zeros(A), np.full(A, 0.5))
        z = NormalDist().inv_cdf(0.5 + plan.spec.confidence / 2)
        low, high = np.clip(f - z * se, 0, 1), np.clip(f + z * se, 0, 1)
        K = plan.n_components
        extra: dict[str, Any] = {
            "components": hadamard_rows(f[None], K)[0], "projected": project_simplex(f),
            "reports": 0 if acc is None else acc.count, "regime": plan.grouping.regime,
            "method": plan.spec.method, "mechanism": self.mechanism(plan),
            "mechanisms": {"oracle": self.mechanism(plan), "randomizer": None},
            "records": plan.spec.records}
        if plan.auto:
            extra["auto"] = dict(plan.auto)
        return Estimate(np.clip(f, 0, 1), se, low, high, plan.spec.confidence,
                        counts={"reports": extra["reports"]}, extra=extra)

    def component_variance(self, plan: Any, sample_var: np.ndarray,
                           stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        """The exact ``E‖p̂ − p‖²`` (module docstring), spread evenly over the components
        so that the plan's sum through ``T`` (whose squared entries are all ``1/K``) gives
        it back. The oracle's part does not depend on the frequencies (``Σ f_v = 1``); the
        records' part is ``Σ_v E_i f_iv(1 − f_iv) = Σ_c Var φ_c − Σ_c Var Y_c`` (the
        frequency vectors' squared norms, through the orthonormal Hadamard rows), or with
        only the per-sample variances ``Σ_c σ_c²·(m − 1)/m`` (i.i.d. samples)."""
        eps_c = plan.grouping.groups[0].eps_c
        A = plan.kind.categories(plan.template)
        r, m, n = plan.spec.records, plan.spec.samples, plan.spec.users
        noise = oracle_total_variance(self.mechanism(plan), A, eps_c) / r
        total_sample = float(np.sum(sample_var))
        within = total_sample - float(np.sum(stat_var)) if stat_var is not None \
            else total_sample * (m - 1) / m
        sampling = max(within, 0.0) * ((m - r) / (r * (m - 1)) if m > 1 else 0.0)
        total = (noise + sampling) / n
        return np.full(plan.n_components, total / A)

    def device_offsets(self, plan: Any, slots: np.ndarray) -> np.ndarray | None:
        return None
