"""Canonical float64 arithmetic of the device computation (``docs/device-protocol.md`` §12).

The report of one device must be the same integers in every SDK (Python, TypeScript, ...)
for the same task, dataset and keystream key. Integers and the exact samplers already are;
this module pins down the floating-point part of the *statistic*:

* only IEEE-754 binary64 operations that are correctly rounded everywhere — ``+ − × ÷`` and
  ``√`` — evaluated in one specified order, round to nearest even, no fused multiply-add;
* sums are **sequential**, left to right in index order, starting from ``+0.0``
  (:func:`seq_sum`; numpy's ``sum`` is pairwise, BLAS reassociates freely);
* norms scale by the largest magnitude first (:func:`norms`), so finite input never
  overflows;
* the two transcendental functions a device needs — ``ln`` for the Gaussian Kashin frame
  and ``exp`` for the logistic gradient — are *defined* here by a fixed sequence of those
  basic operations (:func:`ln`, :func:`exp`), so they are bit-identical in every language
  (they are accurate to ~1 ulp, which is all a frame or a gradient needs).

The single-device path (``uldp.client.tasks.compute_report``) runs in *canonical mode*
(:func:`canonical`): every kind then uses only the functions above. Batches of many users
(fleet simulations) may use faster BLAS/Kronecker kernels for the Hadamard transform and the
Kashin iteration; those agree with the canonical values up to rounding (see the protocol
document for the measured bounds), never in distribution.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

__all__ = ["canonical", "exact", "exp", "ln", "norms", "radial", "scaled_norms", "seq_sum",
           "uniform_pm1"]

_EXACT: ContextVar[bool] = ContextVar("uldp_canonical_numerics", default=False)


def exact() -> bool:
    """True inside :func:`canonical` (the single-device path)."""
    return _EXACT.get()


@contextmanager
def canonical(on: bool = True) -> Iterator[None]:
    """Run the enclosed computation in canonical mode (or explicitly not, ``on=False``)."""
    token = _EXACT.set(bool(on))
    try:
        yield
    finally:
        _EXACT.reset(token)


_CHUNK = 1 << 21  # elements per contiguous block (bounds the temporary memory)


def _reduce_is_sequential() -> bool:
    """numpy reduces a C-contiguous ``(L, R)`` array over axis 0 row by row (sequential per
    column) when ``R >= 2``: pairwise summation only runs along the innermost axis. Checked
    once on data where any reassociation shows; if a numpy ever does otherwise, the slower
    ``add.accumulate`` path is used instead."""
    col = np.array([1e16, 1.0, -1e16, 1.0, 3.0, -1.0] * 50)
    for R in (2, 3, 9):
        X = np.ascontiguousarray(np.repeat(col[:, None], R, axis=1))
        X[::7, 1] *= -0.5
        want = np.add.accumulate(X, axis=0)[-1]
        if not np.array_equal(np.add.reduce(X, axis=0), want):
            return False
    return True


_REDUCE_SEQUENTIAL = _reduce_is_sequential()


def seq_sum(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Sequential sum along ``axis``: ``s = +0.0; s = s + x_0; s = s + x_1; ...``.

    Computed as a reduction over the outer axis of a C-contiguous ``(L, R)`` array (row by
    row, see :func:`_reduce_is_sequential`) or with ``np.add.accumulate`` (sequential by
    definition: it outputs every prefix). Both start from ``x_0`` instead of ``0.0 + x_0``;
    the two differ only in the sign of a zero result, which ``+ 0.0`` maps to ``+0.0`` as
    the canonical sum (which is never ``-0.0``) has it.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return _seq_sum(np.moveaxis(np.asarray(x, dtype=np.float64), axis, 0))


def _seq_sum(x: np.ndarray) -> np.ndarray:
    L, rest = x.shape[0], x.shape[1:]
    if L == 0:
        return np.zeros(rest)
    x2 = x.reshape(L, -1)
    R = x2.shape[1]
    if R == 1 or not _REDUCE_SEQUENTIAL:
        return (np.add.accumulate(x2, axis=0)[-1] + 0.0).reshape(rest)
    if x2.flags.c_contiguous:
        return (np.add.reduce(x2, axis=0) + 0.0).reshape(rest)
    out = np.empty(R)
    step = max(2, _CHUNK // L)
    for c0 in range(0, R, step):
        block = np.ascontiguousarray(x2[:, c0:c0 + step])
        if block.shape[1] == 1:
            out[c0:c0 + 1] = np.add.accumulate(block, axis=0)[-1]
        else:
            out[c0:c0 + step] = np.add.reduce(block, axis=0)
    return (out + 0.0).reshape(rest)


def scaled_norms(x: np.ndarray, ord: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """``(a, ν)`` with ``‖x‖ = ν · a`` for the rows of ``x`` (last axis), canonical:
    ``a = max_j |x_j|``; ``y_j = x_j / a`` (``a = 0``: ``y = x``); ``ν = √seq_sum(y_j · y_j)``
    (ℓ2, ``ord=2``) or ``ν = seq_sum(|y_j|)`` (ℓ1, ``ord=1``). ``ν`` never overflows."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[-1] == 0:
        zero = np.zeros(x.shape[:-1])
        return zero, zero.copy()
    a = np.abs(x).max(axis=-1)
    y = x / np.where(a > 0, a, 1.0)[..., None]
    if ord == 2:
        return a, np.sqrt(seq_sum(y * y, axis=-1))
    if ord == 1:
        return a, seq_sum(np.abs(y), axis=-1)
    raise ValueError(f"ord must be 1 or 2, got {ord!r}")


def norms(x: np.ndarray, ord: int = 2) -> np.ndarray:
    """ℓ2 / ℓ1 norms of the rows of ``x``: ``ν · a`` of :func:`scaled_norms` (+inf only when
    the norm itself exceeds the largest double)."""
    a, nu = scaled_norms(x, ord)
    with np.errstate(over="ignore"):
        return nu * a


def radial(x: np.ndarray, radius: float, ord: int = 2) -> np.ndarray:
    """Rows of ``x`` projected onto the ℓ_ord ball of ``radius`` (canonical): a row with
    ``ν · a <= radius`` is unchanged; otherwise it is ``x_j · f`` with
    ``f = (radius / a) / ν`` (no overflow: ``a`` and ``ν`` are finite)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    a, nu = scaled_norms(x, ord)
    with np.errstate(over="ignore"):
        over = nu * a > radius
    if not over.any():
        return x
    f = np.ones_like(a)
    f[over] = (radius / a[over]) / nu[over]
    return np.where(over[..., None], x * f[..., None], x)


# ---- ln and exp from basic operations ---------------------------------------------------
LN2 = 0.6931471805599453  # the double nearest ln 2
LN2_HI = 6.93147180369123816490e-01  # fdlibm's split: k·LN2_HI is exact for |k| < 2^20
LN2_LO = 1.90821492927058770002e-10
INV_LN2 = 1.4426950408889634  # the double nearest 1/ln 2
SQRT_HALF = 0.7071067811865476  # the double nearest √½
_LN_COEF = [1.0 / (2 * k + 1) for k in range(12)]  # atanh series 1, 1/3, 1/5, ..., 1/23
_EXP_COEF = [1.0 / math.factorial(j) for j in range(15)]  # 1/j!, j = 0..14 (exact j!)


def ln(x: np.ndarray) -> np.ndarray:
    """Natural logarithm of finite ``x > 0`` from basic operations (bit-exact everywhere).

    ``x = m · 2^e`` with ``m ∈ [1/2, 1)`` (exact); if ``m < SQRT_HALF`` then ``m = 2m``,
    ``e = e − 1``; ``t = (m − 1) / (m + 1)``, ``t2 = t · t``; Horner
    ``p = c_11; p = p · t2 + c_k`` for ``k = 10 … 0`` with ``c_k = 1 / (2k + 1)``; the
    result is ``e · LN2 + (2 · t) · p`` (``ln m = 2 atanh t``, |t| ≤ 0.172).
    """
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(x)
    small = m < SQRT_HALF
    m = np.where(small, m * 2.0, m)
    ef = (e - small.astype(e.dtype)).astype(np.float64)
    t = (m - 1.0) / (m + 1.0)
    t2 = t * t
    p = np.full(t.shape, _LN_COEF[-1])
    for c in reversed(_LN_COEF[:-1]):
        p = p * t2 + c
    return ef * LN2 + (2.0 * t) * p


def exp(x: np.ndarray) -> np.ndarray:
    """``e^x`` for finite ``|x| ≤ 700`` from basic operations (bit-exact everywhere).

    ``k = floor(x · INV_LN2 + 0.5)``; ``r = (x − k · LN2_HI) − k · LN2_LO``
    (|r| ≤ 0.35); Horner ``p = 1/14!; p = p · r + 1/j!`` for ``j = 13 … 0``; the result
    is ``p · 2^k`` (exact scaling; ``|k| ≤ 1010`` keeps ``2^k`` a normal double).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size and not (np.abs(x) <= 700.0).all():
        raise ValueError("exp needs finite |x| <= 700")
    k = np.floor(x * INV_LN2 + 0.5)
    r = (x - k * LN2_HI) - k * LN2_LO
    p = np.full(r.shape, _EXP_COEF[-1])
    for c in reversed(_EXP_COEF[:-1]):
        p = p * r + c
    return np.ldexp(p, k.astype(np.int64))


def uniform_pm1(words: np.ndarray) -> np.ndarray:
    """Doubles in ``[-1, 1)`` from 64-bit words: ``(w >> 11) · 2^-52 − 1`` (exact)."""
    w = np.asarray(words, dtype=np.uint64)
    return (w >> np.uint64(11)).astype(np.float64) * 2.0**-52 - 1.0
