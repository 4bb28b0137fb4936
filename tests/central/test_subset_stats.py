"""Tests for uldp.collector.central.subset_release (docs/central-algorithms.md, part C).

Checklist §7 items 1-3 and 7 live here (exact §2.9 vectors, brute-force sensitivities and
biases, noise scales recomputed from public inputs), plus bad inputs, the noise pmf and an
empirical check of the released error against the §2.3/§2.4 formulas.
"""

from __future__ import annotations

import inspect
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from uldp.client.noise import discrete_laplace_pmf, laplace_scale
from uldp.client.randomness import RandomSource
from uldp.collector.central.clip_user import plan_from_occupancy
from uldp.collector.central.occupancy import Occupancy, occupancy_from_rows
from uldp.collector.central.subset_bounds import (
    mean_bias,
    mean_sensitivity,
    var_bias,
    var_sensitivity,
)
from uldp.collector.central.subset_noise import effective_bits as _effective_bits
from uldp.collector.central.subset_noise import expected_abs_noise, noise_interval
from uldp.collector.central.subset_params import SubsetStatsParams, grid_error, grid_error_arrays
from uldp.collector.central.subset_params import error_scalar as _error_scalar
from uldp.collector.central.subset_release import subset_stats

F = Fraction
U = F(10)
ONE = F(1)


def exact_error(kept: list[int], counts: list[int], u: F = U, eps: F = ONE) -> F:
    """Eq. (13) in exact arithmetic from the small pure functions."""
    s, n, gs = sum(kept), sum(counts), max(kept)
    return (mean_bias(s, n, u) + var_bias(s, n, u) + 2 * mean_sensitivity(gs, s, u) / eps
            + 2 * var_sensitivity(gs, s, u) / eps)


# ---- §7 item 1: §2.9 vectors, exact ----------------------------------------------------
def test_worked_vectors_sensitivities_exact() -> None:
    assert mean_sensitivity(5, 9, U) == F(50, 9)
    assert var_sensitivity(5, 9, U) == F(2000, 81)
    assert var_sensitivity(4, 7, U) == F(1200, 49)  # counts (4, 3)
    assert var_sensitivity(1, 5, U) == 16  # item level, L = 5
    assert exact_error([5, 2, 1, 1], [5, 2, 1, 1]) == F(4900, 81)


def test_worked_vectors_suppress_heavy_user_exact() -> None:
    assert mean_bias(4, 9, U) == F(50, 9)
    assert var_bias(4, 9, U) == F(2000, 81)
    assert mean_sensitivity(2, 4, U) == 5
    assert var_sensitivity(2, 4, U) == 25
    assert exact_error([0, 2, 1, 1], [5, 2, 1, 1]) == F(7310, 81)


def test_worked_vectors_suppress_light_user_and_caps_exact() -> None:
    assert mean_bias(8, 9, U) == F(10, 9)
    assert var_bias(8, 9, U) == F(800, 81)
    assert mean_sensitivity(5, 8, U) == F(50, 8)
    assert var_sensitivity(5, 8, U) == 25
    assert exact_error([5, 2, 1, 0], [5, 2, 1, 1]) == F(11905, 162)
    assert exact_error([1, 1, 1, 1], [5, 2, 1, 1]) == F(11785, 162)
    assert exact_error([2, 2, 1, 1], [5, 2, 1, 1]) == F(230, 3)


@pytest.mark.parametrize(("kept", "value"), [
    ([5, 2, 1, 1], F(4900, 81)), ([0, 2, 1, 1], F(7310, 81)), ([5, 2, 1, 0], F(11905, 162)),
    ([1, 1, 1, 1], F(11785, 162)), ([2, 2, 1, 1], F(230, 3))])
def test_float_grid_error_matches_exact(kept: list[int], value: F) -> None:
    got = grid_error(kept, [5, 2, 1, 1], upper=10, epsilon=1.0)
    assert got == pytest.approx(float(value), rel=1e-14)


def test_var_sensitivity_boundaries() -> None:
    assert var_sensitivity(3, 6, U) == 25  # N = 2m*, even: U²/4
    assert var_sensitivity(3, 6, U) == U**2 * 3 * 3 / 36  # both branches agree at N = 2m*
    assert var_sensitivity(1, 1, U) == 0  # N = 1
    assert var_sensitivity(3, 7, U) == U**2 * 3 * 4 / 49  # N = 7 > 6: first branch
    assert var_sensitivity(4, 7, U) == 25 * (1 - F(1, 49))  # odd N <= 2m*
    assert var_sensitivity(4, 8, U) == 25  # even N <= 2m*
    for n in range(1, 30):  # item-level Cor. III.1
        assert var_sensitivity(1, n, U) == (U**2 * (n - 1) / n**2 if n > 2 else
                                            var_sensitivity(1, n, U))
    assert var_sensitivity(1, 2, U) == 25


def test_var_sensitivity_properties() -> None:
    for n in range(1, 40):
        prev = F(-1)
        for m in range(1, n + 1):
            d = var_sensitivity(m, n, U)
            assert 0 <= d <= U**2 / 4
            assert d >= prev  # non-decreasing in m* for fixed N
            prev = d
    # item level is > 8x smaller than the textbook 8U²/L
    assert all(var_sensitivity(1, n, U) * 8 < 8 * U**2 / n for n in range(3, 50))


def test_var_bias_boundaries_and_keep_1_of_100() -> None:
    assert var_bias(9, 9, U) == 0
    assert var_bias(0, 9, U) == 25 * (1 - F(1, 81))
    assert var_bias(3, 6, U) == 25  # 2S = N, N even
    assert var_bias(4, 6, U) == U**2 * 4 * 2 / 36
    assert var_bias(1, 100, U) == U**2 / 4
    misprint = U**2 * 1 * 99 / 100**2  # the main-text "N > 2S" branch
    assert misprint < F(1, 100) * U**2 < var_bias(1, 100, U)
    # the extremal dataset of the correction note realises it exactly
    x = np.r_[np.zeros(50), np.full(50, 10.0)]  # kept sample (first) is 0
    assert x.var() - x[:1].var() == pytest.approx(25.0, abs=1e-12)


def test_var_bias_equals_var_sensitivity_of_dropped_count() -> None:
    for n in range(1, 30):
        for s in range(0, n):
            assert var_bias(s, n, U) == var_sensitivity(n - s, n, U)


@pytest.mark.parametrize(("fn", "args", "name"), [
    (var_sensitivity, (0, 5, 1.0), "max_count"), (var_sensitivity, (6, 5, 1.0), "max_count"),
    (var_sensitivity, (1, 0, 1.0), "total"), (var_sensitivity, (1, 5, -1.0), "upper"),
    (var_sensitivity, (1, 5, float("nan")), "upper"), (mean_sensitivity, (1.5, 5, 1.0),
                                                        "max_count"),
    (var_bias, (-1, 5, 1.0), "kept"), (var_bias, (6, 5, 1.0), "kept"),
    (mean_bias, (1, 0, 1.0), "total")])
def test_formula_bad_inputs(fn, args, name) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=name):
        fn(*args)


def test_uniform_cap_lemmas_d1_d4_and_d3_counterexample() -> None:
    """Lemma D.1 (Δμ_clip ≤ Δμ) and D.4 (N even, m ∈ {m_ℓ} ⇒ ΔVar_clip ≤ ΔVar) hold on
    random counts; Lemma D.3 (a minimiser over m lies in {m_ℓ}) FAILS for L = 2 because of
    the odd-S branch — the planner therefore searches every integer cap (§2.7)."""
    gen = RandomSource.seeded(14).numpy_generator()
    for _ in range(1500):
        m = gen.integers(1, 12, int(gen.integers(2, 7)))
        n, top = int(m.sum()), int(m.max())
        for c in range(int(m.min()), top + 1):
            s = int(np.minimum(m, c).sum())
            assert mean_sensitivity(c, s, U) <= mean_sensitivity(top, n, U)
            if n % 2 == 0 and c in set(m.tolist()):
                assert var_sensitivity(c, s, U) <= var_sensitivity(top, n, U)
    d = {c: var_sensitivity(c, 4 + c, ONE) for c in range(4, 9)}  # counts (4, 8)
    assert d[4] == d[8] == F(1, 4) and d[5] == F(20, 81) < F(1, 4)  # interior minimiser


# ---- §7 item 2: brute-force sensitivities -------------------------------------------
def _sums(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return vals.sum(axis=1), (vals * vals).sum(axis=1)


def _brute_sensitivities(counts: list[int], levels: int) -> tuple[F, F]:
    """max over user-level neighbours of |Δmean| and |ΔVar|; values j/(levels-1)·U' with
    integer arithmetic (U' = levels - 1), returned rescaled to U = 1."""
    n = sum(counts)
    u = levels - 1
    best_mu, best_var = F(0), F(0)
    for m in counts:
        others = np.array(list(itertools.product(range(levels), repeat=n - m)),
                          dtype=np.int64).reshape(-1, n - m)
        mine = np.array(list(itertools.product(range(levels), repeat=m)), dtype=np.int64)
        so, qo = _sums(others)
        sm, qm = _sums(mine)
        s = so[:, None] + sm[None, :]
        t = n * (qo[:, None] + qm[None, :]) - s * s  # = N²·Var
        best_var = max(best_var, F(int((t.max(axis=1) - t.min(axis=1)).max()), n * n * u * u))
        best_mu = max(best_mu, F(int((s.max(axis=1) - s.min(axis=1)).max()), n * u))
    return best_mu, best_var


@pytest.mark.parametrize("counts", [
    [1, 1], [2, 1], [1, 1, 1], [2, 1, 1], [3, 1], [2, 2], [3, 1, 1], [2, 1, 1, 1],
    [2, 2, 1], [1, 1, 1, 1, 1], [3, 2, 1], [4, 1, 1]])
def test_brute_force_sensitivity_equals_prop_iii1(counts: list[int]) -> None:
    mu, var = _brute_sensitivities(counts, levels=5)  # values in {0, U/4, U/2, 3U/4, U}
    n, m = sum(counts), max(counts)
    assert mu == mean_sensitivity(m, n, F(1))
    assert var == var_sensitivity(m, n, F(1))


@pytest.mark.parametrize("counts", [[2, 1, 1], [3, 1], [1, 1, 1]])
def test_brute_force_sensitivity_fine_grid(counts: list[int]) -> None:
    _, var = _brute_sensitivities(counts, levels=9)
    assert var == var_sensitivity(max(counts), sum(counts), F(1))


def test_random_neighbours_never_exceed_sensitivity() -> None:
    gen = RandomSource.seeded(11).numpy_generator()
    for counts in ([3, 2, 1], [5, 2, 1, 1], [1, 1, 1, 1], [4, 4, 1]):
        n, m = sum(counts), max(counts)
        bound = float(var_sensitivity(m, n, 1.0))
        worst = 0.0
        for _ in range(3000):
            x = gen.random(n)
            y = x.copy()
            k = int(gen.integers(len(counts)))
            start = sum(counts[:k])
            y[start:start + counts[k]] = gen.choice([0.0, 1.0, gen.random()], counts[k])
            worst = max(worst, abs(x.var() - y.var()))
        assert worst <= bound + 1e-12
        assert worst > 0.5 * bound  # the search is not vacuous


def test_clipped_sensitivity_brute_force() -> None:
    """Lemma III.3: the clip mechanism's Δ is the same formula in (Γ⋆, S)."""
    counts, kept = [3, 2, 1], [1, 2, 1]
    mu, var = _brute_sensitivities(kept, levels=5)  # dropped records never matter
    assert var == var_sensitivity(2, 4, F(1)) and mu == mean_sensitivity(2, 4, F(1))
    assert sum(counts) == 6


# ---- §7 item 3: brute-force clipping bias ---------------------------------------------
def _brute_bias(counts: list[int], kept: list[int], levels: int = 5) -> tuple[F, F]:
    n, s = sum(counts), sum(kept)
    u = levels - 1
    x = np.array(list(itertools.product(range(levels), repeat=n)), dtype=np.int64)
    keep_cols = [sum(counts[:i]) + j for i in range(len(counts)) for j in range(kept[i])]
    xc = x[:, keep_cols]
    sf, qf = _sums(x)
    sc, qc = _sums(xc)
    tf = n * qf - sf * sf  # N²·Var
    tc = s * qc - sc * sc  # S²·Var_clip
    dvar = np.abs(tf * s * s - tc * n * n)  # N²S²·|Var − Var_clip|
    dmu = np.abs(sf * s - sc * n)  # N·S·|μ − μ_clip|
    return F(int(dmu.max()), n * s * u), F(int(dvar.max()), n * n * s * s * u * u)


@pytest.mark.parametrize(("counts", "kept"), [
    ([2, 1, 1], [1, 1, 1]),  # 2S > N
    ([3, 1], [1, 1]),  # 2S = N, N even
    ([3, 2], [1, 1]),  # 2S < N, N odd
    ([2, 2, 1], [2, 1, 1]),  # 2S > N, N odd
    ([3, 1, 1], [0, 1, 1]),  # heavy user suppressed
    ([1, 1, 1, 1, 1], [1, 1, 1, 1, 0]),
    ([4, 2], [1, 2]),  # 2S = N
    ([4, 1, 1], [1, 1, 0]),  # 2S < N, N even
    ([2, 2, 2], [2, 2, 2])])  # nothing dropped
def test_brute_force_bias_equals_thm_iv(counts: list[int], kept: list[int]) -> None:
    mu, var = _brute_bias(counts, kept)
    n, s = sum(counts), sum(kept)
    assert mu == mean_bias(s, n, F(1))
    assert var == var_bias(s, n, F(1))


def test_extremal_datasets_realise_bias_and_random_never_exceed() -> None:
    """C3: the proof's extremal datasets attain E_μ and E_Var; random data never exceed."""
    gen = RandomSource.seeded(12).numpy_generator()
    u = 65.0
    for n, s in [(9, 4), (9, 8), (10, 5), (100, 1), (7, 6), (12, 3)]:
        kept = np.zeros(n, bool)
        kept[:s] = True
        x = np.where(kept, 0.0, u)  # kept at 0, dropped at U: mean bias
        assert abs(x.mean() - x[kept].mean()) == pytest.approx(float(mean_bias(s, n, u)))
        if 2 * s > n:
            y = x  # kept common value, dropped at the far end
        else:  # kept at 0, all samples balanced between 0 and U
            y = np.zeros(n)
            y[s:][: n // 2] = u
        assert abs(y.var() - y[kept].var()) == pytest.approx(float(var_bias(s, n, u)),
                                                             rel=1e-12)
        for _ in range(300):
            z = gen.choice([0.0, u, gen.random() * u], n)
            assert abs(z.mean() - z[kept].mean()) <= mean_bias(s, n, u) + 1e-9
            assert abs(z.var() - z[kept].var()) <= var_bias(s, n, u) + 1e-9


# ---- error metric: scalar and vectorized forms agree exactly -------------------------
def test_error_scalar_and_arrays_identical() -> None:
    gen = RandomSource.seeded(13).numpy_generator()
    params = SubsetStatsParams(epsilon=0.7, upper=65.0, mean_share=0.3, weights=(1.0, 0.02))
    consts = params.error_constants()
    n = gen.integers(1, 5000, 500)
    s = np.minimum(n, gen.integers(0, 5000, 500))
    gs = np.maximum(1, np.minimum(s, gen.integers(1, 800, 500)))
    arr = grid_error_arrays(s, n, gs, 65.0, consts)
    for i in range(500):
        assert arr[i] == _error_scalar(int(s[i]), int(n[i]), int(gs[i]), 65.0, consts)


def test_release_error_model_is_rounded_up_noise() -> None:
    """B13: the release model's E|noise| is the discrete scale's, ≤ Δ(1+2^-k)/ε_r."""
    for eps in (0.05, 0.5, 3.0):
        e = expected_abs_noise(2.0, eps, grid_bits=16)
        assert 2.0 / eps * (1 - 1e-9) < e <= 2.0 * (1 + 2**-16) / (eps - 2**-24)
    paper = grid_error([5, 2, 1, 1], [5, 2, 1, 1], upper=10, epsilon=1.0)
    release = grid_error([5, 2, 1, 1], [5, 2, 1, 1], upper=10, epsilon=1.0,
                         error_model="release")
    assert paper < release < paper * (1 + 2e-5)


# ---- parameters and bad inputs --------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": float("nan")}, "epsilon"), ({"epsilon": float("inf")}, "epsilon"),
    ({"epsilon": "1"}, "epsilon"), ({"epsilon": 1e-9}, "epsilon"),
    ({"upper": 0.0}, "upper"), ({"upper": float("nan")}, "upper"),
    ({"lower": 5.0, "upper": 5.0}, "upper"),
    ({"statistic": "median"}, "statistic"), ({"mean_share": 0.0}, "mean_share"),
    ({"mean_share": 1.0}, "mean_share"), ({"weights": (1.0,)}, "weights"),
    ({"weights": (0.0, 0.0)}, "weights"), ({"weights": (-1.0, 1.0)}, "weights"),
    ({"grid_bits": 31}, "grid_bits"), ({"grid_bits": 2.0}, "grid_bits"),
    ({"error_model": "gauss"}, "error_model")])
def test_params_validation(kwargs: dict, name: str) -> None:
    base = {"epsilon": 1.0, "upper": 1.0}
    base.update(kwargs)
    with pytest.raises(ValueError, match=name):
        SubsetStatsParams(**base)


def _data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gen = RandomSource.seeded(seed).numpy_generator()
    return gen.integers(0, 30, n), gen.uniform(0, 1, n), gen.integers(0, 4, n)


@pytest.mark.parametrize(("change", "name"), [
    ({"values": "nan"}, "values"), ({"values": "short"}, "values"),
    ({"values": "text"}, "values"), ({"subsets": "short"}, "subsets"),
    ({"user_ids": "2d"}, "user_ids"), ({"epsilon": -0.5}, "epsilon"),
    ({"epsilon": float("nan")}, "epsilon"), ({"upper": -1.0}, "upper"),
    ({"public_occupancy": False}, "public_occupancy"), ({"statistic": "sum"}, "statistic"),
    ({"user_ids": "empty"}, "user_ids")])
def test_release_bad_inputs(change: dict, name: str) -> None:
    u, v, g = _data()
    kw: dict = {"epsilon": 1.0, "upper": 1.0, "public_occupancy": True,
                "rng": RandomSource.seeded(1)}
    for key, how in change.items():
        if key == "values":
            v = {"nan": np.r_[v[:-1], np.nan], "short": v[:-1],
                 "text": np.array(["a"] * v.size)}[how]
        elif key == "subsets":
            g = g[:-1]
        elif key == "user_ids":
            if how == "2d":
                u = u.reshape(-1, 1)
            else:
                u, v, g = u[:0], v[:0], g[:0]
        else:
            kw[key] = how
    with pytest.raises(ValueError, match=name):
        subset_stats(u, v, g, **kw)


def test_release_rejects_non_random_source() -> None:
    u, v, g = _data()
    with pytest.raises(TypeError, match="rng"):
        subset_stats(u, v, g, epsilon=1.0, upper=1.0, public_occupancy=True,
                     rng=np.random.default_rng(0))  # type: ignore[arg-type]


def test_release_rejects_mismatched_plan() -> None:
    u, v, g = _data()
    occ = occupancy_from_rows(u, g)
    plan = plan_from_occupancy(occ, SubsetStatsParams(epsilon=1.0, upper=1.0))
    with pytest.raises(ValueError, match="plan"):  # different ε
        subset_stats(u, v, g, epsilon=2.0, upper=1.0, plan=plan, public_occupancy=True,
                     rng=RandomSource.seeded(0))
    with pytest.raises(ValueError, match="plan"):  # different occupancy
        subset_stats(u[1:], v[1:], g[1:], epsilon=1.0, upper=1.0, plan=plan,
                     public_occupancy=True, rng=RandomSource.seeded(0))
    with pytest.raises(ValueError, match="plan"):
        subset_stats(u, v, g, epsilon=1.0, upper=1.0, plan="keep all",  # type: ignore
                     public_occupancy=True, rng=RandomSource.seeded(0))


# ---- §7 item 7: noise scales from public inputs only --------------------------------
def test_noise_scales_recomputed_from_public_inputs() -> None:
    names = set(inspect.signature(subset_stats).parameters)
    assert not names & {"scale", "sensitivity", "noise_scale", "sigma", "grid_step"}
    u, v, g = _data()
    occ = occupancy_from_rows(u, g)
    params = SubsetStatsParams(epsilon=1.0, upper=1.0)
    plan = plan_from_occupancy(occ, params)
    rel = subset_stats(u, v, g, epsilon=1.0, upper=1.0, plan=plan, public_occupancy=True,
                       rng=RandomSource.seeded(2))
    d = rel.details
    for i in range(occ.n_subsets):
        s, gs = int(d["kept_records"][i]), int(d["max_kept"][i])
        assert d["mean_sensitivity"][i] == mean_sensitivity(gs, s, 1.0)
        assert d["variance_sensitivity"][i] == var_sensitivity(gs, s, 1.0)
        assert d["mean_grid_step"][i] == d["mean_sensitivity"][i] / 2**16
    np.testing.assert_allclose(d["mean_half_width_95"], [noise_interval(
        float(x), 0.5, delta=0.05, coordinates=2) for x in d["mean_sensitivity"]], rtol=1e-15)
    assert d["noise_scale_grid_units"]["mean"] == {16: "{}/{}".format(
        *(lambda s: (s.num, s.den))(laplace_scale(2**16 + 1, 0.5)))}
    # the same values but a tampered plan (kept > counts) is refused, not trusted
    bad = plan_from_occupancy(occ, params)
    object.__setattr__(bad, "kept", bad.kept + 1)
    with pytest.raises(ValueError, match=r"plan\.kept"):
        subset_stats(u, v, g, epsilon=1.0, upper=1.0, plan=bad, public_occupancy=True,
                     rng=RandomSource.seeded(2))


def test_float_safety_bits_shrink_for_huge_subsets() -> None:
    bits = _effective_bits(16, np.array([1, 1000, 2**29, 2**30, 2**35]))
    assert bits.tolist() == [16, 16, 16, 15, 10]
    with pytest.raises(ValueError, match="too many records"):
        _effective_bits(16, np.array([2**42]))


# ---- release behaviour ----------------------------------------------------------------
def test_release_is_accurate_with_large_epsilon_and_keeps_first_records() -> None:
    users = np.array([0, 0, 0, 1, 2, 1])
    vals = np.array([1.0, 9.0, 9.0, 3.0, 5.0, 7.0])
    subs = np.array(["a", "a", "a", "a", "a", "b"])
    rel = subset_stats(users, vals, subs, epsilon=1e4, upper=10.0, public_occupancy=True,
                       rng=RandomSource.seeded(3))
    mean_a, var_a = rel.estimate["a"]
    assert mean_a == pytest.approx(np.mean([1, 9, 9, 3, 5]), abs=0.05)
    assert var_a == pytest.approx(np.var([1, 9, 9, 3, 5]), abs=0.5)
    # a plan keeping 1 record of user 0 in "a" keeps its FIRST record (value 1.0)
    occ = occupancy_from_rows(users, subs)
    params = SubsetStatsParams(epsilon=1e4, upper=10.0)
    plan = plan_from_occupancy(occ, params, pseudo_user_cap=False)
    kept = occ.counts.copy()
    kept[(occ.pair_user == 0) & (occ.pair_grid == 0)] = 1
    object.__setattr__(plan, "kept", kept)
    rel = subset_stats(users, vals, subs, epsilon=1e4, upper=10.0, plan=plan,
                       public_occupancy=True, rng=RandomSource.seeded(3))
    assert rel.estimate["a"][0] == pytest.approx(np.mean([1, 3, 5]), abs=0.05)
    assert rel.details["kept_records"].tolist() == [3, 1]


def test_release_clamps_and_shifts(caplog: pytest.LogCaptureFixture) -> None:
    users = np.arange(6)
    vals = np.array([-5.0, 25.0, 12.0, 14.0, 16.0, 18.0])
    subs = np.zeros(6, int)
    with caplog.at_level("INFO", logger="uldp.collector.central.subset_stats"):
        rel = subset_stats(users, vals, subs, epsilon=1e4, lower=10.0, upper=20.0,
                           public_occupancy=True, rng=RandomSource.seeded(4))
    clamped = np.clip(vals, 10, 20)
    assert rel.estimate[0][0] == pytest.approx(clamped.mean(), abs=0.01)
    assert rel.estimate[0][1] == pytest.approx(clamped.var(), abs=0.05)
    assert "clamped 2 of 6 values" in caplog.text  # logged for operators ...
    assert "clamped_values" not in rel.details  # ... but never released (data-dependent)
    only_var = subset_stats(users, vals, subs, epsilon=1e4, lower=10.0, upper=20.0,
                            statistic="variance", public_occupancy=True,
                            rng=RandomSource.seeded(4))
    assert only_var.estimate[0] == pytest.approx(clamped.var(), abs=0.05)
    assert only_var.privacy.split == {"mean": 0.0, "variance": 1.0}


def test_release_record_and_determinism() -> None:
    u, v, g = _data(seed=5)
    a = subset_stats(u, v, g, epsilon=0.5, upper=1.0, public_occupancy=True,
                     rng=RandomSource.seeded(9))
    b = subset_stats(u, v, g, epsilon=0.5, upper=1.0, public_occupancy=True,
                     rng=RandomSource.seeded(9))
    c = subset_stats(u, v, g, epsilon=0.5, upper=1.0, public_occupancy=True,
                     rng=RandomSource.seeded(10))
    assert a.estimate == b.estimate and a.estimate != c.estimate
    occ = occupancy_from_rows(u, g)
    k = int(occ.subsets_per_user().max())
    assert a.privacy.mode == "pure" and a.privacy.epsilon == pytest.approx(0.5 * k)
    assert a.privacy.split == {"mean": 0.5, "variance": 0.5}
    assert a.privacy.public["K"] == k and a.details["K"] == k
    np.testing.assert_allclose(a.details["user_loss"], 0.5 * occ.subsets_per_user())


def test_single_kept_record_variance_released_exactly() -> None:
    rel = subset_stats(np.array([0, 1, 1]), np.array([0.3, 0.5, 0.7]),
                       np.array([0, 1, 1]), epsilon=1.0, upper=1.0, public_occupancy=True,
                       rng=RandomSource.seeded(6))
    assert rel.estimate[0][1] == 0.0  # Var of one sample is the constant 0 (Δ = 0)
    assert rel.details["variance_sensitivity"][0] == 0.0


def test_noise_interval_exact_tail() -> None:
    h = noise_interval(1.0, 0.5, delta=0.05, coordinates=2, grid_bits=2)
    scale = laplace_scale(5, 0.5)
    t = scale.num / scale.den
    k = round(h * 4)
    q = math.exp(-1 / t)
    assert 2 * q ** (k + 1) / (1 + q) <= 0.025 < 2 * q**k / (1 + q)
    with pytest.raises(ValueError, match="delta"):
        noise_interval(1.0, 0.5, delta=1.5)


# ---- distribution of the noise and empirical error -------------------------------------
def _many_identical_grids(n_grids: int, counts: list[int], values: list[float],
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n_grids copies of one subset; each copy has its own users with ``counts`` records."""
    per = sum(counts)
    users = np.repeat(np.arange(len(counts)), counts)
    uid = (np.arange(n_grids)[:, None] * len(counts) + users[None, :]).ravel()
    sub = np.repeat(np.arange(n_grids), per)
    vals = np.tile(np.asarray(values, float), n_grids)
    return uid, vals, sub


def test_noise_is_discrete_laplace_chi_square() -> None:
    """Exact-pmf chi-square on 4000 draws; threshold p < 1e-3 (false-alarm rate 0.1%)."""
    uid, vals, sub = _many_identical_grids(2000, [1, 1, 1, 1], [0.1, 0.4, 0.4, 0.9])
    rel = subset_stats(uid, vals, sub, epsilon=1.0, upper=1.0, grid_bits=2,
                       public_occupancy=True, rng=RandomSource.seeded(21))
    d = rel.details
    z_all = []
    for stat, truth in (("mean", np.mean([0.1, 0.4, 0.4, 0.9])),
                        ("variance", np.var([0.1, 0.4, 0.4, 0.9]))):
        step = d[f"{stat}_grid_step"]
        released = np.asarray(d[f"{stat}_unclamped"])
        clamped = np.array([rel.estimate[i][0 if stat == "mean" else 1] for i in range(2000)])
        np.testing.assert_array_equal(clamped, np.clip(released, 0.0, 1.0 if stat == "mean"
                                                       else 0.25))
        snapped = np.floor(truth / step + 0.5)
        z = released / step - snapped
        assert np.abs(z - np.round(z)).max() < 1e-6  # noise is an integer number of steps
        z_all.append(np.round(z).astype(int))
    z = np.concatenate(z_all)
    scale = laplace_scale(2**2 + 1, 0.5)
    t = scale.num / scale.den  # 10
    edges = np.arange(-25, 26)
    obs = np.array([(z <= -25).sum()] + [(z == k).sum() for k in edges[1:-1]]
                   + [(z >= 25).sum()])

    def expected(tt: float) -> np.ndarray:
        pm = discrete_laplace_pmf(edges[1:-1], tt)
        tail = (1 - pm.sum()) / 2
        return z.size * np.r_[tail, pm, tail]

    p = stats.chisquare(obs, expected(t)).pvalue
    assert p > 1e-3
    # the test has power: a 25% wrong scale is rejected
    assert stats.chisquare(obs, expected(1.25 * t)).pvalue < 1e-3


def test_empirical_error_matches_formulas() -> None:
    """Released error vs §2.3/§2.4 on extremal data, fixed seed, tolerances of 5 SE.

    One subset: user 0 has 6 records, users 1-4 one each (N = 10); Clip-User/cap keeps
    Γ = (1,1,1,1,1) here. Kept records are 0 and dropped ones U, so the clipping bias is
    exactly −E_μ for the mean; the released mean error is bias + noise, with
    E|b + L| = |b| + t·e^{−|b|/t} for Laplace(t).
    """
    counts = [6, 1, 1, 1, 1]
    values = [0.0] + [1.0] * 5 + [0.0] * 4  # user 0: first record kept (0), 5 dropped (U)
    n_grids = 1500
    uid, vals, sub = _many_identical_grids(n_grids, counts, values)
    occ = occupancy_from_rows(uid, sub)
    params = SubsetStatsParams(epsilon=0.5, upper=1.0)
    plan = plan_from_occupancy(occ, params)
    assert set(plan.caps.tolist()) == {1} and plan.k_final == 1
    rel = subset_stats(uid, vals, sub, epsilon=0.5, upper=1.0, plan=plan,
                       public_occupancy=True, rng=RandomSource.seeded(22))
    mu = np.asarray(rel.details["mean_unclamped"])  # the formulas describe the raw noise
    var = np.asarray(rel.details["variance_unclamped"])
    true_mu, true_var = np.mean(values), np.var(values)
    b_mu = float(mean_bias(5, 10, 1.0))
    assert b_mu == pytest.approx(true_mu - 0.0)  # kept records are all 0
    t_mu = expected_abs_noise(float(mean_sensitivity(1, 5, 1.0)), 0.25)
    err = mu - true_mu
    se = err.std() / math.sqrt(n_grids)
    assert err.mean() == pytest.approx(-b_mu, abs=5 * se)
    abs_err = np.abs(err)
    want = b_mu + t_mu * math.exp(-b_mu / t_mu)
    assert abs_err.mean() == pytest.approx(want, abs=5 * abs_err.std() / math.sqrt(n_grids)
                                           + 0.01 * want)
    # variance: kept Var = 0, so the error is −Var + noise; its mean |.| is bounded by E_g
    t_var = expected_abs_noise(float(var_sensitivity(1, 5, 1.0)), 0.25)
    verr = var - true_var
    assert verr.mean() == pytest.approx(-true_var, abs=5 * verr.std() / math.sqrt(n_grids))
    assert true_var <= float(var_bias(5, 10, 1.0))
    total = (abs_err + np.abs(verr)).mean()
    assert total <= float(plan.error_final.max())  # E_g bounds the expected error
    # and the unclipped baseline's error is pure noise: E|err| = E|noise| of the formula
    base = subset_stats(uid, vals, sub, epsilon=0.5, upper=1.0, public_occupancy=True,
                        rng=RandomSource.seeded(23))
    berr = np.abs(np.asarray(base.details["mean_unclamped"]) - true_mu)
    want_b = expected_abs_noise(float(mean_sensitivity(6, 10, 1.0)), 0.25)
    assert berr.mean() == pytest.approx(want_b, abs=5 * berr.std() / math.sqrt(n_grids))
    assert t_var > 0


def test_releases_are_clamped_into_their_public_ranges() -> None:
    """Issue 11: 31 % of raw releases fell outside the range at eps = 1 with users in many
    subsets; every released mean is in [lower, upper] and every variance in [0, U²/4]."""
    g = np.random.default_rng(8)
    rows = [(u, g.uniform(2.0, 3.0), f"s{k}") for u in range(6) for k in range(18)]
    uid, vals, sub = (np.array(c) for c in zip(*rows, strict=True))
    rel = subset_stats(uid, vals.astype(float), sub, epsilon=1.0, lower=2.0, upper=3.0,
                       public_occupancy=True, rng=RandomSource.seeded(3))
    raw_mu = np.asarray(rel.details["mean_unclamped"])
    raw_var = np.asarray(rel.details["variance_unclamped"])
    assert ((raw_mu < 2) | (raw_mu > 3)).any() and (raw_var < 0).any()  # the clamp matters
    for mu, var in rel.estimate.values():
        assert 2.0 <= mu <= 3.0 and 0.0 <= var <= 0.25


def test_occupancy_dense_roundtrip() -> None:
    a = np.array([[0, 2, 1], [3, 0, 0], [0, 0, 0], [1, 1, 1]])
    occ = Occupancy.from_dense(a, users=np.array([10, 11, 12, 13]))
    assert occ.users.tolist() == [10, 11, 13]
    np.testing.assert_array_equal(occ.to_dense(), a[[0, 1, 3]])
    assert occ.totals().tolist() == [4, 3, 2]
    with pytest.raises(ValueError, match="counts"):
        Occupancy.from_dense(np.array([[-1]]))
