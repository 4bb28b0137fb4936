"""In-process run of one MeanEst invocation over users that hold labelled local datasets.

Spec: ``user_level_ldp.md`` §2.2 (round template), §3.7 (assignment), §8.3/§9.3/§10.3
(each learning query is one or several MeanEst invocations), [D10] (unequal ``m_i``).

This is :func:`uldp.collector.simulate.run_query` for labelled data: it runs the production
plan (``compile_query``: assignment, tasks, accumulators, ``k̂``, finalize) and the
production device function ``compute_reports(task, samples, rng, labels=...)``. The only
difference is where the local datasets come from: a :class:`UserSource` hands out the
datasets of given users (real per-user data of unequal sizes, equal-size arrays, or a
synthetic i.i.d. population), in batches of equal sample count because
``compute_reports`` vectorizes over users with the same ``m``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import Plan, QuerySpec, compile_query
from uldp.collector.simulate import Progress, drive_plan

__all__ = ["ArrayUsers", "ListUsers", "SyntheticUsers", "UserSource", "as_source",
           "run_plan", "run_spec"]

CHUNK_CELLS = 1 << 22  # floats materialised per device batch (≈ 32 MiB)

Batch = tuple[np.ndarray, np.ndarray, np.ndarray | None]  # (user indices, X, y)


class UserSource(Protocol):
    """Local datasets of ``n_users`` users; ``batches(idx, cells)`` yields equal-``m``
    batches ``(indices, X (k, m[, d]), y (k, m) or None)`` covering ``idx``."""

    n_users: int
    dim: int

    def batches(self, idx: np.ndarray, users_per_batch: Callable[[int], int]
                ) -> Iterator[Batch]: ...


def _check_xy(X: np.ndarray, y: np.ndarray | None, name: str) -> None:
    if y is not None and y.shape != X.shape[:2]:
        raise ValueError(f"{name}: labels must have shape {X.shape[:2]}, got {y.shape}")


class ArrayUsers:
    """Equal-size datasets: ``X`` ``(n, m)`` or ``(n, m, d)`` and labels ``y`` ``(n, m)``."""

    def __init__(self, X: np.ndarray, y: np.ndarray | None = None) -> None:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim not in (2, 3):
            raise ValueError(f"X must have shape (users, samples[, dim]), got {X.shape}")
        yy = None if y is None else np.asarray(y, dtype=np.float64)
        _check_xy(X, yy, "ArrayUsers")
        self.X, self.y = X, yy
        self.n_users = X.shape[0]
        self.dim = 1 if X.ndim == 2 else X.shape[2]
        self.samples = X.shape[1]

    def batches(self, idx: np.ndarray, users_per_batch: Callable[[int], int]
                ) -> Iterator[Batch]:
        step = users_per_batch(self.samples)
        for s in range(0, idx.size, step):
            sub = idx[s: s + step]
            yield sub, self.X[sub], None if self.y is None else self.y[sub]


class ListUsers:
    """Per-user datasets of possibly unequal sizes: ``[(X_i, y_i), ...]`` ([D10])."""

    def __init__(self, users: Sequence[tuple[Any, Any]] | Sequence[Any]) -> None:
        self.X: list[np.ndarray] = []
        self.y: list[np.ndarray | None] = []
        for i, u in enumerate(users):
            if isinstance(u, tuple):
                xi, yi = u
            else:
                xi, yi = u, None
            xa = np.asarray(xi, dtype=np.float64)
            if xa.ndim == 1:
                xa = xa[:, None]
            if xa.ndim != 2:
                raise ValueError(f"user {i}: X must have shape (m, d), got {xa.shape}")
            ya = None if yi is None else np.asarray(yi, dtype=np.float64).reshape(-1)
            if ya is not None and ya.shape[0] != xa.shape[0]:
                raise ValueError(f"user {i}: {xa.shape[0]} samples but {ya.shape[0]} labels")
            self.X.append(xa)
            self.y.append(ya)
        if not self.X:
            raise ValueError("users must not be empty")
        dims = {x.shape[1] for x in self.X}
        if len(dims) != 1:
            raise ValueError(f"all users must have the same feature dimension, got {dims}")
        if len({y is None for y in self.y}) != 1:
            raise ValueError("either every user has labels or none has")
        self.dim = dims.pop()
        self.n_users = len(self.X)
        self.sizes = np.array([x.shape[0] for x in self.X])

    def batches(self, idx: np.ndarray, users_per_batch: Callable[[int], int]
                ) -> Iterator[Batch]:
        idx = np.asarray(idx)
        for m in np.unique(self.sizes[idx]):
            same = idx[self.sizes[idx] == m]
            step = users_per_batch(int(m))
            for s in range(0, same.size, step):
                sub = same[s: s + step]
                X = np.stack([self.X[i] for i in sub])
                y = None if self.y[0] is None else np.stack([self.y[i] for i in sub])
                yield sub, X, y


class SyntheticUsers:
    """An i.i.d. population: ``draw(k)`` returns ``(X (k, m, d), y (k, m))`` fresh users."""

    def __init__(self, n_users: int, samples: int, dim: int,
                 draw: Callable[[int], tuple[np.ndarray, np.ndarray | None]]) -> None:
        self.n_users, self.samples, self.dim, self.draw = int(n_users), int(samples), dim, draw

    def batches(self, idx: np.ndarray, users_per_batch: Callable[[int], int]
                ) -> Iterator[Batch]:
        step = users_per_batch(self.samples)
        for s in range(0, idx.size, step):
            sub = idx[s: s + step]
            X, y = self.draw(sub.size)
            yield sub, X, y


def as_source(users: Any, labels: Any = None) -> UserSource:
    """Arrays ``(n, m, d)`` + ``(n, m)``, a list of ``(X_i, y_i)``, or a source itself."""
    if hasattr(users, "batches") and hasattr(users, "n_users"):
        return users
    if isinstance(users, np.ndarray):
        return ArrayUsers(users, labels)
    if labels is not None:
        return ArrayUsers(np.asarray(users), labels)
    return ListUsers(users)


def _users_per_batch(plan: Plan) -> Callable[[int], int]:
    per_sample = plan.spec.method == "baseline-a" or plan.kind.user_stats is None
    width = (plan.n_components if per_sample else 0) + plan.spec.dim + 1

    def fn(m: int) -> int:
        return max(1, CHUNK_CELLS // max(1, m * width))
    return fn


class _Slots:
    """Enrolment slot of each user of this invocation (slot ``r`` is ``members[r]``)."""

    def __init__(self, members: np.ndarray) -> None:
        self.order = np.argsort(members, kind="stable")
        self.sorted = members[self.order]

    def __call__(self, users: np.ndarray) -> np.ndarray:
        return self.order[np.searchsorted(self.sorted, users)]


def _stage(plan: Plan, source: UserSource, users: np.ndarray, task_of: Callable[[], Any],
           acc: Any, rng: RandomSource, progress: Progress | None, slots: _Slots) -> None:
    needs_labels = plan.kind.uses_labels
    for sub, X, y in source.batches(users, _users_per_batch(plan)):
        if not plan.kind.vector and X.ndim == 3:  # scalar kinds take (users, m)
            if X.shape[2] != 1:
                raise ValueError(f"kind {plan.spec.kind!r} needs scalar samples, got "
                                 f"{X.shape[2]} features")
            X = X[..., 0]
        if needs_labels and y is None:
            y = np.zeros(X.shape[:2])  # label-free models (e.g. quadratic loss) ignore it
        lab = y if needs_labels else None
        if plan.spec.method == "baseline-a":
            offs = plan.offset_for(slots(sub))
            acc.add(compute_reports(task_of(), X, rng, labels=lab, offsets=offs), offs)
        else:
            acc.add(compute_reports(task_of(), X, rng, labels=lab))
        if progress:
            progress.update(sub.size)


def run_plan(plan: Plan, source: UserSource, members: np.ndarray, rng: RandomSource,
             progress: Progress | None = None) -> Estimate:
    """Run ``plan`` over the users ``members`` (slot ``r`` is user ``members[r]``)."""
    members = np.asarray(members, dtype=np.int64)
    if members.size != plan.spec.users:
        raise ValueError(f"the plan is for {plan.spec.users} users, got {members.size}")
    if np.unique(members).size != members.size:
        raise ValueError("members must be distinct users")
    slots = _Slots(members)
    return drive_plan(plan, lambda mask, task_of, acc: _stage(
        plan, source, members[mask], task_of, acc, rng, progress, slots))


def run_spec(spec: QuerySpec, source: UserSource, members: np.ndarray | None,
             rng: RandomSource, progress: Progress | None = None) -> tuple[Plan, Estimate]:
    """Compile ``spec`` and run it (``members=None``: users ``0..spec.users-1``)."""
    plan = compile_query(spec)
    mem = np.arange(spec.users) if members is None else np.asarray(members)
    return plan, run_plan(plan, source, mem, rng, progress)
