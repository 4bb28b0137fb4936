"""Grouped means (group-by with private membership), device half: kind ``mean-by``.

See ``docs/device-protocol.md`` §12.3 and ``docs/analyst.md`` ("Group-by"). A query over a
value dataset (e.g. ``steps``) grouped by a categorical dataset of the same device (e.g.
``country``, codes ``0 .. G−1``; the task names it in ``by``) asks every device for **one**
report that covers all G groups, so the report's length, layout and ε never depend on the
device's group: the statistic has ``2G`` components, for each group ``g``

* ``Y[2g] = 1{group = g} − 1/2`` (the membership indicator, centred on ``[-1/2, 1/2]``),
* ``Y[2g+1] = 1{group = g} · ȳ`` (the user's mean of its values centred on the range and
  clamped, ``ȳ = mean clip(x − c, −D, D)``, and 0 in every other group),

which the ordinary value mechanisms (method ``ssl``) privatize component by component: a
device in group A and the same device in group B differ in at most four components, each
within its public bound, so the report is ε-LDP whatever the group — membership is never
sent in the clear. The collector estimates each group's share ``p_g`` and ``p_g·(μ_g − c)``
and their ratio (``uldp.collector.methods.grouped``).

Samples are rows ``(value, group code)``: a device fills the code of every row with its
group, :func:`group_of` of its categorical dataset (the most frequent usable code, ties to
the smallest; no usable code: no group). A row is usable when its value is finite and its
code an integer in ``[0, G)``. The user's group is the most frequent code of its usable rows
(ties to the smallest) and ``ȳ`` the mean over the usable rows of that group; a user without
a usable row is in no group (every indicator −1/2, every value 0).
"""

from __future__ import annotations

import numpy as np

from uldp.client.kinds.base import (
    Kind,
    centre,
    masked_mean,
    register_kind,
    value_range,
)
from uldp.client.taskspec import TaskRefused, TaskSpec

__all__ = ["MAX_GROUPS", "group_of", "grouped_transform"]

#: groups a task may have (2·G components)
MAX_GROUPS = 1 << 10


def group_of(categories: np.ndarray | list[float], G: int) -> float:
    """A device's group from its categorical dataset: the most frequent usable code (an
    integer in ``[0, G)``; ties to the smallest), or NaN when it has none — protocol
    §12.3, the same rule in every SDK."""
    x = np.asarray(categories, dtype=np.float64).ravel()
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(x) & (x == np.floor(x)) & (x >= 0) & (x < G)
    if not ok.any():
        return float("nan")
    counts = np.bincount(x[ok].astype(np.int64), minlength=G)
    return float(int(np.argmax(counts)))


def _groups(task: TaskSpec) -> int:
    G = int(task.dim)
    if not 2 <= G <= MAX_GROUPS:
        raise TaskRefused(f"a grouped mean needs 2 to {MAX_GROUPS} groups (dim), got {G}",
                          code="limit" if G > MAX_GROUPS else "param")
    if not isinstance(task.by, str) or not task.by:
        raise TaskRefused("a grouped mean names its categorical dataset in by")
    if task.bound is None:
        raise TaskRefused("a grouped mean needs bound")
    return G


def _valid_code(task: TaskSpec, X: np.ndarray) -> np.ndarray:
    lab = X[..., 1]
    return (lab == np.floor(lab)) & (lab >= 0) & (lab < task.dim)


def _user_stats(task: TaskSpec, X: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``(users, 2G)`` from rows ``(value, code)`` (unusable rows zeroed by the caller)."""
    G = int(task.dim)
    n, m = X.shape[:2]
    codes = np.where(valid, X[..., 1], -1.0).astype(np.int64) if m else np.zeros((n, 0),
                                                                                   np.int64)
    counts = np.zeros((n, G), dtype=np.int64)
    for g in range(G):
        counts[:, g] = (codes == g).sum(axis=1)
    has = counts.max(axis=1, initial=0) > 0
    group = np.argmax(counts, axis=1) if G else np.zeros(n, np.int64)
    member = valid & (codes == group[:, None])
    x = X[..., 0]
    c = centre(task)
    if c != 0.0:
        with np.errstate(over="ignore"):
            x = x - c
    D = float(task.bound)  # type: ignore[arg-type]
    ybar = masked_mean(np.clip(x, -D, D), member) if m else np.zeros(n)
    Y = np.zeros((n, 2 * G))
    Y[:, 0::2] = -0.5
    rows = np.nonzero(has)[0]
    Y[rows, 2 * group[rows]] = 0.5
    Y[rows, 2 * group[rows] + 1] = ybar[rows]
    return Y


def _sample_map(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    """φ of single rows (the one-sample statistic; the kind runs with method ssl only)."""
    X = x.reshape(-1, 1, 2)
    valid = np.isfinite(X).all(axis=2) & _valid_code(task, np.where(np.isfinite(X), X, 0.0))
    return _user_stats(task, np.where(valid[..., None], X, 0.0), valid)


def grouped_transform(task: TaskSpec, n_components: int) -> np.ndarray:
    """The linear outputs a plan predicts with (users split evenly over the G groups):
    group ``g``'s mean ``≈ G·Y[2g+1]`` (+ c) and its share ``Y[2g]`` (+ 1/2). The estimate
    itself is the ratio ``p_g·(μ_g − c) / p_g`` (``uldp.collector.methods.grouped``)."""
    G = n_components // 2
    T = np.zeros((2 * G, 2 * G))
    for g in range(G):
        T[g, 2 * g + 1] = G
        T[G + g, 2 * g] = 1.0
    return T


def _bounds(task: TaskSpec) -> np.ndarray:
    G = _groups(task)
    b = np.empty(2 * G)
    b[0::2] = 0.5
    b[1::2] = float(task.bound)  # type: ignore[arg-type]
    return b


def _clamped(task: TaskSpec, x: np.ndarray) -> int:
    if x.size == 0 or task.bound is None:
        return 0
    lo, hi = value_range(task)  # type: ignore[misc]
    v = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero(np.isfinite(v) & ((v < lo) | (v > hi))))


register_kind(Kind(
    name="mean-by", vector=False,
    n_components=lambda t: 2 * _groups(t),
    sample_map=_sample_map,
    user_stats=_user_stats,
    bounds=_bounds,
    uses_labels=True,
    valid_value=_valid_code,
    transform=grouped_transform,
    output_range=value_range,
    ranged=True,
    clamped=_clamped,
    methods=("ssl",),
    grouped=True,
))
