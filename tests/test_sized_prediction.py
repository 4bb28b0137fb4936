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
    for sample in np.concatenate(list(stage_one_draws(pi, n1, oracle, eps_c, draws))):
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
