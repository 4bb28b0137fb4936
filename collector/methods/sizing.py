"""The stage-II window of ``two-stage-sized``, sized from stage I's grid histogram, and the
honest error of the estimate it leads to.

See ``docs/algorithms.md`` ("Two-stage, sized"). Stage I (``n₁`` of the group's users)
reports each user's statistic rounded unbiasedly to one of the ``B + 1`` grid points
``g_k`` of the support (``uldp.client.mechanisms.two_stage.grid_reports``), through a
frequency oracle; the collector has unbiased shares ``p̂_k`` of the stage-I users at every
point. Stage II (``n₂`` users) reports ``clamp(Y, a, b)`` on a window ``[a, b]`` of grid
points. Two estimates of the mean over the ``n = n₁ + n₂`` users:

* **debiased**: ``μ̂ = (n₁/n) Σ_k f_k p̂_k + (n₂/n) Ĉ₂`` with ``f_k = g_k + (n₂/n₁) τ_k``,
  ``τ_k = (g_k − b)⁺ − (a − g_k)⁺`` the clamping of a value at ``g_k``, and ``Ĉ₂`` the
  stage-II mean. Because ``μ = (n₁/n) Ȳ_I + (n₂/n) Ȳ_II`` exactly and ``τ`` is linear between
  grid points (so the rounding leaves ``E τ`` exact), ``μ̂ − μ`` is noise plus
  ``(n₂/n)(τ̄_I − τ̄_II)`` — the difference of the mean clamping of the two random halves —
  with variance ``(n₁ N₁ + n₂ N₂)/n² + n₂ S_τ² / (n n₁)`` (``N₁``, ``N₂``: the noise of
  one report of each stage; ``S_τ²``: the users' variance of their clamping). The users'
  own spread cancels: only noise and the clamped part remain.
* **clamped**: ``μ̂ = (n₁/n) Σ_k g_k p̂_k + (n₂/n) Ĉ₂``, biased by ``−(n₂/n) τ̄_II``; its
  interval carries the bias bounds of :func:`uldp.collector.methods.intervals.tail_upper`.
  At small ε the histogram cannot measure the clamping as finely as stage II measures the
  window, so this is the estimate of least error on users alike (``objective="mse"``),
  with an honest but wider interval.

Every quantity the rule and the interval count on is bounded for *all* users, not only
the stage-I ones: the users' clamping variance ``S_τ²`` by the Chernoff bound of
``E τ²`` on ``[0, W²]`` (a tail of mass ``q`` missed by all ``n₁`` stage-I users with
probability ``(1 − q)^{n₁}`` still enters, as ``W²(1 − (α/2)^{1/n₁})``), the randomizer's
noise at the worse end of the bounds of ``E t²``
(:func:`uldp.collector.methods.intervals.moment_bounds`). The rule takes, per component,
the window (any pair of grid points, the support included) and estimate with the least
*objective* — the expected width of the interval (``objective="width"``, the default: what
the analyst reads) or the mean squared error (``"mse"``) — and, per group, the randomizer
with the least sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.collector.mechanisms import ORACLE_DECODERS
from uldp.collector.methods.intervals import ALPHA_BIAS, Histogram, kl_upper, moment_bounds

__all__ = ["ESTIMATORS", "OBJECTIVES", "Choice", "GridStage", "choose", "choose_many",
           "combine_error", "estimator_weights", "expected_masses", "functionals",
           "grid_points", "honest_terms", "reference_population", "t2_bounds", "tail_upper_rows"]

#: what the rule (and ``auto``) minimizes: the expected width of the interval at the
#: query's confidence, or the mean squared error of the estimate
OBJECTIVES = ("width", "mse")


def grid_points(bound: float, bins: int) -> np.ndarray:
    """The ``B + 1`` grid points ``−D + k·2D/B`` of stage I (the bins' edges)."""
    return -bound + np.arange(bins + 1) * (2.0 * bound / bins)


def rowdot(A: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``A @ v`` for one vector ``v``, or the row-wise products when ``v`` has one row per
    row of ``A`` (a :class:`GridStage` of many histograms)."""
    return A @ v if np.ndim(v) == 1 else (A * v).sum(axis=-1)


@dataclass(frozen=True)
class GridStage:
    """What stage I measured of one component: the grid, the unbiased shares ``p̂_k`` of
    the stage-I users at each point, their count, and the oracle that carried them.
    ``mass`` may also hold one histogram per row of the windows asked about (``(W, K)``:
    many histograms at once, as a prediction draws them; every method then answers per
    row)."""

    points: np.ndarray
    mass: np.ndarray
    reports: int
    oracle: str
    eps: float

    @property
    def K(self) -> int:
        return int(self.points.size)

    def shares(self) -> np.ndarray:
        """The shares clipped to ``[0, 1]`` and normalized (what noise variances are
        evaluated at); uniform without reports."""
        return self._shares

    @cached_property
    def _shares(self) -> np.ndarray:
        m = np.clip(self.mass, 0.0, None)
        if m.ndim == 2:
            tot = m.sum(axis=1, keepdims=True)
            return np.where(tot > 0, m / np.where(tot > 0, tot, 1.0), 1.0 / self.K)
        return m / m.sum() if m.sum() > 0 else np.full(self.K, 1.0 / self.K)

    def report_variance(self, F: np.ndarray) -> np.ndarray:
        """Noise variance of one stage-I report of each functional (rows of ``F``):
        the oracle's noise at the measured shares, plus the rounding, bounded by a quarter
        of the larger squared step of ``F`` next to each point."""
        F = np.atleast_2d(F)
        pi = self.shares()
        noise = ORACLE_DECODERS[self.oracle].mean_functional_variance(F, pi, self.K, self.eps)
        step = np.diff(F, axis=1) ** 2
        pad = np.zeros((F.shape[0], 1))
        near = np.maximum(np.concatenate([pad, step], axis=1),
                          np.concatenate([step, pad], axis=1))
        return noise + 0.25 * rowdot(near, pi)

    def histogram(self) -> Histogram:
        """The masses with their per-point noise variance (``intervals.Histogram``)."""
        var = ORACLE_DECODERS[self.oracle].variance(self.shares(), self.K, self.eps)
        return Histogram(self.mass, var / max(self.reports, 1), self.reports)


def expected_masses(values: np.ndarray, weights: np.ndarray, points: np.ndarray
                    ) -> np.ndarray:
    """The shares of users at each grid point a population of statistics ``values`` (with
    ``weights``) gives after the unbiased rounding: each value split between its two
    neighbouring points in proportion to its distance."""
    v = np.clip(np.asarray(values, dtype=np.float64), points[0], points[-1])
    h = points[1] - points[0]
    x = (v - points[0]) / h
    k = np.minimum(np.floor(x).astype(np.int64), points.size - 2)
    f = x - k
    w = np.asarray(weights, dtype=np.float64)
    f = np.clip(f, 0.0, 1.0)
    out = np.bincount(k, w * (1 - f), minlength=points.size) + \
        np.bincount(k + 1, w * f, minlength=points.size)
    out = np.clip(out, 0.0, None)
    return out / out.sum()


#: the estimates of the mean: ``(λ, κ)`` — the weight of the stage-I users' own reports
#: (``pooled``: ``n₁/n``, as every user counts in the estimand; ``split``: 0, stage I only
#: measures the clamping) and whether the stage-II clamping is corrected from stage I
#: (``κ = 1``) or bounded in the interval (``κ = 0``)
ESTIMATORS = {"debiased": ("pooled", 1), "debiased-split": ("split", 1),
              "clamped": ("pooled", 0), "clamped-split": ("split", 0)}


@dataclass(frozen=True)
class Choice:
    """The rule's choice for one component: the window (grid indices ``i < j``; the
    support is ``0, B``), the estimate (a key of :data:`ESTIMATORS`), its objective, and
    the interval's width and the mean squared error as the rule estimated them."""

    i: int
    j: int
    estimator: str
    objective: float
    width: float
    mse: float


#: at most this many grid points are tried as each end of a window (every point near the
#: users' median, fewer towards the support's ends)
MAX_ENDS = 12


def _windows(stage: GridStage) -> tuple[np.ndarray, np.ndarray]:
    """Candidate windows ``(i, j)``: every pair of grid points around the measured median
    (a window that leaves out the median clamps most users), the ends thinned out to at
    most :data:`MAX_ENDS` each."""
    K = stage.K
    cum = np.cumsum(stage.shares())
    med = int(np.clip(np.searchsorted(cum, 0.5), 0, K - 1))
    lo = np.arange(0, max(med, 1))
    hi = np.arange(min(med + 1, K - 1), K)
    if med == 0:
        lo = np.array([0])
    lo, hi = _thin(lo[::-1])[::-1], _thin(hi)
    i, j = np.meshgrid(lo, hi, indexing="ij")
    keep = i < j
    return i[keep], j[keep]


def _thin(idx: np.ndarray) -> np.ndarray:
    """At most :data:`MAX_ENDS` of ``idx`` (ordered from the median outwards): all the
    first ones, then every second, every fourth…, always the last (the support's end)."""
    if idx.size <= MAX_ENDS:
        return idx
    take: list[int] = []
    step, pos = 1, 0
    while pos < idx.size and len(take) < MAX_ENDS - 1:
        take.append(pos)
        pos += step
        if len(take) % 4 == 0:
            step *= 2
    take.append(idx.size - 1)
    return idx[np.unique(take)]


def estimator_weights(estimator: str, n1: int, n2: int) -> tuple[float, int]:
    """``(λ, κ)`` of an estimator (:data:`ESTIMATORS`) for these stage sizes."""
    weighting, kappa = ESTIMATORS[estimator]
    n = max(n1 + n2, 1)
    return (n1 / n if weighting == "pooled" else 0.0), kappa


def functionals(points: np.ndarray, a: np.ndarray, b: np.ndarray, lam: float, kappa: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(f, τ)`` per window (rows): the stage-I functional ``f = λ g + κ(1 − λ) τ`` whose
    mean over the stage-I reports enters the estimate, and the clamping ``τ`` of a value
    at each grid point."""
    g = points[None, :]
    tau = np.maximum(g - b[:, None], 0.0) - np.maximum(a[:, None] - g, 0.0)
    return lam * g + kappa * (1 - lam) * tau, tau


def honest_terms(stage: GridStage, a: np.ndarray, b: np.ndarray, n1: int, n2: int,
                 point: bool = False, alike: int | None = None) -> dict[str, Any]:
    """Per window ``[a, b]`` (arrays): the clamping ``τ``, the bound (or, ``point``, the
    estimate) of the users' variance of their clamping ``S_τ²`` and of their statistics
    ``S_Y²``, the clamped estimate's bias bounds for all users ``(β_lo⁺, β_hi⁺)`` and the
    clamping as measured, with that measure's sd (module docstring). ``alike``: the
    records per user when the query assumes users alike — the bias bounds are then
    :func:`uldp.collector.methods.alike.alike_bias`'s."""
    g = stage.points[None, :]
    _, tau = functionals(stage.points, a, b, 0.0, 1)
    tau2 = tau * tau
    m2 = rowdot(tau2, stage.mass)
    sd2 = np.sqrt(np.maximum(stage.report_variance(tau2), 0.0) / max(n1, 1))
    net = rowdot(tau, stage.mass)
    sd_net = np.sqrt(np.maximum(stage.report_variance(tau), 0.0) / max(n1, 1))
    many = np.ndim(stage.mass) == 2
    # the users' spread S_Y²: one value per histogram (per row when there are many)
    centre = rowdot(stage.points[None, :], stage.shares()).reshape(-1, 1)
    dev2 = (stage.points[None, :] - centre) ** 2
    if point:
        S = np.maximum(m2 - net * net, 0.0)
        SY = rowdot(dev2, stage.shares())
    else:
        S = _chernoff(m2, sd2, tau2.max(axis=1), n1)
        sdY = np.sqrt(np.maximum(stage.report_variance(dev2), 0.0) / max(n1, 1))
        SY = _chernoff(rowdot(dev2, stage.mass), sdY, dev2.max(axis=1), n1)
    if alike is not None and alike > 0:
        # users alike: a statistic is the mean of ``m`` i.i.d. records on ``[−D, D]``, so
        # ``Var Y ≤ D²/m``, and the clamping ``τ`` is 1-Lipschitz in ``Y``, so
        # ``Var τ ≤ Var Y`` too — what the noisy histogram can only bound by the worst case
        cap = float(stage.points[-1]) ** 2 / alike
        S = np.minimum(S, cap)
        SY = np.minimum(SY, cap)
    spread: Any = SY if many else float(np.asarray(SY).reshape(-1)[0])
    hist = stage.histogram()
    if alike is not None and n1 > 0 and stage.reports > 0:
        b_lo, b_hi = _alike_terms(stage, a, b, n1, alike, spread)
    else:
        b_lo = tail_upper_rows(np.maximum(a[:, None] - g, 0.0), hist)
        b_hi = tail_upper_rows(np.maximum(g - b[:, None], 0.0), hist)
    return {"tau": tau, "S": S, "SY": spread, "b_lo": b_lo, "b_hi": b_hi, "net": net,
            "sd_net": sd_net}


def _alike_terms(stage: GridStage, a: np.ndarray, b: np.ndarray, n1: int, m: int,
                 SY: Any) -> tuple[np.ndarray, np.ndarray]:
    """The bias bounds of users alike (:mod:`uldp.collector.methods.alike`): the mean
    located from stage I, the records' variance ``σ² = m·Var Y`` bounded by ``m·S_Y²``."""
    from uldp.collector.methods.alike import alike_bias, location

    D = float(stage.points[-1])
    hist = stage.histogram()
    mean_var = stage.report_variance(stage.points[None, :]) / n1 + D * D / (m * n1)
    if np.ndim(stage.mass) == 1:
        where = location(stage.points, stage.mass, hist.var, math.sqrt(float(mean_var[0])),
                         n1, m)
    else:
        where = location(stage.points, stage.mass, hist.var, np.sqrt(mean_var), n1, m)
    return alike_bias(stage.points, a, b, where, m, m * np.maximum(SY, 0.0))


def combine_error(N1: np.ndarray, N2: np.ndarray, S_tau: np.ndarray, S_Y: Any,
                  lam: float, kappa: int, n1: int, n2: int) -> np.ndarray:
    """The variance of an estimator (:data:`ESTIMATORS`) as an estimate of the mean over
    the ``n = n₁ + n₂`` users: ``N₁/n₁ + (1 − λ)² N₂/n₂ + n/(n₁n₂)·S_u²``, ``N₁`` the noise of
    one stage-I report of its functional, ``N₂`` of one stage-II report, and
    ``u = (λ − n₁/n) Y + κ(1 − λ) τ`` the part of a user the two random halves of the users
    disagree on, ``S_u ≤ |λ − n₁/n| S_Y + κ(1 − λ) S_τ`` (Cauchy–Schwarz)."""
    n = n1 + n2
    su = abs(lam - n1 / n) * np.sqrt(np.maximum(S_Y, 0.0)) + \
        kappa * (1 - lam) * np.sqrt(np.maximum(S_tau, 0.0))
    return N1 / n1 + (1 - lam) ** 2 * N2 / n2 + n / (n1 * n2) * su * su


def _chernoff(est: np.ndarray, sd: np.ndarray, W: np.ndarray, n1: int) -> np.ndarray:
    """Upper confidence bounds, for all users, of means on ``[0, W]`` (rows) measured as
    ``est ± sd`` on ``n1`` stage-I users (the noise at ``z_{1−α/2}``, then the Chernoff
    bound of the sampling at ``ln(2/α)/n1``, as ``intervals.tail_upper``)."""
    c = math.log(2 / ALPHA_BIAS) / max(n1, 1)
    zz = NormalDist().inv_cdf(1 - ALPHA_BIAS / 2)
    safe = np.where(W > 0, W, 1.0)
    x = np.where(W > 0, np.clip((est + zz * sd) / safe, 0.0, 1.0), 0.0)
    return np.where(W > 0, W * np.asarray(kl_upper(x, c)), 0.0)


def tail_upper_rows(w: np.ndarray, hist: Histogram) -> np.ndarray:
    """:func:`uldp.collector.methods.intervals.tail_upper` of every row of ``w``."""
    if hist.reports <= 0:
        return w.max(axis=1) if w.size else np.zeros(0)
    sd = np.sqrt(rowdot(w * w, hist.var))
    return _chernoff(rowdot(w, hist.mass), sd, w.max(axis=1), hist.reports)


def t2_bounds(stage: GridStage, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of ``E t²`` on each window over all users (``intervals.moment_bounds``). The
    grid points overstate ``E t²`` by the rounding (``t²`` is convex): a user between two
    points reports each with the probabilities that keep ``E t`` exact, and ``E t²`` over the
    two exceeds ``t²`` by at most ``(Δt)²/4`` — which the lower bound gives up."""
    g = stage.points[None, :]
    w = (b - a)[:, None]
    t = 2 * (np.clip(g, a[:, None], b[:, None]) - a[:, None]) / w - 1
    lo, hi = moment_bounds(t * t, stage.histogram())
    h = float(stage.points[1] - stage.points[0])
    return np.maximum(lo - (h / (b - a)) ** 2, 0.0), hi


def choose(stage: GridStage, n1: int, n2: int, mechanisms: Sequence[str],
           noise_var: Any, objective: str, level: float,
           estimators: Sequence[str] = tuple(ESTIMATORS), alike: int | None = None,
           support_only: bool = False) -> dict[str, Choice]:
    """Per randomizer, the window and estimate of least ``objective`` for one component
    (module docstring); ``noise_var(mech, widths, t2)`` is the variance of one stage-II
    report (vectorized); without stage-I reports: the support. ``alike``: :func:`honest_terms`.
    ``support_only``: the window is the support (nothing clamped; only the randomizer and
    the estimate are chosen: ``two-stage-adaptive``)."""
    return choose_many(stage, n1, n2, mechanisms, noise_var, objective, level, estimators,
                       alike, support_only)[0]


def choose_many(stage: GridStage, n1: int, n2: int, mechanisms: Sequence[str],
                noise_var: Any, objective: str, level: float,
                estimators: Sequence[str] = tuple(ESTIMATORS), alike: int | None = None,
                support_only: bool = False) -> list[dict[str, Choice]]:
    """:func:`choose` for each of the histograms of ``stage`` (one, or the rows of a
    ``(R, K)`` mass): the same rule, its candidate windows of all histograms scored in one
    pass (what a prediction drawing hundreds of stage-I histograms needs)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    K, empty = stage.K, n1 <= 0 or stage.reports <= 0 or n2 <= 0
    masses = np.atleast_2d(stage.mass)
    R = masses.shape[0]
    if empty:
        out: dict[str, Choice] = {}
        for mech in mechanisms:
            v0 = float(noise_var(mech, stage.points[-1:] - stage.points[:1], None)[0]) / \
                max(n2, 1)
            w0 = 2 * z * math.sqrt(v0)
            out[mech] = Choice(0, K - 1, "debiased", w0 if objective == "width" else v0, w0, v0)
        return [dict(out) for _ in range(R)]
    cuts, i, j, rows = _candidate_rows(stage, support_only)
    a, b = stage.points[i], stage.points[j]
    full = (i == 0) & (j == K - 1)
    terms = honest_terms(rows, a, b, n1, n2, alike=alike)
    lo2, hi2 = t2_bounds(rows, a, b)
    N1 = _stage_one_noise(stage, rows, a, b, n1, n2, estimators)
    outs: list[dict[str, Choice]] = [{} for _ in range(R)]
    for mech in mechanisms:
        N2 = np.maximum(noise_var(mech, b - a, lo2), noise_var(mech, b - a, hi2))
        best: list[Choice | None] = [None] * R
        for est in estimators:
            lam, kappa = estimator_weights(est, n1, n2)
            V = combine_error(N1[est], N2, terms["S"], terms["SY"], lam, kappa, n1, n2)
            width = 2 * z * np.sqrt(V)
            mse = V
            if kappa == 0:
                # the clamping bias lies in [−β_lo⁺, β_hi⁺] for all users: its width adds to
                # the interval, its worst square to the error (what the histogram shows is
                # not counted on: at small ε stage I cannot tell users alike from users
                # spread out, and an estimate counting on it was off by 300x on the latter)
                width = width + (1 - lam) * (terms["b_lo"] + terms["b_hi"])
                mse = V + ((1 - lam) * np.maximum(terms["b_lo"], terms["b_hi"])) ** 2
                # on the support nothing is clamped: the debiased estimates cover it
                width = np.where(full, np.inf, width)
                mse = np.where(full, np.inf, mse)
            score = width if objective == "width" else mse
            for r in range(R):
                q = cuts[r] + int(np.argmin(score[cuts[r]:cuts[r + 1]]))
                c = Choice(int(i[q]), int(j[q]), est, float(score[q]), float(width[q]),
                           float(mse[q]))
                now = best[r]
                if now is None or c.objective < now.objective * (1 - 1e-12):
                    best[r] = c
        for r in range(R):
            choice = best[r]
            assert choice is not None
            outs[r][mech] = choice
    return outs


def _candidate_rows(stage: GridStage, support_only: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, GridStage]:
    """The candidate windows ``(i, j)`` of every histogram of ``stage``, one after another
    (``cuts``: where each histogram's rows start), and the stage with each row's histogram
    (``stage`` itself when it holds one)."""
    K = stage.K
    masses = np.atleast_2d(stage.mass)
    parts = [(np.array([0]), np.array([K - 1])) if support_only else
             _windows(GridStage(stage.points, masses[r], stage.reports, stage.oracle,
                                stage.eps)) for r in range(masses.shape[0])]
    cuts = np.cumsum([0] + [p[0].size for p in parts])
    i = np.concatenate([p[0] for p in parts])
    j = np.concatenate([p[1] for p in parts])
    rows = stage if np.ndim(stage.mass) == 1 else GridStage(
        stage.points, np.repeat(masses, np.diff(cuts), axis=0), stage.reports, stage.oracle,
        stage.eps)
    return cuts, i, j, rows


def _stage_one_noise(stage: GridStage, rows: GridStage, a: np.ndarray, b: np.ndarray,
                     n1: int, n2: int, estimators: Sequence[str]) -> dict[str, np.ndarray]:
    """The noise of one stage-I report of each estimator's functional, per window row."""
    N1 = {}
    for est in estimators:
        lam, kappa = estimator_weights(est, n1, n2)
        f, _ = functionals(stage.points, a, b, lam, kappa)
        if kappa == 0 and rows is stage:  # the same functional for every window
            N1[est] = np.full(a.size, float(stage.report_variance(f[:1])[0]))
        else:
            N1[est] = rows.report_variance(f)
    return N1


def reference_population(name: str, bound: float, m: int) -> tuple[np.ndarray, np.ndarray]:
    """A population of user statistics on ``[−D, D]`` the predictions are made for when no
    data exist (``values, weights``): ``alike`` — users alike, each statistic the mean of
    ``m`` samples of variance ``D²`` around the centre (normal, cut to the support);
    ``spread`` — statistics uniform over the support; ``ends`` — half of the users at each
    end (binary answers)."""
    if name == "alike":
        x = np.linspace(-bound, bound, 513)
        sd = bound / math.sqrt(max(m, 1))
        w = np.exp(-0.5 * (x / sd) ** 2) if sd > 0 else (x == 0).astype(float)
        if w.sum() <= 0:
            w = np.zeros_like(x)
            w[256] = 1.0
        return x, w / w.sum()
    if name == "spread":
        x = np.linspace(-bound, bound, 513)
        return x, np.full(x.size, 1.0 / x.size)
    if name == "ends":
        return np.array([-bound, bound]), np.array([0.5, 0.5])
    raise ValueError(f"unknown reference population {name!r}")
