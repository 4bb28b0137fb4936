"""The release noise of the per-subset statistics: discrete Laplace on a fixed-point grid.

See ``docs/central.md`` ("subset-stats"). Reference: ``docs/central-algorithms.md`` C§5 B13
(discrete noise on the grid γ = Δ/2^k, Δ_int = 2^k + 1 units) and B9 (per-coordinate
intervals). The privacy argument of the grid, including the float-safety bound that
:func:`effective_bits` enforces, is in :mod:`uldp.collector.central.subset_release`.
"""

from __future__ import annotations

import math

import numpy as np

from uldp.client.noise import discrete_laplace, laplace_scale
from uldp.client.randomness import RandomSource

__all__ = ["effective_bits", "expected_abs_noise", "half_widths", "noise_interval",
           "release_on_grid"]

# Float-safety budget: the computed grid position may be off by at most 2^(k-48)·S units
# (see effective_bits); we keep that at or below 1/8 of a unit.
_FLOAT_SAFETY_EXP = 45


def expected_abs_noise(sensitivity: float, epsilon: float, *, grid_bits: int = 16) -> float:
    """E|γ·DLap(Δ_int/ε_r)| for the release's noise: γ = Δ/2^k, Δ_int = 2^k + 1 (B13).

    ``E|DLap(t)| = 2q/(1 − q²) = 1/sinh(1/t)``; this is at most ``Δ(1 + 2^-k)/ε_r``, the
    rounded-up continuous term.
    """
    if sensitivity == 0:
        return 0.0
    scale = laplace_scale((1 << grid_bits) + 1, epsilon)
    gamma = float(sensitivity) / (1 << grid_bits)
    return gamma / math.sinh(scale.den / scale.num)


def noise_interval(sensitivity: float, epsilon: float, *, delta: float = 0.05,
                   coordinates: int = 2, grid_bits: int = 16) -> float:
    """Half-width h with P(|noise| > h) ≤ δ/coordinates for one released coordinate (B9).

    Exact for the discrete noise: P(|Z| > k) = 2q^(k+1)/(1 + q) for Z ~ DLap(t).
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if sensitivity == 0:
        return 0.0
    scale = laplace_scale((1 << grid_bits) + 1, epsilon)
    logq = -scale.den / scale.num
    q = math.exp(logq)
    target = delta / coordinates
    k = max(0, math.ceil(math.log(target * (1 + q) / 2) / logq - 1))
    while 2 * math.exp(logq * (k + 1)) / (1 + q) > target:
        k += 1
    return k * float(sensitivity) / (1 << grid_bits)


def effective_bits(grid_bits: int, kept_total: np.ndarray) -> np.ndarray:
    """Per-subset k ≤ grid_bits with 2^(k-48)·S ≤ 1/8 (float safety; the privacy argument in
    :mod:`uldp.collector.central.subset_release`, step 3).

    Derivation: fsum makes the computed mean exact up to ≲ 2 ulp(U) ≤ 2^-51·U, and the
    two-pass variance up to ≲ 2^-49·U²; the division by γ adds a relative 2^-53. Since
    Δ_μ ≥ U/S and Δ_Var ≥ U²/(2S) for S ≥ 2, the error in grid units (γ = Δ/2^k) is at
    most 2^(k-48)·S. Requiring ≤ 1/8 gives k ≤ 45 − log2 S. Public (depends on S only).
    """
    s = np.maximum(np.asarray(kept_total, np.int64), 1)
    cap = _FLOAT_SAFETY_EXP - np.ceil(np.log2(s.astype(np.float64))).astype(np.int64)
    if (cap < 4).any():
        raise ValueError("a subset has too many records (> 2^41) for float-safe noise")
    return np.minimum(grid_bits, cap)


def release_on_grid(stat: np.ndarray, sens: np.ndarray, bits: np.ndarray, eps: float,
                 rng: RandomSource) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Snap ``stat`` to γ = Δ/2^k, add γ·DLap((2^k+1)/ε_r); Δ = 0 entries are exact."""
    out = stat.astype(np.float64).copy()
    step = np.zeros(stat.shape)
    scales: dict[int, str] = {}
    for k in np.unique(bits):
        sel = np.flatnonzero((bits == k) & (sens > 0))
        if sel.size == 0:
            continue
        gamma = sens[sel] / float(1 << int(k))
        scale = laplace_scale((1 << int(k)) + 1, eps)
        snapped = np.floor(stat[sel] / gamma + 0.5).astype(np.int64)
        z = discrete_laplace(scale, sel.size, rng)
        out[sel] = gamma * (snapped + z).astype(np.float64)
        step[sel] = gamma
        scales[int(k)] = f"{scale.num}/{scale.den}"
    return out, step, scales


def half_widths(sens: np.ndarray, bits: np.ndarray, eps: float, coords: int) -> np.ndarray:
    """95% per-coordinate half-widths (B9): k_b·Δ/2^b, k_b computed once per grid size b."""
    out = np.zeros(sens.shape)
    for b in np.unique(bits):
        sel = bits == b
        per_unit = noise_interval(1.0, eps, delta=0.05, coordinates=coords, grid_bits=int(b))
        out[sel] = sens[sel] * per_unit
    return out
