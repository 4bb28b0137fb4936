"""Method ``oracle``, device half: sampled records through a frequency oracle.

See ``docs/algorithms.md`` ("Frequency oracles") and ``docs/device-protocol.md`` §17.10.
The collector half is ``uldp.collector.methods.oracle``.

For a categorical kind (``distribution``) the user statistic is the frequency vector ``f_i``
of the user's usable records. The device rounds it, without bias, to ``records`` vertices of
the simplex by sampling that many of its records uniformly (without replacement while it
has enough; ``E e_record = f_i``) and privatizes each sampled category with the task's
frequency oracle at ``eps_c``. Every record's report is ``eps_c``-LDP whatever the dataset
(the oracle is ε-LDP between any two categories, and a uniformly sampled record is a
mixture of them), so the report spends ``records · eps_c`` (basic composition).

A user without usable records reports uniformly random categories (a public fallback: its
statistic counts as the uniform distribution in the estimand, ``docs/algorithms.md``).

Draws (one device, ``m_u`` usable records): for ``j = 0 … records − 1`` with ``j < m_u``
one ``belowEach([m_u − j])`` (§3.2) — a partial Fisher–Yates shuffle of the usable records'
indices (record ``j`` takes position ``j + r``, swapped); records ``j >= m_u`` reuse the
shuffled record ``j mod m_u``; with ``m_u = 0``, ``below(A)`` for every record (§3.1, one
call). Then the oracle's draws, record by record.
"""

from __future__ import annotations

import numpy as np

from uldp.client.kinds.base import KINDS, Kind
from uldp.client.methods.base import component_units, oracle_of
from uldp.client.randomness import RandomSource
from uldp.client.taskspec import TaskRefused, TaskSpec
from uldp.client.trace import record_items

__all__ = ["SampledRecords", "sample_records"]


def _shuffle_head(count: np.ndarray, r: int, rng: RandomSource) -> np.ndarray:
    """The first ``r`` positions of each user's partial Fisher–Yates shuffle of
    ``0 … count_i − 1`` (entries beyond ``count_i`` are meaningless)."""
    n = count.size
    head = np.tile(np.arange(r, dtype=np.int64), (n, 1))
    tail_pos = np.full((n, r), -1, dtype=np.int64)  # swapped positions >= r and their value
    tail_val = np.zeros((n, r), dtype=np.int64)
    for j in range(r):
        rows = np.flatnonzero(count > j)
        if not rows.size:
            break
        t = j + rng.below(count[rows] - j)
        cur_j = head[rows, j].copy()
        cur_t = np.empty_like(cur_j)
        near = t < r
        cur_t[near] = head[rows[near], t[near]]
        head[rows[near], t[near]] = cur_j[near]
        far = np.flatnonzero(~near)
        if far.size:
            fr, ft = rows[far], t[far]
            hit = tail_pos[fr] == ft[:, None]
            cur_t[far] = np.where(hit.any(axis=1), (tail_val[fr] * hit).sum(axis=1), ft)
            slot = np.where(hit.any(axis=1), hit.argmax(axis=1), j)
            tail_pos[fr, slot], tail_val[fr, slot] = ft, cur_j[far]
        head[rows, j] = cur_t
    return head


def sample_records(X: np.ndarray, valid: np.ndarray, records: int, categories: int,
                   rng: RandomSource) -> np.ndarray:
    """``(users, records)`` sampled categories (module docstring)."""
    n = X.shape[0]
    count = valid.sum(axis=1).astype(np.int64)
    head = _shuffle_head(count, records, rng)
    j = np.arange(records)[None, :]
    pos = np.where(j < count[:, None], head,
                   np.take_along_axis(head, j % np.maximum(count, 1)[:, None], axis=1))
    items = np.zeros((n, records), dtype=np.int64)
    have = np.flatnonzero(count > 0)
    if have.size:
        cum = np.cumsum(valid[have], axis=1)
        for col in range(records):
            pick = np.argmax(cum > pos[have, col][:, None], axis=1)
            items[have, col] = X[have, pick].astype(np.int64)
    empty = np.flatnonzero(count == 0)
    if empty.size:
        items[empty] = rng.below(categories, size=empty.size * records).reshape(-1, records)
    return items


class SampledRecords:
    """Sampled records through a frequency oracle (module docstring)."""

    name = "oracle"
    stages: tuple[int, ...] = (0,)

    def check(self, task: TaskSpec, n_components: int) -> None:
        kind = KINDS[task.kind]
        if kind.categories is None:
            raise TaskRefused(f"method 'oracle' needs a categorical kind, not {task.kind!r}")
        oracle_of(task)
        if task.bins or task.intervals:
            raise TaskRefused("an oracle task carries neither bins nor intervals")
        if tuple(task.components) != tuple(range(n_components)):
            raise TaskRefused("an oracle task serves every component, in order")

    def report_length(self, task: TaskSpec) -> int:
        A = KINDS[task.kind].categories(task)  # type: ignore[misc]
        return task.records * oracle_of(task).length(A, task.eps_c)

    def epsilon_units(self, task: TaskSpec) -> int:
        return task.records * component_units("eps_c", task.eps_c)

    def report_limit(self, task: TaskSpec) -> int:
        A = KINDS[task.kind].categories(task)  # type: ignore[misc]
        return oracle_of(task).limit(A, task.eps_c)

    def compute(self, task: TaskSpec, kind: Kind, X: np.ndarray, valid: np.ndarray,
                rng: RandomSource, offsets: np.ndarray | None) -> np.ndarray:
        A = kind.categories(task)  # type: ignore[misc]
        oracle = oracle_of(task)
        items = sample_records(X, valid, task.records, A, rng)
        record_items(items)
        parts = [oracle.privatize(items[:, j], A, task.eps_c, rng)
                 for j in range(task.records)]
        return np.concatenate(parts, axis=1)
