#!/usr/bin/env python3
"""Method ``hadamard``'s fallback interval with and without the paired records, per outcome.

    python bench/fallback_pairs.py --population flights --reps 30
    python bench/fallback_pairs.py --population skewed --reps 30 --no-pairs   # the old interval

``auto`` on a real population of ``bench/realdata_ldp.py`` (a distribution at ε = 8, the
production device and collector code through ``run_users``), its runs split by the outcome
of the spread test (``window`` / ``fallback``): per outcome the mean of ``z² = ((p̂ − p)/se)²``
over the categories (1 for an honest interval), the coverage of the 95 % intervals and the
MSE over the predicted (the prediction is the mixture of both outcomes: per outcome only a
rough check). ``--no-pairs`` turns the probe off (``hadamard_pairs.PROBE_NOISE = −1``): the
one-record oracle's interval, which counts the users' spread.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realdata_ldp import population

import uldp.collector.methods.hadamard_pairs as pairs
from uldp.collector.simulation.own_data import UserData, run_users


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--population", default="flights")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--eps", type=float, default=8.0)
    ap.add_argument("--no-pairs", action="store_true", help="the one-record interval")
    a = ap.parse_args(argv)
    if a.no_pairs:
        pairs.PROBE_NOISE = -1.0
    pop = population(a.population)
    cats = [np.asarray(c, dtype=np.float64) for c in pop["categories"]]
    A = max(int(np.max(c)) for c in cats if len(c)) + 1
    rows: dict[str, list[tuple[float, float, float]]] = {"window": [], "fallback": []}
    for seed in range(a.reps):
        r = run_users("distribution", UserData(cats), epsilon=a.eps, dim=A, reps=1, seed=seed)
        e = r.estimate
        mode = e.extra.get("hadamard", {}).get("mode")
        if mode in rows:
            z2 = float(np.mean(((e.values - r.truth) / e.std_error) ** 2))
            rows[mode].append((z2, float(np.mean(e.covers(r.truth))),
                               float(np.sum((e.values - r.truth) ** 2)) / r.predicted_mse))
    print("| population | ε | pairs | outcome | runs | mean z² | coverage | MSE / predicted |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, got in rows.items():
        if got:
            z2, cov, ratio = np.mean(np.asarray(got), axis=0)
            print(f"| {a.population} | {a.eps:g} | {'off' if a.no_pairs else 'on'} | {mode} | "
                  f"{len(got)} | {z2:.3f} | {cov:.3f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
