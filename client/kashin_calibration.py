"""Calibration of a Kashin frame's level: the largest observed ``√N ‖a(x)‖∞ / ‖x‖₂``.

See ``docs/algorithms.md`` ("Kashin"). Sections of ``docs/algorithms.md``: [D9] (public level
``K_LV = 4`` with a calibration warning), acceptance test S6 (§13.3). The frames and the
coefficient map are in ``uldp.client.kashin``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from uldp.client.kashin import (
    K_LV_DEFAULT,
    KASHIN_DELTA_DEFAULT,
    KASHIN_MAX_ITER_DEFAULT,
    KASHIN_TOL_DEFAULT,
    KashinFrame,
    _validate_lv_args,
    kashin_coefficients,
    kashin_level,
)

__all__ = ["CalibrationResult", "calibrate", "coefficient_bound", "warn_if_exceeds"]


def coefficient_bound(D: float, N: int, K_LV: float = K_LV_DEFAULT) -> float:
    """Per-coefficient bound ``D' = K_LV D / √N`` for samples with ``‖x‖₂ ≤ D`` (§3.6 "Use")."""
    if not (D > 0 and N >= 1 and K_LV > 0):
        raise ValueError("need D > 0, N >= 1 and K_LV > 0")
    return float(K_LV) * float(D) / math.sqrt(N)


# --------------------------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationResult:
    """Observed Kashin level of a frame (max over all probes) and the per-family maxima."""

    level: float
    by_family: dict[str, float]
    worst_x: np.ndarray = field(repr=False)
    d: int
    N: int
    kind: str
    delta: float
    n_probes: int

    def exceeds(self, K_LV: float = K_LV_DEFAULT) -> bool:
        """True iff the observed level is strictly above the configured public level."""
        return self.level > float(K_LV)


def _probe_levels(frame: KashinFrame, X: np.ndarray, delta: float, tol: float) -> np.ndarray:
    A = kashin_coefficients(frame, X, delta=delta, tol=tol)
    return kashin_level(frame, X, A)


def _hill_climb(frame: KashinFrame, starts: np.ndarray, delta: float, tol: float, steps: int,
                rng: np.random.Generator) -> tuple[float, np.ndarray, int]:
    """Batched random-perturbation hill-climb on the level from several unit starting points."""
    X = starts / np.linalg.norm(starts, axis=1, keepdims=True)
    lev = _probe_levels(frame, X, delta, tol)
    sigma = np.full(X.shape[0], 0.3)
    probes = X.shape[0]
    for _ in range(steps):
        Y = X + sigma[:, None] * rng.standard_normal(X.shape) / math.sqrt(frame.d)
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
        new = _probe_levels(frame, Y, delta, tol)
        probes += Y.shape[0]
        better = new > lev
        X[better], lev[better] = Y[better], new[better]
        sigma = np.where(better, np.minimum(sigma * 1.5, 1.0), np.maximum(sigma * 0.8, 1e-3))
    best = int(np.argmax(lev))
    return float(lev[best]), X[best].copy(), probes


def calibrate(frame: KashinFrame, *, delta: float = KASHIN_DELTA_DEFAULT,
              tol: float = KASHIN_TOL_DEFAULT, trials: int = 2000,
              adversarial_steps: int = 60, adversarial_starts: int = 16,
              max_basis: int = 4096, rng_seed: int = 0) -> CalibrationResult:
    """Observed worst level ``√N ‖a(x)‖∞ / ‖x‖₂`` of ``frame`` (§3.6, [D9], S6).

    Probes: ``trials`` random Gaussian directions; frame-aligned vectors ``u_c`` (rows of U, up
    to ``trials`` of them) and their sign patterns; coordinate basis vectors (up to
    ``max_basis``); then an adversarial hill-climb started from the ``adversarial_starts`` worst
    probes found so far, ``adversarial_steps`` batched perturbation rounds. ``delta`` and
    ``tol`` should be the ones used in production. Deterministic given ``rng_seed`` (public
    randomness).
    """
    _validate_lv_args(delta, KASHIN_MAX_ITER_DEFAULT, tol)
    if trials < 1 or adversarial_steps < 0 or adversarial_starts < 1:
        raise ValueError("need trials >= 1, adversarial_steps >= 0, adversarial_starts >= 1")
    rng = np.random.default_rng(rng_seed)
    d, N = frame.d, frame.N
    families: dict[str, np.ndarray] = {}
    families["random"] = rng.standard_normal((trials, d))
    rows = np.sort(rng.choice(N, size=min(N, trials), replace=False))
    E = np.zeros((rows.size, N))
    E[np.arange(rows.size), rows] = 1.0
    aligned = frame.synthesis(E)  # u_c = Uᵀ e_c
    aligned = aligned[np.linalg.norm(aligned, axis=1) > 0]
    families["aligned"] = aligned
    families["aligned_sign"] = np.sign(aligned) + (aligned == 0)
    basis_idx = np.sort(rng.choice(d, size=min(d, max_basis), replace=False))
    basis = np.zeros((basis_idx.size, d))
    basis[np.arange(basis_idx.size), basis_idx] = 1.0
    families["basis"] = basis

    X_all = np.concatenate(list(families.values()))
    lev_all = _probe_levels(frame, X_all, delta, tol)  # one batched call for all families
    bounds = np.cumsum([0] + [len(v) for v in families.values()])
    by_family = {name: float(lev_all[lo:hi].max())
                 for name, lo, hi in zip(families, bounds[:-1], bounds[1:], strict=True)}
    n_probes = X_all.shape[0]
    worst = np.argsort(lev_all)[::-1][:adversarial_starts]
    level = float(lev_all[worst[0]])
    worst_x = X_all[worst[0]] / np.linalg.norm(X_all[worst[0]])
    if adversarial_steps > 0:
        adv_level, adv_x, probes = _hill_climb(frame, X_all[worst].copy(), delta, tol,
                                               adversarial_steps, rng)
        by_family["adversarial"] = adv_level
        n_probes += probes
        if adv_level > level:
            level, worst_x = adv_level, adv_x
    return CalibrationResult(level=level, by_family=by_family, worst_x=worst_x, d=d, N=N,
                             kind=frame.kind, delta=float(delta), n_probes=n_probes)


def warn_if_exceeds(level: float | CalibrationResult, K_LV: float = K_LV_DEFAULT) -> bool:
    """Issue a ``UserWarning`` (and return True) if the observed level exceeds ``K_LV``.

    Exceeding never breaks privacy (INV-6): out-of-range coefficient means are clamped; it only
    makes stage-I binning slightly less accurate. Raise ``K_LV`` or recalibrate the frame.
    """
    lev = level.level if isinstance(level, CalibrationResult) else float(level)
    if lev > float(K_LV):
        warnings.warn(
            f"observed Kashin level {lev:.3f} exceeds the configured public level K_LV={K_LV}; "
            "coefficients may exceed D' = K_LV*D/sqrt(N) (privacy is unaffected, accuracy of "
            "stage-I binning may degrade)",
            UserWarning,
            stacklevel=2,
        )
        return True
    return False
