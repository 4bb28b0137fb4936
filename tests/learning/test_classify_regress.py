"""Algorithms 4 and 5 (spec §9, §10, [D15]–[D19], S10): device statistics, grid choice,
Hadamard inversion, predictors, and risks decreasing with nm / beating baseline B."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from uldp.client.hadamard import hadamard_matrix, next_pow2
from uldp.client.kinds import KINDS
from uldp.client.kinds.learning import grid_bins
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskRefused, TaskSpec, compute_report, validate_task
from uldp.collector.learning.fit import run_classify, run_regress
from uldp.collector.learning.synthetic import (
    bayes_risk_sine,
    eta_sine,
    excess_risk,
    l2_risk,
    sine_population,
)
from uldp.collector.models.grid import (
    GridModel,
    choose_grid,
    hadamard_inverse,
)
from uldp.collector.planner import QuerySpec, compile_query


def _task(kind: str, **extra) -> TaskSpec:
    return TaskSpec(query_id="q", kind=kind, method="ssl", stage=0, epsilon=4.0,
                    components=(0, 1), eps_c=2.0, dim=2, intervals=((-1.0, 1.0),) * 2,
                    extra=extra)


def test_classify_statistics_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    M, lo, hi = 3, np.array([-2.0, 0.0]), np.array([2.0, 10.0])
    task = _task("classify", grid=M, lo=lo.tolist(), hi=hi.tolist())
    K = next_pow2(M**2)
    X = rng.uniform(-3, 11, size=(5, 30, 2))  # some features outside the box: clamped
    y = rng.choice([0.0, 1.0], size=(5, 30))  # {0,1} labels map to ∓1
    H = hadamard_matrix(K)
    u = np.clip((X - lo) / (hi - lo), 0, 1)
    j = np.minimum(np.floor(u * M).astype(int), M - 1)
    cells = j[..., 0] + M * j[..., 1]
    s = np.where(y > 0, 1.0, -1.0)
    want = np.einsum("nm,nmk->nk", s, H[cells]) / 30
    Xl = np.concatenate([X, y[..., None]], axis=2)
    got = KINDS["classify"].statistics(task, Xl)
    assert got.shape == (5, K) and np.allclose(got, want)
    assert np.array_equal(grid_bins(X, M, lo, hi), cells)
    per_sample = KINDS["classify"].sample_map(task, Xl.reshape(-1, 3)).reshape(5, 30, K)
    assert np.allclose(per_sample.mean(axis=1), want)
    assert np.abs(per_sample).max() == 1.0


def test_regress_statistics_clamp_labels() -> None:
    rng = np.random.default_rng(1)
    task = _task("regress", grid=2, label_bound=2.0)
    X = rng.uniform(size=(3, 20, 2))
    y = rng.normal(scale=100, size=(3, 20))
    Xl = np.concatenate([X, y[..., None]], axis=2)
    Y = KINDS["regress"].statistics(task, Xl)
    K = 4
    H = hadamard_matrix(K)
    cells = grid_bins(X, 2, np.zeros(2), np.ones(2))
    yc = np.clip(y, -2, 2)
    assert np.allclose(Y[:, :K], np.einsum("nm,nmk->nk", yc, H[cells]) / 20)
    assert np.allclose(Y[:, K:], H[cells].mean(axis=1))
    bounds = KINDS["regress"].bounds(task)
    assert np.array_equal(bounds, [2, 2, 2, 2, 1, 1, 1, 1])
    spec = QuerySpec(method="two-stage", kind="regress", epsilon=4.0, users=100, samples=30, dim=2,
                     extra={"grid": 2, "label_bound": 2.0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params = compile_query(spec).group_params(0)
    # N_Δ = K_H·n ([D5]): Δ = D √(ln(K n)/m)
    assert params[0].margin == pytest.approx(2 * math.sqrt(math.log(4 * 100) / 30))
    assert params[4].margin == pytest.approx(math.sqrt(math.log(4 * 100) / 30))


@pytest.mark.parametrize("kind,extra,field", [
    ("classify", {}, "grid"),
    ("classify", {"grid": 0}, "grid"),
    ("classify", {"grid": 2.5}, "grid"),
    ("classify", {"grid": 2000}, "grid"),
    ("classify", {"grid": 2, "lo": [0, 0], "hi": [1, 0]}, "lo < hi"),
    ("classify", {"grid": 2, "lo": [0], "hi": [1]}, "lo"),
    ("regress", {"grid": 2}, "label_bound"),
    ("regress", {"grid": 2, "label_bound": float("inf")}, "label_bound"),
    ("sgd", {"model": "nope", "theta": [0, 0]}, "model"),
    ("sgd", {"model": "quadratic", "theta": [0]}, "theta"),
    ("sgd", {"model": "quadratic", "theta": [0, float("nan")]}, "theta"),
    ("sgd", {"model": "quadratic"}, "theta"),
    ("sgd", {"model": "ridge", "theta": [0, 0], "l2": -1}, "l2"),
])
def test_bad_public_parameters_are_refused(kind: str, extra: dict, field: str) -> None:
    task = TaskSpec(query_id="q", kind=kind, method="ssl", stage=0, epsilon=1.0,
                    components=(0,), eps_c=1.0, dim=2, bound=1.0, intervals=((-1.0, 1.0),),
                    extra=extra)
    with pytest.raises(TaskRefused, match=field):
        validate_task(task)


def test_missing_and_nan_labels_are_sanitized() -> None:
    """Totality: a sample without a usable label (or features) is ignored, never an error."""
    task = _task("classify", grid=2)
    X = np.zeros((10, 2))
    empty = compute_report(task, np.zeros((0, 2)), np.zeros(0), rng=RandomSource.seeded(0))
    for labels, feats in ((None, X), (np.full(10, np.nan), X),
                          (np.ones(10), np.full((10, 2), np.inf)), (np.ones(3), X[:0])):
        got = compute_report(task, feats, labels, rng=RandomSource.seeded(0))
        assert np.array_equal(got, empty)
    # a short label list labels the first samples; the rest are missing
    short = compute_report(task, X, np.ones(4), rng=RandomSource.seeded(5))
    assert np.array_equal(short, compute_report(task, X[:4], np.ones(4),
                                                rng=RandomSource.seeded(5)))


def test_hadamard_inverse_is_exact() -> None:
    q = np.random.default_rng(2).normal(size=16)
    Q = hadamard_matrix(16) @ q
    assert np.allclose(hadamard_inverse(Q), q)


def test_choose_grid_rate_rule_regimes_and_monotonicity() -> None:
    """The spec's rate rule (§9.4, ``rule="rate"``), kept for reproducing the paper."""
    # huge ε: low regime with the non-private side l_np = (nm/ln n)^(-1/(2β+d))
    g = choose_grid(10**5, 100, 1, 1e6, rule="rate", method="two-stage")
    l_np = (10**7 / math.log(10**5)) ** (-1 / 3)
    assert g.regime == "low" and math.ceil(1 / l_np) == g.M
    # the spec's literal c_l = 1 (regime from the final K_H)
    g1 = choose_grid(10**5, 100, 1, 0.5, c_l=1.0, method="two-stage")
    assert math.ceil((10**7 * 0.25) ** (1 / 4)) == g1.M and g1.regime == "high"
    # calibrated default: coarser, never finer as n m ε shrinks, regression coarser
    Ms = [choose_grid(n, 100, 1, 1.0, rule="rate", method="two-stage").M
          for n in (10**3, 10**4, 10**5, 10**6)]
    assert Ms == sorted(Ms) and Ms[-1] > Ms[0]
    # two-stage: stage I of every group keeps n_I ε_c² >= 200
    g = choose_grid(3000, 100, 2, 0.5, rule="rate", method="two-stage")
    assert (3000 // g.K // 2) * 0.25 >= 200 or g.M == 1
    with pytest.raises(ValueError, match="task"):
        choose_grid(100, 10, 1, 1.0, task="cluster")
    with pytest.raises(ValueError, match="rule"):
        choose_grid(100, 10, 1, 1.0, rule="guess")


def test_choose_grid_by_predicted_risk_states_the_trade_off() -> None:
    """The default grid is the argmin of predicted squared bias + variance over the grids
    it weighed; finer with more users, more samples and more ε; the bias falls and the
    variance grows with M; a regressor's label bound enters its variance."""
    g = choose_grid(10**5, 100, 2, 1.0)
    assert g.rule == "least predicted risk" and len(g.candidates) > g.M - 1
    risks = {M: b + v for M, b, v in g.candidates}
    assert min(risks, key=risks.get) == g.M and g.bias2 + g.variance == risks[g.M]
    b2 = [b for _, b, _ in g.candidates]
    var = [v for _, _, v in g.candidates]
    assert b2 == sorted(b2, reverse=True) and var == sorted(var)
    assert g.candidates[-1][2] > risks[g.M]  # the search stops once variance alone loses
    js = g.to_json()
    assert js["M"] == g.M and js["risk"] == pytest.approx(g.bias2 + g.variance)
    for more in (dict(n=10**6), dict(m=1000), dict(eps=8.0)):
        args = dict(n=10**5, m=100, eps=1.0)
        args.update(more)
        assert choose_grid(args["n"], args["m"], 2, args["eps"]).M >= g.M
    assert choose_grid(10**3, 100, 2, 0.5).M <= g.M
    r1 = choose_grid(10**5, 100, 1, 1.0, task="regress", label_bound=1.0)
    r5 = choose_grid(10**5, 100, 1, 1.0, task="regress", label_bound=5.0)
    assert r1.M >= 1 and r5.variance > 0


def test_grid_model_predictors_and_round_trip() -> None:
    q = np.array([0.2, -0.1, 0.0, 0.05])
    p = np.array([0.3, 0.2, 0.4, 0.1])
    cls = GridModel("classify", 2, 2, np.zeros(2), np.ones(2), q)
    X = np.array([[0.1, 0.1], [0.9, 0.1], [0.2, 0.8], [0.7, 0.9]])
    assert np.array_equal(cls.predict(X), [1, -1, 1, 1])  # sign(0) = +1 ([D16])
    reg = GridModel("regress", 2, 2, np.zeros(2), np.ones(2), q, p, 0.5, 0.15)
    assert np.allclose(reg.predict(X), [0.5, -0.1 / 0.2, 0.0, 0.05 / 0.15])  # 0.67 → T_y
    reg2 = GridModel("regress", 2, 2, np.zeros(2), np.ones(2), q * 10, p, 0.5, 0.15)
    assert np.allclose(reg2.predict(X), [0.5, -0.5, 0.0, 0.5])  # two-sided clamp ([D19])
    for mdl in (cls, reg):
        back = GridModel.from_dict(mdl.to_dict())
        assert np.array_equal(back.predict(X), mdl.predict(X))
    with pytest.raises(ValueError, match="entries"):
        GridModel.from_dict({**cls.to_dict(), "q": [1.0, 2.0]})
    with pytest.raises(ValueError, match="features"):
        cls.predict(np.zeros((3, 3)))


def _quiet():
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("ignore")
    return w


def test_s10_classification_excess_risk_decreases_with_nm() -> None:
    """Fixed grid M = 4 (so only the estimation error moves), ε = 1, m = 50."""
    assert bayes_risk_sine() == pytest.approx(0.5 * (1 - 1 / math.pi))
    risks = []
    for n in (400, 1600, 6400):
        vals = []
        for r in range(6):
            src = sine_population(n, 50, 1, np.random.default_rng([n, r]))
            w = _quiet()
            mdl = run_classify(src, epsilon=1.0, rng=RandomSource.seeded(n + r), M=4, seed=r)
            w.__exit__(None, None, None)
            vals.append(excess_risk(mdl.predict, 1))
        risks.append(float(np.mean(vals)))
    assert risks[0] > risks[1] > risks[2] or (risks[2] == 0.0 and risks[0] > 0)
    assert risks[2] <= 0.5 * risks[0]
    assert risks[0] > 0.01  # the smallest fleet does make mistakes (the test can fail)


def test_s10_regression_l2_risk_decreases_with_nm() -> None:
    risks = []
    for n in (500, 2000, 8000):
        vals = []
        for r in range(4):
            src = sine_population(n, 50, 1, np.random.default_rng([n, r]), task="regress")
            w = _quiet()
            # Algorithm 5 itself (the paper's rate); shrinkage is tested on its own below
            mdl = run_regress(src, epsilon=1.0, label_bound=1.0, rng=RandomSource.seeded(r),
                              seed=r, shrink=False)
            w.__exit__(None, None, None)
            vals.append(l2_risk(mdl.predict, 1))
        risks.append(float(np.mean(vals)))
    assert risks[0] > risks[1] > risks[2], risks
    assert risks[2] <= 0.6 * risks[0], risks


def test_user_level_beats_baseline_b_at_large_m() -> None:
    """m = 1000 (§12: two-stage beats B once m ≳ 160). Regression: each method with its own
    grid of least predicted risk by the design guess (``pilot=False``: a pilot of 600 of
    these 2400 users cannot see this sine's signal and both methods fall to one cell,
    docs/algorithms.md "Grids") (L2 risk, ε = 1; measured 0.049 against 0.063 on these
    seeds: grids 4 and 2). Classification: the same grid M = 16 for both at ε = 4 (so the
    two-stage groups pass the stage-I rule), η phase-shifted by 0.137 so the sign change is
    off-grid; excess risk then measures estimation errors."""
    n, m, eps = 2400, 1000, 1.0
    out = {}
    for method in ("two-stage", "baseline-b"):
        reg, cls = [], []
        for r in range(4):
            w = _quiet()
            if r < 2:
                src = sine_population(n, m, 1, np.random.default_rng([r, 7]), task="regress")
                mdl = run_regress(src, epsilon=eps, label_bound=1.0,
                                  rng=RandomSource.seeded(r), method=method, seed=r,
                                  pilot=False)
                reg.append(l2_risk(mdl.predict, 1))
            src = sine_population(n, m, 1, np.random.default_rng([r, 8]), phase=0.137)
            mdl = run_classify(src, epsilon=4.0, rng=RandomSource.seeded(r), method=method,
                               seed=r, M=16)
            cls.append(excess_risk(mdl.predict, 1, phase=0.137))
            w.__exit__(None, None, None)
        out[method] = (float(np.mean(reg)), float(np.mean(cls)))
    assert out["two-stage"][0] < 0.85 * out["baseline-b"][0], out
    assert out["two-stage"][1] < out["baseline-b"][1], out


def test_eta_sine_phase() -> None:
    x = np.array([[0.25], [0.75]])
    assert np.allclose(eta_sine(x), [0.5, -0.5])


def test_shrinkage_pulls_noise_cells_to_the_mean_and_keeps_signal() -> None:
    """Empirical-Bayes shrinkage (models/shrinkage.py, §9.6): on a grid of pure noise the
    cells are pulled to the overall mean and the risk falls; where the cells carry a strong
    signal they are kept; the result round-trips through the result dict."""
    g = np.random.default_rng(5)
    X, y = g.uniform(size=(800, 20, 1)), g.uniform(-0.5, 0.5, size=(800, 20))  # η ≡ 0
    w = _quiet()
    raw = run_regress(X, y, epsilon=0.5, label_bound=1.0, rng=RandomSource.seeded(1), M=8,
                      seed=1, shrink=False)
    shr = run_regress(X, y, epsilon=0.5, label_bound=1.0, rng=RandomSource.seeded(1), M=8,
                      seed=1)
    strong = run_regress(sine_population(20_000, 50, 1, np.random.default_rng(6),
                                         task="regress"),
                         epsilon=8.0, label_bound=1.0, rng=RandomSource.seeded(2), M=4,
                         seed=2)
    w.__exit__(None, None, None)
    x = np.linspace(0.01, 0.99, 99)
    assert shr.shrinkage is not None and strong.shrinkage is not None
    assert np.mean(shr.predict(x) ** 2) < 0.5 * np.mean(raw.predict(x) ** 2)
    assert float(strong.shrinkage.weights.mean()) > 0.9
    assert float(shr.shrinkage.weights.mean()) < float(strong.shrinkage.weights.mean())
    back = GridModel.from_dict(shr.to_dict())
    np.testing.assert_array_equal(back.predict(x), shr.predict(x))
    with pytest.raises(ValueError, match="shrinkage"):
        GridModel.from_dict({**shr.to_dict(), "shrinkage": {"centre": 0.0, "weights": [1.0],
                                                            "signal": 0.0, "noise": 0.0}})


def test_shrinkage_reads_the_cells_standard_errors_as_the_cells() -> None:
    """The grid query's output is the cells ``q̂ = H Q̂ / K_H`` (dense transform): their
    standard errors are the cells', so a cell's noise is ``se_l²`` — reading them as the
    components' divided it by ``K_H`` (InstEval, M = 2: the cells looked 2× less noisy than
    they were). The stated noise matches the cells' spread over seeds within 40 %."""
    from uldp.collector.models.shrinkage import cell_noise

    se = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(cell_noise(se, 4, True), se**2)
    np.testing.assert_allclose(cell_noise(se, 4, False), np.full(4, 0.3 / 16))
    g = np.random.default_rng(3)
    X, y = g.uniform(size=(400, 5, 1)), np.where(g.uniform(size=(400, 5)) < 0.5, -1.0, 1.0)
    w = _quiet()
    runs = [run_classify(X, y, epsilon=1.0, rng=RandomSource.seeded(r), M=4, seed=r)
            for r in range(12)]
    w.__exit__(None, None, None)
    q = np.array([m.q[:4] for m in runs])
    stated = float(np.mean([m.shrinkage.noise for m in runs if m.shrinkage is not None]))
    assert 0.6 < stated / float(q.var(axis=0, ddof=1).mean()) < 1.6
