"""Generalized randomized response, collector half (``docs/mechanisms.md``): the support of
a report ``y`` is ``{y}``; ``p* = P/2^64``, ``q* = Q/2^64`` from the design. Device half:
``uldp.client.mechanisms.grr``."""

from __future__ import annotations

import numpy as np

from uldp.client.mechanisms.exact import ONE, units_of
from uldp.client.mechanisms.grr import grr_design
from uldp.collector.mechanisms.base import (
    Bounds,
    bounds,
    check_layout,
    check_shape,
    pure_variance,
    require,
)

__all__ = ["GRRDecoder"]


class GRRDecoder:
    name = "grr"
    binary = True  # supports are 0/1

    def bounds(self, k: int, eps: float) -> Bounds:
        """A report is one value in ``[0, k − 1]``."""
        return bounds(0, k - 1)

    def invalid(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        return self.bounds(k, eps).invalid(reports)

    def rule(self, k: int, eps: float) -> str:
        return f"a randomized-response report is one value in [0, {k - 1}]"

    def support_pairs(self, reports: np.ndarray, k: int, eps: float
                      ) -> tuple[np.ndarray, np.ndarray]:
        """(report index, category) of every support entry: the reported value."""
        r = check_shape(reports, 1)
        require(self.invalid(r, k, eps), r, self.rule(k, eps))
        return np.arange(r.shape[0]), r[:, 0]

    def support_counts(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        """How many reports carry each value (a scatter-add, no ``(n, k)`` array)."""
        r = check_layout(reports, 1)
        require(self.invalid(r, k, eps), r, self.rule(k, eps))
        return np.bincount(r.reshape(-1), minlength=k)

    def support(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        rows, cols = self.support_pairs(reports, k, eps)
        out = np.zeros((rows.size, k), dtype=np.int64)
        out[rows, cols] = 1
        return out

    def pq(self, k: int, eps: float) -> tuple[float, float]:
        if k == 1:
            return 1.0, 0.0
        d = grr_design(k, units_of(eps))
        return d.P / ONE, d.Q / ONE

    def variance(self, f: np.ndarray, k: int, eps: float) -> np.ndarray:
        return pure_variance(f, *self.pq(k, eps))
