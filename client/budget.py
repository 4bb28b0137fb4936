"""Exact ε arithmetic: privacy budgets counted in integer units of 2^-24.

See ``docs/privacy.md`` ("ε arithmetic"). Every ε a device spends, every query budget it
checks a task against and every ledger balance is an integer number of *units*
``u = 2^-24``:

* ``epsilon_units(ε) = ⌊ε · 2^24⌋`` — rounding *down*, so a task's units never claim more
  than the real number the collector wrote, and the noise is calibrated to exactly
  ``units · 2^-24`` (``uldp.client.noise.rational_epsilon`` uses the same rounding);
* a task spends the *sum of the units* of its components, compared with ``<=`` against the
  units of the query budget and of the device budget — no relative float slack;
* ε below one unit, above :data:`MAX_EPSILON`, non-finite or not a number is refused.

The conversion is exact: ``Fraction(ε)`` is the binary value of the float, so
``⌊ε·2^24⌋`` is computed without rounding error.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from numbers import Real

__all__ = [
    "EPS_DENOMINATOR",
    "MAX_EPSILON",
    "EpsilonError",
    "epsilon_units",
    "split_epsilon",
    "units_to_epsilon",
]

#: units per 1.0 of ε: ε is counted in multiples of 2^-24
EPS_DENOMINATOR = 1 << 24

#: largest ε a single task component, a query or a device budget may name. Larger values
#: give no meaningful privacy and would overflow the exact samplers' integer ranges.
MAX_EPSILON = float(1 << 20)


class EpsilonError(ValueError):
    """An ε that cannot be counted: non-finite, not a number, below 2^-24 or too large."""


def epsilon_units(epsilon: object, name: str = "epsilon") -> int:
    """``⌊ε · 2^24⌋`` as an int, for ``2^-24 <= ε <= MAX_EPSILON``; else :class:`EpsilonError`."""
    if type(epsilon) is float:  # memoized: every task check asks for the same few values
        return _float_units(epsilon, name)
    return _units(epsilon, name)


@functools.lru_cache(maxsize=4096)
def _float_units(epsilon: float, name: str) -> int:
    return _units(epsilon, name)


def _units(epsilon: object, name: str) -> int:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (Real, Fraction)):
        raise EpsilonError(f"{name} must be a number, got {epsilon!r}")
    if isinstance(epsilon, Fraction):
        value = epsilon
    else:
        f = float(epsilon)
        if not math.isfinite(f):
            raise EpsilonError(f"{name} must be finite, got {epsilon!r}")
        value = Fraction(f)
    if value <= 0:
        raise EpsilonError(f"{name} must be positive, got {epsilon!r}")
    if value > MAX_EPSILON:
        raise EpsilonError(f"{name}={float(value):.6g} is above the largest supported "
                           f"epsilon {MAX_EPSILON:.0f}")
    units = math.floor(value * EPS_DENOMINATOR)
    if units < 1:
        raise EpsilonError(f"{name}={float(value):.3g} is below the smallest supported "
                           "epsilon 2^-24")
    return units


def units_to_epsilon(units: int) -> float:
    """The real number ``units · 2^-24`` (exact in float64 for every supported value)."""
    return units / EPS_DENOMINATOR


def split_epsilon(epsilon: float, parts: int) -> float:
    """The largest ε_c on the 2^-24 grid with ``parts · units(ε_c) <= units(ε)``.

    Planners use it to divide a budget among components so that the device's exact
    check (sum of component units <= budget units) always passes.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    each = epsilon_units(epsilon) // parts
    if each < 1:
        raise EpsilonError(f"epsilon={epsilon!r} split into {parts} parts is below 2^-24 each")
    return units_to_epsilon(each)
