"""Computable outlier surrogates Δ̃ of the Huber-loss mean, and which one HLM uses.

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats": HLM). Reference:
``docs/central-algorithms.md`` H§2.8 (computable outlier surrogates Δ̃, 1-Lipschitz with a
witness: the exact balanced 1-D count, the lattice and interval "quarter ball" counts,
the per-user radii of the imbalanced case with the fallback of item 4).

Every Δ̃ here is ``n - max{|S| : P(S)}`` for a hereditary, completable property ``P``
(H§2.8 construction principle), capped at ``K``: 1-Lipschitz by construction, which the
smooth sensitivity of :mod:`uldp.collector.central.smooth_sensitivity` (G2) rests on.
:data:`OUTLIER_SURROGATES` is the table behind ``HLMParams.outlier``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from uldp.collector.central.smooth_sensitivity import sorted_weight_prefix

__all__ = [
    "OUTLIER_METHODS",
    "OUTLIER_SURROGATES",
    "OutlierSurrogate",
    "balanced_1d_witness",
    "imbalanced_radii",
    "imbalanced_radii_ok",
    "outlier_count_balanced_1d",
    "outlier_count_intervals_1d",
    "outlier_count_lattice",
]


# =====================================================================================
# H§2.8 outlier surrogates Δ̃ (1-Lipschitz, with witness)
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
    """Exact Δ̃ for balanced users in d = 1 (H§2.8 item 1), ``O(n log² n)``.

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
    ``Z(D*) < T/2`` (H§2.8 R1). Among windows of ``s`` consecutive sorted points in
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
    """Δ̃ = n − max over lattice points c of #{i : ‖y_i − c‖ < ρ_i} (H§2.8 items 2/3).

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
        code = int(uniq[j])
        digits = []
        for jj in reversed(range(d)):
            m = int(span[jj] + width)
            digits.append(code % m)
            code //= m
        center = offset + (np.array(digits[::-1]) + lo_idx) * spacing
    dt = n - best
    dt = dt if cap is None else min(dt, cap)
    return (dt, center) if return_center else dt


def outlier_count_intervals_1d(y: np.ndarray, radii: np.ndarray | float,
                               cap: int | None = None, return_point: bool = False):
    """Δ̃ = n − max depth of the open intervals ``(y_i − ρ_i, y_i + ρ_i)`` (H§2.8 item 3).

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
    """The H§2.8 item 3 test for ``ρ_i = θ T_i`` (public quantities only)."""
    rho = theta * T
    rbar = float(np.sum(w * rho))
    terms = np.sort(w * (T + rho + rbar))[::-1]
    lhs = terms[:k0].sum() / sorted_weight_prefix(w)[w.size - k0]
    return bool(lhs < float(np.min(T - rho - rbar)))


def imbalanced_radii(w: np.ndarray, T: np.ndarray, k0: int) -> np.ndarray | None:
    """Per-user radii ``ρ_i = θ T_i`` with the largest θ ∈ (0, ½) passing the test (bisection).

    Returns None if no θ > 0 passes (then use the fallback Δ̃ ≡ n, H§2.8 item 4).
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



# =====================================================================================
# which surrogate HLM uses (HLMParams.outlier)
# =====================================================================================
@dataclass(frozen=True)
class OutlierSurrogate:
    """One choice of Δ̃ for HLM: ``balanced(y, T, cap)`` for equal sample sizes (cap
    ``n // 4``) and ``imbalanced(y, radii, k0)`` for the per-user radii of H§2.8 item 3 (cap
    ``k0``). ``needs_radii`` is False when the imbalanced path uses no radii at all.
    ``y`` is the (n, d) matrix of user means."""

    name: str
    balanced: Callable[[np.ndarray, float, int], int]
    imbalanced: Callable[[np.ndarray, np.ndarray, int], int]
    needs_radii: bool = True


def _balanced_exact(y: np.ndarray, T: float, cap: int) -> int:
    if y.shape[1] != 1:
        raise ValueError("outlier='exact' is only available for d = 1 "
                         "(docs/central-algorithms.md H§2.8)")
    return outlier_count_balanced_1d(y[:, 0], T, cap)


def _balanced_quarter_ball(y: np.ndarray, T: float, cap: int) -> int:
    d = y.shape[1]
    if d == 1:
        return outlier_count_intervals_1d(y[:, 0], T / 4, cap)
    return outlier_count_lattice(y, T / 4, T / (8 * math.sqrt(d)), cap)


def _balanced_auto(y: np.ndarray, T: float, cap: int) -> int:
    """Exact in 1-D, the lattice quarter ball otherwise."""
    if y.shape[1] == 1:
        return _balanced_exact(y, T, cap)
    return _balanced_quarter_ball(y, T, cap)


def _imbalanced_radii(y: np.ndarray, rho: np.ndarray, k0: int) -> int:
    d = y.shape[1]
    if d == 1:
        return outlier_count_intervals_1d(y[:, 0], rho, k0)
    rmin = float(rho.min())
    return outlier_count_lattice(y, np.minimum(rho, 4 * rmin), rmin / (2 * math.sqrt(d)), k0)


def _imbalanced_exact(_y: np.ndarray, _rho: np.ndarray, _k0: int) -> int:
    raise ValueError("outlier='exact' is only available for balanced users in d = 1")


#: ``"auto"`` (exact 1-D / lattice quarter ball / per-user radii), ``"exact"`` (balanced
#: d = 1 only), ``"quarter_ball"``, ``"none"`` (Δ̃ ≡ its cap: n, or k0)
OUTLIER_SURROGATES: dict[str, OutlierSurrogate] = {s.name: s for s in (
    OutlierSurrogate("auto", _balanced_auto, _imbalanced_radii),
    OutlierSurrogate("exact", _balanced_exact, _imbalanced_exact),
    OutlierSurrogate("quarter_ball", _balanced_quarter_ball, _imbalanced_radii),
    OutlierSurrogate("none", lambda y, _T, _cap: y.shape[0], lambda _y, _rho, k0: k0,
                     needs_radii=False),
)}
OUTLIER_METHODS = tuple(OUTLIER_SURROGATES)
