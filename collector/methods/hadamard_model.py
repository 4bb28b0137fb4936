"""The model behind method ``hadamard``'s windows: small pure functions.

See ``docs/algorithms.md`` ("Hadamard windows"); used by ``uldp.collector.methods.hadamard``.
Users alike have statistics ``N(θ_c, S_c²)`` around the coefficient; the window is centred
at the centre phase's estimate, off by ``δ ~ N(0, v_c)``; these functions give the clamping
bias of such a window (in closed form for a normal, by Gauss–Hermite over ``δ``), the second
moment of the clamped values, which half-widths the intervals can account for, how the
window's estimate combines with the centre's, and the spread phase's share of the users.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = [
    "COMBINE_BIAS_SHARE",
    "EXACT_SAMPLES",
    "MAX_UNSEEN",
    "QS",
    "TEST_MARGIN",
    "Z_CHARGE",
    "Z_OUTSIDE",
    "Z_PRICE",
    "Z_UNSEEN",
    "binomial_bias2",
    "clamp_bias",
    "clamped_moments",
    "clamps_ok",
    "combine_centre",
    "excess_limit",
    "measured_bias2",
    "measured_inflation",
    "model_bias2",
    "model_t2",
    "normal_cdf",
    "priced2",
    "priced_excess",
    "share_se",
    "share_variance",
    "spread_share",
    "test_windows",
    "window_variance",
]

#: candidate half-widths of the window, in units of τ (those :func:`clamps_ok` allows)
QS = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0)
#: the share of users outside the windows enters the rule at its estimate plus this many
#: standard deviations (the bound), and the interval at its estimate less as many
Z_OUTSIDE = 3.0
#: the spread test's window is the estimate's widened by this many τ on both sides: a
#: centre off by q τ (rare, and accounted for by the model's clamping bias) does not make
#: the users of its coefficient look different; users who differ lie far beyond it
TEST_MARGIN = 1.0
#: the windows run only when the spread test sees a share of users outside them this
#: large (``Z_OUTSIDE`` standard errors of the pooled share): a share it cannot see is
#: clamped unnoticed, so a test without that power falls back to the oracle
MAX_UNSEEN = 0.1
#: ... at the share's one-sided upper bound of this many standard errors (97.7 %): at three,
#: the bound left users alike at ε = 0.5 under two standard errors of room (a false
#: fallback in 1 run of 25, at 5× the windows' error, k = 8, m = 100)
Z_UNSEEN = 2.0
#: the excess outside share is priced into the windows' error, for the choice between
#: them and the fallback, only beyond this many standard errors of its estimate
#: (:func:`priced_excess`): a false fallback of users alike is rare
Z_PRICE = 2.0
#: ... and charged to the windows' intervals beyond this many: users who differ a little
#: (flights at ε = 2, an excess around one standard error) are clamped more than the
#: model of users alike says, and their intervals need the charge
Z_CHARGE = 1.0

_NORMAL = NormalDist()
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(24)  # E f(Z), Z ~ N(0, 1)
_GH_W = _GH_W / _GH_W.sum()


def clamps_ok(q: float, groups: int) -> bool:
    """Whether the intervals' account of the clamping is sound at half-width ``q``. The
    centre's error clamps a coefficient with probability ``2Φ(−q)`` and biases every
    output by ``b_c/√K``; the intervals carry ``E b_c²`` as variance, which is right when
    the expected number ``λ`` of clamped coefficients is large (their biases add up to a
    normal error, like the noise) or tiny (they are rare): ``λ ≥ 5`` or ``λ ≤ 0.05``."""
    lam = groups * 2 * _NORMAL.cdf(-q)
    return lam >= 5.0 or lam <= 0.05


def spread_share(users: int, eps: float) -> float:
    """``s₂``: the share of users the spread phase takes — enough that the test sees half of
    :data:`MAX_UNSEEN` (``Z_OUTSIDE`` standard errors of the pooled outside share ≤ 0.05;
    the one-bit oracle's variance at ε, at a share of 5 %), between 2 % and 7 % (its users
    are lost to the estimate after a fallback: at most ``1/(1 − s₂) ≤ 1.076`` of the
    oracle's error)."""
    need = share_variance(0.05, eps) * (Z_OUTSIDE / (MAX_UNSEEN / 2)) ** 2
    return float(min(max(need / max(users, 1), MIN_SPREAD), MAX_SPREAD))


def test_windows(centre: np.ndarray, tau: np.ndarray, q: float, bound: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The spread test's intervals and their half-widths in τ: ``centre ± (q + TEST_MARGIN)τ``
    cut to ``[−D, D]``, or the estimate's own ``± qτ`` where the wider one would be the whole
    range (nothing could lie outside it)."""
    wide = q + TEST_MARGIN
    lo, hi = np.maximum(centre - wide * tau, -bound), np.minimum(centre + wide * tau, bound)
    whole = (lo <= -bound) & (hi >= bound)
    qt = np.where(whole, q, wide)
    lo = np.where(whole, np.maximum(centre - q * tau, -bound), lo)
    hi = np.where(whole, np.minimum(centre + q * tau, bound), hi)
    return lo, hi, qt


def priced_excess(excess: float, sd: float, z: float = Z_PRICE) -> float:
    """The excess outside share the window's error is charged for: the part of the
    estimate ``M̂ − 2Φ(−q)`` beyond :data:`Z_PRICE` standard errors (a lower confidence
    bound of the excess). Users alike show an excess of ``N(0, sd²)``; charging the
    estimate itself sent one run in six of them to the fallback (at k = 8, m = 1000, ε = 1
    a false alarm costs 20× the window's error), charging it beyond one standard error
    still one run in 25 at k = 8, m = 1000, ε = 2, where a fallback costs 70× the
    windows' error and the prediction, which prices that chance in, read 0.28 of the
    measured MSE; beyond two, 0.3 %. Users who differ by a few percent show several
    standard errors and still pay for most of it."""
    return max(excess - z * sd, 0.0)


def pass_limit(sd: float) -> float:
    """The largest excess outside share the spread test lets pass at standard error
    ``sd``: not significant (:data:`Z_OUTSIDE` standard errors) and, at its upper bound
    (:data:`Z_UNSEEN`), at most :data:`MAX_UNSEEN`; negative: the test cannot pass."""
    return min(Z_OUTSIDE * sd, MAX_UNSEEN - Z_UNSEEN * sd)


def excess_limit(sd: float, window_mse: float, fallback: float, unit: float) -> float:
    """The largest excess outside share with which the windows still run: the test's
    (:data:`Z_OUTSIDE` standard errors, :data:`MAX_UNSEEN`) and the price's — the window's
    error plus ``unit·priced_excess²`` (``unit = Σ_c D_c²``) below the fallback's."""
    limit = pass_limit(sd)
    room = fallback - window_mse
    if room <= 0:
        return -math.inf
    return min(limit, Z_PRICE * sd + math.sqrt(room / unit)) if unit > 0 else limit


def share_variance(share: float, eps: float) -> float:
    """``n₂ · Var M̂`` of the pooled outside share at ``share``: the one-bit oracle's noise
    (the best oracle over two categories at ε) plus the sampling of which users are
    outside, ``M(1 − M)`` — the spread users stand for all the window users."""
    from uldp.collector.mechanisms import ORACLE_DECODERS
    from uldp.collector.mechanisms.choice import best_oracle

    f = min(max(share, 0.0), 1.0)
    noise = float(ORACLE_DECODERS[best_oracle(2, eps)].variance(np.array([1 - f, f]), 2,
                                                                  eps)[1])
    return noise + f * (1 - f)


def share_se(share: float, empirical: float, n2: int, eps: float) -> float:
    """The standard error the spread test uses: the empirical one, but at least the model's
    at the share or, where few users could show none outside, at ``3/n₂`` (the rule of
    three: zero of ``n₂`` is consistent with a share up to ``3/n₂``)."""
    if n2 <= 0:
        return float("inf")
    f = min(max(share, 3.0 / n2), 0.5)
    return max(empirical, math.sqrt(share_variance(f, eps) / n2))


#: the spread phase's least and largest share of the users
MIN_SPREAD, MAX_SPREAD = 0.02, 0.07


def _phi_tail(x: np.ndarray) -> np.ndarray:
    """``E (x − Z)⁺`` for ``Z ~ N(0, 1)``: ``x Φ(x) + φ(x)``."""
    x = np.asarray(x, dtype=np.float64)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return x * cdf + np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def clamp_bias(mu: np.ndarray, sd: np.ndarray, lo: np.ndarray, hi: np.ndarray
               ) -> np.ndarray:
    """``E clamp(X, lo, hi) − E X`` for ``X ~ N(mu, sd²)`` (element-wise):
    ``E(lo − X)⁺ − E(X − hi)⁺``."""
    sd = np.maximum(np.asarray(sd, dtype=np.float64), 1e-15)
    return sd * (_phi_tail((lo - mu) / sd) - _phi_tail((mu - hi) / sd))


def model_bias2(users_sd: np.ndarray, centre_sd: np.ndarray, half: np.ndarray,
                theta: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Expected squared clamping bias of every coefficient's window: users' statistics
    ``N(θ, users_sd²)``, the window ``[θ + δ − half, θ + δ + half] ∩ [−D, D]`` with the
    centre's error ``δ ~ N(0, centre_sd²)`` (Gauss–Hermite over δ)."""
    th, hw, D = (np.asarray(x, dtype=np.float64)[:, None] for x in (theta, half, bound))
    delta = np.asarray(centre_sd, dtype=np.float64)[:, None] * _GH_X[None, :]
    lo = np.maximum(th + delta - hw, -D)
    hi = np.minimum(th + delta + hw, D)
    b = clamp_bias(th, np.asarray(users_sd, dtype=np.float64)[:, None], lo, hi)
    return np.asarray((b * b) @ _GH_W)


#: users alike's statistic of a distribution's coefficient is the average of ``m`` records'
#: ``±D``: a scaled binomial, discrete and skewed at small ``m``, where the normal's
#: cancelling of the clamping between the window's two sides does not hold. Up to this
#: ``m`` its clamping bias is computed from the exact law (:func:`binomial_bias2`); above
#: it the lattice's step (``2D/m``) is under a tenth of the users' spread (``≤ D/√m``)
EXACT_SAMPLES = 400
#: the centre's error ``δ`` on a fine grid (the binomial's bias is a step function of δ)
_GRID_X = np.linspace(-6.0, 6.0, 241)
_GRID_W = np.exp(-0.5 * _GRID_X**2) / np.exp(-0.5 * _GRID_X**2).sum()


def _binomial_pmf(lchoose: np.ndarray, j: np.ndarray, m: int, p: float) -> np.ndarray:
    if p <= 0.0 or p >= 1.0:
        return (j == (m if p >= 1.0 else 0)).astype(np.float64)
    pmf = np.exp(lchoose + j * math.log(p) + (m - j) * math.log1p(-p))
    return np.asarray(pmf / pmf.sum())


def binomial_bias2(samples: int, centre_sd: np.ndarray, half: np.ndarray,
                   theta: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """:func:`model_bias2` for users alike of a distribution, exactly: a user's statistic is
    ``Y = D(2B/m − 1)``, ``B ~ Bin(m, (1 + θ/D)/2)`` (``m`` records each ``±D``); the
    window ``[θ + δ − half, θ + δ + half] ∩ [−D, D]``, ``δ ~ N(0, centre_sd²)`` on a fine
    grid. Returns ``E_δ (E clamp(Y) − θ)²`` per coefficient."""
    m = int(samples)
    th, hw, D, sd = (np.asarray(x, dtype=np.float64) for x in (theta, half, bound, centre_sd))
    j = np.arange(m + 1, dtype=np.float64)
    lchoose = np.array([math.lgamma(m + 1) - math.lgamma(i + 1) - math.lgamma(m - i + 1)
                        for i in range(m + 1)])
    out = np.empty(th.shape[0], dtype=np.float64)
    for g in range(th.shape[0]):
        d = max(float(D[g]), 1e-300)
        p = min(max((1.0 + th[g] / d) / 2.0, 0.0), 1.0)
        pmf = _binomial_pmf(lchoose, j, m, p)
        keep = pmf > 1e-15 * pmf.max()  # the support that carries the law
        pmf = pmf[keep] / pmf[keep].sum()
        y = d * (2.0 * j[keep] / m - 1.0)
        delta = sd[g] * _GRID_X
        lo = np.maximum(th[g] + delta - hw[g], -d)[:, None]
        hi = np.minimum(th[g] + delta + hw[g], d)[:, None]
        b = (np.clip(y[None, :], lo, np.maximum(lo, hi)) - y[None, :]) @ pmf
        out[g] = float((b * b) @ _GRID_W)
    return out


def model_t2(users_sd: np.ndarray, centre_sd: np.ndarray, half: np.ndarray) -> np.ndarray:
    """``E t²`` of the clamped statistics on each window (``t`` = the position in the window,
    ±1 at its ends): ``E min((δ² + S²)/h², 1)`` over the centre's error ``δ ~ N(0, v)``."""
    d = np.asarray(centre_sd, dtype=np.float64)[:, None] * _GH_X[None, :]
    S2 = np.asarray(users_sd, dtype=np.float64)[:, None] ** 2
    h2 = np.maximum(np.asarray(half, dtype=np.float64)[:, None] ** 2, 1e-300)
    return np.asarray(np.minimum((d * d + S2) / h2, 1.0) @ _GH_W)


#: the window's estimate is combined with the centre's only where the window's expected
#: squared clamping bias is at most this share of its variance (the two are then nearly
#: independent: the window hardly moves with the centre's error)
COMBINE_BIAS_SHARE = 0.01


def combine_centre(window: float, window_var: float, centre: float, centre_var: float,
                   bias2: float) -> tuple[float, float]:
    """The window's estimate of a coefficient, and its variance, combined with the
    centre's by inverse variance when its clamping is negligible
    (:data:`COMBINE_BIAS_SHARE`): the centre's reports are other users' and unbiased, so
    their information is not wasted; where the centre's error clamps the window, the two
    are correlated and the window's estimate stands alone."""
    if not (bias2 <= COMBINE_BIAS_SHARE * window_var and centre_var > 0 and window_var > 0):
        return window, window_var
    w = centre_var / (centre_var + window_var)
    return w * window + (1 - w) * centre, centre_var * window_var / (centre_var + window_var)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, dtype=np.float64) / math.sqrt(2)))


def window_variance(report_var: float, bias2: float, centre_var: float) -> float:
    """The variance a window coefficient's interval carries: its reports' variance (noise
    and the reporters' spread, finite population) plus its squared clamping bias,
    combined with the centre's as :func:`combine_centre` does. One function for the
    estimate (``hadamard_estimate.window_estimate``) and the preview
    (``HadamardWindows.predict``)."""
    return combine_centre(0.0, report_var + bias2, 0.0, centre_var, bias2)[1]


def priced2(excess: float, noise: float, sd: float, limit: float) -> float:
    """``E[priced_excess(X, sd, Z_CHARGE)² | X ≤ limit]`` for the measured excess share
    ``X ~ N(excess, noise²)``: the charge the windows' intervals expect when the test
    passes."""
    if not (noise > 0) or not math.isfinite(limit):
        x = excess
        return priced_excess(x, sd, Z_CHARGE) ** 2 if x <= limit else 0.0
    z = np.linspace(-8.0, min((limit - excess) / noise, 8.0), 801)
    w = np.exp(-0.5 * z * z)
    if w.sum() <= 0:
        return 0.0
    p = np.maximum(excess + noise * z - Z_CHARGE * sd, 0.0)
    return float(np.sum(w * p * p) / np.sum(w))


def clamped_moments(centre: np.ndarray, centre_sd: np.ndarray, users_sd: np.ndarray,
                    lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
    """The clamping of users' statistics ``N(θ, users_sd²)`` on the *given* windows
    ``[lo, hi]``, the truth ``θ = centre − δ`` unknown, the centre off by
    ``δ ~ N(0, centre_sd²)``: per coefficient (rows) and Gauss–Hermite node of ``δ``
    (columns), the second moment ``E t²`` of the clamped statistic's position in its window
    (``t = ±1`` at its ends: what the window reports measure), the signed clamping bias
    ``E clamp(Y) − E Y`` and the one-sided ``E |clamp(Y) − Y|`` (the clamped mass whatever its
    side). Returns ``(t2, bias, mass)``; average a column with :data:`_GH_W`."""
    mu = (np.asarray(centre, dtype=np.float64)[:, None]
          - np.asarray(centre_sd, dtype=np.float64)[:, None] * _GH_X[None, :])
    S = np.maximum(np.asarray(users_sd, dtype=np.float64), 1e-15)[:, None]
    lo_, hi_ = (np.asarray(x, dtype=np.float64)[:, None] for x in (lo, hi))
    below, above = S * _phi_tail((lo_ - mu) / S), S * _phi_tail((mu - hi_) / S)
    mid, h = (lo_ + hi_) / 2, np.maximum((hi_ - lo_) / 2, 1e-300)
    a, b = (lo_ - mu) / S, (hi_ - mu) / S
    Pa, Pb = normal_cdf(a), normal_cdf(b)
    root = math.sqrt(2 * math.pi)
    fa, fb = np.exp(-a * a / 2) / root, np.exp(-b * b / 2) / root
    m = mu - mid
    inside = (m * m * (Pb - Pa) + 2 * m * S * (fa - fb)
              + S * S * (Pb - Pa + a * fa - b * fb))
    t2 = np.clip((h * h * (Pa + 1 - Pb) + np.maximum(inside, 0.0)) / (h * h), 0.0, 1.0)
    return t2, below - above, below + above


def measured_inflation(t2_measured: np.ndarray, centre: np.ndarray, centre_sd: np.ndarray,
                       users_sd: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                       z: float = Z_CHARGE) -> float:
    """How much wider than the model's the users' spread is, from what the window reports
    show: the factor ``r ≥ 1`` on the users' variance at which the model's ``E t²``
    (:func:`clamped_moments`), pooled over the coefficients, equals the measured one less
    ``z`` standard errors (their spread over the coefficients). 1 where the reports show no
    more spread than the model (users alike), or too few coefficients measured one."""
    t2m = np.asarray(t2_measured, dtype=np.float64)
    ok = np.isfinite(t2m)
    if ok.sum() < 2:
        return 1.0
    c, v, S, a, b = (np.asarray(x, dtype=np.float64)[ok]
                     for x in (centre, centre_sd, users_sd, lo, hi))

    def pooled(r: float) -> float:
        return float(np.mean(clamped_moments(c, v, math.sqrt(r) * S, a, b)[0] @ _GH_W))

    base = pooled(1.0)
    diff = t2m[ok] - clamped_moments(c, v, S, a, b)[0] @ _GH_W
    target = base + float(np.mean(diff)) - z * float(np.std(diff, ddof=1)) / math.sqrt(ok.sum())
    if target <= base:
        return 1.0
    lo_r, hi_r = 1.0, 1e6
    if pooled(hi_r) <= target:
        return hi_r
    for _ in range(60):
        mid = math.sqrt(lo_r * hi_r)
        lo_r, hi_r = (mid, hi_r) if pooled(mid) < target else (lo_r, mid)
    return lo_r


def measured_bias2(r: float, centre: np.ndarray, centre_sd: np.ndarray,
                   users_sd: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The squared clamping bias to charge where the users spread ``r`` times the model's
    variance (:func:`measured_inflation`): the model's signed bias plus, of unknown sign,
    all the clamped mass beyond the model's — ``E_δ (|b₁| + (o_r − o₁)⁺)²``. Real users who
    differ a little are skewed (the movielens coefficients: the signed bias of a normal of
    the measured spread is about half the bias measured); only the model's part of the
    clamped mass cancels between the window's two sides."""
    _, b1, o1 = clamped_moments(centre, centre_sd, users_sd, lo, hi)
    if r <= 1.0:
        return np.asarray((b1 * b1) @ _GH_W)
    _, _, o_r = clamped_moments(centre, centre_sd, math.sqrt(r) * np.asarray(users_sd), lo, hi)
    e = np.abs(b1) + np.maximum(o_r - o1, 0.0)
    return np.asarray((e * e) @ _GH_W)
