"""Privacy amplification by shuffling (Feldman, McMillan, Talwar 2021).

* the closed form (Theorem 3.2) is pinned to the formula, term by term, and its condition;
* the numerical δ(ε) equals the exact hockey-stick divergence of the theorem's P and Q,
  summed by brute force over every outcome, in both directions;
* the central ε is an upper bound: δ(ε) ≤ δ there, and at or below the issue's table
  (the authors' code) within +1 %; it never exceeds ε0, and says so when it gains nothing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from uldp.collector.accounting.amplification import (
    amplify,
    central_epsilon,
    closed_form_epsilon,
    closed_form_valid,
    delta_bound,
)

#: central ε at δ = 1e-8 from the authors' published code (issue 19)
TABLE = {10**4: (0.0275, 0.0695, 0.2023, 1.1270),
         10**5: (0.0084, 0.0211, 0.0589, 0.2184),
         10**6: (0.0024, 0.0062, 0.0181, 0.0653)}
EPS0 = (0.5, 1.0, 2.0, 4.0)


def _closed(n: int, e0: float, delta: float) -> float:
    a = 8 * math.sqrt(math.exp(e0) * math.log(4 / delta) / n)
    c = 8 * math.exp(e0) / n
    e1 = math.log(1 + a + c)
    return math.log(1 + (1 - math.exp(-e0)) / (1 + math.exp(-e0 - e1)) * (a + c))


@pytest.mark.parametrize("n,e0,delta", [(10**5, 1.0, 1e-8), (10**4, 0.5, 1e-6),
                                        (10**6, 2.0, 1e-10), (3 * 10**5, 3.0, 1e-8)])
def test_closed_form_is_the_formula(n, e0, delta):
    assert closed_form_epsilon(n, e0, delta) == _closed(n, e0, delta)


def test_closed_form_value_and_condition_of_the_issue():
    assert round(closed_form_epsilon(10**5, 1.0, 1e-8), 4) == 0.0859
    bound = math.log(10**5 / (16 * math.log(4 / 1e-8)))
    assert closed_form_valid(10**5, bound, 1e-8)
    assert not closed_form_valid(10**5, bound + 1e-9, 1e-8)
    assert closed_form_epsilon(10**4, 4.0, 1e-8) is None  # outside its condition


def _brute_delta(n: int, e0: float, eps: float) -> tuple[float, float]:
    """Σ_x max(0, P − e^ε Q) and Σ_x max(0, Q − e^ε P) over every (c, a)."""
    p, al = math.exp(-e0), math.exp(e0) / (1 + math.exp(e0))
    pq = qp = 0.0
    for c in range(n):
        w = stats.binom.pmf(c, n - 1, p)
        a = np.arange(c + 2)
        b0, b1 = stats.binom.pmf(a, c, 0.5), stats.binom.pmf(a - 1, c, 0.5)
        P, Q = al * b0 + (1 - al) * b1, (1 - al) * b0 + al * b1
        pq += w * np.maximum(P - math.exp(eps) * Q, 0).sum()
        qp += w * np.maximum(Q - math.exp(eps) * P, 0).sum()
    return pq, qp


@pytest.mark.parametrize("n,e0,eps", [(2, 1.0, 0.3), (50, 1.0, 0.5), (200, 2.0, 0.8),
                                      (1000, 4.0, 1.5), (300, 0.5, 0.2)])
def test_numerical_delta_is_the_exact_divergence(n, e0, eps):
    pq, qp = _brute_delta(n, e0, eps)
    assert pq == pytest.approx(qp, rel=1e-9, abs=1e-18)  # the two directions agree
    assert delta_bound(n, e0, eps) == pytest.approx(max(pq, qp), rel=1e-9, abs=1e-18)
    assert delta_bound(n, e0, e0) == 0.0  # no divergence at ε0 itself


@pytest.mark.parametrize("n", sorted(TABLE))
def test_central_epsilon_at_or_below_the_table(n):
    for e0, ref in zip(EPS0, TABLE[n], strict=True):
        eps = central_epsilon(n, e0, 1e-8)
        assert eps <= ref * 1.01, (n, e0, eps, ref)
        assert delta_bound(n, e0, eps) <= 1e-8  # an upper bound, checked
        assert eps >= 0.5 * ref  # and not absurdly small (the bound is tight-ish)
        closed = closed_form_epsilon(n, e0, 1e-8)
        assert closed is None or eps <= closed


def test_no_amplification_is_said():
    for n, e0 in ((1, 1.0), (10, 1.0), (100, 8.0)):
        a = amplify(n, e0, 1e-8)
        assert not a.amplified and a.epsilon == e0
        assert a.to_json()["delta"] == 0.0
    a = amplify(10**5, 1.0, 1e-8)
    assert a.amplified and a.epsilon < 0.03 and a.to_json()["delta"] == 1e-8


def test_monotone_in_n_and_epsilon0():
    assert central_epsilon(2000, 1.0, 1e-6) > central_epsilon(20000, 1.0, 1e-6)
    assert central_epsilon(20000, 0.5, 1e-6) < central_epsilon(20000, 2.0, 1e-6)


@pytest.mark.parametrize("args", [(0, 1.0, 1e-8), (10, 0.0, 1e-8), (10, float("nan"), 1e-8),
                                  (10, 1.0, 0.0), (10, 1.0, 1.0), (2.5, 1.0, 1e-8)])
def test_bad_arguments_are_refused(args):
    with pytest.raises(ValueError):
        central_epsilon(*args)
