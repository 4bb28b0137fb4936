"""Discrete Laplace, the default mechanism of both families, as registry entries —
``docs/device-protocol.md`` §9 (the reports), §5 (the sampler).

The mechanisms themselves are ``uldp.client.mechanisms.two_stage`` (the reports of every
method before the other mechanisms existed): stage-I bins are the one-hot vector of the bin
plus ``DLap(2/ε_c)`` per entry; values are the grid integer plus ``DLap(2^16/ε_c)``. A task
without a ``mechanism`` field uses them, byte for byte as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from uldp.client.noise import discrete_laplace, discrete_laplace_pmf, laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.client.randomness import RandomSource

__all__ = ["LaplaceBins", "LaplaceValues"]


class LaplaceBins:
    """Stage-I bins: one-hot of the bin plus ``DLap(2/ε_c)`` per entry (§9.1)."""

    name = "laplace"
    family = "oracle"

    def length(self, k: int, eps: float) -> int:
        return k

    def limit(self, k: int, eps: float) -> int:
        return int(1 + 60 * 2 / eps) + 1

    def privatize(self, items: np.ndarray, k: int, eps: float, rng: RandomSource
                  ) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        onehot = np.zeros((items.size, k), dtype=np.int64)
        onehot[np.arange(items.size), items] = 1
        return onehot + discrete_laplace(laplace_scale(2, eps),
                                         onehot.shape, rng)

    def privatize_many(self, items: np.ndarray, ks: Sequence[int], eps: float,
                       rng: RandomSource) -> np.ndarray:
        """One-hot vectors concatenated, then one noise call for all entries (§9.1)."""
        items = np.asarray(items, dtype=np.int64)
        n = items.shape[0]
        onehot = np.zeros((n, int(sum(ks))), dtype=np.int64)
        start = 0
        for c, k in enumerate(ks):
            onehot[np.arange(n), start + items[:, c]] = 1
            start += int(k)
        return onehot + discrete_laplace(laplace_scale(2, eps), onehot.shape, rng)

    def probability(self, report: Sequence[int], item: int, k: int, eps: float) -> float:
        t = laplace_scale(2, eps).value
        z = np.asarray(report, dtype=np.float64) - np.eye(k)[item]
        return float(math.prod(discrete_laplace_pmf(z, t)))


class LaplaceValues:
    """Values: the grid integer plus ``DLap(2^16/ε_c)`` (§9.2)."""

    name = "laplace"
    family = "scalar"

    def limit(self, eps: float) -> int:
        return int(GRID_STEPS * (1 + 60 / eps)) + 1

    def privatize(self, g: np.ndarray, eps: float, rng: RandomSource) -> np.ndarray:
        g = np.asarray(g, dtype=np.int64)
        return g + discrete_laplace(laplace_scale(GRID_STEPS, eps),
                                    g.shape, rng)

    def probability(self, z: int, g: int, eps: float) -> float:
        t = laplace_scale(GRID_STEPS, eps).value
        return float(discrete_laplace_pmf(np.array([z - g]), t)[0])
