"""Bring your own per-user data: run a query's real device and collector code over it.

See ``docs/algorithms.md`` ("Estimates") and the README ("Check a method on your own
data"). :func:`run_users` takes one array of values per user (skewed counts, empty users,
anything), runs the query's program through the simulation driver with the production
device function, and returns the estimate next to the **same estimand** computed without
privacy from the same users: the mean over users of each user's statistic (for a mean, the
mean of user means; a user without usable samples counts with the zero statistic, [D10]),
mapped through the kind's output transform. :func:`read_user_csv` reads such data from a
CSV file (``uldp simulate KIND --data FILE.csv ...``).

The predicted error and the intervals treat the users as a sample from a larger population,
which is what a deployed query estimates; for the mean of exactly these users they are
slightly conservative (by the users' own variance over n, which matters only at large ε).

Mean kinds need the public range ``[lo, hi]`` of a value. It goes into the query exactly
as a deployed query states it (``QuerySpec(lo=, hi=)``: devices centre their values on it
and clamp them into it, the collector adds the centre back), so the check runs the very
plan, tasks and intervals a real query with that range gets. A range taken from the data
themselves is fine for checking a method, never in a deployment.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import _attach_labels
from uldp.collector.csvdata import read_csv_columns
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.learning.runner import PaddedUsers, run_spec
from uldp.collector.planner import QuerySpec, compile_query, with_best_mechanisms
from uldp.collector.simulation.simulate import simulate_json

__all__ = ["UserData", "UserDataRun", "read_user_csv", "reference_count", "run_users"]

#: kinds whose values are real numbers on a public range ``[lo, hi]``
CENTRED = ("mean", "mean-linf")


@dataclass
class UserData:
    """Per-user arrays: ``values[i]`` is ``(m_i,)`` or ``(m_i, d)``; ``labels[i]`` ``(m_i,)``."""

    values: list[np.ndarray]
    labels: list[np.ndarray] | None = None
    categories: list[str] = field(default_factory=list)  # distribution: value -> label

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(v) for v in self.values], dtype=np.int64)


@dataclass
class UserDataRun:
    """An estimate on one's own data next to the same estimand without privacy."""

    kind: str
    method: str  # the method that ran (``auto`` resolved)
    epsilon: float
    users: int
    m_ref: int
    estimate: Estimate
    truth: np.ndarray
    predicted_mse: float | None
    estimand: str
    range: tuple[float, float] | None
    auto: dict[str, Any] | None = None
    reps: int = 1
    sq_errors: list[float] = field(default_factory=list)  # ‖estimate − truth‖² per rep
    coverage: float = math.nan  # share of the reps' coordinate intervals holding the truth
    advisories: list[str] = field(default_factory=list)  # the plan's notes (planner.Plan)
    seconds: float = 0.0  # wall time of the runs

    @property
    def error(self) -> float:
        """ℓ2 distance of the (last rep's) estimate from the truth."""
        return float(np.linalg.norm(self.estimate.values - self.truth))

    @property
    def rmse(self) -> float:
        """Root of the mean over reps of the squared ℓ2 error."""
        return math.sqrt(float(np.mean(self.sq_errors))) if self.sq_errors else self.error

    @property
    def covered(self) -> np.ndarray:
        return self.estimate.covers(self.truth)

    def to_dict(self) -> dict[str, Any]:
        """The ``uldp simulate --data --json`` object: the schema of every ``uldp simulate
        --json`` (:data:`uldp.collector.simulation.simulate.SIMULATE_JSON_KEYS`; ``samples`` is
        m_ref)."""
        e = self.estimate
        return simulate_json(
            kind=self.kind, method=self.method, mechanisms=e.extra.get("mechanisms"),
            estimand=self.estimand, epsilon=self.epsilon,
            users=self.users, samples=self.m_ref, dim=int(self.truth.size), reps=self.reps,
            estimate=e.values.tolist(), truth=self.truth.tolist(), ci_low=e.ci_low.tolist(),
            ci_high=e.ci_high.tolist(), std_error=e.std_error.tolist(), mse=self.rmse**2,
            rmse=self.rmse, predicted_mse=self.predicted_mse, coverage=self.coverage,
            regime=e.extra.get("regime"), auto=self.auto, advisories=self.advisories,
            range=list(self.range) if self.range else None, seconds=self.seconds)


def _estimand(kind: str) -> str:
    if kind in CENTRED:
        return "mean over users of each user's mean (a user without values counts as the " \
               "centre of the range)"
    if kind == "distribution":
        return "mean over users of each user's category frequencies"
    return "mean over users of each user's statistic, through the kind's output transform"


def _exact(plan: Any, source: PaddedUsers, n: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Over users, without privacy: the mean and the variance of the user statistics, and
    the variance of one uniformly chosen sample of a uniformly chosen user (the one-sample
    baselines' statistic: mean within-user variance plus the variance of the user means);
    and the statistics themselves (``(n, C)``)."""
    kind, task = plan.kind, plan.template
    C = plan.n_components
    stats, within, means = np.zeros((n, C)), np.zeros((n, C)), np.zeros((n, C))
    for sub, X, y in source.batches(np.arange(n), lambda m: max(1, 2**20 // max(m * C, 1))):
        if not kind.vector and X.ndim == 3:
            X = X[..., 0]
        if kind.uses_labels:
            X = _attach_labels(X, y)
        valid = kind.valid_samples(task, X)
        stats[sub] = kind.statistics(task, X, valid)
        k, m = X.shape[:2]
        flat = np.where(valid.reshape(valid.shape + (1,) * (X.ndim - 2)), X, 0.0)
        phi = kind.sample_map(task, flat.reshape((k * m,) + X.shape[2:])).reshape(k, m, C)
        w = valid[..., None] / np.maximum(valid.sum(axis=1), 1)[:, None, None]
        mu = (phi * w).sum(axis=1)
        means[sub], within[sub] = mu, ((phi - mu[:, None]) ** 2 * w).sum(axis=1)
    return (stats.mean(axis=0), stats.var(axis=0), within.mean(axis=0) + means.var(axis=0),
            stats)


def reference_count(counts: np.ndarray, samples: int | None, assume: str = "none"
                    ) -> tuple[int, str | None]:
    """The public reference count ``m_ref`` of an own-data run and a note when it is more
    than some users hold under an assumption that counts on it.

    Without an assumption ``m_ref`` only sizes the plan (grids, windows); the intervals hold
    for every population, so the default is the median count (the typical user). Under
    ``assume="users-alike"`` the bias bounds count on every user holding at least ``m``
    records (``docs/mechanisms.md``, "What an assumption buys": a user with fewer
    concentrates less), so the default is the *least* count (at least 1), and an explicit
    ``samples`` above it is run as given with a note naming how many users hold fewer."""
    counts = np.asarray(counts, dtype=np.int64)
    alike = assume == "users-alike"
    if samples:
        m_ref = int(samples)
    elif alike:
        m_ref = max(int(counts.min()) if counts.size else 1, 1)
    else:
        m_ref = max(int(np.median(counts)), 1)
    fewer = int(np.sum(counts < m_ref))
    note = None
    if alike and fewer:
        note = (f"assume=users-alike counts on m_ref={m_ref} records per user, but "
                f"{fewer} of {counts.size} users hold fewer: their statistics concentrate "
                "less and the interval may not hold (default: the least count)")
    return m_ref, note


def run_users(kind: str, data: UserData, *, epsilon: float, lo: float | None = None,
              hi: float | None = None, method: str = "auto", samples: int | None = None,
              dim: int | None = None, seed: int = 0, extra: dict[str, Any] | None = None,
              reps: int = 1, options: dict[str, Any] | None = None) -> UserDataRun:
    """Run ``kind`` over the users of ``data`` (module docstring); ``samples`` is the
    public reference count m_ref (default: :func:`reference_count` — the median count, the
    least under ``assume="users-alike"``). With ``reps`` > 1 the
    query runs that many times with fresh noise (seeds ``seed``, ``seed + 1``, ...) and
    the result carries the RMSE and the interval coverage over the reps. Each rep draws
    its own assignment of users to groups and stages, as separate queries would.
    ``options``: more query fields (``oracle``, ``randomizer``, ``records``, ``mode``, …)."""
    if reps < 1:
        raise ValueError("reps must be at least 1")
    n = len(data.values)
    if n < 2:
        raise ValueError("need at least 2 users")
    m_ref, m_note = reference_count(data.counts, samples,
                                    str(dict(options or {}).get("assume", "none")))
    arrays = [np.asarray(v, dtype=np.float64) for v in data.values]
    shaped = next((a for a in arrays if a.size), arrays[0])
    d = dim or (shaped.shape[1] if shaped.ndim == 2 else 1)
    width = shaped.shape[1] if shaped.ndim == 2 else 1  # columns per row (not the alphabet)
    ranged: dict[str, Any] = {}
    rng_ = None
    if kind in CENTRED:
        if lo is None or hi is None or not hi > lo:
            raise ValueError("mean kinds need the public range of a value: lo < hi")
        ranged, rng_ = {"lo": float(lo), "hi": float(hi)}, (float(lo), float(hi))
    users = PaddedUsers([a.reshape(len(a), width) for a in arrays], data.labels)
    # a named method runs with the best mechanisms unless ``options`` names them
    spec = QuerySpec(**with_best_mechanisms(dict(
        kind=kind, epsilon=epsilon, users=n, samples=m_ref, dim=d, method=method, seed=seed,
        query_id="own-data", extra=dict(extra or {}), **ranged, **dict(options or {}))))
    plan = compile_query(spec)
    t0 = time.perf_counter()
    # rep r: a fresh public assignment of users to groups and stages *and* fresh noise
    runs = [run_spec(replace(spec, seed=seed + r), users, None,
                     RandomSource.seeded(f"own-data:{seed + r}")) for r in range(reps)]
    theta, stat_var, sample_var, stats = _exact(plan, users, n)
    T = plan.kind.transform(plan.template, plan.n_components)
    truth = np.asarray(theta if T is None else T @ theta) + plan.kind.offset(plan.template)
    sq = [float(np.sum((e.values - truth) ** 2)) for e in runs]
    cover = float(np.mean([e.covers(truth) for e in runs]))
    return UserDataRun(kind, plan.spec.method, epsilon, n, m_ref, runs[-1], truth,
                       _predicted(plan, sample_var, stat_var, theta, stats),
                       _estimand(kind), rng_,
                       dict(plan.auto) or None, reps, sq, cover,
                       list(plan.advisories) + ([m_note] if m_note else []),
                       time.perf_counter() - t0)


def _predicted(plan: Any, sample_var: np.ndarray, stat_var: np.ndarray, theta: np.ndarray,
               stats: np.ndarray) -> float:
    """The predicted MSE with these users: for a method that sizes its stage II from stage I
    (``two-stage-sized``), its rule run on their actual statistics (a skewed minority
    is not a normal law of their mean and variance); otherwise the formula with their
    statistics' mean and variance."""
    predict = getattr(plan.method, "predict", None)
    T = plan.kind.transform(plan.template, plan.n_components)
    if predict is None or not getattr(plan.method, "adaptive_randomizer", False):
        return plan.predicted_mse(sample_var, stat_var, theta)
    from uldp.collector.methods.sized_predict import OWN_DATA_DRAWS, OWN_DATA_TOL

    mse, _ = predict(plan, sample_var, stat_var, theta, values=stats, draws=OWN_DATA_DRAWS,
                     tol=OWN_DATA_TOL)
    return float(np.sum(mse if T is None else np.square(np.asarray(T)) @ mse))


def read_user_csv(path: str | Path, user_col: str, value_cols: Sequence[str], *,
                  label_col: str | None = None, category_col: str | None = None,
                  max_abs: float | None = None) -> UserData:
    """Group a CSV's rows by ``user_col`` (users in order of first appearance), read by
    :func:`uldp.collector.csvdata.read_csv_columns` under the rules of every command
    (UTF-8 with or without a BOM, cells stripped, an empty id or category and a
    non-numeric value refused naming the row). Values are ``value_cols``; with
    ``category_col`` the values are its categories, numbered in sorted order.
    ``max_abs``: values beyond it are refused naming the row (a range taken from the
    data must be one a query can state)."""
    numeric = ([] if category_col else list(value_cols)) + ([label_col] if label_col else [])
    limits = None if max_abs is None else {c: max_abs for c in value_cols}
    t = read_csv_columns(path, user_col, numeric, [category_col] if category_col else [],
                         max_abs=limits)
    ids, first, inverse = np.unique(t.users, return_index=True, return_inverse=True)
    groups = np.split(np.argsort(inverse, kind="stable"),
                      np.cumsum(np.bincount(inverse, minlength=ids.size))[:-1])
    rows_of = [groups[u] for u in np.argsort(first)]  # users by their first row
    cats: list[str] = []
    if category_col:
        names, codes = np.unique(t.texts[category_col], return_inverse=True)
        cols = codes.astype(np.float64)[:, None]
        cats = [str(c) for c in names]
    else:
        cols = np.column_stack([t.numbers[c] for c in value_cols])
    values = [cols[r, 0] if cols.shape[1] == 1 else cols[r] for r in rows_of]
    labels = [t.numbers[label_col][r] for r in rows_of] if label_col else None
    return UserData(values, labels, cats)
