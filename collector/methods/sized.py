"""``two-stage-sized``: Algorithm 1 with a stage-II interval *and* randomizer sized from what
stage I saw, collector half (the device runs ``two-stage``).

See ``docs/algorithms.md`` ("Two-stage, sized"). Stage I reports the bin of the user
statistic among fine bins (``2⌈√m⌉``, between 8 and 64 per component, rather than the
paper's ``⌈√m/2⌉``) through the query's frequency oracle; closing it estimates the users'
histogram (unbiased masses with known noise), and the rule of
:func:`uldp.collector.methods.intervals.sized_interval` picks, per component, the run of
bins (or the whole support, or the paper's interval) and, per group, the scalar randomizer
(``randomizer="adaptive"``: among every randomizer, at the second moment the histogram
shows) with the smallest estimated error — noise at the measured spread plus the clamping
bias the histogram shows beyond its noise. The interval is not tied to the paper's
worst-case ``3h + 2Δ``: with users alike it is a few standard deviations of their
statistics wide, which is where the ``m``-fold gain of the whole dataset appears at tens to
hundreds of samples per user; with users spread out it is the whole support, and the
randomizer still follows the data (Duchi for values at the ends).

Every interval carries the histogram's upper confidence bounds of its clamping bias (as in
``two-stage``); the estimate is the mean over all users who reported, so the stage-II
users' spread enters with the finite-population factor ``1 − n_II/n``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from uldp.client.params import Alg1Params
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.mechanisms.choice import SCALAR_CHOICES, best_scalar
from uldp.collector.methods.base import Published
from uldp.collector.methods.common import (
    bin_mechanism,
    estimate_from_blocks,
    finite_population,
    report_noise_variance,
    second_moment,
    value_blocks,
    value_mechanism,
    value_noise_variance,
)
from uldp.collector.methods.intervals import (
    NARROW_MAX,
    Histogram,
    missed_tail_risk,
    sized_interval,
)
from uldp.collector.methods.two_stage import TwoStage, acc_mech

__all__ = ["TwoStageSized", "fine_bins"]

MIN_BINS, MAX_BINS = 8, 64


def fine_bins(p: Alg1Params, m: int) -> Alg1Params:
    """Stage-I bins of ``two-stage-sized``: ``2⌈√m⌉`` (8 … 64) equal bins of ``[−D, D]``."""
    B = min(max(2 * math.ceil(math.sqrt(m)), MIN_BINS), MAX_BINS)
    return Alg1Params(p.bound, 2 * p.bound / B, p.margin, B)


class TwoStageSized(TwoStage):
    """Two-stage with a sized stage-II interval and randomizer (module docstring)."""

    name = "two-stage-sized"
    interval_rule = "sized"

    def fine(self, plan: Any, group: int) -> list[Alg1Params]:
        return [fine_bins(p, plan.spec.samples) for p in plan.group_params(group)]

    def task(self, plan: Any, group: int, stage: int, previous: Published | None,
             slot: int | None = None) -> TaskSpec:
        if stage != 1:
            return super().task(plan, group, stage, previous, slot)
        fine = self.fine(plan, group)
        comps = plan.grouping.groups[group].components
        bins = tuple((fine[c].bound, fine[c].bin_width, fine[c].bins) for c in comps)
        eps_c = plan.grouping.groups[group].eps_c
        return plan.group_task(group, 1, bins=bins,
                               mechanism=bin_mechanism(plan.spec, bins[0][2], eps_c))

    def mechanisms(self, plan: Any, eps_c: float) -> tuple[str, ...]:
        if plan.spec.randomizer == "adaptive":
            return SCALAR_CHOICES
        return (value_mechanism(plan.spec, eps_c),)

    def _group(self, plan: Any, g: int, acc: Any) -> tuple[list[Any], str, list[float]]:
        """The intervals of group ``g``'s components and its randomizer: the randomizer
        whose components' best intervals add up to the least estimated error."""
        grp = plan.grouping.groups[g]
        fine = self.fine(plan, g)
        n_I, n_II = (acc.count if acc is not None else 0), plan.stage_size(g, 2)
        best: tuple[float, list[Any], str, list[float]] | None = None
        for mech in self.mechanisms(plan, grp.eps_c):
            rows, moments, total = [], [], 0.0
            for i, c in enumerate(grp.components):
                hist = Histogram(acc.masses(i), acc.mass_variance(i), n_I) \
                    if acc is not None else Histogram(np.zeros(fine[c].bins),
                                                      np.zeros(fine[c].bins), 0)
                iv, _, t2, mse = sized_interval(fine[c], hist, grp.eps_c, n_II, (mech,),
                                                value_noise_variance,
                                                self.margin(plan, fine[c]))
                total += mse
                rows.append(iv)
                moments.append(t2)
            if best is None or total < best[0]:
                best = (total, rows, mech, moments)
        assert best is not None
        return best[1], best[2], best[3]

    @staticmethod
    def margin(plan: Any, p: Alg1Params) -> float:
        """``D·√(2 ln(2n)/m)``: by Hoeffding's inequality a mean of ``m`` samples in
        ``[−D, D]`` is farther than this from its expectation with probability at most
        ``1/n``, so with users alike no statistic leaves the model window (a union bound
        over the ``n`` users)."""
        n, m = plan.spec.users, plan.spec.samples
        return p.bound * math.sqrt(2 * math.log(2 * max(n, 1)) / m)

    def publish(self, plan: Any, stage: int, accs: dict[int, Any]) -> Published:
        khat: dict[str, list[int]] = {}
        ivs: dict[str, list[list[float]]] = {}
        bias: dict[str, list[list[float]]] = {}
        mechs: dict[str, str] = {}
        moments: dict[str, list[float | None]] = {}
        n = 0
        for g in range(self.n_groups(plan)):
            acc = accs.get(g)
            n += acc.count if acc is not None else 0
            rows, mech, t2 = self._group(plan, g, acc)
            moments[str(g)] = [None if math.isnan(x) else x for x in t2]
            comps = plan.grouping.groups[g].components
            khat[str(g)] = [int(x) for x in (acc.khat() if acc is not None else (0,) * len(comps))]
            ivs[str(g)] = [[r.lo, r.hi] for r in rows]
            bias[str(g)] = [[r.bias_lo, r.bias_hi] for r in rows]
            mechs[str(g)] = mech
        return {"khat": khat, "intervals": ivs, "bias": bias, "mechanism": mechs,
                "moments": moments, "rule": self.interval_rule, "reports": n}

    def finalize(self, plan: Any, accs: dict[int, Any], previous: Published | None
                 ) -> Estimate:
        blocks, n2 = value_blocks(plan, accs)
        n = n2 + int((previous or {}).get("reports", 0))
        fixed = []
        for g, (comps, means, cov) in enumerate(blocks):
            acc = accs.get(g)
            if acc is None:
                fixed.append((comps, means, cov))
                continue
            eps_c, t2 = plan.grouping.groups[g].eps_c, acc.mean_square_t()
            t1 = acc.mean_t()
            nv = [report_noise_variance(acc_mech(acc), hi - lo, eps_c, float(t2[i]),
                                        float(t1[i]))
                  for i, (lo, hi) in enumerate(acc.intervals)]
            fixed.append((comps, means, finite_population(cov, np.array(nv), acc.count, n)))
        bias = None
        if previous is not None and "bias" in previous:
            b = np.zeros((2, plan.n_components))
            for g, rows in previous["bias"].items():
                comps = plan.grouping.groups[int(g)].components
                b[:, list(comps)] = np.asarray(rows, dtype=np.float64).T
            bias = (b[0], b[1])
        est = estimate_from_blocks(plan, fixed, n2, bias)
        if previous is not None:
            est.extra["khat"] = previous.get("khat", {})
            est.extra["interval_rule"] = self.interval_rule
            est.extra["mechanism"] = previous.get("mechanism", {})
            est.extra["intervals"] = previous.get("intervals", {})
        return est

    def component_variance(self, plan: Any, sample_var: np.ndarray,
                           stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        """What the rule reaches when stage I sees the users as they are: the model window
        (the mode's bin and the Hoeffding margin on both sides; the support when that is
        wider than the rule narrows to), or, when the statistics
        spread wider (eight standard deviations), that spread, at most the support; the
        best randomizer at their second moment on it; on the stage-II users, with their
        spread at the finite-population factor; plus the squared clamping bias of a tail
        the stage-I users may all have missed (:func:`~uldp.collector.methods.intervals.
        missed_tail_risk`, at the distance from the window to the far end of the support)."""
        v = np.zeros(plan.n_components)
        data = sample_var / plan.spec.samples if stat_var is None else stat_var
        finite = stat_var is not None
        for g, grp in enumerate(plan.grouping.groups):
            k = plan.stage_size(g, 2)
            fpc = max(1.0 - k / plan.spec.users, 0.0) if finite else 1.0
            fine = self.fine(plan, g)
            mechs = self.mechanisms(plan, grp.eps_c)
            for c in grp.components:
                p = fine[c]
                sd = math.sqrt(max(float(data[c]), 0.0))
                window = 2 * self.margin(plan, p) + p.bin_width
                width = 2 * p.bound if window > NARROW_MAX * 2 * p.bound else \
                    min(2 * p.bound, max(window, 8 * sd))
                t2 = None
                if stat_mean is not None:
                    centre = float(stat_mean[c])
                    lo = min(max(centre - width / 2, -p.bound), p.bound - width)
                    t2 = second_moment(centre, float(data[c]), lo, lo + width)
                mech = best_scalar(grp.eps_c, t2) if len(mechs) > 1 else mechs[0]
                noise = value_noise_variance(mech, width, grp.eps_c, t2)
                # the clamping bias of a tail the stage-I users all missed (public bound)
                risk = missed_tail_risk(plan.stage_size(g, 1), 2 * p.bound - width)
                v[c] = (fpc * data[c] + noise) / max(k, 1) + risk
        return v
