"""The hybrid mechanism, collector half (``docs/mechanisms.md``): a report ``j < N`` is a PM
output, ``N + b`` a Duchi bit; each branch decodes without bias, so the mixture does, with
``Var = α Var_PM + (1 − α) Var_Duchi``. Device half: ``uldp.client.mechanisms.hm``."""

from __future__ import annotations

import numpy as np

from uldp.client.mechanisms.exact import ONE, units_of
from uldp.client.mechanisms.hm import hm_alpha
from uldp.client.mechanisms.pm import pm_design
from uldp.collector.mechanisms.base import Bounds, Piece, ReportError, bounds, require
from uldp.collector.mechanisms.duchi import DuchiDecoder
from uldp.collector.mechanisms.pm import PMDecoder

__all__ = ["HMDecoder"]


class HMDecoder:
    name = "hm"

    def bounds(self, eps: float) -> Bounds:
        """A report integer is a PM cell in ``[0, N − 1]`` or ``N + b`` for Duchi's bit
        ``b``: in ``[0, N + 1]``."""
        return bounds(0, pm_design(units_of(eps)).cells + 1)

    def invalid(self, z: np.ndarray, eps: float) -> np.ndarray:
        return self.bounds(eps).invalid_entries(z)

    def rule(self, eps: float) -> str:
        N = pm_design(units_of(eps)).cells
        return (f"a hybrid-mechanism report is a cell in [0, {N - 1}] or {N} + a bit: in "
                f"[0, {N + 1}]")

    def decode(self, z: np.ndarray, eps: float) -> np.ndarray:
        z = np.asarray(z)
        if not np.issubdtype(z.dtype, np.integer):
            raise ReportError(f"report entries must be integers, got dtype {z.dtype}")
        N = pm_design(units_of(eps)).cells
        require(self.invalid(z, eps), z, self.rule(eps))
        duchi = z >= N
        out = np.empty(z.shape, dtype=np.float64)
        out[duchi] = DuchiDecoder().decode(z[duchi] - N, eps)
        out[~duchi] = PMDecoder().decode(z[~duchi], eps)
        return out

    def pieces(self, eps: float) -> list[Piece]:
        """PM's piece below ``N``; Duchi's on ``N + b`` (shifted by ``N``)."""
        N = pm_design(units_of(eps)).cells
        (_, _, scale, offset, div), = DuchiDecoder().pieces(eps)
        return [*PMDecoder().pieces(eps), (N, N + 1, scale, offset + scale * N, div)]

    def variance(self, g: np.ndarray, eps: float) -> np.ndarray:
        a = hm_alpha(units_of(eps)) / ONE
        return a * PMDecoder().variance(g, eps) + (1 - a) * DuchiDecoder().variance(g, eps)
