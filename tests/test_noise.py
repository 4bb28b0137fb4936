"""Secure randomness and float-safe discrete noise (spec §3.1, §13.3 P5; DESIGN invariant 2).

Distributional tests use fixed seeds; each states its false-alarm rate (the probability that
a correct sampler fails the test for a random seed). With a fixed seed the outcome is fixed.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from uldp.client.noise import (
    EPS_DENOMINATOR,
    discrete_gaussian,
    discrete_gaussian_pmf,
    discrete_laplace,
    discrete_laplace_pmf,
    discrete_laplace_variance,
    laplace_scale,
    randomized_round,
    rational_epsilon,
)
from uldp.client.randomness import RandomSource, as_source


def _chi2_pvalue(draws: np.ndarray, pmf, lo: int, hi: int) -> float:
    """Exact-pmf chi-square over cells lo..hi plus two tail cells (expected >= 5 each)."""
    cells = np.arange(lo, hi + 1)
    obs = np.array([(draws < lo).sum()] + [(draws == c).sum() for c in cells]
                   + [(draws > hi).sum()], dtype=float)
    p_mid = pmf(cells)
    p_lo = pmf(np.arange(lo - 2000, lo)).sum()
    p_hi = pmf(np.arange(hi + 1, hi + 2001)).sum()
    exp = np.concatenate([[p_lo], p_mid, [p_hi]]) * draws.size
    keep = exp >= 5
    return float(stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)


# ---- randomness ----------------------------------------------------------------------
def test_seeded_source_is_reproducible_and_marked_simulation():
    a, b = RandomSource.seeded(7), RandomSource.seeded(7)
    assert np.array_equal(a.words(100), b.words(100))
    assert a.simulation and not RandomSource.secure().simulation
    assert not np.array_equal(RandomSource.seeded(8).words(10), RandomSource.seeded(7).words(10))


def test_secure_sources_differ():
    assert not np.array_equal(RandomSource.secure().words(4), RandomSource.secure().words(4))


def test_as_source_defaults_to_secure_and_rejects_numpy_generators():
    assert not as_source(None).simulation
    with pytest.raises(TypeError, match="RandomSource"):
        as_source(np.random.default_rng(0))  # type: ignore[arg-type]


def test_below_is_uniform_exact_rejection():
    # false-alarm rate 1e-3 (chi-square, 9 dof)
    r = RandomSource.seeded(1).below(10, size=100_000)
    assert r.min() == 0 and r.max() == 9
    assert stats.chisquare(np.bincount(r, minlength=10)).pvalue > 1e-3


def test_below_rejects_bad_bounds():
    rng = RandomSource.seeded(1)
    with pytest.raises(ValueError, match="n must be"):
        rng.below(0, size=3)
    with pytest.raises(ValueError, match="size"):
        rng.below(5)


def test_bernoulli_rational_mean():
    # 5-sigma band: false-alarm rate < 1e-6
    b = RandomSource.seeded(2).bernoulli_rational(1, 3, size=200_000)
    assert abs(b.mean() - 1 / 3) < 5 * math.sqrt(2 / 9 / 200_000)


# ---- ε and scales (P1) ------------------------------------------------------------------
def test_rational_epsilon_rounds_down_to_dyadic():
    for eps in (0.1, 1.0, 0.3333, 7.9, 1e-3):
        r = rational_epsilon(eps)
        assert r <= Fraction(eps) and Fraction(eps) - r < Fraction(1, EPS_DENOMINATOR)
        assert r.denominator <= EPS_DENOMINATOR


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, 1e-9])
def test_rational_epsilon_rejects_bad(bad):
    with pytest.raises(ValueError, match="epsilon"):
        rational_epsilon(bad)


@pytest.mark.parametrize("sens,eps", [(2, 1.0), (2, 0.25), (1 << 16, 0.5), (7, 3.0)])
def test_laplace_scale_claims_at_most_epsilon(sens, eps):
    s = laplace_scale(sens, eps)
    assert s.epsilon_for(sens) <= eps
    assert s.epsilon_for(sens) > eps * (1 - 1e-6)
    assert s.value == pytest.approx(sens / eps, rel=1e-6)


def test_laplace_scale_rejects_bad_sensitivity():
    with pytest.raises(ValueError, match="sensitivity"):
        laplace_scale(0, 1.0)


# ---- discrete Laplace (P5) -----------------------------------------------------------
@pytest.mark.parametrize("sens,eps", [(2, 1.0), (2, 0.3), (1, 2.5)])
def test_discrete_laplace_matches_exact_pmf(sens, eps):
    # exact-pmf chi-square; false-alarm rate 1e-3 per case
    s = laplace_scale(sens, eps)
    z = discrete_laplace(s, 200_000, RandomSource.seeded(11 + sens))
    span = int(4 * s.value) + 2
    p = _chi2_pvalue(z, lambda k: discrete_laplace_pmf(k, s.value), -span, span)
    assert p > 1e-3


def test_discrete_laplace_large_scale_variance_and_symmetry():
    # grid-unit stage-II noise: var within 2% (5 sigma for n=4e5 is 1.2%); mean ~ 0
    s = laplace_scale(1 << 16, 1.0)
    z = discrete_laplace(s, 400_000, RandomSource.seeded(3)).astype(float)
    var = discrete_laplace_variance(s.value)
    assert abs(z.var() / var - 1) < 0.02
    assert abs(z.mean()) < 5 * math.sqrt(var / z.size)


def test_discrete_laplace_ks_against_exact_cdf():
    # KS against the exact discrete CDF (conservative for discrete laws); alpha 1e-3
    s = laplace_scale(2, 0.5)
    z = discrete_laplace(s, 50_000, RandomSource.seeded(5))
    ks = np.arange(-400, 401)
    cdf_vals = np.cumsum(discrete_laplace_pmf(ks, s.value))
    emp = np.searchsorted(np.sort(z), ks, side="right") / z.size
    d = np.abs(emp - cdf_vals).max()
    assert d < 1.95 / math.sqrt(z.size)


def test_wrong_scale_is_detected_by_the_pmf_test():
    """The chi-square test can fail: draws at 1.2x the scale are rejected."""
    s = laplace_scale(2, 1.0)
    wrong = laplace_scale(2, 1.0 / 1.2)
    z = discrete_laplace(wrong, 200_000, RandomSource.seeded(12))
    p = _chi2_pvalue(z, lambda k: discrete_laplace_pmf(k, s.value), -10, 10)
    assert p < 1e-6


def test_randomized_round_unbiased_and_checked():
    x = np.full(200_000, 3.3)
    r = randomized_round(x, RandomSource.seeded(9))
    assert set(np.unique(r)) == {3, 4}
    assert abs(r.mean() - 3.3) < 5 * math.sqrt(0.21 / x.size)
    with pytest.raises(ValueError, match="NaN"):
        randomized_round(np.array([np.nan]), RandomSource.seeded(1))


# ---- discrete Gaussian (central estimators) ------------------------------------------
def test_discrete_gaussian_matches_exact_pmf():
    # exact-pmf chi-square, false-alarm rate 1e-3
    z = discrete_gaussian(4.0, 30_000, RandomSource.seeded(21))
    p = _chi2_pvalue(z, lambda k: discrete_gaussian_pmf(k, 4.0), -6, 6)
    assert p > 1e-3


def test_discrete_gaussian_rejects_bad_sigma():
    with pytest.raises(ValueError, match="sigma2"):
        discrete_gaussian(0.0, 3, RandomSource.seeded(1))


def test_discrete_gaussian_large_sigma_path():
    # σ² > 2^16 takes the Python-integer path; variance within 5 s.e. (false alarm < 1e-6)
    z = discrete_gaussian(10**6, 4000, RandomSource.seeded(22)).astype(float)
    assert abs(z.var() / 1e6 - 1) < 5 * math.sqrt(2 / z.size)
    assert abs(z.mean()) < 5 * math.sqrt(1e6 / z.size)
