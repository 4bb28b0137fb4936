"""Kashin representations: public tight frames and Lyubarskii–Vershynin coefficients.

Spec: ``docs/algorithms.md`` §3.6 (Kashin representation), §3.5 (Hadamard),
§6.1 (ℓ2 support via Kashin, error formula with the row norms ‖u_c‖²), decisions [D8] (the
*nonlinear* per-sample coefficient map, never the linear map ``U x``), [D9] (λ = 2, Gaussian-QR
frame or random partial Hadamard frame for large d, δ = 0.5, max_iter = 100, tol (see the
deviation below), exact final correction, public level K_LV = 4 with a calibration warning),
[D15] (power-of-two Hadamard sizes) and acceptance test S6 (§13.3).

Frames
------
A :class:`KashinFrame` is a public matrix ``U ∈ R^{N×d}`` with ``Uᵀ U = I_d``. It is rebuilt
deterministically from a public seed by client and collector alike
(:meth:`KashinFrame.from_seed`): the seed and ``(FRAME_VERSION, kind, d, λ)`` are hashed into
the key of a ChaCha20 keystream, from which the frame is derived with integer draws and basic
IEEE operations only (``uldp.client.kashin_frames``), so every language rebuilds it bit for
bit. This is *public* randomness for the frame, never privacy noise. Tests pin the output;
any change must bump :data:`FRAME_VERSION`.

* ``kind="gaussian"``: ``G`` (N×d, ``N = ⌈λ d⌉``) of polar-method normals, ``U`` its Q factor
  by CGS2 with sequential sums (Haar isometry, positive ``R`` diagonal). The fast path applies
  it with float64 BLAS matmuls.
* ``kind="hadamard"`` (scalable): ``N = N' = 2^⌈log2(λ d)⌉``,
  ``U = diag(ξ) H_{N'}[:, S] / √N'`` with random signs ξ and a uniformly random ordered set S of
  d distinct columns. Built from integers only, applied with the FWHT in ``O(N' log N')`` per
  sample, U is never materialised (except by :meth:`KashinFrame.matrix`).

Coefficients
------------
:func:`kashin_coefficients` runs the Lyubarskii–Vershynin truncation iteration of §3.6 on a batch
``(S, d) → (S, N)``: ``b = U v``, ``M = ‖v‖/√(δN)``, ``a += clamp(b, ±M)``,
``v -= Uᵀ clamp(b, ±M)``, until ``‖v‖ ≤ tol‖x‖`` or ``max_iter``; then the exact final correction
``a += U v`` so that ``Uᵀ a = x`` to rounding (≈1e-15 relative), whatever ``tol`` is.

Two implementations. The *canonical* one (``uldp.client.kashin_lv``, the device path in
canonical mode, ``exact=True``) fixes the order of every operation so that every SDK gets the
same bits. The *fast* one (fleet simulations) computes the same iterates up to rounding:

Fast path (same iterates, cheaper): the loop is run on ``b_k = U v_k`` rather than on
``v_k`` — ``‖b_k‖ = ‖v_k‖`` and ``b_{k+1} = P (b_k − clamp(b_k))`` with ``P = U Uᵀ`` — so the
final correction ``U v`` of a finished sample is the ``b`` already at hand. The batch is held
with samples as the innermost axis (``(N, S)`` blocks of ~2^17 numbers in preallocated buffers),
finished samples are frozen and dropped from the working set, blocks run on a small thread pool
for the Hadamard frame (numpy releases the GIL). Gaussian: two float64 BLAS GEMMs per iteration.
Hadamard: two FWHTs per iteration in sign-rotated coordinates ``ξ ⊙ b`` (clamping commutes with
±1 signs, so ``P̃ = H Π_S H / N'`` needs no sign flips), each FWHT a Kronecker product of ≤16×16
Sylvester factors (:func:`uldp.client.hadamard.fwht_columns`). For the Hadamard frame with
``tol ≥ 1e-5`` the truncation iterates are float32 (half the memory traffic, ≈1.5× faster) and
the final correction is recomputed exactly in float64 from the true residual,
``a = a₃₂ + U (x − Uᵀ a₃₂)``: ``Uᵀ a = x`` still holds to ~1e-16 and the sup-norm moves by
~1e-7‖x‖ (results agree with the all-float64 path to ~1e-6 relative). Per call overhead is
~0.3 ms: batch all samples (of all users) into one call.

**Deviation from [D9]: default ``tol = 1e-3`` instead of 1e-10** (``KASHIN_TOL_DEFAULT``; pass
``tol=1e-10`` for the spec value). Measured (bench/results/kashin_speed.md): the residual
contracts by only ≈ 0.5 ≈ d/N per iteration after the first few (the residual concentrates on
the saturated coordinates), so tol = 1e-10 costs ≈ 36 iterations at d = 128 versus ≈ 8.6 at
1e-3 — a 4× throughput difference, and the ≥100k samples/s target is out of reach at 1e-10.
What tol buys is small: ``Uᵀ a = x`` holds to ~1e-15 at any tol (exact final correction, S6's
1e-9 check passes), and stopping early changes ``‖a‖∞`` by at most
``tol·‖x‖·(1 + 1/((1−η)√(δN)))``, i.e. the level by ≤ ``tol·(√N + 3)``; measured: the max
level over random data moved by ≤ 0.01 (d ≤ 512, both frames), calibrated worst cases by
≤ 0.04 (partly hill-climb noise), against the slack ``K_LV − level ≥ 0.6`` (worst calibrated
levels: Gaussian 3.32, Hadamard 2.87). Other defaults are the spec's (δ = 0.5, max_iter = 100,
λ = 2, K_LV = 4).

Calibration
-----------
:func:`calibrate` reports the observed level ``√N ‖a(x)‖∞ / ‖x‖₂`` over random directions,
frame-aligned vectors (the rows ``u_c``), basis vectors and a batched adversarial hill-climb;
:func:`warn_if_exceeds` issues a ``UserWarning`` if it exceeds the configured public ``K_LV``
(a too-small ``K_LV`` never breaks privacy, INV-6; it only perturbs stage-I binning).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from . import numerics
from .hadamard import fwht_columns
from .kashin_frames import (
    FRAME_VERSION,
    Seed,
    frame_digest,
    frame_size,
    gaussian_matrix,
    hadamard_parts,
    validate_frame_args,
)
from .kashin_lv import FrameArrays, lv_coefficients
from .randomness import RandomSource

__all__ = [
    "FRAME_VERSION",
    "KASHIN_DELTA_DEFAULT",
    "KASHIN_LAMBDA_DEFAULT",
    "KASHIN_MAX_ITER_DEFAULT",
    "KASHIN_TOL_DEFAULT",
    "K_LV_DEFAULT",
    "KashinFrame",
    "KashinInfo",
    "kashin_coefficients",
    "kashin_coefficients_info",
    "kashin_level",
]

K_LV_DEFAULT = 4.0
KASHIN_DELTA_DEFAULT = 0.5
KASHIN_LAMBDA_DEFAULT = 2
KASHIN_MAX_ITER_DEFAULT = 100
KASHIN_TOL_DEFAULT = 1e-3  # spec [D9]: 1e-10; see module docstring (measured deviation)

FrameKind = Literal["gaussian", "hadamard"]

_CHUNK_ELEMS = 1 << 17  # N × samples per working block (keeps the buffers cache-resident)


# --------------------------------------------------------------------------------------------
# the frame
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class KashinFrame:
    """A public Parseval frame ``U ∈ R^{N×d}`` (``Uᵀ U = I_d``); build with :meth:`from_seed`.

    ``U`` is stored only for ``kind="gaussian"`` (``_U``, C-contiguous, and its transpose);
    the Hadamard frame stores the signs ``ξ`` (length N) and the column set ``S`` (length d).
    """

    d: int
    N: int
    kind: FrameKind
    lam: float
    frame_id: str
    _U: np.ndarray | None = field(default=None, repr=False)
    _UT: np.ndarray | None = field(default=None, repr=False)
    _signs: np.ndarray | None = field(default=None, repr=False)
    _cols: np.ndarray | None = field(default=None, repr=False)
    _mask: np.ndarray | None = field(default=None, repr=False)
    _mask32: np.ndarray | None = field(default=None, repr=False)

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def from_seed(cls, d: int, seed: Seed, kind: FrameKind = "gaussian",
                  lam: float = KASHIN_LAMBDA_DEFAULT) -> KashinFrame:
        """Deterministically build the frame of dimension ``d`` from a public ``seed``
        (derivation: ``uldp.client.kashin_frames``, :data:`FRAME_VERSION`)."""
        validate_frame_args(d, kind, lam)
        d = int(d)
        digest = frame_digest(d, seed, kind, lam)
        src = RandomSource.from_key(digest)
        N = frame_size(d, kind, lam)
        if kind == "gaussian":
            U = gaussian_matrix(src, N, d)
            U.setflags(write=False)
            return cls(d=d, N=N, kind="gaussian", lam=float(lam), frame_id=digest.hex(),
                       _U=U, _UT=np.ascontiguousarray(U.T))
        signs, cols = hadamard_parts(src, N, d)
        mask = np.zeros((N, 1))
        mask[cols] = 1.0 / N  # Π_S / N' between the two transforms of P = U Uᵀ
        mask32 = mask.astype(np.float32)
        for arr in (signs, cols, mask, mask32):
            arr.setflags(write=False)
        return cls(d=d, N=N, kind="hadamard", lam=float(lam), frame_id=digest.hex(),
                   _signs=signs, _cols=cols, _mask=mask, _mask32=mask32)

    def arrays(self) -> FrameArrays:
        """The frame's public arrays for the canonical LV iteration (``kashin_lv``)."""
        return FrameArrays(self.N, self.d, U=self._U, signs=self._signs, cols=self._cols)

    # ---- column-batch kernels (samples on the last axis) -------------------------------------

    def analysis_T(self, V: np.ndarray) -> np.ndarray:
        """``U @ V`` for ``V`` of shape ``(d, s)`` → ``(N, s)`` (float64)."""
        if self._U is not None:
            return self._U @ V
        assert self._signs is not None and self._cols is not None
        Z = np.zeros((self.N, V.shape[1]), dtype=np.float64)
        Z[self._cols] = V
        out = fwht_columns(Z)
        out *= (self._signs / math.sqrt(self.N))[:, None]
        return out

    def synthesis_T(self, B: np.ndarray) -> np.ndarray:
        """``Uᵀ @ B`` for ``B`` of shape ``(N, s)`` → ``(d, s)`` (float64)."""
        if self._UT is not None:
            return self._UT @ B
        assert self._signs is not None and self._cols is not None
        Z = B * (self._signs / math.sqrt(self.N))[:, None]
        return fwht_columns(Z)[self._cols]

    # ---- LV kernels in internal coordinates ------------------------------------------------
    # The LV iteration runs on b = U v instead of v (same iterates: ‖U v‖ = ‖v‖ and the next
    # b is P r with P = U Uᵀ and r = b − clamp(b)). For the Hadamard frame the internal
    # coordinates are sign-rotated, b̃ = ξ ⊙ b: clamping commutes with ±1 signs, so
    # P̃ = H Π_S H / N' needs no per-iteration sign flips; _lv_block rotates back at the end.

    def _internal_start(self, XT: np.ndarray, out: np.ndarray, scratch: np.ndarray,
                        scratch2: np.ndarray) -> None:
        """``out ← b_0 = U x`` in internal coordinates for ``XT`` of shape ``(d, s)``."""
        if self._U is not None:
            np.matmul(self._U, XT, out=out)
            return
        assert self._cols is not None
        scratch.fill(0.0)
        scratch[self._cols] = XT
        fwht_columns(scratch, out=out, scratch=scratch2)
        out *= 1.0 / math.sqrt(self.N)

    def _internal_project(self, R: np.ndarray, scratch: np.ndarray,
                          scratch2: np.ndarray) -> None:
        """``R ← P R`` (``P = U Uᵀ``) in internal coordinates, ``R`` of shape ``(N, s)``."""
        if self._U is not None:
            np.matmul(self._U, self._UT @ R, out=R)
            return
        assert self._mask is not None
        fwht_columns(R, out=scratch, scratch=scratch2)
        scratch *= self._mask if R.dtype == np.float64 else self._mask32
        fwht_columns(scratch, out=R, scratch=scratch2)

    def _internal_exact_correction(self, XT: np.ndarray, A: np.ndarray) -> None:
        """``A ← A + U (x − Uᵀ A)`` in float64 internal coordinates (Hadamard frame).

        Makes ``Uᵀ A = x`` to float64 rounding whatever precision produced ``A``.
        """
        assert self._cols is not None
        root = math.sqrt(self.N)
        Z = fwht_columns(A)
        V = XT - Z[self._cols] / root  # residual v = x − Uᵀ a
        Z.fill(0.0)
        Z[self._cols] = V
        A += fwht_columns(Z) / root

    # ---- row-batch public API ---------------------------------------------------------------

    def analysis(self, X: np.ndarray) -> np.ndarray:
        """Linear frame coefficients ``U x`` for each row: ``(S, d) → (S, N)`` (or ``(d,) → (N,)``).

        This is the *linear* map, not the Kashin coefficients ([D8]); see
        :func:`kashin_coefficients`.
        """
        X2, squeeze = _as_batch(X, self.d, "X")
        out = self.analysis_T(np.ascontiguousarray(X2.T)).T
        return np.ascontiguousarray(out[0] if squeeze else out)

    def synthesis(self, B: np.ndarray) -> np.ndarray:
        """``Uᵀ b`` for each row: ``(S, N) → (S, d)`` (or ``(N,) → (d,)``)."""
        B2, squeeze = _as_batch(B, self.N, "B")
        out = self.synthesis_T(np.ascontiguousarray(B2.T)).T
        return np.ascontiguousarray(out[0] if squeeze else out)

    def matrix(self) -> np.ndarray:
        """The dense ``U`` (N×d). Materialises the Hadamard frame: use for small d / tests."""
        if self._U is not None:
            return self._U.copy()
        return self.analysis_T(np.eye(self.d))

    def row_norms_sq(self) -> np.ndarray:
        """``‖u_c‖²`` for each of the N rows (sum is d; Hadamard frame: all equal d/N)."""
        if self._U is not None:
            return np.einsum("cj,cj->c", self._U, self._U)
        return np.full(self.N, self.d / self.N)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KashinFrame):
            return NotImplemented
        if (self.d, self.N, self.kind, self.frame_id) != (other.d, other.N, other.kind,
                                                          other.frame_id):
            return False
        if self._U is not None and other._U is not None:
            return bool(np.array_equal(self._U, other._U))
        pairs = ((self._signs, other._signs), (self._cols, other._cols))
        return all(a is not None and b is not None and bool(np.array_equal(a, b))
                   for a, b in pairs)

    __hash__ = None  # type: ignore[assignment]


def _as_batch(X: np.ndarray, width: int, name: str) -> tuple[np.ndarray, bool]:
    """Validate a finite float batch ``(S, width)`` (a 1-D vector is treated as S = 1)."""
    arr = np.asarray(X)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number)
                                   or np.issubdtype(arr.dtype, np.bool_)):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise TypeError(f"{name} must be real")
    squeeze = arr.ndim == 1
    if squeeze:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{name} must have shape (S, {width}) or ({width},), got {np.shape(X)}")
    arr = np.asarray(arr, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf")
    return arr, squeeze


# --------------------------------------------------------------------------------------------
# Lyubarskii–Vershynin coefficients
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KashinInfo:
    """Coefficients ``(S, N)`` and, per sample, the number of truncation iterations run."""

    coefficients: np.ndarray
    iterations: np.ndarray


def _validate_lv_args(delta: float, max_iter: int, tol: float) -> None:
    if not (0.0 < float(delta) <= 1.0):
        raise ValueError(f"delta must be in (0, 1], got {delta!r}")
    if isinstance(max_iter, bool) or int(max_iter) != max_iter or max_iter < 0:
        raise ValueError(f"max_iter must be a non-negative integer, got {max_iter!r}")
    if not (math.isfinite(float(tol)) and float(tol) >= 0.0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")


_SAFE_EXP = 400  # |x| within 2^±400: squares neither overflow nor underflow


def _rescale_columns(XT: np.ndarray, safe_exp: int = _SAFE_EXP) -> np.ndarray | None:
    """Scale extreme columns of ``XT`` in place by powers of two (exact); return the exponents.

    The LV map is positively homogeneous (``a(c x) = c a(x)``), so columns with huge or tiny
    entries are brought to max-abs in [1/2, 1) and scaled back afterwards. ``None`` if no column
    needed it (the common case: no extra pass over the coefficients).
    """
    maxabs = np.abs(XT).max(axis=0) if XT.size else np.zeros(XT.shape[1])
    extreme = (maxabs > 2.0**safe_exp) | ((maxabs < 2.0**-safe_exp) & (maxabs > 0))
    if not extreme.any():
        return None
    exps = np.where(extreme, np.frexp(maxabs)[1], 0).astype(np.int64)
    np.ldexp(XT, -exps[None, :], out=XT)
    return exps


def _col_norms(V: np.ndarray) -> np.ndarray:
    """Euclidean norm of each column of a (k, s) array."""
    return np.sqrt(np.einsum("ij,ij->j", V, V))


class _Workspace:
    """Preallocated ``(N, m)`` C-contiguous buffers (fresh large arrays cost page faults)."""

    def __init__(self, N: int, width: int, count: int, dtype: type = np.float64) -> None:
        self.N = N
        self._flat: list[np.ndarray] = [np.empty(N * width, dtype=dtype)
                                        for _ in range(count)]

    def get(self, i: int, m: int) -> np.ndarray:
        return self._flat[i][: self.N * m].reshape(self.N, m)

    def swap(self, i: int, j: int) -> None:
        self._flat[i], self._flat[j] = self._flat[j], self._flat[i]


_A, _B, _C, _S1, _S2 = range(5)  # workspace slots


_MIXED_MIN_TOL = 1e-5  # float32 iterates resolve residuals down to ~1e-7‖x‖


def _lv_block(frame: KashinFrame, XT: np.ndarray, delta: float, max_iter: int, tol: float,
              A_out: np.ndarray, iters: np.ndarray) -> None:
    """LV coefficients of one column block ``XT`` (d, s) into ``A_out`` (s, N), ``iters`` (s,).

    ``XT`` is a private copy (it may be rescaled in place). Hadamard frame with
    ``tol ≥ 1e-5``: the truncation iterations run in float32 (2× less memory traffic) and the
    final correction is recomputed exactly in float64 from the true residual,
    ``a = a_32 + U (x − Uᵀ a_32)``, so ``Uᵀ a = x`` to float64 rounding; otherwise everything is
    float64 and the final correction is the ``b = U v`` at hand.
    """
    s = XT.shape[1]
    mixed = frame.kind == "hadamard" and tol >= _MIXED_MIN_TOL
    # float32 iterates: normalise every column (max-abs in [1/2, 1)); float64: only extremes
    exps = _rescale_columns(XT, 0 if mixed else _SAFE_EXP)
    xnorm = _col_norms(XT)
    zero = xnorm == 0.0  # x = 0 → a = 0
    if zero.any():
        A_out[zero] = 0.0
        iters[zero] = 0
    idx = np.flatnonzero(~zero)
    if idx.size:
        _lv_iterate(frame, XT[:, idx] if idx.size < s else XT, xnorm[idx], idx, delta,
                    max_iter, tol, np.float32 if mixed else np.float64, A_out, iters)
    if frame._signs is not None:  # rotate internal Hadamard coordinates back
        A_out *= frame._signs[None, :]
    if exps is not None:  # undo the exact power-of-two rescaling (a is 1-homogeneous)
        np.ldexp(A_out, exps[:, None], out=A_out)


def _lv_iterate(frame: KashinFrame, XT: np.ndarray, xnorm: np.ndarray, idx: np.ndarray,
                delta: float, max_iter: int, tol: float, dtype: type, A_out: np.ndarray,
                iters: np.ndarray) -> None:
    """The LV loop on nonzero columns ``XT`` (d, m); results go to rows ``idx`` of ``A_out``.

    Runs on ``b_k = U v_k`` (see the frame's internal kernels): ``M = ‖b‖/√(δN)``,
    ``c = clamp(b, ±M)``, ``a += c``, ``b ← P (b − c)``. A finished column gets its final
    correction (``a += b`` = ``U v`` in float64; recomputed exactly in the mixed path), is
    written out and frozen (``M = 0`` ⇒ ``c = 0``, so ``a`` no longer changes); the working set
    is compacted once at most a quarter of it is live. Column gathers use ``np.take`` and the
    output is written as contiguous rows — strided column scatters are avoided (slow in numpy).
    """
    N, m = frame.N, XT.shape[1]
    exact_final = dtype == np.float64
    ws = _Workspace(N, m, 5, dtype)
    B = ws.get(_B, m)
    frame._internal_start(XT, B, ws.get(_S1, m), ws.get(_S2, m))
    A = ws.get(_A, m)
    A.fill(0.0)
    bnorm: np.ndarray = xnorm.astype(dtype)  # ‖v_0‖ = ‖x‖
    thr = tol * xnorm
    live = np.ones(m, dtype=bool)
    n_live = m
    inv_sqrt_dn = 1.0 / math.sqrt(delta * N)
    it = 0
    while True:
        done = live & ((bnorm <= thr) | (it >= max_iter))
        if done.any():
            fin = np.flatnonzero(done)
            _finish(frame, A, B, XT, fin, exact_final, A_out, idx)
            iters[idx[fin]] = it
            live[fin] = False
            n_live -= fin.size
            if n_live == 0:
                return
            if 4 * n_live <= m:  # compact the working set
                keep = np.flatnonzero(live)
                m = keep.size
                np.take(A, keep, axis=1, out=ws.get(_C, m))
                ws.swap(_A, _C)
                np.take(B, keep, axis=1, out=ws.get(_C, m))
                ws.swap(_B, _C)
                A, B = ws.get(_A, m), ws.get(_B, m)
                XT = np.take(XT, keep, axis=1)
                idx, thr, bnorm, live = idx[keep], thr[keep], bnorm[keep], live[keep]
        C = ws.get(_C, m)
        M = bnorm * inv_sqrt_dn
        M *= live  # frozen columns: M = 0 ⇒ c = 0
        M = M.astype(dtype, copy=False)
        np.minimum(B, M, out=C)
        np.maximum(C, -M, out=C)
        A += C
        B -= C  # r = b − clamp(b)
        frame._internal_project(B, ws.get(_S1, m), ws.get(_S2, m))
        bnorm = _col_norms(B)
        it += 1


def _finish(frame: KashinFrame, A: np.ndarray, B: np.ndarray, XT: np.ndarray,
            fin: np.ndarray, exact_final: bool, A_out: np.ndarray, idx: np.ndarray) -> None:
    """Final correction of the finished columns ``fin`` (``a += U v``), written out."""
    A_fin = np.take(A, fin, axis=1).astype(np.float64)
    if exact_final:
        A_fin += np.take(B, fin, axis=1)
    else:
        frame._internal_exact_correction(np.take(XT, fin, axis=1), A_fin)
    A_out[idx[fin]] = A_fin.T


# OpenBLAS runs a GEMM of M·N·K ≤ 65536 · 4 on one thread. The Gaussian frame's products are
# tiny (N×d by d×s): threaded, they cost 20–60× the CPU of one thread (spin-waiting threads,
# worst on a shared machine; bench/results/kashin_speed.md), so its blocks stay below that.
_BLAS_ONE_THREAD = 1 << 18


def _chunk_size(frame: KashinFrame) -> int:
    if frame.kind == "gaussian":
        return max(64, min(4096, _BLAS_ONE_THREAD // (frame.N * frame.d)))
    return max(64, min(4096, _CHUNK_ELEMS // frame.N))


def _default_workers(frame: KashinFrame) -> int:
    # numpy ufuncs release the GIL, so the FWHT path scales over threads; the Gaussian path
    # is BLAS-bound and BLAS already threads internally.
    return 1 if frame.kind == "gaussian" else min(4, os.cpu_count() or 1)


def kashin_coefficients_info(frame: KashinFrame, X: np.ndarray, *,
                             delta: float = KASHIN_DELTA_DEFAULT,
                             max_iter: int = KASHIN_MAX_ITER_DEFAULT,
                             tol: float = KASHIN_TOL_DEFAULT,
                             workers: int | None = None,
                             exact: bool | None = None) -> KashinInfo:
    """:func:`kashin_coefficients` plus the per-sample iteration counts."""
    _validate_lv_args(delta, max_iter, tol)
    X2, squeeze = _as_batch(X, frame.d, "X")
    if numerics.exact() if exact is None else exact:
        A, iters = lv_coefficients(frame.arrays(), X2, float(delta), int(max_iter),
                                   float(tol))
    else:
        A, iters = _fast_coefficients(frame, X2, float(delta), int(max_iter), float(tol),
                                      workers)
    if squeeze:
        return KashinInfo(A[0], iters[:1])
    return KashinInfo(A, iters)


def _fast_coefficients(frame: KashinFrame, X2: np.ndarray, delta: float, max_iter: int,
                       tol: float, workers: int | None) -> tuple[np.ndarray, np.ndarray]:
    S = X2.shape[0]
    A = np.empty((S, frame.N))
    iters = np.empty(S, dtype=np.int64)
    chunk = _chunk_size(frame)
    starts = list(range(0, S, chunk))

    def run(start: int) -> None:
        stop = min(S, start + chunk)
        XT = X2[start:stop].T.copy()  # own C-contiguous copy (rescaled in place)
        _lv_block(frame, XT, delta, max_iter, tol, A[start:stop], iters[start:stop])

    n_workers = min(len(starts), _default_workers(frame) if workers is None else int(workers))
    if n_workers <= 1:
        for start in starts:
            run(start)
    else:
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            for fut in [pool.submit(run, start) for start in starts]:
                fut.result()
    return A, iters


def kashin_coefficients(frame: KashinFrame, X: np.ndarray, *,
                        delta: float = KASHIN_DELTA_DEFAULT,
                        max_iter: int = KASHIN_MAX_ITER_DEFAULT,
                        tol: float = KASHIN_TOL_DEFAULT,
                        workers: int | None = None,
                        exact: bool | None = None) -> np.ndarray:
    """Kashin coefficients ``a(x)`` (§3.6) of each row of ``X``: ``(S, d) → (S, N)``.

    ``Uᵀ a(x) = x`` to rounding for every row (exact final correction) and, for a frame at
    level K, ``‖a(x)‖∞ ≤ K ‖x‖₂ / √N`` (check with :func:`calibrate`). A 1-D ``x`` gives a 1-D
    result. Zero rows give zero coefficients; NaN/inf or a wrong shape raise ``ValueError``.
    ``exact=None``: the canonical iteration (``uldp.client.kashin_lv``) in canonical mode
    (the device path), the fast kernels otherwise; ``True``/``False`` force one.
    """
    return kashin_coefficients_info(frame, X, delta=delta, max_iter=max_iter, tol=tol,
                                    workers=workers, exact=exact).coefficients


def kashin_level(frame: KashinFrame, X: np.ndarray, A: np.ndarray) -> np.ndarray:
    """Per-row observed level ``√N ‖a‖∞ / ‖x‖₂`` (0 for x = 0)."""
    X2 = np.atleast_2d(np.asarray(X, dtype=np.float64))
    A2 = np.atleast_2d(np.asarray(A, dtype=np.float64))
    xmax = np.abs(X2).max(axis=1, keepdims=True)
    safe = np.where(xmax > 0, xmax, 1.0)
    xn = np.linalg.norm(X2 / safe, axis=1) * safe[:, 0]  # no overflow for huge rows
    amax = np.abs(A2).max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        lev = np.where(xn > 0, math.sqrt(frame.N) * amax / np.where(xn > 0, xn, 1.0), 0.0)
    return lev
