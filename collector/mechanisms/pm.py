"""The piecewise mechanism on the grid, collector half (``docs/mechanisms.md``).

With ``N`` output cells, window ``W``, ``π_in = P_w/(2^64 W)`` and
``π_out = (2^64 − P_w)/2^80``:
``E[j | g] = π_out N(N−1)/2 + (π_in − π_out)(W g + W(W−1)/2)``, affine in ``g``, so
``ĝ = (j − π_out N(N−1)/2 − (π_in − π_out) W(W−1)/2) / ((π_in − π_out) W)`` is unbiased,
and ``Var(ĝ | g) = Var(j | g) / ((π_in − π_out) W)²`` with ``E[j² | g]`` from the sums of
squares over the whole range and the window. Device half: ``uldp.client.mechanisms.pm``."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from uldp.client.mechanisms.exact import ONE, units_of
from uldp.client.mechanisms.pm import pm_design
from uldp.client.params import GRID_STEPS
from uldp.collector.mechanisms.base import Bounds, Piece, ReportError, bounds, require

__all__ = ["PMDecoder", "pm_moments"]


def _s1(x: Any) -> Any:
    return x * (x - 1) / 2  # Σ_{j<x} j


def _s2(x: Any) -> Any:
    return (x - 1) * x * (2 * x - 1) / 6  # Σ_{j<x} j²


def pm_moments(eps: float) -> tuple[float, float, int, int]:
    d = pm_design(units_of(eps))
    return d.P_w / (ONE * d.W), (ONE - d.P_w) / (ONE * GRID_STEPS), d.W, d.cells


class PMDecoder:
    name = "pm"

    def bounds(self, eps: float) -> Bounds:
        """A report integer is a cell in ``[0, N − 1]``."""
        return bounds(0, pm_design(units_of(eps)).cells - 1)

    def invalid(self, z: np.ndarray, eps: float) -> np.ndarray:
        return self.bounds(eps).invalid_entries(z)

    def rule(self, eps: float) -> str:
        N = pm_design(units_of(eps)).cells
        return f"a piecewise-mechanism report is a cell in [0, {N - 1}]"

    def decode(self, z: np.ndarray, eps: float) -> np.ndarray:
        z = np.asarray(z)
        if not np.issubdtype(z.dtype, np.integer):
            raise ReportError(f"report entries must be integers, got dtype {z.dtype}")
        pin, pout, W, N = pm_moments(eps)
        require(self.invalid(z, eps), z, self.rule(eps))
        slope = (pin - pout) * W
        return (z - pout * _s1(float(N)) - (pin - pout) * _s1(float(W))) / slope

    def pieces(self, eps: float) -> list[Piece]:
        """``ĝ = (j − π_out S1(N) − (π_in − π_out) S1(W)) / ((π_in − π_out) W)`` for every
        cell ``j < N`` (one affine piece)."""
        pin, pout, W, N = pm_moments(eps)
        offset = Fraction(pout * _s1(float(N))) + Fraction((pin - pout) * _s1(float(W)))
        return [(0, N - 1, Fraction(1), offset, Fraction((pin - pout) * W))]

    def variance(self, g: np.ndarray, eps: float) -> np.ndarray:
        pin, pout, W, N = pm_moments(eps)
        g = np.asarray(g, dtype=np.float64)
        m1 = pout * _s1(float(N)) + (pin - pout) * (_s1(g + W) - _s1(g))
        m2 = pout * _s2(float(N)) + (pin - pout) * (_s2(g + W) - _s2(g))
        return (m2 - m1 * m1) / ((pin - pout) * W) ** 2
