"""Empirical-Bayes shrinkage of a grid's cells toward their common value (§9.6 of
``docs/algorithms.md``).

The grid is chosen before any report arrives, from a public design guess of how much ``η``
varies over the box (``uldp.collector.models.grid``). On real data the signal is often far
weaker than that guess, and every cell then carries mostly privacy noise. Once the query
has closed, the cells' estimates and their noise variance are known (:func:`cell_noise`:
the cells' own standard errors when the query's output is the cells ``q̂ = H Q̂ / K_H``
through the dense transform; else from the components', ``Var q̂_l = Σ_c Var Q̂_c / K_H²``),
so the between-cell spread of the signal is estimated by moments,
``s² = max(0, spread of the estimates − mean noise)``, and each cell is pulled toward the
common value by ``w_l = s² / (s² + v_l)`` (James–Stein / Efron–Morris). A grid whose cells
are mostly noise predicts (nearly) the common value; a grid whose cells carry signal keeps
it. Post-processing of the privatized estimate only: no privacy cost, the same on every
replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Shrinkage", "cell_noise", "classify_shrinkage", "grid_signal", "regress_shrinkage"]


@dataclass(frozen=True)
class Shrinkage:
    """``value_l → centre + weights_l (value_l − centre)`` over the grid's ``B`` cells;
    ``signal`` is the estimated between-cell variance ``s²`` and ``noise`` the cells' mean
    noise variance (stated in the result)."""

    centre: float
    weights: np.ndarray
    signal: float
    noise: float

    def apply(self, values: np.ndarray, cells: np.ndarray) -> np.ndarray:
        return self.centre + self.weights[cells] * (values - self.centre)

    def to_json(self) -> dict[str, Any]:
        return {"centre": self.centre, "weights": self.weights.tolist(),
                "signal": self.signal, "noise": self.noise}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Shrinkage:
        return cls(float(d["centre"]), np.asarray(d["weights"], dtype=np.float64),
                   float(d["signal"]), float(d["noise"]))


def _moments(values: np.ndarray, noise: np.ndarray, mass: np.ndarray,
             centre: float) -> tuple[float, float]:
    mass = mass / mass.sum()
    spread = float(np.sum(mass * (values - centre) ** 2))
    mean_noise = float(np.sum(mass * noise))
    return max(0.0, spread - mean_noise), mean_noise


def _signal_se(noise: np.ndarray, mass: np.ndarray) -> float:
    """Standard error of ``s²`` when the cells are noise alone: the spread is
    ``Σ w_l (η̂_l − c)²`` with ``Var = 2 Σ w_l² v_l²`` (Gaussian cells)."""
    w = mass / mass.sum()
    return float(np.sqrt(2.0 * np.sum(w * w * np.square(noise))))


def cell_noise(se: np.ndarray, K: int, cells: bool) -> np.ndarray:
    """The noise variance of every cell ``q̂_l`` (``(K,)``). ``cells``: ``se`` are the
    standard errors of the cells themselves (the query's output is ``q̂ = H Q̂ / K_H``,
    :data:`uldp.client.kinds.learning.DENSE_LIMIT`), so ``Var q̂_l = se_l²``; else they are
    the components', and ``Var q̂_l = Σ_c se_c² / K_H²`` (the same for every cell).

    (Reading the cells' standard errors as the components' — what this did before —
    divided the noise by ``K_H``: on InstEval at ``M = 2`` the cells looked 2× less noisy
    than they were, and the shrinkage kept noise.)"""
    se = np.asarray(se, dtype=np.float64)
    if cells:
        return np.where(np.isfinite(se), se * se, np.inf)
    return np.full(K, float(np.sum(np.square(se[np.isfinite(se)]))) / K**2)


def classify_shrinkage(q: np.ndarray, se_q: np.ndarray, B: int, cells: bool) -> Shrinkage:
    """Cells ``q̂_l`` of a classifier (``B`` real cells first), toward their mean;
    ``cells``: ``se_q`` are the cells' standard errors (:func:`cell_noise`)."""
    vals = np.asarray(q, dtype=np.float64)[:B]
    v = cell_noise(se_q, int(np.asarray(q).size), cells)[:B]
    centre = float(vals.mean())
    s2, noise = _moments(vals, v, np.ones(B), centre)
    w = np.where(s2 + v > 0, s2 / np.maximum(s2 + v, 1e-300), 1.0)
    return Shrinkage(centre, w, s2, noise)


def regress_shrinkage(q: np.ndarray, p: np.ndarray, se_q: np.ndarray, se_p: np.ndarray,
                      B: int, tau: float, label_bound: float, cells: bool) -> Shrinkage:
    """Cells ``η̂_l = clamp(q̂_l / max(p̂_l, τ))`` of a regressor toward the overall mean
    ``clamp(Σ q̂ / Σ p̂)``, weighted by the cells' estimated mass; a cell's noise is the
    delta-method ``(Var q̂ + η̂_l² Var p̂) / max(p̂_l, τ)²``."""
    K = int(np.asarray(q).size)
    qb, pb = np.asarray(q, float)[:B], np.asarray(p, float)[:B]
    den = np.maximum(pb, tau)
    eta = np.clip(qb / den, -label_bound, label_bound)
    vq, vp = cell_noise(se_q, K, cells)[:B], cell_noise(se_p, K, cells)[:B]
    noise = (vq + eta**2 * vp) / den**2
    centre = float(np.clip(qb.sum() / max(pb.sum(), tau), -label_bound, label_bound))
    mass = np.clip(pb, 0.0, None)
    if mass.sum() <= 0:
        mass = np.ones(B)
    s2, mean_noise = _moments(eta, noise, mass, centre)
    w = np.where(s2 + noise > 0, s2 / np.maximum(s2 + noise, 1e-300), 1.0)
    return Shrinkage(centre, w, s2, mean_noise)


def grid_signal(kind: str, q: np.ndarray, se_q: np.ndarray, B: int, cells: bool, *,
                p: np.ndarray | None = None, se_p: np.ndarray | None = None,
                tau: float = 0.0, label_bound: float = 1.0) -> tuple[float, float]:
    """``(s², se(s²))``: the between-cell variance of ``η`` a grid's cells show beyond their
    noise, and its standard error, in ``η`` units (a classifier's ``η_l = B q_l`` with
    ``p_l = 1/B``; a regressor's ``η̂_l`` as :func:`regress_shrinkage` weighs them). What a
    pilot phase measures to size the main phase's grid (``models.grid``)."""
    if kind == "classify":
        vals = np.asarray(q, dtype=np.float64)[:B] * B
        v = cell_noise(se_q, int(np.asarray(q).size), cells)[:B] * B * B
        mass = np.ones(B)
        s2, _ = _moments(vals, v, mass, float(vals.mean()))
        return s2, _signal_se(v, mass)
    assert p is not None and se_p is not None
    K = int(np.asarray(q).size)
    qb, pb = np.asarray(q, float)[:B], np.asarray(p, float)[:B]
    den = np.maximum(pb, tau)
    eta = np.clip(qb / den, -label_bound, label_bound)
    noise = (cell_noise(se_q, K, cells)[:B] + eta**2 * cell_noise(se_p, K, cells)[:B]) \
        / den**2
    centre = float(np.clip(qb.sum() / max(pb.sum(), tau), -label_bound, label_bound))
    mass = np.clip(pb, 0.0, None)
    if mass.sum() <= 0:
        mass = np.ones(B)
    s2, _ = _moments(eta, noise, mass, centre)
    return s2, _signal_se(noise, mass)
