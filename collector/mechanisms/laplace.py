"""Discrete Laplace, collector half (``docs/mechanisms.md``): the one-hot bins and the grid
values are their own unbiased estimates; the variance is the exact discrete-Laplace
variance (``uldp.client.noise``). Device half: ``uldp.client.mechanisms.laplace``."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from uldp.client.mechanisms.laplace import LaplaceBins, LaplaceValues
from uldp.client.noise import discrete_laplace_variance, laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.collector.mechanisms.base import Bounds, Piece, bounds, check_shape, require

__all__ = ["LaplaceBinsDecoder", "LaplaceValuesDecoder"]


class LaplaceBinsDecoder:
    name = "laplace"
    binary = False  # the "support" is the noisy one-hot report itself

    def bounds(self, k: int, eps: float) -> Bounds:
        """A report is ``k`` integers of absolute value at most the noise tail's limit."""
        lim = LaplaceBins().limit(k, eps)
        return bounds(-lim, lim)

    def invalid(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        return self.bounds(k, eps).invalid(reports)

    def rule(self, k: int, eps: float) -> str:
        lim = LaplaceBins().limit(k, eps)
        return f"a noisy one-hot report is {k} integers in [-{lim}, {lim}]"

    def support(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        r = check_shape(reports, k)
        require(self.invalid(r, k, eps), r, self.rule(k, eps))
        return r

    def pq(self, k: int, eps: float) -> tuple[float, float]:
        return 1.0, 0.0

    def variance(self, f: np.ndarray, k: int, eps: float) -> np.ndarray:
        v = discrete_laplace_variance(laplace_scale(2, eps).value)
        return np.full(np.shape(f), v)

    def functional_variance(self, F: np.ndarray, k: int, eps: float) -> np.ndarray:
        """Independent noise on every entry: ``Var DLap(2/ε) Σ_j F_j²`` whatever the value."""
        F = np.atleast_2d(np.asarray(F, dtype=np.float64))
        v = discrete_laplace_variance(laplace_scale(2, eps).value)
        return np.repeat(v * (F * F).sum(axis=1, keepdims=True), F.shape[1], axis=1)

    def mean_functional_variance(self, F: np.ndarray, pi: np.ndarray, k: int, eps: float
                                 ) -> np.ndarray:
        F = np.atleast_2d(np.asarray(F, dtype=np.float64))
        return discrete_laplace_variance(laplace_scale(2, eps).value) * (F * F).sum(axis=1)


class LaplaceValuesDecoder:
    name = "laplace"

    def bounds(self, eps: float) -> Bounds:
        """A report integer is a noisy grid value of absolute value at most the noise
        tail's limit."""
        lim = LaplaceValues().limit(eps)
        return bounds(-lim, lim)

    def invalid(self, z: np.ndarray, eps: float) -> np.ndarray:
        return self.bounds(eps).invalid_entries(z)

    def rule(self, eps: float) -> str:
        lim = LaplaceValues().limit(eps)
        return f"a noisy grid value is an integer in [-{lim}, {lim}]"

    def decode(self, z: np.ndarray, eps: float) -> np.ndarray:
        z = np.asarray(z)
        require(self.invalid(z, eps), z, self.rule(eps))
        return np.asarray(z, dtype=np.int64)

    def pieces(self, eps: float) -> list[Piece]:
        """The identity (every integer is its own grid value)."""
        return [(-(1 << 62), 1 << 62, Fraction(1), Fraction(0), Fraction(1))]

    def variance(self, g: np.ndarray, eps: float) -> np.ndarray:
        v = discrete_laplace_variance(laplace_scale(GRID_STEPS, eps).value)
        return np.full(np.shape(g), v)
