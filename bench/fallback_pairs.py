#!/usr/bin/env python3
"""Method ``hadamard``'s fallback interval with and without the paired records, per outcome.

    python bench/fallback_pairs.py --population flights --reps 30
    python bench/fallback_pairs.py --population skewed --reps 30 --no-pairs   # the old interval

``auto`` on a real population of ``bench/realdata_ldp.py`` (a distribution at ε = 8, the
production device and collector code through ``run_users``), its runs split by the outcome
of the spread test (``window`` / ``fallback``): per outcome the mean of ``z² = ((p̂ − p)/se)²``
over the categories (1 for an honest interval), the coverage of the 95 % intervals and the
MSE over the predicted: ``/ mixture`` is the query's prediction (the mixture of both
outcomes, weighted by the predicted P(window)), ``/ own`` the outcome's own prediction
(``outcomes()``: the windows' error, or the fallback's), the check that answers whether an
outcome's error is stated honestly. ``--no-pairs`` turns the probe off
(``hadamard_pairs.PROBE_NOISE = −1``): the one-record oracle's interval, which counts the
users' spread.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realdata_ldp import population

import uldp.collector.methods.hadamard_pairs as pairs
import uldp.collector.simulation.own_data as own_data
from uldp.collector.simulation.own_data import UserData, run_users


def captured_plan(cats: list[np.ndarray], A: int, eps: float) -> dict[str, object]:
    """The plan, the users' exact moments and θ that one ``run_users`` of these users hands
    its prediction hook (the hook wrapped for one run)."""
    got: dict[str, object] = {}
    inner = own_data._predicted

    def hook(plan, sv, stv, theta, stats):  # type: ignore[no-untyped-def]
        got.update(plan=plan, sv=sv, stv=stv, theta=theta)
        return inner(plan, sv, stv, theta, stats)

    own_data._predicted = hook
    try:
        run_users("distribution", UserData(cats), epsilon=eps, dim=A, reps=1, seed=10**6)
    finally:
        own_data._predicted = inner
    return got


def _own_predictions(a: argparse.Namespace, cats: list[np.ndarray], A: int
                     ) -> tuple[dict[str, float], float]:
    """Each outcome's own predicted total MSE and the predicted P(window), from the plan and
    the users' exact moments ``run_users`` computes (its prediction hook, wrapped)."""
    got = captured_plan(cats, A, a.eps)
    plan = got["plan"]
    T = plan.kind.transform(plan.template, plan.n_components)  # type: ignore[attr-defined]

    def total(v: np.ndarray) -> float:
        return float(np.sum(v if T is None else np.square(np.asarray(T)) @ v))

    window, fallback, p = plan.method.outcomes(  # type: ignore[attr-defined]
        plan, got["sv"], got["stv"], got["theta"])
    own = {"fallback": total(fallback)}
    if window is not None:
        own["window"] = total(window)
    return own, float(p)


def _table(a: argparse.Namespace, rows: dict[str, list[tuple[float, ...]]], title: str
           ) -> None:
    """The table of the runs so far, by outcome."""
    print(f"\n{title}:\n")
    print("| population | ε | pairs | outcome | runs | mean z² | coverage | MSE / mixture "
          "| MSE / own ± 2 SE |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, got in rows.items():
        if got:
            arr = np.asarray(got)
            z2, cov, ratio, mine = np.mean(arr, axis=0)
            se = 2 * float(np.std(arr[:, 3], ddof=1)) / np.sqrt(len(arr)) if len(arr) > 1 \
                else float("nan")
            print(f"| {a.population} | {a.eps:g} | {'off' if a.no_pairs else 'on'} | {mode} | "
                  f"{len(got)} | {z2:.3f} | {cov:.3f} | {ratio:.2f} | {mine:.2f} ± {se:.2f} |")
    arr = np.asarray([r for got in rows.values() for r in got])
    if len(arr):
        print(f"| {a.population} | {a.eps:g} | {'off' if a.no_pairs else 'on'} | all | "
              f"{len(arr)} | {np.mean(arr[:, 0]):.3f} | {np.mean(arr[:, 1]):.3f} | "
              f"{np.mean(arr[:, 2]):.2f} | |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--population", default="flights")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--eps", type=float, default=8.0)
    ap.add_argument("--no-pairs", action="store_true", help="the one-record interval")
    ap.add_argument("--start", type=int, default=0, help="first seed (runs in parallel)")
    a = ap.parse_args(argv)
    if a.no_pairs:
        pairs.PROBE_NOISE = -1.0
    pop = population(a.population)
    cats = [np.asarray(c, dtype=np.float64) for c in pop["categories"]]
    A = max(int(np.max(c)) for c in cats if len(c)) + 1
    own, p_window = _own_predictions(a, cats, A)
    rows: dict[str, list[tuple[float, ...]]] = {"window": [], "fallback": []}
    print(f"predicted P(window) {p_window:.3f}; predicted MSE: "
          + ", ".join(f"{k} {v:.3e}" for k, v in own.items()), flush=True)
    for seed in range(a.start, a.start + a.reps):
        if seed > a.start and (seed - a.start) % 25 == 0:  # progress: the table so far
            _table(a, rows, f"after {seed - a.start} runs (seeds from {a.start})")
        r = run_users("distribution", UserData(cats), epsilon=a.eps, dim=A, reps=1, seed=seed)
        e = r.estimate
        mode = e.extra.get("hadamard", {}).get("mode")
        if mode in rows:
            z2 = float(np.mean(((e.values - r.truth) / e.std_error) ** 2))
            sq = float(np.sum((e.values - r.truth) ** 2))
            rows[mode].append((z2, float(np.mean(e.covers(r.truth))), sq / r.predicted_mse,
                               sq / own.get(mode, float("nan"))))
    _table(a, rows, f"{a.reps} runs, seeds {a.start}–{a.start + a.reps - 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
