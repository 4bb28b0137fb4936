"""The clipping window of every SGD round, sized from what the earlier rounds saw.

See ``docs/algorithms.md`` ("SGD": windowed rounds, §8.3). Public math only: everything
here is post-processing of published estimates and of public parameters (INV-5), so any
window is private; a wrong one costs accuracy (clamped users), never privacy.

A windowed round reports the user mean ``ḡ_i`` of the clipped per-record gradients at
``θ_t``, coordinate by coordinate (``frame_kind = identity``), each clamped to a window
``[lo_j, hi_j]`` and privatized by the scalar randomizer of least predicted variance.

* **Support** (:func:`record_support`): the interval every record's gradient coordinate
  lies in, from the model, ``θ``, the public feature and label bounds and the clip norm
  ``D`` — e.g. logistic ``g_j = w·x_j + λθ_j`` with ``|w| ≤ 1``, ``|x_j| ≤ b_j``. Round 0
  (nothing seen yet) and one-record rounds (baseline B) report on it.
* **Users alike** (the spread prior): a coordinate in an interval of half-width ``h_j`` has
  standard deviation at most ``h_j``, so a user's mean of ``m`` records deviates from the
  population mean by about ``h_j/√m``; the window keeps :data:`Z_SPREAD` of those on each
  side, times an evidence factor ``κ ≥ 1``.
* **Where the gradient moves** (the ball): with ``θ_{t+1} = θ_t − η ĝ_t`` and a loss whose
  Hessian's eigenvalues lie in the public ``[γ, G]``, ``(I − ηH̄)∇L(θ_t)`` lies in the ball of
  centre ``(1 − c)∇L(θ_t)``, ``c = η(γ + G)/2``, and radius ``η(G − γ)/2 · ‖∇L(θ_t)‖``
  (a quadratic loss, ``γ = G``: a point), up to the estimation error of round t
  (:data:`Z_ERROR` standard errors per coordinate) and an upper confidence bound of the
  gradient's norm (:func:`norm_bound`).
* **Evidence** (:func:`pinned`): a coordinate whose decoded mean sits at an end of its
  window beyond its noise was clamped; its next window is the whole support and ``κ``
  doubles (users less alike than assumed).

The next window is the ball's box widened by the spread, cut to the support.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from uldp.client.budget import split_epsilon
from uldp.client.regimes import Group, Grouping
from uldp.collector.mechanisms.choice import best_scalar, scalar_variance

__all__ = ["PIN_LEVEL", "Z_ERROR", "Z_SPREAD", "Window", "choose_grouping",
           "coordinate_variances", "next_window", "norm_bound", "pinned", "record_support",
           "round_variance", "settle_ratio", "steady_widths", "window_mechanism"]

#: user-mean deviations (in worst-case standard deviations ``h_j/√m``) a window keeps on
#: each side of the predicted mean
Z_SPREAD = 2.0
#: standard errors of the previous round's estimate added on each side
Z_ERROR = 2.0
#: a decoded mean this far towards an end (in half-widths, beyond two standard errors)
#: shows a clamped coordinate
PIN_LEVEL = 0.75


def record_support(model: str, theta: np.ndarray, clip: float, l2: float,
                   feature_bound: np.ndarray, label_bound: float) -> np.ndarray:
    """``(p, 2)``: the interval of every coordinate of one record's clipped gradient at
    ``θ`` (custom models: ``[−D, D]``). The clip scales a gradient towards 0, so when it can
    act the interval is widened to contain 0."""
    theta = np.asarray(theta, dtype=np.float64)
    b = np.asarray(feature_bound, dtype=np.float64)
    shift = l2 * theta
    if model == "logistic":
        half = b.copy()
    elif model in ("least_squares", "ridge"):
        half = (float(np.abs(theta) @ b) + label_bound) * b
    elif model == "quadratic":
        shift, half = theta.copy(), b.copy()
    else:
        return np.tile([-clip, clip], (theta.size, 1))
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = shift - half, shift + half
        reach = math.sqrt(float(np.sum(np.maximum(np.abs(lo), np.abs(hi)) ** 2)))
    if not (math.isfinite(reach) and reach <= clip):  # the clip may scale records
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    out = np.stack([np.clip(lo, -clip, clip), np.clip(hi, -clip, clip)], axis=1)
    flat = out[:, 1] - out[:, 0] <= 0
    out[flat] = [-clip, clip]  # NaN/degenerate: the clip's own bound
    return out


@dataclass(frozen=True)
class Window:
    """The windows of a round (``(p, 2)``), the evidence factor and the clamped
    coordinates that reset them."""

    bounds: np.ndarray
    factor: float
    pinned: tuple[int, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"windows": self.bounds.tolist(), "spread_factor": self.factor,
                "pinned": list(self.pinned)}


def pinned(windows: np.ndarray, estimate: np.ndarray, std_error: np.ndarray) -> list[int]:
    """The coordinates whose decoded mean lies beyond :data:`PIN_LEVEL` of its window's
    half-width from the centre by more than two standard errors (module docstring)."""
    lo, hi = windows[:, 0], windows[:, 1]
    half = np.maximum((hi - lo) / 2, 1e-300)
    u = np.abs(estimate - (lo + hi) / 2) / half
    return [int(j) for j in np.flatnonzero(u - 2 * std_error / half > PIN_LEVEL)]


def norm_bound(g: np.ndarray, se: np.ndarray) -> float:
    """An upper confidence bound of ``‖∇L‖`` from its estimate ``ĝ`` (independent
    coordinates of standard errors ``se``): ``E‖ĝ‖² = ‖∇L‖² + Σ se²``, so
    ``‖ĝ‖² − Σ se²`` is unbiased, with standard deviation about
    ``√(4 Σ ĝ_j² se_j² + 2 Σ se_j⁴)``; two of those above it. ``‖ĝ‖`` itself would put the
    norm of the noise, which grows like ``√d``, into every coordinate's window."""
    v = se * se
    est = float(g @ g - v.sum())
    sd = math.sqrt(float(4 * (g * g) @ v + 2 * v @ v))
    return math.sqrt(max(est + Z_ERROR * sd, 0.0))


def next_window(support: np.ndarray, estimate: np.ndarray, std_error: np.ndarray,
                step: tuple[float, float], m: int, factor: float,
                clamped: Sequence[int] = (), shares: np.ndarray | None = None) -> Window:
    """The windows of round t+1 from round t's estimate ``ĝ_t`` (module docstring).

    ``step = (ηγ, ηG)``: the step times the public bounds of the loss's curvature. With
    ``ĝ_t = ∇L(θ_t) + e_t``, ``∇L(θ_{t+1}) = (I − ηH̄)∇L(θ_t) − ηH̄ e_t``; around the centre
    ``(1 − c)ĝ_t``, ``c = η(γ + G)/2``, it deviates by ``(cI − ηH̄)∇L(θ_t)`` — at most
    ``r‖∇L(θ_t)‖``, ``r = η(G − γ)/2`` — and by ``(ηH̄ + (1 − c)I) e_t`` — per coordinate
    ``e_j`` plus at most ``r`` times the largest standard error. Half-width:
    ``r·‖∇L‖⁺ + √((Z_ERROR (se_j + r·max se))² + (κ·Z_SPREAD·h_j/√m)²)``, cut to the support
    (``‖∇L‖⁺``: :func:`norm_bound`); the clamped coordinates get the whole support and
    ``κ`` doubles. The estimation error and a user's deviation from the mean are
    independent, so their margins add in quadrature (the sum of the two margins widened
    every window by the previous round's error, a term ``∝ √(d m / n ε²)`` relative to the
    spread: the θ error grew like ``d^0.6`` instead of ``√d``, docs/algorithms.md §8.5).

    ``shares`` (a GLM's ``2 b_j/‖b‖``, :meth:`~uldp.collector.models.sgd.SGDConfig.
    coordinate_shares`): the drift's coordinate ``j`` is also at most
    ``r (|∇L_j|⁺ + shares_j ‖∇L‖⁺)`` (``|∇L_j|⁺ = |ĝ_j| + Z_ERROR se_j``): with
    ``H̄ = λI + E[s zzᵀ]``, ``0 ≤ s ≤ S``, ``|z_j| ≤ b_j``, the drift is
    ``η(S‖b‖²/2 · v − E[s zzᵀ] v)`` and ``|E[s z_j zᵀv]| ≤ S b_j ‖b‖ ‖v‖``. The spectral
    bound alone put the whole ``‖∇L‖`` — the θ error of the earlier rounds' noise, ``∝ √d``
    — into every coordinate's window (linear regression, d = 50: rounds 1.2–1.9× their
    designed noise, ``bench/theorem8_rounds.py``)."""
    g = np.nan_to_num(np.asarray(estimate, dtype=np.float64))
    se = np.nan_to_num(np.asarray(std_error, dtype=np.float64), nan=np.inf)
    lo_c, hi_c = step
    c, r = (lo_c + hi_c) / 2, max(hi_c - lo_c, 0.0) / 2
    kappa = min(factor * (2.0 if clamped else 1.0), math.sqrt(max(m, 1)))
    h = (support[:, 1] - support[:, 0]) / 2
    finite = se[np.isfinite(se)]
    se_max = float(finite.max()) if finite.size == se.size and se.size else math.inf
    nb = norm_bound(g, np.where(np.isfinite(se), se, 0.0))
    drift = np.full(g.shape, r * nb)
    if shares is not None and r > 0:
        drift = np.minimum(drift, r * (np.abs(g) + Z_ERROR * se
                                       + np.asarray(shares, dtype=np.float64) * nb))
    radius = drift + np.hypot(Z_ERROR * (se + r * se_max),
                              kappa * Z_SPREAD * h / math.sqrt(max(m, 1)))
    centre = (1 - c) * g
    lo = np.maximum(centre - radius, support[:, 0])
    hi = np.minimum(centre + radius, support[:, 1])
    out = np.stack([lo, hi], axis=1)
    bad = ~(np.isfinite(out).all(axis=1) & (hi - lo > 1e-9 * np.maximum(h, 1e-300)))
    bad[list(clamped)] = True
    out[bad] = support[bad]
    return Window(out, kappa, tuple(int(j) for j in clamped))


def steady_widths(support: np.ndarray, m: int, record: bool,
                  variances: np.ndarray | None = None,
                  step: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """The window widths a run settles at once the gradient is small (the design
    prediction of :func:`next_window` at ``∇L = 0``): the spread prior, the previous round's
    error and the ball's radius at the norm bound of a zero gradient, on both sides; the
    support for one-record rounds (a record may lie anywhere in it)."""
    full = support[:, 1] - support[:, 0]
    if record:
        return full
    radius = Z_SPREAD * (full / 2) / math.sqrt(max(m, 1))
    if variances is not None:
        r = max(step[1] - step[0], 0.0) / 2
        se = np.sqrt(variances)
        zero_norm = math.sqrt(Z_ERROR * math.sqrt(2 * float(variances @ variances)))
        radius = np.hypot(radius, Z_ERROR * (se + r * float(se.max(initial=0.0)))) \
            + r * zero_norm
    return np.minimum(full, 2 * radius)


def settle_ratio(grouping: Grouping, n_t: int, support: np.ndarray, stat_var: np.ndarray,
                 step: tuple[float, float]) -> float:
    """How much of a window its own round's noise gives back to the next one: the noise
    terms of :func:`next_window` at a zero gradient (``Z_ERROR (se_j + r·max se)`` and the
    ball's ``r·‖∇L‖⁺`` at the noise's norm bound), with every window on the support, over
    the support's half-width — the largest over the coordinates. The estimation error of a
    round is proportional to its window, so this is the factor by which the windows can
    shrink from one round to the next while noise dominates them (the spread prior sets
    their floor). Near 1 the windows cannot leave the support; and once θ carries that
    noise the support itself widens with it (least squares: ``(‖θ‖₁·b + L)·b``), so the
    windows and the noise feed each other (docs/algorithms.md "SGD": the window loop)."""
    full = support[:, 1] - support[:, 0]
    v = coordinate_variances(grouping, n_t, full, stat_var)
    se = np.sqrt(v)
    r = max(step[1] - step[0], 0.0) / 2
    zero_norm = math.sqrt(Z_ERROR * math.sqrt(2 * float(v @ v)))
    half = Z_ERROR * (se + r * float(se.max(initial=0.0))) + r * zero_norm
    return float(np.max(half / np.maximum(full / 2, 1e-300)))


def window_mechanism(eps_c: float, widths: np.ndarray, stat_sd: np.ndarray) -> str:
    """The randomizer of least summed variance for statistics of standard deviation
    ``stat_sd`` around the middle of windows of these widths."""
    t2 = float(np.mean(np.minimum((2 * stat_sd / np.maximum(widths, 1e-300)) ** 2, 1.0)))
    return best_scalar(eps_c, t2)


def _candidate(p: int, k: int, epsilon: float) -> Grouping:
    eps_c = split_epsilon(epsilon, k)
    groups = tuple(Group(tuple(range(s, min(s + k, p))), eps_c) for s in range(0, p, k))
    regime = "single" if p == 1 else "high" if k == 1 else "low" if k == p else "medium"
    return Grouping(regime, groups)


def coordinate_variances(grouping: Grouping, n_t: int, widths: np.ndarray,
                         stat_var: np.ndarray) -> np.ndarray:
    """Predicted variance of every coordinate of one round's estimate over ``n_t`` users:
    the users' spread plus the randomizer's noise on its window, over the users of its
    group."""
    G = len(grouping.groups)
    users = max(n_t // G, 1)
    t2_all = np.minimum(4 * stat_var / np.maximum(widths, 1e-300) ** 2, 1.0)
    v0 = np.zeros(widths.size)
    v1 = np.zeros(widths.size)
    for grp in grouping.groups:
        c = list(grp.components)
        v0[c], v1[c] = _line(grp.eps_c, float(np.add.reduce(t2_all[c])) / len(c))
    return (stat_var + (v0 + (v1 - v0) * t2_all) * (widths / 2) ** 2) / users


@lru_cache(maxsize=4096)
def _line(eps_c: float, mean_t2: float) -> tuple[float, float]:
    """``(Var at t = 0, Var at |t| = 1)`` of the best randomizer for statistics of mean
    ``t²`` (a randomizer's variance is linear in ``t²``); cached, the planner asks often."""
    mech = best_scalar(eps_c, mean_t2)
    return scalar_variance(mech, eps_c, 0.0), scalar_variance(mech, eps_c, 1.0)


def round_variance(grouping: Grouping, n_t: int, widths: np.ndarray,
                   stat_var: np.ndarray) -> float:
    """Predicted ``E‖ĝ − E ḡ‖²`` of one round (:func:`coordinate_variances` summed)."""
    return float(coordinate_variances(grouping, n_t, widths, stat_var).sum())


def choose_grouping(p: int, epsilon: float, n_t: int, widths: np.ndarray,
                    stat_var: np.ndarray) -> Grouping:
    """The group size ``k`` (components per user, ``ε/k`` each) of least
    :func:`round_variance`, with every group keeping at least 2 users."""
    best: tuple[float, Grouping] | None = None
    # more than ⌈2ε⌉ coordinates per user leaves each below ε_c = ½, where splitting the
    # users does better; all of them at once is the low regime's candidate
    for k in sorted({*range(1, min(p, math.ceil(2 * epsilon)) + 1), p}):
        cand = _candidate(p, k, epsilon)
        if n_t // len(cand.groups) < 2:
            continue
        v = round_variance(cand, n_t, widths, stat_var)
        if best is None or v < best[0] * (1 - 1e-12):
            best = (v, cand)
    if best is None:
        return _candidate(p, p, epsilon)
    return best[1]
