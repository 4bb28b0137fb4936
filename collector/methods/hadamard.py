"""Method ``hadamard``, collector half: one Hadamard coefficient per user, averaged over the
user's whole dataset and clamped to a window sized from the users' measured spread; or, where
the users differ, the one-record frequency oracle.

See ``docs/algorithms.md`` ("Hadamard windows"). The device half is
``uldp.client.methods.hadamard``. Kinds ``distribution`` (the coefficients of the category
frequencies, §6.3 of the seed paper's ℓ1/Hadamard case) and ``mean-l1`` (§6.2).

Every user serves one coefficient ``c`` (one group per coefficient; for a distribution
``c ≥ 1``: coefficient 0 is ``1/√K`` for every user, public) and takes part in one of three
phases:

1. **centre** (share ``s₁``): the reports of the fallback method — one sampled record
   through the best frequency oracle (distribution), or the coefficient on its whole range
   ``[−D, D]`` (``mean-l1``). Closing it estimates every coefficient ``θ̂¹_c`` and its
   variance ``v_c``, and sets the scale ``τ_c = √(D²/m + v_c)``: the spread of
   ``Y_ic − θ̂¹_c`` when users differ only by the sampling of their ``m`` records (per-sample
   variance at most ``D²``) and the centre is off by its own noise.
2. **spread** (share ``s₂``, small): whether ``Y_ic`` lies in its window
   ``[θ̂¹_c − qτ_c, θ̂¹_c + qτ_c]`` (``q`` of least error on the model, :data:`QS`), one
   bit through the best frequency oracle over two categories. Closing it estimates the
   share ``M`` of users outside their windows, pooled over the coefficients (a precise
   number: standard error ≈ 0.014 with 5 000 users at ε = 1). Users alike put ``2Φ(−q)``
   there; a share above that by more than :data:`Z_OUTSIDE` standard errors says the users
   differ, and the method falls back; so does a window whose error on the model is not
   below the oracle's on the users left.
3. **window** (the rest): the coefficient clamped to its window through the chosen scalar
   randomizer — or, after a fallback, the centre's report again.

Estimates. Window: each coefficient is the mean of its window reports (the estimand is the
mean over *all* users who reported, so the reporters' spread enters with the
finite-population factor), its variance widened by the expected squared clamping bias of the
model — users alike, centre off by ``N(0, v_c)`` (:func:`model_bias2`). Fallback: the
oracle's estimate over the centre and window users together (the same reports), exactly as
method ``oracle``. The predicted error (:meth:`HadamardWindows.component_variance`) runs the
same rule on the normal model of the users' statistics.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.mechanisms import ORACLES
from uldp.client.methods.hadamard import HADAMARD_KINDS
from uldp.client.regimes import Group, Grouping
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.mechanisms import ORACLE_DECODERS
from uldp.collector.mechanisms.choice import (
    SCALAR_CHOICES,
    best_oracle,
    oracle_total_variance,
)
from uldp.collector.methods.base import Published
from uldp.collector.methods.common import (
    value_accumulator,
    value_mechanism,
    value_noise_variance,
)
from uldp.collector.methods.hadamard_estimate import (
    close_centre,
    values_estimate,
    window_estimate,
)
from uldp.collector.methods.hadamard_model import (
    EXACT_SAMPLES,
    QS,
    Z_CHARGE,
    binomial_bias2,
    clamps_ok,
    combine_centre,
    model_bias2,
    model_t2,
    normal_cdf,
    pass_limit,
    priced_excess,
    share_se,
    spread_share,
    test_windows,
)
from uldp.collector.methods.hadamard_pairs import (
    fallback_estimate,
    fallback_mse,
    fallback_records,
    pair_oracle,
    probe_groups,
)
from uldp.collector.methods.hadamard_predict import outcomes
from uldp.collector.methods.oracle import OracleAccumulator, SampledRecords

__all__ = ["HadamardWindows"]

_NORMAL = NormalDist()

class HadamardWindows:
    """Collector half of method ``hadamard`` (module docstring)."""

    name = "hadamard"
    device_method = "hadamard"
    stages: tuple[int, ...] = (1, 2, 3)

    # ---- structure -----------------------------------------------------------------
    @staticmethod
    def _first(kind_name: str) -> int:
        return 1 if kind_name == "distribution" else 0

    def grouping(self, spec: Any, n_components: int) -> Grouping:
        if spec.kind not in HADAMARD_KINDS:
            raise ValueError(f"method 'hadamard' estimates Hadamard coefficients "
                             f"({', '.join(HADAMARD_KINDS)}), not kind {spec.kind!r}")
        if spec.moment_p is not None:
            raise ValueError("method 'hadamard' needs a support bound (no heavy tails)")
        first = self._first(spec.kind)
        if n_components <= first:
            raise ValueError("method 'hadamard' needs at least two categories")
        return Grouping("hadamard", tuple(Group((c,), float(spec.epsilon))
                                          for c in range(first, n_components)))

    def stage_shares(self, spec: Any) -> tuple[float, float]:
        """``(s₁, s₂)``: the centre's share (``stage1_share``) and the spread's."""
        return float(spec.stage1_share), spread_share(spec.users, float(spec.epsilon))

    def n_groups(self, plan: Any) -> int:
        return len(plan.grouping.groups)

    def grouping_budget(self, spec: Any) -> tuple[float, int]:
        return spec.epsilon, spec.users

    def effective_sizes(self, n: int, m: int, epsilon: float) -> tuple[int, int, float]:
        return n, m, epsilon

    def noise_constant(self, n: int, K: int) -> float:
        return 8.0

    def device_offsets(self, plan: Any, slots: np.ndarray) -> np.ndarray | None:
        return None

    @staticmethod
    def _categorical(plan: Any) -> bool:
        return plan.kind.categories is not None

    def _bound(self, plan: Any, c: int) -> float:
        return float(plan.group_params(0)[c].bound)

    def _comp(self, plan: Any, g: int) -> int:
        return int(plan.grouping.groups[g].components[0])

    def oracle_name(self, plan: Any) -> str:
        A = plan.kind.categories(plan.template)
        eps = float(plan.spec.epsilon)
        return best_oracle(A, eps) if plan.spec.oracle in ("best", "laplace") \
            else plan.spec.oracle

    def _records(self) -> SampledRecords:
        return SampledRecords()

    # ---- tasks and accumulators ----------------------------------------------------
    def centre_task(self, plan: Any, group: int, records: int = 1) -> TaskSpec:
        """The centre's report (``records = 2``: two records at ``ε/2``, hadamard_pairs)."""
        if self._categorical(plan):
            every = tuple(range(plan.n_components))
            if records == 2:
                name, eps2 = pair_oracle(self, plan)
                return plan.group_task(group, 1, components=every, mechanism=name,
                                       eps_c=eps2, records=2)
            return plan.group_task(group, 1, components=every,
                                   mechanism=self.oracle_name(plan))
        D = self._bound(plan, self._comp(plan, group))
        return plan.group_task(group, 1, intervals=((-D, D),),
                               mechanism=value_mechanism(plan.spec, float(plan.spec.epsilon)))

    def task(self, plan: Any, group: int, stage: int, previous: Published | None,
             slot: int | None = None) -> TaskSpec:
        if stage == 1:
            return self.centre_task(plan, group, 2 if group in probe_groups(self, plan) else 1)
        if previous is None:
            raise ValueError(f"stage {stage} of method hadamard needs what the previous "
                             "phase published")
        if stage == 2:
            lo, hi = previous["test_intervals"][str(group)]
            return plan.group_task(group, 2, intervals=((float(lo), float(hi)),),
                                   mechanism=previous["oracle"])
        if previous.get("mode") != "window":
            return self.centre_task(plan, group, int(previous.get("fallback_records", 1)))
        lo, hi = previous["intervals"][str(group)]
        return plan.group_task(group, 3, intervals=((float(lo), float(hi)),),
                               mechanism=previous["mechanism"])

    def accumulator(self, plan: Any, task: TaskSpec) -> Any:
        if task.stage == 2:
            oracle = ORACLES[task.mechanism]
            return OracleAccumulator(2, 1, ORACLE_DECODERS[task.mechanism], task.eps_c,
                                     oracle.length(2, task.eps_c), oracle.limit(2, task.eps_c))
        if task.stage == 1 and self._categorical(plan):
            return self._records().accumulator(plan, task)
        return value_accumulator(task)

    def alike_var(self, plan: Any, theta: np.ndarray, var: np.ndarray) -> np.ndarray:
        """``Var Y_ic`` of users alike: ``σ_c²/m`` of ``m`` i.i.d. records, with ``σ_c²`` the
        per-record variance — ``D² − θ_c²`` for a distribution (``φ_c = ±D``; ``θ_c`` at
        the centre's estimate moved two standard errors toward 0), at most ``D²``."""
        D = np.array([self._bound(plan, c) for c in range(plan.n_components)])
        if not self._categorical(plan):
            return D * D / plan.spec.samples
        low = np.maximum(np.abs(theta) - 2 * np.sqrt(np.maximum(var, 0.0)), 0.0)
        return np.maximum(D * D - low * low, 0.0) / plan.spec.samples

    def alike_bias2(self, plan: Any, S2: np.ndarray, v: np.ndarray, half: np.ndarray,
                    th: np.ndarray, D: np.ndarray) -> np.ndarray:
        """The windows' expected squared clamping bias for users alike: from the exact
        (binomial) law of a distribution's coefficient average at ``m`` up to
        :data:`EXACT_SAMPLES` (:func:`binomial_bias2`), the normal model's above
        (:func:`model_bias2`) and for values."""
        m = int(plan.spec.samples)
        if self._categorical(plan) and m <= EXACT_SAMPLES:
            return binomial_bias2(m, np.sqrt(v), half, th, D)
        return model_bias2(np.sqrt(S2), np.sqrt(v), half, th, D)

    def window(self, plan: Any, theta: np.ndarray, var: np.ndarray, users_var: np.ndarray,
               mechs: tuple[str, ...] = SCALAR_CHOICES
               ) -> tuple[float, str, np.ndarray, np.ndarray, np.ndarray, float]:
        """The window of least error on the model: users' statistics ``N(θ_c,
        users_var_c)``, the centre's error ``N(0, var_c)``, ``τ_c = √(D²/m + var_c)``.
        The window is ``θ_c ± q·τ_c`` with ``τ_c = √(alike_var_c + var_c)``. Returns ``q``,
        the randomizer, ``lo``, ``hi`` and ``E b²`` per served coefficient, and the error."""
        eps = float(plan.spec.epsilon)
        G = self.n_groups(plan)
        comps = [self._comp(plan, g) for g in range(G)]
        D = np.array([self._bound(plan, c) for c in comps])
        # a centre estimate outside the range (an unbiased estimate can be) is cut to it
        th = np.clip(theta[comps], -D, D)
        v, S2 = np.maximum(var[comps], 0.0), users_var[comps]
        tau = np.sqrt(self.alike_var(plan, theta, var)[comps] + v)
        n3 = np.array([max(plan.stage_size(g, 3), 1) for g in range(G)], dtype=np.float64)
        best: tuple[float, float, str, np.ndarray, np.ndarray, np.ndarray] | None = None
        for q in [q for q in QS if clamps_ok(q, G)] or [QS[-1]]:
            half = q * tau
            lo, hi = np.maximum(th - half, -D), np.minimum(th + half, D)
            empty = ~(hi > lo)  # a window a rounding could close: the whole range
            lo, hi = np.where(empty, -D, lo), np.where(empty, D, hi)
            mb2 = self.alike_bias2(plan, S2, v, half, th, D)
            t2 = float(np.mean(model_t2(np.sqrt(S2), np.sqrt(v), half)))
            for mech in mechs:
                noise = np.array([value_noise_variance(mech, float(hi[g] - lo[g]), eps, t2)
                                  for g in range(G)])
                v3 = (noise + S2) / n3 + mb2
                mse = float(sum(combine_centre(0.0, float(v3[g]), 0.0, float(v[g]),
                                               float(mb2[g]))[1] for g in range(G)))
                if best is None or mse < best[0] * (1 - 1e-12):
                    best = (mse, float(q), mech, lo, hi, mb2)
        assert best is not None
        return best[1], best[2], best[3], best[4], best[5], best[0]

    def spread_windows(self, plan: Any, theta: np.ndarray, var: np.ndarray, q: float
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The spread test's interval of every served coefficient (:func:`test_windows`)
        and its half-width in τ."""
        comps = [self._comp(plan, g) for g in range(self.n_groups(plan))]
        D = np.array([self._bound(plan, c) for c in comps])
        v = np.maximum(var[comps], 0.0)
        tau = np.sqrt(self.alike_var(plan, theta, var)[comps] + v)
        return test_windows(np.clip(theta[comps], -D, D), tau, q, D)

    def window_t2(self, plan: Any, theta: np.ndarray, var: np.ndarray, q: float
                  ) -> np.ndarray:
        """:func:`model_t2` of every served coefficient's window at half-width ``q·τ``."""
        comps = [self._comp(plan, g) for g in range(self.n_groups(plan))]
        S2 = self.alike_var(plan, theta, var)[comps]
        v = np.maximum(var[comps], 0.0)
        return model_t2(np.sqrt(S2), np.sqrt(v), q * np.sqrt(S2 + v))

    def publish(self, plan: Any, stage: int, accs: dict[int, Any]) -> Published:
        if stage != 1:
            raise ValueError(f"stage {stage} of method hadamard publishes with the stage "
                             "before (publish_with)")
        centre = close_centre(self, plan, accs)
        theta, var = np.asarray(centre["theta"]), np.asarray(centre["var"])
        q, mech, lo, hi, mb2, mse = self.window(plan, theta, var,
                                                self.alike_var(plan, theta, var))
        G = self.n_groups(plan)
        t2 = self.window_t2(plan, theta, var, q)
        tlo, thi, qt = self.spread_windows(plan, theta, var, q)
        return {"centre": centre, "q_window": q, "mechanism": mech,
                "test_intervals": {str(g): [float(tlo[g]), float(thi[g])] for g in range(G)},
                "outside_alike": float(np.mean(2 * normal_cdf(-qt))),
                "model_t2": {str(g): float(t2[g]) for g in range(G)},
                "intervals": {str(g): [float(lo[g]), float(hi[g])] for g in range(G)},
                "model_bias2": {str(g): float(mb2[g]) for g in range(G)},
                "window_mse": mse, "oracle": best_oracle(2, float(plan.spec.epsilon)),
                "reports": centre["reports"]}

    # ---- closing the spread: the rule --------------------------------------------------
    def outside_share(self, accs: dict[int, Any], eps: float) -> tuple[float, float, int]:
        """The pooled share of users outside their windows, its standard error
        (:func:`share_se`), reports."""
        num, var, n = 0.0, 0.0, 0
        for acc in accs.values():
            if acc is None or acc.count == 0:
                continue
            f, se = acc.estimate()
            num += acc.count * float(f[1])
            var += acc.count**2 * float(se[1]) ** 2
            n += acc.count
        if n == 0:
            return 1.0, float("inf"), 0
        return num / n, share_se(num / n, math.sqrt(var) / n, n, eps), n

    def decide(self, plan: Any, previous: Published, M: float, sd: float, n2: int,
               fallback: float) -> tuple[bool, dict[str, Any]]:
        """Window or fallback (module docstring): the window runs when the share of users
        outside the test's windows beyond what users alike put there (``outside_alike``,
        ``2Φ(−q_test)``) is not significant (at most :data:`Z_OUTSIDE` standard errors)
        and, at its upper bound, at most :data:`MAX_UNSEEN` (:func:`pass_limit`); and when its error
        on the model, plus that excess share's possible clamping (``Σ_c (excess·D_c)²``),
        is below the fallback's."""
        expected = float(previous["outside_alike"])
        excess = M - expected
        alike = n2 > 0 and excess <= pass_limit(sd)
        # the users the test sees outside beyond the model are clamped: each coefficient's
        # estimate may move by up to that share times D (a far user), priced in the error
        # (the share beyond Z_PRICE standard errors: priced_excess) and, beyond Z_CHARGE,
        # in the intervals
        finite = math.isfinite(sd)
        priced = priced_excess(excess, sd) if finite else 0.0
        charged = priced_excess(excess, sd, Z_CHARGE) if finite else 0.0
        model = float(previous["window_mse"]) + float(np.sum(self._excess_bias2(plan, priced)))
        info = {"outside": M, "outside_se": sd, "outside_alike": expected,
                "spread_reports": n2, "window_mse": model, "fallback_mse": fallback,
                "priced_excess": charged}
        return alike and model < fallback, info

    def _excess_bias2(self, plan: Any, priced: float) -> np.ndarray:
        """Per served coefficient, the squared bias a priced excess share could cause:
        ``(priced·D_c)²`` (its users as far as the range allows)."""
        D = np.array([self._bound(plan, self._comp(plan, g))
                      for g in range(self.n_groups(plan))])
        return (priced * D) ** 2

    def choose(self, plan: Any, previous: Published, accs: dict[int, Any]) -> Published:
        """Close the spread phase (module docstring)."""
        M, sd, n2 = self.outside_share(accs, float(plan.spec.epsilon))
        window, info = self.decide(plan, previous, M, sd, n2,
                                   self._fallback_mse(plan, previous["centre"], n2))
        base = {k: previous[k] for k in ("centre", "q_window", "mechanism", "intervals",
                                         "model_bias2", "model_t2")}
        records = 1 if window or not self._categorical(plan) \
            else fallback_records(self, plan, previous["centre"])
        return base | {"spread": info, "mode": "window" if window else "fallback",
                       "reports": int(previous.get("reports", 0)) + n2,
                       "fallback_records": records}

    def _fallback_mse(self, plan: Any, centre: dict[str, Any], n2: int) -> float:
        """The fallback's error on the users left: the oracle at the centre's frequencies."""
        n_left = max(plan.spec.users - n2, 1)
        eps = float(plan.spec.epsilon)
        if (paired := fallback_mse(self, plan, centre, n_left)) is not None:
            return paired  # the probe ran: the fallback the query would run (hadamard_pairs)
        if self._categorical(plan):
            f = np.clip(np.asarray(centre["freq"]), 0, 1)
            noise = oracle_total_variance(self.oracle_name(plan), f.size, eps)
            return float((noise + max(1.0 - float(f @ f), 0.0)) / n_left)
        G, mech = self.n_groups(plan), value_mechanism(plan.spec, eps)
        return float(sum(value_noise_variance(mech, 2 * self._bound(plan, self._comp(plan, g)),
                                              eps) / max(n_left / G, 1.0) for g in range(G)))

    def publish_with(self, plan: Any, stage: int, accs: dict[int, Any],
                     previous: Published | None) -> Published:
        """``publish`` with what the stage before published (the program passes it)."""
        if stage == 2:
            if previous is None:
                raise ValueError("the spread phase needs the centre's publication")
            return self.choose(plan, previous, accs)
        return self.publish(plan, stage, accs)

    # ---- the estimate -----------------------------------------------------------------
    def finalize(self, plan: Any, accs: dict[int, Any], previous: Published | None
                 ) -> Estimate:
        if previous is None:
            raise ValueError("method hadamard's last phase needs what the spread published")
        centre = previous["centre"]
        if previous.get("mode") == "window":
            est = window_estimate(self, plan, accs, previous, int(previous.get("reports", 0)))
        elif self._categorical(plan):
            est = fallback_estimate(self, plan, accs, centre)
        else:
            est = values_estimate(self, plan, accs, centre)
        est.extra["hadamard"] = {k: previous[k] for k in ("mode", "q_window", "mechanism",
                                                             "fallback_records")
                                 if k in previous} | {"spread": previous.get("spread", {})}
        if "spread_inflation" in est.extra:
            est.extra["hadamard"]["inflation"] = est.extra.pop("spread_inflation")
        est.extra["method"] = plan.spec.method
        if plan.auto:
            est.extra["auto"] = dict(plan.auto)
        return est

    def component_variance(self, plan: Any, sample_var: np.ndarray,
                           stat_var: np.ndarray | None = None,
                           stat_mean: np.ndarray | None = None) -> np.ndarray:
        """The predicted MSE of every component: the mixture of the windows' error and the
        fallback's, weighted by the probability that the spread test passes
        (:meth:`outcomes`)."""
        window, fallback, p_window = self.outcomes(plan, sample_var, stat_var, stat_mean)
        if window is None:
            return fallback
        return p_window * window + (1 - p_window) * fallback

    def predict(self, plan: Any, sample_var: np.ndarray, stat_var: np.ndarray | None = None,
                stat_mean: np.ndarray | None = None, population: str | None = None,
                draws: int | None = None, values: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """``(mse, half_width)`` of every component. ``mse``: :meth:`component_variance`.
        ``half_width``: the interval the query will likely publish — ``z`` times the
        square root of the variance its estimate carries in the likelier outcome
        (:meth:`outcomes`): the windows' (the same per-coefficient computation as
        :func:`hadamard_estimate.window_estimate`, with the charged excess share at its
        expectation when the test passes) or the fallback's. ``population``: a reference population
        (``alike``: every statistic the mean of ``m`` records of variance ``D²``;
        ``spread``; ``ends``) instead of the moments. ``draws``, ``values``: unused (the
        rule is run on the normal model)."""
        K = plan.n_components
        if population is not None:
            share = {"alike": 1.0 / plan.spec.samples, "spread": 1.0 / 3.0, "ends": 1.0}
            if population not in share:
                raise ValueError(f"unknown reference population {population!r}")
            D2 = np.square(plan.kind.component_bounds(plan.template))
            sample_var = D2 if population != "spread" else D2 / 3.0
            stat_var, stat_mean = D2 * share[population], np.zeros(K)
        window, fallback, p_window = self.outcomes(plan, sample_var, stat_var, stat_mean,
                                                   interval=True)
        mse = fallback if window is None else p_window * window + (1 - p_window) * fallback
        likely = fallback if window is None or p_window < 0.5 else window
        z = _NORMAL.inv_cdf(0.5 + plan.spec.confidence / 2)
        return mse, z * np.sqrt(np.maximum(likely, 0.0))

    def outcomes(self, plan: Any, sample_var: np.ndarray,
                 stat_var: np.ndarray | None = None, stat_mean: np.ndarray | None = None,
                 interval: bool = False) -> tuple[np.ndarray | None, np.ndarray, float]:
        """``(window, fallback, P(window))`` on the normal model
        (:func:`uldp.collector.methods.hadamard_predict.outcomes`)."""
        return outcomes(self, plan, sample_var, stat_var, stat_mean, interval)
