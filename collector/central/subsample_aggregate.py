"""Improved subsample-and-aggregate (SA) with the PMWM aggregator, at user level.

Spec: ``private_modified_winsorized_mean.md`` §2.6 (algorithm SA_PMWM), §2.6.3 (privacy),
§2.6.4 (choosing k), §5 A1 (partition *users*, never rows of one user), A2 (even budget
split over coordinates, or public weights summing to one), A7 (m = floor(n/k) groups of
exactly k users from a data-independent random permutation; leftovers dropped, or spread
over the first groups), A8 (failed statistic coordinates replaced by a public value), §6
(query kind ``subsample_aggregate``). The spec names the module ``central.sa``; it lives
here as ``central.subsample_aggregate``.

Privacy argument (user level). The partition depends only on the public number of users
and on randomness independent of the data. Replacing all rows of one user changes only the
group that holds that user, so the matrix of group statistics ``t`` (m x d) changes in at
most one row, whatever ``T`` does (``T`` need not have bounded sensitivity; failures are
mapped to a fixed public value, still a function of that one group). Each column is then a
replace-one neighbour for PMWM, which spends ``w_j * total`` on column ``j``; basic
composition over ``sum_j w_j = 1`` gives ``total`` (eps-DP or rho-zCDP).

Estimand (issue 11). With the built-in ``"mean"`` each group's statistic is the mean of
its users' means, so the release targets the **mean of user means** (of the users kept
in groups; with ``leftover="drop"`` the dropped users are a uniformly random subset),
winsorized over groups by PMWM. ``"pooled-mean"`` (the mean of the group's rows) is kept
for comparison: aggregated with equal group weights it estimates neither the pooled mean
of all rows nor the mean of user means. For other statistics the estimand is the
PMWM-winsorized mean over groups of the statistic on k users.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from uldp.client.randomness import RandomSource, as_source
from uldp.collector.central.data import UserGroups, group_by_user
from uldp.collector.central.pmwm import (
    PMWMParams,
    PMWMResult,
    pmwm_practical,
    resolve_budget,
)
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord

__all__ = [
    "BUILTIN_STATISTICS",
    "SAParams",
    "Statistic",
    "group_statistics",
    "partition_users",
    "random_intercept_lmm",
    "resolve_statistic",
    "subsample_and_aggregate",
]

#: a statistic sees the rows of one group and their (row-aligned) user ids
Statistic = Callable[[np.ndarray, np.ndarray], Any]


# ---------------------------------------------------------------------------------------
# built-in statistics
# ---------------------------------------------------------------------------------------
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


BUILTIN_STATISTICS: dict[str, Statistic] = {
    "mean": _stat_mean,
    "pooled-mean": _stat_pooled_mean,
    "median": _stat_median,
    "variance-mle": _stat_variance_mle,
    "ols": _stat_ols,
    "ols-slope": _stat_ols_slope,
    "random-intercept-lmm": random_intercept_lmm,
}


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


# ---------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SAParams:
    """Public parameters of SA_PMWM (§2.6).

    group_size: k, users per group (>= 1). leftover: ``"drop"`` (default, §5 A7) or
    ``"spread"`` (sizes k or k+1). pmwm: aggregator parameters, one for all coordinates or
    one per coordinate (§2.6.1; the paper's SA study uses bounds ``-+40 sqrt 6``, C = 1,
    eta = 0). dim: output dimension d of the statistic (public; inferred from built-ins or
    the first group when None). failure_value: public replacement for failed coordinates
    (default: the midpoint of each coordinate's bounds, §5 A8). weights: per-coordinate
    budget shares summing to 1 (default even, §5 A2).
    """

    group_size: int = 10
    leftover: Literal["drop", "spread"] = "drop"
    pmwm: PMWMParams | tuple[PMWMParams, ...] = field(default_factory=PMWMParams)
    dim: int | None = None
    failure_value: float | tuple[float, ...] | None = None
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        k = self.group_size
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"group_size must be an integer >= 1, got {k!r}")
        if self.leftover not in ("drop", "spread"):
            raise ValueError(f"leftover must be 'drop' or 'spread', got {self.leftover!r}")
        if isinstance(self.pmwm, PMWMParams):
            pass
        elif not (isinstance(self.pmwm, tuple) and self.pmwm
                  and all(isinstance(p, PMWMParams) for p in self.pmwm)):
            raise ValueError("pmwm must be a PMWMParams or a non-empty tuple of them")
        if self.dim is not None and (isinstance(self.dim, bool)
                                     or not isinstance(self.dim, (int, np.integer))
                                     or self.dim < 1):
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")
        if self.failure_value is not None:
            fv = np.atleast_1d(np.asarray(self.failure_value, dtype=np.float64))
            if not np.isfinite(fv).all():
                raise ValueError("failure_value must be finite")
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64)
            if w.ndim != 1 or w.size == 0 or (w <= 0).any() or not np.isfinite(w).all() \
                    or abs(w.sum() - 1.0) > 1e-9:
                raise ValueError(f"weights must be positive and sum to 1, got {self.weights!r}")

    def pmwm_list(self, d: int) -> list[PMWMParams]:
        if isinstance(self.pmwm, PMWMParams):
            return [self.pmwm] * d
        if len(self.pmwm) != d:
            raise ValueError(f"pmwm has {len(self.pmwm)} entries but the statistic has d={d}")
        return list(self.pmwm)

    def weight_list(self, d: int) -> list[float]:
        if self.weights is None:
            return [1.0 / d] * d
        if len(self.weights) != d:
            raise ValueError(f"weights has {len(self.weights)} entries but d={d}")
        return [float(w) for w in self.weights]


# ---------------------------------------------------------------------------------------
# partition and group statistics
# ---------------------------------------------------------------------------------------
def partition_users(n_users: int, k: int, rng: RandomSource,
                    leftover: Literal["drop", "spread"] = "drop") -> list[np.ndarray]:
    """Data-independent partition of user indices ``0..n_users-1`` (§2.6.2, §5 A7).

    ``m = floor(n_users / k)`` groups from a uniform random permutation; ``"drop"``
    discards the ``n_users - m k`` last users of the permutation, ``"spread"`` adds them
    one each to the first groups. Uses only public inputs and non-noise randomness
    (``RandomSource.numpy_generator``)."""
    if n_users < k:
        raise ValueError(f"need at least group_size={k} users, got {n_users}")
    m = n_users // k
    perm = rng.numpy_generator().permutation(n_users)
    groups = [perm[i * k : (i + 1) * k] for i in range(m)]
    if leftover == "spread":
        for j, extra in enumerate(perm[m * k :]):
            groups[j] = np.r_[groups[j], extra]
    return groups


def _group_row_index(groups: UserGroups, partition: Sequence[np.ndarray],
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of every group, concatenated (users sorted within a group), and the
    group boundaries into that array. Vectorized: one ``arange`` over all rows."""
    users = np.concatenate([np.sort(np.asarray(p, dtype=np.int64)) for p in partition])
    starts, ends = groups.offsets[users], groups.offsets[users + 1]
    lens = ends - starts
    run_start = np.cumsum(lens) - lens
    idx = np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(starts - run_start, lens)
    user_bounds = np.r_[0, np.cumsum([len(p) for p in partition])]
    row_bounds = np.r_[0, np.cumsum(lens)][user_bounds]
    return idx, row_bounds


def group_statistics(groups: UserGroups, partition: Sequence[np.ndarray],
                     statistic: Statistic, dim: int | None, fallback: np.ndarray | None,
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Matrix ``t`` (m x d) of group statistics and a per-group failure flag.

    Each row depends only on the rows of the users of that group. A statistic that raises
    or returns non-finite coordinates has those coordinates replaced by ``fallback``
    (public, §5 A8). ``d`` is ``dim`` or the output length of the first successful group;
    a group whose output has another length counts as failed.
    """
    outs: list[np.ndarray | None] = []
    idx, bounds = _group_row_index(groups, partition)
    row_user = np.repeat(groups.users, groups.counts)
    for i in range(len(partition)):
        rows = idx[bounds[i] : bounds[i + 1]]
        vals, uids = groups.values[rows], row_user[rows]
        try:
            out = np.atleast_1d(np.asarray(statistic(vals, uids), dtype=np.float64)).ravel()
        except Exception:  # any failure of T on a group: A8
            out = None
        outs.append(out)
    d = dim
    if d is None:
        d = next((o.size for o in outs if o is not None), None)
        if d is None:
            raise ValueError("statistic failed on every group; pass SAParams.dim")
    fb = np.zeros(d) if fallback is None else np.broadcast_to(fallback, (d,))
    t = np.empty((len(outs), d), dtype=np.float64)
    failed = np.zeros((len(outs), d), dtype=bool)
    for i, o in enumerate(outs):
        if o is None or o.size != d:
            t[i], failed[i] = fb, True
            continue
        bad = ~np.isfinite(o)
        t[i] = np.where(bad, fb, o)
        failed[i] = bad
    return t, failed


_BUILTIN_DIM: dict[str, Callable[[int], int]] = {
    "mean": lambda p: p, "pooled-mean": lambda p: p, "median": lambda p: p,
    "variance-mle": lambda p: p,
    "ols": lambda p: p, "ols-slope": lambda p: 1, "random-intercept-lmm": lambda p: p + 2,
}


# ---------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------
def subsample_and_aggregate(user_ids: np.ndarray, values: np.ndarray,
                            statistic: str | Statistic, *, epsilon: float | None,
                            params: SAParams | None = None, rng: RandomSource | None = None,
                            rho: float | None = None) -> CentralRelease:
    """User-level SA_PMWM (§2.6): partition users into groups of k, compute the
    (non-private) ``statistic`` on each group, aggregate each coordinate with the
    practical PMWM at budget ``w_j * total``.

    ``statistic`` is a built-in name (:data:`BUILTIN_STATISTICS`) or a callable
    ``f(values_block, user_ids_block) -> float | array`` of fixed length d. Pass exactly
    one of ``epsilon`` (pure DP) or ``rho`` (zCDP). The release is user-level (replace one
    user; the number of users, k, m and d are public).
    """
    mode, total = resolve_budget(epsilon, rho)
    params = params or SAParams()
    stat = resolve_statistic(statistic)
    groups = group_by_user(user_ids, values)
    src = as_source(rng)
    partition = partition_users(groups.n_users, params.group_size, src.spawn("sa-partition"),
                                params.leftover)
    dim = params.dim
    if dim is None and isinstance(statistic, str):
        p = 1 if groups.values.ndim == 1 else groups.values.shape[1]
        dim = _BUILTIN_DIM[statistic](p)
    base = params.pmwm if isinstance(params.pmwm, PMWMParams) else None
    fallback: np.ndarray | None = None
    if params.failure_value is not None:
        fallback = np.atleast_1d(np.asarray(params.failure_value, dtype=np.float64))
    elif base is not None:
        fallback = np.array([(base.lower + base.upper) / 2.0])
    elif dim is not None:
        plist0 = params.pmwm_list(dim)
        fallback = np.array([(p.lower + p.upper) / 2.0 for p in plist0])
    t, failed = group_statistics(groups, partition, stat, dim, fallback)
    d = t.shape[1]
    plist = params.pmwm_list(d)
    weights = params.weight_list(d)
    noise_src = src.spawn("sa-aggregate")
    results: list[PMWMResult] = [
        pmwm_practical(t[:, j], budget=total * weights[j], mode=mode, params=plist[j],
                       rng=noise_src) for j in range(d)
    ]
    est: Any = results[0].estimate if d == 1 else tuple(r.estimate for r in results)
    split: dict[str, float] = {}
    for j, (p, w) in enumerate(zip(plist, weights, strict=True)):
        s1, s2, s3 = p.split
        pre = f"coord{j}." if d > 1 else ""
        split[pre + "quantiles"] = 2 * (s1 + s2) * w
        split[pre + "mean"] = s3 * w
    m = len(partition)
    public: dict[str, Any] = {
        "n_users": groups.n_users, "group_size": params.group_size, "groups": m,
        "leftover": params.leftover,
        "users_dropped": groups.n_users - m * params.group_size
        if params.leftover == "drop" else 0,
        "d": d, "per_coordinate_budget": [total * w for w in weights],
        "statistic": statistic if isinstance(statistic, str)
        else getattr(statistic, "__name__", "callable"),
        "pmwm": [{"lower": p.lower, "upper": p.upper, "beta": p.beta, "C": p.C,
                  "eta": p.eta, "split": list(p.split), "quantile_noise": p.quantile_noise}
                 for p in plist],
    }
    kw = {"epsilon": total} if mode == "pure" else {"rho": total}
    rec = PrivacyRecord(mechanism="subsample_aggregate+pmwm", mode=mode, split=split,
                        public=public, notes="groups of whole users (spec §5 A1); "
                        "coordinate-wise PMWM aggregation", **kw)
    details = {
        "clip_lower": [r.clip_lower for r in results],
        "clip_upper": [r.clip_upper for r in results],
    }
    # failure counts (§5 A8) are not private: they are deliberately not released here;
    # an operator can recompute them with group_statistics on the trusted side.
    del failed
    name = statistic if isinstance(statistic, str) else "the caller's statistic"
    estimand = {"mean": "mean of user means (per group: the average of its users' means; "
                        "groups aggregated by PMWM, winsorized)",
                "pooled-mean": "the average over groups of each group's pooled row mean "
                               "(neither the pooled mean nor the mean of user means)"}.get(
        name, f"PMWM-winsorized mean over groups of {name} on groups of "
              f"{params.group_size} users")
    return CentralRelease(estimate=est, privacy=rec, details=details, estimand=estimand)
