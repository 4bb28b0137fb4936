"""The ``users-alike`` assumption: clamping-bias bounds of a two-stage window that hold when
the analyst states that users are alike.

See ``docs/mechanisms.md`` ("What an assumption buys"). Without an assumption no interval
can be narrower than about ``D/(ε√n)``: moving a share ``δ ≲ 1/(ε√n)`` of the users to the
range's edge moves the mean by ``δD`` and ``n`` users' ε-LDP reports cannot tell the two
populations apart (Duchi & Ruan, local minimax; Duchi, Jordan & Wainwright 2018), so a
window that clamps them must count them in its bias bound, whatever ``m``. The analyst may
state, as publicly as the range itself, ``assume="users-alike"``: every user's ``m``
records are i.i.d. draws from one distribution on ``[−D, D]`` (per component). Then each
user's statistic ``Y = (1/m) Σ X_j`` concentrates around the population mean ``μ``
(Hoeffding; Bernstein with the variance ``σ² = m·Var Y`` that stage I measures):

    P(Y − μ ≥ s) ≤ T(s) = min(exp(−m s²/(2D²)), exp(−m s²/(2σ² + 4Ds/3))),

and the clamping of a window ``[a, b]`` is bounded from where stage I places ``μ``,
``μ ∈ [μ_lo, μ_hi]`` (:func:`location`):

    β_hi = E(Y − b)⁺ ≤ (μ_hi − b)⁺ + ∫_{(b − μ_hi)⁺}^{2D} T(s) ds,   β_lo likewise.

These replace the assumption-free bounds of :mod:`uldp.collector.methods.sizing` (which
must allow a tail stage I missed) when the query states the assumption. If the users are
not alike the interval may not cover: the result says which assumption it rests on.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.collector.methods.intervals import ALPHA_BIAS, kl_upper

__all__ = ["ASSUMPTIONS", "USERS_ALIKE", "alike_bias", "assumed_samples", "assumption_note",
           "location", "note_assumption", "relies_on", "tail_integral"]

USERS_ALIKE = "users-alike"
#: what a query may assume about its users (``QuerySpec.assume``): nothing (the default:
#: intervals valid for every population) or that users are alike
ASSUMPTIONS = ("none", USERS_ALIKE)

#: quadrature points of :func:`tail_integral`
_POINTS = 400


def assumed_samples(spec: Any) -> int | None:
    """The records per user the users-alike bounds count on, or None without the
    assumption."""
    return int(spec.samples) if getattr(spec, "assume", "none") == USERS_ALIKE else None


def assumption_note(assume: str) -> str:
    """The sentence a result, a preview and a CSV carry for the query's assumption."""
    if assume == USERS_ALIKE:
        return ("valid if users are alike: every user's records i.i.d. from one "
                "distribution (assume=users-alike)")
    return "valid for every population (no assumption)"


def relies_on(plan: Any) -> bool:
    """Whether a plan's intervals count on its query's stated assumption (a method that
    sizes its window from it, ``counts_on_assumption``; single-stage intervals hold for
    every population)."""
    return plan.spec.assume != "none" and bool(getattr(plan.method, "counts_on_assumption",
                                                       False))


def note_assumption(plan: Any, est: Any) -> Any:
    """``est`` with what its interval rests on: ``extra["assume"]`` (the assumption it
    counts on, or ``none``) and ``extra["valid_if"]`` (the sentence results print)."""
    used = plan.spec.assume if relies_on(plan) else "none"
    est.extra["assume"] = used
    est.extra["valid_if"] = assumption_note(used)
    return est


def location(points: np.ndarray, mass: np.ndarray, var: np.ndarray, mean_sd: Any,
             n1: int, m: int, alpha: float = ALPHA_BIAS) -> tuple[Any, Any]:
    """Confidence bounds ``(μ_lo, μ_hi)`` of the population mean from stage I's grid
    histogram (masses ``mass`` with per-point noise variances ``var``, ``n1`` reports),
    users alike with ``m`` records each. The intersection of

    * the stage-I mean ``Σ g_k p̂_k ± z·mean_sd`` (``mean_sd`` counting the reports' noise
      and the users' spread ``Var Y ≤ D²/m``), and
    * the largest grid point's neighbourhood: a point ``k`` whose share ``π_k`` is bounded
      below by ``q > 0`` holds users with statistics in ``(g_{k−1}, g_{k+1})`` (the unbiased
      rounding splits a user between its two neighbouring points), and a set of
      probability ``≥ q`` lies within ``s* = D√(2 ln(1/q)/m)`` of ``μ`` (Hoeffding), so
      ``μ ∈ [g_{k−1} − s*, g_{k+1} + s*]``. The bound of ``π_k`` is simultaneous over the
      ``K`` points (the largest is chosen from the data): the noise at ``z_{1−α/(4K)}``,
      the sampling of the stage-I users by the Chernoff bound at ``ln(4K/α)/n1``.

    Each part fails with probability at most ``α/2``. ``mass`` and ``var`` may hold one
    histogram per row (``mean_sd`` then one value per row): the bounds are then arrays."""
    many = np.ndim(mass) == 2
    M = np.atleast_2d(np.asarray(mass, dtype=np.float64))
    Vr = np.atleast_2d(np.asarray(var, dtype=np.float64))
    D = float(points[-1])
    K = points.size
    z = NormalDist().inv_cdf(1 - alpha / 4)
    centre = M @ points
    sd = np.asarray(mean_sd, dtype=np.float64).reshape(-1)
    lo, hi = centre - z * sd, centre + z * sd
    if n1 > 0:
        rows = np.arange(M.shape[0])
        k = np.argmax(M, axis=1)
        zk = NormalDist().inv_cdf(1 - alpha / (4 * K))
        x = M[rows, k] - zk * np.sqrt(np.maximum(Vr[rows % Vr.shape[0], k], 0.0))
        c = math.log(4 * K / alpha) / n1
        on = x > 0
        q = np.zeros(M.shape[0])
        if on.any():  # Chernoff lower bound
            q[on] = 1.0 - np.asarray(kl_upper(1.0 - np.minimum(x[on], 1.0), c))
        on &= q > 0
        s = D * np.sqrt(2 * np.log(1 / np.where(on, q, 1.0)) / m)
        left = points[np.maximum(k - 1, 0)] - s
        right = points[np.minimum(k + 1, K - 1)] + s
        lo, hi = np.where(on, np.maximum(lo, left), lo), np.where(on, np.minimum(hi, right), hi)
    lo, hi = np.maximum(lo, -D), np.minimum(hi, D)
    # the two parts disagree (one of them failed): the union, honestly
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    if many:
        return lo, hi
    return float(lo[0]), float(hi[0])


def tail_integral(t: np.ndarray, D: float, m: int, sigma2: Any) -> np.ndarray:
    """``∫_t^{2D} T(s) ds`` for each ``t ≥ 0`` (module docstring: the Hoeffding and Bernstein
    tails of a mean of ``m`` i.i.d. records on ``[−D, D]`` with variance ``≤ sigma2``, one
    bound for all or one per ``t``)."""
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 2 * D).reshape(-1)
    s2 = np.broadcast_to(np.maximum(np.asarray(sigma2, dtype=np.float64), 0.0), t.shape)
    # a window's ends take few distinct values: integrate each once
    ut, it = np.unique(t, return_inverse=True)
    us, js = np.unique(s2, return_inverse=True)
    pairs, back = np.unique(it.reshape(-1) * us.size + js.reshape(-1), return_inverse=True)
    t, s2 = ut[pairs // us.size], us[pairs % us.size]
    u = np.linspace(0.0, 1.0, _POINTS)
    s = t[:, None] + (2 * D - t[:, None]) * u[None, :] ** 2  # dense near t
    hoeff = -m * s * s / (2 * D * D)
    bern = -m * s * s / (2 * s2[:, None] + 4 * D * s / 3 + 1e-300)
    T = np.exp(np.minimum(np.minimum(hoeff, bern), 0.0))
    return np.trapezoid(T, s, axis=1)[back.reshape(-1)]


def alike_bias(points: np.ndarray, a: np.ndarray, b: np.ndarray, bounds: tuple[Any, Any],
               m: int, sigma2: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(β_lo⁺, β_hi⁺)`` of each window ``[a, b]`` (arrays) for users alike, the mean in
    ``bounds`` and the records' variance at most ``sigma2`` (module docstring; the bounds
    and ``sigma2`` one for all windows or one per window)."""
    D = float(points[-1])
    mu_lo, mu_hi = bounds
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    over_hi = np.maximum(mu_hi - b, 0.0)
    over_lo = np.maximum(a - mu_lo, 0.0)
    b_hi = over_hi + tail_integral(np.maximum(b - mu_hi, 0.0), D, m, sigma2)
    b_lo = over_lo + tail_integral(np.maximum(mu_lo - a, 0.0), D, m, sigma2)
    # nothing lies beyond the support: a window's end at the support's end clamps nothing
    b_hi = np.where(b >= D, 0.0, np.minimum(b_hi, D - b))
    b_lo = np.where(a <= -D, 0.0, np.minimum(b_lo, a + D))
    return b_lo, b_hi
