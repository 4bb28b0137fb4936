"""Exact arithmetic of the report mechanisms: a certified lower bound of ``e^ε`` and dyadic
coins (invariant 8, ``docs/device-protocol.md`` §17.1).

Every probability a frequency oracle or a scalar randomizer uses is a **dyadic rational**
``P / 2^64`` (an integer numerator ``0 <= P < 2^64``) or an exact uniform choice
(``RandomSource.below``). The designs (``uldp.client.mechanisms.grr`` and its neighbours)
derive their numerators from ε with integer arithmetic only, against a *certified lower
bound* of ``e^ε``:

    S(N) = Σ_j t_j,  t_0 = 2^64,  t_j = ⌊t_{j−1} · X / (2^24 · j)⌋,  X = min(N, EXP_CAP_UNITS)

for ``ε_r = N / 2^24`` (the ε the ledger charged, ``uldp.client.budget``). Each ``t_j`` is
at most ``2^64 · x^j / j!`` (induction: the floor only lowers it), so ``S(N) / 2^64`` is a
lower bound of ``e^{ε_r}``; a design whose likelihood ratios are at most ``S / 2^64`` is
``ε_r``-LDP. Beyond ε = 40 the bound is capped (``e^40 ≈ 2^57.7``): 64-bit numerators gain
nothing there, and using less than the charged ε is always private.

A dyadic coin ``Bernoulli(P / 2^64)`` is one keystream word ``w`` and the comparison
``w < P`` — exact, and the same in every SDK.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from uldp.client.budget import EPS_DENOMINATOR, epsilon_units
from uldp.client.randomness import RandomSource

__all__ = ["EXP_CAP_UNITS", "ONE", "bernoulli_dyadic", "ceil_div", "exp_lower",
           "exp_lower_fraction", "ratio_at_most", "units_of"]

#: 2^64: the common denominator of every dyadic probability
ONE = 1 << 64

#: designs use at most ε = 40 (in units of 2^-24)
EXP_CAP_UNITS = 40 * EPS_DENOMINATOR


def ceil_div(a: int, b: int) -> int:
    """``⌈a / b⌉`` for integers, ``b > 0``."""
    return -((-a) // b)


@functools.lru_cache(maxsize=4096)
def exp_lower(units: int) -> int:
    """``S`` with ``S / 2^64 <= e^{units / 2^24}`` (module docstring; ``units >= 0``)."""
    if not isinstance(units, int) or units < 0:
        raise ValueError(f"units must be a non-negative integer, got {units!r}")
    x = min(units, EXP_CAP_UNITS)
    t = total = ONE
    j = 1
    while t:
        t = (t * x) // (EPS_DENOMINATOR * j)
        total += t
        j += 1
    return total


def exp_lower_fraction(units: int) -> Fraction:
    """:func:`exp_lower` as the rational ``S / 2^64``."""
    return Fraction(exp_lower(units), ONE)


def ratio_at_most(num: int, den: int, units: int) -> bool:
    """Whether ``num / den <= S(units) / 2^64`` (exact, integers): the check every design
    passes before a coin is drawn."""
    return den > 0 and num * ONE <= exp_lower(units) * den


def bernoulli_dyadic(rng: RandomSource, numerators: np.ndarray) -> np.ndarray:
    """``Bernoulli(P_i / 2^64)`` for every entry, one word each, in index order: ``w < P``.

    ``numerators`` holds integers in ``[0, 2^64)`` (an object array of Python ints or a
    ``uint64`` array)."""
    P = np.asarray(numerators)
    if P.dtype == object:
        P = P.astype(np.uint64)
    w = rng.words(P.size).reshape(P.shape)
    return w < P.astype(np.uint64)


def units_of(eps: float) -> int:
    """``⌊ε·2^24⌋``, the units a mechanism is calibrated to (a ``ValueError`` for an ε that
    cannot be counted, ``uldp.client.budget``)."""
    return epsilon_units(eps)
