#!/usr/bin/env python3
"""Check ``two-stage-sized``'s own-data prediction (``collector/methods/sized_predict.py``)
against a brute force of stage I (issue 24).

    nice -n 19 python bench/sized_prediction_check.py --population concentrated --eps 0.5 1 2

For a population-suite cell (``bench/population_suite.py``: 1 600 users, ``--assume``), the
own-data prediction runs the rule on ``--draws`` stage-I histograms. ``prediction`` draws
them as the product does (``prediction_draws``: the users sampled without replacement and
rounded, the oracle's noise a normal of its exact covariance); ``brute`` draws them as stage I
produces them: ``n₁`` of the users without replacement, each rounded to the grid, each
report's real subset-selection support (the design's ``p*`` and ``ω``), decoded. Everything
else (the rule, each outcome's exact error) is the product's. Printed per cell: the
predicted MSE, and the Monte-Carlo standard error of that mean over the drawn outcomes.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from population_suite import run_cell

import uldp.collector.methods.sized_predict as sp
from uldp.client.mechanisms.exact import units_of
from uldp.client.mechanisms.ss import ss_design
from uldp.collector.mechanisms import ORACLE_DECODERS


def brute_draws(vals: np.ndarray, pts: np.ndarray, n1: int, oracle: str, eps: float,
                draws: int, seed: int = 7) -> Any:
    """Stage-I histograms from real subset-selection supports of ``n1`` users sampled
    without replacement from ``vals`` (each rounded to the grid unbiasedly)."""
    if oracle != "ss":
        raise SystemExit(f"the brute force is written for subset selection, not {oracle}")
    rng = np.random.default_rng(seed)
    k = pts.size
    w = ss_design(k, units_of(eps)).omega
    p, q = ORACLE_DECODERS["ss"].pq(k, eps)
    x = (np.clip(vals, pts[0], pts[-1]) - pts[0]) / (pts[1] - pts[0])
    lo = np.minimum(np.floor(x).astype(np.int64), k - 2)
    for at in range(0, draws, sp.CHUNK):
        rows = []
        for _ in range(min(sp.CHUNK, draws - at)):
            who = rng.choice(vals.size, n1, replace=False)
            g = lo[who] + (rng.random(n1) < x[who] - lo[who])
            inside = rng.random(n1) < p  # the value is in the reported subset
            keys = rng.random((n1, k))
            keys[np.arange(n1), g] = 2.0  # the others: a uniform subset of the k - 1 others
            ranks = np.empty((n1, k), dtype=np.int64)
            ranks[np.arange(n1)[:, None], np.argsort(keys, axis=1)] = np.arange(k)
            sup = (ranks < np.where(inside, w - 1, w)[:, None]).astype(float)
            sup[np.arange(n1), g] += inside
            rows.append((sup.sum(axis=0) / n1 - q) / (p - q))
        yield np.array(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--population", default="concentrated")
    ap.add_argument("--eps", nargs="+", type=float, default=[0.5, 1.0, 2.0])
    ap.add_argument("--draws", type=int, default=8192)
    ap.add_argument("--assume", choices=("none", "users-alike"), default="users-alike")
    a = ap.parse_args(argv)
    sp.OWN_DATA_TOL, sp.OWN_DATA_DRAWS = None, a.draws  # type: ignore[assignment]
    picks: Counter = Counter()
    errors: dict[tuple, float] = {}
    mode = {"now": "prediction"}
    product_draws, choose_many, outcome_error = (sp.prediction_draws, sp.choose_many,
                                                 sp._outcome_error)

    def draws_(vals, wts, pts, n1, n_all, oracle, eps, draws):  # type: ignore[no-untyped-def]
        if mode["now"] == "brute" and draws == a.draws:
            return brute_draws(vals, pts, n1, oracle, eps, draws)
        return product_draws(vals, wts, pts, n1, n_all, oracle, eps, draws)

    def choose_(*args, **kw):  # type: ignore[no-untyped-def]
        res = choose_many(*args, **kw)
        for per in res:
            mech = min(per, key=lambda m: per[m].objective)
            picks[(args[1], per[mech].i, per[mech].j, per[mech].estimator, mech)] += 1
        return res

    def error_(truth, vals, wts, lo, hi, est, mech, noise, n1, n2):  # type: ignore[no-untyped-def]
        h = truth.points[1] - truth.points[0]
        key = (n1, round((lo - truth.points[0]) / h), round((hi - truth.points[0]) / h), est,
               mech)
        errors[key] = outcome_error(truth, vals, wts, lo, hi, est, mech, noise, n1, n2)
        return errors[key]

    sp.prediction_draws, sp.choose_many, sp._outcome_error = draws_, choose_, error_
    print("| population | ε | draws | prediction | ± MC SE | brute force | ± MC SE |")
    print("|---|---|---|---|---|---|---|")
    for eps in a.eps:
        out = []
        for m in ("prediction", "brute"):
            mode["now"] = m
            picks.clear()
            errors.clear()
            sp._CACHE.clear()  # a prediction is cached on the public facts and the users
            run_cell(a.population, 1600, eps, 1, 0, assume=a.assume)
            per_n1: Counter = Counter()
            for key, c in picks.items():
                per_n1[key[0]] += c
            n1 = max(per_n1, key=lambda n: per_n1[n])  # the own-data prediction's stage I
            keys = [key for key in picks if key[0] == n1]
            cnt = np.array([picks[key] for key in keys], dtype=float)
            err = np.array([errors[key] for key in keys])
            mean = float(cnt @ err / cnt.sum())
            out.append((mean, float(np.sqrt(cnt @ (err - mean) ** 2) / cnt.sum())))
        print(f"| {a.population} | {eps:g} | {a.draws} | {out[0][0]:.4g} | {out[0][1]:.2g} | "
              f"{out[1][0]:.4g} | {out[1][1]:.2g} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
