"""Algorithm 1/2 building blocks: parameters, binning, regimes, tasks, accumulators.

Spec §3.2, §4.2–4.3, §5.2, §13.3 P1 (noise scales), P2 (one-hot structure), P4 (task
checks; the device ledger is tested with the SDK), [D3], [D4], [D7], [D12], [D22].
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from uldp.client.mechanisms.two_stage import one_hot_bins, stage1_reports, stage2_reports
from uldp.client.noise import discrete_laplace_pmf, laplace_scale
from uldp.client.params import GRID_STEPS, Alg1Params, bin_index, bounded_params
from uldp.client.randomness import RandomSource
from uldp.client.regimes import group_components
from uldp.client.tasks import (
    DataError,
    TaskRefused,
    TaskSpec,
    compute_report,
    report_length,
    task_epsilon,
    validate_task,
)
from uldp.collector.estimators.accumulators import BinAccumulator, ReportError, ValueAccumulator
from uldp.collector.planner import QuerySpec, compile_query


# ---- parameters and binning ------------------------------------------------------------
def test_bounded_params_follow_theorem_1():
    p = bounded_params(2.0, 100, 10_000)
    assert p.bin_width == pytest.approx(0.8)
    assert p.margin == pytest.approx(2.0 * math.sqrt(math.log(10_000) / 100))
    assert p.bins == 5 == math.ceil(math.sqrt(100) / 2)
    assert p.stage2_width == pytest.approx(3 * 0.8 + 2 * p.margin)


def test_clamp_interval_from_khat_and_fallback():
    p = bounded_params(1.0, 64, 100)  # h = 0.5, B = 4
    lo, hi = p.clamp_interval(2)
    assert lo == pytest.approx(-1.0 + 0 * 0.5 - p.margin)
    assert hi == pytest.approx(-1.0 + 3 * 0.5 + p.margin)
    assert hi - lo == pytest.approx(p.stage2_width)
    assert p.clamp_interval(0) == (-1.0, 1.0)  # [D12] full support
    with pytest.raises(ValueError, match="khat"):
        p.clamp_interval(5)


def test_bin_index_edges_and_clamping():
    p = Alg1Params(bound=1.0, bin_width=0.5, margin=0.1, bins=4)
    y = np.array([-7.0, -1.0, -0.5, -1e-12, 0.0, 0.99, 1.0, 9.0])
    assert bin_index(y, p).tolist() == [1, 1, 2, 2, 3, 4, 4, 4]


def test_one_hot_has_exactly_one_per_component_for_any_input():  # P2
    params = [bounded_params(1.0, 100, 1000)] * 3
    Y = np.random.default_rng(0).normal(0, 10, size=(500, 3))
    oh = one_hot_bins(Y, params)
    assert oh.shape == (500, 15)
    assert (oh.reshape(500, 3, 5).sum(axis=2) == 1).all()
    with pytest.raises(ValueError, match="NaN"):
        one_hot_bins(np.array([[np.nan, 0, 0]]), params)


def test_stage1_noise_is_discrete_laplace_2_over_eps():  # P1 + P5 on the device output
    # exact-pmf chi-square of (report - one-hot); false-alarm rate 1e-3
    params = [bounded_params(1.0, 100, 1000)]
    Y = np.zeros((40_000, 1))
    z = stage1_reports(Y, params, 0.8, RandomSource.seeded(4)) - one_hot_bins(Y, params)
    t = laplace_scale(2, 0.8).value
    cells = np.arange(-8, 9)
    obs = np.array([(z == c).sum() for c in cells] + [(np.abs(z) > 8).sum()], float)
    p = discrete_laplace_pmf(cells, t)
    exp = np.append(p, 1 - p.sum()) * z.size
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_stage2_noise_scale_is_width_over_eps():  # P1: variance of the decoded noise
    # 5-sigma band on the variance (false alarm < 1e-6)
    Y = np.zeros((100_000, 1))
    z = stage2_reports(Y, [(-1.0, 1.0)], 0.5, RandomSource.seeded(6)).astype(float)
    decoded = -1.0 + 2.0 * z / GRID_STEPS
    want = 2 * (2.0 / 0.5) ** 2  # Lap(width/eps) variance
    assert abs(decoded.var() / want - 1) < 5 * math.sqrt(2 / z.size) + 1e-3
    assert abs(decoded.mean()) < 5 * math.sqrt(want / z.size)


# ---- regimes (§5.2, [D7], [D11]) ---------------------------------------------------------
@pytest.mark.parametrize("C,eps,n,regime,G", [
    (1, 0.5, 100, "single", 1), (8, 0.5, 10_000, "high", 8), (8, 1.0, 10_000, "medium", 8),
    (8, 3.0, 10_000, "medium", 3), (8, 2.5, 10_000, "medium", 4), (4, 50.0, 10_000, "low", 1),
])
def test_regimes(C, eps, n, regime, G):
    gr = group_components(C, eps, n)
    assert gr.regime == regime and len(gr.groups) == G
    served = sorted(c for g in gr.groups for c in g.components)
    assert served == list(range(C))  # every component exactly once
    for g in gr.groups:  # basic composition never exceeds the budget
        assert g.epsilon <= eps * (1 + 1e-12)


def test_paper_mode_uses_unit_budget():
    gr = group_components(10, 3.7, 10_000, mode="paper")
    assert all(g.eps_c == 1.0 and len(g.components) <= 3 for g in gr.groups)


@pytest.mark.parametrize("kwargs,match", [
    ({"n_components": 0, "epsilon": 1.0, "n_users": 5}, "n_components"),
    ({"n_components": 2, "epsilon": -1.0, "n_users": 5}, "epsilon"),
    ({"n_components": 2, "epsilon": 1.0, "n_users": 0}, "n_users"),
])
def test_regimes_reject_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        group_components(**kwargs)


# ---- tasks (INV-7, P4) -------------------------------------------------------------------
def _task(**kw) -> TaskSpec:
    spec = QuerySpec(method="two-stage",
                     kind="mean-linf", epsilon=3.0, users=1000, samples=100, dim=5)
    base = compile_query(spec).task_for(0, 1)
    return TaskSpec.from_dict({**base.to_dict(), **kw})


def test_tasks_carry_bins_and_intervals_from_the_plan():
    """The collector sends stage-I bins and stage-II intervals explicitly (uldp.task/2);
    they are the plan's Algorithm-1 parameters and the paper's interval rule."""
    plan = compile_query(QuerySpec(method="two-stage",
                                   kind="mean-linf", epsilon=3.0, users=1000, samples=100,
                                   dim=5))
    t1 = plan.task_for(0, 1)
    p = plan.group_params(0)
    assert t1.bins == tuple((p[c].bound, p[c].bin_width, p[c].bins) for c in t1.components)
    t2 = plan.task_for(0, 2, khat=(2, 1, 0))
    assert t2.bins == () and t2.intervals == (p[0].clamp_interval(2), p[1].clamp_interval(1),
                                              (-1.0, 1.0))


def test_task_json_round_trip_and_layout():
    t = _task()
    assert TaskSpec.from_json(t.to_json()) == t
    assert report_length(t) == len(t.components) * 5
    assert task_epsilon(t) == pytest.approx(3.0)


@pytest.mark.parametrize("change,match", [
    ({"eps_c": 2.0}, "above the query budget"),
    ({"kind": "telemetry"}, "unknown task kind"),
    ({"method": "magic"}, "unknown method"),
    ({"stage": 2, "bins": [], "intervals": [[0, 1]] * 2}, "needs 3 intervals"),
    ({"stage": 2, "bins": [], "intervals": [[0, 1], [1, 0], [0, 1]]}, "finite lo < hi"),
    ({"stage": 2}, "carries intervals, not bins"),
    ({"bins": [[1.0, 0.5, 4]] * 2}, "bins for each of its 3"),
    ({"bins": [[1.0, 0.0, 4]] * 3}, "finite positive D and h"),
    ({"bins": [[1.0, 0.5, 1 << 20]] * 3}, "bins, got"),
    ({"components": [0, 0, 1]}, "distinct"),
    ({"components": [0, 1, 7]}, "components must lie"),
    ({"bound": -1.0}, "bound"),
    ({"schema": "uldp.task/1"}, "schema"),
    ({"intervals": [[0, 1]] * 3}, "carries bins, not intervals"),
])
def test_hostile_or_inconsistent_tasks_are_refused(change, match):
    with pytest.raises(TaskRefused, match=match):
        validate_task(_task(**change))


def test_unknown_fields_and_bad_json_are_refused():
    with pytest.raises(TaskRefused, match="unknown fields"):
        TaskSpec.from_dict({**_task().to_dict(), "noise_scale": 0.0})
    with pytest.raises(TaskRefused, match="JSON"):
        TaskSpec.from_json("{not json")


def test_unusable_local_data_is_sanitized_not_refused():
    """Totality: values never raise; unusable samples are ignored (docs/privacy.md)."""
    t = _task()
    empty = compute_report(t, np.zeros((0, 5)), rng=RandomSource.seeded(1))
    nan = compute_report(t, np.full((10, 5), np.nan), rng=RandomSource.seeded(1))
    assert np.array_equal(nan, empty)  # NaN rows are missing: same as no samples
    mixed = np.zeros((3, 5))
    mixed[1, 2] = np.inf
    assert np.array_equal(compute_report(t, mixed, rng=RandomSource.seeded(3)),
                          compute_report(t, mixed[[0, 2]], rng=RandomSource.seeded(3)))
    # structure is a public declaration: a mismatch is an error, never silently reshaped
    with pytest.raises(DataError, match="dimension"):
        compute_report(t, np.zeros((10, 4)), rng=RandomSource.seeded(1))
    with pytest.raises(DataError, match="dimension"):
        compute_report(t, np.zeros(10), rng=RandomSource.seeded(1))
    d = compile_query(QuerySpec(method="two-stage",
                                kind="distribution", epsilon=1.0, users=100, samples=5,
                                dim=4)).task_for(0, 1)
    off = compute_report(d, np.array([0, 1, 9, 2.5, -1, "x"], dtype=object),
                         rng=RandomSource.seeded(4))
    assert np.array_equal(off, compute_report(d, np.array([0, 1]), rng=RandomSource.seeded(4)))


def test_device_with_no_samples_still_reports():  # [D10]
    t = _task()
    z = compute_report(t, np.zeros((0, 5)), rng=RandomSource.seeded(2))
    assert z.shape == (report_length(t),)


# ---- accumulators (collector half) -------------------------------------------------------
def test_accumulators_merge_exactly():
    params = [bounded_params(1.0, 100, 1000)] * 2
    rng = RandomSource.seeded(8)
    Y = np.random.default_rng(1).uniform(-1, 1, (300, 2))
    r1 = stage1_reports(Y, params, 1.0, rng)
    whole, a, b = (BinAccumulator(params, 10**6) for _ in range(3))
    whole.add(r1)
    a.add(r1[:100])
    b.add(r1[100:])
    a.merge(b)
    assert np.array_equal(a.sums, whole.sums) and a.count == whole.count
    iv = [(-1.0, 1.0), (-0.5, 0.5)]
    r2 = stage2_reports(Y, iv, 1.0, rng)
    w2, c, d = (ValueAccumulator(iv, 10**9) for _ in range(3))
    w2.add(r2)
    c.add(r2[:7])
    d.add(r2[7:])
    c.merge(d)
    assert np.array_equal(c.means(), w2.means())
    np.testing.assert_allclose(c.covariance(), w2.covariance(), rtol=1e-9)


def test_khat_argmax_ties_and_dropouts():
    p = [Alg1Params(1.0, 0.5, 0.1, 4)]
    acc = BinAccumulator(p, 100)
    assert acc.khat() == (0,)  # no stage-I report: full-support fallback [D12]
    acc.add(np.array([[0, 3, 3, 1]]))
    assert acc.khat() == (2,)  # ties: smallest index [D4]


def test_accumulators_reject_bad_reports():
    acc = ValueAccumulator([(-1.0, 1.0)], limit=1000)
    with pytest.raises(ReportError, match="1 integers"):
        acc.add(np.array([[1, 2]]))
    with pytest.raises(ReportError, match="integers"):
        acc.add(np.array([[0.5]]))
    with pytest.raises(ReportError, match="out of range"):
        acc.add(np.array([[10**6]]))
    assert acc.count == 0  # nothing changed


def test_planner_assignment_is_balanced_and_deterministic():
    spec = QuerySpec(method="two-stage",
                     kind="mean-linf", epsilon=0.5, users=1003, samples=100, dim=4, seed=5)
    plan = compile_query(spec)
    g, s = plan.assign_all()
    sizes = np.bincount(g)
    assert sizes.max() - sizes.min() <= 1  # [D1]
    for grp in range(4):
        n1, n2 = np.sum((g == grp) & (s == 1)), np.sum((g == grp) & (s == 2))
        assert n1 == sizes[grp] // 2 and n2 == sizes[grp] - sizes[grp] // 2  # [D2]
    g2, s2 = compile_query(spec).assign_all()
    assert np.array_equal(g, g2) and np.array_equal(s, s2)
    assert plan.assign(17) == (int(g[17]), int(s[17]))


@pytest.mark.parametrize("kwargs,match", [
    ({"kind": "nope"}, "kind"), ({"epsilon": 0.0}, "epsilon"), ({"users": 1}, "users"),
    ({"bound": None}, "either bound"), ({"method": "x"}, "method"), ({"samples": 0}, "samples"),
])
def test_query_spec_rejects_bad_input(kwargs, match):
    base = {"kind": "mean", "epsilon": 1.0, "users": 100, "samples": 10}
    with pytest.raises(ValueError, match=match):
        QuerySpec(**{**base, **kwargs})


def test_too_few_users_for_the_regime_is_a_configuration_error():  # [D2]
    with pytest.raises(ValueError, match=">= 2 users"):
        compile_query(QuerySpec(method="two-stage",
                                kind="mean-linf", epsilon=0.5, users=10, samples=10, dim=8))
