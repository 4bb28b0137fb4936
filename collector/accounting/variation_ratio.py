"""Privacy amplification by shuffling in the variation-ratio framework: the central
(ε, δ) of n shuffled reports of one randomizer with variation-ratio parameters (p, β, q).

Wang, Peng, Li, Wen, Li, Yu, Wang, Yang, "Privacy Amplification via Shuffling: Unified,
Simplified, and Tightened", PVLDB 17(8), 2024 (arXiv:2304.05007). The derivation, in this
project's words and with the one change it needs to be an upper bound for every
randomizer, is ``docs/privacy.md`` §7.1; in short:

**Parameters.** For any two inputs x⁰, x¹ of the randomizer R (two datasets of a user) and
any other input x: P(R(x⁰) = y) ≤ p·P(R(x¹) = y) (the ratio bound), TV(R(x⁰), R(x¹)) ≤ β
(the variation bound) and P(R(x⁰) = y) ≤ q·P(R(x) = y) (the blanket ratio).

**Decomposition.** With α = β/(p − 1) and γ = 1 − (p + 1)α ≥ 0 the victim's two report
distributions are mixtures of three distributions Q0, Q1 (disjoint) and Q2,

    R(x⁰) = pα Q0 + α Q1 + γ Q2,    R(x¹) = α Q0 + pα Q1 + γ Q2,

and every other user's report contains all three: R(x) ≥ r Q0 + r Q1 + s Q2 with
r = pα/q and s = γ/q (R(x) ≥ max(R(x⁰), R(x¹))/q = (pαQ0 + pαQ1 + γQ2)/q).

**Reduction.** Label every report by the component it was drawn from; the other users'
labels are i.i.d. (r, r, s, rest). Given the numbers (N0, N1, N2) of reports drawn from
Q0, Q1 and Q2 among all n, the shuffled multiset has the same law under both datasets, so
the shuffle is a post-processing of the counts, and with (N0, N1, N2) ~ Mult(n; r, r, s)

    δ(ε) = D_{e^ε}(counts | x⁰ ‖ counts | x¹) = (1/n) E[(w0 N0 + w1 N1 + w2 N2)₊],
    w0 = q (1 − e^ε/p),  w1 = q (1/p − e^ε),  w2 = −q (e^ε − 1)

(the counts' likelihood under x^b is the multinomial's times (π_b(0)N0/r + π_b(1)N1/r +
γN2/s)/n). Swapping the labels 0 and 1 exchanges the datasets, so both directions give
the same δ(ε). The paper's numerical bound drops the victim's γ Q2 into the others'
remainder instead of hiding it among their Q2 clones; that is not an upper bound when
γ > 0 (``tests/accounting/test_variation_ratio.py`` has a GRR counterexample), so this
module keeps the third count. At the sizes of the issue (n = 10⁵) the two differ in the
fourth significant digit.

**Monotone in β.** A pair of inputs whose variation is below β has the same
decomposition with a smaller α; raising α moves each report's contribution from
{w2, 0} to {w0, w1} with the same mean, a mean-preserving spread, so E[(Σ)₊] grows: the
bound at the largest β covers every pair (``docs/privacy.md`` §7.1).

**Computing it.** T = N0 + N1 ~ Bin(n, 2r); given T, N0 ~ Bin(T, ½) and N2 ~ Bin(n − T,
s/(1 − 2r)) independently. Without a common part (γ = 0) the inner expectation over N0
is a closed form in two binomial tails; with one, for each (T, N0) the sum over N2 is a
closed form in N2's binomial cdf. T is summed exactly within ``SPAN`` standard
deviations of its mean and N2's cdf is evaluated exactly where N2 can cross zero within
``SPAN`` of its mean; what lies outside is charged at the largest value the integrand can
take there (``_three_counts``), so δ(ε) is an upper bound up to floating point. The
central ε is found by Brent's method on log δ(ε) and then checked: the returned ε is the
first point at or above the root, in steps of 10⁻⁵ relative, with δ(ε) ≤ δ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize, special

__all__ = ["SPAN", "VariationRatio", "central_epsilon", "delta_bound", "generic"]

#: counts are summed exactly within SPAN standard deviations of their means
SPAN = 8.0
#: Brent's tolerance, and the step of the final check, relative to ε
_REL_TOL = 1e-5


@dataclass(frozen=True)
class VariationRatio:
    """The variation-ratio parameters of one randomizer (module docstring): ``p`` the
    ratio bound between two inputs, ``beta`` the total-variation bound, ``q`` the ratio
    bound to any other input; ``mechanism`` and ``detail`` name what they describe and
    ``epsilon0`` is the randomizer's local ε."""

    mechanism: str
    epsilon0: float
    p: float
    beta: float
    q: float
    detail: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon0) and self.epsilon0 > 0):
            raise ValueError(f"epsilon0 must be a finite positive number, got {self.epsilon0!r}")
        if not (1.0 < self.p <= self.q < math.inf):
            raise ValueError(f"need 1 < p <= q < inf, got p={self.p!r}, q={self.q!r}")
        if not 0.0 <= self.beta <= self.beta_max * (1 + 1e-12):
            raise ValueError(f"beta must be in [0, (p-1)/(p+1)], got {self.beta!r}")

    @property
    def beta_max(self) -> float:
        """(p − 1)/(p + 1): the largest variation a p-ratio-bounded pair can have."""
        return (self.p - 1.0) / (self.p + 1.0)

    @property
    def alpha(self) -> float:
        return min(self.beta, self.beta_max) / (self.p - 1.0)

    @property
    def gamma(self) -> float:
        """The victim's common part; 0 for the extremal (generic) randomizer."""
        return max(0.0, 1.0 - (self.p + 1.0) * self.alpha)

    @property
    def r(self) -> float:
        return self.p * self.alpha / self.q

    @property
    def s(self) -> float:
        return self.gamma / self.q

    def to_json(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "detail": self.detail,
                "epsilon0": self.epsilon0, "p": self.p, "beta": self.beta, "q": self.q}


def generic(epsilon0: float) -> VariationRatio:
    """Any ε0-LDP randomizer: p = q = e^ε0, β = (e^ε0 − 1)/(e^ε0 + 1)."""
    e = math.exp(float(epsilon0))
    return VariationRatio("any", float(epsilon0), e, (e - 1.0) / (e + 1.0), e)


# ---- E[(w0 N0 + w1 N1 + w2 N2)+] over Mult(n; r, r, s) -------------------------------------
def _window(mean: np.ndarray | float, var: np.ndarray | float, top: np.ndarray | int
            ) -> tuple[np.ndarray, np.ndarray]:
    sd = np.sqrt(np.maximum(var, 0.0))
    # (+ SPAN: small means are Poisson-like, their upper tail is longer than SPAN sd)
    lo = np.maximum(0, np.floor(np.asarray(mean) - SPAN * sd - 1)).astype(np.int64)
    hi = np.minimum(top, np.ceil(np.asarray(mean) + SPAN * sd + SPAN)).astype(np.int64)
    return lo, hi


def _log_pmf(k: np.ndarray, m: np.ndarray, prob: float) -> np.ndarray:
    """log Bin(m, prob) pmf at k (−inf outside 0..m)."""
    ok = (k >= 0) & (k <= m)
    kk, mm = np.where(ok, k, 0), np.maximum(m, 0)
    out = (special.gammaln(mm + 1.0) - special.gammaln(kk + 1.0)
           - special.gammaln(mm - kk + 1.0) + special.xlogy(kk, prob)
           + special.xlog1py(mm - kk, -prob))
    return np.where(ok, out, -np.inf)


def _tail(k: np.ndarray, m: np.ndarray, prob: float) -> np.ndarray:
    """P(Bin(m, prob) >= k), elementwise."""
    kk = np.clip(k - 1, 0, np.maximum(m, 0)).astype(np.float64)
    out = special.bdtrc(kk, np.maximum(m, 0).astype(np.int64), prob)
    return np.where(k <= 0, 1.0, np.where(k > m, 0.0, out))


def _two_counts(T: np.ndarray, a0: float, a1: float) -> np.ndarray:
    """E[(a0 N0 + a1 (T − N0))+] for N0 ~ Bin(T, ½), elementwise in T (a0 > 0 > a1)."""
    slope = a0 - a1
    k = np.ceil(-a1 * T / slope)  # the smallest N0 with a non-negative value
    # E[N0; N0 >= k] = (T/2) P(Bin(T − 1, ½) >= k − 1)
    part = slope * 0.5 * T * _tail(k - 1, T - 1, 0.5) + a1 * T * _tail(k, T, 0.5)
    return np.maximum(part, 0.0)


def _three_counts(T: np.ndarray, n: int, ps: float, a0: float, a1: float, a2: float
                  ) -> np.ndarray:
    """E[(a0 N0 + a1 (T − N0) + a2 N2)+] for independent N0 ~ Bin(T, ½) and
    N2 ~ Bin(n − T, ps), elementwise in T (a0 > 0 > a1, a2 < 0).

    With Y = (a0 − a1) N0 + a1 T and K = ⌊Y/|a2|⌋ the sum over N2 is Y·F(K) + a2·G(K)
    (F the cdf of N2, G(K) = E[N2; N2 <= K]). Three ranges of N0: where K lies within
    ``SPAN`` standard deviations of N2's mean, exactly; above it, Y + a2·E[N2] plus
    |a2|·E[N2; N2 > top] (an upper bound), summed in closed form over the binomial tail
    of N0; below it (Y >= 0 but K under the window), at most Y·P(N2 < bottom), summed
    with :func:`_two_counts`."""
    tf = T.astype(np.float64)[:, None]
    m2 = (n - T)[:, None].astype(np.float64)
    slope, b = a0 - a1, -a2
    mu2 = m2 * ps
    lo2, hi2 = _window(mu2, mu2 * (1 - ps), (n - T)[:, None])
    # exact band: N0 with lo2 <= K <= hi2, and within SPAN sd of N0's own mean T/2 (the
    # band's N0 outside that window are charged at the most they can add, below)
    kb = np.ceil((b * lo2 - a1 * tf) / slope)
    kc = np.ceil((b * (hi2 + 1) - a1 * tf) / slope)  # first N0 above the band
    lo0, hi0 = _window(tf / 2, tf / 4, T[:, None])
    ks, ke = np.maximum(kb, lo0), np.minimum(kc, hi0 + 1)  # the band inside the window
    width = int(max(1, float((ke - ks).max())))
    k0 = ks + np.arange(width)[None, :]
    inside = (k0 < ke) & (k0 <= tf) & (k0 >= 0)
    y = slope * k0 + a1 * tf
    K = np.floor(y / b + 1e-9)
    mi = (n - T)[:, None].astype(np.int64)
    Kc = np.clip(K, 0, m2)
    F = special.bdtr(Kc, mi, ps)
    # G = μ2·P(Bin(m2 − 1, ps) <= K − 1), from F without a second incomplete beta (the
    # costliest part of every δ(ε)): Bin(m2) = Bin(m2 − 1) + Bernoulli(ps) gives
    # P(Bin(m2 − 1) <= K − 1) = F(K) − (1 − ps)·P(Bin(m2 − 1) = K), also at K >= m2
    G = mu2 * (F - (1.0 - ps) * np.exp(_log_pmf(Kc, m2 - 1, ps)))
    G = np.where(K >= 1, np.maximum(G, 0.0), 0.0)
    val = np.where((K >= 0) & inside, np.maximum(y * F + a2 * G, 0.0), 0.0)
    p0 = np.where(inside, np.exp(_log_pmf(k0, tf, 0.5)), 0.0)
    band = np.sum(p0 * val, axis=1)
    # the band's N0 outside N0's window: each adds p0·(Y·F + a2·G)₊ <= p0·Y₊ <= p0·a0·T,
    # and their p0 sum to at most P(N0 < lo0) + P(N0 > hi0)
    cut = (ks > kb) | (ke < kc)
    if cut.any():
        out0 = (1.0 - _tail(lo0, tf, 0.5)) + _tail(hi0 + 1, tf, 0.5)
        band = band + np.where(cut, a0 * tf * out0, 0.0)[:, 0]
    # above the band: Σ p0 (Y + a2 μ2 + |a2| E[N2; N2 > hi2])
    spill = b * mu2 * _tail(hi2, m2 - 1, ps)
    above = (slope * 0.5 * tf * _tail(kc - 1, tf - 1, 0.5)
             + (a1 * tf + a2 * mu2 + spill) * _tail(kc, tf, 0.5))
    # below the band: at most P(N2 < lo2)·E[Y+]
    under = 1.0 - _tail(lo2, m2, ps)
    below = under[:, 0] * _two_counts(tf[:, 0], a0, a1)
    return band + np.maximum(above[:, 0], 0.0) + below


def _expected_positive(n: int, vr: VariationRatio, e: float) -> float:
    """(1/n)·E[(w0 N0 + w1 N1 + w2 N2)+] at e = e^ε (module docstring)."""
    p, q, r, s = vr.p, vr.q, vr.r, vr.s
    a0, a1, a2 = q * (1.0 - e / p), q * (1.0 / p - e), -q * (e - 1.0)
    if r <= 0.0 or a0 <= 0.0:
        return 0.0
    pT = min(1.0, 2.0 * r)
    lo, hi = _window(n * pT, n * pT * (1 - pT), n)
    T = np.arange(int(lo), int(hi) + 1)
    wT = np.exp(_log_pmf(T, np.full(T.shape, n), pT))
    # T outside the window: (X)+ <= a0 N0, and E[N0; T ∉ W] = E[T; T ∉ W]/2
    m1 = np.array([n - 1])
    t_out = n * pT * float((1.0 - _tail(np.array([lo - 1]), m1, pT)
                            + _tail(np.array([hi]), m1, pT))[0])
    if s <= 0.0 or -a2 < 1e-12:  # no common part (or ε ≈ 0): dropping a2 N2 <= 0 bounds it
        inner = _two_counts(T.astype(np.float64), a0, a1)
    else:
        inner = _three_counts(T, n, s / (1.0 - 2.0 * r), a0, a1, a2)
    total = float(np.dot(wT, inner)) + a0 * t_out / 2
    return total / n


@lru_cache(maxsize=8192)
def delta_bound(n: int, vr: VariationRatio, epsilon: float) -> float:
    """An upper bound on the δ at which ``n`` shuffled reports of a randomizer with
    parameters ``vr`` are (ε, δ)-DP (module docstring)."""
    _check_n(n)
    if epsilon >= math.log(vr.p):
        return 0.0  # the shuffle is a post-processing of ln p-DP reports
    return min(1.0, _expected_positive(int(n), vr, math.exp(epsilon)))


def _check_n(n: int) -> None:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")


@lru_cache(maxsize=4096)
def central_epsilon(n: int, vr: VariationRatio, delta: float) -> float:
    """The central ε of shuffling ``n`` reports of the randomizer ``vr`` at ``delta``: the
    variation-ratio bound (module docstring), never above ln p."""
    _check_n(n)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    hi = math.log(vr.p)
    if delta_bound(n, vr, 0.0) <= delta:
        return 0.0

    def gap(eps: float) -> float:  # decreasing in ε; its root is the central ε
        return math.log(max(delta_bound(n, vr, eps), 1e-300)) - math.log(delta)
    root = optimize.brentq(gap, 0.0, hi, xtol=_REL_TOL * hi * 0.01, rtol=_REL_TOL * 0.1)
    up = min(hi, root * (1.0 + _REL_TOL))
    while up < hi and delta_bound(n, vr, up) > delta:
        up = min(hi, up * (1.0 + _REL_TOL))
    return up
