"""Public parameters of one Algorithm-1 instance (one scalar *component*) and its binning.

Sections of ``docs/algorithms.md``: §3.2 (binning), §3.3 (components), §4.2 (bounded parameters),
§4.6 (heavy-tailed parameters), decisions [D3], [D5], [D6], [D22], [D24], and §2.4/[D12]
(``k̂ = 0`` is the full-support fallback).

Every value here is a function of public inputs only; the device recomputes them itself
(INV-7) and the collector calls the very same functions to decode reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "GRID_STEPS",
    "Alg1Params",
    "bin_index",
    "bounded_params",
    "heavy_tailed_params",
    "support_bins",
]

#: Fixed-point resolution of scalar reports: a clamp interval of width W is divided into
#: GRID_STEPS steps, so the rounding error per report is at most W / (2·GRID_STEPS).
GRID_STEPS = 1 << 16


@dataclass(frozen=True)
class Alg1Params:
    """Algorithm-1 parameters of one component: support ``[-D, D]``, bin width ``h``,
    clipping margin ``Δ`` and number of stage-I bins ``B``."""

    bound: float  # D (or D_c)
    bin_width: float  # h
    margin: float  # Δ
    bins: int  # B

    def __post_init__(self) -> None:
        for name in ("bound", "bin_width"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite positive number, got {v!r}")
        if not math.isfinite(self.margin) or self.margin < 0:
            raise ValueError(f"margin must be finite and non-negative, got {self.margin!r}")
        if self.bins < 1:
            raise ValueError(f"bins must be >= 1, got {self.bins!r}")

    def clamp_interval(self, khat: int) -> tuple[float, float]:
        """Stage-II clamp interval ``[L - Δ, R + Δ]`` derived from the broadcast ``k̂``.

        ``L = -D + (k̂-2)h``, ``R = -D + (k̂+1)h`` (§4.3 step 5, [D22]); ``k̂ = 0`` means
        stage I received nothing and the clamp is the full support ``[-D, D]`` ([D12]).
        """
        if not 0 <= khat <= self.bins:
            raise ValueError(f"khat must be in [0, {self.bins}], got {khat}")
        if khat == 0:
            return -self.bound, self.bound
        lo = -self.bound + (khat - 2) * self.bin_width - self.margin
        hi = -self.bound + (khat + 1) * self.bin_width + self.margin
        return lo, hi

    @property
    def stage2_width(self) -> float:
        """``R - L + 2Δ = 3h + 2Δ``: the stage-II sensitivity (noise ``Lap(width/ε_c)``)."""
        return 3 * self.bin_width + 2 * self.margin


def _log_n(n: int) -> float:
    return math.log(max(int(n), 2))


def bounded_params(bound: float, m: int, n_delta: int) -> Alg1Params:
    """Theorem 1 parameters: ``h = 4D/√m``, ``Δ = D√(ln N_Δ / m)``, ``B = ⌈2D/h⌉``."""
    if not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m (samples per user) must be a positive integer, got {m!r}")
    if not math.isfinite(bound) or bound <= 0:
        raise ValueError(f"bound must be a finite positive number, got {bound!r}")
    h = 4.0 * bound / math.sqrt(m)
    margin = bound * math.sqrt(_log_n(n_delta) / m)
    return Alg1Params(bound, h, margin, _bins(bound, h))


def heavy_tailed_params(p: float, moment: float, m: int, n_run: int, eps_c: float,
                        c: float = 1.0) -> Alg1Params:
    """§4.6 / [D6]: ``E|X|^p <= M_p`` with ``p >= 2``.

    ``Δ = c M^{1/p} √(ln m/m) ∨ (M_p² n ε²)^{1/(2p)} m^{-(1-1/p)}``,
    ``D = 2 max(M^{1/p}, Δ)``, ``h = 4 M^{1/p}/√m``.
    """
    if not math.isfinite(p) or p < 2:
        raise ValueError(f"moment order p must be >= 2, got {p!r}")
    if not math.isfinite(moment) or moment <= 0:
        raise ValueError(f"moment bound M_p must be positive, got {moment!r}")
    if m < 1:
        raise ValueError(f"m (samples per user) must be >= 1, got {m!r}")
    scale = moment ** (1.0 / p)
    margin = max(
        c * scale * math.sqrt(math.log(m) / m) if m > 1 else 0.0,
        (moment**2 * max(n_run, 1) * eps_c**2) ** (1.0 / (2 * p)) * m ** (-(1.0 - 1.0 / p)),
    )
    bound = 2.0 * max(scale, margin)
    h = 4.0 * scale / math.sqrt(m)
    return Alg1Params(bound, h, margin, _bins(bound, h))


def support_bins(bound: float, h: float) -> int | None:
    """``max(1, ⌈(2.0·D)/h − 10^-9⌉)``: the number of bins of width ``h`` that cover the
    support ``[-D, D]`` (protocol §7.1), or None when ``2D/h`` overflows. The tolerance keeps
    B at 5 when ``2D/h = 5.000000001`` from float noise ([D3]). A device accepts a stage-I
    component only with exactly this B (protocol §14.1), so no bin index exceeds B."""
    r = (2.0 * bound) / h
    if not math.isfinite(r):
        return None
    return max(1, math.ceil(r - 1e-9))


def _bins(bound: float, h: float) -> int:
    b = support_bins(bound, h)
    if b is None:
        raise ValueError(f"2D/h overflows for D={bound!r}, h={h!r}")
    return b


def bin_index(y: np.ndarray, params: Alg1Params) -> np.ndarray:
    """1-based bin of each value: ``min(B, ⌊(clamp(y,-D,D)+D)/h⌋ + 1)`` (§3.2).

    The cap at B is applied to the double, before any conversion to an integer: the index
    of a hostile grid (a tiny h) never overflows (protocol §7.3)."""
    y = np.clip(np.asarray(y, dtype=np.float64), -params.bound, params.bound)
    k = np.minimum(np.floor((y + params.bound) / params.bin_width) + 1.0, float(params.bins))
    return k.astype(np.int64)
