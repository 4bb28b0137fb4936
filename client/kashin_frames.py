"""Public Kashin frames from a seed, version 2: derived from a ChaCha20 keystream so that any
language rebuilds the same frame (``docs/device-protocol.md`` §12.5).

Algorithm: ``docs/algorithms.md`` §3.6 (Gaussian-QR and random partial Hadamard frames), [D9].
Version 1 expanded the seed with numpy's PCG64 and used LAPACK's QR, which no other language
reproduces. Version 2 (:data:`FRAME_VERSION`):

* ``digest = SHA-256`` over the length-prefixed parts ``(FRAME_VERSION, kind, str(d),
  repr(float(λ)), tagged seed)`` (each part preceded by its length as 8 big-endian bytes;
  the seed tagged ``i:<decimal>``, ``s:<utf-8>`` or ``b:<bytes>``); ``frame_id`` is its
  hex; the frame's randomness is the ChaCha20 keystream keyed with ``digest`` (public
  randomness, never privacy noise).
* **Hadamard** (``N = next_pow2(⌈λd⌉)``): ``N`` words, sign ``ξ_i = 1 − 2·(w_i >> 63)``;
  then ``r = below_each([N, N−1, …, N−d+1])`` (one uniform integer per entry, rejection
  rounds) and a partial Fisher–Yates shuffle of ``[0, N)``: for ``i = 0 … d−1`` swap
  positions ``i`` and ``i + r_i``; the columns are the first ``d`` entries.
  ``U[c, j] = ξ_c · H[c, cols_j] / √N``. Integers only: exact everywhere.
* **Gaussian** (``N = ⌈λd⌉``): standard normals by Marsaglia's polar method — per attempt
  two words ``w, w'``, ``u = (w >> 11)·2^-52 − 1``, ``v`` likewise, ``s = u·u + v·v``,
  accepted iff ``0 < s < 1``, giving ``u·f, v·f`` with ``f = √((−2·ln s)/s)`` (``ln`` of
  :mod:`uldp.client.numerics`) — fill ``G`` (N×d) row by row; ``U`` is the Q factor of ``G``
  by classical Gram–Schmidt with one reorthogonalization (CGS2), column by column, with
  sequential sums (:func:`cgs2`). Only basic IEEE operations: exact everywhere.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from uldp.client.hadamard import next_pow2
from uldp.client.numerics import ln, scaled_norms, seq_sum, uniform_pm1
from uldp.client.randomness import RandomSource

__all__ = ["FRAME_VERSION", "Seed", "cgs2", "frame_digest", "frame_size",
           "gaussian_matrix", "hadamard_parts", "polar_normals", "validate_frame_args"]

FRAME_VERSION = "uldp.kashin.frame/v2"

Seed = int | str | bytes


def _seed_bytes(seed: Seed) -> bytes:
    """Type-tagged canonical encoding of a public seed."""
    if isinstance(seed, bool):
        raise TypeError("seed must be int, str or bytes, not bool")
    if isinstance(seed, int | np.integer):
        return b"i:" + str(int(seed)).encode()
    if isinstance(seed, str):
        return b"s:" + seed.encode("utf-8")
    if isinstance(seed, bytes | bytearray):
        return b"b:" + bytes(seed)
    raise TypeError(f"seed must be int, str or bytes, got {type(seed).__name__}")


def frame_digest(d: int, seed: Seed, kind: str, lam: float) -> bytes:
    """SHA-256 of (version, kind, d, λ, seed): the frame's public identity and stream key."""
    h = hashlib.sha256()
    for part in (FRAME_VERSION.encode(), kind.encode(), str(d).encode(),
                 repr(float(lam)).encode(), _seed_bytes(seed)):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def validate_frame_args(d: int, kind: str, lam: float) -> None:
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 1:
        raise ValueError(f"frame dimension d must be an integer >= 1, got {d!r}")
    if kind not in ("gaussian", "hadamard"):
        raise ValueError(f"kind must be 'gaussian' or 'hadamard', got {kind!r}")
    if not (math.isfinite(float(lam)) and float(lam) >= 1.0):
        raise ValueError(f"redundancy lam must be a finite number >= 1, got {lam!r}")


def frame_size(d: int, kind: str, lam: float = 2.0) -> int:
    """``N``: ``⌈λd⌉`` (Gaussian) or the next power of two (Hadamard)."""
    n = math.ceil(float(lam) * int(d) - 1e-9)
    return n if kind == "gaussian" else next_pow2(n)


def hadamard_parts(src: RandomSource, N: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Signs ``ξ`` (N floats ±1) and the ordered columns (d distinct indices below N)."""
    signs = 1.0 - 2.0 * (src.words(N) >> np.uint64(63)).astype(np.float64)
    r = src.below(np.arange(N, N - d, -1, dtype=np.uint64))
    perm = np.arange(N, dtype=np.intp)
    for i, ri in enumerate(r.tolist()):
        j = i + int(ri)
        perm[i], perm[j] = perm[j], perm[i]
    return signs, perm[:d].copy()


def polar_normals(src: RandomSource, count: int) -> np.ndarray:
    """The first ``count`` outputs of the polar method on ``src`` (module docstring).

    Draws attempts in batches; the stream is the frame's own, so reading past the last
    attempt needed changes nothing.
    """
    out: list[np.ndarray] = []
    have = 0
    while have < count:
        attempts = max(16, int((count - have) * 0.65) + 16)
        w = src.words(2 * attempts).reshape(attempts, 2)
        u, v = uniform_pm1(w[:, 0]), uniform_pm1(w[:, 1])
        s = u * u + v * v
        ok = (s > 0.0) & (s < 1.0)
        u, v, s = u[ok], v[ok], s[ok]
        f = np.sqrt((-2.0 * ln(s)) / s)
        pairs = np.stack([u * f, v * f], axis=1).ravel()
        out.append(pairs)
        have += pairs.size
    return np.concatenate(out)[:count]


def cgs2(G: np.ndarray) -> np.ndarray:
    """Q of ``G`` (N×d, N ≥ d) by classical Gram–Schmidt, reorthogonalized once.

    For ``j = 0 … d−1``: ``v = G[:, j]``; twice: ``r_i = seq_sum_k(Q[k, i]·v_k)`` for all
    ``i < j`` (from the same ``v``), ``w_k = seq_sum_i(Q[k, i]·r_i)``, ``v = v − w``;
    then ``Q[:, j] = v / ‖v‖`` (the canonical norm). ``R``'s diagonal is positive, so ``Q``
    is the sign-fixed (Haar) factor.
    """
    N, d = G.shape
    QT = np.empty((d, N))
    for j in range(d):
        v = np.array(G[:, j], dtype=np.float64)
        if j:
            Qj = QT[:j]
            for _ in range(2):
                r = seq_sum(Qj * v[None, :], axis=1)
                v = v - seq_sum(Qj * r[:, None], axis=0)
        a, nu = scaled_norms(v[None, :])
        QT[j] = v / (nu[0] * a[0])
    return np.ascontiguousarray(QT.T)


def gaussian_matrix(src: RandomSource, N: int, d: int) -> np.ndarray:
    """The Gaussian frame ``U`` (N×d) from the frame's stream."""
    G = polar_normals(src, N * d).reshape(N, d)
    return cgs2(G)
