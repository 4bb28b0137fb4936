"""Improved subsample-and-aggregate (SA) with the PMWM aggregator, at user level.

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats": subsample-and-aggregate).
Reference: ``docs/central-algorithms.md`` P§2.6 (algorithm SA_PMWM), P§2.6.3 (privacy),
P§2.6.4 (choosing k), P§5 A1 (partition *users*, never rows of one user), A2 (even budget
split over coordinates, or public weights summing to one), A7 (m = floor(n/k) groups of
exactly k users from a data-independent random permutation; leftovers dropped, or spread
over the first groups), A8 (failed statistic coordinates replaced by a public value), P§6
(query kind ``subsample_aggregate``). The spec names the module ``central.sa``; it lives
here as ``central.subsample_aggregate``, its group statistics in
:mod:`uldp.collector.central.sa_statistics`.

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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from uldp.client.randomness import RandomSource, as_source
from uldp.collector.central.data import UserGroups, group_by_user
from uldp.collector.central.pmwm import (
    Mode,
    PMWMParams,
    PMWMResult,
    pmwm_practical,
    resolve_budget,
)
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord
from uldp.collector.central.sa_statistics import (
    BUILTIN_STATISTICS,
    Statistic,
    resolve_statistic,
)

__all__ = [
    "SAParams",
    "group_statistics",
    "partition_users",
    "subsample_and_aggregate",
]


# ---------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SAParams:
    """Public parameters of SA_PMWM (P§2.6).

    group_size: k, users per group (>= 1). leftover: ``"drop"`` (default, P§5 A7) or
    ``"spread"`` (sizes k or k+1). pmwm: aggregator parameters, one for all coordinates or
    one per coordinate (P§2.6.1; the paper's SA study uses bounds ``-+40 sqrt 6``, C = 1,
    eta = 0). dim: output dimension d of the statistic (public; inferred from built-ins or
    the first group when None). failure_value: public replacement for failed coordinates
    (default: the midpoint of each coordinate's bounds, P§5 A8). weights: per-coordinate
    budget shares summing to 1 (default even, P§5 A2).
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
    """Data-independent partition of user indices ``0..n_users-1`` (P§2.6.2, P§5 A7).

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
    (public, P§5 A8). ``d`` is ``dim`` or the output length of the first successful group;
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


# ---------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------
def _declared_dim(params: SAParams, statistic: str | Statistic, groups: UserGroups,
                  ) -> int | None:
    """d when it is public before any statistic runs: declared, or a built-in's length."""
    if params.dim is not None or not isinstance(statistic, str):
        return params.dim
    p = 1 if groups.values.ndim == 1 else groups.values.shape[1]
    return BUILTIN_STATISTICS[statistic].dim(p)


def _fallback(params: SAParams, dim: int | None) -> np.ndarray | None:
    """The public replacement of failed coordinates (P§5 A8): declared, or the midpoint of
    each coordinate's PMWM bounds."""
    if params.failure_value is not None:
        return np.atleast_1d(np.asarray(params.failure_value, dtype=np.float64))
    if isinstance(params.pmwm, PMWMParams):
        return np.array([(params.pmwm.lower + params.pmwm.upper) / 2.0])
    if dim is not None:
        return np.array([(p.lower + p.upper) / 2.0 for p in params.pmwm_list(dim)])
    return None


def _record(mode: Mode, total: float, groups: UserGroups, params: SAParams, m: int,
            statistic: str | Statistic, plist: list[PMWMParams], weights: list[float],
            ) -> PrivacyRecord:
    d = len(plist)
    split: dict[str, float] = {}
    for j, (p, w) in enumerate(zip(plist, weights, strict=True)):
        s1, s2, s3 = p.split
        pre = f"coord{j}." if d > 1 else ""
        split[pre + "quantiles"] = 2 * (s1 + s2) * w
        split[pre + "mean"] = s3 * w
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
    kw: dict[str, Any] = {"epsilon": total} if mode == "pure" else {"rho": total}
    return PrivacyRecord(mechanism="subsample_aggregate+pmwm", mode=mode, split=split,
                         public=public, notes="groups of whole users "
                         "(docs/central-algorithms.md P§5 A1); "
                         "coordinate-wise PMWM aggregation", **kw)


def _estimand(statistic: str | Statistic, group_size: int) -> str:
    builtin = BUILTIN_STATISTICS.get(statistic) if isinstance(statistic, str) else None
    if builtin is not None and builtin.estimand is not None:
        return builtin.estimand
    name = statistic if isinstance(statistic, str) else "the caller's statistic"
    return f"PMWM-winsorized mean over groups of {name} on groups of {group_size} users"


def subsample_and_aggregate(user_ids: np.ndarray, values: np.ndarray,
                            statistic: str | Statistic, *, epsilon: float | None,
                            params: SAParams | None = None, rng: RandomSource | None = None,
                            rho: float | None = None) -> CentralRelease:
    """User-level SA_PMWM (P§2.6): partition users into groups of k, compute the
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
    dim = _declared_dim(params, statistic, groups)
    # failure counts (P§5 A8) are not private: they are deliberately not released here;
    # an operator can recompute them with group_statistics on the trusted side.
    t, _failed = group_statistics(groups, partition, stat, dim, _fallback(params, dim))
    d = t.shape[1]
    plist = params.pmwm_list(d)
    weights = params.weight_list(d)
    noise_src = src.spawn("sa-aggregate")
    results: list[PMWMResult] = [
        pmwm_practical(t[:, j], budget=total * weights[j], mode=mode, params=plist[j],
                       rng=noise_src) for j in range(d)
    ]
    est: Any = results[0].estimate if d == 1 else tuple(r.estimate for r in results)
    rec = _record(mode, total, groups, params, len(partition), statistic, plist, weights)
    details = {
        "clip_lower": [r.clip_lower for r in results],
        "clip_upper": [r.clip_upper for r in results],
    }
    return CentralRelease(estimate=est, privacy=rec, details=details,
                          estimand=_estimand(statistic, params.group_size))
