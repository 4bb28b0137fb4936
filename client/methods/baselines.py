"""The baselines of spec §12, device half: one sample per user (B) and item-level reports
of ``m_ref`` samples at ε/m each (A). SSL — the user mean with single-stage Laplace noise —
is :class:`uldp.client.methods.two_stage.UserValues`.

See ``docs/algorithms.md`` ("Baselines"). The collector half is
``uldp.collector.methods.baselines``; both use :func:`slot_layout`, the one definition of
the baseline-A report layout.
"""

from __future__ import annotations

import numpy as np

from uldp.client.kinds.base import Kind
from uldp.client.mechanisms.two_stage import stage2_reports
from uldp.client.methods.base import (
    check_intervals,
    component_units,
    intervals,
    laplace_only,
    single_record,
    values_limit,
)
from uldp.client.methods.two_stage import UserValues
from uldp.client.randomness import RandomSource
from uldp.client.taskspec import TaskRefused, TaskSpec

__all__ = ["BaselineA", "BaselineB", "SlotLayout", "slot_layout", "slot_sources"]


# ---- baseline B: one sample of the user's own choice ------------------------------------
def _pick_one(X: np.ndarray, valid: np.ndarray, rng: RandomSource,
              ) -> tuple[np.ndarray, np.ndarray]:
    """Each user's uniform choice of one valid sample (none if it has none): the ``r``-th
    valid sample, ``r`` uniform below the user's count (``rng.below`` per user)."""
    n, m = X.shape[:2]
    if m == 0:
        return X[:, :0], valid[:, :0]
    count = valid.sum(axis=1)
    r = rng.below(np.maximum(count, 1))
    pick = np.argmax(np.cumsum(valid, axis=1) > r[:, None], axis=1)
    rows = np.arange(n)
    return X[rows, pick][:, None], (valid[rows, pick] & (count > 0))[:, None]


class BaselineB(UserValues):
    """Baseline B: the statistic of one uniformly chosen sample, single-stage values."""

    name = "baseline-b"

    def statistics(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                   rng: RandomSource) -> np.ndarray:
        X1, v1 = _pick_one(X, valid, rng)
        return kind.statistics(task, X1, v1)[:, list(task.components)]


# ---- baseline A: m_ref item-level reports -----------------------------------------------
class SlotLayout:
    """Where each of the ``m_ref`` slots of a baseline-A report sits.

    Slot ``j`` of a device with virtual offset ``o`` serves virtual group
    ``g = (o + j) mod G``; its ``len(groups[g])`` values start at ``pos[j]`` =
    the sum of the lengths of the earlier slots' groups.
    """

    def __init__(self, task: TaskSpec, offsets: np.ndarray) -> None:
        G = len(task.virtual_groups)
        self.lens = np.array([len(g) for g in task.virtual_groups], dtype=np.int64)
        self.group = (np.asarray(offsets, dtype=np.int64)[:, None]
                      + np.arange(task.m_ref)[None, :]) % G  # (devices, m_ref)
        self.pos = np.cumsum(self.lens[self.group], axis=1) - self.lens[self.group]
        self.total = self.lens[self.group].sum(axis=1)

    def columns(self, g: int, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Report columns of virtual group ``g``'s values for the given (row, slot) pairs."""
        return self.pos[rows, slots][:, None] + np.arange(self.lens[g])[None, :]


def slot_layout(task: TaskSpec, offsets: np.ndarray) -> SlotLayout:
    return SlotLayout(task, offsets)


def slot_sources(valid: np.ndarray, m_ref: int, rng: RandomSource,
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Which sample fills each of the ``m_ref`` report slots of every user.

    With ``m_i`` valid samples: if ``m_i > m_ref``, a uniformly random subset of
    ``m_ref`` of them ([D10]; the samples with the ``m_ref`` smallest random 64-bit
    keys), in index order; otherwise slot ``j`` takes the ``(j mod m_i)``-th valid sample
    in index order (samples are reused in turn when there are fewer than ``m_ref``); a
    user without valid samples fills every slot with the zero value. Returns the source
    index of every slot and whether the slot is filled.
    """
    n, m = valid.shape
    count = valid.sum(axis=1)
    if m == 0:
        return np.zeros((n, m_ref), dtype=np.int64), np.zeros((n, m_ref), dtype=bool)
    in_order = np.argsort(~valid, axis=1, kind="stable")  # valid samples first, in order
    pos = np.arange(m_ref)[None, :] % np.maximum(count, 1)[:, None]
    src = np.take_along_axis(in_order, pos, axis=1)
    more = count > m_ref
    if more.any():
        rows = np.flatnonzero(more)
        keys = rng.words(rows.size * m).reshape(rows.size, m)
        keys = np.where(valid[rows], keys, np.uint64(np.iinfo(np.uint64).max))
        subset = np.argsort(keys, axis=1, kind="stable")[:, :m_ref]
        src[rows] = np.sort(subset, axis=1)
    return src, np.broadcast_to((count > 0)[:, None], (n, m_ref))


class BaselineA:
    """Baseline A: ``m_ref`` slots, each one sample's per-sample statistic on the
    components of its virtual group at that group's item-level ε (group privacy)."""

    name = "baseline-a"
    stages: tuple[int, ...] = (0,)

    def check(self, task: TaskSpec, n_components: int) -> None:
        if not task.virtual_groups or len(task.virtual_eps) != len(task.virtual_groups):
            raise TaskRefused("baseline-a needs virtual_groups with one virtual_eps each")
        served = set(task.components)
        for g in task.virtual_groups:
            if not g or len(set(g)) != len(g) or not set(g) <= served:
                raise TaskRefused("each virtual group is a non-empty set of served components")
        if task.m_ref > 1 << 20:
            raise TaskRefused(f"m_ref must be at most 2^20, got {task.m_ref}", code="limit")
        single_record(task)
        laplace_only(task)
        check_intervals(task)

    def _interval_of(self, task: TaskSpec) -> dict[int, tuple[float, float]]:
        return dict(zip(task.components, intervals(task), strict=True))

    def report_length(self, task: TaskSpec) -> int:
        lens = [len(g) for g in task.virtual_groups]
        full, rest = divmod(task.m_ref, len(lens))
        return full * sum(lens) + sum(lens[(task.virtual_offset + j) % len(lens)]
                                      for j in range(rest))

    def epsilon_units(self, task: TaskSpec) -> int:
        per = [len(g) * component_units("virtual_eps", e)
               for g, e in zip(task.virtual_groups, task.virtual_eps, strict=True)]
        full, rest = divmod(task.m_ref, len(per))
        return full * sum(per) + sum(per[(task.virtual_offset + j) % len(per)]
                                     for j in range(rest))

    def report_limit(self, task: TaskSpec) -> int:
        return values_limit(min(task.virtual_eps))

    def compute(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                rng: RandomSource, offsets: np.ndarray | None) -> np.ndarray:
        n, m = X.shape[0], task.m_ref
        src, filled = slot_sources(valid, m, rng)
        extra = (1,) * (X.ndim - 2)
        Xs = (np.take_along_axis(X, src.reshape(src.shape + extra), axis=1) if X.shape[1]
              else np.zeros((n, m) + X.shape[2:]))
        Xs = np.where(filled.reshape(filled.shape + extra), Xs, 0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            phi = kind.sample_map(task, Xs.reshape((n * m,) + Xs.shape[2:])).reshape(n, m, -1)
        phi = np.where(filled[..., None], np.nan_to_num(phi, nan=0.0), 0.0)
        if task.stat_bound is not None:
            phi = np.clip(phi, -task.stat_bound, task.stat_bound)
        G = len(task.virtual_groups)  # the offset only matters mod G (it may exceed 2^63)
        offs = (np.full(n, task.virtual_offset % G, dtype=np.int64) if offsets is None
                else np.asarray(offsets, dtype=np.int64))
        lay = slot_layout(task, offs)
        out = np.zeros((n, int(lay.total.max())), dtype=np.int64)
        iv = self._interval_of(task)
        for g, comps in enumerate(task.virtual_groups):
            ii, jj = np.nonzero(lay.group == g)
            if ii.size == 0:
                continue
            vals = phi[ii, jj][:, list(comps)]
            enc = stage2_reports(vals, [iv[c] for c in comps], task.virtual_eps[g], rng)
            out[ii[:, None], lay.columns(g, ii, jj)] = enc
        return out
