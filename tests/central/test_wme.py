"""Tests for the two-stage WME baseline (``docs/central-algorithms.md`` H§3, H§7 items 5–6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from uldp.client.noise import discrete_laplace_pmf
from uldp.client.randomness import RandomSource
from uldp.collector.central.huber import HLMParams, hlm_mean
from uldp.collector.central.wme import (
    WMEParams,
    clipped_grid_sum,
    default_tau,
    fwht,
    hadamard_inverse,
    hadamard_rotation,
    histogram_counts,
    private_range,
    range_bins,
    wme_mean,
    zcdp_delta,
    zcdp_sigma,
)

EPS, DELTA = 1.0, 1e-5


# ---- §7.5 -----------------------------------------------------------------------------
def test_histogram_counts_change_by_at_most_two_per_replaced_user():
    rng = np.random.default_rng(1)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        tau = float(rng.choice([0.05, 0.2, 0.7]))
        x = rng.normal(size=n) * rng.choice([0.3, 2.0])
        x2 = x.copy()
        x2[int(rng.integers(n))] = rng.normal() * 3
        c, c2 = histogram_counts(x, tau, 1.0), histogram_counts(x2, tau, 1.0)
        assert c.size == range_bins(tau, 1.0)
        assert np.abs(c - c2).sum() <= 2
        assert np.abs(c - c2).max() <= 1


def test_histogram_bins_layout():
    c = histogram_counts(np.array([-1.0, -0.51, -0.5, 0.0, 0.99, 1.0, -1.2]), 0.25, 1.0)
    np.testing.assert_array_equal(c, [2, 1, 1, 1])  # [-1,-.5), [-.5,0), [0,.5), [.5,1)


@pytest.mark.parametrize("dp", [1, 2, 4, 8, 32])
def test_hadamard_rotation_is_orthogonal(dp):
    rng = np.random.default_rng(dp)
    signs = np.where(rng.random(dp) < 0.5, -1.0, 1.0)
    U = hadamard_rotation(np.eye(dp), signs)  # rows: U e_k -> U^T as a matrix
    np.testing.assert_allclose(U @ U.T, np.eye(dp), atol=1e-12)
    y = rng.normal(size=(5, dp))
    np.testing.assert_allclose(hadamard_inverse(hadamard_rotation(y, signs), signs), y,
                               atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(hadamard_rotation(y, signs), axis=1),
                               np.linalg.norm(y, axis=1))


def test_fwht_matches_sylvester_matrix():
    H = np.array([[1.0]])
    for _ in range(3):
        H = np.block([[H, H], [H, -H]])
    x = np.arange(8.0)
    np.testing.assert_allclose(fwht(x), H @ x)
    with pytest.raises(ValueError, match="power of two"):
        fwht(np.ones(3))


def test_zcdp_conversion_and_sigma():
    # CKS Cor. 13 is tighter than the classic sqrt(2 ln(1.25/δ))/ε bound (ε < 1)
    s = zcdp_sigma(1.0, 0.5, 1e-5)
    assert s < math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5
    assert zcdp_delta(1 / (2 * s * s), 0.5) <= 1e-5
    assert zcdp_delta(1 / (2 * (0.99 * s) ** 2), 0.5) > 1e-5
    # conversion is never better than the exact continuous Gaussian δ (Balle–Wang)
    eps, sig = 0.5, s
    exact = stats.norm.cdf(1 / (2 * sig) - eps * sig) - math.exp(eps) * stats.norm.cdf(
        -1 / (2 * sig) - eps * sig)
    assert exact <= 1e-5
    assert zcdp_sigma(3.0, 0.5, 1e-5) == pytest.approx(3 * s)


def test_gaussian_stage2_noise_scale_formula():
    """σ (grid units) = zcdp_sigma(m_max K √d', ε/2, δ): L2 sensitivity of Σ m_i u_i."""
    m = np.array([1, 3, 2, 5] * 5)
    ids = np.repeat(np.arange(m.size), m)
    x = np.tile(np.linspace(-0.3, 0.3, 3), (m.sum(), 1))
    r = wme_mean(ids, x, epsilon=EPS, delta=DELTA, tau=0.3, rng=RandomSource.seeded(2),
                 params=WMEParams(grid_units=256, weighting="samples"))
    assert r.details["stage2_sigma_grid_units"] == pytest.approx(
        zcdp_sigma(5 * 256 * math.sqrt(4), EPS / 2, DELTA))
    r1 = wme_mean(ids, x[:, 0], epsilon=EPS, delta=DELTA, tau=0.3, rng=RandomSource.seeded(2),
                  params=WMEParams(grid_units=256, stage2="gaussian", weighting="users"))
    assert r1.details["stage2_sigma_grid_units"] == pytest.approx(
        zcdp_sigma(256, EPS / 2, DELTA))
    assert r1.privacy.mode == "approx"


def test_clipped_grid_sum_is_exact_on_grid_points():
    y = np.array([-5.0, 0.0, 0.25, 0.5, 9.0])
    got = clipped_grid_sum(y, 0.0, 1.0, np.array([1, 2, 3, 4, 5]), 4, RandomSource.seeded(0))
    assert int(got[0]) == 0 * 1 + 0 * 2 + 1 * 3 + 2 * 4 + 4 * 5


def test_randomized_rounding_is_unbiased():
    y = np.full(40_000, 0.3)
    K = 4
    got = clipped_grid_sum(y, 0.0, 1.0, np.ones(y.size, np.int64), K, RandomSource.seeded(3))
    # E = 1.2 per user; Bernoulli(0.2) sd per user 0.4 → sd of sum 80; 5 sd = 400 (FA < 1e-6)
    assert abs(int(got[0]) - 1.2 * y.size) < 400


def test_private_range_contains_true_bin_with_strong_signal():
    x = np.full(500, 0.3)
    a, b = private_range(x, 0.1, 1.0, 1.0, RandomSource.seeded(4))
    assert b - a == pytest.approx(0.4)
    assert a <= 0.3 <= b


# ---- noise law (chi-square, fixed seed, false-alarm rate 1e-3) -----------------------
def test_wme_stage2_noise_is_discrete_laplace():
    """2 000 releases on a constant data set: recovered integer noise vs DLap(K m / ε₂)."""
    n, K = 30, 8
    ids = np.repeat(np.arange(n), 2)
    vals = np.full(2 * n, 0.125)  # exactly on the grid of the bin [0, 0.5) ± 0.25
    params = WMEParams(tau=0.25, grid_units=K, weighting="samples")
    src = RandomSource.seeded(5)
    z = []
    for _ in range(2000):
        r = wme_mean(ids, vals, epsilon=EPS, delta=DELTA, params=params, rng=src)
        a, b = r.details["ranges"][0]
        g = (b - a) / K
        pos = (min(max(0.125, a), b) - a) / g
        assert pos == round(pos)
        u_sum = round(pos) * 2 * n  # Σ m_i u_i
        z.append(r.details["stage2_noisy_sum"][0] - u_sum)
        assert -1.0 <= r.estimate <= 1.0  # post-processed into [-B, B]
    z = np.array(z, dtype=np.int64)
    t = K * 2 / (EPS / 2)  # sensitivity m_max K, ε₂ = ε/2
    support = np.arange(-40 * int(t), 40 * int(t) + 1)
    cdf = np.cumsum(discrete_laplace_pmf(support, t))
    # 20 cells with edges at the exact law's 5%-quantiles (integer cells, exact probs)
    edges = support[np.searchsorted(cdf, np.arange(1, 20) / 20)]
    cell = np.searchsorted(edges, z, side="left")  # cell k: edges[k-1] < z <= edges[k]
    obs = np.bincount(cell, minlength=20)
    cdf_at = np.r_[0.0, cdf[np.searchsorted(support, edges)], 1.0]
    exp_p = np.diff(cdf_at)
    _, pval = stats.chisquare(obs, exp_p * z.size)
    assert pval > 1e-3


# ---- bad inputs -----------------------------------------------------------------------
IDS = np.repeat(np.arange(10), 3)
VALS = np.linspace(-0.5, 0.5, 30)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": math.inf}, "epsilon"),
    ({"delta": 0.0}, "delta"), ({"delta": 2.0}, "delta"), ({"delta": math.nan}, "delta"),
])
def test_bad_budget(kwargs, name):
    args = {"epsilon": 1.0, "delta": 1e-5, **kwargs}
    with pytest.raises(ValueError, match=name):
        wme_mean(IDS, VALS, rng=RandomSource.seeded(0), **args)


@pytest.mark.parametrize(("ids", "vals", "name"), [
    (IDS, np.r_[VALS[:-1], np.nan], "NaN"),
    (IDS, VALS[:-2], "same length"),
    (IDS.reshape(3, 10), VALS, "user_ids"),
    (IDS, VALS.reshape(30, 1, 1), "values"),
    (IDS, np.array(["a"] * 30), "values"),
])
def test_bad_data(ids, vals, name):
    with pytest.raises(ValueError, match=name):
        wme_mean(ids, vals, epsilon=1.0, delta=1e-5, rng=RandomSource.seeded(0))


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"tau": 0.0}, "tau"), ({"tau": math.nan}, "tau"), ({"bound": -1.0}, "bound"),
    ({"split": 1.0}, "split"), ({"split": 0.0}, "split"), ({"stage2": "cauchy"}, "stage2"),
    ({"weighting": "x"}, "weighting"), ({"grid_units": 0}, "grid_units"),
    ({"grid_units": 2.5}, "grid_units"),
])
def test_bad_params(kwargs, name):
    with pytest.raises(ValueError, match=name):
        WMEParams(**kwargs)


def test_laplace_stage2_rejected_in_high_d():
    with pytest.raises(ValueError, match="stage2"):
        wme_mean(IDS, np.c_[VALS, VALS], epsilon=1.0, delta=1e-5, rng=RandomSource.seeded(0),
                 params=WMEParams(tau=0.2, stage2="laplace"))


# ---- records and accuracy ---------------------------------------------------------------
def test_privacy_records():
    r = wme_mean(IDS, VALS, epsilon=1.0, delta=1e-5, tau=0.3, rng=RandomSource.seeded(0))
    assert r.privacy.mode == "pure" and r.privacy.delta is None
    assert r.privacy.split == {"private_range": 0.5, "clipped_mean": 0.5}
    r = wme_mean(IDS, np.c_[VALS, VALS, VALS], epsilon=1.0, delta=1e-5, tau=0.3,
                 rng=RandomSource.seeded(0))
    assert r.privacy.mode == "approx" and r.privacy.delta == 1e-5
    assert len(r.privacy.public["rotation_signs"]) == 4 and len(r.estimate) == 3


def _data(rng, n, m, law, d=1):
    size = (n * m, d) if d > 1 else n * m
    x = {"gauss": lambda: rng.normal(0, 1, size), "unif": lambda: rng.uniform(-1, 1, size),
         "lomax": lambda: rng.pareto(4.0, size)}[law]()
    return np.repeat(np.arange(n), m), x


def test_wme_accuracy_1d_and_highd():
    """Laplace noise sd = √2·4τ·2/(nε) ≈ 2.3e-3 at n = 5000, τ = 0.5; sampling sd ≈ 4.5e-3."""
    rng = RandomSource.seeded(6).numpy_generator()
    ids, x = _data(rng, 5000, 10, "gauss")
    r = wme_mean(ids, x, epsilon=EPS, delta=DELTA, tau=1.0, rng=RandomSource.seeded(7))
    assert abs(r.estimate) < 0.03
    ids, x = _data(rng, 5000, 10, "gauss", d=3)
    r = wme_mean(ids, x, epsilon=EPS, delta=DELTA, tau=0.8, rng=RandomSource.seeded(8))
    assert np.linalg.norm(np.array(r.estimate)) < 0.1
    # imbalanced weighted form: unbiased on a symmetric law
    m = np.repeat([1, 5, 20], 1000)
    ids = np.repeat(np.arange(m.size), m)
    x = rng.normal(0.1, 1, m.sum())
    r = wme_mean(ids, x, epsilon=EPS, delta=DELTA, tau=1.5, rng=RandomSource.seeded(9))
    assert abs(r.estimate - 0.1) < 0.05


def test_hlm_and_wme_agree_on_symmetric_light_tails():
    """§7.6: Uniform[-1,1], n = 4000, m = 20, 8 seeds: mean squared difference of the two
    estimates is below 5× the sum of their predicted noise variances."""
    diffs = []
    n, m = 4000, 20
    sd = 1 / math.sqrt(3 * m)
    for seed in range(8):
        rng = RandomSource.seeded(60 + seed).numpy_generator()
        ids, x = _data(rng, n, m, "unif")
        h = hlm_mean(ids, x, epsilon=EPS, delta=DELTA, rng=RandomSource.seeded(70 + seed),
                     params=HLMParams(T=4 * sd, beta=0.02)).estimate
        w = wme_mean(ids, x, epsilon=EPS, delta=DELTA, tau=2 * sd,
                     rng=RandomSource.seeded(80 + seed)).estimate
        diffs.append((h - w) ** 2)
    var_hlm = (2 * 4 * sd / n / 0.195) ** 2
    var_wme = 2 * (4 * 2 * sd / n * 2 / EPS) ** 2
    assert np.mean(diffs) < 5 * (var_hlm + var_wme)


@pytest.mark.slow
def test_lomax_large_m_both_estimators_nearly_unbiased():
    """§7.6 Lomax item, in the form that our measurements support (see the benchmark
    report: the spec's "HLM bias < WME bias" did not reproduce with calibrated constants).

    Lomax(4), n = 10 000, m = 100, 6 seeds, tuned scales from B1 (HLM c_T = 5.6, WME
    c_τ = 2.8): each estimator's mean error is within 4 standard errors of 0 (two-sided
    false-alarm rate ≈ 6e-5 each if unbiased) and its MSE is below 5× the predicted
    sampling + privacy variance.
    """
    n, m = 10_000, 100
    sd = math.sqrt(2 / 9) / math.sqrt(m)
    err_h, err_w = [], []
    for seed in range(6):
        rng = RandomSource.seeded(90 + seed).numpy_generator()
        y = rng.pareto(4.0, (n, m)).mean(axis=1)
        ids = np.arange(n)  # one row per user: same output law as the raw records
        err_h.append(hlm_mean(ids, y, epsilon=EPS, delta=DELTA,
                              rng=RandomSource.seeded(100 + seed),
                              params=HLMParams(T=5.6 * sd)).estimate - 1 / 3)
        err_w.append(wme_mean(ids, y, epsilon=EPS, delta=DELTA, tau=2.8 * sd,
                              rng=RandomSource.seeded(110 + seed)).estimate - 1 / 3)
    samp = sd**2 / n
    var_h = samp + (2 * 5.6 * sd / n / 0.15) ** 2
    var_w = samp + 2 * (4 * 2.8 * sd / n * 2 / EPS) ** 2
    for errs, var in ((np.array(err_h), var_h), (np.array(err_w), var_w)):
        assert abs(errs.mean()) < 4 * errs.std(ddof=1) / math.sqrt(errs.size) + 1e-12
        assert np.mean(errs**2) < 5 * var


# ---- issue 11: tau, intersection with the public range, user weighting ----------------
def test_tau_comes_from_a_private_median_count_not_the_smallest_user():
    """One user with a single row used to set tau (default_tau at m_min = 1)."""
    g = np.random.default_rng(3)
    m = np.r_[1, np.full(999, 50)]
    ids = np.repeat(np.arange(m.size), m)
    vals = np.clip(g.normal(0.1, 0.3, ids.size), -1, 1)
    r = wme_mean(ids, vals, epsilon=1.0, delta=DELTA, rng=RandomSource.seeded(1))
    pub = r.privacy.public
    assert pub["tau_from"].startswith("private median count")
    m_typ = float(pub["tau_from"].split()[-1])
    assert 30 <= m_typ <= 80  # the median count is 50, the smallest 1
    assert pub["tau"] < default_tau(1.0, m.size, 1) / 4
    assert r.privacy.split["median_count"] == pytest.approx(0.1)
    assert sum(r.privacy.split.values()) == pytest.approx(1.0)
    assert pub["weighting"] == "users" and pub["m_i"].startswith("not used")
    r2 = wme_mean(ids, vals, epsilon=1.0, delta=DELTA, rng=RandomSource.seeded(1),
                  params=WMEParams(typical_count=50))
    assert r2.privacy.public["tau_from"] == "declared typical_count"
    assert "median_count" not in r2.privacy.split


def test_stage2_interval_and_release_lie_in_the_public_range():
    g = np.random.default_rng(4)
    ids = np.repeat(np.arange(300), 3)
    vals = np.clip(g.normal(0.9, 0.1, ids.size), -1, 1)
    src = RandomSource.seeded(6)
    for _ in range(20):
        r = wme_mean(ids, vals, epsilon=0.3, delta=DELTA, rng=src,
                     params=WMEParams(typical_count=1))
        (a, b), = r.details["ranges"]
        assert -1.0 <= a < b <= 1.0
        assert -1.0 <= r.estimate <= 1.0
        assert -1.0 <= r.interval[0] <= r.interval[1] <= 1.0
        assert "mean of user means" in r.estimand


def test_wme_param_validation_for_the_new_fields():
    for kwargs, name in (({"typical_count": 0.5}, "typical_count"),
                         ({"count_share": 0.6}, "count_share"),
                         ({"alpha": 0.0}, "alpha")):
        with pytest.raises(ValueError, match=name):
            WMEParams(**kwargs)
