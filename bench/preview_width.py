#!/usr/bin/env python3
"""The console's "before you run" preview against the widths the demo's queries realise.

    python bench/preview_width.py              # 20 runs per query (~1-2 min)
    python bench/preview_width.py --runs 5     # quicker

For each query of ``uldp demo`` (``uldp.collector.simulation.demo.DEMO_QUERIES``, at the demo's
defaults: 20 000 devices split over the five queries, ε = 2, m = 100, D = 1), the preview
(:func:`uldp.collector.analyst.preview.preview_message`, the numbers the console shows
from the public parameters alone: the planner's noise prediction, and for a two-stage plan
the plan run on users alike, which adds stage I's bias bounds) is compared with the
interval widths the collector returns: each run draws the demo's population afresh (the
same ``dataset_for_query`` as the demo, another seed) and runs the query's program — the
production device and collector code the service runs — with fresh noise. Printed and written to
``bench/results/preview_width.md``: the method ``auto`` chose, the predicted widths
(the noise prediction, the likely width the console shows, and the bound with the widest
spread the support allows), the median realised
width over the runs (mean over components, and the widest component), their ratio, and
whether it is within 15 %.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.wire import analyst_pb2
from uldp.collector.analyst.preview import preview_message
from uldp.collector.planner import QuerySpec
from uldp.collector.simulation.demo import DEMO_QUERIES
from uldp.collector.simulation.fleet import dataset_for_query
from uldp.collector.simulation.simulate import simulate_reps

OUT = Path(__file__).resolve().parent / "results" / "preview_width.md"
DEVICES, EPSILON, SAMPLES = 20_000, 2.0, 100


def one_query(i: int, kind: str, dim: int, dist: str, runs: int) -> dict:
    users = len(range(i, DEVICES, len(DEMO_QUERIES)))
    p = preview_message(analyst_pb2.CreateQueryRequest(
        kind=kind, epsilon=EPSILON, dataset=f"demo-{kind}", users=users, samples=SAMPLES,
        dim=dim, bound=1.0))
    spec = QuerySpec(kind=kind, epsilon=EPSILON, users=users, samples=SAMPLES, dim=dim,
                     bound=1.0)
    widths = []
    for r in range(runs):
        data = dataset_for_query(kind, dist, SAMPLES, dim, 1.0, 1000 * i + r)
        est = simulate_reps(spec, data, RandomSource.seeded(f"preview:{i}:{r}"), reps=1).last
        widths.append(est.ci_high - est.ci_low)
    w = np.median(np.array(widths), axis=0)  # per component, over the runs
    pred = 2 * np.array(p.likely_half_width)
    noise = 2 * np.array(p.half_width)
    worst = 2 * np.array(p.worst_half_width) if p.worst_half_width else None
    return {"kind": f"{kind} (d={dim}, {dist})", "users": users, "method": p.method,
            "pred": float(pred.mean()), "noise": float(noise.mean()),
            "simulated": p.simulated_half_width is not None,
            "worst": float(worst.mean()) if worst is not None else None,
            "real": float(w.mean()), "real_max": float(w.max()),
            "ratio": float(pred.mean() / w.mean()),
            "ratio_worst_component": float(np.max(np.abs(pred / w - 1)))}


def table(rows: list[dict], runs: int) -> str:
    out = [f"| query | users | method (auto) | noise prediction | likely width (shown) | "
           f"at most | realised width, median of {runs} | widest component | likely / "
           "realised | within 15 % |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ok = abs(r["ratio"] - 1) <= 0.15
        worst = f"{r['worst']:.4f}" if r["worst"] is not None else "–"
        shown = f"{r['pred']:.4f}" + (" (simulated)" if r["simulated"] else "")
        out.append(f"| {r['kind']} | {r['users']} | {r['method']} | {r['noise']:.4f} | {shown} "
                   f"| {worst} "
                   f"| {r['real']:.4f} | {r['real_max']:.4f} | {r['ratio']:.3f} | "
                   f"{'yes' if ok else '**no**'} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-write", action="store_true", help="print only")
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = [one_query(i, kind, dim, dist, a.runs)
            for i, (kind, dim, dist) in enumerate(DEMO_QUERIES)]
    text = table(rows, a.runs)
    print(text)
    print(f"({time.perf_counter() - t0:.0f} s)")
    if not a.no_write:
        OUT.write_text(
            "# Preview against realised interval widths (the demo's queries)\n\n"
            "`python bench/preview_width.py` (see its docstring). Widths are of 95 % "
            "intervals, averaged over the components of a query; \"at most\" is the preview's "
            "bound with the widest spread of users the support allows.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
