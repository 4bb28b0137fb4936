"""Privacy amplification by shuffling: the central (ε, δ) of n shuffled ε0-LDP reports.

Feldman, McMillan and Talwar, "Hiding Among the Clones: A Simple and Nearly Optimal
Analysis of Privacy Amplification by Shuffling", FOCS 2021 (arXiv:2012.12803). See
``docs/privacy.md`` ("Shuffle mode: the central guarantee").

**The reduction (their Theorem 3.1).** Shuffling the outputs of n ε0-DP local randomizers
(one per user; here: one user-level ε0-LDP report per device) is, for two datasets that
differ in one user, a post-processing of the pair of distributions

    C ~ Bin(n − 1, e^(−ε0)),   A ~ Bin(C, 1/2),   Δ ~ Bern(e^ε0 / (e^ε0 + 1)),
    P = (A + Δ, C − A + 1 − Δ),   Q = (A + 1 − Δ, C − A + Δ),

so the shuffled output is (ε, δ)-DP for every δ ≥ D_{e^ε}(P ‖ Q) and D_{e^ε}(Q ‖ P),
where D_{e^ε}(P ‖ Q) = Σ_x max(0, P(x) − e^ε Q(x)) (hockey-stick divergence).

**The numerical bound (their Appendix E), computed here from the theorem.** Given C = c,
the first coordinate a ∈ {0..c+1} determines x, and with F_c the Bin(c, 1/2) cdf and
α = e^ε0 / (e^ε0 + 1)

    P(a ≤ t | c) = α F_c(t) + (1 − α) F_c(t − 1),  Q(a ≤ t | c) = (1 − α) F_c(t) + α F_c(t − 1);

the likelihood ratio P(a | c) / Q(a | c) = (α − (2α − 1) u) / (1 − α + (2α − 1) u), u = a/(c+1),
decreases in a, so the positive part of P − e^ε Q is exactly the set a ≤ β (c + 1) with
β = (α − e^ε (1 − α)) / ((2α − 1)(1 + e^ε)), and

    D_c(ε) = (α − e^ε (1 − α)) F_c(t) − (e^ε α − (1 − α)) F_c(t − 1),  t = ⌊β (c + 1)⌋.

The map a ↦ c + 1 − a exchanges P and Q, so D_{e^ε}(Q ‖ P) = D_{e^ε}(P ‖ Q) and
δ(ε) = E_C[D_C(ε)]. Unlike the authors' code, which bounds D_c on intervals of c by its
end points, this sums D_c exactly over every c within ±``_SPAN`` standard deviations of
E[C] and adds the whole probability of the c outside (D_c ≤ 1): an upper bound on δ(ε)
up to floating point. The threshold t is also tried at t ± 1 and the largest value kept,
so a rounding of β (c + 1) can only raise the bound. A root finder then locates the
ε where δ(ε) = δ (Brent's method on log δ(ε), relative tolerance 10^-6), and the
returned ε is the first point at or above it, in steps of 10^-5 relative, whose δ(ε) is
checked to be at most δ: an upper bound, whatever the root finder's accuracy.

**The closed form (their Theorem 3.2).** For ε0 ≤ ln(n / (16 ln(4/δ))),

    ε = ln(1 + (1 − e^(−ε0)) / (1 + e^(−ε0−ε1)) · (a + c)),
    a = 8 √(e^ε0 ln(4/δ) / n),  c = 8 e^ε0 / n,  ε1 = ln(1 + a + c).

Shuffling never weakens the local guarantee: every bound here is at most ε0, and where it
would not be below ε0 the result says that amplification gives nothing
(:attr:`Amplification.amplified` is False, the central guarantee is (ε0, 0)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize, special, stats

__all__ = [
    "Amplification",
    "amplify",
    "central_epsilon",
    "closed_form_epsilon",
    "closed_form_valid",
    "delta_bound",
]

#: c within E[C] ± _SPAN standard deviations is summed exactly; the rest is added whole
_SPAN = 9.0
#: binary search: stop when the bracket is this narrow relative to its upper end
_REL_TOL = 1e-5


def _check(n: int, epsilon0: float, delta: float) -> None:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not (math.isfinite(epsilon0) and epsilon0 > 0):
        raise ValueError(f"epsilon0 must be a finite positive number, got {epsilon0!r}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def closed_form_valid(n: int, epsilon0: float, delta: float) -> bool:
    """Whether Theorem 3.2's condition ε0 ≤ ln(n / (16 ln(4/δ))) holds."""
    _check(n, epsilon0, delta)
    return epsilon0 <= math.log(n / (16.0 * math.log(4.0 / delta)))


def closed_form_epsilon(n: int, epsilon0: float, delta: float) -> float | None:
    """Theorem 3.2's central ε for n shuffled ε0-LDP reports, or None outside its
    condition ε0 ≤ ln(n / (16 ln(4/δ)))."""
    if not closed_form_valid(n, epsilon0, delta):
        return None
    a = 8.0 * math.sqrt(math.exp(epsilon0) * math.log(4.0 / delta) / n)
    c = 8.0 * math.exp(epsilon0) / n
    eps1 = math.log(1.0 + a + c)
    return math.log(1.0 + (1.0 - math.exp(-epsilon0)) / (1.0 + math.exp(-epsilon0 - eps1))
                    * (a + c))


def _window(n: int, p: float) -> tuple[np.ndarray, float]:
    """The c summed exactly (an integer range of Bin(n − 1, p)) and the probability of
    every c outside it."""
    m = n - 1
    mean, sd = m * p, math.sqrt(m * p * (1.0 - p))
    lo = max(0, math.floor(mean - _SPAN * sd) - 1)
    hi = min(m, math.ceil(mean + _SPAN * sd) + 1)
    outside = (float(stats.binom.cdf(lo - 1, m, p)) if lo > 0 else 0.0) + \
        (float(stats.binom.sf(hi, m, p)) if hi < m else 0.0)
    return np.arange(lo, hi + 1, dtype=np.float64), outside


@lru_cache(maxsize=64)
def _weights(n: int, epsilon0: float) -> tuple[np.ndarray, np.ndarray, float]:
    p = math.exp(-epsilon0)
    c, outside = _window(n, p)
    return c, stats.binom.pmf(c, n - 1, p), outside


def delta_bound(n: int, epsilon0: float, epsilon: float) -> float:
    """An upper bound on the δ at which n shuffled ε0-LDP reports are (ε, δ)-DP:
    E_C[D_C(ε)] (module docstring), computed exactly over the bulk of C plus the
    probability of the rest."""
    _check(n, epsilon0, 0.5)
    if epsilon >= epsilon0:
        return 0.0  # the shuffled output is a post-processing of ε0-DP reports
    c, w, outside = _weights(n, epsilon0)
    alpha = math.exp(epsilon0) / (math.exp(epsilon0) + 1.0)
    e = math.exp(epsilon)
    k_hi = alpha - e * (1.0 - alpha)  # > 0 because ε < ε0
    k_lo = e * alpha - (1.0 - alpha)
    beta = k_hi / ((2.0 * alpha - 1.0) * (1.0 + e))
    t0 = np.floor(beta * (c + 1.0))
    f = [_cdf_half(t0 + s, c) for s in (-2.0, -1.0, 0.0, 1.0)]  # F_c(t0 - 2 .. t0 + 1)
    best = np.zeros_like(c)
    for i in (1, 2, 3):  # t = t0 - 1, t0, t0 + 1
        best = np.maximum(best, k_hi * f[i] - k_lo * f[i - 1])
    return min(1.0, float(np.dot(w, best)) + outside)


def _cdf_half(t: np.ndarray, c: np.ndarray) -> np.ndarray:
    """F_c(t) of Bin(c, 1/2), elementwise (0 below 0, 1 from c on)."""
    k = np.clip(t, 0, c).astype(np.int64)
    out = special.bdtr(k, c.astype(np.int64), 0.5)
    return np.where(t < 0, 0.0, np.where(t >= c, 1.0, out))


@lru_cache(maxsize=4096)
def central_epsilon(n: int, epsilon0: float, delta: float) -> float:
    """The central ε of shuffling ``n`` reports, each ``epsilon0``-LDP (user level), at
    ``delta``: Feldman–McMillan–Talwar's numerical upper bound (module docstring), never
    above ``epsilon0``. Equal to ``epsilon0`` when shuffling gives nothing."""
    _check(n, epsilon0, delta)
    if n < 2:
        return float(epsilon0)
    hi = float(epsilon0)
    closed = closed_form_epsilon(n, epsilon0, delta)
    if closed is not None and closed < hi and delta_bound(n, epsilon0, closed) <= delta:
        hi = closed
    if delta_bound(n, epsilon0, 0.0) <= delta:
        return 0.0

    def gap(eps: float) -> float:  # decreasing in ε; its root is the central ε
        return math.log(max(delta_bound(n, epsilon0, eps), 1e-300)) - math.log(delta)
    if gap(hi) > 0:  # only when hi = ε0 could not be improved on (δ(ε0) = 0 otherwise)
        return hi
    root = optimize.brentq(gap, 0.0, hi, xtol=_REL_TOL * hi * 0.1, rtol=_REL_TOL * 0.1)
    up = min(hi, root * (1.0 + _REL_TOL))  # the upper end of the bracket, checked
    while up < hi and delta_bound(n, epsilon0, up) > delta:
        up = min(hi, up * (1.0 + _REL_TOL))
    return up


@dataclass(frozen=True)
class Amplification:
    """The central guarantee of one shuffled batch set (see :func:`amplify`)."""

    n: int  # reports shuffled together (the smallest batch that carried any of them)
    epsilon0: float  # the local (user-level) ε of each report
    delta: float  # the δ asked for
    epsilon: float  # the central ε: the numerical bound, at most epsilon0
    closed_form: float | None  # Theorem 3.2's ε, None outside its condition
    amplified: bool  # False: shuffling gives nothing here; the guarantee is (ε0, 0)

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "epsilon0": self.epsilon0, "delta": self.delta if
                self.amplified else 0.0, "epsilon": self.epsilon,
                "closed_form_epsilon": self.closed_form, "amplified": self.amplified,
                "bound": "Feldman-McMillan-Talwar 2021, numerical (Theorem 3.1, Appendix E)"}


def amplify(n: int, epsilon0: float, delta: float) -> Amplification:
    """:func:`central_epsilon` with the closed form next to it and whether shuffling
    improved on ε0 at all (a gain below 0.1 % of ε0 counts as none)."""
    eps = central_epsilon(int(n), float(epsilon0), float(delta))
    amplified = eps < epsilon0 * (1.0 - 1e-3)
    return Amplification(int(n), float(epsilon0), float(delta),
                         eps if amplified else float(epsilon0),
                         closed_form_epsilon(int(n), float(epsilon0), float(delta)), amplified)
