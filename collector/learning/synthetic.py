"""Synthetic learning populations with known truth (spec §13.3 S9–S10).

* :func:`quadratic_population` — S9: ``l(x, θ) = ½‖θ − x‖²``, ``θ* = E X``; samples
  ``X = μ + U(−a, a)^d`` inside the unit ball.
* :func:`sine_population` — S10: ``X ~ U[0,1]^d``, ``η(x) = sin(2πx₁)/2``; classification
  labels ``Y = ±1`` with ``P(Y = 1 | x) = (1 + η(x))/2``; regression labels
  ``Y = η(x) + U(−½, ½)`` (``|Y| < 1 = T_y``).
* :func:`logistic_population` — ``X ~ U[−1,1]^d``, ``P(Y = 1 | x) = σ(wᵀx + b)``.

Exact risks: :func:`excess_risk` (``R − R* = E[|η| 1(ŷ ≠ sign η)]``) and :func:`l2_risk`
(``E(η̂ − η)²``) by midpoint quadrature on a fine grid (uniform ``f``). Data randomness is
not privacy noise (numpy Generator).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from uldp.collector.learning.runner import SyntheticUsers

__all__ = ["bayes_risk_sine", "eta_sine", "excess_risk", "l2_risk", "logistic_population",
           "quadratic_population", "quadrature_points", "sine_population"]


def eta_sine(X: np.ndarray, phase: float = 0.0) -> np.ndarray:
    """``η(x) = sin(2π(x₁ + phase))/2`` (phase 0: the spec's S10 function; a phase moves
    the sign boundary off the grid points x₁ = ½, which even grids resolve exactly)."""
    return np.sin(2 * np.pi * (np.asarray(X)[..., 0] + phase)) / 2


def bayes_risk_sine() -> float:
    """``R* = ½ E[1 − |η|] = ½ (1 − 1/π)`` for η = sin(2πx₁)/2 and uniform x₁."""
    return 0.5 * (1 - 1 / math.pi)


def quadratic_population(n: int, m: int, d: int, rng: np.random.Generator,
                         spread: float = 0.4) -> tuple[SyntheticUsers, np.ndarray]:
    mu = 0.4 * np.cos(np.arange(d) + 1.0) / math.sqrt(d)
    a = spread / math.sqrt(d)

    def draw(k: int) -> tuple[np.ndarray, None]:
        return mu + rng.uniform(-a, a, size=(k, m, d)), None
    return SyntheticUsers(n, m, d, draw), mu


def sine_population(n: int, m: int, d: int, rng: np.random.Generator,
                    task: str = "classify", phase: float = 0.0) -> SyntheticUsers:
    if task not in ("classify", "regress"):
        raise ValueError(f"task must be 'classify' or 'regress', got {task!r}")

    def draw(k: int) -> tuple[np.ndarray, np.ndarray]:
        X = rng.uniform(size=(k, m, d))
        eta = eta_sine(X, phase)
        if task == "classify":
            y = np.where(rng.uniform(size=(k, m)) < (1 + eta) / 2, 1.0, -1.0)
        else:
            y = eta + rng.uniform(-0.5, 0.5, size=(k, m))
        return X, y
    return SyntheticUsers(n, m, d, draw)


def logistic_population(n: int, m: int, w: np.ndarray, b: float,
                        rng: np.random.Generator) -> SyntheticUsers:
    w = np.asarray(w, dtype=np.float64)
    d = w.size

    def draw(k: int) -> tuple[np.ndarray, np.ndarray]:
        X = rng.uniform(-1, 1, size=(k, m, d))
        p = 1 / (1 + np.exp(-(X @ w + b)))
        return X, (rng.uniform(size=(k, m)) < p).astype(np.float64)
    return SyntheticUsers(n, m, d, draw)


def quadrature_points(d: int, per_axis: int = 400) -> np.ndarray:
    """Midpoints of a regular grid on ``[0,1]^d`` (``per_axis^d`` points)."""
    g = (np.arange(per_axis) + 0.5) / per_axis
    mesh = np.meshgrid(*([g] * d), indexing="ij")
    return np.stack([x.ravel() for x in mesh], axis=1)


def excess_risk(predict: Callable[[np.ndarray], np.ndarray], d: int,
                per_axis: int | None = None, phase: float = 0.0) -> float:
    X = quadrature_points(d, per_axis or (2000 if d == 1 else 200))
    eta = eta_sine(X, phase)
    yhat = predict(X)
    return float(np.mean(np.abs(eta) * (yhat != np.where(eta >= 0, 1.0, -1.0))))


def l2_risk(predict: Callable[[np.ndarray], np.ndarray], d: int,
            per_axis: int | None = None, phase: float = 0.0) -> float:
    X = quadrature_points(d, per_axis or (2000 if d == 1 else 200))
    return float(np.mean((predict(X) - eta_sine(X, phase)) ** 2))
