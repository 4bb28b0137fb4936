"""Device half of Algorithm 1 (two-stage mean), batch form over users.

Sections of ``docs/algorithms.md``: §4.3 (rounds 1 and 2, client steps 1–3 and 7–8), §4.4 (privacy),
§5.3 (several components per user), §12 (single-stage Laplace, SSL), [D3], [D12], [D22].
Its neighbours: ``uldp.client.methods.two_stage`` (the task parameters and report layout)
and the collector half ``uldp.collector.methods.two_stage`` (the estimates).

Input is a matrix ``Y`` of user statistics (one row per user, one column per component this
user serves); each function returns integer reports, one row per user.

Privacy argument (user-level ε-LDP; the unit is the *whole* local dataset):

* **Stage I** — statistic: for each component the one-hot vector of ``bin(clamp(Y_c))``,
  which has exactly one 1 for *any* input (clamping is mandatory, INV-6). Two datasets give
  one-hot vectors at L1 distance <= 2, so i.i.d. ``DLap(2/ε_c)`` per entry is ε_c-LDP per
  component (``uldp.client.noise`` proof), and ``k`` components compose to ``k·ε_c``.
* **Stage II / SSL** — statistic: ``clamp(Y_c, lo, hi)`` with ``[lo, hi]`` fixed from public
  values before the data are touched, mapped to ``[0, GRID_STEPS]`` and rounded unbiasedly
  to an integer. Any two datasets give values at distance <= ``GRID_STEPS`` grid units, so
  ``DLap(GRID_STEPS/ε_c)`` is ε_c-LDP — the continuous spec's ``Lap((hi-lo)/ε_c)``
  expressed in grid units.

The noise scale is computed here, from ``eps_c`` and the public interval, never received.

:func:`bin_reports` and :func:`value_reports` are the same two report layouts with any
mechanism of ``uldp.client.mechanisms`` (a frequency oracle on the 0-based bin index of
each component; a scalar randomizer on each grid value). With the default mechanism,
discrete Laplace, they draw exactly what :func:`stage1_reports` and :func:`stage2_reports`
draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from uldp.client.mechanisms.base import FrequencyOracle, ScalarMechanism
from uldp.client.noise import discrete_laplace, laplace_scale, randomized_round
from uldp.client.params import GRID_STEPS, Alg1Params, bin_index
from uldp.client.randomness import RandomSource
from uldp.client.trace import record_rounding, record_statistic

__all__ = [
    "bin_reports",
    "grid_categories",
    "grid_encode",
    "grid_log_likelihood",
    "grid_reports",
    "one_hot_bins",
    "stage1_log_likelihood",
    "stage1_reports",
    "stage2_log_likelihood",
    "stage2_reports",
    "value_reports",
]


def _check_stats(Y: np.ndarray, k: int) -> np.ndarray:
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[1] != k:
        raise ValueError(f"user statistics must have shape (users, {k}), got {Y.shape}")
    if not np.isfinite(Y).all():
        raise ValueError("user statistics contain NaN or infinity")
    return Y


def one_hot_bins(Y: np.ndarray, params: Sequence[Alg1Params]) -> np.ndarray:
    """Concatenated one-hot bin vectors (users × ΣB_c) of the clamped statistics (P2)."""
    Y = _check_stats(Y, len(params))
    widths = [p.bins for p in params]
    out = np.zeros((Y.shape[0], sum(widths)), dtype=np.int64)
    start = 0
    rows = np.arange(Y.shape[0])
    for c, p in enumerate(params):
        out[rows, start + bin_index(Y[:, c], p) - 1] = 1
        start += p.bins
    return out


def stage1_reports(Y: np.ndarray, params: Sequence[Alg1Params], eps_c: float,
                   rng: RandomSource) -> np.ndarray:
    """Round 1: one-hot bins plus ``DLap(2/ε_c)`` per entry (§4.3 steps 1–3)."""
    Y = _check_stats(Y, len(params))
    record_statistic(Y)
    onehot = one_hot_bins(Y, params)
    noise = discrete_laplace(laplace_scale(2, eps_c), onehot.shape, rng)
    return onehot + noise


def grid_encode(Y: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                rng: RandomSource) -> np.ndarray:
    """Clamp each column to ``[lo_c, hi_c]`` and round unbiasedly to ``{0..GRID_STEPS}``."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    if np.any(hi <= lo):
        raise ValueError("clamp intervals must have hi > lo")
    pos = (np.clip(Y, lo, hi) - lo) / (hi - lo) * GRID_STEPS
    rounded = randomized_round(pos, rng)
    record_rounding(pos, rounded)
    return np.clip(rounded, 0, GRID_STEPS)


def stage2_reports(Y: np.ndarray, intervals: Sequence[tuple[float, float]], eps_c: float,
                   rng: RandomSource) -> np.ndarray:
    """Round 2 (and SSL): clamp to the public interval, grid-encode, add ``DLap(G/ε_c)``.

    ``intervals[c]`` is the clamp interval of component ``c`` — for stage II derived on the
    device from ``k̂_c`` (``Alg1Params.clamp_interval``), for SSL ``[-D_c, D_c]``.
    """
    Y = _check_stats(Y, len(intervals))
    record_statistic(Y)
    lo = np.array([a for a, _ in intervals])
    hi = np.array([b for _, b in intervals])
    enc = grid_encode(Y, lo, hi, rng)
    return enc + discrete_laplace(laplace_scale(GRID_STEPS, eps_c), enc.shape, rng)


def bin_reports(Y: np.ndarray, params: Sequence[Alg1Params], oracle: FrequencyOracle,
                eps_c: float, rng: RandomSource) -> np.ndarray:
    """Stage I with a frequency oracle: each component's 0-based bin ``bin(clamp(Y_c)) − 1``
    privatized over its ``B_c`` bins at ``ε_c``, the components' reports concatenated."""
    Y = _check_stats(Y, len(params))
    record_statistic(Y)
    items = np.stack([bin_index(Y[:, c], p) - 1 for c, p in enumerate(params)], axis=1) \
        if params else np.zeros((Y.shape[0], 0), dtype=np.int64)
    return oracle.privatize_many(items, [p.bins for p in params], eps_c, rng)


def grid_categories(Y: np.ndarray, params: Sequence[Alg1Params], rng: RandomSource
                    ) -> np.ndarray:
    """Each component's statistic clamped to ``[−D_c, D_c]`` and rounded unbiasedly to one
    of the ``B_c + 1`` grid points ``−D_c + k·2D_c/B_c`` (``two-stage-sized`` stage I):
    position ``((clamp(y) + D)/(2D))·B`` (in that order of double operations), then
    ``floor + Bernoulli(fraction)`` with one keystream word per component, so that
    ``E[−D + k·2D/B] = clamp(y)``. Returns the 0-based categories ``k ∈ [0, B_c]``."""
    Y = _check_stats(Y, len(params))
    if not params:
        return np.zeros((Y.shape[0], 0), dtype=np.int64)
    D = np.array([p.bound for p in params])
    B = np.array([float(p.bins) for p in params])
    pos = (np.clip(Y, -D, D) + D) / (2.0 * D) * B
    rounded = randomized_round(pos, rng)
    record_rounding(pos, rounded)
    return np.clip(rounded, 0, B.astype(np.int64))


def grid_reports(Y: np.ndarray, params: Sequence[Alg1Params], oracle: FrequencyOracle,
                 eps_c: float, rng: RandomSource) -> np.ndarray:
    """Stage I of ``two-stage-sized``: each component's grid category
    (:func:`grid_categories`: the rounding words of every component first) privatized over
    its ``B_c + 1`` categories at ``ε_c``, the components' reports concatenated. Privacy:
    the oracle is ε_c-LDP for *any* input category, and the rounding is a randomized map
    of the statistic chosen before the oracle's draws, so the report's law is a mixture of
    two of the oracle's laws with data-independent form — every ratio stays within
    ``e^{ε_c}`` (device-protocol §9.3)."""
    Y = _check_stats(Y, len(params))
    record_statistic(Y)
    items = grid_categories(Y, params, rng)
    return oracle.privatize_many(items, [p.bins + 1 for p in params], eps_c, rng)


def grid_log_likelihood(y: np.ndarray, report: np.ndarray, params: Sequence[Alg1Params],
                        oracle: FrequencyOracle, eps_c: float) -> float:
    """Exact ``log P(report | statistics y)`` of a ``two-stage-sized`` stage-I report (one
    user): per component the two-point mixture ``(1 − f)·P(r | k) + f·P(r | k + 1)`` of the
    oracle's exact probabilities over the rounding."""
    y = np.asarray(y, dtype=np.float64)
    out, pos_r = 0.0, 0
    for c, p in enumerate(params):
        K = p.bins + 1
        L = oracle.length(K, eps_c)
        r = [int(v) for v in np.asarray(report)[pos_r:pos_r + L]]
        pos_r += L
        x = (min(max(float(y[c]), -p.bound), p.bound) + p.bound) / (2.0 * p.bound) * p.bins
        k = min(math.floor(x), p.bins)
        f = x - k
        if oracle.name == "laplace":  # in logs: far outputs underflow the pmf
            z = np.asarray(r, dtype=np.float64)
            a = float(_dlap_logpmf(z - np.eye(K)[k], eps_c, 2).sum())
            b = float(_dlap_logpmf(z - np.eye(K)[min(k + 1, p.bins)], eps_c, 2).sum())
            out += float(np.logaddexp(math.log1p(-f) + a, math.log(f) + b)) if f > 0 else a
            continue
        prob = (1 - f) * float(oracle.probability(r, k, K, eps_c))
        if f > 0:
            prob += f * float(oracle.probability(r, k + 1, K, eps_c))
        out += math.log(prob) if prob > 0 else -math.inf
    return out


def value_reports(Y: np.ndarray, intervals: Sequence[tuple[float, float]],
                  mechanism: ScalarMechanism, eps_c: float, rng: RandomSource
                  ) -> np.ndarray:
    """Values with a scalar randomizer: clamp, grid-encode (the rounding words of every
    entry first), then the mechanism's draws."""
    Y = _check_stats(Y, len(intervals))
    record_statistic(Y)
    lo = np.array([a for a, _ in intervals])
    hi = np.array([b for _, b in intervals])
    return mechanism.privatize(grid_encode(Y, lo, hi, rng), eps_c, rng)


# ---- exact likelihoods (for privacy audits) ------------------------------------------------
def _dlap_logpmf(z: np.ndarray, eps_c: float, sensitivity: int) -> np.ndarray:
    t = laplace_scale(sensitivity, eps_c).value
    q = np.exp(-1.0 / t)
    return np.log((1 - q) / (1 + q)) - np.abs(z) / t


def stage1_log_likelihood(y: np.ndarray, report: np.ndarray, params: Sequence[Alg1Params],
                          eps_c: float) -> float:
    """Exact ``log P(report | statistics y)`` of a stage-I report (one user)."""
    onehot = one_hot_bins(np.asarray(y, dtype=np.float64)[None], params)[0]
    return float(_dlap_logpmf(np.asarray(report) - onehot, eps_c, 2).sum())


def stage2_log_likelihood(y: np.ndarray, report: np.ndarray,
                          intervals: Sequence[tuple[float, float]], eps_c: float) -> float:
    """Exact ``log P(report | statistics y)`` of a stage-II/SSL report: the randomized
    rounding makes each coordinate a two-point mixture of shifted discrete Laplaces."""
    y = np.asarray(y, dtype=np.float64)
    lo = np.array([a for a, _ in intervals])
    hi = np.array([b for _, b in intervals])
    pos = (np.clip(y, lo, hi) - lo) / (hi - lo) * GRID_STEPS
    fl = np.floor(pos)
    f = pos - fl
    z = np.asarray(report, dtype=np.float64)
    a = _dlap_logpmf(z - fl, eps_c, GRID_STEPS)
    b = _dlap_logpmf(z - fl - 1, eps_c, GRID_STEPS)
    with np.errstate(divide="ignore"):
        mix = np.logaddexp(np.log1p(-f) + a, np.log(f) + b)
    return float(mix.sum())
