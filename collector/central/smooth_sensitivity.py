"""Smooth sensitivity and (α, β) constants of the Huber-loss mean (HLM).

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats": HLM). Reference:
``docs/central-algorithms.md`` H§2.5 (smooth-sensitivity framework), H§2.6 (balanced
``G``/``S``), H§2.7 (imbalanced ``G``/``S`` with the repaired ``h``, decision H§6 A8), H§2.9
(constants: ``"calibrated"``, ``"nrs"``, ``"paper"``, :data:`CONSTANTS`) and decisions
A1–A6, A18. The H§2.8 outlier surrogates Δ̃ are in
:mod:`uldp.collector.central.outlier_counts`.

Everything here is a pure function of numpy arrays and public parameters, so the tests
can check each piece against brute force (H§7 items 2–4).

Privacy building blocks (Nissim–Raskhodnikova–Smith, as used by the paper, Thm 1/4):

* ``G(D, k)`` with (G1) ``LS(D) <= G(D, 0)`` and (G2) ``G(D, k) <= G(D', k+1)`` for
  user-level neighbours; ``S(D) = max_k e^{-βk} G(D, k)`` is then a β-smooth upper bound
  of the local sensitivity of ``Clip(μ̂₀, R_c)``. Every ``G`` is capped at ``2 R_c``
  (decision H§6 A3), which makes (G2) unconditional.
* (G2) rests on the outlier surrogate Δ̃ being 1-Lipschitz with a witness (H§2.8 R1/R2);
  every Δ̃ here is ``n - max{|S| : P(S)}`` for a hereditary, completable property ``P``
  (H§2.8 construction principle), capped at ``K`` — 1-Lipschitz by construction.
* The Gaussian ``N(0, (S/α)² I_d)`` is (ε, δ)-DP when the worst-case hockey-stick
  divergence between ``N(0, I)`` and ``N(a e₁, s² I)``, ``s ∈ [e^{-β}, e^{β}]``,
  ``|a| <= α min(1, s)``, is at most δ (H§2.9). ``calibrated_alpha`` computes the largest
  such α numerically; ``"nrs"`` is the NRS d>1 formula; ``"paper"`` is eq. 3 verbatim,
  which for d = 1 does **not** meet the nominal δ (H§2.9 [check]).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from scipy import stats

__all__ = [
    "CONSTANTS",
    "CONSTANT_MODES",
    "calibrated_alpha",
    "g_balanced",
    "g_imbalanced",
    "h_imbalanced",
    "hlm_constants",
    "hockey_stick_worst",
    "nrs_constants",
    "paper_constants",
    "smooth_max",
    "smooth_sensitivity_balanced",
    "smooth_sensitivity_imbalanced",
    "sorted_weight_prefix",
]

# =====================================================================================
# H§2.9 constants (α, β)
# =====================================================================================
def paper_constants(epsilon: float, delta: float, d: int) -> tuple[float, float]:
    """The paper's eq. 3 / (7) ``(α, β)``. For d = 1 the nominal δ is NOT met (H§2.9)."""
    if d == 1:
        return epsilon / math.sqrt(math.log(1 / delta)), epsilon / (2 * math.log(1 / delta))
    return nrs_constants(epsilon, delta, d)


def nrs_constants(epsilon: float, delta: float, d: int) -> tuple[float, float]:
    """NRS's d > 1 Gaussian pair, used for every d (valid, conservative; H§2.9)."""
    alpha = epsilon / (5 * math.sqrt(2 * math.log(2 / delta)))
    beta = epsilon / (4 * (d + math.log(2 / delta)))
    return alpha, beta


def _hockey_1d(a: np.ndarray, s: np.ndarray, epsilon: float) -> np.ndarray:
    """Exact ∫(p − e^ε q)_+ for p = N(0,1), q = N(a, s²), elementwise (closed form).

    The region ``{x : log p(x) − log q(x) > ε}`` is where the quadratic
    ``c2 x² + c1 x + c0 > 0`` with the coefficients below; it is an interval, the
    complement of one, a half-line, empty or everything.
    """
    a, s = np.broadcast_arrays(np.asarray(a, float), np.asarray(s, float))
    out = np.zeros(a.shape)
    for idx in np.ndindex(a.shape):
        ai, si = float(a[idx]), float(s[idx])
        c2 = 0.5 * (1 / si**2 - 1)
        c1 = -ai / si**2
        c0 = ai**2 / (2 * si**2) + math.log(si) - epsilon

        def mass(lo: float, hi: float, ai: float = ai, si: float = si) -> float:
            p = stats.norm.cdf(hi) - stats.norm.cdf(lo)
            q = stats.norm.cdf((hi - ai) / si) - stats.norm.cdf((lo - ai) / si)
            return p - math.exp(epsilon) * q

        if abs(c2) < 1e-15:
            if c1 == 0:
                val = mass(-math.inf, math.inf) if c0 > 0 else 0.0
            else:
                root = -c0 / c1
                val = mass(root, math.inf) if c1 > 0 else mass(-math.inf, root)
        else:
            disc = c1 * c1 - 4 * c2 * c0
            if disc <= 0:
                val = mass(-math.inf, math.inf) if c2 > 0 else 0.0
            else:
                r1 = (-c1 - math.sqrt(disc)) / (2 * c2)
                r2 = (-c1 + math.sqrt(disc)) / (2 * c2)
                lo, hi = min(r1, r2), max(r1, r2)
                # c2 > 0: outside the roots; c2 < 0: between them
                val = (mass(-math.inf, lo) + mass(hi, math.inf)) if c2 > 0 else mass(lo, hi)
        out[idx] = max(val, 0.0)
    return out


def _hockey_multid(a: float, s: float, epsilon: float, d: int) -> float:
    """∫(p − e^ε q)_+ for p = N(0, I_d), q = N(a e₁, s² I_d), by 1-D quadrature over x₁.

    For fixed x₁ the privacy loss is affine in the orthogonal squared norm r² (χ²_{d−1}
    under p, s²χ²_{d−1} under q), so each slice is a chi-square tail (H§2.9).
    """
    k = d - 1
    span = 14 * max(1.0, s) + abs(a)
    x = np.linspace(-span, span, 8001)
    logp1 = -0.5 * x**2
    logq1 = -0.5 * ((x - a) / s) ** 2 - math.log(s)
    base = logp1 - logq1 + k * math.log(s)  # loss = base + c * r2 (common 2π factors cancel)
    c = 0.5 * (1 / s**2 - 1)
    phi_p = np.exp(logp1) / math.sqrt(2 * math.pi)
    phi_q = np.exp(logq1) / math.sqrt(2 * math.pi)
    if abs(c) < 1e-15:
        ind = (base > epsilon).astype(float)
        pp, qq = ind, ind
    else:
        thr = (epsilon - base) / c  # loss > ε  <=>  r2 > thr (c > 0)  or  r2 < thr (c < 0)
        thr_pos = np.maximum(thr, 0.0)
        if c > 0:
            pp = stats.chi2.sf(thr_pos, k)
            qq = stats.chi2.sf(thr_pos / s**2, k)
        else:
            pp = np.where(thr > 0, stats.chi2.cdf(thr_pos, k), 0.0)
            qq = np.where(thr > 0, stats.chi2.cdf(thr_pos / s**2, k), 0.0)
    integrand = phi_p * pp - math.exp(epsilon) * phi_q * qq
    return float(max(np.trapezoid(integrand, x), 0.0))


def hockey_stick_worst(alpha: float, beta: float, epsilon: float, d: int,
                       n_s: int = 9, n_a: int = 5) -> float:
    """Worst δ over ``s ∈ [e^{-β}, e^{β}]`` and ``|a| <= α min(1, s)`` (grids incl. ends).

    Both directions of the hockey stick are covered: the change of variables
    ``x -> (x − a)/s`` maps ``(q ‖ p)`` at ``(a, s)`` to ``(p ‖ q)`` at ``(−a/s, 1/s)``,
    which lies in the same scanned family.
    """
    s_grid = np.exp(np.linspace(-beta, beta, n_s))
    worst = 0.0
    for s in s_grid:
        amax = alpha * min(1.0, s)
        a_grid = np.linspace(0.0, amax, n_a)
        if d == 1:
            vals = _hockey_1d(a_grid, np.full_like(a_grid, s), epsilon)
            worst = max(worst, float(vals.max()))
        else:
            for a in a_grid:
                worst = max(worst, _hockey_multid(float(a), float(s), epsilon, d))
    return worst


@lru_cache(maxsize=512)
def calibrated_alpha(epsilon: float, delta: float, beta: float, d: int) -> float:
    """Largest α (bisection, 1e-4 relative) with ``hockey_stick_worst <= δ`` (H§2.9).

    Returns 0.0 if no α > 0 passes (β too large for this (ε, δ)).
    """
    lo, hi = 0.0, 4.0 * epsilon
    if hockey_stick_worst(1e-6, beta, epsilon, d) > delta:
        return 0.0
    while hockey_stick_worst(hi, beta, epsilon, d) <= delta:
        hi *= 2.0
    while hi - lo > 1e-4 * hi:
        mid = 0.5 * (lo + hi)
        if hockey_stick_worst(mid, beta, epsilon, d) <= delta:
            lo = mid
        else:
            hi = mid
    return lo


BETA_GRID = tuple(round(0.005 * k, 3) for k in range(1, 21))  # × ε, H§2.9


def _paper_alpha_beta(epsilon: float, delta: float, d: int, beta: float | None,
                      _proxy: Callable[[float], float] | None) -> tuple[float, float]:
    if d == 1:
        warnings.warn(
            "constants='paper' for d=1 does not deliver the nominal (epsilon, delta): "
            "at eps=1, delta=1e-5 the true delta is ~1.3e-3 (docs/central-algorithms.md H§2.9); "
            "reproduction only",
            RuntimeWarning, stacklevel=3)
    a, b = paper_constants(epsilon, delta, d)
    return a, (b if beta is None else beta)


def _nrs_alpha_beta(epsilon: float, delta: float, d: int, beta: float | None,
                    _proxy: Callable[[float], float] | None) -> tuple[float, float]:
    a, b = nrs_constants(epsilon, delta, d)
    if beta is not None and beta != b:
        raise ValueError("beta cannot be overridden in constants='nrs' mode")
    return a, b


def _calibrated_alpha_beta(epsilon: float, delta: float, d: int, beta: float | None,
                           proxy: Callable[[float], float] | None) -> tuple[float, float]:
    if beta is not None:
        if not beta > 0:
            raise ValueError(f"beta must be positive, got {beta!r}")
        alpha = calibrated_alpha(float(epsilon), float(delta), float(beta), int(d))
        if alpha <= 0:
            raise ValueError(f"beta={beta} admits no alpha > 0 at epsilon={epsilon}, "
                             f"delta={delta}")
        return alpha, float(beta)
    if proxy is None:
        b = 0.02 * epsilon
        return calibrated_alpha(float(epsilon), float(delta), float(b), int(d)), b
    best = (math.inf, 0.0, 0.0)
    for frac in BETA_GRID:
        b = frac * epsilon
        a = calibrated_alpha(float(epsilon), float(delta), float(b), int(d))
        if a <= 0:
            continue
        score = proxy(b) / a
        if score < best[0]:
            best = (score, a, b)
    if best[1] <= 0:
        raise ValueError(f"no calibrated (alpha, beta) for epsilon={epsilon}, delta={delta}")
    return best[1], best[2]


#: the (α, β) rules of H§2.9 by name, each ``f(ε, δ, d, β or None, proxy or None)``
CONSTANTS: dict[str, Callable[[float, float, int, float | None,
                               Callable[[float], float] | None], tuple[float, float]]] = {
    "calibrated": _calibrated_alpha_beta,
    "nrs": _nrs_alpha_beta,
    "paper": _paper_alpha_beta,
}
CONSTANT_MODES = tuple(CONSTANTS)


def hlm_constants(epsilon: float, delta: float, d: int, mode: str = "calibrated",
                  beta: float | None = None,
                  proxy: Callable[[float], float] | None = None) -> tuple[float, float]:
    """``(α, β)`` for the smooth-sensitivity Gaussian (H§2.9).

    ``proxy(β) -> float`` is the data-independent ``S_proxy`` used to pick the default β
    in calibrated mode (minimise ``S_proxy(β)/α(β)`` over ``{0.005, ..., 0.1}·ε``);
    without it β defaults to ``0.02·ε``. A given ``beta`` is used as is.
    """
    if mode not in CONSTANTS:
        raise ValueError(f"constants must be one of {CONSTANT_MODES}, got {mode!r}")
    return CONSTANTS[mode](epsilon, delta, d, beta, proxy)


# =====================================================================================
# H§2.6 / H§2.7 smooth sensitivity
# =====================================================================================
def smooth_max(g_values: np.ndarray, beta: float) -> float:
    """``max_k e^{-βk} G(k)`` for ``G`` given at ``k = 0, 1, ..., len-1``."""
    g = np.asarray(g_values, dtype=float)
    k = np.arange(g.size)
    return float(np.max(np.exp(-beta * k) * g))


def g_balanced(z: float, n: int, T: float, radius: float, delta_tilde: int) -> np.ndarray:
    """``G(D, k)`` for ``k = 0..k_c`` (balanced, H§2.6); ``G(D, k) = 2R_c`` beyond.

    ``z = Z(D) = max_i ‖y_i − ȳ‖``, ``delta_tilde`` = Δ̃(D).
    """
    cap = 2.0 * radius
    K_b = math.floor(n / 4 - 1 - delta_tilde)
    k_c = max(K_b + 1, 1)
    g = np.full(k_c + 1, cap)
    if z < (1 - 2 / n) * T:  # case (a)
        g[0] = (T + z) / (n - 1)
    elif K_b >= 0:  # case (b) at k = 0
        g[0] = 2 * T / (n - delta_tilde)
    if K_b >= 1:
        k = np.arange(1, K_b + 1)
        g[1 : K_b + 1] = 2 * T / (n - k - delta_tilde)
    return np.minimum(g, cap)


def smooth_sensitivity_balanced(z: float, n: int, T: float, radius: float, beta: float,
                                delta_tilde: int) -> float:
    """β-smooth sensitivity ``S(D)`` of ``Clip(μ̂₀, R_c)``, balanced users (H§2.6)."""
    return smooth_max(g_balanced(z, n, T, radius, delta_tilde), beta)


def sorted_weight_prefix(w: np.ndarray) -> np.ndarray:
    """``W[j]`` = sum of the ``j`` smallest weights, ``j = 0..n``."""
    return np.r_[0.0, np.cumsum(np.sort(w))]


def h_imbalanced(w: np.ndarray, T: np.ndarray, Z: np.ndarray, k: int) -> float:
    """Repaired ``h(D, k) = top_k{w_i (T_i + Z_i)} / W_{≤ n−k}`` (H§2.7, decision H§6 A8)."""
    n = w.size
    if k <= 0:
        return 0.0
    terms = np.sort(w * (T + Z))[::-1]
    return float(terms[:k].sum() / sorted_weight_prefix(w)[n - k])


def g_imbalanced(w: np.ndarray, T: np.ndarray, Z: np.ndarray, radius: float,
                 delta_tilde: int, k0: int) -> np.ndarray:
    """``G(D, k)`` for ``k = 0..k_c`` (imbalanced, H§2.7); ``2R_c`` beyond.

    ``Z`` holds ``Z_i(D) = ‖y_i − ȳ_w‖``.
    """
    cap = 2.0 * radius
    n = w.size
    K_b = k0 - delta_tilde - 1
    k_c = max(K_b + 1, 1)
    g = np.full(k_c + 1, cap)
    h1 = h_imbalanced(w, T, Z, 1)
    W = sorted_weight_prefix(w)
    top = 2.0 * float(np.max(w * T))
    if h1 < float(np.min(T - Z)):  # case (a), strict (decision H§6 A5)
        g[0] = h1
    elif K_b >= 0:
        g[0] = top / W[n - delta_tilde - 1]
    if K_b >= 1:
        k = np.arange(1, K_b + 1)
        g[1 : K_b + 1] = top / W[n - delta_tilde - k - 1]
    return np.minimum(g, cap)


def smooth_sensitivity_imbalanced(w: np.ndarray, T: np.ndarray, Z: np.ndarray,
                                  radius: float, beta: float, delta_tilde: int,
                                  k0: int) -> float:
    """β-smooth sensitivity ``S(D)``, imbalanced users (H§2.7)."""
    return smooth_max(g_imbalanced(w, T, Z, radius, delta_tilde, k0), beta)
