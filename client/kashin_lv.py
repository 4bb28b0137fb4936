"""The Lyubarskii–Vershynin iteration in its canonical order (``docs/device-protocol.md``
§12.5): the device path of :func:`uldp.client.kashin.kashin_coefficients`.

Algorithm: ``docs/algorithms.md`` §3.6, [D8], [D9]. Every floating-point operation is a basic IEEE
operation in a specified order, so any language computes the same bits. Per sample ``x``
(``d`` finite doubles) with frame ``U`` (N×d), ``δ``, ``tol`` and ``max_iter``:

1. ``x = 0``: the coefficients are 0. Otherwise ``e`` = the exponent of ``max|x_j|``
   (``max|x_j| = m·2^e``, ``m ∈ [1/2, 1)``) and ``x' = x · 2^-e`` (exact; the map is
   positively homogeneous, this only keeps every square away from overflow and underflow).
2. ``‖x'‖`` (canonical norm), ``thr = tol · ‖x'‖``, ``inv = 1 / √(δ · N)``,
   ``b = U x'``, ``β = ‖x'‖``, ``a = 0``, ``k = 0``.
3. While ``β > thr`` and ``k < max_iter``: ``M = β · inv``; ``c = clip(b, −M, M)``;
   ``a = a + c``; ``b = U (Uᵀ (b − c))``; ``β = ‖b‖``; ``k = k + 1``.
4. ``a = a + b`` (the exact final correction ``a += U v``), result ``a · 2^e``.

Products with ``U`` (:func:`analysis`, :func:`synthesis`):

* Gaussian frame: ``(U x)_c = seq_sum_j(U[c, j] · x_j)``, ``(Uᵀ r)_j = seq_sum_c(U[c, j] · r_c)``;
* Hadamard frame (signs ``ξ``, columns ``S``): ``z = 0^N, z[S_j] = x_j``,
  ``(U x)_c = ξ_c · (fwht(z)_c / √N)``; ``w = fwht(ξ ⊙ r)``, ``(Uᵀ r)_j = w[S_j] / √N``, with
  the canonical butterflies of ``uldp.client.hadamard`` and ``√N`` correctly rounded.

The batch form here vectorizes over samples (rows) without changing any per-sample order.
"""

from __future__ import annotations

import math

import numpy as np

from uldp.client.hadamard import fwht_columns
from uldp.client.numerics import norms

__all__ = ["FrameArrays", "analysis", "lv_coefficients", "synthesis"]


class FrameArrays:
    """What the canonical products need of a frame: ``U`` (Gaussian) or ``ξ`` and ``S``."""

    def __init__(self, N: int, d: int, U: np.ndarray | None = None,
                 signs: np.ndarray | None = None, cols: np.ndarray | None = None) -> None:
        self.N, self.d, self.U, self.signs, self.cols = N, d, U, signs, cols
        self.root = math.sqrt(N)


def _fwht_rows(Z: np.ndarray) -> np.ndarray:
    """Canonical FWHT of every row of ``Z`` (S, N)."""
    return np.ascontiguousarray(fwht_columns(np.ascontiguousarray(Z.T), kron=False).T)


def analysis(f: FrameArrays, X: np.ndarray) -> np.ndarray:
    """``U x`` for every row of ``X`` (S, d) → (S, N), canonical order."""
    S = X.shape[0]
    if f.U is not None:
        acc = np.zeros((S, f.N))
        for j in range(f.d):
            acc = acc + f.U[None, :, j] * X[:, j:j + 1]
        return acc
    assert f.signs is not None and f.cols is not None
    Z = np.zeros((S, f.N))
    Z[:, f.cols] = X
    return f.signs[None, :] * (_fwht_rows(Z) / f.root)


def synthesis(f: FrameArrays, R: np.ndarray) -> np.ndarray:
    """``Uᵀ r`` for every row of ``R`` (S, N) → (S, d), canonical order."""
    S = R.shape[0]
    if f.U is not None:
        acc = np.zeros((S, f.d))
        for c in range(f.N):
            acc = acc + f.U[None, c, :] * R[:, c:c + 1]
        return acc
    assert f.signs is not None and f.cols is not None
    W = _fwht_rows(f.signs[None, :] * R)
    return W[:, f.cols] / f.root


def lv_coefficients(f: FrameArrays, X: np.ndarray, delta: float, max_iter: int,
                    tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients (S, N) and iteration counts (S,) of the rows of finite ``X`` (S, d)."""
    S = X.shape[0]
    A_out = np.zeros((S, f.N))
    iters = np.zeros(S, dtype=np.int64)
    amax = np.abs(X).max(axis=1, initial=0.0)
    idx = np.flatnonzero(amax > 0)
    if idx.size == 0:
        return A_out, iters
    e = np.frexp(amax[idx])[1].astype(np.int64)
    Xs = np.ldexp(X[idx], -e[:, None])
    xn = norms(Xs)
    thr = tol * xn
    inv = 1.0 / math.sqrt(delta * f.N)
    B = analysis(f, Xs)
    A = np.zeros_like(B)
    beta = xn.copy()
    live = np.arange(idx.size)
    k = 0
    while True:
        done = (beta[live] <= thr[live]) | (k >= max_iter)
        fin = live[done]
        A[fin] = A[fin] + B[fin]
        iters[idx[fin]] = k
        live = live[~done]
        if live.size == 0:
            break
        M = (beta[live] * inv)[:, None]
        C = np.clip(B[live], -M, M)
        A[live] = A[live] + C
        B[live] = analysis(f, synthesis(f, B[live] - C))
        beta[live] = norms(B[live])
        k += 1
    A_out[idx] = np.ldexp(A, e[:, None])
    return A_out, iters
