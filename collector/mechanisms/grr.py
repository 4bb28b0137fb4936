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
    moments,
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

    def functional_variance(self, F: np.ndarray, k: int, eps: float) -> np.ndarray:
        """The support is the one reported value ``y``: ``Var F_y / (p − q)²`` with ``y = v``
        w.p. ``p`` and each other value w.p. ``q``."""
        p, q = self.pq(k, eps)
        F = np.atleast_2d(np.asarray(F, dtype=np.float64))
        S1, S2 = F.sum(axis=1, keepdims=True), (F * F).sum(axis=1, keepdims=True)
        mean = p * F + q * (S1 - F)
        second = p * F * F + q * (S2 - F * F)
        return np.maximum(second - mean * mean, 0.0) / (p - q) ** 2

    def mean_functional_variance(self, F: np.ndarray, pi: np.ndarray, k: int, eps: float
                                 ) -> np.ndarray:
        """``(p−q)(1 − (p−q)) E F_v² + q S₂ − 2(p−q) q S₁ E F_v − q² S₁²`` over ``(p − q)²``."""
        p, q = self.pq(k, eps)
        m1, m2, S1, S2 = moments(F, pi)
        d = p - q
        return np.maximum(d * (1 - d) * m2 + q * S2 - 2 * d * q * S1 * m1 - q * q * S1 * S1,
                          0.0) / d**2
