"""Amplification by shuffling in the variation-ratio framework (Wang et al., PVLDB 2024),
``uldp.collector.accounting.variation_ratio`` and ``.parameters``; docs/privacy.md §7.1.

* δ(ε) is the exact hockey-stick divergence of the three-count reduction, summed here by
  brute force over every count in a wide window (an independent code path);
* it bounds the exact divergence of *real* shuffled GRR histograms with adversarial other
  users, where the authors' two-count model does not (the counterexample that made the
  module keep the third count);
* each mechanism's central ε is within 1 % of the independent computation (the smallest
  ε at which the brute-force δ is at most the target lies in [0.99 ε, ε]);
* the issue's figures at n = 10⁵, ε0 = 1, δ = 1e-8, next to the authors' two-count model
  (an independent computation of a model the bound can only exceed, by < 1 % there);
* β of every mechanism is the largest total variation of its exact design, p and q its
  largest likelihood ratios (from the mechanisms' own ``probability``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from scipy import special, stats

from uldp.client.mechanisms import ORACLES, SCALARS
from uldp.client.mechanisms.exact import ONE, units_of
from uldp.client.mechanisms.grr import grr_design
from uldp.client.mechanisms.olh import hash_of, olh_design
from uldp.client.noise import discrete_laplace_pmf, laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.client.taskspec import TaskSpec
from uldp.collector.accounting.amplification import central_epsilon as fmt_epsilon
from uldp.collector.accounting.parameters import mechanism_parameters, task_parameters
from uldp.collector.accounting.variation_ratio import (
    VariationRatio,
    central_epsilon,
    delta_bound,
    generic,
)

E = math.e


# ---- an independent brute force of the reduction ------------------------------------------
def _mult_logpmf(n: int, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                 probs: tuple[float, float, float]) -> np.ndarray:
    d = n - a - b - c
    ok = d >= 0
    d = np.where(ok, d, 0)
    lp = (special.gammaln(n + 1) - special.gammaln(a + 1) - special.gammaln(b + 1)
          - special.gammaln(c + 1) - special.gammaln(d + 1) + a * np.log(probs[0])
          + b * np.log(probs[1]) + special.xlogy(c, probs[2])
          + special.xlog1py(d, -sum(probs)))
    return np.where(ok, lp, -np.inf)


def brute_delta(n: int, vr: VariationRatio, eps: float, span: float = 10.0) -> float:
    """Σ max(0, P0 − e^ε P1) over every (a, b, c) within ``span`` sd: the victim's label
    (pα, α, γ) / (α, pα, γ) plus n − 1 others' Mult(r, r, s), convolved explicitly."""
    al, g, r, s = vr.alpha, vr.gamma, vr.r, vr.s
    m = n - 1

    def rng(p: float) -> np.ndarray:
        sd = math.sqrt(m * p * (1 - p))
        return np.arange(max(0, int(m * p - span * sd) - 1), min(m, int(m * p + span * sd) + 2) + 1)
    A, B = rng(r), rng(r)
    C = rng(s) if s > 0 else np.array([0])
    a, b, c = np.meshgrid(A, B, C, indexing="ij")
    M = np.exp(_mult_logpmf(m, a, b, c, (r, r, s)))
    # the victim adds one to a, b or c: shift the others' counts
    P0 = np.zeros((A.size + 1, B.size + 1, C.size + 1))
    P1 = np.zeros_like(P0)
    for (da, db, dc), w0, w1 in (((1, 0, 0), vr.p * al, al), ((0, 1, 0), al, vr.p * al),
                                 ((0, 0, 1), g, g)):
        P0[da:da + A.size, db:db + B.size, dc:dc + C.size] += w0 * M
        P1[da:da + A.size, db:db + B.size, dc:dc + C.size] += w1 * M
    return float(np.maximum(P0 - math.exp(eps) * P1, 0).sum())


CASES = [generic(1.0), generic(2.5), mechanism_parameters("grr", 1.0, 4),
         mechanism_parameters("oue", 1.0, 16), mechanism_parameters("pm", 2.0),
         mechanism_parameters("laplace", 0.5), VariationRatio("x", 1.0, E, 0.05, 4 * E)]


@pytest.mark.parametrize("vr", CASES, ids=lambda v: f"{v.mechanism}-{v.epsilon0}")
@pytest.mark.parametrize("n,eps", [(2, 0.3), (40, 0.2), (150, 0.1)])
def test_delta_is_the_exact_divergence_of_the_reduction(vr, n, eps):
    assert delta_bound(n, vr, eps) == pytest.approx(brute_delta(n, vr, eps), rel=1e-7, abs=1e-13)
    assert delta_bound(n, vr, math.log(vr.p)) == 0.0


# ---- the bound covers real shuffled GRR; the two-count model does not ---------------------
def _shuffled_grr(values: list[int], k: int, P: float, Q: float) -> np.ndarray:
    """The exact law of the histogram of GRR reports of ``values`` (k = 4)."""
    n = len(values)
    D = np.zeros((n + 1,) * k)
    D[(0,) * k] = 1.0
    for v in values:
        probs = np.full(k, Q)
        probs[v] = P
        N = np.zeros_like(D)
        for j in range(k):
            src = [slice(None)] * k
            dst = [slice(None)] * k
            src[j], dst[j] = slice(0, n), slice(1, n + 1)
            N[tuple(dst)] += probs[j] * D[tuple(src)]
        D = N
    return D


def _two_count_model(n: int, vr: VariationRatio, eps: float) -> float:
    """The authors' numerical model, summed over every (A, B): the others' clones
    Mult(n − 1; r, r), the victim adds to A (pα), to B (α) or to neither (γ: its common
    part joins the others' rest)."""
    al, g, r = vr.alpha, vr.gamma, vr.r
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    M = np.exp(_mult_logpmf(n - 1, a, b, np.zeros_like(a), (r, r, 0.0)))
    P0, P1 = np.zeros((n + 1, n + 1)), np.zeros((n + 1, n + 1))
    for (da, db), w0, w1 in (((1, 0), vr.p * al, al), ((0, 1), al, vr.p * al), ((0, 0), g, g)):
        P0[da:da + n, db:db + n] += w0 * M
        P1[da:da + n, db:db + n] += w1 * M
    return float(np.maximum(P0 - math.exp(eps) * P1, 0).sum())


def test_the_bound_covers_shuffled_grr_where_the_two_count_model_fails():
    k, n, eps0 = 4, 30, 1.0
    d = grr_design(k, units_of(eps0))
    P, Q = d.P / ONE, d.Q / ONE
    vr = mechanism_parameters("grr", eps0, k)
    worst = 0.0
    for eps in (0.5,):
        for others in ([3] * 29, [0] * 29, [0] * 10 + [1] * 10 + [3] * 9):
            D0, D1 = _shuffled_grr([0, *others], k, P, Q), _shuffled_grr([1, *others], k, P, Q)
            true = float(np.maximum(D0 - math.exp(eps) * D1, 0).sum())
            assert true <= delta_bound(n, vr, eps) * (1 + 1e-9)
            worst = max(worst, true / _two_count_model(n, vr, eps))
    assert worst > 1.01  # the two-count model is below the truth (others all holding 3)


# ---- central ε within 1 % of the independent computation ---------------------------------
@pytest.mark.parametrize("mech,k", [("any", None), ("grr", 8), ("oue", 8), ("ss", 8),
                                    ("olh", None), ("duchi", None), ("pm", None),
                                    ("hm", None), ("laplace", None), ("laplace", 8)])
def test_central_epsilon_matches_the_brute_force(mech, k):
    n, delta = 300, 1e-4
    vr = mechanism_parameters(mech, 1.5, k)
    eps = central_epsilon(n, vr, delta)
    assert 0 < eps < 1.5
    assert brute_delta(n, vr, eps) <= delta * (1 + 1e-7)
    assert brute_delta(n, vr, 0.99 * eps) > delta


def _fmt(n: int, e0: float, delta: float) -> float:
    return fmt_epsilon(n, e0, delta)


def test_the_figures_of_the_issue():
    """n = 10⁵, ε0 = 1, δ = 1e-8: any ≤ 0.0170 (FMT21: 0.0206-0.0211), OUE ≈ 0.0121 or
    less, GRR k = 32 ≈ 0.0053, k = 256 ≤ 0.0019; each within 1 % above the authors'
    two-count model (computed here independently, 1-d), never below it."""
    n, delta = 10**5, 1e-8
    got = {m: central_epsilon(n, mechanism_parameters(m, 1.0, k), delta)
           for m, k in (("any", None), ("oue", 256), ("grr", 32))}
    got["grr256"] = central_epsilon(n, mechanism_parameters("grr", 1.0, 256), delta)
    assert got["any"] <= 0.0170 < _fmt(n, 1.0, delta)
    assert got["oue"] <= 0.0121
    assert got["grr"] == pytest.approx(0.0053, abs=5e-5)
    assert got["grr256"] <= 0.0019
    for m, k, key in (("any", None, "any"), ("grr", 256, "grr256")):
        vr = mechanism_parameters(m, 1.0, k)
        lo = _two_count_central(n, vr, delta)
        assert lo <= got[key] <= lo * 1.01


def _two_count_central(n: int, vr: VariationRatio, delta: float) -> float:
    """The authors' model's ε by bisection on a 1-d sum over T (its own code path)."""
    al, g, r = vr.alpha, vr.gamma, vr.r
    T = np.arange(max(0, int(2 * r * n - 12 * math.sqrt(2 * r * n))), min(n, int(
        2 * r * n + 12 * math.sqrt(2 * r * n))) + 1)
    wT = stats.binom.pmf(T, n, 2 * r)  # the counts among all n reports (module docstring)

    def d(eps: float) -> float:
        e = math.exp(eps)
        # likelihood ratio of (a, b) decreases in b given T = a + b: positive part is a tail
        w0, w1 = vr.p * al - e * al, al - e * vr.p * al
        wr = g * (1 - e)
        # δ = E[(w0 A/r + w1 B/r + wr (n − T)/(1 − 2r))+]/n, (A, B) ~ Mult(n; r, r)
        a_lo = np.ceil((-w1 * T / r - wr * (n - T) / (1 - 2 * r)) / ((w0 - w1) / r))
        slope = (w0 - w1) / r
        tail1 = stats.binom.sf(a_lo - 2, T - 1, 0.5)
        tail0 = stats.binom.sf(a_lo - 1, T, 0.5)
        val = slope * T / 2 * tail1 + (w1 * T / r + wr * (n - T) / (1 - 2 * r)) * tail0
        return float(np.dot(wT, np.maximum(val, 0))) / n
    lo, hi = 0.0, math.log(vr.p)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    return hi


# ---- monotonicity ----------------------------------------------------------------------
def test_delta_grows_with_beta_and_shrinks_with_n():
    betas = np.linspace(0.02, (E - 1) / (E + 1), 6)
    ds = [delta_bound(200, VariationRatio("x", 1.0, E, float(b), E), 0.2) for b in betas]
    assert all(x <= y * (1 + 1e-12) for x, y in itertools.pairwise(ds))
    vr = mechanism_parameters("oue", 1.0, 8)
    assert delta_bound(400, vr, 0.2) <= delta_bound(200, vr, 0.2)


# ---- the parameters of each mechanism from its exact probabilities ------------------------
def _tv_and_ratio(pa: list[Fraction], pb: list[Fraction]) -> tuple[float, float]:
    """Exact (Fractions) total variation and largest ratio, as floats rounded to nearest."""
    tv = sum((max(x - y, Fraction(0)) for x, y in zip(pa, pb, strict=True)), Fraction(0))
    ratio = max(Fraction(x) / Fraction(y) for x, y in zip(pa, pb, strict=True) if y)
    return float(tv), float(ratio)


@pytest.mark.parametrize("name,k", [("grr", 5), ("oue", 4), ("ss", 6), ("laplace", 3)])
def test_oracle_parameters_are_the_exact_design(name, k):
    eps = 1.3
    vr = mechanism_parameters(name, eps, k)
    mech = ORACLES[name]
    if name == "laplace":
        t = laplace_scale(2, eps).value
        z = np.arange(-60 * int(t) - 5, 60 * int(t) + 6)
        f1, f0 = discrete_laplace_pmf(z - 1, t), discrete_laplace_pmf(z, t)
        tv = float(np.maximum(np.outer(f1, f0) - np.outer(f0, f1), 0).sum())
        assert tv == pytest.approx(vr.beta, rel=1e-9) and tv <= vr.beta * (1 + 1e-12)
        return
    if name == "grr":
        outs = [(y,) for y in range(k)]
    elif name == "oue":
        outs = list(itertools.product((0, 1), repeat=k))
    else:
        w = mech.length(k, eps)
        outs = list(itertools.combinations(range(k), w))
    for x0, x1 in itertools.permutations(range(k), 2):
        pa = [mech.probability(list(y), x0, k, eps) for y in outs]
        pb = [mech.probability(list(y), x1, k, eps) for y in outs]
        tv, ratio = _tv_and_ratio(pa, pb)
        assert tv <= vr.beta and ratio <= vr.p * (1 + 1e-12)
    assert tv == pytest.approx(vr.beta, rel=1e-12)  # every pair is alike: the bound is met


def _float_tv(mech, g0: int, g1: int, eps: float) -> tuple[float, float]:
    zs = range(mech.limit(eps) + 1)
    pa = np.array([float(mech.probability(z, g0, eps)) for z in zs])
    pb = np.array([float(mech.probability(z, g1, eps)) for z in zs])
    return float(np.maximum(pa - pb, 0).sum()), float((pa / pb).max())


@pytest.mark.parametrize("name,pairs", [
    ("duchi", ((0, GRID_STEPS), (0, 1000), (17, 40_000))),
    ("pm", ((0, GRID_STEPS), (0, 1000))),
    ("hm", ((GRID_STEPS, 0),))])
def test_scalar_parameters_are_the_exact_design(name, pairs):
    eps = 1.3
    vr = mechanism_parameters(name, eps)
    tvs = []
    for g0, g1 in pairs:
        tv, ratio = _float_tv(SCALARS[name], g0, g1, eps)
        assert tv <= vr.beta * (1 + 1e-12) and ratio <= vr.p * (1 + 1e-12)
        tvs.append(tv)
    assert max(tvs) == pytest.approx(vr.beta, rel=1e-12)  # met by the extreme inputs


def test_laplace_value_parameters():
    eps = 1.3
    vr = mechanism_parameters("laplace", eps)
    t = laplace_scale(GRID_STEPS, eps).value
    z = np.arange(-40 * int(t), 40 * int(t))
    tv = float(np.maximum(discrete_laplace_pmf(z, t) - discrete_laplace_pmf(z - GRID_STEPS, t),
                          0).sum())
    assert tv == pytest.approx(vr.beta, rel=1e-9) and tv <= vr.beta * (1 + 1e-9)


def test_olh_parameters_are_grr_over_its_range():
    vr = mechanism_parameters("olh", 2.0)
    mech = ORACLES["olh"]
    # given the seed the report is GRR over g; inputs that do not collide differ by β
    g, k = olh_design(units_of(2.0)).k, 40
    for seed in (1, 7, 99):
        outs = [(seed, y) for y in range(g)]
        x0, x1 = next((a, b) for a in range(k) for b in range(a + 1, k)
                      if hash_of(seed, a, g) != hash_of(seed, b, g))
        pa = [mech.probability(list(o), x0, k, 2.0) * (1 << 32) for o in outs]
        pb = [mech.probability(list(o), x1, k, 2.0) * (1 << 32) for o in outs]
        tv, ratio = _tv_and_ratio(pa, pb)
        assert tv == pytest.approx(vr.beta, rel=1e-12) and ratio <= vr.p * (1 + 1e-12)


def test_task_parameters():
    vals = TaskSpec(query_id="q", kind="mean", method="ssl", stage=0, epsilon=1.0, eps_c=1.0,
                    components=(0,), bound=1.0, intervals=((-1.0, 1.0),))
    assert task_parameters(vals) == mechanism_parameters("laplace", 1.0)
    assert task_parameters(replace(vals, mechanism="pm")) == mechanism_parameters("pm", 1.0)
    bins = TaskSpec(query_id="q", kind="mean", method="two-stage", stage=1, epsilon=1.0,
                    eps_c=1.0, components=(0,), bound=1.0, bins=((1.0, 0.5, 4),))
    vr = task_parameters(replace(bins, mechanism="grr"))
    assert (vr.mechanism, vr.detail, vr.beta) == ("grr", "k=4",
                                                  mechanism_parameters("grr", 1.0, 4).beta)
    dist = TaskSpec(query_id="q", kind="distribution", method="oracle", stage=0, epsilon=2.0,
                    eps_c=1.0, components=tuple(range(5)), dim=5, mechanism="oue", records=2)
    two = task_parameters(dist)
    one = mechanism_parameters("oue", 1.0, 5).beta
    assert two.epsilon0 == 2.0 and two.beta == pytest.approx(1 - (1 - one) ** 2)
    lin = TaskSpec(query_id="q", kind="mean-linf", method="ssl", stage=0, epsilon=2.0,
                   eps_c=1.0, components=(0, 1), dim=2, bound=1.0,
                   intervals=((-1.0, 1.0), (-1.0, 1.0)))
    assert task_parameters(lin).epsilon0 == 2.0 and task_parameters(lin).beta < (E**2 - 1) / (
        E**2 + 1)
    # a report whose pieces do not add up to what the method charges: the generic bound
    odd = replace(dist, records=3)
    assert task_parameters(odd).mechanism in ("any", "oue")
