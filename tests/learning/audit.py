"""Exact privacy audit of one device report (spec §4.4 audit, §13.3 P3) for any kind.

The report of a task is ``stage1``: one-hot bins + iid DLap(2/ε_c) per entry; ``stage2``
/ SSL: randomized rounding of the clamped statistic to the grid {0..G} followed by
iid DLap(G/ε_c). Its pmf is therefore known exactly given the user statistic ``Y``:

* stage 1: ``Π_k pmf_t(z_k − onehot_k)``;
* stage 2: ``Π_c [(1−f_c) pmf_t(z_c − ⌊p_c⌋) + f_c pmf_t(z_c − ⌊p_c⌋ − 1)]`` with
  ``p_c`` the grid position and ``f_c`` its fractional part;
* a value task with a scalar randomizer (Duchi, PM, HM: the windowed SGD rounds): the same
  two-point mixture of the mechanism's exact ``P(z | g)`` (``probability``, a dyadic
  ``Fraction``) at the two grid values the rounding may give.

``Y`` is computed by the production code (``kind.statistics`` after the device's own
input checks), so a statistic that escaped its clamp would show up as a ratio above e^ε.
"""

from __future__ import annotations

import numpy as np

from uldp.client.kinds import check_samples
from uldp.client.mechanisms import SCALARS
from uldp.client.mechanisms.two_stage import one_hot_bins
from uldp.client.methods.base import bin_params
from uldp.client.noise import discrete_laplace_pmf, laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec, _attach_labels, task_epsilon, validate_task


def user_statistic(task: TaskSpec, samples: np.ndarray, labels: np.ndarray | None
                   ) -> np.ndarray:
    """The served user statistic of one local dataset, via the device's code path."""
    kind = validate_task(task)
    X = check_samples(np.asarray(samples)[None], kind.vector, task.dim if kind.vector else None)
    if kind.uses_labels:
        X = _attach_labels(X, None if labels is None else np.asarray(labels)[None])
    return kind.statistics(task, X)[0, list(task.components)]


def log_pmf(task: TaskSpec, Y: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """``log P(report = z | statistic Y)`` for each row ``z`` of ``Z``."""
    validate_task(task)
    Z = np.atleast_2d(np.asarray(Z, dtype=np.int64))
    if task.stage == 1:
        onehot = one_hot_bins(np.asarray(Y)[None], bin_params(task))[0]
        t = laplace_scale(2, task.eps_c).value
        return np.log(discrete_laplace_pmf(Z - onehot[None], t)).sum(axis=1)
    intervals = [tuple(iv) for iv in task.intervals]
    lo = np.array([a for a, _ in intervals])
    hi = np.array([b for _, b in intervals])
    pos = (np.clip(Y, lo, hi) - lo) / (hi - lo) * GRID_STEPS
    fl = np.floor(pos)
    f = pos - fl
    a = np.clip(fl, 0, GRID_STEPS)
    b = np.clip(fl + 1, 0, GRID_STEPS)
    if task.mechanism != "laplace":
        mech = SCALARS[task.mechanism]
        out = np.zeros(len(Z))
        for r, z in enumerate(Z):
            for c in range(len(a)):
                pr = (1 - f[c]) * float(mech.probability(int(z[c]), int(a[c]), task.eps_c)) \
                    + f[c] * float(mech.probability(int(z[c]), int(b[c]), task.eps_c))
                out[r] += np.log(pr)
        return out
    t = laplace_scale(GRID_STEPS, task.eps_c).value
    p = (1 - f) * discrete_laplace_pmf(Z - a[None], t) + f * discrete_laplace_pmf(Z - b[None], t)
    return np.log(p).sum(axis=1)


def probe_outputs(task: TaskSpec, rng: np.random.Generator, k: int = 400) -> np.ndarray:
    """Report vectors to evaluate: typical values, the grid ends and far tails."""
    validate_task(task)
    if task.stage == 1:
        width = sum(B for _, _, B in task.bins)
        spread = int(4 * 2 / task.eps_c) + 2
        return rng.integers(-spread, spread + 2, size=(k, width))
    width = len(task.components)
    if task.mechanism != "laplace":  # the mechanism's own outputs of grid ends and middles
        g = rng.choice([0, GRID_STEPS, GRID_STEPS // 2], size=(k, width))
        g = np.where(rng.uniform(size=g.shape) < 0.3, rng.integers(0, GRID_STEPS + 1,
                                                                    size=g.shape), g)
        src = RandomSource.seeded(int(rng.integers(1 << 62)))
        return SCALARS[task.mechanism].privatize(g, task.eps_c, src)
    spread = int(3 * GRID_STEPS / task.eps_c)
    return rng.integers(-spread, GRID_STEPS + spread, size=(k, width))


def max_log_ratio(task: TaskSpec, d1: tuple[np.ndarray, np.ndarray | None],
                  d2: tuple[np.ndarray, np.ndarray | None], rng: np.random.Generator,
                  k: int = 400) -> float:
    """``max_z |log P(z | d1) − log P(z | d2)|`` over probe outputs ``z``."""
    Y1 = user_statistic(task, *d1)
    Y2 = user_statistic(task, *d2)
    Z = probe_outputs(task, rng, k)
    r = log_pmf(task, Y1, Z) - log_pmf(task, Y2, Z)
    return float(np.abs(r).max())


def pairwise_max_log_ratio(task: TaskSpec,
                           datasets: list[tuple[np.ndarray, np.ndarray | None]],
                           rng: np.random.Generator, k: int = 300) -> np.ndarray:
    """Matrix ``R[i, j] = max_z |log P(z | d_i) − log P(z | d_j)|`` over shared probes."""
    Z = probe_outputs(task, rng, k)
    L = np.stack([log_pmf(task, user_statistic(task, *d), Z) for d in datasets])
    with np.errstate(invalid="ignore"):
        D = np.abs(L[:, None, :] - L[None, :, :])
    # an output impossible under both datasets says nothing (−∞ − −∞); one possible under
    # only one of them is an infinite ratio and stays so
    return np.nan_to_num(D, nan=0.0).max(axis=2)


def budget(task: TaskSpec) -> float:
    return task_epsilon(task)
