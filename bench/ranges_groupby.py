"""Ranges and group-by (issue 29): the numbers behind the tests, as tables.

1. **Ranges.** The users of ``examples/visits.csv`` (minutes in [0, 120]) at ε = 1: the
   own-data check (``uldp simulate mean --data ... --lo 0 --hi 120``), the same users through
   a query stating the range ``[0, 120]`` (the production program and device function, as
   ``uldp query create --lo 0 --hi 120`` runs it), and the only query the old API could
   make, ``--bound 120`` on the raw values. Median interval width over ``--reps`` runs.
2. **Group-by.** A grouped mean over 4 groups of unequal size (40/30/20/10 %), per-group
   truth, estimate, Fieller interval and coverage over ``--reps`` seeds, against a plain
   mean of each group run separately on its own users (which needs a dataset per group:
   exactly what leaks membership).

    python bench/ranges_groupby.py [--reps 20]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import MeanEstProgram
from uldp.collector.programs.driver import run_program
from uldp.collector.simulation.own_data import read_user_csv, run_users

VISITS = Path(__file__).resolve().parents[1] / "examples" / "visits.csv"


def _padded(values: list[np.ndarray]) -> np.ndarray:
    m = max(len(v) for v in values)
    X = np.full((len(values), m), np.nan)
    for i, v in enumerate(values):
        X[i, : len(v)] = v
    return X


def _query(spec: QuerySpec, X: np.ndarray, labels: np.ndarray | None, seed: int) -> Estimate:
    plan = compile_query(spec)
    rng = RandomSource.seeded(f"bench:{seed}")

    def privatize(slots, task, offsets, acc):  # type: ignore[no-untyped-def]
        acc.add(compute_reports(task, X[slots], rng,
                                labels=None if labels is None else labels[slots]))

    return Estimate.from_dict(run_program(MeanEstProgram(plan.spec), privatize))


def ranges(reps: int) -> None:
    data = read_user_csv(VISITS, "user", ["minutes"])
    X = _padded(data.values)
    n, m_ref = X.shape[0], max(int(np.median(data.counts)), 1)
    widths: dict[str, list[float]] = {"own-data check, --lo 0 --hi 120": [],
                                      "query, --lo 0 --hi 120": [],
                                      "query, --bound 120 (before: no range)": []}
    for r in range(reps):
        own = run_users("mean", data, epsilon=1.0, lo=0.0, hi=120.0, samples=m_ref, seed=r)
        widths["own-data check, --lo 0 --hi 120"].append(
            float(own.estimate.ci_high[0] - own.estimate.ci_low[0]))
        for name, kw in (("query, --lo 0 --hi 120", {"lo": 0.0, "hi": 120.0}),
                         ("query, --bound 120 (before: no range)", {"bound": 120.0})):
            spec = QuerySpec(kind="mean", epsilon=1.0, users=n, samples=m_ref, seed=1000 + r,
                             **kw)
            e = _query(spec, X, None, r)
            widths[name].append(float(e.ci_high[0] - e.ci_low[0]))
    base = float(np.median(widths["own-data check, --lo 0 --hi 120"]))
    print(f"\n## Ranges: examples/visits.csv, {n} users, m_ref {m_ref}, ε = 1, {reps} runs\n")
    print("| run | median interval width | ± | / own-data check |")
    print("|---|---|---|---|")
    for name, w in widths.items():
        med = float(np.median(w))
        print(f"| {name} | {med:.2f} | {med / 2:.2f} | {med / base:.3f} |")


def groupby(reps: int) -> None:
    groups, shares, means = ("de", "fr", "it", "es"), [0.4, 0.3, 0.2, 0.1], [30.0, 60.0,
                                                                              90.0, 45.0]
    n, m, G = 20_000, 8, 4
    hits, rows = np.zeros(G), []
    for r in range(reps):
        rng = np.random.default_rng(r)
        g = rng.choice(G, size=n, p=shares)
        mu = np.asarray(means)[g] + rng.normal(0, 10, n)
        X = np.clip(mu[:, None] + rng.normal(0, 15, (n, m)), -10, 140)
        truth = np.array([np.clip(X[g == k], 0, 120).mean(axis=1).mean() for k in range(G)])
        spec = QuerySpec(kind="mean-by", epsilon=4.0, users=n, samples=m, dim=G, lo=0.0,
                         hi=120.0, by="country", groups=groups, seed=r)
        e = _query(spec, X, np.repeat(g[:, None].astype(float), m, axis=1), r)
        hits += (e.ci_low[:G] <= truth) & (truth <= e.ci_high[:G])
        if r == 0:
            sep = []
            for k in range(G):  # one plain mean per group (a dataset per group: leaks it)
                Xk = X[g == k]
                s = QuerySpec(kind="mean", epsilon=4.0, users=len(Xk), samples=m, lo=0.0,
                              hi=120.0, method="ssl", seed=r)
                ek = _query(s, Xk, None, r)
                sep.append(float(ek.ci_high[0] - ek.ci_low[0]))
            rows = [(groups[k], truth[k], e.values[k], e.ci_low[k], e.ci_high[k],
                     e.values[G + k], sep[k]) for k in range(G)]
    print(f"\n## Group-by: {n} users, 4 groups, m = {m}, ε = 4, range [0, 120], {reps} seeds\n")
    print("| group | share | truth | estimate (seed 0) | 95 % interval | width | plain mean of "
          "the group alone: width | coverage |")
    print("|---|---|---|---|---|---|---|---|")
    for k, (name, t, v, lo, hi, sh, sep_w) in enumerate(rows):
        print(f"| {name} | {sh:.3f} | {t:.2f} | {v:.2f} | [{lo:.2f}, {hi:.2f}] | "
              f"{hi - lo:.2f} | {sep_w:.2f} | {hits[k] / reps:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    t0 = time.perf_counter()
    ranges(a.reps)
    groupby(a.reps)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
