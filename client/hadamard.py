"""Sylvester–Hadamard matrices and the fast Walsh–Hadamard transform.

Spec: ``docs/algorithms.md`` §3.5 (Hadamard matrices), §6.2 (ℓ1 support via
Hadamard), §6.3 (discrete distributions), decision [D15] (zero-pad to the next power of two,
Sylvester ordering).

Conventions
-----------
* Sylvester order: ``H_1 = [1]``, ``H_2k = [[H_k, H_k], [H_k, -H_k]]``; with 0-based indices
  ``H[k, l] = (-1) ** popcount(k & l)`` (the spec's 1-based ``(k-1) & (l-1)``).
* ``H`` is symmetric, ``H @ H = K * I``, so ``H^{-1} = H / K``.
* :func:`fwht` is the *unnormalized* transform ``y = H x`` (equivalently ``x @ H`` since
  ``H`` is symmetric), applied along one axis of a batch in ``O(K log K)`` vectorized numpy
  operations. Integer input is transformed exactly in ``int64``.

Canonical order (``docs/device-protocol.md`` §8): radix-2 butterflies with the stride
``h = 1, 2, 4, …, K/2``; at each stride, for every block start ``s`` (a multiple of ``2h``)
and ``j < h``: ``(x[s+j], x[s+h+j]) ← (x[s+j] + x[s+h+j], x[s+j] − x[s+h+j])``. Every
output of a stage is one correctly rounded addition or subtraction, so this order fixes every
bit. The device path (``uldp.client.numerics.canonical``) always uses it. Batches of ≥ 8 float
rows outside canonical mode (fleet simulations, the collector) may use the Kronecker/BLAS
kernel instead, which rounds differently: it agrees with the canonical transform to
``≤ 4·log2(K)·2^-53 · Σ|x|`` per entry (``tests/test_hadamard.py`` checks ``1e-12``).
"""

from __future__ import annotations

import numpy as np

from uldp.client import numerics

__all__ = [
    "fwht",
    "fwht_columns",
    "hadamard_factors",
    "hadamard_matrix",
    "is_pow2",
    "next_pow2",
    "pad_pow2",
]


def is_pow2(n: int) -> bool:
    """True iff ``n`` is a positive power of two (1, 2, 4, ...)."""
    n = int(n)
    return n >= 1 and (n & (n - 1)) == 0


def next_pow2(n: int) -> int:
    """Smallest power of two ``>= n`` (``next_pow2(1) == 1``); ``n`` must be >= 1."""
    n = int(n)
    if n < 1:
        raise ValueError(f"next_pow2 needs n >= 1, got {n}")
    return 1 << (n - 1).bit_length()


def hadamard_matrix(K: int) -> np.ndarray:
    """The Sylvester Hadamard matrix of order ``K`` (a power of two) as an ``int64`` ±1 array.

    Closed form ``H[k, l] = (-1) ** popcount(k & l)`` (0-based).
    """
    K = int(K)
    if not is_pow2(K):
        raise ValueError(f"Hadamard order must be a power of two, got {K}")
    idx = np.arange(K, dtype=np.int64)
    parity = np.zeros((K, K), dtype=np.int64)
    anded = idx[:, None] & idx[None, :]
    for bit in range(max(K.bit_length() - 1, 0)):
        parity ^= (anded >> bit) & 1
    return 1 - 2 * parity


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """dtype the transform is computed in: floats/complex keep theirs, integers/bools -> int64."""
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        return dtype
    if np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.bool_):
        return np.dtype(np.int64)
    raise TypeError(f"fwht does not support dtype {dtype}")


def _c_buffer(x: np.ndarray, buf: np.ndarray | None, name: str) -> np.ndarray:
    """A C-contiguous buffer shaped like ``x`` (the given one, validated, or a new one)."""
    if buf is None:
        return np.empty(x.shape, dtype=x.dtype)
    if buf.shape != x.shape or buf.dtype != x.dtype or not buf.flags.c_contiguous:
        raise ValueError(f"{name} must be a C-contiguous array of shape {x.shape}, {x.dtype}")
    if np.may_share_memory(buf, x):
        raise ValueError(f"{name} must not alias the input")
    return buf


def hadamard_factors(K: int, max_bits: int = 4) -> list[int]:
    """Split ``K = 2^r`` into Sylvester factors of at most ``2^max_bits`` with near-equal sizes.

    ``H_K = H_{f_1} ⊗ ... ⊗ H_{f_p}`` (Sylvester order is the Kronecker order, most significant
    bits first), e.g. 256 → [16, 16], 1024 → [16, 8, 8].
    """
    if not is_pow2(K):
        raise ValueError(f"Hadamard order must be a power of two, got {K}")
    r = K.bit_length() - 1
    if r == 0:
        return [1]
    parts = -(-r // max_bits)
    bits = [r // parts + (1 if i < r % parts else 0) for i in range(parts)]
    return [1 << b for b in bits]


_FWHT_BLOCK_ELEMS = 1 << 17  # fwht(): numbers per transposed block (stays in L2)

# Floating-point FWHT via Kronecker factors + BLAS (True) or radix-2 ufunc butterflies (False);
# both are exact up to rounding, the factor form measured ~1.4x faster (bench/kashin_speed.py).
_KRON = True
_H_FLOAT_CACHE: dict[tuple[int, str], np.ndarray] = {}


def _hadamard_float(f: int, dtype: np.dtype) -> np.ndarray:
    key = (f, np.dtype(dtype).str)
    H = _H_FLOAT_CACHE.get(key)
    if H is None:
        H = hadamard_matrix(f).astype(dtype)
        H.setflags(write=False)
        _H_FLOAT_CACHE[key] = H
    return H


def fwht_columns(x: np.ndarray, *, out: np.ndarray | None = None,
                 scratch: np.ndarray | None = None, kron: bool = True) -> np.ndarray:
    """Unnormalized FWHT along axis 0 of a C-contiguous 2-D array ``(K, batch)``.

    This is the fast kernel, with the batch as the innermost (contiguous) axis:

    * floating point, batch ≥ 8: ``H_K`` is applied as a Kronecker product of small Sylvester
      factors (:func:`hadamard_factors`), one broadcast BLAS matmul per factor — ``O(K log K)``
      work up to the constant factor size (≤ 16), 1.5–2× faster than radix-2 butterflies;
    * integers (or tiny batches): radix-2 butterflies, two ufunc calls per stage over
      contiguous runs of ``h * batch`` elements (exact in int64).

    Ping-pongs between ``out`` and ``scratch`` (allocated if not given; both must be
    C-contiguous with ``x``'s shape and dtype and must not alias ``x``); ``x`` is not modified.
    ``kron=False`` forces the canonical butterflies. Returns ``out``.
    """
    x = np.ascontiguousarray(x)  # the reshapes below must be views, never copies
    K = x.shape[0]
    batch = int(np.prod(x.shape[1:], dtype=np.int64)) if x.ndim > 1 else 1
    out = _c_buffer(x, out, "out")
    if K == 1:
        out[...] = x
        return out
    scratch = _c_buffer(x, scratch, "scratch")
    if kron and _KRON and batch >= 8 and (np.issubdtype(x.dtype, np.floating)
                                 or np.issubdtype(x.dtype, np.complexfloating)):
        factors = hadamard_factors(K)
        src, pre, rest = x, 1, K
        for j, f in enumerate(factors):
            rest //= f
            # alternate buffers so that the last factor writes into ``out``
            dst = out if (len(factors) - 1 - j) % 2 == 0 else scratch
            # (pre, f, rest, batch) viewed as a stack of (f, batch) matrices: every GEMM is
            # f×f×batch, small enough that BLAS does not spawn threads for it
            shape = (pre, f, rest, batch)
            np.matmul(_hadamard_float(f, x.dtype), src.reshape(shape).transpose(0, 2, 1, 3),
                      out=dst.reshape(shape).transpose(0, 2, 1, 3))
            pre *= f
            src = dst
        return out
    n_stages = K.bit_length() - 1
    src = x
    for stage in range(n_stages):
        h = 1 << stage
        dst = out if (n_stages - 1 - stage) % 2 == 0 else scratch
        s = src.reshape(K // (2 * h), 2, h * batch)
        t = dst.reshape(K // (2 * h), 2, h * batch)
        np.add(s[:, 0], s[:, 1], out=t[:, 0])
        np.subtract(s[:, 0], s[:, 1], out=t[:, 1])
        src = dst
    return out


def fwht(a: np.ndarray, axis: int = -1, *, fast: bool | None = None) -> np.ndarray:
    """Unnormalized fast Walsh–Hadamard transform (Sylvester order) along ``axis``.

    Returns a new array ``y`` with ``y[..., k, ...] = sum_l H[k, l] a[..., l, ...]``.
    The length along ``axis`` must be a power of two (pad with :func:`pad_pow2`), else
    ``ValueError``. Float input keeps its dtype; integer/bool input is computed in ``int64``
    (exact as long as ``K * max|a|`` fits in int64). ``fast=None``: the canonical
    butterflies in canonical mode (the device path), the fastest kernel otherwise.
    """
    arr = np.asarray(a)
    if arr.ndim == 0:
        raise ValueError("fwht needs an array with at least one dimension")
    ax = axis % arr.ndim if -arr.ndim <= axis < arr.ndim else None
    if ax is None:
        raise ValueError(f"axis {axis} out of range for an array of dimension {arr.ndim}")
    K = arr.shape[ax]
    if not is_pow2(K):
        raise ValueError(f"fwht length must be a power of two, got {K} (use pad_pow2)")
    dtype = _work_dtype(arr.dtype)
    kron = not numerics.exact() if fast is None else bool(fast)
    moved = np.moveaxis(arr, ax, -1)
    rows = moved.reshape(-1, K)  # a view for the common axis=-1 case
    out = np.empty(rows.shape, dtype=dtype)
    # cache-sized blocks, each transposed so the batch is innermost (see fwht_columns)
    step = max(1, _FWHT_BLOCK_ELEMS // K, min(16, (1 << 22) // K))
    buf_out = np.empty((K, min(step, rows.shape[0])), dtype=dtype)
    buf_tmp = np.empty_like(buf_out)
    for start in range(0, rows.shape[0], step):
        block = rows[start:start + step]
        c = block.shape[0]
        work = np.ascontiguousarray(block.T, dtype=dtype)
        res = fwht_columns(work, out=buf_out[:, :c] if c == buf_out.shape[1] else None,
                           scratch=buf_tmp[:, :c] if c == buf_out.shape[1] else None,
                           kron=kron)
        out[start:start + c] = res.T
    return np.moveaxis(out.reshape(moved.shape), -1, ax)


def pad_pow2(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Zero-pad ``x`` along ``axis`` to the next power of two [D15] (returns a copy if padded)."""
    arr = np.asarray(x)
    if arr.ndim == 0:
        raise ValueError("pad_pow2 needs an array with at least one dimension")
    n = arr.shape[axis]
    if n < 1:
        raise ValueError("cannot pad an empty axis to a power of two")
    target = next_pow2(n)
    if target == n:
        return arr
    widths = [(0, 0)] * arr.ndim
    widths[axis % arr.ndim] = (0, target - n)
    return np.pad(arr, widths)
