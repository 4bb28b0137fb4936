"""The prediction of ``two-stage-sized`` over many drawn stage-I histograms
(``collector/methods/sized_predict.py::_predict_uncached``, ``sizing.choose_many``) against the
brute force: the rule run on each histogram alone (``sizing.choose``) and each outcome's
error and stated half-width computed one by one (``sized._outcome``)."""

from __future__ import annotations

from functools import cache
from statistics import NormalDist

import numpy as np

from uldp.collector.methods.alike import assumed_samples
from uldp.collector.methods.sized import fine_bins
from uldp.collector.methods.sized_predict import (
    _noise_fn,
    _outcome,
    _predict_uncached,
    prediction_draws,
    stage_one_draws,
)
from uldp.collector.methods.sizing import GridStage, choose, expected_masses, grid_points
from uldp.collector.planner import QuerySpec, compile_query, with_best_mechanisms


@cache
def _concentrated_plan() -> tuple:
    """1 600 users, each the mean of 1 000 Bernoulli(0.3) records (the population suite's
    ``concentrated``), ε = 1, ``assume="users-alike"``, a 30 % stage I (``auto``'s): the
    rule's outcome is bimodal (a tight clamped window, or on some histograms a wide one
    with ~30× its error; 6 of these 32)."""
    spec = QuerySpec(**with_best_mechanisms(dict(
        kind="mean", epsilon=1.0, users=1600, samples=1000, dim=1, method="two-stage-sized",
        seed=0, query_id="t", lo=0.0, hi=1.0, assume="users-alike",
        stage1_share=0.3)))
    plan = compile_query(spec)
    g = np.random.default_rng(6)
    vals = g.binomial(1000, 0.3, 1600) / 1000.0 - 0.5  # centred on the range
    return plan, vals


def test_prediction_over_many_histograms_equals_the_rule_run_on_each_alone():
    plan, vals = _concentrated_plan()
    method = plan.method
    p = fine_bins(plan.group_params(0)[0], plan.spec.samples)
    n1, n2 = plan.stage_size(0, 1), plan.stage_size(0, 2)
    wts = np.full(vals.size, 1.0 / vals.size)
    draws = 32
    fast = _predict_uncached(method, plan, 0, p, vals, wts, n1, n2, plan.spec.users, False,
                             draws)
    # brute force, on the very same histograms
    eps_c = plan.grouping.groups[0].eps_c
    oracle = method.oracle(plan, 0)
    pts = grid_points(p.bound, p.bins)
    pi = expected_masses(vals, wts, pts)
    truth = GridStage(pts, pi, n1, oracle, eps_c)
    z = NormalDist().inv_cdf(0.5 + plan.spec.confidence / 2)
    noise, alike = _noise_fn(eps_c), assumed_samples(plan.spec)
    spread = float(np.var(vals)) * max(1 - (n1 + n2) / plan.spec.users, 0.0) / (n1 + n2)
    errs, halves, widths = [], [], []
    for sample in np.concatenate(list(prediction_draws(vals, wts, pts, n1, plan.spec.users,
                                                       oracle, eps_c, draws))):
        seen = GridStage(pts, sample, n1, oracle, eps_c)
        per = choose(seen, n1, n2, method.mechanisms(plan, eps_c), noise,
                     plan.spec.objective, plan.spec.confidence, method.estimators(plan), alike)
        mech = min(per, key=lambda k: per[k].objective)
        ch = per[mech]
        err, hw = _outcome(truth, seen, vals, wts, float(pts[ch.i]), float(pts[ch.j]),
                           ch.estimator, mech, noise, n1, n2, z, alike)
        errs.append(err + spread)
        halves.append(float(np.sqrt(hw * hw + z * z * spread)))
        widths.append(ch.j - ch.i)
    assert len(errs) == draws
    # the draws hold both outcomes, so the test weighs the rare wide window too
    assert max(widths) > 3 * min(widths)
    assert np.isclose(fast[0], np.mean(errs), rtol=1e-9, atol=0)
    assert np.isclose(fast[1], np.mean(halves), rtol=1e-9, atol=0)


def test_a_tolerance_draws_until_the_mean_error_is_known_and_stops_early_when_it_is():
    plan, vals = _concentrated_plan()
    p = fine_bins(plan.group_params(0)[0], plan.spec.samples)
    n1, n2 = plan.stage_size(0, 1), plan.stage_size(0, 2)
    wts = np.full(vals.size, 1.0 / vals.size)
    args = (plan.method, plan, 0, p, vals, wts, n1, n2, plan.spec.users, False)
    # a tolerance nothing meets: every one of the draws (the same as without one)
    assert _predict_uncached(*args, 48, 1e-9) == _predict_uncached(*args, 48)
    # a loose one: the first two chunks, then stop
    assert _predict_uncached(*args, 48, 10.0) == _predict_uncached(*args, 32)


def _enumerated_covariance(oracle: str, pi: np.ndarray, eps: float) -> np.ndarray:
    """The brute force of ``oracle_covariance``: every support a report can have, with its
    exact probability from the design, for every value — the covariance of the decoded
    share vector averaged over ``π``."""
    from itertools import combinations, product

    from uldp.client.mechanisms.exact import units_of
    from uldp.client.mechanisms.ss import ss_design
    from uldp.collector.mechanisms import ORACLE_DECODERS

    k = pi.size
    p, q = ORACLE_DECODERS[oracle].pq(k, eps)
    cov = np.zeros((k, k))
    for v in range(k):
        outcomes: list[tuple[float, np.ndarray]] = []
        if oracle == "grr":
            outcomes = [(p if y == v else q, np.eye(k)[y]) for y in range(k)]
        elif oracle == "ss":
            w = ss_design(k, units_of(eps)).omega
            subsets = [np.isin(np.arange(k), c).astype(float)
                       for c in combinations(range(k), w)]
            n_in = sum(1 for s in subsets if s[v])
            outcomes = [(p / n_in if s[v] else (1 - p) / (len(subsets) - n_in), s)
                        for s in subsets]
        else:  # oue: independent bits
            for bits in product((0.0, 1.0), repeat=k):
                b = np.array(bits)
                pr = np.prod(np.where(np.arange(k) == v, np.where(b > 0, p, 1 - p),
                                      np.where(b > 0, q, 1 - q)))
                outcomes.append((float(pr), b))
        P = np.array([o[0] for o in outcomes])
        assert np.isclose(P.sum(), 1.0, rtol=0, atol=1e-12)
        f = (np.array([o[1] for o in outcomes]) - q) / (p - q)
        m = P @ f
        cov += pi[v] * ((f - m).T * P) @ (f - m)
    return cov


def test_oracle_covariance_is_the_exact_covariance_of_a_decoded_report():
    """Against every support enumerated with its probability: the diagonal is the
    per-point variance the draws used before, and the off-diagonal terms make subset
    selection's and randomized response's decoded shares sum to exactly 1 (their total
    variance is 0), which independent per-point noise missed (issue 24)."""
    from uldp.collector.methods.sized_predict import oracle_covariance

    pi = np.random.default_rng(3).dirichlet(np.ones(6))
    for oracle, eps in (("ss", 0.5), ("ss", 1.0), ("grr", 2.0), ("oue", 1.0)):
        exact = _enumerated_covariance(oracle, pi, eps)
        got = oracle_covariance(oracle, pi, eps)
        assert np.allclose(got, exact, rtol=1e-9, atol=1e-9 * np.abs(exact).max()), oracle
        if oracle != "oue":
            assert abs(got.sum()) <= 1e-9 * np.trace(got)


def test_drawn_stage_one_histograms_have_the_exact_covariance_and_sum_to_one():
    """The histograms a prediction runs the rule on: subset selection's sum to 1 (as stage
    I's decoded shares do), and over 4 000 draws their covariance is the multinomial's plus
    the oracle's (each entry within 4 standard errors of a sample covariance)."""
    from uldp.collector.methods.sized_predict import oracle_covariance

    pi = np.random.default_rng(4).dirichlet(np.ones(9))
    n1, eps, draws = 16, 0.5, 4000
    h = np.concatenate(list(stage_one_draws(pi, n1, "ss", eps, draws)))
    assert h.shape == (draws, 9)
    assert np.allclose(h.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    want = ((np.diag(pi) - np.outer(pi, pi)) + oracle_covariance("ss", pi, eps)) / n1
    d = h - pi
    got = d.T @ d / draws
    # sd of a sample covariance of normals: sqrt((Σ_jj Σ_ll + Σ_jl²) / draws)
    se = np.sqrt((np.outer(np.diag(want), np.diag(want)) + want * want) / draws)
    assert np.all(np.abs(got - want) <= 4 * se)


def test_own_users_enter_stage_one_without_replacement_with_the_exact_covariance():
    """A prediction on the users themselves draws stage I as the plan does: ``n₁`` of the
    ``N`` users without replacement, each rounded to the grid, plus the oracle's noise.
    Over 4 000 draws the histograms' covariance is the rounding's, plus the users' spread
    times the finite-population factor ``(N − n₁)/(N − 1)`` (0.6 here: a multinomial
    draw from the shares misses it, and fails this), plus the oracle's — each entry within
    4 standard errors of a sample covariance."""
    from uldp.collector.methods.sized_predict import oracle_covariance, stage_one_user_draws

    g = np.random.default_rng(5)
    pts = grid_points(1.0, 5)
    vals = np.concatenate([g.uniform(-1, -0.5, 30), g.uniform(0.5, 1, 20)])
    N, n1, eps, draws = vals.size, 20, 4.0, 4000
    h = np.concatenate(list(stage_one_user_draws(vals, pts, n1, "ss", eps, draws)))
    assert np.allclose(h.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    a = np.array([expected_masses(np.array([v]), np.ones(1), pts) for v in vals])  # E Y_i
    rounding = np.mean([np.diag(r) - np.outer(r, r) for r in a], axis=0)
    spread = a.T @ a / N - np.outer(a.mean(0), a.mean(0))
    pi = a.mean(0)
    want = (rounding + (N - n1) / (N - 1) * spread + oracle_covariance("ss", pi, eps)) / n1
    d = h - pi
    got = d.T @ d / draws
    se = np.sqrt((np.outer(np.diag(want), np.diag(want)) + want * want) / draws)
    assert np.all(np.abs(got - want) <= 4 * se)
    # with replacement the spread would enter whole: the share of the lower half (where
    # 30 of the 50 users are) far outside its sample variance's sd
    with_repl = (rounding + spread + oracle_covariance("ss", pi, eps)) / n1
    F = np.array([1.0, 1, 1, 0, 0, 0])
    var = float(np.var(h @ F))
    assert abs(var - F @ want @ F) <= 4 * var * np.sqrt(2 / draws)
    assert abs(var - F @ with_repl @ F) > 8 * var * np.sqrt(2 / draws)
