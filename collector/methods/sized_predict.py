"""The prediction of ``two-stage-sized`` (``sized.TwoStageSized.predict``): the rule run on
stage-I histograms drawn for a population of user statistics, each outcome's error computed
exactly for that population and averaged.

See ``docs/algorithms.md`` ("Two-stage, sized"). The histograms are drawn as stage I would
report them (the stage-I users sampled from the population's grid shares, the oracle's noise
a normal of its exact covariance across grid points, :func:`oracle_covariance`, seeded); the
rule runs on many of them at once (:func:`uldp.collector.methods.sizing.choose_many`); the
outcomes are few (a handful of windows, estimates and randomizers), so each outcome's exact
error is computed once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.params import GRID_STEPS, Alg1Params
from uldp.collector.mechanisms import ORACLE_DECODERS
from uldp.collector.mechanisms.choice import SCALAR_CHOICES, scalar_variance
from uldp.collector.methods.alike import assumed_samples
from uldp.collector.methods.common import noise_variance
from uldp.collector.methods.intervals import missed_tail_risk
from uldp.collector.methods.sizing import (
    GridStage,
    choose_many,
    combine_error,
    estimator_weights,
    expected_masses,
    functionals,
    grid_points,
    honest_terms,
    t2_bounds,
)

__all__ = ["CHUNK", "OWN_DATA_DRAWS", "OWN_DATA_TOL", "oracle_covariance", "predict_component",
           "prediction_draws", "stage_one_draws"]

#: stage-I histograms the rule is run on at once (``sizing.choose_many``)
CHUNK = 16
#: the prediction with the users' own statistics (``simulation.own_data``): histograms
#: drawn until the mean error is known to :data:`OWN_DATA_TOL` (its standard error), at
#: most this many. On very concentrated users the rule usually clamps tightly but picks a
#: wide window on a few % of the histograms, with 30× the error: 12 fixed draws put
#: 1/6 of the weight there and predicted 2–5× the measured error (issue 24)
OWN_DATA_DRAWS = 1024
OWN_DATA_TOL = 0.05
def _noise_fn(eps: float) -> Any:
    """``noise(mech, widths, t2)``: the variance of one stage-II report on windows of these
    widths at ``E t² = t2`` (arrays; None: the worst case over t), the rounding included
    (``common.value_noise_variance``, vectorized)."""
    unit = noise_variance(1.0, eps)
    ends = {m: (scalar_variance(m, eps, 0.0), scalar_variance(m, eps, 1.0))
            for m in SCALAR_CHOICES if m != "laplace"}

    def noise(mech: str, width: Any, t2: Any) -> np.ndarray:
        w = np.asarray(width, dtype=np.float64)
        if mech == "laplace":
            return unit * w * w
        v0, v1 = ends[mech]
        v = max(v0, v1) if t2 is None else v0 + (v1 - v0) * np.asarray(t2, dtype=np.float64)
        return v * (w / 2) ** 2 + 0.25 * (w / GRID_STEPS) ** 2
    return noise


def _normal(mu: float, var: float, bound: float) -> tuple[np.ndarray, np.ndarray]:
    sd = math.sqrt(max(var, 0.0))
    if sd <= 0:
        return np.array([min(max(mu, -bound), bound)]), np.array([1.0])
    x = np.linspace(max(-bound, mu - 5 * sd), min(bound, mu + 5 * sd), 257)
    if x[-1] <= x[0]:
        return np.array([min(max(mu, -bound), bound)]), np.array([1.0])
    w = np.exp(-0.5 * ((x - mu) / sd) ** 2)
    # the mass beyond the support piles at its ends (the device clamps)
    lo_mass = 0.5 * math.erfc((mu + bound) / (sd * math.sqrt(2)))
    hi_mass = 0.5 * math.erfc((bound - mu) / (sd * math.sqrt(2)))
    w = w / w.sum() * max(1 - lo_mass - hi_mass, 0.0)
    x = np.concatenate([[-bound], x, [bound]])
    w = np.concatenate([[lo_mass], w, [hi_mass]])
    return x, w / w.sum()


def predict_component(method: Any, plan: Any, g: int, p: Alg1Params,
                       vals: np.ndarray, wts: np.ndarray, n1: int, n2: int, n_all: int,
                       unknown: bool, draws: int, tol: float | None = None
                       ) -> tuple[float, float]:
    """``(mse, half_width)`` of one component (cached on the public facts and the
    population: a plan's prediction is asked for often, e.g. by ``auto``)."""
    key = (method.name, plan.spec.objective, plan.spec.confidence, plan.spec.randomizer,
           assumed_samples(plan.spec),
           plan.spec.oracle, float(plan.grouping.groups[g].eps_c), p.bound, p.bins, n1, n2,
           n_all, unknown, draws, tol, vals.tobytes(), wts.tobytes())
    hit = _CACHE.get(key)
    if hit is None:
        hit = _predict_uncached(method, plan, g, p, vals, wts, n1, n2, n_all, unknown, draws,
                                tol)
        if len(_CACHE) > 4096:
            _CACHE.clear()
        _CACHE[key] = hit
    return hit


_CACHE: dict[tuple, tuple[float, float]] = {}


def _predict_uncached(method: Any, plan: Any, g: int, p: Alg1Params,
                      vals: np.ndarray, wts: np.ndarray, n1: int, n2: int, n_all: int,
                      unknown: bool, draws: int, tol: float | None = None
                      ) -> tuple[float, float]:
    eps_c = plan.grouping.groups[g].eps_c
    oracle = method.oracle(plan, g)
    pts = grid_points(p.bound, p.bins)
    pi = expected_masses(vals, wts, pts)
    n = n1 + n2
    z = NormalDist().inv_cdf(0.5 + plan.spec.confidence / 2)
    truth = GridStage(pts, pi, max(n1, 1), oracle, eps_c)
    mechs = method.mechanisms(plan, eps_c)
    noise = _noise_fn(eps_c)
    alike = assumed_samples(plan.spec)
    mu = float(np.dot(vals, wts))
    spread = float(np.dot((vals - mu) ** 2, wts)) * max(1 - n / n_all, 0.0) / max(n, 1)
    picks: list[tuple[int, int, str, str]] = []
    known: dict[tuple[int, int, str, str], float] = {}
    chunks = []
    # a few dozen histograms at a time (the rule's arrays stay in the cache); with a
    # tolerance, until the mean error is known to within it (its standard error), at most
    # ``draws`` histograms
    for part in prediction_draws(vals, wts, pts, n1, n_all, oracle, eps_c, draws):
        chunks.append(part)
        seen = GridStage(pts, part if part.shape[0] > 1 else part[0], n1, oracle, eps_c)
        for per in choose_many(seen, n1, n2, mechs, noise, plan.spec.objective,
                               plan.spec.confidence, method.estimators(plan), alike,
                               method.support_only):
            mech = min(per, key=lambda k: per[k].objective)
            picks.append((per[mech].i, per[mech].j, per[mech].estimator, mech))
        for key in set(picks) - set(known):
            i, j, estimator, mech = key
            a, b = float(pts[i]), float(pts[j])
            known[key] = _outcome_error(truth, vals, wts, a, b, estimator, mech, noise, n1,
                                        n2)
            if unknown and alike is None and n1 > 0 and (i > 0 or j < pts.size - 1):
                # a tail of the users every stage-I user missed: for a population known
                # only by its public facts, the largest expected squared clamping it leaves
                W = max(a - pts[0], pts[-1] - b)
                known[key] += missed_tail_risk(n1, W) * (n2 / n) ** 2
        if tol is not None and len(picks) >= 2 * CHUNK:
            e = np.array([known[k] for k in picks])
            if e.std(ddof=1) / math.sqrt(e.size) <= tol * (e.mean() + spread):
                break
    drawn = np.concatenate(chunks)[:len(picks)]
    errs = np.array([known[k] for k in picks]) + spread
    halves = np.zeros(len(picks))
    # the half-widths the histograms of each outcome would state, in one pass per outcome
    for key in set(picks):
        i, j, estimator, mech = key
        at = np.array([r for r, k in enumerate(picks) if k == key])
        hw = _stated_half(GridStage(pts, drawn[at], n1, oracle, eps_c), vals, wts,
                          float(pts[i]), float(pts[j]), estimator, mech, noise, n1, n2, z,
                          alike)
        halves[at] = np.sqrt(hw * hw + z * z * spread)
    return float(np.mean(errs)), float(np.mean(halves))


def prediction_draws(vals: np.ndarray, wts: np.ndarray, pts: np.ndarray, n1: int,
                     n_all: int, oracle: str, eps: float, draws: int) -> Iterator[np.ndarray]:
    """The stage-I histograms a prediction for the population ``(vals, wts)`` runs the rule
    on: when the population is the query's users themselves (``n_all`` values of equal
    weight: own data), stage I as it happens — ``n1`` of them sampled *without*
    replacement, each rounded to the grid (:func:`stage_one_user_draws`); otherwise (a law
    of the statistic, known by its moments or public facts) ``n1`` draws from its grid
    shares (:func:`stage_one_draws`)."""
    users = (vals.size == n_all and n1 < n_all and n_all > 1
             and bool(np.all(wts == wts[0])))
    if users:
        return stage_one_user_draws(vals, pts, n1, oracle, eps, draws)
    return stage_one_draws(expected_masses(vals, wts, pts), n1, oracle, eps, draws)


def stage_one_draws(pi: np.ndarray, n1: int, oracle: str, eps: float, draws: int
                    ) -> Iterator[np.ndarray]:
    """The stage-I histograms a prediction runs the rule on, :data:`CHUNK` rows at a time:
    ``draws`` noisy ones (the ``n1`` stage-I users drawn from the shares ``pi``, the oracle's
    noise added as a normal of its exact covariance at ``pi``, :func:`oracle_covariance`;
    seeded, so the same public facts give the same prediction), or the expected histogram
    alone (``draws = 0`` or no stage I).

    The covariance matters where stage I is small: subset selection's (and randomized
    response's) decoded shares sum to exactly 1, so noise drawn independently per grid point
    (its diagonal alone) made the histograms rougher than stage I's and the predicted error
    of a 16-user stage I 13 % too large at ε = 1 (issue 24)."""
    if n1 <= 0 or draws <= 0:
        yield np.asarray(pi, dtype=np.float64)[None, :]
        return
    rng = np.random.default_rng(20240601)
    root = _noise_root(oracle, pi, eps, n1)
    for at in range(0, draws, CHUNK):
        # one histogram after the other from the one stream: the first draws are the same
        # whatever ``draws`` (``auto`` ranks on a few of them)
        yield np.array([rng.multinomial(n1, pi) / n1 + rng.normal(0.0, 1.0, pi.size) @ root
                        for _ in range(min(CHUNK, draws - at))])


def stage_one_user_draws(vals: np.ndarray, pts: np.ndarray, n1: int, oracle: str, eps: float,
                         draws: int) -> Iterator[np.ndarray]:
    """:func:`stage_one_draws` for a population that is the users themselves: each
    histogram from ``n1`` of the ``vals`` sampled without replacement (as the plan assigns
    users to stage I) and rounded to the grid unbiasedly (as the device does), the oracle's
    noise a normal of its exact covariance. A multinomial draw from the shares samples the
    users with replacement: its spread between users is ``(N − 1)/(N − n₁)`` times stage
    I's (1.4× at a 30 % stage I), so it saw the rare stage I that widens or shifts the
    window too often (issue 24)."""
    vals = np.clip(np.asarray(vals, dtype=np.float64), pts[0], pts[-1])
    K, N = pts.size, vals.size
    x = (vals - pts[0]) / (pts[1] - pts[0])
    k = np.minimum(np.floor(x).astype(np.int64), K - 2)
    up = np.clip(x - k, 0.0, 1.0)
    if n1 <= 0 or draws <= 0:
        yield expected_masses(vals, np.full(N, 1.0 / N), pts)[None, :]
        return
    rng = np.random.default_rng(20240601)
    pi = expected_masses(vals, np.full(N, 1.0 / N), pts)
    root = _noise_root(oracle, pi, eps, n1)
    for at in range(0, draws, CHUNK):
        rows = []
        for _ in range(min(CHUNK, draws - at)):
            who = rng.choice(N, n1, replace=False)
            g = k[who] + (rng.random(n1) < up[who])
            rows.append(np.bincount(g, minlength=K) / n1
                        + rng.normal(0.0, 1.0, K) @ root)
        yield np.array(rows)


def _noise_root(oracle: str, pi: np.ndarray, eps: float, n1: int) -> np.ndarray:
    """``R`` with ``z @ R ~ N(0, Σ/n₁)`` for standard normal ``z`` (``Σ``:
    :func:`oracle_covariance`); directions of (numerically) zero variance — the sum of
    subset selection's shares — get none, so the drawn shares sum to 1 exactly."""
    lam, vec = np.linalg.eigh(oracle_covariance(oracle, pi, eps) / n1)
    lam = np.where(lam > 1e-12 * max(float(lam.max()), 0.0), lam, 0.0)
    return (vec * np.sqrt(lam)).T


def oracle_covariance(oracle: str, pi: np.ndarray, eps: float) -> np.ndarray:
    """``Σ_v π_v Cov(f̂ | v)``, ``(k, k)``: the exact covariance of one report's decoded share
    vector for a population whose values have shares ``π`` — by polarization of the
    decoder's exact functional variance (``mean_functional_variance`` of the rows ``e_j``
    and ``e_j + e_l``), so it holds for every oracle, its correlations between grid points
    included."""
    pi = np.asarray(pi, dtype=np.float64)
    k = pi.size
    dec = ORACLE_DECODERS[oracle]
    diag = dec.mean_functional_variance(np.eye(k), pi, k, eps)
    j, l = np.triu_indices(k, 1)
    F = np.zeros((j.size, k))
    F[np.arange(j.size), j] = 1.0
    F[np.arange(j.size), l] = 1.0
    both = dec.mean_functional_variance(F, pi, k, eps)
    cov = np.diag(diag)
    cov[j, l] = cov[l, j] = (both - diag[j] - diag[l]) / 2
    return cov


def _true_report_variance(stage: GridStage, F: np.ndarray, vals: np.ndarray,
                          wts: np.ndarray) -> float:
    """The noise of one stage-I report of the functional ``F`` for a population of
    statistics ``vals``: the oracle's at the population's shares, plus the rounding of
    each value between its two grid points, exactly."""
    F = np.asarray(F, dtype=np.float64)
    pi = expected_masses(vals, wts, stage.points)
    oracle = float(ORACLE_DECODERS[stage.oracle].functional_variance(
        F[None, :], stage.K, stage.eps)[0] @ pi)
    pts = stage.points
    h = pts[1] - pts[0]
    x = (np.clip(vals, pts[0], pts[-1]) - pts[0]) / h
    k = np.minimum(np.floor(x).astype(np.int64), pts.size - 2)
    r = x - k
    return oracle + float(np.dot(wts, r * (1 - r) * (F[k + 1] - F[k]) ** 2))


def _outcome(truth: GridStage, seen: GridStage, vals: np.ndarray, wts: np.ndarray, a: float,
             b: float, estimator: str, mech: str, noise: Any, n1: int, n2: int, z: float,
             alike: int | None = None) -> tuple[float, float]:
    """The exact expected squared error of one outcome of the rule for the population, and
    the half-width its interval would state (the stage-II noise as the reports measure it,
    the rest as estimated from what stage I saw)."""
    return (_outcome_error(truth, vals, wts, a, b, estimator, mech, noise, n1, n2),
            _stated_half(seen, vals, wts, a, b, estimator, mech, noise, n1, n2, z, alike))


def _stage_two(vals: np.ndarray, wts: np.ndarray, a: float, b: float, mech: str, noise: Any
               ) -> tuple[float, np.ndarray]:
    """The noise of one stage-II report on ``[a, b]`` for the population, and its ``t``."""
    w = b - a
    t = 2 * (np.clip(vals, a, b) - a) / w - 1
    return float(noise(mech, np.array([w]), np.array([float(np.dot(t * t, wts))]))[0]), t


def _outcome_error(truth: GridStage, vals: np.ndarray, wts: np.ndarray, a: float, b: float,
                   estimator: str, mech: str, noise: Any, n1: int, n2: int) -> float:
    """The exact expected squared error of one outcome of the rule for the population."""
    N2, _ = _stage_two(vals, wts, a, b, mech, noise)
    if n1 <= 0:
        return N2 / max(n2, 1)
    n = n1 + n2
    lam, kappa = estimator_weights(estimator, n1, n2)
    f, _ = functionals(truth.points, np.array([a]), np.array([b]), lam, kappa)
    tau = np.maximum(vals - b, 0.0) - np.maximum(a - vals, 0.0)
    mu = float(np.dot(vals, wts))
    u = (lam - n1 / n) * (vals - mu) + kappa * (1 - lam) * (tau - float(np.dot(tau, wts)))
    V = _true_report_variance(truth, f[0], vals, wts) / n1 + (1 - lam) ** 2 * N2 / n2 + \
        n / (n1 * n2) * float(np.dot(u * u, wts))
    bias = (1 - kappa) * (1 - lam) * float(np.dot(tau, wts))
    return V + bias * bias


def _stated_half(seen: GridStage, vals: np.ndarray, wts: np.ndarray, a: float, b: float,
                 estimator: str, mech: str, noise: Any, n1: int, n2: int, z: float,
                 alike: int | None = None) -> Any:
    """The half-width the interval of one outcome would state: the stage-II noise as the
    reports measure it, the rest as estimated from what stage I saw (``seen``: one
    histogram, or ``(R, K)`` of them, each its own half-width)."""
    R = 1 if np.ndim(seen.mass) == 1 else int(seen.mass.shape[0])
    A, B = np.full(R, a), np.full(R, b)
    N2, t = _stage_two(vals, wts, a, b, mech, noise)
    N2s = np.full(R, N2)
    if mech == "duchi":  # its reports do not measure E t² (module ``common``)
        floor = np.full(R, float(np.dot(t, wts)) ** 2)
        if n1 > 0:
            floor = np.maximum(floor, t2_bounds(seen, A, B)[0])
        N2s = noise(mech, B - A, np.minimum(floor, 1.0))
    if n1 <= 0:
        hw = z * np.sqrt(N2s / max(n2, 1))
    else:
        lam, kappa = estimator_weights(estimator, n1, n2)
        f, _ = functionals(seen.points, A, B, lam, kappa)
        est = honest_terms(seen, A, B, n1, n2, alike=alike)
        Vs = combine_error(seen.report_variance(f), N2s, est["S"], est["SY"], lam, kappa,
                           n1, n2)
        hw = z * np.sqrt(Vs)
        if kappa == 0:
            hw = hw + (1 - lam) * (est["b_lo"] + est["b_hi"]) / 2
    return float(hw[0]) if R == 1 and np.ndim(seen.mass) == 1 else hw
