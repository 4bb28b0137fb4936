"""Float-safe discrete noise on a public fixed-point grid (invariant 2, docs/architecture.md).

Sections of ``docs/algorithms.md``: uses Laplace noise throughout (§3.1). uldp replaces every
continuous Laplace draw by its discrete counterpart on an integer grid:

* the device maps its clamped statistic to grid units and rounds it *unbiasedly* to an
  integer (``randomized_round``);
* it adds **discrete Laplace** noise ``DLap(t)`` with pmf
  ``P(Z = z) = (1 - q) / (1 + q) * q**|z|``, ``q = exp(-1/t)``;
* the collector sums integers exactly and rescales once.

Privacy argument (pure ε-LDP). Let ``f`` map a local dataset to ``Z^k`` with L1 sensitivity
``Δ`` (any two local datasets, since the privacy unit is the whole dataset). With
``t = Δ / ε`` the output ``f(D) + Z`` (Z iid DLap(t) per coordinate) satisfies, for every
output ``y``, ``P(y | D) / P(y | D') = q**(|y - f(D)|_1 - |y - f(D')|_1) <= q**(-Δ) = e**ε``.
Randomized rounding is a randomized map applied *before* the mechanism, so its
post-rounding values still differ by at most ``Δ`` grid units as long as the rounded range
is ``[0, G]`` and ``Δ = G`` (post-processing/mixture of ε-DP mechanisms stays ε-DP).

Exactness. ``ε`` is first rounded *down* to a dyadic rational ``ε_r = floor(ε·2^24)/2^24``
(so the guarantee holds for the claimed ε) and ``t = Δ/ε_r`` is a rational ``a/b``. Samples
follow Canonne–Kamath–Steinke (2020), Algorithms 1–2: only uniform integers and Bernoulli
draws with rational probabilities from the ChaCha20 source — the produced pmf is exactly
the one above.

The discrete Gaussian (CKS Algorithm 3) is here too, for the central estimators.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from uldp.client.budget import EPS_DENOMINATOR, epsilon_units
from uldp.client.randomness import RandomSource

__all__ = [
    "EPS_DENOMINATOR",
    "LaplaceScale",
    "bernoulli_exp",
    "bernoulli_exp_scalar",
    "discrete_gaussian",
    "discrete_gaussian_pmf",
    "discrete_laplace",
    "discrete_laplace_pmf",
    "discrete_laplace_variance",
    "laplace_scale",
    "randomized_round",
    "rational_epsilon",
]



def rational_epsilon(epsilon: float) -> Fraction:
    """ε rounded *down* to a multiple of 2^-24 (the ε the noise actually guarantees).

    Same rounding as the device's budget arithmetic (``uldp.client.budget``); raises
    :class:`~uldp.client.budget.EpsilonError` (a ``ValueError``) for ε that is not finite,
    below 2^-24 or above ``MAX_EPSILON``.
    """
    return Fraction(epsilon_units(epsilon), EPS_DENOMINATOR)


@dataclass(frozen=True)
class LaplaceScale:
    """A discrete Laplace scale ``t = num/den`` in grid units (pmf ∝ exp(-|z|/t))."""

    num: int
    den: int

    @property
    def value(self) -> float:
        return self.num / self.den

    @property
    def q(self) -> float:
        return math.exp(-self.den / self.num)

    def epsilon_for(self, sensitivity: int) -> float:
        """The pure-DP ε this scale gives a query of L1 sensitivity ``sensitivity``."""
        return sensitivity * self.den / self.num


def laplace_scale(sensitivity: int, epsilon: float) -> LaplaceScale:
    """Scale ``t = Δ/ε_r`` for integer L1 sensitivity ``Δ`` (grid units) and budget ε."""
    if type(sensitivity) is int and type(epsilon) is float:  # memoized: a few values recur
        return _float_laplace_scale(sensitivity, epsilon)
    return _laplace_scale(sensitivity, epsilon)


@functools.lru_cache(maxsize=4096)
def _float_laplace_scale(sensitivity: int, epsilon: float) -> LaplaceScale:
    return _laplace_scale(sensitivity, epsilon)


def _laplace_scale(sensitivity: int, epsilon: float) -> LaplaceScale:
    if not isinstance(sensitivity, (int, np.integer)) or sensitivity < 1:
        raise ValueError(f"sensitivity must be a positive integer, got {sensitivity!r}")
    eps = rational_epsilon(epsilon)
    t = Fraction(int(sensitivity)) / eps
    if t.numerator >= 1 << 56:
        raise ValueError("noise scale too large for exact sampling; use a coarser grid")
    return LaplaceScale(t.numerator, t.denominator)


def discrete_laplace_pmf(z: np.ndarray, t: float) -> np.ndarray:
    """Exact pmf of DLap(t) at integers ``z`` (for tests and likelihood audits)."""
    q = math.exp(-1.0 / t)
    return (1 - q) / (1 + q) * np.power(q, np.abs(np.asarray(z, dtype=np.float64)))


def discrete_laplace_variance(t: float) -> float:
    """Var DLap(t) = 2q/(1-q)^2, q = e^{-1/t} (≈ 2t² for large t)."""
    q = math.exp(-1.0 / t)
    return 2.0 * q / (1.0 - q) ** 2


# ---- exact Bernoulli(exp(-γ)) for rational γ = num/den (CKS Algorithm 1) -------------
def _bernoulli_exp_le1(rng: RandomSource, num: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for integers 0 <= num <= den, elementwise and exact.

    CKS Algorithm 1: draw Bernoulli(γ/k) for k = 1, 2, ... until the first failure and
    return whether that k is odd. All still-active entries share the same k, so each
    round is one vectorized comparison against uniform integers below ``den·k``.
    """
    out = np.zeros(num.shape, dtype=bool)
    todo = np.arange(num.size)
    k = 1
    while todo.size:
        a = rng.below(den * k, size=todo.size) < num[todo]
        out[todo[~a]] = k % 2 == 1
        todo = todo[a]
        k += 1
    return out


def _geometric_exp_minus1(rng: RandomSource, n: int) -> np.ndarray:
    """V with P(V = v) = (1 - e^-1) e^{-v}: count Bernoulli(e^-1) successes to a failure."""
    v = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        b = _bernoulli_exp_le1(rng, np.ones(todo.size, dtype=np.int64), 1)
        v[todo[b]] += 1
        todo = todo[b]
    return v


#: reports with at most this many noise values take the scalar twin of the sampler
#: (:func:`_discrete_laplace_list`): numpy's per-call overhead dominates small arrays
_SCALAR_MAX = 64


def discrete_laplace(scale: LaplaceScale, size: int | tuple[int, ...], rng: RandomSource,
                     ) -> np.ndarray:
    """``size`` iid DLap(t) integers, t = scale.num/scale.den (CKS Algorithm 2, vectorized)."""
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    n = int(np.prod(shape))
    if n <= _SCALAR_MAX:
        return np.asarray(_discrete_laplace_list(scale, n, rng), dtype=np.int64).reshape(shape)
    a, b = scale.num, scale.den
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        m = todo.size
        u = rng.below(a, size=m)
        keep = _bernoulli_exp_le1(rng, u, a)
        idx, u = todo[keep], u[keep]
        v = _geometric_exp_minus1(rng, idx.size)
        x = u + a * v
        y = x // b
        neg = rng.below(2, size=idx.size) == 1
        good = ~(neg & (y == 0))
        out[idx[good]] = np.where(neg[good], -y[good], y[good])
        done = np.zeros(n, dtype=bool)
        done[idx[good]] = True
        todo = todo[~done[todo]]
    return out.reshape(shape)


# ---- the same samplers on Python lists -------------------------------------------------------
# Step for step the vectorized code above — the same rounds, the same draws in the same
# order from the same keystream, the same outputs (tests/test_noise.py compares them) —
# for the few values of one device's report, where numpy's per-call overhead costs more
# than the arithmetic.
def _bernoulli_exp_le1_list(rng: RandomSource, num: list[int], den: int) -> list[bool]:
    out = [False] * len(num)
    todo = list(range(len(num)))
    k = 1
    while todo:
        odd = k % 2 == 1
        rest = []
        for j, u in zip(todo, rng.below_list(den * k, len(todo)), strict=True):
            if u < num[j]:
                rest.append(j)
            else:
                out[j] = odd
        todo = rest
        k += 1
    return out


def _geometric_exp_minus1_list(rng: RandomSource, n: int) -> list[int]:
    v = [0] * n
    todo = list(range(n))
    while todo:
        rest = []
        for j, ok in zip(todo, _bernoulli_exp_le1_list(rng, [1] * len(todo), 1), strict=True):
            if ok:
                v[j] += 1
                rest.append(j)
        todo = rest
    return v


def _discrete_laplace_list(scale: LaplaceScale, n: int, rng: RandomSource) -> list[int]:
    a, b = scale.num, scale.den
    out = [0] * n
    todo = list(range(n))
    while todo:
        u = rng.below_list(a, len(todo))
        keep = _bernoulli_exp_le1_list(rng, u, a)
        idx = [i for i, k in zip(todo, keep, strict=True) if k]
        uk = [x for x, k in zip(u, keep, strict=True) if k]
        v = _geometric_exp_minus1_list(rng, len(idx))
        neg = rng.below_list(2, len(idx))
        done = set()
        for i, x, vi, sign in zip(idx, uk, v, neg, strict=True):
            y = (x + a * vi) // b
            if sign == 1 and y == 0:
                continue  # -0: drawn again
            out[i] = -y if sign == 1 else y
            done.add(i)
        todo = [i for i in todo if i not in done]
    return out


def randomized_round(x: np.ndarray, rng: RandomSource) -> np.ndarray:
    """Unbiased rounding of real grid positions to integers: E[result] = x.

    ``floor(x) + Bernoulli(x - floor(x))``; variance ``f(1-f) <= 1/4`` per value.
    """
    x = np.asarray(x, dtype=np.float64)
    if not np.isfinite(x).all():
        raise ValueError("cannot round NaN or infinite values")
    fl = np.floor(x)
    return fl.astype(np.int64) + rng.bernoulli_float(x - fl).astype(np.int64)


# ---- discrete Gaussian (CKS Algorithm 3), exact, vectorized ------------------------------
def _below_int(rng: RandomSource, n: int) -> int:
    """Uniform integer in [0, n) for an arbitrary Python int ``n >= 1`` (exact rejection)."""
    nbits = n.bit_length()
    nbytes = (nbits + 7) // 8
    mask = (1 << nbits) - 1
    while True:
        r = int.from_bytes(rng.bytes(nbytes), "big") & mask
        if r < n:
            return r


def bernoulli_exp_scalar(rng: RandomSource, gamma: Fraction) -> bool:
    """Bernoulli(exp(-γ)) for any rational γ >= 0 with Python integers (no overflow)."""
    while gamma > 1:
        if not bernoulli_exp_scalar(rng, Fraction(1)):
            return False
        gamma -= 1
    k = 1
    while _below_int(rng, gamma.denominator * k) < gamma.numerator:
        k += 1
    return k % 2 == 1


def bernoulli_exp(rng: RandomSource, num: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(exp(-num/den)) elementwise for integers ``num >= 0``, ``den >= 1``, exact:
    ``exp(-g) = exp(-1)^⌊g⌋ · exp(-(g - ⌊g⌋))`` as an AND of independent Bernoullis."""
    num = np.asarray(num, dtype=np.int64)
    whole = num // den
    frac = num - whole * den
    ok = np.ones(num.shape, dtype=bool)
    rem = whole.copy()
    todo = np.flatnonzero(rem > 0)
    while todo.size:
        b = _bernoulli_exp_le1(rng, np.ones(todo.size, dtype=np.int64), 1)
        ok[todo[~b]] = False
        rem[todo] -= 1
        todo = todo[b & (rem[todo] > 0)]
    idx = np.flatnonzero(ok)
    ok[idx] = _bernoulli_exp_le1(rng, frac[idx], den)
    return ok


def discrete_gaussian(sigma2: Fraction | float, size: int, rng: RandomSource) -> np.ndarray:
    """``size`` iid discrete Gaussians N_Z(0, σ²): pmf ∝ exp(-z²/(2σ²)) on the integers.

    σ² is rounded *up* to a multiple of 2^-10 (below 256) or to an integer, so a privacy
    claim computed for ``sigma2`` still holds. Proposal ``Y ~ DLap(t)``,
    ``t = ⌊√σ²⌋ + 1``; accept with probability ``exp(-(|Y| - σ²/t)² / (2σ²))`` written as the
    rational ``(|Y| b t - a)² / (2 a b t²)`` for ``σ² = a/b`` (CKS 2020, Algorithm 3).
    Entries whose numerator would overflow int64 use Python integers.
    """
    s2 = Fraction(sigma2)
    if s2 <= 0:
        raise ValueError(f"sigma2 must be positive, got {sigma2!r}")
    if s2 > 1 << 16:
        return _discrete_gaussian_big(s2, size, rng)
    b = 1 << 10 if s2 < 256 else 1
    a = math.ceil(s2 * b)
    t = math.isqrt(a // b) + 1  # ⌊√σ²⌋ + 1, exact
    lap = LaplaceScale(t, 1)
    den_val = 2 * a * b * t * t
    lim = math.isqrt((1 << 62) - 1)
    vector_ok = den_val < 1 << 62
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        y = discrete_laplace(lap, 2 * need + 8, rng)
        root = np.abs(y) * (b * t) - a
        small = (np.abs(root) < lim) if vector_ok else np.zeros(y.size, dtype=bool)
        acc = np.zeros(y.size, dtype=bool)
        idx = np.flatnonzero(small)
        acc[idx] = bernoulli_exp(rng, root[idx] * root[idx], den_val)
        for j in np.flatnonzero(~small):
            r = abs(int(y[j])) * b * t - a
            acc[j] = bernoulli_exp_scalar(rng, Fraction(r * r, den_val))
        keep = y[acc][:need]
        out[filled: filled + keep.size] = keep
        filled += keep.size
    return out


def _discrete_gaussian_big(s2: Fraction, size: int, rng: RandomSource) -> np.ndarray:
    """CKS Algorithm 3 with Python integers, for large σ² (rounded up to an integer)."""
    s2 = Fraction(math.ceil(s2))
    t = math.isqrt(int(s2)) + 1
    lap = LaplaceScale(t, 1)
    out = np.empty(size, dtype=np.int64)
    i = 0
    while i < size:
        for y in discrete_laplace(lap, max(8, 2 * (size - i)), rng):
            if bernoulli_exp_scalar(rng, (abs(int(y)) - s2 / t) ** 2 / (2 * s2)):
                out[i] = y
                i += 1
                if i == size:
                    break
    return out


def discrete_gaussian_pmf(z: np.ndarray, sigma2: float, support: int | None = None,
                          ) -> np.ndarray:
    """pmf of N_Z(0, σ²) at ``z`` (normalizer summed over ±support, default 40σ)."""
    sig = math.sqrt(sigma2)
    k = support if support is not None else int(40 * sig) + 10
    grid = np.arange(-k, k + 1, dtype=np.float64)
    norm = np.exp(-grid**2 / (2 * sigma2)).sum()
    z = np.asarray(z, dtype=np.float64)
    return np.exp(-z**2 / (2 * sigma2)) / norm
