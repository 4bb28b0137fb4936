"""Exact user-level sensitivities and worst-case clipping biases of a subset's statistics.

See ``docs/central.md`` ("subset-stats"). Reference: ``docs/central-algorithms.md`` C§2.1
(baseline sensitivities, Prop. III.1), C§2.2 (clip sensitivities, Lemma III.3: one
``var_sensitivity`` serves both) and C§2.3 (worst-case bias, Thm IV.1 and the **corrected**
Thm IV.2, C§5 B3).

Pure formulas of public counts (largest per-user count m⋆ or Γ⋆, total N or S) and the
range width U; exact on :class:`fractions.Fraction` inputs.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["Number", "mean_bias", "mean_sensitivity", "var_bias", "var_sensitivity"]

Number = Any  # int, float or fractions.Fraction (formulas are exact on Fractions)


def _check_count(name: str, value: Number, *, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def _check_upper(upper: Number) -> Number:
    ok: Any
    if isinstance(upper, Fraction):
        ok = upper > 0
    else:
        ok = isinstance(upper, (int, float, np.integer, np.floating)) and math.isfinite(
            upper) and upper > 0
    if not ok:
        raise ValueError(f"upper (the range width U) must be a finite positive number, "
                         f"got {upper!r}")
    return upper


def mean_sensitivity(max_count: int, total: int, upper: Number) -> Number:
    """Δ_μ = U·m⋆/N (eq. 5); with (Γ⋆, S) it is the clipped Δ (eq. 9)."""
    m = _check_count("max_count", max_count, minimum=1)
    n = _check_count("total", total, minimum=1)
    if m > n:
        raise ValueError(f"max_count ({m}) cannot exceed total ({n})")
    return _check_upper(upper) * m / n


def var_sensitivity(max_count: int, total: int, upper: Number) -> Number:
    """Exact user-level sensitivity of the population variance (Prop. III.1, Lemma III.3).

    ``max_count`` = largest per-user count m⋆ (or Γ⋆), ``total`` = N (or S), ``upper`` = U.
    """
    m = _check_count("max_count", max_count, minimum=1)
    n = _check_count("total", total, minimum=1)
    if m > n:
        raise ValueError(f"max_count ({m}) cannot exceed total ({n})")
    u2 = _check_upper(upper) ** 2
    if n > 2 * m:
        return u2 * (m * (n - m)) / (n * n)
    if n % 2 == 0:
        return u2 / 4
    return u2 * (n * n - 1) / (4 * n * n)


def mean_bias(kept: int, total: int, upper: Number) -> Number:
    """Worst-case |μ − μ_clip| = U(N − S)/N (Thm IV.1)."""
    s = _check_count("kept", kept, minimum=0)
    n = _check_count("total", total, minimum=1)
    if s > n:
        raise ValueError(f"kept ({s}) cannot exceed total ({n})")
    return _check_upper(upper) * (n - s) / n


def var_bias(kept: int, total: int, upper: Number) -> Number:
    """Worst-case |Var − Var_clip| (Thm IV.2 **corrected**, C§2.3 / C§5 B3).

    0 if nothing is dropped; ``U²S(N−S)/N²`` if ``2S > N``; else ``U²/4`` (N even) or
    ``U²/4·(1 − 1/N²)`` (N odd). ``kept = 0`` is the suppressed-everything limit.
    """
    s = _check_count("kept", kept, minimum=0)
    n = _check_count("total", total, minimum=1)
    if s > n:
        raise ValueError(f"kept ({s}) cannot exceed total ({n})")
    u2 = _check_upper(upper) ** 2
    if s == n:
        return u2 * 0
    if 2 * s > n:
        return u2 * (s * (n - s)) / (n * n)
    if n % 2 == 0:
        return u2 / 4
    return u2 * (n * n - 1) / (4 * n * n)
