"""The Huber-loss location of user means: objective and exact/iterative minimiser.

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats": HLM). Reference:
``docs/central-algorithms.md`` H§2.2 (the radial Huber objective ``F(s) = Σ_i w_i φ_i(s, y_i)``)
and H§2.4 (the solver: rule 1, exact when every user is in the quadratic zone; rule 3, the
exact 1-D minimiser, decision H§6 A17; rule 4, IRLS to relative ``1e-12`` in d ≥ 2, decision
A16). The privacy analysis of :mod:`uldp.collector.central.huber` assumes the exact
minimiser; nothing here is random.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["as_2d", "huber_gradient", "huber_minimize", "huber_objective"]


def as_2d(y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    return y[:, None] if y.ndim == 1 else y


def huber_objective(s: np.ndarray | float, y: np.ndarray, w: np.ndarray,
                    T: np.ndarray | float) -> float:
    """``F(s) = Σ_i w_i φ_i(s, y_i)`` with the radial Huber loss (H§2.2)."""
    Y = as_2d(y)
    s = np.asarray(s, dtype=float).reshape(1, -1)
    r = np.linalg.norm(s - Y, axis=1)
    T = np.broadcast_to(np.asarray(T, dtype=float), r.shape)
    phi = np.where(r <= T, 0.5 * r**2, T * r - 0.5 * T**2)
    return float(np.sum(np.asarray(w) * phi))


def huber_gradient(s: np.ndarray | float, y: np.ndarray, w: np.ndarray,
                   T: np.ndarray | float) -> np.ndarray:
    """``∇F(s) = Σ_i w_i (s − y_i) min{1, T_i/‖s − y_i‖}``."""
    Y = as_2d(y)
    s = np.asarray(s, dtype=float).reshape(1, -1)
    diff = s - Y
    r = np.linalg.norm(diff, axis=1)
    T = np.broadcast_to(np.asarray(T, dtype=float), r.shape)
    fac = np.where(r > T, T / np.where(r > 0, r, 1.0), 1.0)
    return (np.asarray(w)[:, None] * fac[:, None] * diff).sum(axis=0)


def _fprime_1d(s: float, y: np.ndarray, w: np.ndarray, T: np.ndarray) -> float:
    return float(np.sum(w * np.clip(s - y, -T, T)))


def _huber_1d_exact(y: np.ndarray, w: np.ndarray, T: np.ndarray) -> float:
    """Exact 1-D minimiser (H§2.4 rule 3): zero of the piecewise-linear ``F'``.

    ``F'`` is continuous and non-decreasing with breakpoints ``y_i ± T_i``; binary search
    the first breakpoint with ``F' >= 0`` and solve the linear piece; on a flat zero
    interval return its midpoint (decision H§6 A17).
    """
    b = np.sort(np.r_[y - T, y + T])

    def first(pred) -> int:  # first index j with pred(F'(b_j)), F'(b_last) > 0 always
        lo, hi = 0, b.size - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(_fprime_1d(b[mid], y, w, T)):
                hi = mid
            else:
                lo = mid + 1
        return lo

    j = first(lambda v: v >= 0)
    fj = _fprime_1d(b[j], y, w, T)
    if fj == 0:
        k = first(lambda v: v > 0) - 1
        return float(0.5 * (b[j] + b[max(k, j)]))
    if j == 0:
        return float(b[0])
    f0 = _fprime_1d(b[j - 1], y, w, T)
    if fj == f0:
        return float(b[j])
    return float(b[j - 1] - f0 * (b[j] - b[j - 1]) / (fj - f0))


def _huber_irls(Y: np.ndarray, w: np.ndarray, T: np.ndarray, c0: np.ndarray,
                tol: float, max_iter: int) -> np.ndarray:
    """Modified Weiszfeld / IRLS (H§2.4): majorise–minimise, ``F`` non-increasing."""
    c = c0.copy()
    for _ in range(max_iter):
        r = np.linalg.norm(c[None, :] - Y, axis=1)
        fac = np.where(r > T, T / np.where(r > 0, r, 1.0), 1.0)
        om = w * fac
        c_new = (om[:, None] * Y).sum(axis=0) / om.sum()
        if np.linalg.norm(c_new - c) < tol:
            return c_new
        c = c_new
    warnings.warn(f"Huber IRLS did not converge in {max_iter} iterations", RuntimeWarning,
                  stacklevel=3)
    return c


def huber_minimize(y: np.ndarray, w: np.ndarray, T: np.ndarray | float,
                   max_iter: int = 10_000) -> np.ndarray | float:
    """``μ̂₀ = argmin_s Σ_i w_i φ_i(s, y_i)`` (H§2.4).

    ``y`` is (n,) or (n, d); ``w`` sums to one; ``T`` is a scalar or per-user array.
    Returns a float for 1-D ``y`` and an array (d,) otherwise.
    """
    one_d = np.asarray(y).ndim == 1
    Y = as_2d(y)
    n = Y.shape[0]
    w = np.asarray(w, dtype=float)
    Tn = np.broadcast_to(np.asarray(T, dtype=float), (n,)).copy()
    ybar = (w[:, None] * Y).sum(axis=0) / w.sum()
    if float(np.max(np.linalg.norm(Y - ybar, axis=1) - Tn)) <= 0:  # rule 1: exact
        return float(ybar[0]) if one_d else ybar
    if Y.shape[1] == 1:
        s = _huber_1d_exact(Y[:, 0], w, Tn)
        return s if one_d else np.array([s])
    tol = 1e-12 * max(1.0, float(Tn.max()))
    return _huber_irls(Y, w, Tn, ybar, tol, max_iter)
