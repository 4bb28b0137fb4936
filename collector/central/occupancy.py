"""The public occupancy array A of the per-subset statistics.

See ``docs/central.md`` ("subset-stats"). Reference: ``docs/central-algorithms.md`` C§1.3
(neighbours share A), C§5 B1 (A must be declared public) and B4 (a user's records in a
subset keep their input order, so "the first Γ records" is well defined).

A says which users contribute to which subset and with how many records. Everything here
reads record *labels* only, never values: the Clip-User planner
(:mod:`uldp.collector.central.clip_user`) works on A alone, and the release
(:mod:`uldp.collector.central.subset_release`) indexes its rows through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Occupancy",
    "Rows",
    "index_rows",
    "kept_summary",
    "occupancy_from_rows",
    "require_public_occupancy",
]


# ---- occupancy (the public array A, stored sparsely) ---------------------------------
@dataclass(frozen=True, eq=False)
class Occupancy:
    """Sparse public occupancy array: pair i = (user ``users[pair_user[i]]``, subset
    ``subsets[pair_grid[i]]``) with ``counts[i] = m_{g,ℓ} > 0`` records.

    Pairs are sorted by (grid, user); ``users`` and ``subsets`` are sorted unique labels, so
    user and grid ids are ranks (ties in Clip-User go to the smallest id).
    """

    users: np.ndarray
    subsets: np.ndarray
    pair_user: np.ndarray
    pair_grid: np.ndarray
    counts: np.ndarray

    @property
    def n_users(self) -> int:
        return int(self.users.size)

    @property
    def n_subsets(self) -> int:
        return int(self.subsets.size)

    def totals(self) -> np.ndarray:
        """N_g per subset."""
        return np.bincount(self.pair_grid, weights=self.counts,
                           minlength=self.n_subsets).astype(np.int64)

    def subsets_per_user(self) -> np.ndarray:
        """G_ℓ per user (number of subsets touched)."""
        return np.bincount(self.pair_user, minlength=self.n_users).astype(np.int64)

    def to_dense(self) -> np.ndarray:
        a = np.zeros((self.n_users, self.n_subsets), dtype=np.int64)
        a[self.pair_user, self.pair_grid] = self.counts
        return a

    @classmethod
    def from_dense(cls, counts: np.ndarray, users: np.ndarray | None = None,
                   subsets: np.ndarray | None = None) -> Occupancy:
        """From an L×G count matrix (rows: users, columns: subsets); zero rows dropped."""
        a = np.asarray(counts)
        if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"counts must be a 2-D integer array, got {a.dtype} {a.shape}")
        if (a < 0).any():
            raise ValueError("counts must be non-negative")
        users = np.arange(a.shape[0]) if users is None else np.asarray(users)
        subsets = np.arange(a.shape[1]) if subsets is None else np.asarray(subsets)
        if users.shape != (a.shape[0],) or subsets.shape != (a.shape[1],):
            raise ValueError("users/subsets labels must match the count matrix shape")
        if np.unique(users).size != users.size or np.unique(subsets).size != subsets.size:
            raise ValueError("users and subsets labels must be unique")
        uo, so = np.argsort(users, kind="stable"), np.argsort(subsets, kind="stable")
        a = a[uo][:, so]
        keep_u = a.sum(axis=1) > 0
        keep_g = a.sum(axis=0) > 0
        a = a[keep_u][:, keep_g]
        if a.size == 0:
            raise ValueError("counts has no positive entry")
        g_idx, u_idx = np.nonzero(a.T)
        return cls(users=users[uo][keep_u], subsets=subsets[so][keep_g],
                   pair_user=u_idx.astype(np.int64), pair_grid=g_idx.astype(np.int64),
                   counts=a.T[g_idx, u_idx].astype(np.int64))

    def same_as(self, other: Occupancy) -> bool:
        return (np.array_equal(self.users, other.users)
                and np.array_equal(self.subsets, other.subsets)
                and np.array_equal(self.pair_user, other.pair_user)
                and np.array_equal(self.pair_grid, other.pair_grid)
                and np.array_equal(self.counts, other.counts))


@dataclass(frozen=True, eq=False)
class Rows:
    """Validated rows with their (grid, user) pair index and within-pair rank."""

    occupancy: Occupancy
    row_pair: np.ndarray  # pair index of each row
    row_rank: np.ndarray  # 0-based position of the row among its pair's rows (input order)


def _check_labels(name: str, arr: Any, n: int | None) -> np.ndarray:
    a = np.asarray(arr)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} must have one entry per row ({a.shape[0]} != {n})")
    if a.size == 0:
        raise ValueError(f"{name} is empty: no record was given")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinity")
    if a.dtype.kind == "O":
        try:
            np.argsort(a)
        except TypeError as exc:
            raise ValueError(f"{name} labels must be mutually comparable: {exc}") from None
    return a


def index_rows(user_ids: Any, subsets: Any) -> Rows:
    u = _check_labels("user_ids", user_ids, None)
    g = _check_labels("subsets", subsets, u.shape[0])
    users, u_inv = np.unique(u, return_inverse=True)
    grids, g_inv = np.unique(g, return_inverse=True)
    u_inv = u_inv.reshape(-1).astype(np.int64)
    g_inv = g_inv.reshape(-1).astype(np.int64)
    key = g_inv * np.int64(users.size) + u_inv
    order = np.argsort(key, kind="stable")  # stable: keeps input order within a pair
    sk = key[order]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    counts = np.diff(np.r_[starts, sk.size]).astype(np.int64)
    pair_of_sorted = np.repeat(np.arange(starts.size), counts)
    rank_sorted = np.arange(sk.size) - starts[pair_of_sorted]
    row_pair = np.empty(sk.size, np.int64)
    row_rank = np.empty(sk.size, np.int64)
    row_pair[order] = pair_of_sorted
    row_rank[order] = rank_sorted
    first = sk[starts]
    occ = Occupancy(users=users, subsets=grids, pair_user=(first % users.size).astype(np.int64),
                    pair_grid=(first // users.size).astype(np.int64), counts=counts)
    return Rows(occupancy=occ, row_pair=row_pair, row_rank=row_rank)


def occupancy_from_rows(user_ids: Any, subsets: Any) -> Occupancy:
    """The public occupancy array A of record rows (reads labels only, never values)."""
    return index_rows(user_ids, subsets).occupancy


def require_public_occupancy(public_occupancy: Any) -> None:
    """C§5 B1: refuse unless the caller declares the occupancy array public."""
    if public_occupancy is not True:
        raise ValueError(
            "public_occupancy must be True: this mechanism protects sample values only and "
            "reveals who contributes to which subset and how often "
            "(docs/central-algorithms.md C§5 B1)")


def kept_summary(occ: Occupancy, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S_g, Γ⋆_g) per subset for kept counts ``kept`` aligned with ``occ``'s pairs."""
    s = np.bincount(occ.pair_grid, weights=kept, minlength=occ.n_subsets).astype(np.int64)
    gmax = np.zeros(occ.n_subsets, np.int64)
    np.maximum.at(gmax, occ.pair_grid, kept)
    return s, gmax
