#!/usr/bin/env python3
"""User-level LDP on real, heterogeneous users: auto against every method.

    python bench/realdata_ldp.py                      # the full table (~30-60 min, 2 procs)
    python bench/realdata_ldp.py --quick              # a few reps, for a smoke run

For every population (the real datasets of ``uldp.collector.simulation.realdata``, a synthetic one
with skewed counts 1..10^4 and spread-out user means, and a concentrated large-m one where
two-stage should win), kind (mean, distribution) and ε, each method runs ``--reps`` times
over all users with fresh noise (seeded, common random numbers across methods) through
``uldp.collector.simulation.own_data.run_users`` — the production device and collector code. Printed
and written to ``bench/results/realdata.md`` (section "Local DP"): MSE against the same
estimand computed without privacy, MSE / predicted (the explicit formula with the users'
actual statistic variance), 95 % interval coverage, and auto / best.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import sys
import time
from pathlib import Path

import numpy as np

from uldp.collector.simulation.own_data import UserData, run_users
from uldp.collector.simulation.realdata import available, load

RESULTS = Path(__file__).resolve().parent / "results"
EPS = (0.5, 1.0, 2.0, 8.0)
METHODS = ("auto", "ssl", "two-stage", "two-stage-paper", "baseline-b", "baseline-a")


def skewed(seed: int = 11, n: int = 3000) -> dict:
    """Counts log-uniform on 1..10^4; user rates spread by a Beta(2, 5); values 0/1."""
    g = np.random.default_rng(seed)
    counts = np.floor(10 ** g.uniform(0, 4, n)).astype(int)
    p = g.beta(2, 5, n)
    vals = [(g.random(c) < pi).astype(float) for c, pi in zip(counts, p, strict=True)]
    cats = [g.choice(5, size=c, p=_dirichlet(g, 5)) for c in counts]
    return {"name": "skewed (synthetic)", "values": vals, "lo": 0.0, "hi": 1.0,
            "categories": cats, "labels": [str(k) for k in range(5)],
            "note": "3000 users, counts log-uniform 1..10^4 (median ~100), user rates "
                    "Beta(2, 5); categories: per-user Dirichlet(3·p) around p = (.4, .25, "
                    ".15, .12, .08)"}


def _dirichlet(g: np.random.Generator, k: int) -> np.ndarray:
    base = np.array([0.4, 0.25, 0.15, 0.12, 0.08])[:k]
    return g.dirichlet(3 * base / base.sum())


def concentrated(seed: int = 12, n: int = 4000, m: int = 1000) -> dict:
    """Equal counts m = 1000, every user rate 0.3 (the paper's i.i.d. model)."""
    g = np.random.default_rng(seed)
    vals = [(g.random(m) < 0.3).astype(float) for _ in range(n)]
    p = np.array([0.5, 0.3, 0.1, 0.05, 0.05])
    cats = [g.choice(5, size=m, p=p) for _ in range(n)]
    return {"name": "concentrated (synthetic)", "values": vals, "lo": 0.0, "hi": 1.0,
            "categories": cats, "labels": [str(k) for k in range(5)],
            "note": f"{n} users x {m} samples, all from one law (rate 0.3; categories "
                    "(.5, .3, .1, .05, .05))"}


def real(name: str) -> dict:
    d = load(name)
    return {"name": name, "values": list(d.users), "lo": d.lo, "hi": d.hi,
            "categories": list(d.categories) if d.categories is not None else None,
            "labels": list(d.category_labels or ()),
            "note": f"{d.n_users} users, rows per user {d.counts.min()}–{d.counts.max()} "
                    f"(median {int(np.median(d.counts))}); {d.description}"}


def population(name: str) -> dict:
    if name == "skewed":
        return skewed()
    if name == "concentrated":
        return concentrated()
    return real(name)


def cell(args: tuple) -> dict:
    """All methods over one (population, kind, ε) cell."""
    pop_name, kind, eps, reps, methods = args
    pop = population(pop_name)
    if kind == "distribution":
        data, lo, hi = UserData(pop["categories"]), None, None
        dim = len(pop["labels"])
    else:
        data, lo, hi, dim = UserData(pop["values"]), pop["lo"], pop["hi"], None
    out = {"population": pop_name, "kind": kind, "epsilon": eps, "methods": {}}
    for method in methods:
        n_reps = max(reps // 4, 10) if method == "baseline-a" else reps
        auto = out["methods"].get("auto", {})
        # the same run only if auto ran exactly this method's default spec
        same = (auto.get("ran") == method and auto.get("mode", "default") == "default"
                and auto.get("stage1_share") in (None, 0.5))
        if same and n_reps == auto["reps"]:
            out["methods"][method] = dict(out["methods"]["auto"])  # identical seeds: same run
            continue
        t0 = time.perf_counter()
        # one call per method: the exact estimand is computed once, rep r uses seed r
        # (common seeds across methods)
        res = run_users(kind, data, epsilon=eps, lo=lo, hi=hi, method=method, seed=0,
                        dim=dim, reps=n_reps)
        err = np.array(res.sq_errors)
        out["methods"][method] = {"mse": float(err.mean()),
                                  "mse_se": float(err.std() / np.sqrt(err.size)),
                                  "coverage": res.coverage, "reps": n_reps,
                                  "predicted": res.predicted_mse, "ran": res.method,
                                  "stage1_share": (res.auto or {}).get("stage1_share"),
                                  "mode": (res.auto or {}).get("mode"),
                                  "seconds": time.perf_counter() - t0}
    return out


def table(results: list[dict], pops: dict) -> str:
    lines = []
    for pop_name in dict.fromkeys(r["population"] for r in results):
        lines += [f"### {pop_name}", "", pops[pop_name], ""]
        for kind in ("mean", "distribution"):
            rows = [r for r in results if r["population"] == pop_name and r["kind"] == kind]
            if not rows:
                continue
            methods = list(rows[0]["methods"])
            lines += [f"**{kind}** — MSE (MSE / predicted; 95 % coverage)", "",
                      "| ε | auto ran | " + " | ".join(methods) + " | auto / best |",
                      "|---|---|" + "---|" * len(methods) + "---|"]
            for r in rows:
                ms = r["methods"]
                best_name = min((k for k in ms if k != "auto"), key=lambda k: ms[k]["mse"])
                best, best_se = ms[best_name]["mse"], ms[best_name]["mse_se"]
                cells = []
                for m in methods:
                    v = ms[m]
                    ratio = v["mse"] / v["predicted"] if v["predicted"] else float("nan")
                    cells.append(f"{v['mse']:.3g} ({ratio:.2f}; {v['coverage']:.3f})")
                ratio = ms["auto"]["mse"] / best
                # ± two standard errors of the ratio (the two MSEs' relative errors combined)
                rel = 2 * np.hypot(ms["auto"]["mse_se"] / ms["auto"]["mse"], best_se / best)
                if best_name == ms["auto"]["ran"]:
                    verdict = f"{ratio:.2f} (auto ran the best)"
                else:
                    verdict = f"{ratio:.2f} ± {ratio * rel:.2f} (best: {best_name})"
                ran = ms["auto"]["ran"]
                if ms["auto"].get("stage1_share") and ran == "two-stage":
                    ran += f" (stage I {ms['auto']['stage1_share']:.2g})"
                if ms["auto"].get("mode") not in (None, "default"):
                    ran += f", {ms['auto']['mode']}"
                lines.append(f"| {r['epsilon']:g} | {ran} | " + " | ".join(cells)
                             + f" | {verdict} |")
            lines.append("")
    return "\n".join(lines)


def write(md: str, header: str) -> None:
    path = RESULTS / "realdata.md"
    text = path.read_text() if path.exists() else "# Real-data benchmarks\n"
    block = f"## Local DP: auto against every method\n\n{header}\n\n{md}\n"
    pat = re.compile(r"## Local DP: auto against every method\n.*?(?=\n## |\Z)", re.S)
    text = pat.sub(block.rstrip("\n"), text) if pat.search(text) else text.rstrip() + "\n\n" + block
    path.write_text(text)


def _reps_note(results: list[dict]) -> str:
    """'200 repetitions per cell (movielens: 1000; concentrated: 40)' from the cells."""
    per_pop: dict[str, set[int]] = {}
    for r in results:
        per_pop.setdefault(r["population"], set()).add(r["methods"]["auto"]["reps"])
    counts = [n for ns in per_pop.values() for n in ns]
    common = max(set(counts), key=counts.count)
    other = [f"{p}: {'/'.join(map(str, sorted(ns)))}" for p, ns in per_pop.items()
             if ns != {common}]
    return f"{common} repetitions per cell" + (f" ({'; '.join(other)})" if other else "")


def _save(results: list[dict], pops: dict, seconds: float, done: bool) -> None:
    header = (f"Generated by `bench/realdata_ldp.py` ({_reps_note(results)}; "
              f"{time.strftime('%Y-%m-%d')}, last run {seconds:.0f} s"
              + ("" if done else f"; partial: {len(results)} cells so far") + "). Each cell: "
              "every method over all users, fresh seeded noise per repetition (common seeds "
              "across methods; baseline-a with a quarter of the repetitions). MSE against "
              "the same estimand without privacy (mean of "
              "user means; mean of user category frequencies); *predicted*: the explicit "
              "formula with the users' actual statistic variance; coverage: share of 95 % "
              "intervals (every coordinate) holding the truth; *auto / best*: auto's MSE over "
              "the best method's, ± two standard errors when they are different runs. "
              "m_ref = the median count.")
    write(table(results, pops), header)
    (RESULTS / "realdata_ldp.json").write_text(json.dumps(results, indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="10 reps, one ε, no writing")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--reps-concentrated", type=int, default=40,
                    help="repetitions of the large concentrated population (4M samples)")
    ap.add_argument("--populations", nargs="+",
                    default=["flights", "insteval", "movielens", "skewed", "concentrated"])
    ap.add_argument("--kinds", nargs="+", default=["mean", "distribution"])
    ap.add_argument("--resume", action="store_true",
                    help="keep the cells already in results/realdata_ldp.json, run the rest")
    ap.add_argument("--redo", action="store_true",
                    help="with --resume: run this invocation's cells again and replace them "
                         "(e.g. more --reps for one population)")
    a = ap.parse_args(argv)
    names = [p for p in a.populations if p in ("skewed", "concentrated") or available(p)]
    reps, eps = (10, (1.0,)) if a.quick else (a.reps, EPS)
    jobs = [(p, k, e, reps if p != "concentrated" else min(reps, a.reps_concentrated), METHODS)
            for p in names for k in a.kinds for e in eps]
    t0 = time.time()
    results: list[dict] = []
    if a.resume and (RESULTS / "realdata_ldp.json").exists():
        results = json.loads((RESULTS / "realdata_ldp.json").read_text())
        todo = {(j[0], j[1], j[2]) for j in jobs}
        if a.redo:
            results = [r for r in results if (r["population"], r["kind"], r["epsilon"]) not in todo]
        done = {(r["population"], r["kind"], r["epsilon"]) for r in results}
        jobs = [j for j in jobs if (j[0], j[1], j[2]) not in done]
        print(f"resuming: {len(results)} cells kept, {len(jobs)} to run", flush=True)
    pops = {p: population(p)["note"]
            for p in dict.fromkeys([r["population"] for r in results] + names)}
    order = {(p, k, e): i for i, (p, k, e) in enumerate(
        (p, k, e) for p in pops for k in ("mean", "distribution") for e in EPS)}
    total = len(results) + len(jobs)
    with mp.Pool(a.procs) as pool:
        for res in pool.imap(cell, jobs):
            results.append(res)
            results.sort(key=lambda r: order.get((r["population"], r["kind"], r["epsilon"]), 0))
            ms = res["methods"]
            print(json.dumps({k: res[k] for k in ("population", "kind", "epsilon")} | {
                m: round(v["mse"], 6) for m, v in ms.items()} | {"auto_ran": ms["auto"]["ran"]}),
                flush=True)
            if not a.quick:  # partial tables survive an interrupted run
                _save(results, pops, time.time() - t0, done=len(results) == total)
    if not a.quick and not jobs:  # nothing left to run: rewrite the tables from the cells
        _save(results, pops, time.time() - t0, done=True)
    print(table(results, pops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
