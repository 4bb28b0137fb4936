"""Method ``hadamard`` (issue 26): the device half's totality under adversarial datasets and
hostile task parameters, the three-phase plan, the collector's rule (windows for users
alike, the oracle where users differ), its estimates, intervals and predicted error on
small fixed-seed populations, ``auto``'s choice, and ``two-stage-sized``'s refusal of
distributions. The statistical study (n = 10^5, every cell) is ``bench/frontier.py
--distribution``; these are cheap checks of the same code.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import uldp.client.tasks as tasks_mod
from tests.test_totality import _assert_total as assert_total
from tests.test_totality import _interval, dataset_for, hostile_data
from uldp.client.kinds.means import hadamard_rows
from uldp.client.randomness import RandomSource
from uldp.client.tasks import (
    TaskRefused,
    TaskSpec,
    compute_report,
    compute_reports,
    report_length,
    report_limit,
)
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.methods.hadamard import HadamardWindows
from uldp.collector.methods.hadamard_model import (
    QS,
    binomial_bias2,
    clamp_bias,
    clamps_ok,
    excess_limit,
    measured_bias2,
    measured_inflation,
    model_bias2,
    spread_share,
)
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import MeanEstProgram
from uldp.collector.programs.driver import run_program

EPS_C = [2.0**-24, 0.5, 1.0, 8.0, 40.0, 2.0**20]


# ---- the device half: totality ----------------------------------------------------------
def _plan_tasks() -> list[tuple[str, TaskSpec]]:
    """Every phase's task of compiled plans (both kinds, both outcomes of the rule)."""
    out = []
    for kind, dim, bound in (("distribution", 5, 1.0), ("mean-l1", 3, 2.0)):
        for eps in (0.5, 4.0):
            plan = compile_query(QuerySpec(kind=kind, epsilon=eps, users=2000, samples=50,
                                           dim=dim, bound=bound, method="hadamard", seed=2))
            out.append((f"{kind}-e{eps}-1", plan.task_for(1, 1)))
            pub = plan.publish(1, {})
            out.append((f"{kind}-e{eps}-2", plan.method.task(plan, 1, 2, pub)))
            for mode in ("window", "fallback"):
                pub2 = dict(pub) | {"mode": mode}
                out.append((f"{kind}-e{eps}-3-{mode}", plan.method.task(plan, 1, 3, pub2)))
    return out


PLAN_TASKS = _plan_tasks()


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=st.integers(0, len(PLAN_TASKS) - 1).flatmap(
    lambda i: st.tuples(st.just(PLAN_TASKS[i]), dataset_for(PLAN_TASKS[i][1]))),
    seed=st.integers(0, 2**32))
def test_every_phase_reports_for_every_dataset(case, seed):
    (name, task), (samples, labels) = case
    before = tasks_mod.FALLBACKS
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = compute_report(task, samples, labels, rng=RandomSource.seeded(seed),
                           dim=task.dim if task.kind == "mean-l1" else None)
    assert before == tasks_mod.FALLBACKS, name
    assert z.dtype == np.int64 and z.shape == (report_length(task),), name
    assert np.abs(z).max(initial=0) <= report_limit(task), name


@st.composite
def hostile_hadamard(draw) -> TaskSpec:
    """Valid but extreme hadamard tasks: ε at the device's limits, windows from 5e-324 wide
    to nearly the whole double range, many components, every mechanism a stage takes."""
    kind, dim = draw(st.sampled_from([("distribution", 5), ("distribution", 300),
                                      ("distribution", 1), ("mean-l1", 3), ("mean-l1", 1)]))
    C = 2 ** math.ceil(math.log2(dim)) if dim > 1 else 1
    stage = draw(st.sampled_from([1, 2, 3]))
    eps_c = draw(st.sampled_from(EPS_C))
    bound = None if kind == "distribution" else draw(st.sampled_from([5e-324, 1.0, 1e308]))
    if stage == 1 and kind == "distribution":
        return TaskSpec(query_id="q", kind=kind, method="hadamard", stage=1, epsilon=2.0**20,
                        eps_c=eps_c, components=tuple(range(C)), dim=dim,
                        mechanism=draw(st.sampled_from(["laplace", "grr", "oue", "ss",
                                                        "olh"])))
    comps = tuple(draw(st.lists(st.integers(0, C - 1), min_size=1, max_size=min(C, 4),
                                unique=True)))
    mechs = ["laplace", "grr", "oue", "ss", "olh"] if stage == 2 else ["laplace", "duchi",
                                                                      "pm", "hm"]
    return TaskSpec(query_id="q", kind=kind, method="hadamard", stage=stage,
                    epsilon=2.0**20, eps_c=min(eps_c, 2.0**20 / len(comps)), components=comps,
                    dim=dim, bound=bound, mechanism=draw(st.sampled_from(mechs)),
                    intervals=tuple(draw(_interval()) for _ in comps))


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(task=hostile_hadamard(), values=hostile_data, seed=st.integers(0, 2**32))
def test_hostile_but_valid_hadamard_tasks_are_accepted_and_total(task, values, seed):
    report_length(task)  # accepted
    assert_total(task, values, seed)


@pytest.mark.parametrize("change,code", [
    ({"kind": "mean", "dim": 1, "bound": 1.0}, "param"),
    ({"stage": 0}, "stage"), ({"stage": 4}, "stage"),
    ({"mechanism": "grr"}, "param"),
    ({"stage": 2, "mechanism": "duchi"}, "param"),
    ({"stage": 2, "mechanism": "grr", "intervals": ()}, "param"),
    ({"stage": 2, "mechanism": "grr", "bins": ((1.0, 0.5, 4),)}, "param"),
    ({"records": 2}, "param"),
    ({"intervals": ((0.1, -0.1),)}, "param"),
    ({"intervals": ((-math.inf, 0.1),)}, "param"),
    ({"components": (8,)}, "param"),
    ({"stage": 1, "mechanism": "grr", "intervals": (), "components": (1,)}, "param"),
    ({"eps_c": 2.0}, "over-budget"),
])
def test_hostile_hadamard_tasks_are_refused_with_stable_codes(change, code):
    base = dict(query_id="q", kind="distribution", method="hadamard", stage=3, epsilon=1.0,
                eps_c=1.0, components=(3,), dim=5, intervals=((-0.1, 0.1),), mechanism="pm")
    with pytest.raises(TaskRefused) as err:
        report_length(TaskSpec(**(base | change)))
    assert err.value.code == code


def test_reports_are_the_mechanisms_of_the_stage():
    """Stage 2 of a user inside / outside its window is the oracle's report of category 0 /
    1; the centre of a distribution is method oracle's report, draw for draw."""
    t2 = TaskSpec(query_id="q", kind="distribution", method="hadamard", stage=2, epsilon=40.0,
                  eps_c=40.0, components=(1,), dim=4, intervals=((0.0, 0.2),),
                  mechanism="grr")
    inside = np.array([[0.0, 0.0, 1.0, 1.0, 2.0, 3.0]])  # coefficient 1 = 0
    outside = np.array([[0.0, 0.0, 0.0, 0.0, 2.0, 2.0]])  # coefficient 1 = 0.5
    assert compute_reports(t2, inside, RandomSource.seeded(1)).tolist() == [[0]]
    assert compute_reports(t2, outside, RandomSource.seeded(1)).tolist() == [[1]]
    t1 = TaskSpec(query_id="q", kind="distribution", method="hadamard", stage=1, epsilon=1.0,
                  eps_c=1.0, components=tuple(range(4)), dim=4, mechanism="ss")
    X = np.random.default_rng(0).integers(0, 4, (50, 7)).astype(float)
    from dataclasses import replace
    a = compute_reports(t1, X, RandomSource.seeded(5))
    b = compute_reports(replace(t1, method="oracle", stage=0), X, RandomSource.seeded(5))
    assert np.array_equal(a, b)


# ---- the plan ---------------------------------------------------------------------------
def test_three_phases_with_the_stated_shares_and_one_coefficient_per_user():
    spec = QuerySpec(kind="distribution", epsilon=1.0, users=100_000, samples=100, dim=8,
                     method="hadamard", stage1_share=0.4)
    plan = compile_query(spec)
    prog = MeanEstProgram(spec, plan=plan)
    assert prog.num_phases == 3 and plan.n_groups == 7  # coefficient 0 is public
    q = prog.quotas()
    assert sum(q) == 100_000
    assert abs(q[0] / 1e5 - 0.4) < 1e-3 and abs(q[1] / 1e5 - spread_share(100_000, 1.0)) < 1e-3
    assert all(len(g.components) == 1 and g.eps_c == 1.0 for g in plan.grouping.groups)
    # two-stage keeps its assignment (the stage shares generalize it)
    two = compile_query(QuerySpec(kind="mean", epsilon=1.0, users=1001, samples=100,
                                  method="two-stage", stage1_share=0.3))
    _, s = two.assign_all()
    assert set(s.tolist()) == {1, 2} and (s == 1).sum() == 300


def test_method_hadamard_refuses_what_it_cannot_estimate():
    for spec in (QuerySpec(kind="mean", epsilon=1.0, users=1000, samples=10,
                           method="hadamard"),
                 QuerySpec(kind="distribution", epsilon=1.0, users=1000, samples=10, dim=1,
                           method="hadamard"),
                 QuerySpec(kind="distribution", epsilon=1.0, users=20, samples=10, dim=16,
                           method="hadamard")):
        with pytest.raises(ValueError):
            compile_query(spec)


def test_two_stage_sized_is_not_offered_for_distributions():
    with pytest.raises(ValueError, match="does not estimate distributions"):
        compile_query(QuerySpec(kind="distribution", epsilon=1.0, users=100_000, samples=1000,
                                dim=32, method="two-stage-sized"))
    for k, m, eps in ((32, 1000, 1.0), (8, 10, 8.0), (256, 100, 2.0)):
        plan = compile_query(QuerySpec(kind="distribution", epsilon=eps, users=100_000,
                                       samples=m, dim=k))
        assert plan.spec.method != "two-stage-sized"


# ---- the model ---------------------------------------------------------------------------
def test_clamp_bias_and_the_expected_squared_bias_match_monte_carlo():
    g = np.random.default_rng(1)
    x = g.normal(0.3, 0.2, 400_000)
    want = np.mean(np.clip(x, 0.1, 0.4)) - np.mean(x)
    assert abs(float(clamp_bias(np.array(0.3), np.array(0.2), np.array(0.1),
                                np.array(0.4))) - want) < 2e-3
    # users at θ = 0 (sd 0.01), centre off by N(0, 0.05²), window ±0.075 in [−1, 1]
    d = g.normal(0, 0.05, 200_000)
    b = np.clip(0.0, d - 0.075, d + 0.075)
    mb2 = model_bias2(np.array([1e-9]), np.array([0.05]), np.array([0.075]), np.array([0.0]),
                      np.array([1.0]))
    assert abs(float(mb2[0]) / float(np.mean(b * b)) - 1) < 0.05


def test_the_intervals_account_of_clamping_is_sound_where_allowed():
    assert not clamps_ok(3.0, 255) and clamps_ok(2.0, 255) and clamps_ok(4.0, 255)
    assert clamps_ok(3.0, 7) and not clamps_ok(2.0, 7)
    assert any(clamps_ok(q, 1) for q in QS)


# ---- the rule and the estimate on small fixed-seed populations ------------------------------
def _run(pop: str, seed: int, n: int = 20_000, m: int = 400, k: int = 8, eps: float = 2.0,
         method: str = "hadamard") -> tuple[Estimate, np.ndarray, float]:
    g = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, k + 1) ** 1.1
    f = w / w.sum()
    if pop == "alike":
        counts = g.multinomial(m, f, size=n)
    elif pop == "little":  # users who differ a little: own frequencies ~ Dirichlet(αf),
        # their spread around 5× the sampling's (α + 1 = m/5), as movielens' users
        counts = np.array([g.multinomial(m, p) for p in g.dirichlet(f * (m / 3 - 1), n)])
    else:  # each user with its own preferred category (70 % of its records)
        own = g.choice(k, size=n, p=f)
        mine = g.binomial(m, 0.7, size=n)
        counts = g.multinomial(m - mine, f)
        counts[np.arange(n), own] += mine
    truth = (counts / m).mean(axis=0)
    spec = QuerySpec(kind="distribution", epsilon=eps, users=n, samples=m, dim=k, seed=seed,
                     method=method)
    plan = compile_query(spec)
    Y = hadamard_rows(counts / m, k)
    pred = plan.predicted_mse(np.maximum(1 / k - Y.mean(0) ** 2, 0), Y.var(0), Y.mean(0))
    rng = RandomSource.seeded(f"hadamard-test-{pop}-{seed}")
    item = np.argmax(np.cumsum(counts, 1) > g.integers(0, m, n)[:, None], axis=1)

    def privatize(slots, task, offsets, acc):
        if task.stage == 1 and task.records == 1:  # one sampled record: as the device's
            X = item[slots, None].astype(float)
        else:
            X = np.repeat(np.tile(np.arange(k, dtype=float), slots.size),
                          counts[slots].ravel()).reshape(slots.size, m)
        acc.add(compute_reports(task, X, rng, exact=False), slots)

    est = Estimate.from_dict(run_program(MeanEstProgram(spec, plan=plan), privatize))
    return est, truth, pred


def test_users_alike_get_windows_and_an_honest_interval():
    errs, cover = [], []
    for seed in range(3):
        est, truth, pred = _run("alike", seed)
        assert est.extra["hadamard"]["mode"] == "window"
        assert est.extra["hadamard"]["spread"]["outside"] < 0.1
        comp = np.asarray(est.extra["components"])
        errs.append(float(np.sum((hadamard_rows(comp[None], 8)[0] - truth) ** 2)))
        cover.append(np.mean(est.covers(truth)))
    # the oracle's error on these users is ≈ 2.4e-4; the windows' prediction ≈ 1.5e-5
    assert np.mean(errs) < 0.25 * 2.4e-4
    assert 0.4 < np.mean(errs) / pred < 2.5
    assert np.mean(cover) >= 0.75


def test_users_who_differ_fall_back_to_the_oracle():
    est, truth, pred = _run("differ", 0)
    h = est.extra["hadamard"]
    assert h["mode"] == "fallback" and h["spread"]["outside"] > 0.5
    assert float(np.sum((est.values - truth) ** 2)) < 5 * pred
    assert np.mean(est.covers(truth)) >= 0.75


def test_the_spread_rule_charges_only_the_excess_beyond_its_noise():
    """Users alike show an excess outside share of N(0, sd²): up to 2 sd (Z_PRICE) it is
    noise and no reason to fall back (pricing it beyond one sd sent 1 run in 25 at k = 8,
    m = 1000, ε = 2 to the fallback, at 70× the error); the intervals are charged the
    excess beyond one sd (Z_CHARGE: users who differ a little are clamped more than the
    model says); an excess the test resolves falls back; the prediction's limit is the
    rule's own."""
    plan = compile_query(QuerySpec(kind="distribution", epsilon=1.0, users=100_000,
                                   samples=1000, dim=8, method="hadamard", stage1_share=0.3))
    m = plan.method
    prev = {"outside_alike": 0.0, "window_mse": 5e-6}
    sd, fallback = 0.016, 5e-5
    ok, info = m.decide(plan, prev, 2.2 * sd, sd, 3500, fallback)
    assert ok and info["priced_excess"] == pytest.approx(1.2 * sd)  # the intervals' charge
    assert info["window_mse"] == pytest.approx(5e-6 + float(np.sum(m._excess_bias2(
        plan, 0.2 * sd))))  # the choice's price: beyond two sd
    ok, info = m.decide(plan, prev, 1.9 * sd, sd, 3500, fallback)
    assert ok and info["window_mse"] == 5e-6 and info["priced_excess"] == pytest.approx(0.9 * sd)
    assert m.decide(plan, prev, 0.5 * sd, sd, 3500, fallback)[1]["priced_excess"] == 0.0
    assert not m.decide(plan, prev, 2.9 * sd, sd, 3500, fallback)[0]
    limit = excess_limit(sd, 5e-6, fallback, float(np.sum(m._excess_bias2(plan, 1.0))))
    assert 2.2 * sd < limit < 2.9 * sd
    assert m.decide(plan, prev, limit * 0.999, sd, 3500, fallback)[0]
    assert not m.decide(plan, prev, limit * 1.001, sd, 3500, fallback)[0]


# ---- auto -------------------------------------------------------------------------------
@pytest.mark.parametrize("k,m,eps,want", [(8, 1000, 1.0, "hadamard"), (32, 100, 2.0, "hadamard"),
                                          (256, 1000, 2.0, "hadamard"), (8, 10, 1.0, "oracle"),
                                          (256, 10, 8.0, "oracle-probe"),
                                          (32, 100, 8.0, "hadamard"),
                                          (8, 10, 8.0, "oracle-probe")])
def test_auto_chooses_from_public_values(k, m, eps, want):
    plan = compile_query(QuerySpec(kind="distribution", epsilon=eps, users=100_000, samples=m,
                                   dim=k))
    assert plan.spec.method == want
    assert plan.auto["hadamard_gain"] > 0
    if want == "hadamard":
        assert plan.auto["chosen"] == "hadamard" and plan.auto["hadamard_gain"] >= 1.25
    assert isinstance(plan.method, HadamardWindows) == (want == "hadamard")


def test_users_alike_clamping_bias_at_small_m_is_the_binomials():
    """Users alike at k = 32, m = 10: a coefficient's average is a scaled binomial, whose
    clamping on the narrowest window (q = 1) does not cancel between the two sides as a
    normal's does (the frontier's cell under-covered, 0.917, MSE 1.32× predicted). The
    windows' bias — what the plan weighs and the intervals carry — must match a
    Monte-Carlo over the centre's error δ of the exact clamped mean at every δ; the normal
    model under-states it (by a third at θ = 0.1)."""
    k, m = 32, 10
    D = k ** -0.5
    theta = np.array([0.0, 0.02, -0.05, 0.1])
    v = 1e-4
    half = np.full(4, np.sqrt(D * D / m + v))  # q = 1
    g = np.random.default_rng(7)
    p = (1 + theta / D) / 2
    y = D * (2 * np.arange(m + 1) / m - 1)
    pmf = np.array([[math.comb(m, i) * q**i * (1 - q) ** (m - i) for i in range(m + 1)]
                    for q in p])
    delta = g.normal(0.0, math.sqrt(v), (20_000, 1))
    b2 = np.empty(4)
    for c in range(4):
        lo = np.maximum(theta[c] + delta - half[c], -D)
        hi = np.minimum(theta[c] + delta + half[c], D)
        b2[c] = np.mean(((np.clip(y[None, :], lo, hi) - y[None, :]) @ pmf[c]) ** 2)
    Dv, sd = np.full(4, D), np.full(4, math.sqrt(v))
    # the method's windows use the exact law at this m
    plan = compile_query(QuerySpec(kind="distribution", epsilon=2.0, users=100_000,
                                   samples=m, dim=k, method="hadamard"))
    S2 = (D * D - theta**2) / m
    exact = plan.method.alike_bias2(plan, S2, np.full(4, v), half, theta, Dv)
    np.testing.assert_allclose(exact, binomial_bias2(m, sd, half, theta, Dv))
    np.testing.assert_allclose(exact, b2, rtol=0.05)
    normal = model_bias2(np.sqrt(S2), sd, half, theta, Dv)
    assert normal[3] < 0.75 * b2[3]


def test_a_centre_estimate_outside_the_range_still_gives_a_window():
    """An unbiased centre can fall outside [−D, D] (found by the frontier at k = 8): the
    window is cut to the range and never empty."""
    plan = compile_query(QuerySpec(kind="distribution", epsilon=1.0, users=10_000,
                                   samples=1000, dim=8, method="hadamard"))
    th = np.zeros(8)
    th[1], th[2] = 0.5, -0.9  # D = 1/√8 ≈ 0.354
    var = np.full(8, 1e-4)
    m = plan.method
    _, _, lo, hi, _, _ = m.window(plan, th, var, m.alike_var(plan, th, var))
    assert np.all(hi > lo) and np.all(lo >= -8 ** -0.5) and np.all(hi <= 8 ** -0.5)


@pytest.mark.parametrize("k,m,eps", [(8, 1000, 2.0), (8, 1000, 1.0), (8, 100, 2.0),
                                     (32, 1000, 2.0)])
def test_users_alike_rarely_fall_back_so_the_prediction_is_the_windows(k, m, eps):
    """The prediction prices the chance of a false fallback in (at 70× the windows' error
    at k = 8, m = 1000, ε = 2): the spread rule must make it rare, or the prediction is an
    average no run shows (it read 0.28 of the measured MSE there with the price beyond one
    standard error). Users alike (Zipf 1.1): P(fallback) ≤ 0.5 %, prediction ≤ 1.25× the
    windows' error."""
    plan = compile_query(QuerySpec(kind="distribution", epsilon=eps, users=100_000, samples=m,
                                   dim=k))
    assert plan.spec.method == "hadamard"
    f = 1.0 / np.arange(1, k + 1) ** 1.1
    f /= f.sum()
    mean = hadamard_rows(f[None], k)[0]
    sample_var = np.maximum(1.0 / k - mean**2, 0.0)
    window, fallback, p_window = plan.method.outcomes(plan, sample_var, sample_var / m, mean)
    assert window is not None and 1 - p_window <= 0.005
    pred = p_window * window.sum() + (1 - p_window) * fallback.sum()
    assert pred <= 1.25 * window.sum()


# ---- users who differ a little: the clamping the window reports show -------------------------
def test_the_clamping_charged_is_sized_from_the_spread_the_reports_show():
    """movielens at ε = 8 (671 users) covered 0.877 in its window runs: its users spread
    ≈ 6× the variance the model of users alike gives, too few users for the spread test to
    see it, and their windows (q = 3 model τ) clamped Σ b² ≈ 3e-4 where the model charged
    1e-6. The window reports' ``E t²`` measures that spread; the charge sized from it must
    cover the clamping of such users (their frequencies ~ Dirichlet, spread 5× and 2× the
    sampling's; checked against the clamping itself), and users alike must keep the
    model's charge."""
    g = np.random.default_rng(5)
    k, m, n = 16, 70, 40_000
    f = 1.0 / np.arange(1, k + 1) ** 1.1
    f /= f.sum()
    theta = hadamard_rows(f[None], k)[0][1:]
    S = np.sqrt((1.0 / k - theta**2) / m)  # the model's users alike
    v = np.full(k - 1, 0.012)
    half = 3 * np.sqrt(S**2 + v**2)
    lo, hi = theta - half, theta + half
    for spread in (5.0, 2.0):
        p = g.dirichlet(f * (m / spread - 1), n)
        Y = hadamard_rows(np.array([g.multinomial(m, q) for q in p]) / m, k)[:, 1:]
        t = (np.clip(Y, lo, hi) - theta) / half
        b2 = (np.clip(Y, lo, hi).mean(0) - Y.mean(0)) ** 2
        r = measured_inflation(np.mean(t * t, 0), theta, v, S, lo, hi)
        charged = measured_bias2(r, theta, v, S, lo, hi)
        old = model_bias2(S, v, half, theta, np.full(k - 1, 0.25))
        assert 0.5 * (1 + spread) < r < 1.5 * (1 + spread)
        assert charged.sum() >= b2.sum() > 5 * old.sum()
    # users alike (normal, the model's spread): nothing beyond the model is charged
    Y = theta + S * g.normal(0.0, 1.0, (n, k - 1))
    t = (np.clip(Y, lo, hi) - theta) / half
    assert measured_inflation(np.mean(t * t, 0), theta, v, S, lo, hi) == 1.0


def test_users_who_differ_a_little_get_windows_with_an_honest_interval():
    """A population like movielens (700 users of 70 records, 10-16 categories, users'
    frequencies ~ Dirichlet with a spread ≈ 5× the sampling's): the spread test lets
    most runs through; their intervals carry the measured spread's clamping."""
    cover = []
    for seed in range(8):
        est, truth, _ = _run("little", seed, n=700, m=70, k=16, eps=8.0)
        h = est.extra["hadamard"]
        if h["mode"] == "window":
            assert h["inflation"] > 2.0
            cover.append(float(np.mean(est.covers(truth))))
    assert len(cover) >= 4 and np.mean(cover) >= 0.93


# ---- the fallback's paired records (hadamard_pairs) --------------------------------------
def test_the_probe_reports_two_records_at_half_the_budget_only_where_the_spread_can_matter():
    from uldp.client.budget import epsilon_units, split_epsilon
    from uldp.client.methods import METHODS

    plan = compile_query(QuerySpec(kind="distribution", epsilon=8.0, users=20_000,
                                   samples=10, dim=32, method="hadamard", seed=1))
    probe, other = plan.task_for(0, 1), plan.task_for(5, 1)
    assert (probe.records, other.records) == (2, 1)  # ⌈31/8⌉ = 4 probe groups
    assert [plan.task_for(g, 1).records for g in range(4)] == [2] * 4
    assert probe.eps_c == split_epsilon(8.0, 2) and other.eps_c == 8.0
    units = METHODS["hadamard"].epsilon_units(probe)
    assert units == 2 * epsilon_units(probe.eps_c) <= epsilon_units(8.0)
    rep = compute_report(probe, np.arange(10, dtype=float) % 32, RandomSource.seeded("p"))
    assert len(rep) == report_length(probe)
    # the window phase's users after a fallback: the choice published by the spread phase
    pub = plan.publish(1, {}) | {"mode": "fallback"}
    assert plan.method.task(plan, 7, 3, pub | {"fallback_records": 2}).records == 2
    assert plan.method.task(plan, 7, 3, pub).records == 1
    # where the oracle's noise dominates, no probe: every centre user on one record
    low = compile_query(QuerySpec(kind="distribution", epsilon=1.0, users=20_000,
                                  samples=10, dim=32, method="hadamard", seed=1))
    assert {low.task_for(g, 1).records for g in range(31)} == {1}


def test_the_paired_records_measure_the_users_spread_exactly_from_two_sums():
    """B̂ from the accumulator's two sums is the sample covariance of the two records'
    supports (over (p* − q*)²), the paired variance their half mean squared difference."""
    from uldp.collector.mechanisms import ORACLE_DECODERS
    from uldp.collector.methods.hadamard_pairs import pair_stats

    g = np.random.default_rng(3)
    n, A, eps = 5000, 4, 4.0
    s = g.integers(0, 2, size=(n, 2, A)) * (g.random((n, 1, A)) < 0.6)  # correlated
    S = s.sum(axis=1)
    sums = {"records": 2, "eps": eps, "count": n, "counts": S.sum(0).tolist(),
            "sq": (S * S).sum(0).tolist()}
    f, V, B, seB = pair_stats(sums, "grr", A)
    p, q = ORACLE_DECODERS["grr"].pq(A, eps)
    s1, s2 = s[:, 0].astype(float), s[:, 1].astype(float)
    cov = (s1 * s2).mean(0) - ((s1 + s2) / 2).mean(0) ** 2
    assert np.allclose(B, cov / (p - q) ** 2)
    assert np.allclose(V, ((s1 - s2) ** 2).mean(0) / 4 / (p - q) ** 2)
    assert np.allclose(f, (((s1 + s2) / 2).mean(0) - q) / (p - q))
    assert np.all(seB > 0) and np.all(seB < 0.1 * B)


def test_users_who_differ_get_a_fallback_interval_without_their_spread():
    """Users who differ at ε = 8 (the oracle's noise small): the one-record interval counts
    the users' spread and covered 0.994 here (20 runs); the probe's paired records measure
    it (``B̂``, never more than it), the variance leaves ``B̂ − se`` out once for all users,
    and the window phase reports two records (40 seeds, measured when the margin was
    2 se: coverage 0.956, mean z² 0.875)."""
    cover, ratio = [], []
    for seed in range(8):
        est, truth, pred = _run("differ", seed, n=20_000, m=10, k=8, eps=8.0)
        assert est.extra["hadamard"]["mode"] == "fallback"
        assert est.extra["hadamard"]["fallback_records"] == 2
        assert est.extra["paired"]["users"] > 10_000
        cover.append(float(np.mean(est.covers(truth))))
        ratio.append(float(np.sum((est.values - truth) ** 2)) / pred)
    assert 0.93 <= np.mean(cover) <= 0.97
    assert 0.7 <= np.mean(ratio) <= 1.4


def test_the_spread_rule_weighs_the_fallback_the_probe_makes():
    """Where the probe ran, the spread rule compares the windows with the fallback the query
    would run (its users' spread measured out of the interval), not with the one-record
    oracle's error, which counts the spread: on flights at ε = 8 that comparison ran the
    windows in 34 % of the runs (the prediction: 16 %) at 1.7× their predicted error,
    where the fallback was the better (bench/fallback_pairs.py)."""
    from uldp.collector.mechanisms.choice import oracle_total_variance

    n, m, k = 20_000, 10, 8
    est, truth, _ = _run("differ", 0, n=n, m=m, k=k, eps=8.0)
    spread = est.extra["hadamard"]["spread"]
    n_left = n - int(spread["spread_reports"])
    plan = compile_query(QuerySpec(kind="distribution", epsilon=8.0, users=n, samples=m,
                                   dim=k, method="hadamard", seed=0))
    one = (oracle_total_variance(plan.method.oracle_name(plan), k, 8.0)
           + 1.0 - float(truth @ truth)) / n_left
    g = np.random.default_rng(0)  # the users' statistics, as _run draws them
    w = 1.0 / np.arange(1, k + 1) ** 1.1
    own = g.choice(k, size=n, p=w / w.sum())
    mine = g.binomial(m, 0.7, size=n)
    counts = g.multinomial(m - mine, w / w.sum())
    counts[np.arange(n), own] += mine
    Y = hadamard_rows(counts / m, k)
    _, fallback, _ = plan.method.outcomes(plan, np.maximum(1 / k - Y.mean(0) ** 2, 0),
                                          Y.var(0), Y.mean(0))
    predicted = float(np.sum(fallback))
    assert spread["fallback_mse"] < 0.8 * one
    assert 0.8 * predicted <= spread["fallback_mse"] <= 1.25 * predicted


def test_the_fallback_variance_overstates_only_by_what_no_collector_can_see():
    """The fallback's stated variance on the exact expected sums of a population whose users
    hold 1–100 records and differ (Dirichlet): ``Σ_k w_k² S_k/n_k − (B̂ − Z se)/n`` is the
    estimate's variance around the mean over all ``n`` users (the spread phase's included)
    plus ``(C + Z se)/n``, ``C = E_i Σ_v f_iv(1 − f_iv)/(m_i − 1)`` — the paired records
    cannot tell the users' spread from it without each ``m_i`` — and never less. The
    interval of before (skewed at 0.976) over-stated by 1.4× that here."""
    from uldp.collector.mechanisms import ORACLE_DECODERS
    from uldp.collector.methods.hadamard_pairs import (
        Z_SPREAD,
        _variances,
        _weighted_variance,
        pair_oracle,
    )

    k, eps, types = 8, 8.0, 400
    g = np.random.default_rng(3)
    w = 1.0 / np.arange(1, k + 1) ** 1.1
    m = np.concatenate([[1, 2, 2, 3], np.floor(100 ** g.random(types - 4))]).astype(int)
    F = np.array([np.bincount(g.choice(k, size=mi, p=p), minlength=k) / mi
                  for mi, p in zip(m, g.dirichlet(3 * w / w.sum(), types), strict=True)])
    copies = {"a": 40, "b": 50, "spread": 10}  # every part the same users: B_k = B
    n = types * sum(copies.values())
    plan = compile_query(QuerySpec(kind="distribution", epsilon=eps, users=n, samples=10,
                                   dim=k, method="hadamard", seed=0))
    one, (two, eps2) = plan.method.oracle_name(plan), pair_oracle(plan.method, plan)
    p1, q1 = ORACLE_DECODERS[one].pq(k, eps)
    p2, q2 = ORACLE_DECODERS[two].pq(k, eps2)
    s1 = q1 + (p1 - q1) * F  # P(support) of one record, per user type
    both = np.where(m[:, None] >= 2, F * (F * m[:, None] - 1) / np.maximum(m - 1, 1)[:, None],
                    F)  # P(both records in v): without replacement (m = 1: the same record)
    s2 = 2 * (q2 + (p2 - q2) * F)
    ss = s2 + 2 * (q2 * q2 + 2 * q2 * (p2 - q2) * F + (p2 - q2) ** 2 * both)  # E S²
    na, nb = types * copies["a"], types * copies["b"]
    sums_a = {"records": 1, "eps": eps, "count": na, "counts": (copies["a"] * s1.sum(0)),
              "sq": (copies["a"] * s1.sum(0))}
    sums_b = {"records": 2, "eps": eps2, "count": nb, "counts": copies["b"] * s2.sum(0),
              "sq": copies["b"] * ss.sum(0)}
    v = _variances(plan.method, plan, sums_a, sums_b)
    wts = np.array([0.4, 0.6])
    stated = _weighted_variance(plan.method, plan, v, wts, n)
    # the truth: each user's own variance, and the users' placement in the parts
    own_a = (s1 * (1 - s1)).mean(0) / (p1 - q1) ** 2
    own_b = (ss - s2 * s2).mean(0) / 4 / (p2 - q2) ** 2
    B = F.var(0)
    true = (wts[0] ** 2 * own_a / na + wts[1] ** 2 * own_b / nb
            + B * (wts[0] ** 2 / na + wts[1] ** 2 / nb - 1 / n))
    C = np.where(m[:, None] >= 2, F * (1 - F) / np.maximum(m - 1, 1)[:, None], 0).mean(0)
    assert np.all(stated >= true)
    np.testing.assert_allclose(v["B"], B - C, rtol=0.02)  # B̂ = B − C on the expected sums
    # over-stated by C and the Z se B̂ is taken out less, over n
    low = np.maximum(v["B"] - Z_SPREAD * v["seB"], 0.0)
    np.testing.assert_allclose(stated - true, (B - low) / n, rtol=0.03,
                               atol=1e-3 * float(true.min()))
    assert 1.02 < float(np.sum(stated) / np.sum(true)) < 1.3
    # before: one-record users at S² − (B̂ − Z se), two-record users at the paired variance, the
    # spread phase's users with the spread at its upper bound S²
    before = (wts[0] ** 2 * (v["S2"] - low) / na + wts[1] ** 2 * v["b"][1] / nb
              + v["S2"] * (wts[0] ** 2 / na + wts[1] ** 2 / nb - 1 / n))
    assert np.sum(before - true) > 1.25 * np.sum(stated - true)
