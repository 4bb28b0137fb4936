"""The distribution peers of ``bench/frontier.py``: multi-freq-ldpy's oracles, batched.

multi-freq-ldpy (PyPI, the ``bench`` extra) writes its clients ``GRR_Client``, ``UE_Client``
and ``SS_Client`` as numba functions; called from Python once per user they cost a few µs
of call overhead each, which at n = 10^5 users × 120 cells × 20 repetitions does not fit a
day on one core. Here the library's *own compiled clients* are called from a numba loop over
the users (numba's ``np.random`` stream, seeded per repetition), every report is folded into
per-category counts exactly as the library's aggregators fold them (``GRR_Aggregator_MI``:
one count per reported value; ``UE_Aggregator_MI``: the sum of the bit vectors;
``SS_Aggregator_MI``: one count per member of the reported subset), and the library's
``MI`` estimator (matrix inversion, clipped at 0 and renormalized) turns the counts into the
estimate with the (p, q) of the library's aggregator. :func:`check` asserts, on a sample of
reports drawn through the library's Python entry points, that this fold + ``MI`` equals the
library's aggregator to the last bit — the bench runs it before any cell.

ADP (the library's adaptive rule) is not run separately: ``ADP_Client`` returns
``GRR_Client``'s or ``UE_Client``'s report by a rule on the public (k, ε) alone, so its
estimate in a cell *is* the GRR or the OUE run of that cell (:func:`adp_choice` asks the
library which one).
"""

from __future__ import annotations

import math
import time

import numba
import numpy as np
from multi_freq_ldpy.estimators.Histogram_estimator import MI
from multi_freq_ldpy.pure_frequency_oracles import ADP, GRR, SS, UE

_GRR = GRR.GRR_Client
_UE = UE.UE_Client
_SS = SS.SS_Client


@numba.njit(cache=False)
def _fold_grr(items: np.ndarray, k: int, eps: float, seed: int) -> np.ndarray:
    np.random.seed(seed)
    counts = np.zeros(k)
    for x in items:
        counts[_GRR(x, k, eps)] += 1
    return counts


@numba.njit(cache=False)
def _fold_oue(items: np.ndarray, k: int, eps: float, seed: int) -> np.ndarray:
    np.random.seed(seed)
    counts = np.zeros(k)
    for x in items:
        counts += _UE(x, k, eps, True)
    return counts


@numba.njit(cache=False)
def _fold_ss(items: np.ndarray, k: int, eps: float, seed: int) -> np.ndarray:
    np.random.seed(seed)
    counts = np.zeros(k)
    for x in items:
        for v in _SS(x, k, eps):
            counts[v] += 1
    return counts


def _pq(name: str, k: int, eps: float) -> tuple[float, float]:
    """(p, q) exactly as the library's ``<name>_Aggregator_MI`` computes them."""
    e = np.exp(eps)
    if name == "GRR":
        p = e / (e + k - 1)
        return p, (1 - p) / (k - 1)
    if name == "OUE":
        return 1 / 2, 1 / (np.exp(eps) + 1)
    sub_k = int(max(1, np.rint(k / (e + 1))))
    p = sub_k * e / (sub_k * e + k - sub_k)
    q = (((sub_k - 1) * (sub_k * e) + (k - sub_k) * sub_k)
         / ((k - 1) * (sub_k * e + k - sub_k)))
    return p, q


FOLDS = {"GRR": _fold_grr, "OUE": _fold_oue, "SS": _fold_ss}


def estimate(name: str, items: np.ndarray, k: int, eps: float, seed: int) -> np.ndarray:
    """The library's estimate of the frequencies of ``items`` (one record per user)."""
    counts = FOLDS[name](items.astype(np.int64), k, float(eps), seed % (2**32))
    p, q = _pq(name, k, eps)
    return np.asarray(MI(counts, items.size, p, q), dtype=np.float64)


def adp_choice(k: int, eps: float) -> str:
    """Which oracle multi-freq-ldpy's ADP rule runs at the public (k, ε)."""
    return "OUE" if np.ndim(ADP.ADP_Client(0, k, eps)) == 1 else "GRR"


def dist_peers(items: np.ndarray, k: int, eps: float, seed: int
               ) -> dict[str, tuple[np.ndarray, float]]:
    """GRR, OUE and SS on one record per user: (estimate, seconds); ADP = its choice."""
    out = {}
    for i, name in enumerate(FOLDS):
        t0 = time.process_time()
        est = estimate(name, items, k, eps, seed * 7 + i)
        out[name] = (est, time.process_time() - t0)
    out["ADP"] = out[adp_choice(k, eps)]
    return out


def check(k: int = 8, eps: float = 1.0, n: int = 3000, seed: int = 5) -> None:
    """Fold + MI equals each library aggregator on reports from the library's clients."""
    g = np.random.default_rng(seed)
    items = g.integers(0, k, n)
    np.random.seed(seed)
    lib = {"GRR": (lambda x: GRR.GRR_Client(int(x), k, eps),
                   lambda r: GRR.GRR_Aggregator_MI(r, k, eps)),
           "OUE": (lambda x: UE.UE_Client(int(x), k, eps),
                   lambda r: UE.UE_Aggregator_MI(r, eps)),
           "SS": (lambda x: SS.SS_Client(int(x), k, eps),
                  lambda r: SS.SS_Aggregator_MI(r, k, eps))}
    for name, (client, agg) in lib.items():
        reports = [client(x) for x in items]
        counts = np.zeros(k)
        for r in reports:
            if name == "OUE":
                counts += r
            else:
                np.add.at(counts, np.atleast_1d(r), 1)
        mine = MI(counts, n, *_pq(name, k, eps))
        theirs = agg(reports)
        if not np.array_equal(np.asarray(mine), np.asarray(theirs)):
            raise AssertionError(f"{name}: fold + MI differs from the library aggregator")
        if not math.isclose(float(np.sum(mine)), 1.0, rel_tol=1e-9):
            raise AssertionError(f"{name}: estimate does not sum to 1")
