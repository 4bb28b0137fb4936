#!/usr/bin/env python3
"""``auto`` on the real populations of ``bench/realdata_ldp.py``: coverage and MSE / predicted.

    python bench/frontier_real.py --reps 300         # -> bench/results/frontier_real.{json,md}
    python bench/frontier_real.py --reps 1000 --populations flights --kinds mean --eps 2
    python bench/frontier_real.py --table            # rewrite the .md from the .json

For every population (flights, insteval, movielens, the synthetic skewed and concentrated
ones), kind (mean, distribution) and ε ∈ {0.5, 1, 2, 8}: ``method="auto"`` over all users,
repeated, through ``uldp.collector.simulation.own_data.run_users`` (the production device and
collector code), its MSE against the same estimand without privacy, MSE / predicted (the explicit
formula with the users' actual statistic mean and variance) and the share of 95 % intervals
holding the truth. Issue 16 asks coverage in [0.93, 0.97] and MSE / predicted in [0.8, 1.25].

Resumable: every cell keeps running sums in ``frontier_real.json``; a later run with a larger
``--reps`` adds repetitions (seeds continue where the cell stopped) to the cells it names.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realdata_ldp import population

from uldp.client.kinds.means import hadamard_rows
from uldp.client.randomness import RandomSource
from uldp.collector.learning.runner import PaddedUsers, run_spec
from uldp.collector.planner import QuerySpec
from uldp.collector.simulation.own_data import UserData, run_users

RESULTS = Path(__file__).resolve().parent / "results"
EPS = (0.5, 1.0, 2.0, 8.0)
POPS = ("flights", "insteval", "movielens", "skewed", "concentrated")
KINDS = ("mean", "distribution")
NOTES = "## Outside the bands, and why"


def run_cell(name: str, kind: str, eps: float, reps: int, seed: int) -> dict[str, Any] | None:
    """``reps`` repetitions (seeds ``seed`` …) of ``auto`` on one cell, or None if the
    population has no such kind. A distribution's published values are clipped to [0, 1]
    (which only moves them toward the truth); its prediction is for the unbiased estimate
    before the clip, so the unclipped error (from ``extra["components"]``, the Hadamard
    coefficients of the unbiased frequencies) is kept beside it."""
    pop = population(name)
    if kind == "distribution":
        if pop["categories"] is None:
            return None
        res, err, cov, extra = _distribution(pop, eps, reps, seed)
    else:
        res = run_users(kind, UserData(pop["values"]), epsilon=eps, lo=pop["lo"],
                        hi=pop["hi"], reps=reps, seed=seed)
        err, cov, extra = np.array(res.sq_errors), res.coverage * reps, {}
    ran = res.method if res.method != "ssl" else f"ssl/{(res.auto or {}).get('single_stage')}"
    return {"reps": reps, "sum": float(err.sum()), "sumsq": float(np.sum(err * err)),
            "covered": cov, "predicted": float(res.predicted_mse), "ran": ran} | extra


def _distribution(pop: dict[str, Any], eps: float, reps: int, seed: int
                  ) -> tuple[Any, np.ndarray, float, dict[str, float]]:
    """``run_users``' repetitions of a distribution (its spec, its users, its seeds) keeping
    every estimate: the users are padded once (a call per repetition would pad the skewed
    population's 10^4-record users every time). The first repetition is checked against
    ``run_users`` itself."""
    data, A = UserData(pop["categories"]), len(pop["labels"])
    res = run_users("distribution", data, epsilon=eps, dim=A, reps=1, seed=seed)
    arrays = [np.asarray(v, dtype=np.float64) for v in data.values]
    users = PaddedUsers([a.reshape(len(a), 1) for a in arrays], data.labels)
    spec = QuerySpec(kind="distribution", epsilon=eps, users=len(arrays), samples=res.m_ref,
                     dim=A, bound=1.0, method="auto", seed=seed, query_id="own-data")
    clipped, raw, covered = [], [], 0.0
    modes: dict[str, int] = {}  # method hadamard: windows or fallback, per repetition
    for s in range(seed, seed + reps):
        est = run_spec(replace(spec, seed=s), users, None, RandomSource.seeded(f"own-data:{s}"))
        comp = np.asarray(est.extra["components"], dtype=np.float64)
        f = hadamard_rows(comp[None], comp.size)[0][:A]
        clipped.append(float(np.sum((est.values - res.truth) ** 2)))
        raw.append(float(np.sum((f - res.truth) ** 2)))
        covered += float(np.mean(est.covers(res.truth)))  # the share of its intervals
        mode = est.extra.get("hadamard", {}).get("mode")
        if mode:
            modes[mode] = modes.get(mode, 0) + 1
    if clipped[0] != res.sq_errors[0]:
        raise AssertionError("the repetitions differ from run_users'")
    return res, np.array(raw), covered, {"clipped_sum": float(np.sum(clipped))} | (
        {"modes": modes} if modes else {})


def merge(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    if old is None:
        return new
    out = dict(new)
    for key in ("reps", "sum", "sumsq", "covered", "clipped_sum"):
        if key in new:
            out[key] = old[key] + new[key]
    if "modes" in new or "modes" in old:
        modes = dict(old.get("modes", {}))
        for mode, n in new.get("modes", {}).items():
            modes[mode] = modes.get(mode, 0) + n
        out["modes"] = modes
    return out


def line(key: str, r: dict[str, Any]) -> str:
    name, kind, eps = key.split("|")
    c = r["reps"]
    mse = r["sum"] / c
    se = math.sqrt(max(r["sumsq"] - c * mse * mse, 0.0) / max(c - 1, 1) / c)
    cov = r["covered"] / c
    sd = math.sqrt(0.95 * 0.05 / c)
    ratio = mse / r["predicted"]
    flag = "" if 0.93 <= cov <= 0.97 and 0.8 <= ratio <= 1.25 else " ⚑"
    clip = f"{r['clipped_sum'] / c / r['predicted']:.2f}" if "clipped_sum" in r else "–"
    modes = r.get("modes", {})
    ran = r["ran"] + (" (" + ", ".join(f"{m} {n}" for m, n in sorted(modes.items())) + ")"
                      if modes else "")
    return (f"| {name} | {kind} | {float(eps):g} | {c} | {ran} | {mse:.3g} ± {se:.2g} | "
            f"{ratio:.2f} ± {2 * se / r['predicted']:.2f} | {clip} | "
            f"{cov:.3f} ± {2 * sd:.3f}{flag} |")


HEAD = ["| population | kind | ε | reps | auto ran | MSE ± SE | MSE / predicted ± 2 SE | "
        "clipped MSE / predicted | coverage ± 2 sd |", "|---|---|---|---|---|---|---|---|---|"]


def table(cells: dict[str, dict[str, Any]]) -> str:
    order = {(p, k, e): i for i, (p, k, e) in enumerate(itertools.product(POPS, KINDS, EPS))}

    def pos(key: str) -> int:
        p, k, e = key.split("|")
        return order.get((p, k, float(e)), len(order))

    rows = [line(key, cells[key]) for key in sorted(cells, key=pos)]
    out = sum(1 for r in rows if r.endswith("⚑ |"))
    return ("# auto on real populations (issue 16)\n\nGenerated by `bench/frontier_real.py` "
            "from `frontier_real.json` (repetitions per cell in the table; coverage: the "
            "share of the coordinate intervals holding the truth, ± two binomial sd at 0.95 "
            "over the repetitions). Distributions: MSE of the unbiased estimate, which the "
            "prediction describes; the published values are clipped to [0, 1], whose MSE "
            "(beside it) is smaller. ⚑: outside coverage [0.93, 0.97] or MSE / predicted "
            f"[0.8, 1.25] at the point estimate ({out} of {len(rows)} cells).\n\n"
            + "\n".join(HEAD + rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300, help="repetitions each named cell reaches")
    ap.add_argument("--populations", nargs="+", default=list(POPS))
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    ap.add_argument("--eps", nargs="+", type=float, default=list(EPS))
    ap.add_argument("--out", default=str(RESULTS / "frontier_real.json"))
    ap.add_argument("--table", action="store_true", help="only rewrite the .md from --out")
    a = ap.parse_args(argv)
    out = Path(a.out)
    cells: dict[str, dict[str, Any]] = json.loads(out.read_text()) if out.exists() else {}
    if not a.table:
        for name, kind, eps in itertools.product(a.populations, a.kinds, a.eps):
            key = f"{name}|{kind}|{eps:g}"
            have = cells.get(key, {}).get("reps", 0)
            if have >= a.reps:
                continue
            res = run_cell(name, kind, eps, a.reps - have, seed=have)
            if res is None:
                continue
            cells[key] = merge(cells.get(key), res)
            out.write_text(json.dumps(cells, indent=1))
            print(line(key, cells[key]), flush=True)
    write_table(out.with_suffix(".md"), table(cells))
    return 0


def write_table(md: Path, text: str) -> None:
    """Write ``text`` to ``md``, keeping the hand-written notes (from ``NOTES`` on) that the
    file already holds, and print it."""
    old = md.read_text() if md.exists() else ""
    notes = old[old.index(NOTES):] if NOTES in old else ""
    md.write_text(text + ("\n" + notes if notes else ""))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
