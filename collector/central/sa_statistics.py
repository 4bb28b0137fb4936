"""The group statistics of subsample-and-aggregate: built-in ones by name, or the caller's.

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats": subsample-and-aggregate).
Reference: ``docs/central-algorithms.md`` P§2.6 (SA_PMWM computes a non-private
statistic ``T`` on each group of users) and P§6 (the statistics of the query kind
``subsample_aggregate``). A statistic sees the rows of one group and their user ids; it
needs no bounded sensitivity (the aggregation is what is private), so nothing here is
random or private.

Estimands (issue 11): ``"mean"`` is the mean of the group's *user means*, so aggregated
over groups it targets the mean of user means; ``"pooled-mean"`` (the group's row mean) is
kept for comparison and targets neither the pooled mean nor the mean of user means.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BUILTIN_STATISTICS",
    "BuiltinStatistic",
    "Statistic",
    "random_intercept_lmm",
    "resolve_statistic",
]

#: a statistic sees the rows of one group and their (row-aligned) user ids
Statistic = Callable[[np.ndarray, np.ndarray], Any]


def _as_2d(v: np.ndarray) -> np.ndarray:
    return v[:, None] if v.ndim == 1 else v


def _stat_mean(v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Mean of the group's *user means* (each user's rows averaged first, users weighted
    equally): aggregated over groups this targets the mean of user means."""
    v = _as_2d(v)
    _, inv = np.unique(np.asarray(u), return_inverse=True)
    cnt = np.bincount(inv)
    sums = np.stack([np.bincount(inv, weights=v[:, j]) for j in range(v.shape[1])], axis=1)
    return (sums / cnt[:, None]).mean(axis=0)


def _stat_pooled_mean(v: np.ndarray, _u: np.ndarray) -> np.ndarray:
    """Mean of the group's rows (users weighted by their row counts). Aggregated with equal
    weight per group, this is neither the pooled mean of all rows nor the mean of user
    means (a group with many rows counts as much as one with few)."""
    return _as_2d(v).mean(axis=0)


def _stat_median(v: np.ndarray, _u: np.ndarray) -> np.ndarray:
    return np.median(_as_2d(v), axis=0)


def _stat_variance_mle(v: np.ndarray, _u: np.ndarray) -> np.ndarray:
    """Normal-variance MLE ``(1/k) sum (x - xbar)^2`` per column (bias ``-sigma^2/k``)."""
    return _as_2d(v).var(axis=0)


def _stat_ols(v: np.ndarray, _u: np.ndarray) -> np.ndarray:
    """OLS of the last column on an intercept and the other columns: (b0, b1, ...)."""
    v = _as_2d(v)
    if v.shape[1] < 2:
        raise ValueError("'ols' needs values with >= 2 columns (x..., y)")
    X = np.column_stack([np.ones(v.shape[0]), v[:, :-1]])
    coef, _res, rank, _sv = np.linalg.lstsq(X, v[:, -1], rcond=None)
    if rank < X.shape[1]:
        return np.full(X.shape[1], np.nan)
    return coef


def _stat_ols_slope(v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Slope of column 2 (y) on column 1 (x)."""
    v = _as_2d(v)
    if v.shape[1] != 2:
        raise ValueError("'ols-slope' needs values with exactly two columns (x, y)")
    return _stat_ols(v, u)[1:]


def random_intercept_lmm(v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """ML fit of ``y_ij = x_ij' beta + b_i + e_ij``, ``b_i ~ N(0, s2B)``, ``e ~ N(0, s2W)``.

    ``v`` has columns ``(y, x_1, ..., x_p)``, ``u`` are the subject ids. Returns
    ``(beta_0, beta_1..beta_p, s2B, s2W)`` (length p + 3). Profile likelihood in
    ``lam = s2B/s2W``: with ``c_i = lam/(1 + n_i lam)``, ``V_i^{-1} = (I - c_i J)/s2W``,
    GLS ``beta`` and ``s2W = r'Wr/N`` are closed form; ``lam`` by bounded 1-d search.
    """
    from scipy.optimize import minimize_scalar

    v = _as_2d(v)
    order = np.argsort(u, kind="stable")
    v, u = v[order], np.asarray(u)[order]
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
    ni = np.diff(np.r_[starts, u.size]).astype(np.float64)
    y = v[:, 0]
    X = np.column_stack([np.ones(v.shape[0]), v[:, 1:]])
    N = y.size
    XtX, Xty, yty = X.T @ X, X.T @ y, y @ y
    Sx = np.add.reduceat(X, starts, axis=0)  # per-subject column sums
    Sy = np.add.reduceat(y, starts)

    def fit(log_lam: float) -> tuple[float, np.ndarray, float]:
        lam = math.exp(log_lam)
        c = lam / (1.0 + ni * lam)
        A = XtX - (Sx * c[:, None]).T @ Sx
        bvec = Xty - (Sx * c[:, None]).T @ Sy
        beta = np.linalg.solve(A, bvec)
        rss = yty - 2 * beta @ Xty + beta @ XtX @ beta
        sr = Sy - Sx @ beta
        rwr = rss - float(np.sum(c * sr * sr))
        s2w = max(rwr / N, 1e-300)
        nll = N * math.log(s2w) + float(np.sum(np.log1p(ni * lam)))
        return nll, beta, s2w

    res = minimize_scalar(lambda t: fit(t)[0], bounds=(-12.0, 8.0), method="bounded",
                          options={"xatol": 1e-6})
    _, beta, s2w = fit(float(res.x))
    return np.r_[beta, math.exp(float(res.x)) * s2w, s2w]



@dataclass(frozen=True)
class BuiltinStatistic:
    """A built-in statistic: called like one (``stat(values, user_ids)``); ``dim(p)`` is its
    output length for ``p`` value columns; ``estimand`` names what SA then estimates
    (None: the generic "PMWM-winsorized mean over groups of <name>")."""

    name: str
    fn: Statistic
    dim: Callable[[int], int]
    estimand: str | None = None

    def __call__(self, values: np.ndarray, user_ids: np.ndarray) -> Any:
        return self.fn(values, user_ids)


#: every built-in statistic by name (one entry to add one)
BUILTIN_STATISTICS: dict[str, BuiltinStatistic] = {s.name: s for s in (
    BuiltinStatistic("mean", _stat_mean, lambda p: p,
                     "mean of user means (per group: the average of its users' means; "
                     "groups aggregated by PMWM, winsorized)"),
    BuiltinStatistic("pooled-mean", _stat_pooled_mean, lambda p: p,
                     "the average over groups of each group's pooled row mean "
                     "(neither the pooled mean nor the mean of user means)"),
    BuiltinStatistic("median", _stat_median, lambda p: p),
    BuiltinStatistic("variance-mle", _stat_variance_mle, lambda p: p),
    BuiltinStatistic("ols", _stat_ols, lambda p: p),
    BuiltinStatistic("ols-slope", _stat_ols_slope, lambda p: 1),
    BuiltinStatistic("random-intercept-lmm", random_intercept_lmm, lambda p: p + 2),
)}


def resolve_statistic(statistic: str | Statistic) -> Statistic:
    """A built-in statistic by name, or the caller's callable ``f(values, user_ids)``."""
    if isinstance(statistic, str):
        if statistic not in BUILTIN_STATISTICS:
            raise ValueError(
                f"statistic must be a callable or one of {sorted(BUILTIN_STATISTICS)}, "
                f"got {statistic!r}"
            )
        return BUILTIN_STATISTICS[statistic]
    if not callable(statistic):
        raise ValueError(f"statistic must be a callable or a name, got {statistic!r}")
    return statistic
