"""Duchi et al.'s one bit, collector half (``docs/mechanisms.md``): ``P(b = 1 | g) =
(P_min + D·g)/2^64``, so ``ĝ = (b·2^64 − P_min)/D`` is unbiased with variance
``p(1−p)(2^64/D)²``. Device half: ``uldp.client.mechanisms.duchi``."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.duchi import duchi_design
from uldp.client.mechanisms.exact import ONE, units_of
from uldp.collector.mechanisms.base import Bounds, Piece, ReportError, bounds, require

__all__ = ["DuchiDecoder"]


class DuchiDecoder:
    name = "duchi"

    def bounds(self, eps: float) -> Bounds:
        """A report integer is a bit."""
        return bounds(0, 1)

    def invalid(self, z: np.ndarray, eps: float) -> np.ndarray:
        return self.bounds(eps).invalid_entries(z)

    def rule(self, eps: float) -> str:
        return "a one-bit (Duchi) report is 0 or 1"

    def decode(self, z: np.ndarray, eps: float) -> np.ndarray:
        z = np.asarray(z)
        if not np.issubdtype(z.dtype, np.integer):
            raise ReportError(f"report entries must be integers, got dtype {z.dtype}")
        require(self.invalid(z, eps), z, self.rule(eps))
        P_min, D = duchi_design(units_of(eps))
        return (z * float(ONE) - float(P_min)) / float(D)

    def pieces(self, eps: float) -> list[Piece]:
        """``ĝ = (b·2^64 − P_min)/D`` for the bit ``b`` (module docstring)."""
        P_min, D = duchi_design(units_of(eps))
        return [(0, 1, Fraction(float(ONE)), Fraction(float(P_min)), Fraction(float(D)))]

    def variance(self, g: np.ndarray, eps: float) -> np.ndarray:
        P_min, D = duchi_design(units_of(eps))
        p = (P_min + D * np.asarray(g, dtype=np.float64)) / ONE
        return p * (1 - p) * (ONE / D) ** 2
