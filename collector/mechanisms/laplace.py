"""Discrete Laplace, collector half (``docs/mechanisms.md``): the one-hot bins and the grid
values are their own unbiased estimates; the variance is the exact discrete-Laplace
variance (``uldp.client.noise``). Device half: ``uldp.client.mechanisms.laplace``."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from uldp.client.noise import discrete_laplace_variance, laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.collector.mechanisms.base import Piece, check_range, check_shape

__all__ = ["LaplaceBinsDecoder", "LaplaceValuesDecoder"]


class LaplaceBinsDecoder:
    name = "laplace"
    binary = False  # the "support" is the noisy one-hot report itself

    def support(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        r = check_shape(reports, k)
        lim = int(1 + 60 * 2 / eps) + 1
        check_range(r, -lim, lim, "report entry")
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

    def decode(self, z: np.ndarray, eps: float) -> np.ndarray:
        return np.asarray(z, dtype=np.int64)

    def pieces(self, eps: float) -> list[Piece]:
        """The identity (every integer is its own grid value)."""
        return [(-(1 << 62), 1 << 62, Fraction(1), Fraction(0), Fraction(1))]

    def variance(self, g: np.ndarray, eps: float) -> np.ndarray:
        v = discrete_laplace_variance(laplace_scale(GRID_STEPS, eps).value)
        return np.full(np.shape(g), v)
