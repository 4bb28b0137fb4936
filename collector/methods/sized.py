"""``two-stage-sized``: Algorithm 1 with the stage-II window, estimate and randomizer sized
from what stage I measured, collector half (device half:
``uldp.client.methods.two_stage.TwoStageSized``).

See ``docs/algorithms.md`` ("Two-stage, sized"); the math is
:mod:`uldp.collector.methods.sizing`. Stage I reports every served component's statistic
rounded unbiasedly to one of the ``B + 1`` grid points of its support (``B = 2⌈√m⌉``,
between 8 and 64) through the query's frequency oracle. Closing it gives unbiased shares
of the stage-I users at every point; per component the rule picks the window (any two grid
points, the support included) and the estimate — *debiased* (the stage-I reports measure
the clamping of the stage-II users) or *clamped* (bias bounds in the interval) — and per
group the scalar randomizer (``randomizer="adaptive"``: among every randomizer), by the
query's ``objective``: the expected width of the interval (default) or the MSE. The final
estimate counts the stage-I users' own reports (their grid points are unbiased for their
statistics), so a stage I costs only the difference between its reports' noise and a
stage-II report's.

Its interval holds for all users, not just the stage-I sample: the users' clamping
variance and the randomizer's noise are bounded where stage I could have missed part of
the users (the Chernoff bounds of :mod:`uldp.collector.methods.intervals`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from uldp.client.params import Alg1Params
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import BinAccumulator, ValueAccumulator
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.mechanisms import ORACLE_DECODERS
from uldp.collector.mechanisms.choice import SCALAR_CHOICES
from uldp.collector.methods.alike import assumed_samples
from uldp.collector.methods.base import Published
from uldp.collector.methods.common import (
    bin_mechanism,
    estimate_from_blocks,
    report_noise_variance,
    value_mechanism,
)
from uldp.collector.methods.edges import edge_shares, note_edges
from uldp.collector.methods.sized_predict import _noise_fn, _normal, predict_component
from uldp.collector.methods.sizing import (
    ESTIMATORS,
    Choice,
    GridStage,
    choose,
    estimator_weights,
    functionals,
    grid_points,
    honest_terms,
    reference_population,
    t2_bounds,
)
from uldp.collector.methods.two_stage import TwoStage, acc_mech

__all__ = ["GRID_ORACLES", "TwoStageAdaptive", "TwoStageSized", "fine_bins",
           "reference_population"]

MIN_BINS, MAX_BINS = 8, 64
#: the oracles whose functional variances are exact (``two-stage-sized`` refuses OLH,
#: which ``best`` never picks for 65 categories or fewer)
GRID_ORACLES = ("laplace", "grr", "oue", "ss")
#: noisy stage-I histograms a prediction averages the rule's outcome over
PREDICTION_DRAWS = 12


def fine_bins(p: Alg1Params, m: int) -> Alg1Params:
    """Stage-I grid of ``two-stage-sized``: ``2⌈√m⌉`` (8 … 64) equal bins of ``[−D, D]``
    (``B + 1`` grid points, their edges)."""
    B = min(max(2 * math.ceil(math.sqrt(m)), MIN_BINS), MAX_BINS)
    return Alg1Params(p.bound, 2 * p.bound / B, p.margin, B)


def _stage_two_noise(acc: ValueAccumulator, i: int, eps_c: float, st: GridStage | None
                     ) -> float:
    """The noise of one stage-II report of component ``i``, measured from the reports
    (Duchi's from ``E t² ≥`` the largest lower bound, stage I's for all users included)."""
    lo, hi = acc.intervals[i]
    floor = 0.0 if st is None else float(t2_bounds(st, np.array([lo]), np.array([hi]))[0][0])
    return report_noise_variance(acc_mech(acc), hi - lo, eps_c, float(acc.mean_square_t()[i]),
                                 float(acc.mean_t()[i]), floor)


def _component(st: GridStage, window: tuple[float, float], estimator: str, n1: int, n2: int,
               c2: float, noise2: float, alike: int | None = None
               ) -> tuple[float, float, float, float, float]:
    """One component's ``(mean, noise variance, shared sd, bias_lo, bias_hi)``: the
    estimator's stage-I functional over the stage-I shares plus ``(1 − λ)`` times the
    stage-II mean; the noise of both stages; the sd of what the two random halves of the
    users disagree on (``sizing.combine_error``), shared by a user's components; the bias
    bounds of a clamped estimate."""
    n = n1 + n2
    a, b = np.array([window[0]]), np.array([window[1]])
    lam, kappa = estimator_weights(estimator, n1, n2)
    f, _ = functionals(st.points, a, b, lam, kappa)
    terms = honest_terms(st, a, b, n1, n2, alike=alike)
    mean = float(f[0] @ st.mass) + (1 - lam) * c2
    var = float(st.report_variance(f)[0]) / n1 + (1 - lam) ** 2 * noise2 / n2
    shared = math.sqrt(n / (n1 * n2)) * (
        abs(lam - n1 / n) * math.sqrt(max(terms["SY"], 0.0))
        + kappa * (1 - lam) * math.sqrt(max(float(terms["S"][0]), 0.0)))
    if kappa:
        return mean, var, shared, 0.0, 0.0
    return (mean, var, shared, (1 - lam) * float(terms["b_lo"][0]),
            (1 - lam) * float(terms["b_hi"][0]))


class TwoStageSized(TwoStage):
    """Two-stage with a sized stage-II window, estimate and randomizer (module docstring)."""

    name = "two-stage-sized"
    device_method = "two-stage-sized"
    interval_rule = "sized"
    #: its randomizer is best chosen from stage I (``with_best_mechanisms``), and it
    #: predicts itself from the users' statistics (own-data runs)
    adaptive_randomizer = True
    #: its window's bias bounds count on ``assume="users-alike"`` when the query states it
    counts_on_assumption = True
    #: the stage-II window is always the support (``two-stage-adaptive``)
    support_only = False

    def fine(self, plan: Any, group: int) -> list[Alg1Params]:
        return [fine_bins(p, plan.spec.samples) for p in plan.group_params(group)]

    def oracle(self, plan: Any, group: int) -> str:
        fine = self.fine(plan, group)
        eps_c = plan.grouping.groups[group].eps_c
        name = bin_mechanism(plan.spec, max(p.bins for p in fine) + 1, eps_c)
        if name not in GRID_ORACLES:
            raise ValueError(f"two-stage-sized reports stage I through one of {GRID_ORACLES} "
                             f"(oracle {name!r} has no exact variance of a mean over the grid)")
        return name

    def task(self, plan: Any, group: int, stage: int, previous: Published | None,
             slot: int | None = None) -> TaskSpec:
        if plan.kind.categories is not None:  # issue 26: not offered for distributions
            raise ValueError(
                "method 'two-stage-sized' does not estimate distributions: its stage I has "
                "too few users per Hadamard coefficient to place a window over the fine "
                "histogram, so its predicted error does not hold; use 'hadamard' (windows "
                "sized from the users' measured spread), 'oracle' or 'auto'")
        if stage != 1:
            return super().task(plan, group, stage, previous, slot)
        fine = self.fine(plan, group)
        comps = plan.grouping.groups[group].components
        bins = tuple((fine[c].bound, fine[c].bin_width, fine[c].bins) for c in comps)
        return plan.group_task(group, 1, bins=bins, mechanism=self.oracle(plan, group))

    def accumulator(self, plan: Any, task: TaskSpec) -> Any:
        if task.stage != 1:
            return super().accumulator(plan, task)
        from uldp.client.mechanisms import ORACLES

        params = [Alg1Params(float(D), float(h), 0.0, int(B) + 1) for D, h, B in task.bins]
        mech = task.mechanism
        oracle = ORACLES[mech]
        limit = max(oracle.limit(p.bins, task.eps_c) for p in params)
        if mech == "laplace":
            return BinAccumulator(params, limit, None, task.eps_c)
        return BinAccumulator(params, limit, ORACLE_DECODERS[mech], task.eps_c,
                              [oracle.length(p.bins, task.eps_c) for p in params])

    def mechanisms(self, plan: Any, eps_c: float) -> tuple[str, ...]:
        if plan.spec.randomizer == "adaptive":
            return SCALAR_CHOICES
        return (value_mechanism(plan.spec, eps_c),)

    def stages_of(self, plan: Any, g: int, acc: Any) -> list[GridStage]:
        """What stage I measured of each component of group ``g``."""
        fine = self.fine(plan, g)
        eps_c = plan.grouping.groups[g].eps_c
        oracle = self.oracle(plan, g)
        out = []
        for i, c in enumerate(plan.grouping.groups[g].components):
            pts = grid_points(fine[c].bound, fine[c].bins)
            if acc is None or acc.count == 0:
                out.append(GridStage(pts, np.zeros(pts.size), 0, oracle, eps_c))
            else:
                out.append(GridStage(pts, acc.masses(i), acc.count, oracle, eps_c))
        return out

    def _group(self, plan: Any, g: int, stages: list[GridStage], n1: int, n2: int
               ) -> tuple[str, list[Choice]]:
        """The randomizer of group ``g`` and each component's choice: the randomizer whose
        components' choices add up to the least objective (widths as variances)."""
        eps_c = plan.grouping.groups[g].eps_c
        noise = _noise_fn(eps_c)
        per = [choose(st, n1, n2, self.mechanisms(plan, eps_c), noise, plan.spec.objective,
                      plan.spec.confidence, self.estimators(plan), assumed_samples(plan.spec),
                      self.support_only)
               for st in stages]
        best: tuple[float, str] | None = None
        for mech in self.mechanisms(plan, eps_c):
            total = sum((c[mech].objective ** 2 if plan.spec.objective == "width"
                         else c[mech].objective) for c in per)
            if best is None or total < best[0] * (1 - 1e-12):
                best = (total, mech)
        assert best is not None
        return best[1], [c[best[1]] for c in per]

    def estimators(self, plan: Any) -> tuple[str, ...]:
        return tuple(ESTIMATORS)

    def publish(self, plan: Any, stage: int, accs: dict[int, Any]) -> Published:
        khat: dict[str, list[int]] = {}
        ivs: dict[str, list[list[float]]] = {}
        bias: dict[str, list[list[float]]] = {}
        mechs: dict[str, str] = {}
        ests: dict[str, list[str]] = {}
        stage1: dict[str, dict[str, Any]] = {}
        n = 0
        for g in range(self.n_groups(plan)):
            acc = accs.get(g)
            n1 = acc.count if acc is not None else 0
            n2 = plan.stage_size(g, 2)
            n += n1
            stages = self.stages_of(plan, g, acc)
            mech, choices = self._group(plan, g, stages, n1, n2)
            rows, brow = [], []
            for st, ch in zip(stages, choices, strict=True):
                a, b = float(st.points[ch.i]), float(st.points[ch.j])
                rows.append([a, b])
                if n1 > 0 and n2 > 0:
                    t = honest_terms(st, np.array([a]), np.array([b]), n1, n2,
                                     alike=assumed_samples(plan.spec))
                    brow.append([float(t["b_lo"][0]), float(t["b_hi"][0])])
                else:
                    brow.append([0.0, 0.0])
            khat[str(g)] = [int(np.argmax(st.mass)) + 1 if n1 else 0 for st in stages]
            ivs[str(g)] = rows
            bias[str(g)] = brow
            mechs[str(g)] = mech
            ests[str(g)] = [ch.estimator for ch in choices]
            stage1[str(g)] = {"reports": n1,
                              "masses": [[float(x) for x in st.mass] for st in stages]}
        return {"khat": khat, "intervals": ivs, "bias": bias, "mechanism": mechs,
                "estimator": ests, "stage1": stage1, "objective": plan.spec.objective,
                "rule": self.interval_rule, "reports": n,
                "edges": edge_shares(plan, accs)}

    # ---- the estimate ---------------------------------------------------------------
    def finalize(self, plan: Any, accs: dict[int, Any], previous: Published | None
                 ) -> Estimate:
        prev = previous or {}
        groups = self.n_groups(plan)
        n1s = {g: int(((prev.get("stage1") or {}).get(str(g)) or {}).get("reports", 0))
               for g in range(groups)}
        n2s = {g: (accs[g].count if accs.get(g) is not None else 0) for g in range(groups)}
        n_all = sum(n1s.values()) + sum(n2s.values())
        blocks, bias_lo, bias_hi = [], np.zeros(plan.n_components), np.zeros(plan.n_components)
        for g in range(groups):
            comps, means, cov, blo, bhi = self._estimate_group(plan, g, accs.get(g), prev,
                                                               n1s[g], n2s[g], n_all)
            blocks.append((comps, means, cov))
            bias_lo[list(comps)] = blo
            bias_hi[list(comps)] = bhi
        clamped = np.any(bias_lo + bias_hi > 0)
        est = estimate_from_blocks(plan, blocks, n_all, (bias_lo, bias_hi) if clamped else None)
        est.extra["khat"] = prev.get("khat", {})
        est.extra["interval_rule"] = self.interval_rule
        est.extra["mechanism"] = prev.get("mechanism", {})
        est.extra["intervals"] = prev.get("intervals", {})
        est.extra["estimator"] = prev.get("estimator", {})
        picked = sorted(set((prev.get("mechanism") or {}).values()))
        if picked:  # the randomizer stage I picked (one per group; usually one for all)
            est.extra["mechanisms"]["randomizer"] = picked[0] if len(picked) == 1 else \
                dict(prev["mechanism"])
        est.extra["stage1_reports"] = sum(n1s.values())
        note_edges(plan, est, previous)
        return est

    def _estimate_group(self, plan: Any, g: int, acc: ValueAccumulator | None,
                        prev: Published, n1: int, n2: int, n_all: int
                        ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(components, means, covariance, bias_lo, bias_hi)`` of group ``g`` as an
        estimate of the mean over all ``n_all`` users (:mod:`~uldp.collector.methods.
        sizing`: the chosen estimator's stage-I functional and stage-II mean, its
        variance :func:`~uldp.collector.methods.sizing.combine_error`)."""
        grp = plan.grouping.groups[g]
        comps = grp.components
        C = len(comps)
        eps_c = grp.eps_c
        fine = self.fine(plan, g)
        masses = ((prev.get("stage1") or {}).get(str(g)) or {}).get("masses")
        ests = (prev.get("estimator") or {}).get(str(g)) or ["debiased"] * C
        oracle = self.oracle(plan, g)
        n = n1 + n2
        D = np.array([fine[c].bound for c in comps])
        if n == 0:
            return comps, np.zeros(C), np.diag(D**2), np.zeros(C), np.zeros(C)
        means, var = np.zeros(C), np.zeros(C)
        blo, bhi, shared = np.zeros(C), np.zeros(C), np.zeros(C)
        noise2 = np.zeros(C)
        c2 = acc.means() if acc is not None and n2 > 0 else np.zeros(C)
        for i, c in enumerate(comps):
            pts = grid_points(fine[c].bound, fine[c].bins)
            st = None if n1 == 0 or masses is None else \
                GridStage(pts, np.asarray(masses[i], dtype=np.float64), n1, oracle, eps_c)
            if n2 > 0 and acc is not None:
                noise2[i] = _stage_two_noise(acc, i, eps_c, st)
            if st is None:  # no stage I: the stage-II mean
                means[i], var[i] = c2[i], noise2[i] / max(n2, 1)
            elif n2 == 0 or acc is None:  # no stage II: the stage-I users' mean
                means[i] = float(pts @ st.mass)
                var[i] = float(st.report_variance(pts[None, :])[0]) / n1
            else:
                means[i], var[i], shared[i], blo[i], bhi[i] = _component(
                    st, acc.intervals[i], ests[i], n1, n2, float(c2[i]), float(noise2[i]),
                    assumed_samples(plan.spec))
        # what the two random halves of the users disagree on is shared by the components
        # of a user: bounded jointly (Cauchy–Schwarz); the noise is independent
        cov = np.diag(var) + np.outer(shared, shared)
        if n < n_all and acc is not None and n2 > 1:
            # the group's users are a random part of all users: their own spread, from the
            # stage-II reports' covariance beyond their noise (as ``finite_population``)
            excess = acc.covariance() * n2 - np.diag(noise2)
            w, V = np.linalg.eigh((excess + excess.T) / 2)
            excess = (V * np.maximum(w, 0.0)) @ V.T
            cov = cov + (1 - n / n_all) * excess / n
        return comps, means, cov, blo, bhi

    # ---- predictions ----------------------------------------------------------------
    def component_variance(self, plan: Any, sample_var: np.ndarray,
                           stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        """The expected squared error of every component (:meth:`predict`), for users
        whose statistics have this mean and variance (normal, cut to the support; without
        them, users alike with ``Var Y = σ²/m`` around the centre)."""
        return self.predict(plan, sample_var, stat_var, stat_mean)[0]

    def predict(self, plan: Any, sample_var: np.ndarray, stat_var: np.ndarray | None = None,
                stat_mean: np.ndarray | None = None, population: str | None = None,
                draws: int = PREDICTION_DRAWS, values: np.ndarray | None = None,
                tol: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(mse, half_width)`` of every component: the rule run on
        :data:`PREDICTION_DRAWS` stage-I histograms of the population (the stage-I users
        drawn, the oracle's noise added; seeded, so the same public facts give the same
        prediction), each outcome's error computed exactly for the population, averaged.
        ``population``: one of :func:`reference_population` instead of the moments;
        ``values``: the users' statistics themselves (``(n, C)``: own data);
        ``draws = 0``: the rule on the expected histogram only (fast: ``auto``'s ranking).
        ``tol``: draw :data:`CHUNK` histograms at a time until the standard error of the
        mean error is at most ``tol`` times the mean, at most ``draws`` (the rule's outcome
        may be a rare wide window: :data:`OWN_DATA_DRAWS`)."""
        C = plan.n_components
        mse, half = np.zeros(C), np.zeros(C)
        m = plan.spec.samples
        for g, grp in enumerate(plan.grouping.groups):
            fine = self.fine(plan, g)
            n1, n2 = plan.stage_size(g, 1), plan.stage_size(g, 2)
            for c in grp.components:
                p = fine[c]
                if values is not None:
                    vals = np.clip(np.asarray(values[:, c], dtype=np.float64), -p.bound,
                                   p.bound)
                    wts = np.full(vals.size, 1.0 / max(vals.size, 1))
                elif population is not None:
                    vals, wts = reference_population(population, p.bound, m)
                else:
                    var = float(sample_var[c]) / m if stat_var is None else float(stat_var[c])
                    mu = 0.0 if stat_mean is None else float(stat_mean[c])
                    vals, wts = _normal(mu, var, p.bound)
                mse[c], half[c] = predict_component(
                    self, plan, g, p, vals, wts, n1, n2, plan.spec.users,
                    population is not None, draws, tol)
        return mse, half


class TwoStageAdaptive(TwoStageSized):
    """``two-stage-adaptive``: stage I (the same grid reports) chooses only the scalar
    randomizer and the estimate; stage II reports on the whole support, so nothing is
    clamped and the interval holds for every population without an assumption. What it
    buys is the randomizer: Duchi's one bit where the users' values sit at the range's
    ends (at m = 1, ε = 8 its noise is ~20× below HM's), PM where they sit inside, where
    ``ssl`` must take the worst-case best (``docs/mechanisms.md``, "Scalar randomizers").
    The stage-I users' reports count in the final estimate, as in ``two-stage-sized``.
    Measured: in band at n = 1600; at n = 10⁵ first measured 0.90–0.93; part by part every
    piece is calibrated (``tests/test_adaptive_noise.py``, ``bench/adaptive_coverage.py
    --production``) and over fresh seeds it covers 0.944 (ε = 1, 3 % stage I, 700
    repetitions) and 0.962 (ε = 8): the shortfall was chance
    (``bench/results/population_suite_adaptive.md``); ``auto`` weighs it
    (``ADAPTIVE_BY_DEFAULT``)."""

    name = "two-stage-adaptive"
    support_only = True
    counts_on_assumption = False
