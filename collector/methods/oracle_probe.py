"""Method ``oracle-probe``, collector half: the one-record oracle with a paired-record probe.

See ``docs/algorithms.md`` ("The one-record oracle's paired probe"). The device half is
method ``oracle`` (``uldp.client.methods.oracle``): no new device computation.

Method ``oracle``'s interval counts the spread between users, ``B_v = Var_i f_iv``, although
its estimand — the mean over *these* users of their frequencies — fixes the users: with one
record a user's report cannot tell its own sampling from its difference to the others.
Where the oracle's noise is small (``uldp.collector.methods.hadamard_pairs.PROBE_NOISE``:
only ε = 8 of the frontier's ε) the spread is a large part of the stated variance and the
interval over-covers (users who differ, k = 8, m = 10, ε = 8: coverage 1.000).

Here the users are split into :data:`PROBE_GROUPS` equal groups (by the plan's public
permutation, as every method's groups). Group 0 — the **probe**, ``1/PROBE_GROUPS`` of the
users — reports two of its records, sampled without replacement, through the oracle at
``ε/2`` each (the ``oracle`` report with ``records = 2``, exactly the Hadamard fallback's
probe); every other user reports one record at ``ε``. The estimate is the Hadamard
fallback's (``hadamard_pairs.fallback_estimate``, one place for both): one- and two-record
users weighed by their measured precision, the variance ``Σ_k w_k² S_k/n_k − B̂/n`` — the
spread left out once for the whole population at the probe's estimate ``B̂``, the interval
calibrated for that variance's own noise (``hadamard_pairs.stated_variance``). ``B̂`` never
exceeds ``B`` in expectation
(``B − E_i f_iv(1 − f_iv)/(m_i − 1)``), so the interval can over-state, never under-state
by the spread.

Accuracy: the probe's users are at worst useless (the weights are precisions), so the error
is at most ``1/(1 − 1/PROBE_GROUPS)`` = 1.067× the one-record oracle's; where two records at
``ε/2`` are the more precise report (small ``k``, few records per user) the probe gains.
``auto`` takes this method where the probe would run (:func:`probe_worth`), the plain oracle
elsewhere.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from uldp.client.budget import split_epsilon
from uldp.client.regimes import Group, Grouping
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.mechanisms.choice import best_oracle, oracle_total_variance
from uldp.collector.methods.hadamard_pairs import (
    fallback_estimate,
    pair_oracle,
    probe_group,
    sums,
)
from uldp.collector.methods.oracle import OracleAccumulator, SampledRecords

__all__ = ["PROBE_GROUPS", "ProbedRecords", "mixed_variance", "probe_worth"]

#: the users split into this many equal groups; group 0 is the probe (6.25 % of the users:
#: at most 1/(1 − 1/16) = 1.067× the one-record oracle's error where it is useless)
PROBE_GROUPS = 16


def probe_worth(plan: Any) -> bool:
    """Whether the probe runs for ``plan``'s public parameters: the Hadamard fallback's rule
    (``hadamard_pairs.probe_group``: a categorical kind, 0/1 supports at ``ε`` and ``ε/2``,
    the one-record oracle's noise at most ``PROBE_NOISE``) for users of two records or more."""
    return int(plan.spec.samples) >= 2 and probe_group(ProbedRecords(), plan) is not None


def mixed_variance(V1: float, V2: float, na: int, nb: int, between: float, n: int) -> float:
    """The total error of the precision-weighted mean of ``na`` one-record users (a user's
    variance given itself ``V1``) and ``nb`` two-record users (``V2``) around the mean over
    all ``n`` users whose frequencies spread ``between`` (``Σ_v Var_i f_iv``): ``Σ_k w_k²
    V_k/n_k + between·(Σ_k w_k²/n_k − 1/n)`` (users placed in the parts at random)."""
    sizes = np.array([na, nb], dtype=np.float64)
    V = np.array([V1, V2], dtype=np.float64)
    prec = np.where(sizes > 0, sizes / np.maximum(V, 1e-300), 0.0)
    if prec.sum() <= 0:
        return (V1 + between) / max(n, 1)
    w = prec / prec.sum()
    keep = sizes > 0
    var = float(np.sum(w[keep] ** 2 * V[keep] / sizes[keep]))
    return var + between * max(float(np.sum(w[keep] ** 2 / sizes[keep])) - 1.0 / max(n, 1),
                               0.0)


class ProbedRecords(SampledRecords):
    """Collector half of method ``oracle-probe`` (module docstring)."""

    name = "oracle-probe"
    device_method = "oracle"
    stages: tuple[int, ...] = (0,)

    def grouping(self, spec: Any, n_components: int) -> Grouping:
        if int(spec.records) != 1:
            raise ValueError("method 'oracle-probe' reports one record per user (records=1) "
                             "and two on its probe; use method 'oracle' for more records")
        every = tuple(range(n_components))
        eps = split_epsilon(spec.epsilon, 1)
        return Grouping("oracle", tuple(Group(every, eps) for _ in range(PROBE_GROUPS)))

    def n_groups(self, plan: Any) -> int:
        return PROBE_GROUPS

    # the names hadamard_pairs asks its method for
    @staticmethod
    def _categorical(plan: Any) -> bool:
        return plan.kind.categories is not None

    def mechanism(self, plan: Any) -> str:
        """The one-record oracle: the best for ``(A, ε)`` unless the query names one (the
        default ``laplace``, whose supports are not 0/1, means the best, as for
        ``hadamard``)."""
        eps_c = plan.grouping.groups[0].eps_c
        A = plan.kind.categories(plan.template)
        return best_oracle(A, eps_c) if plan.spec.oracle in ("best", "laplace") \
            else plan.spec.oracle

    def oracle_name(self, plan: Any) -> str:
        return self.mechanism(plan)

    def task(self, plan: Any, group: int, stage: int, previous: Any,
             slot: int | None = None) -> TaskSpec:
        if plan.kind.categories is None:
            raise ValueError(f"method 'oracle-probe' needs a categorical kind, not "
                             f"{plan.spec.kind!r}")
        if group == 0 and probe_worth(plan):
            name, eps2 = pair_oracle(self, plan)
            return plan.group_task(0, 0, mechanism=name, eps_c=eps2, records=2)
        return plan.group_task(group, 0, mechanism=self.mechanism(plan), records=1)

    def finalize(self, plan: Any, accs: dict[int, Any], previous: Any) -> Estimate:
        merged: dict[int, OracleAccumulator] = {}
        for acc in accs.values():
            r = int(acc.records)
            if r in merged:
                merged[r].merge(acc)
            else:
                merged[r] = copy.deepcopy(acc)
        parts = {str(r): sums(acc) for r, acc in merged.items()}
        est = fallback_estimate(self, plan, {}, {"sums": parts}, spread_gate=True)
        est.extra.update({
            "method": plan.spec.method, "mechanism": self.mechanism(plan),
            "mechanisms": {"oracle": self.mechanism(plan), "randomizer": None},
            "records": 1})
        if plan.auto:
            est.extra["auto"] = dict(plan.auto)
        return est

    def component_variance(self, plan: Any, sample_var: np.ndarray,
                           stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        """The predicted ``E‖p̂ − p‖²`` (:func:`mixed_variance`), spread evenly over the
        components as method ``oracle``'s. The records' part ``within = Σ_v E_i f_iv(1 −
        f_iv)`` and the spread ``between = Σ_v Var_i f_iv`` come from the per-sample
        variances (``Σ_c σ_c²`` = within + between) and the users' (``Σ_c Var Y_c`` =
        between), or with only the former for i.i.d. samples (between = total/m)."""
        if not probe_worth(plan):
            return super().component_variance(plan, sample_var, stat_var, stat_mean)
        A = plan.kind.categories(plan.template)
        m, n = int(plan.spec.samples), int(plan.spec.users)
        total = float(np.sum(sample_var))
        between = float(np.sum(stat_var)) if stat_var is not None else total / max(m, 1)
        between = min(max(between, 0.0), total)
        within = total - between
        V1 = oracle_total_variance(self.mechanism(plan), A, float(plan.spec.epsilon)) \
            + (within if m > 1 else 0.0)
        name2, eps2 = pair_oracle(self, plan)
        V2 = oracle_total_variance(name2, A, eps2) / 2 \
            + (within * (m - 2) / (2 * (m - 1)) if m >= 2 else 0.0)
        nb = plan.group_size(0)
        out = mixed_variance(V1, V2, n - nb, nb, between, n)
        return np.full(plan.n_components, out / A)
