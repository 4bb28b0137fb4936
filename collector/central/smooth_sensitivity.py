"""Smooth sensitivity, outlier counts and (α, β) constants for the HLM estimator.

Spec: ``huber_user_level_dp.md`` §2.5 (smooth-sensitivity framework), §2.6 (balanced
``G``/``S``), §2.7 (imbalanced ``G``/``S`` with the repaired ``h``, decision A8), §2.8
(computable outlier surrogates Δ̃), §2.9 (constants: ``"calibrated"``, ``"nrs"``,
``"paper"``) and decisions A1–A6, A18.

Everything here is a pure function of numpy arrays and public parameters, so the tests
can check each piece against brute force (spec §7 items 2–4).

Privacy building blocks (Nissim–Raskhodnikova–Smith, as used by the paper, Thm 1/4):

* ``G(D, k)`` with (G1) ``LS(D) <= G(D, 0)`` and (G2) ``G(D, k) <= G(D', k+1)`` for
  user-level neighbours; ``S(D) = max_k e^{-βk} G(D, k)`` is then a β-smooth upper bound
  of the local sensitivity of ``Clip(μ̂₀, R_c)``. Every ``G`` is capped at ``2 R_c``
  (decision A3), which makes (G2) unconditional.
* (G2) rests on the outlier surrogate Δ̃ being 1-Lipschitz with a witness (§2.8 R1/R2);
  every Δ̃ here is ``n - max{|S| : P(S)}`` for a hereditary, completable property ``P``
  (§2.8 construction principle), capped at ``K`` — 1-Lipschitz by construction.
* The Gaussian ``N(0, (S/α)² I_d)`` is (ε, δ)-DP when the worst-case hockey-stick
  divergence between ``N(0, I)`` and ``N(a e₁, s² I)``, ``s ∈ [e^{-β}, e^{β}]``,
  ``|a| <= α min(1, s)``, is at most δ (§2.9). ``calibrated_alpha`` computes the largest
  such α numerically; ``"nrs"`` is the NRS d>1 formula; ``"paper"`` is eq. 3 verbatim,
  which for d = 1 does **not** meet the nominal δ (spec §2.9 [check]).
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np
from scipy import stats

__all__ = [
    "CONSTANT_MODES",
    "balanced_1d_witness",
    "calibrated_alpha",
    "g_balanced",
    "g_imbalanced",
    "h_imbalanced",
    "hlm_constants",
    "hockey_stick_worst",
    "imbalanced_radii",
    "imbalanced_radii_ok",
    "nrs_constants",
    "outlier_count_balanced_1d",
    "outlier_count_intervals_1d",
    "outlier_count_lattice",
    "paper_constants",
    "smooth_max",
    "smooth_sensitivity_balanced",
    "smooth_sensitivity_imbalanced",
]

CONSTANT_MODES = ("calibrated", "nrs", "paper")


# =====================================================================================
# §2.9 constants (α, β)
# =====================================================================================
def paper_constants(epsilon: float, delta: float, d: int) -> tuple[float, float]:
    """The paper's eq. 3 / (7) ``(α, β)``. For d = 1 the nominal δ is NOT met (§2.9)."""
    if d == 1:
        return epsilon / math.sqrt(math.log(1 / delta)), epsilon / (2 * math.log(1 / delta))
    return nrs_constants(epsilon, delta, d)


def nrs_constants(epsilon: float, delta: float, d: int) -> tuple[float, float]:
    """NRS's d > 1 Gaussian pair, used for every d (valid, conservative; spec §2.9)."""
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
    under p, s²χ²_{d−1} under q), so each slice is a chi-square tail (spec §2.9).
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
    """Largest α (bisection, 1e-4 relative) with ``hockey_stick_worst <= δ`` (§2.9).

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


BETA_GRID = tuple(round(0.005 * k, 3) for k in range(1, 21))  # × ε, spec §2.9


def hlm_constants(epsilon: float, delta: float, d: int, mode: str = "calibrated",
                  beta: float | None = None, proxy=None) -> tuple[float, float]:
    """``(α, β)`` for the smooth-sensitivity Gaussian (spec §2.9).

    ``proxy(β) -> float`` is the data-independent ``S_proxy`` used to pick the default β
    in calibrated mode (minimise ``S_proxy(β)/α(β)`` over ``{0.005, ..., 0.1}·ε``);
    without it β defaults to ``0.02·ε``. A given ``beta`` is used as is.
    """
    if mode not in CONSTANT_MODES:
        raise ValueError(f"constants must be one of {CONSTANT_MODES}, got {mode!r}")
    if mode == "paper":
        if d == 1:
            warnings.warn(
                "constants='paper' for d=1 does not deliver the nominal (epsilon, delta): "
                "at eps=1, delta=1e-5 the true delta is ~1.3e-3 (spec §2.9); reproduction only",
                RuntimeWarning, stacklevel=2)
        a, b = paper_constants(epsilon, delta, d)
        return a, (b if beta is None else beta)
    if mode == "nrs":
        a, b = nrs_constants(epsilon, delta, d)
        if beta is not None and beta != b:
            raise ValueError("beta cannot be overridden in constants='nrs' mode")
        return a, b
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


# =====================================================================================
# §2.6 / §2.7 smooth sensitivity
# =====================================================================================
def smooth_max(g_values: np.ndarray, beta: float) -> float:
    """``max_k e^{-βk} G(k)`` for ``G`` given at ``k = 0, 1, ..., len-1``."""
    g = np.asarray(g_values, dtype=float)
    k = np.arange(g.size)
    return float(np.max(np.exp(-beta * k) * g))


def g_balanced(z: float, n: int, T: float, radius: float, delta_tilde: int) -> np.ndarray:
    """``G(D, k)`` for ``k = 0..k_c`` (balanced, spec §2.6); ``G(D, k) = 2R_c`` beyond.

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
    """β-smooth sensitivity ``S(D)`` of ``Clip(μ̂₀, R_c)``, balanced users (spec §2.6)."""
    return smooth_max(g_balanced(z, n, T, radius, delta_tilde), beta)


def _sorted_weight_prefix(w: np.ndarray) -> np.ndarray:
    """``W[j]`` = sum of the ``j`` smallest weights, ``j = 0..n``."""
    return np.r_[0.0, np.cumsum(np.sort(w))]


def h_imbalanced(w: np.ndarray, T: np.ndarray, Z: np.ndarray, k: int) -> float:
    """Repaired ``h(D, k) = top_k{w_i (T_i + Z_i)} / W_{≤ n−k}`` (spec §2.7, decision A8)."""
    n = w.size
    if k <= 0:
        return 0.0
    terms = np.sort(w * (T + Z))[::-1]
    return float(terms[:k].sum() / _sorted_weight_prefix(w)[n - k])


def g_imbalanced(w: np.ndarray, T: np.ndarray, Z: np.ndarray, radius: float,
                 delta_tilde: int, k0: int) -> np.ndarray:
    """``G(D, k)`` for ``k = 0..k_c`` (imbalanced, spec §2.7); ``2R_c`` beyond.

    ``Z`` holds ``Z_i(D) = ‖y_i − ȳ_w‖``.
    """
    cap = 2.0 * radius
    n = w.size
    K_b = k0 - delta_tilde - 1
    k_c = max(K_b + 1, 1)
    g = np.full(k_c + 1, cap)
    h1 = h_imbalanced(w, T, Z, 1)
    W = _sorted_weight_prefix(w)
    top = 2.0 * float(np.max(w * T))
    if h1 < float(np.min(T - Z)):  # case (a), strict (decision A5)
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
    """β-smooth sensitivity ``S(D)``, imbalanced users (spec §2.7)."""
    return smooth_max(g_imbalanced(w, T, Z, radius, delta_tilde, k0), beta)


# =====================================================================================
# §2.8 outlier surrogates Δ̃ (1-Lipschitz, with witness)
# =====================================================================================
def _balanced_1d_tables(ys: np.ndarray, T: float):
    half = T / 2
    b = np.unique(np.r_[ys - half, ys + half])
    lo, hi = b[:-1], b[1:]
    q = 0.5 * (lo + hi)
    L = np.searchsorted(ys, q - half, side="right")  # first i with y_i > q − T/2
    R = np.searchsorted(ys, q + half, side="left")  # window = [L, R)
    return lo, hi, L, R


def _balanced_1d_feasible(s: int, n: int, T: float, P: np.ndarray, lo, hi, L, R):
    """Index of an elementary interval where a kept set of size ``s`` is completable."""
    c = (n - s) * T / (2 * s)
    ok = np.flatnonzero(s <= R - L)
    if ok.size == 0:
        return None
    Lk, Rk = L[ok], R[ok]
    ell = (P[Lk + s] - P[Lk]) / s
    r = (P[Rk] - P[Rk - s]) / s
    good = np.maximum(lo[ok], ell - c) < np.minimum(hi[ok], r + c)
    idx = np.flatnonzero(good)
    return None if idx.size == 0 else int(ok[idx[0]])


def _balanced_1d_max_kept(y: np.ndarray, T: float) -> tuple[int, int | None, tuple]:
    ys = np.sort(np.asarray(y, dtype=float))
    n = ys.size
    if float(np.max(np.abs(ys - ys.mean()))) < T / 2:
        return n, None, ()
    P = np.r_[0.0, np.cumsum(ys)]
    tables = _balanced_1d_tables(ys, T)
    lo_s, hi_s = 1, n - 1  # s = 1 is always feasible
    while lo_s < hi_s:
        mid = (lo_s + hi_s + 1) // 2
        if _balanced_1d_feasible(mid, n, T, P, *tables) is not None:
            lo_s = mid
        else:
            hi_s = mid - 1
    t = _balanced_1d_feasible(lo_s, n, T, P, *tables)
    return lo_s, t, (ys, P, tables)


def outlier_count_balanced_1d(y: np.ndarray, T: float, cap: int | None = None) -> int:
    """Exact Δ̃ for balanced users in d = 1 (spec §2.8 item 1), ``O(n log² n)``.

    Δ̃ = n − (largest kept set completable into ``D*`` with ``Z(D*) < T/2``), optionally
    capped at ``cap`` (``⌊n/4⌋`` in HLM). Equals the paper's Δ exactly.
    """
    y = np.asarray(y, dtype=float).reshape(-1)
    s, _, _ = _balanced_1d_max_kept(y, T)
    dt = y.size - s
    return dt if cap is None else min(dt, cap)


def balanced_1d_witness(y: np.ndarray, T: float) -> tuple[np.ndarray, float]:
    """Witness for ``outlier_count_balanced_1d``: (kept mask over ``y``, replacement value).

    Replacing every non-kept user's mean by the returned value gives ``D*`` with
    ``Z(D*) < T/2`` (spec §2.8 R1). Among windows of ``s`` consecutive sorted points in
    the feasible block, consecutive means differ by < T/s <= 2c_s, so one lies within
    ``c_s`` of the chosen centre ``q``.
    """
    y = np.asarray(y, dtype=float).reshape(-1)
    n = y.size
    s, t, extra = _balanced_1d_max_kept(y, T)
    if s == n:
        return np.ones(n, dtype=bool), float(y.mean())
    _ys, P, (lo, hi, L, R) = extra
    order = np.argsort(y, kind="stable")
    c = (n - s) * T / (2 * s)
    Lt, Rt = int(L[t]), int(R[t])
    ell = (P[Lt + s] - P[Lt]) / s
    r = (P[Rt] - P[Rt - s]) / s
    q = 0.5 * (max(lo[t], ell - c) + min(hi[t], r + c))
    starts = np.arange(Lt, Rt - s + 1)
    means = (P[starts + s] - P[starts]) / s
    j = int(starts[np.argmin(np.abs(means - q))])
    kept = np.zeros(n, dtype=bool)
    kept[order[j : j + s]] = True
    mean_s = (P[j + s] - P[j]) / s
    v = (n * q - s * mean_s) / (n - s)
    return kept, float(v)


def outlier_count_lattice(y: np.ndarray, radii: np.ndarray | float, spacing: float,
                          cap: int | None = None, offset: float = 0.0,
                          return_center: bool = False, chunk_cells: int = 2_000_000):
    """Δ̃ = n − max over lattice points c of #{i : ‖y_i − c‖ < ρ_i} (spec §2.8 items 2/3).

    The lattice ``offset + spacing·Z^d`` is fixed and data independent; the property
    "all kept points lie within their radius of one common lattice point" is hereditary
    and completable (replace the others by ``c``), so Δ̃ is 1-Lipschitz with a witness.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim == 1:
        y = y[:, None]
    n, d = y.shape
    rho = np.broadcast_to(np.asarray(radii, dtype=float), (n,))
    K = math.ceil(float(rho.max()) / spacing) + 1
    rng1 = np.arange(-K, K + 1)
    offs = np.stack(np.meshgrid(*([rng1] * d), indexing="ij"), axis=-1).reshape(-1, d)
    # y/h − base lies in [0, 1)^d: keep offsets whose distance to that cube is < ρ_max/h
    gap = np.maximum(0, np.maximum(-offs, offs - 1))
    offs = offs[np.sqrt((gap.astype(float) ** 2).sum(axis=1)) < float(rho.max()) / spacing]
    base = np.floor((y - offset) / spacing).astype(np.int64)
    width = 2 * K + 3
    lo_idx = base.min(axis=0) - K - 1
    span = base.max(axis=0) - lo_idx + K + 2
    keys_all = []
    step = max(1, chunk_cells // offs.shape[0])
    for start in range(0, n, step):
        b = base[start : start + step]
        cand = b[:, None, :] + offs[None, :, :]
        pts = offset + cand * spacing
        dist2 = ((pts - y[start : start + step, None, :]) ** 2).sum(axis=-1)
        hit = dist2 < rho[start : start + step, None] ** 2
        rel = cand[hit] - lo_idx
        key = np.zeros(rel.shape[0], dtype=np.int64)
        for j in range(d):
            key = key * int(span[j] + width) + rel[:, j]
        keys_all.append(key)
    keys = np.concatenate(keys_all) if keys_all else np.zeros(0, np.int64)
    if keys.size == 0:
        best, center = 0, None
    else:
        uniq, counts = np.unique(keys, return_counts=True)
        j = int(np.argmax(counts))
        best = int(counts[j])
        key = int(uniq[j])
        rel = []
        for jj in reversed(range(d)):
            m = int(span[jj] + width)
            rel.append(key % m)
            key //= m
        center = offset + (np.array(rel[::-1]) + lo_idx) * spacing
    dt = n - best
    dt = dt if cap is None else min(dt, cap)
    return (dt, center) if return_center else dt


def outlier_count_intervals_1d(y: np.ndarray, radii: np.ndarray | float,
                               cap: int | None = None, return_point: bool = False):
    """Δ̃ = n − max depth of the open intervals ``(y_i − ρ_i, y_i + ρ_i)`` (spec §2.8 item 3).

    Event sweep with closings processed before openings at equal coordinates. Also the
    balanced "quarter ball" surrogate in 1-D with ``ρ_i = T/4``.
    """
    y = np.asarray(y, dtype=float).reshape(-1)
    n = y.size
    rho = np.broadcast_to(np.asarray(radii, dtype=float), (n,))
    coords = np.r_[y - rho, y + rho]
    kinds = np.r_[np.ones(n, np.int64), np.zeros(n, np.int64)]  # 1 = open, 0 = close
    order = np.lexsort((kinds, coords))
    steps = np.where(kinds[order] == 1, 1, -1)
    depth = np.cumsum(steps)
    j = int(np.argmax(depth))
    best = int(depth[j])
    dt = n - best
    dt = dt if cap is None else min(dt, cap)
    if not return_point:
        return dt
    # deepest open region starts at coords[order[j]] and ends at the next event
    left = coords[order[j]]
    right = coords[order[j + 1]] if j + 1 < order.size else left
    return dt, 0.5 * (left + right)


def imbalanced_radii_ok(theta: float, w: np.ndarray, T: np.ndarray, k0: int) -> bool:
    """The §2.8 item 3 test for ``ρ_i = θ T_i`` (public quantities only)."""
    rho = theta * T
    rbar = float(np.sum(w * rho))
    terms = np.sort(w * (T + rho + rbar))[::-1]
    lhs = terms[:k0].sum() / _sorted_weight_prefix(w)[w.size - k0]
    return bool(lhs < float(np.min(T - rho - rbar)))


def imbalanced_radii(w: np.ndarray, T: np.ndarray, k0: int) -> np.ndarray | None:
    """Per-user radii ``ρ_i = θ T_i`` with the largest θ ∈ (0, ½) passing the test (bisection).

    Returns None if no θ > 0 passes (then use the fallback Δ̃ ≡ n, spec §2.8 item 4).
    """
    if k0 <= 0:
        return 0.5 * T
    lo, hi = 0.0, 0.5
    if not imbalanced_radii_ok(1e-9, w, T, k0):
        return None
    lo = 1e-9
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if imbalanced_radii_ok(mid, w, T, k0):
            lo = mid
        else:
            hi = mid
    return lo * T
