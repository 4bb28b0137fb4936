"""Per-user grouping of warehouse rows for the central estimators.

See ``docs/central.md`` (the privacy unit is the user: all of one user's rows).

The core API is data-frame free: numpy arrays ``user_ids`` (any hashable dtype),
``values`` (shape ``(N,)`` or ``(N, d)``) and optionally ``subsets`` (one label per row).
``group_by_user`` validates them (naming the bad argument) and returns each user's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class UserGroups:
    """Rows grouped by user: user ``u`` owns ``values[offsets[u]:offsets[u+1]]``."""

    users: np.ndarray  # unique user ids, sorted
    offsets: np.ndarray  # int64, len(users) + 1
    values: np.ndarray  # rows reordered so each user's rows are contiguous
    subsets: np.ndarray | None

    @property
    def n_users(self) -> int:
        return int(self.users.size)

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def user_values(self, u: int) -> np.ndarray:
        return self.values[self.offsets[u] : self.offsets[u + 1]]

    def user_means(self) -> np.ndarray:
        """Per-user sample means, shape (n,) or (n, d)."""
        sums = np.add.reduceat(self.values, self.offsets[:-1], axis=0)
        c = self.counts
        return sums / (c[:, None] if sums.ndim == 2 else c)


def group_by_user(user_ids: np.ndarray, values: np.ndarray,
                  subsets: np.ndarray | None = None) -> UserGroups:
    """Validate ``(user_ids, values[, subsets])`` and group rows by user."""
    user_ids = np.asarray(user_ids)
    try:
        values = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"values must be numeric: {exc}") from None
    if user_ids.ndim != 1:
        raise ValueError(f"user_ids must be one-dimensional, got shape {user_ids.shape}")
    if values.ndim not in (1, 2):
        raise ValueError(f"values must have shape (N,) or (N, d), got {values.shape}")
    if values.shape[0] != user_ids.shape[0]:
        raise ValueError(
            f"user_ids and values must have the same length ({user_ids.shape[0]} != "
            f"{values.shape[0]})"
        )
    if values.shape[0] == 0:
        raise ValueError("values is empty: no user contributed a record")
    if not np.isfinite(values).all():
        bad = int(np.argmax(~np.isfinite(values).reshape(values.shape[0], -1).all(axis=1)))
        raise ValueError(f"values contains NaN or infinity (first at row {bad})")
    if subsets is not None:
        subsets = np.asarray(subsets)
        if subsets.shape != user_ids.shape:
            raise ValueError(
                f"subsets must have one label per row, got shape {subsets.shape} for "
                f"{user_ids.shape[0]} rows"
            )
    order = np.argsort(user_ids, kind="stable")
    sorted_ids = user_ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    offsets = np.r_[starts, sorted_ids.size].astype(np.int64)
    return UserGroups(
        users=sorted_ids[starts],
        offsets=offsets,
        values=values[order],
        subsets=None if subsets is None else subsets[order],
    )
