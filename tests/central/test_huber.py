"""Tests for the HLM estimator (``docs/central-algorithms.md`` H§7 items 1–4 and 6).

All randomness is seeded; every statistical assertion states its false-alarm rate.
"""

from __future__ import annotations

import math
import warnings
from itertools import combinations

import numpy as np
import pytest
from scipy import optimize, stats

from uldp.client.noise import discrete_gaussian_pmf
from uldp.client.randomness import RandomSource
from uldp.collector.central.huber import (
    HLMParams,
    HLMRegimeWarning,
    assumption3_gamma,
    grid_gaussian,
    grid_step_for,
    hlm_mean,
    imbalanced_weights,
    theory_A,
    theory_T,
)
from uldp.collector.central.huber_solver import (
    _huber_1d_exact,
    _huber_irls,
    huber_minimize,
    huber_objective,
)
from uldp.collector.central.outlier_counts import (
    balanced_1d_witness,
    imbalanced_radii,
    outlier_count_balanced_1d,
    outlier_count_intervals_1d,
    outlier_count_lattice,
)
from uldp.collector.central.smooth_sensitivity import (
    calibrated_alpha,
    g_balanced,
    g_imbalanced,
    h_imbalanced,
    hlm_constants,
    hockey_stick_worst,
    nrs_constants,
    paper_constants,
    smooth_sensitivity_balanced,
    smooth_sensitivity_imbalanced,
)

EPS, DELTA = 1.0, 1e-5


# =====================================================================================
# §7.1 Huber solver
# =====================================================================================
@pytest.mark.parametrize("d", [1, 3])
def test_solver_equals_weighted_mean_when_no_outliers(d):
    rng = np.random.default_rng(1)
    y = rng.normal(size=(50, d)) * 0.1
    w = rng.uniform(0.5, 2, 50)
    w /= w.sum()
    T = np.full(50, 10.0)
    got = np.atleast_1d(huber_minimize(y if d > 1 else y[:, 0], w, T))
    np.testing.assert_allclose(got, (w[:, None] * y).sum(axis=0), rtol=1e-14, atol=1e-17)


def _heavy(rng, n, d):
    return rng.standard_t(1.5, size=(n, d))


@pytest.mark.parametrize("seed", range(6))
def test_solver_1d_matches_generic_convex_solver(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    y = _heavy(rng, n, 1)[:, 0]
    w = rng.uniform(0.2, 1, n)
    w /= w.sum()
    T = rng.uniform(0.3, 2.0, n)
    ours = huber_minimize(y, w, T)
    ref = optimize.minimize_scalar(lambda s: huber_objective(s, y, w, T),
                                   bounds=(y.min(), y.max()), method="bounded",
                                   options={"xatol": 1e-12})
    assert huber_objective(ours, y, w, T) <= ref.fun + 1e-12
    assert abs(ours - ref.x) < 1e-5


@pytest.mark.parametrize("seed", range(4))
def test_solver_3d_matches_generic_convex_solver(seed):
    rng = np.random.default_rng(100 + seed)
    n = 40
    y = _heavy(rng, n, 3)
    w = np.full(n, 1 / n)
    T = 1.0
    ours = huber_minimize(y, w, T)
    ref = optimize.minimize(lambda s: huber_objective(s, y, w, T), np.median(y, axis=0),
                            method="Nelder-Mead",
                            options={"xatol": 1e-11, "fatol": 1e-15, "maxiter": 40000})
    assert huber_objective(ours, y, w, T) <= ref.fun + 1e-10
    np.testing.assert_allclose(ours, ref.x, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_solver_1d_exact_agrees_with_irls(seed):
    rng = np.random.default_rng(200 + seed)
    y = _heavy(rng, 80, 1)[:, 0]
    w = np.full(80, 1 / 80)
    T = np.full(80, 0.8)
    exact = _huber_1d_exact(y, w, T)
    irls = _huber_irls(y[:, None], w, T, np.array([y.mean()]), 1e-13, 100_000)[0]
    assert abs(exact - irls) < 1e-8


def test_solver_flat_region_returns_midpoint():
    y = np.array([0.0, 10.0])
    w = np.array([0.5, 0.5])
    assert huber_minimize(y, w, 1.0) == pytest.approx(5.0)  # F' = 0 on [1, 9]


# =====================================================================================
# §7.2 outlier surrogate Δ̃
# =====================================================================================
def _brute_delta_1d(y, T):
    """n − largest S with ∃q: |y_i − q| < T/2 on S and |ȳ_S − q| < (n − s)T/(2s)."""
    n = y.size
    if np.max(np.abs(y - y.mean())) < T / 2:
        return 0
    for s in range(n - 1, 0, -1):
        c = (n - s) * T / (2 * s)
        for S in combinations(range(n), s):
            ys = y[list(S)]
            lo = max(ys.max() - T / 2, ys.mean() - c)
            hi = min(ys.min() + T / 2, ys.mean() + c)
            if lo < hi:
                return n - s
    raise AssertionError("s = 1 is always feasible")


def test_exact_delta_matches_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(2, 8))
        scale = rng.choice([0.1, 0.3, 0.6, 1.5])
        y = rng.normal(size=n) * scale
        if rng.random() < 0.3:
            y[: rng.integers(1, n + 1)] += rng.choice([-3, 2, 5])
        assert outlier_count_balanced_1d(y, 1.0) == _brute_delta_1d(y, 1.0)


def _neighbour(rng, y, scale):
    y2 = y.copy()
    u = int(rng.integers(y.shape[0]))
    kind = rng.integers(3)
    shape = y.shape[1:]
    if kind == 0:  # far
        y2[u] = rng.choice([-1, 1]) * rng.uniform(3, 50) * scale + np.zeros(shape)
    elif kind == 1:  # near another user
        y2[u] = y[int(rng.integers(y.shape[0]))] + rng.normal(size=shape) * 0.05 * scale
    else:
        y2[u] = rng.normal(size=shape) * scale
    return y2


def test_delta_surrogates_are_1_lipschitz():
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(4, 30))
        y = rng.normal(size=n) * rng.choice([0.1, 0.3, 1.0])
        y2 = _neighbour(rng, y, 1.0)
        assert abs(outlier_count_balanced_1d(y, 1.0) - outlier_count_balanced_1d(y2, 1.0)) <= 1
        assert abs(outlier_count_intervals_1d(y, 0.25) - outlier_count_intervals_1d(y2, 0.25)) \
            <= 1
        rho = rng.uniform(0.05, 0.3, n)
        assert abs(outlier_count_intervals_1d(y, rho) - outlier_count_intervals_1d(y2, rho)) <= 1
    for _ in range(60):
        n = int(rng.integers(4, 25))
        d = int(rng.choice([2, 3]))
        y = rng.normal(size=(n, d)) * rng.choice([0.1, 0.3])
        y2 = _neighbour(rng, y, 1.0)
        h = 1 / (8 * math.sqrt(d))
        assert abs(outlier_count_lattice(y, 0.25, h) - outlier_count_lattice(y2, 0.25, h)) <= 1


def test_exact_delta_witness():
    rng = np.random.default_rng(12)
    for _ in range(300):
        n = int(rng.integers(2, 40))
        y = rng.normal(size=n) * rng.choice([0.1, 0.3, 1.0])
        kept, v = balanced_1d_witness(y, 1.0)
        assert n - kept.sum() == outlier_count_balanced_1d(y, 1.0)
        ystar = np.where(kept, y, v)
        assert np.max(np.abs(ystar - ystar.mean())) < 0.5


def test_lattice_quarter_ball_witness():
    rng = np.random.default_rng(13)
    for _ in range(40):
        n, d = int(rng.integers(3, 40)), 3
        y = rng.normal(size=(n, d)) * rng.choice([0.05, 0.15, 0.5])
        dt, c = outlier_count_lattice(y, 0.25, 1 / (8 * math.sqrt(d)), return_center=True)
        if dt == n:
            continue
        kept = np.linalg.norm(y - c, axis=1) < 0.25
        assert n - kept.sum() == dt
        ystar = np.where(kept[:, None], y, c)
        assert np.max(np.linalg.norm(ystar - ystar.mean(axis=0), axis=1)) < 0.5


def _imb_instance(rng, n):
    m = rng.integers(1, 30, n)
    gamma = assumption3_gamma(m)
    w, T = imbalanced_weights(m, gamma, 1.0)
    k0 = int(min(max(math.floor(n / (8 * gamma)), 0), n - 1))
    return m, w, T, k0


def test_imbalanced_radii_witness():
    rng = np.random.default_rng(14)
    checked = 0
    for _ in range(200):
        n = int(rng.integers(16, 60))
        m, w, T, k0 = _imb_instance(rng, n)
        rho = imbalanced_radii(w, T, k0)
        if rho is None or k0 == 0:
            continue
        y = rng.normal(size=n) * 0.2 / np.sqrt(m)
        y[: rng.integers(0, n // 4)] += 3
        dt, q = outlier_count_intervals_1d(y, rho, return_point=True)
        kept = np.abs(y - q) < rho
        assert n - kept.sum() == dt
        ystar = np.where(kept, y, q)
        Z = np.abs(ystar - np.sum(w * ystar))
        assert h_imbalanced(w, T, Z, k0) < np.min(T - Z)
        checked += 1
    assert checked > 50


# =====================================================================================
# §7.3 sensitivity: empirical LS <= G(D, 0) and S(D) <= e^β S(D')
# =====================================================================================
BETA = 0.05


def _clip(v, R):
    v = np.atleast_1d(v)
    nrm = np.linalg.norm(v)
    return v * min(1.0, R / nrm) if nrm > 0 else v


def _balanced_state(y, T, R):
    n = y.shape[0]
    w = np.full(n, 1 / n)
    yy = y[:, 0] if y.shape[1] == 1 else y
    f = _clip(huber_minimize(yy, w, T), R)
    if y.shape[1] == 1:
        dt = outlier_count_balanced_1d(y[:, 0], T, n // 4)
    else:
        dt = outlier_count_lattice(y, T / 4, T / (8 * math.sqrt(y.shape[1])), n // 4)
    Z = float(np.max(np.linalg.norm(y - y.mean(axis=0), axis=1)))
    g0 = g_balanced(Z, n, T, R, dt)[0]
    S = smooth_sensitivity_balanced(Z, n, T, R, BETA, dt)
    case = "a" if (1 - 2 / n) * T > Z else ("b" if g0 < 2 * R else "c")
    return f, g0, S, case


def _replacements(rng, y, u, f, T):
    d = y.shape[1]
    dirs = []
    diff = f - y[u]
    if np.linalg.norm(diff) > 0:
        dirs += [diff / np.linalg.norm(diff), -diff / np.linalg.norm(diff)]
    for _ in range(2):
        v = rng.normal(size=d)
        dirs.append(v / np.linalg.norm(v))
    out = []
    for dv in dirs:
        for r in (0.0, 0.5 * T, 0.9 * T, 1.5 * T, 20 * T, 1e3):
            out.append(f + r * dv)
            out.append(y[u] + r * dv)
    return out


def _check_pairs(rng, y, state_fn, n_users=6):
    f, g0, S, case = state_fn(y)
    for u in rng.choice(y.shape[0], size=min(n_users, y.shape[0]), replace=False):
        for v in _replacements(rng, y, u, f, 1.0):
            y2 = y.copy()
            y2[u] = v
            f2, _, S2, _ = state_fn(y2)
            assert np.linalg.norm(f2 - f) <= g0 * (1 + 1e-9) + 1e-12, (case, g0)
            assert math.exp(BETA) * S2 * (1 + 1e-12) >= S
            assert math.exp(BETA) * S * (1 + 1e-12) >= S2
    return case


def test_sensitivity_balanced_1d():
    rng = np.random.default_rng(21)
    cases = []
    for t in range(150):
        n = int(rng.integers(8, 41))
        R = float(rng.choice([0.3, 2.0, 10.0]))
        kind = t % 3
        y = rng.normal(size=(n, 1)) * (0.08 if kind == 0 else 0.12 if kind == 1 else 0.8)
        if kind == 1:
            k = int(rng.integers(1, max(2, n // 8)))
            y[:k, 0] += rng.choice([-1, 1], size=k) * rng.uniform(1, 5, size=k)
        cases.append(_check_pairs(rng, y, lambda yy, R=R: _balanced_state(yy, 1.0, R), 4))
    assert {"a", "b", "c"} <= set(cases)


def test_sensitivity_balanced_3d_lattice():
    rng = np.random.default_rng(22)
    cases = []
    for t in range(12):
        n = int(rng.integers(8, 30))
        y = rng.normal(size=(n, 3)) * (0.02 if t % 3 == 0 else 0.05 if t % 3 == 1 else 0.5)
        if t % 3 == 1:
            y[0] += 3.0
        cases.append(_check_pairs(rng, y, lambda yy: _balanced_state(yy, 1.0, 2.0), 2))
    assert {"a", "b"} <= set(cases)


def _imb_state(y, m, w, T, k0, rho, R):
    f = _clip(huber_minimize(y[:, 0], w, T), R)
    dt = outlier_count_intervals_1d(y[:, 0], rho, k0) if rho is not None else k0
    Z = np.abs(y[:, 0] - np.sum(w * y[:, 0]))
    g0 = g_imbalanced(w, T, Z, R, dt, k0)[0]
    S = smooth_sensitivity_imbalanced(w, T, Z, R, BETA, dt, k0)
    h1 = h_imbalanced(w, T, Z, 1)
    case = "a" if h1 < np.min(T - Z) else ("b" if g0 < 2 * R else "c")
    return f, g0, S, case


def test_sensitivity_imbalanced_1d():
    rng = np.random.default_rng(23)
    cases = []
    for t in range(60):
        n = int(rng.integers(16, 80))
        m, w, T, k0 = _imb_instance(rng, n)
        rho = imbalanced_radii(w, T, k0)
        R = float(rng.choice([0.5, 5.0]))
        spread = (0.03, 0.03, 0.5)[t % 3]
        y = (rng.normal(size=n) * spread / np.sqrt(m))[:, None]
        if t % 3 == 1:
            y[: int(rng.integers(1, 3)), 0] += 2.0
        cases.append(_check_pairs(
            rng, y, lambda yy, m=m, w=w, T=T, k0=k0, rho=rho, R=R:
            _imb_state(yy, m, w, T, k0, rho, R), 3))
    assert {"a", "b", "c"} <= set(cases)


def test_imbalanced_2d_lattice_path():
    """Imbalanced d = 2: lattice Δ̃ is 1-Lipschitz, its witness meets the (R1) condition,
    and the empirical sensitivity stays below G(D, 0) on adversarial replacements."""
    rng = np.random.default_rng(24)
    for t in range(4):
        n = 48
        m, w, T, k0 = _imb_instance(rng, n)
        rho = imbalanced_radii(w, T, k0)
        rmin = float(rho.min())
        rr = np.minimum(rho, 4 * rmin)
        h = rmin / (2 * math.sqrt(2))
        y = rng.normal(size=(n, 2)) * 0.02 / np.sqrt(m)[:, None]
        if t % 2:
            y[0] += 3.0
        dt, c = outlier_count_lattice(y, rr, h, return_center=True)
        kept = np.linalg.norm(y - c, axis=1) < rr
        ystar = np.where(kept[:, None], y, c)
        Z = np.linalg.norm(ystar - (w[:, None] * ystar).sum(axis=0), axis=1)
        assert h_imbalanced(w, T, Z, k0) < np.min(T - Z)

        def state(yy, w=w, T=T, k0=k0, rr=rr, h=h):
            f = _clip(huber_minimize(yy, w, T), 1.0)
            d_t = outlier_count_lattice(yy, rr, h, k0)
            Zi = np.linalg.norm(yy - (w[:, None] * yy).sum(axis=0), axis=1)
            g0 = g_imbalanced(w, T, Zi, 1.0, d_t, k0)[0]
            return f, g0, smooth_sensitivity_imbalanced(w, T, Zi, 1.0, BETA, d_t, k0), d_t

        _, _, _, d0 = state(y)
        assert d0 == min(dt, k0)
        _check_pairs(rng, y, state, 2)


def test_imbalanced_end_to_end_2d():
    rng = RandomSource.seeded(44).numpy_generator()
    m = rng.integers(1, 30, 3000)
    ids = np.repeat(np.arange(3000), m)
    x = rng.normal(0.1, 1.0, (m.sum(), 2))
    r = hlm_mean(ids, x, epsilon=EPS, delta=DELTA, rng=RandomSource.seeded(45),
                 params=HLMParams(A=20.0, constants="nrs"))
    assert r.privacy.public["path"] == "imbalanced" and len(r.estimate) == 2
    assert np.linalg.norm(np.array(r.estimate) - 0.1) < 0.5


def test_repaired_h_covers_paper_counterexample():
    """Spec A8 [check]: n=200, m=50 except one 100; a user at 0.9 T_j from ȳ_w."""
    n = 200
    m = np.full(n, 50)
    m[-1] = 100
    w = m / m.sum()
    T = 1 / np.sqrt(m)
    y = np.zeros(n)
    # place user 0 so that |y_0 − ȳ_w| = 0.9 T_0 (ȳ_w moves with y_0)
    y[0] = 0.9 * T[0] / (1 - w[0])
    Z = np.abs(y - np.sum(w * y))
    assert h_imbalanced(w, T, Z, 1) < np.min(T - Z)  # case (a)
    f = huber_minimize(y, w, T)
    worst = 0.0
    for v in np.linspace(-5, 5, 2001):
        y2 = y.copy()
        y2[0] = v
        worst = max(worst, abs(huber_minimize(y2, w, T) - f))
    assert worst == pytest.approx(1.34e-3, rel=0.02)
    assert worst <= h_imbalanced(w, T, Z, 1)


# =====================================================================================
# §7.4 constants
# =====================================================================================
REFERENCE = {1: {0.01: 0.232, 0.02: 0.195, 0.03: 0.157, 0.04: 0.119},
             3: {0.01: 0.231, 0.02: 0.191, 0.03: 0.148}}


@pytest.mark.parametrize(("d", "beta"), [(d, b) for d in REFERENCE for b in REFERENCE[d]])
def test_calibrated_alpha_reproduces_reference(d, beta):
    assert calibrated_alpha(EPS, DELTA, beta, d) == pytest.approx(REFERENCE[d][beta], rel=0.02)


def test_paper_constants_warn_and_miss_delta_in_1d():
    with pytest.warns(RuntimeWarning, match="does not deliver"):
        hlm_constants(EPS, DELTA, 1, "paper")
    a, b = paper_constants(EPS, DELTA, 1)
    assert hockey_stick_worst(a, b, EPS, 1) == pytest.approx(1.3e-3, rel=0.1)


def test_nrs_constants_valid():
    for d in (1, 3):
        a, b = nrs_constants(EPS, DELTA, d)
        assert hockey_stick_worst(a, b, EPS, d) <= DELTA
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hlm_constants(EPS, DELTA, 3, "paper")  # d > 1: no warning


def test_default_beta_minimises_proxy():
    alpha, beta = hlm_constants(EPS, DELTA, 1, proxy=lambda b: math.exp(-b * 100) + 1e-3)
    assert 0.005 <= beta <= 0.1
    assert alpha == calibrated_alpha(EPS, DELTA, beta, 1)


# =====================================================================================
# public helpers
# =====================================================================================
def test_assumption3_gamma():
    assert assumption3_gamma(np.full(100, 7)) == 1.0
    n = 4000
    assert assumption3_gamma(np.arange(1, n + 1)) == pytest.approx(math.sqrt(2), rel=0.01)


def test_imbalanced_weights_and_theory_rules():
    m = np.array([1, 2, 3, 100])
    w, T = imbalanced_weights(m, 1.5, 2.0)
    mc = 1.5 * m.sum() / 4
    np.testing.assert_allclose(w, np.minimum(m, mc) / np.minimum(m, mc).sum())
    np.testing.assert_allclose(T, 2.0 / np.sqrt(np.minimum(m, mc)))
    assert np.all(np.diff(w * T) >= 0)  # w_i T_i non-decreasing in m_i (§2.3)
    assert theory_T(10, 100, 1, 1.0) == pytest.approx(13.07 * math.log(10 * 100**3 * 2)
                                                      / math.sqrt(10))
    assert theory_A(1000, 100, 1, 1.0) == pytest.approx(13.07 * math.sqrt(math.log(2e7)))


# =====================================================================================
# bad inputs
# =====================================================================================
IDS = np.repeat(np.arange(10), 3)
VALS = np.linspace(-0.5, 0.5, 30)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": math.nan}, "epsilon"), ({"epsilon": math.inf}, "epsilon"),
    ({"epsilon": "1"}, "epsilon"), ({"delta": 0.0}, "delta"), ({"delta": 1.0}, "delta"),
    ({"delta": math.nan}, "delta"), ({"delta": -1e-5}, "delta"),
])
def test_bad_budget(kwargs, name):
    args = {"epsilon": 1.0, "delta": 1e-5, **kwargs}
    with pytest.raises(ValueError, match=name):
        hlm_mean(IDS, VALS, rng=RandomSource.seeded(0), **args)


@pytest.mark.parametrize(("ids", "vals", "name"), [
    (IDS, np.r_[VALS[:-1], np.nan], "NaN"),
    (IDS, np.r_[VALS[:-1], np.inf], "NaN or infinity"),
    (IDS, VALS[:-1], "same length"),
    (IDS.reshape(3, 10), VALS, "user_ids"),
    (IDS, VALS.reshape(30, 1, 1), "values"),
    (np.zeros(30), VALS, "user_ids"),  # a single user
])
def test_bad_data(ids, vals, name):
    with pytest.raises(ValueError, match=name):
        hlm_mean(ids, vals, epsilon=1.0, delta=1e-5, rng=RandomSource.seeded(0))


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"radius": 0.0}, "radius"), ({"radius": math.nan}, "radius"), ({"T": -1.0}, "T"),
    ({"A": 0.0}, "A"), ({"gamma": 0.5}, "gamma"), ({"k0": -1}, "k0"), ({"k0": 1.5}, "k0"),
    ({"constants": "magic"}, "constants"), ({"beta": 0.0}, "beta"),
    ({"outlier": "guess"}, "outlier"), ({"grid_bits": 2}, "grid_bits"),
    ({"balanced": "yes"}, "balanced"), ({"c_t": -1.0}, "c_t"),
    ({"clip_output": 1}, "clip_output"),
])
def test_bad_params(kwargs, name):
    with pytest.raises(ValueError, match=name):
        HLMParams(**kwargs)


def test_clip_output_is_post_processing_onto_the_ball():
    """Tiny n with a small prior ball: σ is large, the clipped release stays in B(0, R_c)
    and equals the projection of the unclipped release made with the same seed."""
    ids = np.repeat(np.arange(6), 2)
    vals = np.linspace(-3, 3, 12)
    for seed in range(20):
        p = HLMParams(T=0.1, radius=0.5, beta=0.03)
        raw = hlm_mean(ids, vals, epsilon=EPS, delta=DELTA, params=p,
                       rng=RandomSource.seeded(seed)).estimate
        clipped = hlm_mean(ids, vals, epsilon=EPS, delta=DELTA, rng=RandomSource.seeded(seed),
                           params=HLMParams(T=0.1, radius=0.5, beta=0.03, clip_output=True))
        assert clipped.estimate == pytest.approx(float(np.clip(raw, -0.5, 0.5)))
        assert clipped.privacy.public["clip_output"] is True


def test_bad_rng_and_exact_in_3d():
    with pytest.raises(TypeError):
        hlm_mean(IDS, VALS, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="exact"):
        hlm_mean(IDS, np.c_[VALS, VALS], epsilon=1.0, delta=1e-5, rng=RandomSource.seeded(0),
                 params=HLMParams(T=1.0, beta=0.03, outlier="exact"))


# =====================================================================================
# noise law (distributional tests, fixed seeds, false-alarm rate 1e-3 each)
# =====================================================================================
def test_grid_gaussian_matches_discrete_gaussian_law():
    """Chi-square of 20 000 draws of ``grid_gaussian`` (s = 3) against N_Z(0, 9)."""
    step = 0.25
    x = grid_gaussian(np.zeros(20_000), 3.0 * step, step, RandomSource.seeded(31)) / step
    z = np.round(x).astype(int)
    np.testing.assert_array_equal(z, x)
    edges = np.arange(-8, 10)  # cells (-inf,-8], -7..8, [9, inf)
    pmf = discrete_gaussian_pmf(np.arange(-60, 61), 9.0 * (1 + 1e-12) ** 2)
    support = np.arange(-60, 61)
    probs = [pmf[support <= -8].sum()] + [pmf[support == k].sum() for k in edges[1:-1]] + \
        [pmf[support >= 9].sum()]
    obs = [np.sum(z <= -8)] + [np.sum(z == k) for k in edges[1:-1]] + [np.sum(z >= 9)]
    _, pval = stats.chisquare(obs, np.array(probs) / np.sum(probs) * z.size)
    assert pval > 1e-3


def test_hlm_release_noise_law():
    """KS of 1 500 HLM releases on a constant data set against the exact N_Z law.

    Constant data: Z = 0, case (a), Δ̃ = 0, so ``S = max(T/(n−1), e^{-βk_c} 2R_c)`` is
    known and the release minus ``h·round(f/h)`` must be ``h·N_Z(0, s²)``.
    """
    n, T, R, beta = 40, 1.0, 1.0, 0.03
    ids = np.repeat(np.arange(n), 2)
    vals = np.full(2 * n, 0.3)
    params = HLMParams(T=T, radius=R, beta=beta, clip_output=False, regime="off")
    alpha = calibrated_alpha(EPS, DELTA, beta, 1)
    S = smooth_sensitivity_balanced(0.0, n, T, R, beta, 0)
    step = grid_step_for(min(2 * R, T / (n - 1)) / alpha, params.grid_bits)
    s = (S + step) / alpha / step * (1 + 1e-12)
    src = RandomSource.seeded(32)
    z = np.array([(hlm_mean(ids, vals, epsilon=EPS, delta=DELTA, params=params,
                            rng=src).estimate - step * round(0.3 / step)) / step
                  for _ in range(1500)])
    np.testing.assert_allclose(z, np.round(z), atol=1e-6)
    k = int(40 * s) + 10
    support = np.arange(-k, k + 1)
    cdf = np.cumsum(discrete_gaussian_pmf(support, s * s, k))
    # KS against a discrete law: the statistic is conservative, so p > 1e-3 still has
    # false-alarm rate <= 1e-3.
    res = stats.kstest(np.round(z), lambda x: np.interp(np.floor(x), support, cdf))
    assert res.pvalue > 1e-3
    assert np.std(z) == pytest.approx(s, rel=0.1)


def test_regime_check_states_the_theorem_threshold():
    """Issue 11: below the sample size of Thm 2/Thm 5 HLM warns (or refuses) and says why."""
    g = np.random.default_rng(5)
    m = g.integers(1, 60, 300)
    ids = np.repeat(np.arange(300), m)
    vals = np.clip(g.normal(0.2, 0.5, ids.size), -1, 1)
    with pytest.warns(HLMRegimeWarning, match=r"Thm 5.*n = 300 users"):
        rel = hlm_mean(ids, vals, epsilon=1.0, delta=1e-5, rng=RandomSource.seeded(1))
    reg = rel.details["regime"]
    assert reg["ok"] is False and reg["needed"] > 300 and "gamma" in reg["condition"]
    assert -1.0 <= rel.estimate <= 1.0  # clip_output is on by default
    assert rel.interval[0] <= rel.estimate <= rel.interval[1]
    assert "Huber location" in rel.estimand
    with pytest.raises(ValueError, match="outside the regime"):
        hlm_mean(ids, vals, epsilon=1.0, delta=1e-5, rng=RandomSource.seeded(1),
                 params=HLMParams(regime="refuse"))
    with pytest.raises(ValueError, match="regime"):
        HLMParams(regime="maybe")
    # balanced users, large n: inside the regime, no warning
    ids = np.repeat(np.arange(20000), 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HLMRegimeWarning)
        rel = hlm_mean(ids, np.clip(g.normal(0, 0.3, ids.size), -1, 1), epsilon=1.0,
                       delta=1e-5, rng=RandomSource.seeded(2))
    assert rel.details["regime"]["ok"] is True and "Thm 2" in rel.details["regime"]["theorem"]


# =====================================================================================
# §7.6 accuracy / statistical smoke tests
# =====================================================================================
def _balanced_data(rng, n, m, law, d=1):
    size = (n * m, d) if d > 1 else n * m
    if law == "gauss":
        x = rng.normal(0.0, 1.0, size)
    elif law == "lomax":
        x = rng.pareto(4.0, size)
    else:
        x = rng.uniform(-1, 1, size)
    return np.repeat(np.arange(n), m), x


def test_hlm_converges_with_huge_n():
    """n = 20 000, m = 5, Gaussian: MSE over 10 seeds within 3× the predicted
    ``1/N + (2T/n)²/α²`` (Thm 2 regime: Δ̃ = 0 w.h.p., S = 2T/n)."""
    n, m, T, beta = 20_000, 5, 2.5, 0.01
    alpha = calibrated_alpha(EPS, DELTA, beta, 1)
    errs = []
    for seed in range(10):
        rng = RandomSource.seeded(400 + seed).numpy_generator()
        ids, x = _balanced_data(rng, n, m, "gauss")
        r = hlm_mean(ids, x, epsilon=EPS, delta=DELTA, rng=RandomSource.seeded(500 + seed),
                     params=HLMParams(T=T, beta=beta))
        errs.append(r.estimate ** 2)
    predicted = 1 / (n * m) + (2 * T / n / alpha) ** 2
    assert np.mean(errs) < 3 * predicted
    assert np.mean(errs) > predicted / 20  # not suspiciously exact either


def test_hlm_3d_and_imbalanced_accuracy():
    rng = RandomSource.seeded(41).numpy_generator()
    ids, x = _balanced_data(rng, 3000, 10, "gauss", d=3)
    r = hlm_mean(ids, x, epsilon=EPS, delta=DELTA, rng=RandomSource.seeded(42),
                 params=HLMParams(T=3.0, beta=0.02))
    assert np.linalg.norm(np.array(r.estimate)) < 0.05
    assert r.privacy.mode == "approx" and r.privacy.public["path"] == "balanced"
    m = np.maximum(1, np.round(rng.pareto(1.5, 4000) * 5)).astype(int)
    ids = np.repeat(np.arange(4000), m)
    x = rng.normal(0.2, 1.0, m.sum())
    r = hlm_mean(ids, x, epsilon=EPS, delta=DELTA, rng=RandomSource.seeded(43),
                 params=HLMParams(A=20.0))  # default β from the §2.9 proxy
    assert r.privacy.public["path"] == "imbalanced"
    # S ≈ 2 max_i w_i T_i ≈ 0.009 here, α ≈ 0.12: noise sd ≈ 0.08; 4 sd ≈ 0.3
    assert abs(r.estimate - 0.2) < 0.3
    assert r.privacy.public["k0"] == math.floor(4000 / (8 * r.privacy.public["gamma"]))
