"""Subset selection, collector half (``docs/mechanisms.md``): the support is the reported
subset; ``p* = P_in/2^64`` and ``q* = p*(ω−1)/(k−1) + (1−p*)ω/(k−1)``. Device half:
``uldp.client.mechanisms.ss``."""

from __future__ import annotations

import numpy as np

from uldp.client.mechanisms.exact import ONE, units_of
from uldp.client.mechanisms.ss import ss_design
from uldp.collector.mechanisms.base import (
    Bounds,
    bounds,
    check_layout,
    check_shape,
    pure_variance,
    require,
)

__all__ = ["SSDecoder"]


class SSDecoder:
    name = "ss"
    binary = True  # supports are 0/1

    def bounds(self, k: int, eps: float) -> Bounds:
        """A report is ω values in ``[0, k − 1]``, strictly increasing (so distinct)."""
        return bounds(0, k - 1, increasing=True)

    def invalid(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        return self.bounds(k, eps).invalid(reports)

    def rule(self, k: int, eps: float) -> str:
        omega = ss_design(k, units_of(eps)).omega
        return (f"a subset-selection report lists {omega} distinct values in increasing "
                f"order, each in [0, {k - 1}]")

    def support_pairs(self, reports: np.ndarray, k: int, eps: float
                      ) -> tuple[np.ndarray, np.ndarray]:
        """(report index, category) of every support entry: the reported subset."""
        d = ss_design(k, units_of(eps))
        r = check_shape(reports, d.omega)
        require(self.invalid(r, k, eps), r, self.rule(k, eps))
        return np.repeat(np.arange(r.shape[0]), d.omega), r.ravel()

    def support_counts(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        """How many reports support each category (a scatter-add over the subsets, in
        the reports' own integer type: no ``(n, k)`` array, no widening copy)."""
        d = ss_design(k, units_of(eps))
        r = check_layout(reports, d.omega)
        require(self.invalid(r, k, eps), r, self.rule(k, eps))
        return np.bincount(r.reshape(-1), minlength=k)

    def support(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        rows, cols = self.support_pairs(reports, k, eps)
        r = np.asarray(reports)
        out = np.zeros((r.shape[0] if r.ndim == 2 else 1, k), dtype=np.int64)
        out[rows, cols] = 1
        return out

    def pq(self, k: int, eps: float) -> tuple[float, float]:
        if k == 1:
            return 1.0, 0.0
        d = ss_design(k, units_of(eps))
        p = d.P_in / ONE
        return p, (p * (d.omega - 1) + (1 - p) * d.omega) / (k - 1)

    def variance(self, f: np.ndarray, k: int, eps: float) -> np.ndarray:
        return pure_variance(f, *self.pq(k, eps))
