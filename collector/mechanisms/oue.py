"""Optimized unary encoding, collector half (``docs/mechanisms.md``): the support is the
reported bit vector; ``p* = 1/2``, ``q* = Q/2^64``. Device half:
``uldp.client.mechanisms.oue``."""

from __future__ import annotations

import numpy as np

from uldp.client.mechanisms.exact import ONE, units_of
from uldp.client.mechanisms.oue import oue_q
from uldp.collector.mechanisms.base import (
    Bounds,
    bounds,
    check_shape,
    independent_functional_variance,
    independent_mean_variance,
    pure_variance,
    require,
)

__all__ = ["OUEDecoder"]


class OUEDecoder:
    name = "oue"
    binary = True  # supports are 0/1

    def bounds(self, k: int, eps: float) -> Bounds:
        """A report is ``k`` bits."""
        return bounds(0, 1)

    def invalid(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        return self.bounds(k, eps).invalid(reports)

    def rule(self, k: int, eps: float) -> str:
        return f"a unary-encoding report is {k} bits (each 0 or 1)"

    def support(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        r = check_shape(reports, k)
        require(self.invalid(r, k, eps), r, self.rule(k, eps))
        return r

    def pq(self, k: int, eps: float) -> tuple[float, float]:
        return 0.5, oue_q(units_of(eps)) / ONE

    def variance(self, f: np.ndarray, k: int, eps: float) -> np.ndarray:
        return pure_variance(f, *self.pq(k, eps))

    def functional_variance(self, F: np.ndarray, k: int, eps: float) -> np.ndarray:
        """The bits are independent given the value."""
        return independent_functional_variance(F, *self.pq(k, eps))

    def mean_functional_variance(self, F: np.ndarray, pi: np.ndarray, k: int, eps: float
                                 ) -> np.ndarray:
        return independent_mean_variance(F, pi, *self.pq(k, eps))
