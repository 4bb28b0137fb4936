"""Accuracy of the two-stage estimators against baselines A/B and SSL (issue 2, bench a).

For m ∈ {10, 100, 1000, 10000}, ε ∈ {0.25, 0.5, 1, 2, 8} and d ∈ {1 (mean), 16, 128}
(ℓ∞ and ℓ2/Kashin), prints a markdown table of the empirical MSE of every method next to
its explicit formula (spec §4.5/§5.5/§6.1/§12) and saves a PNG of MSE against m with the
theoretical curves. Cells whose simulation would exceed ``--budget`` sample-dimensions are
shown with the formula only (marked ``—``): the formula is what the tests validate.

Usage: ``python bench/core_accuracy.py [--quick] [--users N] [--out-dir bench/results]``
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.datasets import make_fleet_data
from uldp.collector.planner import QuerySpec, compile_query, predicted_mse
from uldp.collector.simulation.simulate import simulate_reps

METHODS = ("two-stage", "ssl", "baseline-b", "baseline-a")


def one_cell(kind: str, dim: int, m: int, eps: float, method: str, users: int, reps: int,
             budget: float, seed: int) -> tuple[float, float]:
    dist = {"mean": "bernoulli", "mean-linf": "uniform", "mean-l2": "sphere"}[kind]
    spec = QuerySpec(kind=kind, epsilon=eps, users=users, samples=m, dim=dim, method=method,
                     seed=seed)
    data = make_fleet_data(kind, dist, m, dim, 1.0, np.random.default_rng(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            plan = compile_query(spec)
        except ValueError:
            return float("nan"), float("nan")
        pilot = data.draw(max(1, 4000 // m)).reshape(-1, *((dim,) if kind != "mean" else ()))
        pred = predicted_mse(plan, plan.kind.sample_map(plan.template, pilot).var(axis=0))
        cost = users * m * (dim if kind != "mean" else 1) * (4 if kind == "mean-l2" else 1)
        if method == "baseline-a":
            cost *= 8
        if cost * reps > budget:
            return float("nan"), pred
        res = simulate_reps(spec, data, RandomSource.seeded(seed), reps=reps, progress=False)
    return res.sq_error, pred


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=3e8, help="max samples·dims per cell")
    ap.add_argument("--out-dir", default="bench/results")
    a = ap.parse_args()
    ms = [10, 100, 1000, 10000]
    epss = [0.25, 0.5, 1.0, 2.0, 8.0]
    setups = [("mean", 1), ("mean-linf", 16), ("mean-l2", 16), ("mean-linf", 128),
              ("mean-l2", 128)]
    if a.quick:
        epss, setups, a.budget = [0.5, 1.0, 8.0], [("mean", 1), ("mean-linf", 16),
                                                   ("mean-l2", 16)], 5e7
    t0 = time.perf_counter()
    rows, curves = [], {}
    for kind, dim in setups:
        for eps in epss:
            for m in ms:
                cells = []
                for meth in METHODS:
                    emp, pred = one_cell(kind, dim, m, eps, meth, a.users, a.reps, a.budget,
                                         seed=m + int(eps * 100))
                    cells.append((emp, pred))
                    curves.setdefault((kind, dim, eps, meth), []).append((m, emp, pred))
                rows.append((kind, dim, eps, m, cells))
                print(f"  {kind} d={dim} eps={eps} m={m} done "
                      f"({time.perf_counter() - t0:.0f}s)", flush=True)
    fmt = lambda v: "—" if not np.isfinite(v) else f"{v:.3g}"  # noqa: E731
    lines = [f"n = {a.users} users, {a.reps} reps per simulated cell; "
             "each cell: empirical MSE / formula", "",
             "| kind | d | ε | m | " + " | ".join(METHODS) + " | two-stage vs B |",
             "|---|---|---|---|" + "---|" * (len(METHODS) + 1)]
    for kind, dim, eps, m, cells in rows:
        ratio = cells[2][1] / cells[0][1] if cells[0][1] else float("nan")
        lines.append(f"| {kind} | {dim} | {eps:g} | {m} | "
                     + " | ".join(f"{fmt(e)} / {fmt(p)}" for e, p in cells)
                     + f" | {ratio:.3g}x |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "core_accuracy.md"), "w") as fh:
        fh.write("# Core accuracy: two-stage vs baselines\n\n" + table + "\n")
    _plot(curves, setups, os.path.join(a.out_dir, "core_accuracy.png"))
    print(f"total {time.perf_counter() - t0:.0f}s")


def _plot(curves, setups, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(setups), figsize=(4.2 * len(setups), 3.6), squeeze=False)
    colors = dict(zip(METHODS, ("C0", "C1", "C2", "C3"), strict=True))
    for ax, (kind, dim) in zip(axes[0], setups, strict=True):
        for meth in METHODS:
            pts = curves.get((kind, dim, 1.0, meth), [])
            if not pts:
                continue
            m, emp, pred = map(np.array, zip(*pts, strict=True))
            ax.loglog(m, pred, "-", color=colors[meth], alpha=0.6, label=f"{meth} (formula)")
            ok = np.isfinite(emp)
            ax.loglog(m[ok], emp[ok], "o", color=colors[meth])
        ax.set_title(f"{kind} d={dim}, ε=1")
        ax.set_xlabel("m (samples per user)")
        ax.set_ylabel("MSE")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
