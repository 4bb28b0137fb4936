"""Argument checks shared by the central estimators; every error names the bad argument.

See ``docs/central.md``. ``validate_budget`` is the (ε, δ) check of HLM and WME
(``docs/central-algorithms.md`` H§2.10, input validation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["finite_number", "is_finite_number", "require_positive", "validate_budget"]


def finite_number(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite real number (not a bool); else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def is_finite_number(x: Any) -> bool:
    """Whether ``x`` is a finite real number (not a bool)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) \
        and math.isfinite(float(x))


def require_positive(name: str, x: Any) -> None:
    """ValueError unless ``x`` is a finite positive number."""
    if not is_finite_number(x) or float(x) <= 0:
        raise ValueError(f"{name} must be a finite positive number, got {x!r}")


def validate_budget(epsilon: Any, delta: Any) -> tuple[float, float]:
    """Check ``ε > 0`` finite and ``0 < δ < 1``; errors name the bad argument."""
    if not is_finite_number(epsilon) or float(epsilon) <= 0:
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
    if not is_finite_number(delta) or not 0 < float(delta) < 1:
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
    return float(epsilon), float(delta)
