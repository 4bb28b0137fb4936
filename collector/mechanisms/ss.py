"""Subset selection, collector half (``docs/mechanisms.md``): the support is the reported
subset; ``p* = P_in/2^64`` and ``q* = p*(ω−1)/(k−1) + (1−p*)ω/(k−1)``. Device half:
``uldp.client.mechanisms.ss``."""

from __future__ import annotations

import numpy as np

from uldp.client.mechanisms.exact import ONE, units_of
from uldp.client.mechanisms.ss import ss_design
from uldp.collector.mechanisms.base import (
    ReportError,
    check_layout,
    check_range,
    check_shape,
    pure_variance,
)

__all__ = ["SSDecoder"]


class SSDecoder:
    name = "ss"
    binary = True  # supports are 0/1

    def support_pairs(self, reports: np.ndarray, k: int, eps: float
                      ) -> tuple[np.ndarray, np.ndarray]:
        """(report index, category) of every support entry: the reported subset."""
        d = ss_design(k, units_of(eps))
        r = check_shape(reports, d.omega)
        check_range(r, 0, k - 1, "value")
        if d.omega > 1 and np.any(np.diff(r, axis=1) <= 0):
            raise ReportError("a subset report lists distinct values in increasing order")
        return np.repeat(np.arange(r.shape[0]), d.omega), r.ravel()

    def support_counts(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        """How many reports support each category (a scatter-add over the subsets, in
        the reports' own integer type: no ``(n, k)`` array, no widening copy)."""
        d = ss_design(k, units_of(eps))
        r = check_layout(reports, d.omega)
        check_range(r, 0, k - 1, "value")
        if d.omega > 1 and bool((r[:, 1:] <= r[:, :-1]).any()):
            raise ReportError("a subset report lists distinct values in increasing order")
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
