"""Algorithm 1 (two-stage mean), collector half, and SSL / baseline B (single stage).

See ``docs/algorithms.md`` ("Two-stage"). Sections of ``docs/algorithms.md``: §4.3 (collector
steps 4–6 and 9), §4.5 (variance), §5.3 (per-component arg max), §12 (SSL, baseline B),
§2.4/[D12] (dropouts: ``k̂ = 0`` fallback), [D22]. The device half is
``uldp.client.methods.two_stage``.

Stage I: each group's stage-I users report noisy bins; closing the stage publishes, per
group, ``k̂_c`` (arg max of the summed noisy bins, 0 when no report came) and the stage-II
clamp interval of every component ``[L - Δ, R + Δ]``, ``L = -D + (k̂-2)h``,
``R = -D + (k̂+1)h`` (full support ``[-D, D]`` for ``k̂ = 0``). Stage II: the group's other
users report values on that interval; the estimate is their decoded mean.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.methods.base import bin_params
from uldp.client.params import Alg1Params, bin_index
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import ValueAccumulator
from uldp.collector.estimators.estimate import Estimate, output_std_error
from uldp.collector.mechanisms import ORACLE_DECODERS
from uldp.collector.mechanisms.laplace import LaplaceBinsDecoder
from uldp.collector.methods.base import Published
from uldp.collector.methods.common import (
    bin_accumulator,
    bin_mechanism,
    estimate_from_blocks,
    finite_population,
    noise_variance,
    report_noise_variance,
    second_moment,
    value_accumulator,
    value_blocks,
    value_mechanism,
    value_noise_variance,
)
from uldp.collector.methods.edges import edge_shares, note_edges
from uldp.collector.methods.intervals import (
    Histogram,
    StageTwoInterval,
    adaptive_interval,
    missed_tail_risk,
    paper_interval,
)

__all__ = ["SSL", "BaselineB", "TwoStage", "TwoStagePaper", "paper_intervals"]


def paper_intervals(plan: Any, group: int, khat: tuple[int, ...]) -> list[list[float]]:
    """The stage-II interval of each served component from ``k̂`` (§4.3 step 5, [D22])."""
    params = plan.group_params(group)
    comps = plan.grouping.groups[group].components
    return [list(params[c].clamp_interval(int(k))) for c, k in zip(comps, khat, strict=True)]


class SSL:
    """Single-stage Laplace on the user statistic: values on the support ``[-D_c, D_c]``."""

    name = "ssl"
    device_method = "ssl"
    stages: tuple[int, ...] = (0,)
    per_sample = False  # the variance of a report involves the user mean (σ²/m)

    def n_groups(self, plan: Any) -> int:
        return len(plan.grouping.groups)

    def grouping_budget(self, spec: Any) -> tuple[float, int]:
        return spec.epsilon, spec.users

    def effective_sizes(self, n: int, m: int, epsilon: float) -> tuple[int, int, float]:
        # user means + single-stage Laplace: the noise does not shrink in m
        return n, 1, epsilon

    def noise_constant(self, n: int, K: int) -> float:
        return 8.0  # Lap(2/ε) on a width-2 interval

    def task(self, plan: Any, group: int, stage: int, previous: Published | None,
             slot: int | None = None) -> TaskSpec:
        params = plan.group_params(group)
        grp = plan.grouping.groups[group]
        return plan.group_task(group, stage, mechanism=value_mechanism(plan.spec, grp.eps_c),
                               intervals=tuple((-params[c].bound, params[c].bound)
                                               for c in grp.components))

    def accumulator(self, plan: Any, task: TaskSpec) -> ValueAccumulator:
        return value_accumulator(task)

    def publish(self, plan: Any, stage: int, accs: dict[int, Any]) -> Published:
        raise ValueError(f"method {self.name} has a single stage")

    def finalize(self, plan: Any, accs: dict[int, Any], previous: Published | None
                 ) -> Estimate:
        blocks, n = value_blocks(plan, accs)
        if self.per_sample:  # a random sample of a user: not a finite-population estimand
            return estimate_from_blocks(plan, blocks, n)
        est = estimate_from_blocks(plan, self._finite(plan, accs, blocks, n), n)
        # the same estimate read as one of a larger population the users were drawn from
        T = plan.kind.transform(plan.template, plan.n_components)
        est.extra["std_error_superpopulation"] = output_std_error(
            np.eye(plan.n_components) if T is None else np.asarray(T, dtype=np.float64),
            [(comps, cov) for comps, _, cov in blocks]).tolist()
        return est

    def _finite(self, plan: Any, accs: dict[int, Any], blocks: list[Any], n: int
                ) -> list[Any]:
        """The blocks' covariances for the mean over the ``n`` users who reported
        (:func:`~uldp.collector.methods.common.finite_population`)."""
        out = []
        for g, (comps, means, cov) in enumerate(blocks):
            acc = accs.get(g)
            if acc is None:
                out.append((comps, means, cov))
                continue
            eps_c = plan.grouping.groups[g].eps_c
            t2 = acc.mean_square_t()
            t1 = acc.mean_t()
            nv = [report_noise_variance(acc_mech(acc), hi - lo, eps_c, float(t2[i]),
                                        float(t1[i]))
                  for i, (lo, hi) in enumerate(acc.intervals)]
            out.append((comps, means, finite_population(cov, np.array(nv), acc.count, n)))
        return out

    def component_variance(self, plan: Any, sample_var: np.ndarray,
                           stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        """Per component ``(Var(user statistic) + noise variance) / reporters``; the
        statistic's variance is ``stat_var`` when given (real users: between-user spread
        and unequal counts included), else ``σ²/m`` of i.i.d. samples (``σ²`` itself for
        the one-sample baseline). With ``stat_var`` the error is against the mean over those
        very users, so their spread enters with the finite-population factor ``1 − k/n``.
        The noise is the mechanism's at the statistics' second moment on the interval
        (``stat_mean`` and the statistic's variance; without ``stat_mean`` the worst case)."""
        v = np.zeros(plan.n_components)
        m = 1 if self.per_sample else plan.spec.samples
        data = sample_var / m if stat_var is None or self.per_sample else stat_var
        finite = stat_var is not None and not self.per_sample
        for g, grp in enumerate(plan.grouping.groups):
            params = plan.group_params(g)
            k = plan.stage_size(g, self.stages[-1])
            # given users (stat_var): the error against the mean over these users, sampled
            # without replacement into groups and stages (see ``finite_population``)
            fpc = max(1.0 - k / plan.spec.users, 0.0) if finite else 1.0
            mech = value_mechanism(plan.spec, grp.eps_c)
            for c in grp.components:
                width = self._width(params[c])
                t2 = None if stat_mean is None else second_moment(
                    float(stat_mean[c]), float(data[c]), -params[c].bound, params[c].bound)
                noise = value_noise_variance(mech, width, grp.eps_c, t2)
                v[c] = (fpc * data[c] + noise) / max(k, 1) + self._risk(plan, g, params[c])
        return v

    def _risk(self, plan: Any, g: int, p: Any) -> float:
        """Two-stage methods: the squared clamping bias of a tail every stage-I user missed
        (:func:`~uldp.collector.methods.intervals.missed_tail_risk`); none without a
        stage-II window."""
        return 0.0

    def _width(self, p: Any) -> float:
        return 2 * p.bound

    def device_offsets(self, plan: Any, slots: np.ndarray) -> np.ndarray | None:
        return None


class BaselineB(SSL):
    """Baseline B: one sample per user, single-stage values on ``[-D_c, D_c]``."""

    name = "baseline-b"
    device_method = "baseline-b"
    per_sample = True


class TwoStage(SSL):
    """Algorithm 1 with the adaptive stage-II interval (module docstring and
    ``uldp.collector.methods.intervals``); every interval carries clamping-bias bounds."""

    name = "two-stage"
    device_method = "two-stage"
    stages: tuple[int, ...] = (1, 2)
    interval_rule = "adaptive"

    def task(self, plan: Any, group: int, stage: int, previous: Published | None,
             slot: int | None = None) -> TaskSpec:
        if stage == 1:
            params = plan.group_params(group)
            comps = plan.grouping.groups[group].components
            bins = tuple((params[c].bound, params[c].bin_width, params[c].bins)
                         for c in comps)
            eps_c = plan.grouping.groups[group].eps_c
            mech = bin_mechanism(plan.spec, max(B for _, _, B in bins), eps_c)
            return plan.group_task(group, 1, bins=bins, mechanism=mech)
        if previous is None or str(group) not in previous.get("intervals", {}):
            raise ValueError(f"stage II of group {group} needs the intervals stage I published")
        ivs = tuple(tuple(iv) for iv in previous["intervals"][str(group)])
        eps_c = plan.grouping.groups[group].eps_c
        mech = previous.get("mechanism", {}).get(str(group)) or value_mechanism(plan.spec,
                                                                                 eps_c)
        return plan.group_task(group, 2, intervals=ivs, mechanism=mech)

    def accumulator(self, plan: Any, task: TaskSpec) -> Any:
        if task.stage == 1:
            return bin_accumulator(task, bin_params(task))
        return super().accumulator(plan, task)

    def interval(self, p: Alg1Params, khat: int, hist: Histogram, eps_c: float,
                 n_II: int) -> StageTwoInterval:
        """The stage-II interval of one component from its stage-I histogram."""
        return adaptive_interval(p, khat, hist, eps_c, n_II, noise_variance)

    def publish(self, plan: Any, stage: int, accs: dict[int, Any]) -> Published:
        khat: dict[str, list[int]] = {}
        ivs: dict[str, list[list[float]]] = {}
        bias: dict[str, list[list[float]]] = {}
        n = 0
        for g in range(self.n_groups(plan)):
            grp = plan.grouping.groups[g]
            acc = accs.get(g)
            n_I = acc.count if acc is not None else 0
            k = acc.khat() if acc is not None else tuple(0 for _ in grp.components)
            n += n_I
            params = plan.group_params(g)
            rows = []
            for i, (c, kc) in enumerate(zip(grp.components, k, strict=True)):
                p = params[c]
                hist = Histogram(acc.masses(i), acc.mass_variance(i), n_I) \
                    if acc is not None else Histogram(np.zeros(p.bins), np.zeros(p.bins), 0)
                rows.append(self.interval(p, int(kc), hist, grp.eps_c, plan.stage_size(g, 2)))
            khat[str(g)] = [int(x) for x in k]
            ivs[str(g)] = [[r.lo, r.hi] for r in rows]
            bias[str(g)] = [[r.bias_lo, r.bias_hi] for r in rows]
        return {"khat": khat, "intervals": ivs, "bias": bias, "rule": self.interval_rule,
                "reports": n, "edges": edge_shares(plan, accs)}

    def finalize(self, plan: Any, accs: dict[int, Any], previous: Published | None
                 ) -> Estimate:
        blocks, n = value_blocks(plan, accs)
        bias = None
        if previous is not None and "bias" in previous:
            b = np.zeros((2, plan.n_components))
            for g, rows in previous["bias"].items():
                comps = plan.grouping.groups[int(g)].components
                b[:, list(comps)] = np.asarray(rows, dtype=np.float64).T
            bias = (b[0], b[1])
        est = estimate_from_blocks(plan, blocks, n, bias)
        if previous is not None:
            est.extra["khat"] = previous.get("khat", {})
            est.extra["interval_rule"] = previous.get("rule", self.interval_rule)
        note_edges(plan, est, previous)
        return est

    def predict(self, plan: Any, sample_var: np.ndarray, stat_var: np.ndarray | None = None,
                stat_mean: np.ndarray | None = None, population: str | None = None,
                draws: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(mse, half_width)`` of every component on a reference population
        (``sizing.reference_population``; without one, :meth:`component_variance` and its
        normal interval): the rule run on stage I's expected histogram, the stage-II noise
        and spread on the window it picks, and the interval widened by the bias bounds
        that histogram gives (what the noise prediction alone leaves out)."""
        from uldp.collector.methods.sizing import reference_population

        C = plan.n_components
        z = NormalDist().inv_cdf(0.5 + plan.spec.confidence / 2)
        if population is None:
            v = self.component_variance(plan, sample_var, stat_var, stat_mean)
            return v, z * np.sqrt(np.maximum(v, 0.0))
        mse, half = np.zeros(C), np.zeros(C)
        for g, grp in enumerate(plan.grouping.groups):
            params = plan.group_params(g)
            n1, n2 = plan.stage_size(g, 1), plan.stage_size(g, 2)
            oracle = bin_mechanism(plan.spec, max(params[c].bins for c in grp.components),
                                   grp.eps_c)
            dec = ORACLE_DECODERS[oracle] if oracle != "laplace" else LaplaceBinsDecoder()
            mech = value_mechanism(plan.spec, grp.eps_c)
            for c in grp.components:
                p = params[c]
                vals, wts = reference_population(population, p.bound, plan.spec.samples)
                k = bin_index(vals, p) - 1
                pi = np.bincount(k, wts, minlength=p.bins)
                hist = Histogram(pi, dec.variance(pi, p.bins, grp.eps_c) / max(n1, 1), n1)
                iv = self.interval(p, int(np.argmax(pi)) + 1, hist, grp.eps_c, n2)
                lo, hi = max(iv.lo, -p.bound), min(iv.hi, p.bound)
                y = np.clip(vals, iv.lo, iv.hi)
                t = 2 * (y - iv.lo) / (iv.hi - iv.lo) - 1
                noise = value_noise_variance(mech, iv.hi - iv.lo, grp.eps_c,
                                             float(np.dot(t * t, wts)))
                spread = float(np.dot(wts, (y - np.dot(wts, y)) ** 2))
                var = (noise + spread) / max(n2, 1)
                bias = float(np.dot(wts, np.clip(vals, lo, hi) - vals))
                mse[c] = var + bias * bias
                half[c] = z * math.sqrt(var) + (iv.bias_lo + iv.bias_hi) / 2
        return mse, half

    def _risk(self, plan: Any, g: int, p: Any) -> float:
        return missed_tail_risk(plan.stage_size(g, 1), 2 * p.bound - min(self._width(p),
                                                                           2 * p.bound))

    def _width(self, p: Any) -> float:
        """The width of the narrowest stage-II interval the adaptive rule can choose: the
        paper's ``3h + 2Δ`` cut to the support (every candidate is clipped to ``[-D, D]``,
        which adds no clamping bias), so at small ``m``, where ``3h + 2Δ`` exceeds ``2D``,
        the prediction is not the noise of an interval no run uses."""
        return min(p.stage2_width, 2 * p.bound)

    def effective_sizes(self, n: int, m: int, epsilon: float) -> tuple[int, int, float]:
        return n, m, epsilon

    def noise_constant(self, n: int, K: int) -> float:
        """``4(12 + 2√ln(K n))²``: the Algorithm-1 stage-II noise term of §4.5
        (``4D²(12+2√ln n)²/(mnε²)``, ``D = 1``)."""
        return 4.0 * (12.0 + 2.0 * math.sqrt(math.log(max(K * n, 2)))) ** 2


class TwoStagePaper(TwoStage):
    """Algorithm 1 with the paper's stage-II interval around ``k̂`` (§4.3 step 5), its
    clamping bias bounded from the same histogram."""

    name = "two-stage-paper"
    interval_rule = "paper"

    def interval(self, p: Alg1Params, khat: int, hist: Histogram, eps_c: float,
                 n_II: int) -> StageTwoInterval:
        return paper_interval(p, khat, hist)

    def _width(self, p: Any) -> float:
        return p.stage2_width  # the paper's interval is not cut to the support


def acc_mech(acc: ValueAccumulator) -> str:
    """The randomizer a value accumulator decodes."""
    return "laplace" if acc.decoder is None else acc.decoder.name
