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
    moments,
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

    def functional_variance(self, F: np.ndarray, k: int, eps: float) -> np.ndarray:
        """The support is a subset of ``ω`` values: ``v`` is in it w.p. ``p*``, then the
        other ``ω − 1`` (else ``ω``) uniformly among the ``k − 1`` others, which gives every
        pairwise inclusion probability and so the exact variance."""
        F = np.atleast_2d(np.asarray(F, dtype=np.float64))
        p, q = self.pq(k, eps)
        if k == 1:
            return np.zeros_like(F)
        w = ss_design(k, units_of(eps)).omega
        S1, S2 = F.sum(axis=1, keepdims=True), (F * F).sum(axis=1, keepdims=True)
        Fo, G = S1 - F, S2 - F * F  # over the values other than v
        r1 = p * (w - 1) / (k - 1)  # P(v and one given other)
        r2 = ((p * (w - 1) * (w - 2) + (1 - p) * w * (w - 1)) / ((k - 1) * (k - 2))
              if k > 2 else 0.0)  # P(two given others)
        var = (F * F * p * (1 - p) + G * q * (1 - q) + 2 * F * Fo * (r1 - p * q)
               + (Fo * Fo - G) * (r2 - q * q))
        return np.maximum(var, 0.0) / (p - q) ** 2

    def _pairs(self, k: int, eps: float) -> tuple[float, float, float, float]:
        """``(p*, q*, P(v and one given other), P(two given others))``."""
        p, q = self.pq(k, eps)
        w = ss_design(k, units_of(eps)).omega
        r1 = p * (w - 1) / (k - 1)
        r2 = ((p * (w - 1) * (w - 2) + (1 - p) * w * (w - 1)) / ((k - 1) * (k - 2))
              if k > 2 else 0.0)
        return p, q, r1, r2

    def mean_functional_variance(self, F: np.ndarray, pi: np.ndarray, k: int, eps: float
                                 ) -> np.ndarray:
        """:meth:`functional_variance` expanded in ``F_v`` and averaged over ``π``."""
        if k == 1:
            return np.zeros(np.atleast_2d(F).shape[0])
        p, q, r1, r2 = self._pairs(k, eps)
        m1, m2, S1, S2 = moments(F, pi)
        a, b = r1 - p * q, r2 - q * q
        var = (m2 * (p * (1 - p) - q * (1 - q) - 2 * a + 2 * b)
               + m1 * 2 * S1 * (a - b) + S2 * q * (1 - q) + (S1 * S1 - S2) * b)
        return np.maximum(var, 0.0) / (p - q) ** 2
