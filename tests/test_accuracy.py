"""Statistical accuracy of the estimators against the spec's formulas (§13.3 S1–S5, S7, S8,
S11; issue targets: MSE within [0.8, 1.25] of §4.5 where nε² >= 1000, CI coverage within
[0.93, 0.97] for nominal 95 %).

Every test runs the production path (``run_query``: planner → device batch → accumulators)
with fixed seeds, so outcomes are deterministic. Each states the false-alarm rate its
tolerance would have for a random seed given a correct implementation.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from uldp.client.params import bin_index, bounded_params
from uldp.client.randomness import RandomSource
from uldp.collector.datasets import make_fleet_data
from uldp.collector.planner import QuerySpec, compile_query, predicted_mse
from uldp.collector.simulation.simulate import simulate_reps

pytestmark = pytest.mark.slow


def run(reps: int, dist: str = "bernoulli", seed: int = 0, **kw):
    spec = QuerySpec(seed=seed, **{"bound": 1.0, "method": "two-stage-paper", **kw})
    data = make_fleet_data(spec.kind, dist, spec.samples, spec.dim, spec.bound,
                           np.random.default_rng(seed),
                           moment_p=spec.moment_p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = compile_query(spec)
        res = simulate_reps(spec, data, RandomSource.seeded(seed), reps=reps, progress=False)
    pilot = data.draw(max(1, 20_000 // spec.samples))
    flat = pilot.reshape((-1,) + pilot.shape[2:])
    pred = predicted_mse(plan, plan.kind.sample_map(plan.template, flat).var(axis=0)) \
        if spec.moment_p is None else float("nan")
    return res, pred


# ---- S1: Lemma 4 -----------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["bernoulli", "uniform", "beta"])
def test_lemma4_bin_probabilities(dist):
    # 60k user means; bounds hold with large margin (Hoeffding), false alarm ~ 0
    m, D = 400, 1.0
    p = bounded_params(D, m, 1000)
    g = np.random.default_rng(1)
    if dist == "bernoulli":
        X, mu = np.where(g.random((60_000, m)) < 0.65, 1.0, -1.0), 0.3
    elif dist == "uniform":
        X, mu = g.uniform(-0.4, 1.0, (60_000, m)), 0.3
    else:
        X, mu = 2 * g.beta(2, 5, (60_000, m)) - 1, 2 * 2 / 7 - 1
    k = bin_index(X.mean(axis=1), p)
    probs = np.bincount(k, minlength=p.bins + 1)[1:] / k.size
    kstar = int(bin_index(np.array([mu]), p)[0])
    near = [probs[j - 1] for j in (kstar - 1, kstar, kstar + 1) if 1 <= j <= p.bins]
    assert max(near) >= 0.5 - math.exp(-2)
    far = [probs[j - 1] for j in range(1, p.bins + 1) if abs(j - kstar) >= 2]
    assert all(f <= 2 * math.exp(-8) + 1e-3 for f in far)


# ---- S2 + coverage: Algorithm 1 against the explicit formula ---------------------------
CONFIGS = [dict(users=1000, samples=100, epsilon=1.0),
           dict(users=2000, samples=200, epsilon=2.0),
           dict(users=1200, samples=30, epsilon=1.0)]


def test_algorithm1_mse_and_coverage_match_section_4_5():
    # 300 reps per config: MSE ratio has relative s.e. ~0.08, so [0.8, 1.25] is a
    # 2.4-3 s.e. band (false alarm ~1 % per config). Coverage pooled over 900 intervals:
    # s.e. 0.0073, band ±2.7 s.e. (false alarm ~0.7 %).
    covered = []
    for i, cfg in enumerate(CONFIGS):
        assert cfg["users"] * cfg["epsilon"] ** 2 >= 1000
        res, pred = run(300, kind="mean", seed=10 + i, **cfg)
        assert 0.8 <= res.sq_error / pred <= 1.25, (cfg, res.sq_error, pred)
        covered.append(res.ci_coverage)
    cov = float(np.mean(covered))
    assert 0.93 <= cov <= 0.97, cov


# ---- S3: rates ------------------------------------------------------------------------
def _slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def test_rate_in_n_and_m():
    # 150 reps per point: log-MSE s.e. ~0.115, slope s.e. over a 16x range ~0.06;
    # tolerance 0.2 around the formula's own slope (3.3 s.e., false alarm ~0.1 %).
    ns = [250, 1000, 4000]
    emp, pred = [], []
    for n in ns:
        r, p = run(150, kind="mean", users=n, samples=100, epsilon=2.0, seed=n)
        emp.append(r.sq_error)
        pred.append(p)
    assert abs(_slope(ns, emp) - _slope(ns, pred)) <= 0.2
    assert abs(_slope(ns, pred) + 1) <= 0.15  # ≈ 1/n up to the ln n of Δ
    ms = [100, 400, 1600]
    emp, pred = [], []
    for m in ms:
        r, p = run(150, kind="mean", users=1000, samples=m, epsilon=2.0, seed=m)
        emp.append(r.sq_error)
        pred.append(p)
    assert abs(_slope(ms, emp) + 1) <= 0.2  # noise-dominated: 1/m (3.3 s.e.)


def test_rate_in_epsilon_below_one():
    # slope -2 for ε < 1: 150 reps, s.e. of slope over a 2x range ~0.23 -> compare with
    # the formula's slope at tolerance 0.5 (false alarm ~3 %); formula slope itself exact
    es = [0.4, 0.8]
    emp, pred = [], []
    for e in es:
        r, p = run(150, kind="mean", users=6000, samples=100, epsilon=e, seed=int(e * 10))
        emp.append(r.sq_error)
        pred.append(p)
    assert abs(_slope(es, pred) + 2) <= 0.05
    assert abs(_slope(es, emp) + 2) <= 0.5


# ---- S4 + S5: Algorithm 2 regimes -----------------------------------------------------
@pytest.mark.parametrize("epsilon,regime", [(0.9, "high"), (2.0, "medium"), (60.0, "low")])
def test_linf_regimes_match_sum_formula(epsilon, regime):
    # 80 reps x 4 coordinates; ratio band [0.75, 1.33] ~ 3 s.e. (false alarm ~1 %)
    users = 8000 if regime == "high" else 3000
    res, pred = run(80, dist="uniform", kind="mean-linf", dim=4, users=users, samples=100,
                    epsilon=epsilon, seed=3)
    assert res.last.extra["regime"] == regime
    assert 0.75 <= res.sq_error / pred <= 1.33
    assert 0.9 <= res.ci_coverage <= 0.99


def _pred(kind, dim, eps, users=100_000, samples=100, dist="uniform", mode="default"):
    spec = QuerySpec(method="two-stage",
                     kind=kind, epsilon=eps, users=users, samples=samples, dim=dim, mode=mode)
    data = make_fleet_data(kind, dist, samples, dim, 1.0, np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = compile_query(spec)
    x = data.draw(50).reshape(-1, *((dim,) if kind != "distribution" else ()))
    return predicted_mse(plan, plan.kind.sample_map(plan.template, x).var(axis=0))


def test_high_regime_scaling_linf_d2_vs_l2_d():
    # formula-level: ℓ∞ grows like d², Kashin ℓ2 like d (§5.5, §6.1)
    r_inf = _pred("mean-linf", 32, 0.5) / _pred("mean-linf", 8, 0.5)
    assert 12 <= r_inf <= 20  # 16 = (32/8)^2
    r_l2 = _pred("mean-l2", 32, 0.5, dist="sphere") / _pred("mean-l2", 8, 0.5, dist="sphere")
    assert 3 <= r_l2 <= 5.5  # ≈ 4, up to ln terms and frame rows


def test_regime_continuity_in_epsilon():
    # S5 at the regime boundaries of the default [D7] grouping (d = 4, n = 1e5:
    # high|medium at 1, medium|low at 4 ln n = 46.05)
    for eps in ([0.99, 1.0, 1.01], [45.9, 46.06, 46.2]):
        preds = [_pred("mean-linf", 4, e) for e in eps]
        assert all(b <= a * 1.02 for a, b in itertools.pairwise(preds)), preds


def test_default_grouping_is_not_monotone_inside_the_medium_regime_but_tuned_is():
    # Spec finding: [D7] picks k = floor(ε) components per group, so going from ε = 1.5
    # (4 groups at ε_c = 1.5) to ε = 2 (2 groups at ε_c = 1) *raises* the error by ~12 %.
    assert _pred("mean-linf", 4, 2.0) > 1.05 * _pred("mean-linf", 4, 1.5)
    eps = [0.5, 0.9, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 8.0, 30.0, 60.0, 200.0]
    tuned = [_pred("mean-linf", 4, e, mode="tuned") for e in eps]
    assert all(b <= a * 1.01 for a, b in itertools.pairwise(tuned)), tuned
    default = [_pred("mean-linf", 4, e) for e in eps]
    assert sum(tuned) <= sum(default)


def test_l2_kashin_mean_matches_formula():
    res, pred = run(60, dist="sphere", kind="mean-l2", dim=4, users=4000, samples=20,
                    epsilon=4.0, seed=2)
    assert 0.7 <= res.sq_error / pred <= 1.4
    assert res.ci_coverage >= 0.88


# ---- S7: distributions ---------------------------------------------------------------
def test_distribution_error_grows_linearly_in_alphabet():
    r8, p8 = run(40, dist="uniform", kind="distribution", dim=8, users=4000, samples=50,
                 epsilon=2.0, seed=4)
    r32, p32 = run(40, dist="uniform", kind="distribution", dim=32, users=4000, samples=50,
                   epsilon=2.0, seed=5)
    # the estimates are post-processed into [0, 1] (DESIGN invariant 7): clipping onto a
    # box that contains the truth never increases the error, so the formula is an upper
    # bound here (at A = 32 most frequencies are small and clipping removes ~40 %)
    assert 0.7 <= r8.sq_error / p8 <= 1.4 and 0.4 <= r32.sq_error / p32 <= 1.4
    assert 2 <= r32.sq_error / r8.sq_error <= 8  # ≈ 4 up to ln factors and clipping
    assert abs(r32.last.extra["projected"].sum() - 1) < 1e-9


# ---- S8: heavy tails ------------------------------------------------------------------
def test_heavy_tails_user_level_beats_item_level_baselines_at_large_m():
    kw = dict(kind="mean", users=2000, samples=1000, epsilon=1.0, bound=None, moment_p=2.5)
    data = make_fleet_data("mean", "student-t:3", 1000, 1, None, np.random.default_rng(0),
                           moment_p=2.5)
    kw["moment_m"] = data.moment[1]
    res = {}
    for method in ("two-stage", "baseline-b", "baseline-a"):
        r, _ = run(8 if method != "baseline-a" else 2, dist="student-t:3", method=method,
                   seed=7, **kw)
        res[method] = r.sq_error
    assert res["two-stage"] < res["baseline-b"] / 3
    assert res["two-stage"] < res["baseline-a"] / 3


# ---- S11 and the baseline-B target ----------------------------------------------------
def test_theorem2_error_does_not_vanish_with_m_for_tiny_n():
    small, _ = run(40, kind="mean", users=6, samples=100, epsilon=1.0, seed=8)
    huge, _ = run(40, kind="mean", users=6, samples=10_000, epsilon=1.0, seed=9)
    assert huge.sq_error > 1e-3
    assert huge.sq_error > 0.1 * small.sq_error


def test_two_stage_beats_baseline_b_tenfold_at_large_m():
    # spec §13.2: at m = 10^4 Alg. 1 is ~50x better than B (n = 1000 here, 15 reps each)
    ts, _ = run(15, kind="mean", users=1000, samples=10_000, epsilon=1.0, seed=11)
    bb, _ = run(15, kind="mean", users=1000, samples=10_000, epsilon=1.0, seed=12,
                method="baseline-b")
    assert bb.sq_error / ts.sq_error >= 10
