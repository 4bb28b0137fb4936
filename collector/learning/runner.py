"""In-process run of one MeanEst invocation over users that hold labelled local datasets.

Sections of ``docs/algorithms.md``: §2.2 (round template), §3.7 (assignment), §8.3/§9.3/§10.3
(each learning query is one or several MeanEst invocations), [D10] (unequal ``m_i``).

A :class:`UserSource` hands out the local datasets of given users (real per-user data of
unequal sizes, equal-size arrays, or a synthetic i.i.d. population) in batches of equal
sample count (``compute_reports`` vectorizes over users with the same ``m``);
:func:`source_privatizer` turns it into the ``privatize`` step of the one simulation
driver (``uldp.collector.programs.driver``), which runs the production program (tasks,
accumulators, what each phase publishes) and the production device function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from uldp.client.kinds import KINDS
from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import Accumulator
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import QuerySpec
from uldp.collector.programs import program_for
from uldp.collector.programs.driver import Privatize, run_program
from uldp.collector.progress import Progress

__all__ = ["ArrayUsers", "ListUsers", "PaddedUsers", "SyntheticUsers", "UserSource",
           "as_source",
           "run_source", "run_spec", "source_privatizer"]

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


class PaddedUsers:
    """Per-user arrays of unequal sizes in few batches: users are bucketed by the next
    power of two of their count and padded with NaN, which the device function treats as
    missing values (the sanitizing rules of docs/privacy.md), so every user's report is
    exactly what it would be alone. ``values[i]``: ``(m_i,)`` or ``(m_i, d)``."""

    def __init__(self, values: Sequence[Any], labels: Sequence[Any] | None = None) -> None:
        xs = [np.asarray(v, dtype=np.float64) for v in values]
        self.X = [x[:, None] if x.ndim == 1 else x for x in xs]
        self.y = None if labels is None else [np.asarray(v, dtype=np.float64) for v in labels]
        if not self.X:
            raise ValueError("users must not be empty")
        self.dim = self.X[0].shape[1]
        self.n_users = len(self.X)
        self.sizes = np.array([x.shape[0] for x in self.X])
        self.bucket = np.array([1 << max(int(m) - 1, 0).bit_length() for m in self.sizes])

    def batches(self, idx: np.ndarray, users_per_batch: Callable[[int], int]
                ) -> Iterator[Batch]:
        idx = np.asarray(idx)
        for b in np.unique(self.bucket[idx]):
            same = idx[self.bucket[idx] == b]
            step = users_per_batch(int(b))
            for s in range(0, same.size, step):
                sub = same[s: s + step]
                X = np.full((sub.size, int(b), self.dim), np.nan)
                y = None if self.y is None else np.full((sub.size, int(b)), np.nan)
                for r, i in enumerate(sub):
                    X[r, : self.sizes[i]] = self.X[i]
                    if y is not None and self.y is not None:
                        y[r, : self.sizes[i]] = self.y[i]
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


def _users_per_batch(task: TaskSpec) -> Callable[[int], int]:
    kind = KINDS[task.kind]
    per_sample = bool(task.virtual_groups) or kind.user_stats is None  # per-sample maps
    width = (kind.n_components(task) if per_sample else 0) + task.dim + 1

    def fn(m: int) -> int:
        return max(1, CHUNK_CELLS // max(1, m * width))
    return fn


def source_privatizer(source: UserSource, members: np.ndarray, rng: RandomSource,
                      progress: Progress | None = None) -> Privatize:
    """The driver's ``privatize`` step over ``source``: enrolment slot ``r`` is user
    ``members[r]``; each batch of that slot's users computes its reports on the device
    function and adds them with their slots."""
    members = np.asarray(members, dtype=np.int64)
    order = np.argsort(members, kind="stable")
    by_user = members[order]

    def privatize(slots: np.ndarray, task: TaskSpec, offsets: np.ndarray | None,
                  acc: Accumulator) -> None:
        kind = KINDS[task.kind]
        for sub, X, y in source.batches(members[slots], _users_per_batch(task)):
            if not kind.vector and X.ndim == 3:  # scalar kinds take (users, m)
                if X.shape[2] != 1:
                    raise ValueError(f"kind {task.kind!r} needs scalar samples, got "
                                     f"{X.shape[2]} features")
                X = X[..., 0]
            if kind.uses_labels and y is None:
                y = np.zeros(X.shape[:2])  # label-free models (quadratic loss) ignore it
            sl = order[np.searchsorted(by_user, sub)]
            offs = None if offsets is None else offsets[np.searchsorted(slots, sl)]
            reports = compute_reports(task, X, rng, labels=y if kind.uses_labels else None,
                                      offsets=offs)
            acc.add(reports, sl)
            if progress:
                progress.update(sub.size)
    return privatize


def run_source(spec: QuerySpec, source: UserSource, members: np.ndarray | None,
               rng: RandomSource, progress: Progress | None = None) -> dict[str, Any]:
    """Run the program of ``spec`` over ``source`` (``members[r]`` is the user in slot
    ``r``; None: users ``0..spec.users-1``); returns the program's result."""
    mem = np.arange(spec.users) if members is None else np.asarray(members, dtype=np.int64)
    if mem.size != spec.users:
        raise ValueError(f"the query is for {spec.users} users, got {mem.size}")
    if np.unique(mem).size != mem.size:
        raise ValueError("members must be distinct users")
    program = program_for(spec)
    return run_program(program, source_privatizer(source, mem, rng, progress))


def run_spec(spec: QuerySpec, source: UserSource, members: np.ndarray | None,
             rng: RandomSource, progress: Progress | None = None) -> Estimate:
    """A mean-kind query over ``source``: its :class:`Estimate`."""
    return Estimate.from_dict(run_source(spec, source, members, rng, progress))
