#!/usr/bin/env python3
"""The distribution frontier (issue 26): ``auto`` — the Hadamard windows or the one-record
oracle — against the real one-record peers, on users alike, users who differ and a mixture.

    pip install -e '.[bench]'                                  # multi-freq-ldpy (the peers)
    python bench/frontier.py --distribution --quick            # a few cells, 2 reps
    nice -n 10 python bench/frontier.py --distribution --reps 10   # the whole grid
    python bench/frontier.py --distribution --table            # rewrite the .md from the .json
    python bench/frontier_distribution.py --model   # the spread rule's P(fallback), no runs

Grid: k ∈ {8, 32, 256} categories, m ∈ {10, 100, 1000} records per user, ε ∈ {0.5, 1, 2, 8},
n = 10^5 users; populations (``bench/frontier.py``'s laws): *alike* — every record of every
user from Zipf(1.1); *differ* — each user puts 70 % of its records on its own category
(drawn from that law), the rest as the law; *mixture* — half the users of each. Every cell:
``method="auto"`` through the production code (planner, program phases, the device function
``compute_reports``, the collector's accumulators), the users handed to the device as their
records (a one-record sampling task gets the one record the bench sampled for the user, which
has the device's own law; a two-record task, hadamard's probe, the user's records).
Against the same estimand — the mean over users of their category
frequencies — the table gives auto's published MSE (its simplex projection) against the
peers' (multi-freq-ldpy's GRR, OUE and SS clients, batched and estimated as its aggregators
do, ``bench/frontier_peers.py``; *best peer* chosen after the fact), the ratio with ± two
standard errors, and the honesty of auto's unbiased estimate: its MSE over the predicted
(``plan.predicted_mse`` with the users' actual statistic mean and variance) and the share of
its 95 % intervals (every category) holding the truth.

Resumable: running sums per cell in ``bench/results/frontier_distribution.json``,
checkpointed after every repetition; a later run with more ``--reps`` continues the cells.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontier import CHUNK, draw_users, sample_records
from frontier_peers import adp_choice, check, dist_peers

from uldp.client.hadamard import next_pow2
from uldp.client.kinds.means import hadamard_rows
from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import MeanEstProgram
from uldp.collector.programs.driver import run_program

RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "frontier_distribution.json"
KS = (8, 32, 256)
MS = (10, 100, 1000)
EPS = (0.5, 1.0, 2.0, 8.0)
POPS = ("alike", "differ", "mixture")
N = 100_000
ALGS = ("auto", "GRR", "OUE", "SS")


def users_of(pop: str, n: int, m: int, k: int, g: np.random.Generator) -> dict[str, Any]:
    """One repetition's users (counts per category) and the estimand."""
    if pop == "mixture":
        a = draw_users("distribution", "identical", n - n // 2, m, k, g)["counts"]
        b = draw_users("distribution", "differ", n // 2, m, k, g)["counts"]
        counts = np.concatenate([a, b])
        return {"counts": counts, "truth": (counts / m).mean(axis=0)}
    return draw_users("distribution", "identical" if pop == "alike" else "differ", n, m, k, g)


def records_of(counts: np.ndarray) -> np.ndarray:
    """Every user's records (its categories, in order) as a float matrix."""
    n, k = counts.shape
    m = int(counts[0].sum())
    cats = np.tile(np.arange(k, dtype=np.float64), n)
    return np.repeat(cats, counts.ravel()).reshape(n, m)


def run_auto(spec: QuerySpec, users: dict[str, Any], items: np.ndarray, rng: RandomSource
             ) -> Estimate:
    """``spec`` through the production program; a record-sampling task gets each user's
    sampled record, every other task the user's records."""
    program = MeanEstProgram(spec)

    def privatize(slots: np.ndarray, task: Any, offsets: Any, acc: Any) -> None:
        # one sampled record (the device's law); two or more (hadamard's probe): the records
        sampling = task.records == 1 and (
            task.method == "oracle" or (task.method == "hadamard" and task.stage == 1))
        for start in range(0, slots.size, CHUNK):
            idx = slots[start:start + CHUNK]
            X = items[idx, None].astype(np.float64) if sampling \
                else records_of(users["counts"][idx])
            acc.add(compute_reports(task, X, rng, exact=False), idx)
    return Estimate.from_dict(run_program(program, privatize))


def one_rep(pop: str, k: int, m: int, eps_list: list[float], rep: int, n: int
            ) -> dict[float, dict[str, Any]]:
    g = np.random.default_rng([rep, m, k, POPS.index(pop), 26])
    users = users_of(pop, n, m, k, g)
    items = sample_records(users["counts"], g)
    truth = users["truth"]
    K = next_pow2(k)
    Y = hadamard_rows(users["counts"] / m, K)
    stat_mean, stat_var = Y.mean(axis=0), Y.var(axis=0)
    sample_var = np.maximum(1.0 / K - stat_mean**2, 0.0)  # φ_c = ±1/√K, pooled over records
    out = {}
    for eps in eps_list:
        spec = QuerySpec(kind="distribution", epsilon=eps, users=n, samples=m, dim=k, seed=rep)
        plan = compile_query(spec)
        rng = RandomSource.seeded(f"frontier-dist:{pop}:{k}:{m}:{eps:g}:{rep}")
        t0 = time.process_time()
        est = run_auto(spec, users, items, rng)
        secs = time.process_time() - t0
        comp = np.asarray(est.extra["components"], dtype=np.float64)
        raw = hadamard_rows(comp[None], comp.size)[0][:k]
        ran = est.extra.get("hadamard", {}).get("mode")
        predicted = plan.predicted_mse(sample_var, stat_var, stat_mean)
        z = (np.asarray(est.values, dtype=np.float64) - truth) / est.std_error
        res: dict[str, Any] = {
            "auto": _sq(est.extra["projected"], truth), "auto_raw": _sq(raw, truth),
            "covered": float(np.mean(est.covers(truth))), "predicted": predicted,
            "z2": float(np.mean(z**2)),
            "own": _own_prediction(plan, ran, sample_var, stat_var, stat_mean, predicted),
            "ran": plan.spec.method + (f"/{ran}" if ran else ""), "secs": secs}
        pseed = rep * 1_000_003 + int(eps * 10) * 1009 + k * 17 + m + 31 * POPS.index(pop) + 7
        for name, (v, _s) in dist_peers(items, k, eps, pseed).items():
            if name in ALGS:
                res[name] = _sq(v, truth)
        out[eps] = res
    return out


def _own_prediction(plan: Any, ran: str | None, sample_var: np.ndarray,
                    stat_var: np.ndarray, stat_mean: np.ndarray, predicted: float) -> float:
    """The predicted raw MSE of the outcome the run had: a Hadamard run's windows' or
    fallback's own error (``outcomes()``, through the output transform), not the mixture
    ``predicted`` weighs by P(window); any other method's is ``predicted`` itself."""
    if ran not in ("window", "fallback"):
        return predicted
    window, fallback, _ = plan.method.outcomes(plan, sample_var, stat_var, stat_mean)
    v = fallback if ran == "fallback" or window is None else window
    T = plan.kind.transform(plan.template, plan.n_components)
    return float(np.sum(v if T is None else np.square(np.asarray(T)) @ v))


def _sq(v: Any, truth: np.ndarray) -> float:
    return float(np.sum((np.asarray(v, dtype=np.float64) - truth) ** 2))


# ---- running sums ----------------------------------------------------------------------
def _add(cell: dict[str, Any], res: dict[str, Any]) -> None:
    cell["reps"] = cell.get("reps", 0) + 1
    for a in (*ALGS, "auto_raw"):
        s = cell.setdefault("stats", {}).setdefault(a, [0.0, 0.0])
        s[0] += res[a]
        s[1] += res[a] ** 2
    for key in ("covered", "predicted", "secs"):
        cell[key] = cell.get(key, 0.0) + res[key]
    cell.setdefault("ran", {})
    cell["ran"][res["ran"]] = cell["ran"].get(res["ran"], 0) + 1
    commits = cell.setdefault("commits", {})
    commits[COMMIT] = commits.get(COMMIT, 0) + 1
    # per outcome: runs, coverage, mean z², raw squared error, its own prediction
    by = cell.setdefault("by_ran", {}).setdefault(res["ran"], [0, 0.0, 0.0, 0.0, 0.0])
    for i, v in enumerate((1, res["covered"], res["z2"], res["auto_raw"], res["own"])):
        by[i] += v


def _commit() -> str:
    """The code the repetitions run on: the last commit that changed the code under test
    (``client/``, ``collector/``; a bench-only commit leaves it), ``+dirty`` when the
    working tree's differs from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "log", "-1", "--format=%h", "--abbrev=7", "--",
                               "client", "collector"], cwd=root, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "client", "collector"],
                               cwd=root, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty.strip() else "")


COMMIT = _commit()


def _mse(cell: dict[str, Any], a: str) -> tuple[float, float]:
    c = cell["reps"]
    s1, s2 = cell["stats"][a]
    mse = s1 / c
    return mse, math.sqrt(max(s2 / c - mse * mse, 0.0) / max(c - 1, 1))


def groups_of(a: argparse.Namespace) -> list[tuple[str, int, int, list[float]]]:
    """The cells to run, as (users, k, m, [ε]) — one draw of users serves the ε of one
    (users, k, m): ``--cells`` (``users|k|m|ε`` keys, in the order given) or the grid."""
    if not a.cells:
        return [(p, k, m, list(a.eps)) for p, k, m in itertools.product(a.populations, a.ks,
                                                                          a.ms)]
    groups: dict[tuple[str, int, int], list[float]] = {}
    for key in a.cells:
        try:
            pop, k, m, e = key.split("|")
            if pop not in POPS:
                raise ValueError(pop)
            groups.setdefault((pop, int(k), int(m)), []).append(float(e))
        except ValueError:
            raise SystemExit(f"--cells: {key!r} is not users|k|m|ε with users in {POPS}"
                             ) from None
    return [(p, k, m, es) for (p, k, m), es in groups.items()]


def run_grid(a: argparse.Namespace, out: Path) -> None:
    """Repetition by repetition over the cells (a partial run covers every cell). A stale
    cell (``--fresh``: every named cell with repetitions on other code than the current)
    starts afresh, its old repetitions dropped."""
    cells: dict[str, dict[str, Any]] = json.loads(out.read_text()) if out.exists() else {}
    groups = groups_of(a)
    for pop, k, m, es in groups:
        for e in es:
            key = f"{pop}|{k}|{m}|{e:g}"
            other = set(cells.get(key, {}).get("commits", {})) - {COMMIT}
            if key in cells and ((a.fresh and other) or cells[key].get("stale")):
                del cells[key]
    for target, (pop, k, m, es) in itertools.product(range(1, a.reps + 1), groups):
        while True:
            have = {e: cells.get(f"{pop}|{k}|{m}|{e:g}", {}).get("reps", 0) for e in es}
            todo = [e for e in es if have[e] < target]
            if not todo:
                break
            rep = min(have[e] for e in todo)
            todo = [e for e in todo if have[e] == rep]
            t0 = time.time()
            for e, res in one_rep(pop, k, m, todo, rep, a.users).items():
                cell = cells.setdefault(f"{pop}|{k}|{m}|{e:g}", {"n": a.users})
                _add(cell, res)
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(cells, indent=1))
            tmp.replace(out)
            print(f"{pop} k={k} m={m} ε={todo} rep {rep}: {time.time() - t0:.0f} s", flush=True)


# ---- the table -------------------------------------------------------------------------
def row(key: str, cell: dict[str, Any]) -> str:
    pop, k, m, eps = key.split("|")
    c = cell["reps"]
    auto, auto_se = _mse(cell, "auto")
    peers = {p: _mse(cell, p) for p in ("GRR", "OUE", "SS")}
    best = min(peers, key=lambda p: peers[p][0])
    b, b_se = peers[best]
    gain = b / auto
    gain_sd = gain * math.hypot(auto_se / auto, b_se / b)
    pub = adp_choice(int(k), float(eps))
    p, p_se = peers[pub]
    pgain = p / auto
    pgain_sd = pgain * math.hypot(auto_se / auto, p_se / p)
    ratio, ratio_2se, cov, cov_2sd = honesty(cell, int(k))
    ran = ", ".join(f"{r} {n}" if len(cell["ran"]) > 1 else r
                    for r, n in sorted(cell["ran"].items()))
    if cell.get("stale"):
        ran += " † stale"
    commits = cell.get("commits", {})
    code = ", ".join(f"{h} {n}" if len(commits) > 1 else h for h, n in commits.items()) or "?"
    return (f"| {pop} | {k} | {m} | {float(eps):g} | {c} | {code} | {ran} | "
            f"{auto:.3g} ± {auto_se:.2g} | "
            f"{pub} {p:.3g} | {pgain:.2f} ± {2 * pgain_sd:.2f} | "
            f"{best} {b:.3g} | **{gain:.2f}** ± {2 * gain_sd:.2f} | {ratio:.2f} ± "
            f"{ratio_2se:.2f}{_flag(ratio, ratio_2se, 0.8, 1.25)} | {cov:.3f} ± {cov_2sd:.3f}"
            f"{_flag(cov, cov_2sd, 0.93, 0.97)} | {cell['secs'] / c:.1f} |")


def honesty(cell: dict[str, Any], k: int) -> tuple[float, float, float, float]:
    """Auto's raw MSE over the predicted, ± two standard errors, and its coverage, ± two
    binomial standard deviations at 0.95. The MSE's standard error is the larger of the
    repetitions' own and the model's: a sum of ``k − 1`` squared normal errors of equal
    variance has relative standard deviation ``√(2/(k − 1))`` per repetition (a few
    repetitions can look steady by chance)."""
    c = cell["reps"]
    raw, raw_se = _mse(cell, "auto_raw")
    pred = cell["predicted"] / c
    rel = max(raw_se / raw if raw > 0 else 0.0, math.sqrt(2.0 / max(k - 1, 1) / c))
    cov = cell["covered"] / c
    return raw / pred, 2 * rel * raw / pred, cov, 2 * math.sqrt(0.95 * 0.05 / (c * k))


def _flag(x: float, two_se: float, lo: float, hi: float) -> str:
    """``‼``: outside ``[lo, hi]`` by more than two standard errors; ``⚑``: outside at the
    point estimate only; nothing: inside."""
    if x - two_se > hi or x + two_se < lo:
        return " ‼"
    return "" if lo <= x <= hi else " ⚑"


HEAD = ("| users | k | m | ε | reps | code (commit reps) | auto ran | auto MSE ± SE | "
        "public-parameter peer (ADP) | public peer / auto ± 2 SE | best peer (after the fact) | "
        "best peer / auto ± 2 SE | auto raw MSE / predicted ± 2 SE | coverage ± 2 sd | "
        "s per run |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def by_outcome(keys: list[str], cells: dict[str, dict[str, Any]]) -> str:
    """The flagged cells' repetitions split by what auto ran: per outcome the runs, the
    coverage, the mean ``z² = ((p̂ − p)/se)²`` over the categories (1 for an honest interval)
    and the raw MSE over the outcome's own prediction (a Hadamard run: the windows' or the
    fallback's error, not the mixture)."""
    lines = ["| cell | reps | outcome | runs | coverage | mean z² | raw MSE / own prediction |",
             "|---|---|---|---|---|---|---|"]
    for key in keys:
        for ran, (n, cov, z2, sq, own) in sorted(cells[key].get("by_ran", {}).items()):
            pop, k, m, e = key.split("|")
            lines.append(f"| {pop} k={k} m={m} ε={e} | {cells[key]['reps']} | {ran} | {n} | "
                         f"{cov / n:.3f} | {z2 / n:.2f} | {sq / own:.2f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def report(cells: dict[str, dict[str, Any]]) -> str:
    order = {(p, k, m, e): i for i, (p, k, m, e) in
             enumerate(itertools.product(POPS, KS, MS, EPS))}

    def pos(key: str) -> int:
        p, k, m, e = key.split("|")
        return order.get((p, int(k), int(m), float(e)), len(order))

    keys = sorted(cells, key=pos)
    lines = [HEAD] + [row(key, cells[key]) for key in keys]
    worse = [key for key in keys if _worse(cells[key])]
    worse_pub = [key for key in keys if _worse(cells[key], key, public=True)]
    worse_best = [key for key in keys if _worse(cells[key], bar=1.25)]
    flags = sum(1 for line in lines[1:] if "⚑" in line or "‼" in line)
    sure = [key for key, line in zip(keys, lines[1:], strict=True) if "‼" in line]
    gains = _done_when(cells)
    text = (f"{len(keys)} cells; auto worse than 1.1× the best one-record peer by more than "
            f"2 SE in {len(worse)} ({', '.join(worse) or 'none'}); worse than 1.1× the "
            f"public-parameter peer (multi-freq-ldpy's ADP: GRR or OUE by (k, ε)) by more "
            f"than 2 SE in {len(worse_pub)} ({', '.join(worse_pub) or 'none'}); worse than "
            f"1.25× the best peer by more than 2 SE in {len(worse_best)} "
            f"({', '.join(worse_best) or 'none'}); coverage or MSE / "
            f"predicted outside [0.93, 0.97] / [0.8, 1.25] at the point estimate in {flags}, "
            f"by more than two standard errors (‼) in {len(sure)} "
            f"({', '.join(sure) or 'none'}).\n\n{gains}\n\n")
    stale = [f"{key} ({cells[key]['stale']})" for key in keys if cells[key].get("stale")]
    foot = ("\n\n† stale: measured on older code; a run naming the cell starts it afresh: "
            + "; ".join(stale) + "\n") if stale else ""
    diag = by_outcome([key for key, line in zip(keys, lines[1:], strict=True)
                       if "⚑" in line or "‼" in line], cells)
    if diag:
        foot += ("\n\nThe flagged cells by outcome (cells run since the outcomes were "
                 "recorded):\n\n" + diag + "\n")
    return text + "\n".join(lines) + foot


def _done_when(cells: dict[str, dict[str, Any]]) -> str:
    """Issue 26's gains on users alike: the cells each asks for and whether they hold at
    the point estimate."""
    asks = [("≥ 10× at m = 1000, k = 8, every ε", 10.0, [(8, 1000, e) for e in EPS]),
            ("≥ 10× at m = 1000, k = 32, ε ≥ 1", 10.0, [(32, 1000, e) for e in EPS if e >= 1]),
            ("≥ 3× at m = 100, k ≤ 32, ε ≤ 2", 3.0,
             [(k, 100, e) for k in (8, 32) for e in EPS if e <= 2]),
            ("≥ 3× at k = 256, m = 1000, ε ≥ 1", 3.0, [(256, 1000, e) for e in EPS if e >= 1])]
    out = ["Issue 26's gains on users alike (best peer / auto at the point estimate):", ""]
    for text, need, want in asks:
        got = []
        for k, m, e in want:
            cell = cells.get(f"alike|{k}|{m}|{e:g}")
            if cell is None:
                got.append(f"k={k} m={m} ε={e:g}: not run")
                continue
            auto = _mse(cell, "auto")[0]
            best = min(_mse(cell, p)[0] for p in ("GRR", "OUE", "SS"))
            got.append(f"ε={e:g} k={k}: {best / auto:.1f}{'' if best / auto >= need else ' ✗'}"
                       + (" (stale †)" if cell.get("stale") else ""))
        out.append(f"* {text}: " + ", ".join(got))
    return "\n".join(out)


def _worse(cell: dict[str, Any], key: str = "", public: bool = False, bar: float = 1.1
           ) -> bool:
    """auto's MSE above ``bar`` times the best peer's (``public``: the public-parameter
    peer's, ADP's choice at the cell's (k, ε) from ``key``) by more than two standard
    errors."""
    auto, auto_se = _mse(cell, "auto")
    if public:
        _, k, _, eps = key.split("|")
        b, b_se = _mse(cell, adp_choice(int(k), float(eps)))
    else:
        b, b_se = min((_mse(cell, p) for p in ("GRR", "OUE", "SS")), key=lambda x: x[0])
    ratio = auto / b
    return ratio - 2 * ratio * math.hypot(auto_se / auto, b_se / b) > bar


#: where each cell's repetitions came from (the column *code* names the commit)
NOTES = """# The distribution frontier (issue 26)

*Code per cell.* The column *code* names, for every cell, the commit of the code under test
(the last commit that changed `client/` or `collector/`) its repetitions ran on, with their
count where a cell pools several. **d701b27** is main cc7b73e's code (session 5, branch
`scale2`); a cell re-run there was started afresh (`--fresh` drops repetitions on other code),
all under `nice -n 19`:
* the 12 formerly stale k = 256, m = 1000 cells, 6 repetitions (`--cells
  {alike,differ,mixture}|256|1000|{0.5,1,2,8} --reps 6 --fresh`);
* users alike, k = 8 and 32 at m = 1000 and k = 256 at m = 10 and 100, 4 repetitions
  (`--cells alike|{8,32}|1000|* alike|256|{10,100}|* --reps 8 --fresh`, stopped after 4 for
  the CPU left on a shared machine); at 4 repetitions the same seeds on d701b27 gave
  cb2c1a7's MSE to the printed digits in every one of these cells but ε = 8 at k = 8 and 32
  (where the paired-record probe now runs); the predictions at k = 8 and 32, m = 1000 did
  change (alike 8/1000/2: MSE / predicted 0.33 → 1.03 on the same errors);
* to 12 repetitions the flagged users-alike cells and mixture k = 8, m = 10, ε = 0.5
  (`--cells alike|8|1000|* alike|32|1000|* alike|8|10|0.5 alike|8|100|* mixture|8|10|0.5
  --reps 12 --fresh`);
* to 12 repetitions the flagged cells of users who differ and of the mixture at k = 8 and
  32 (`--cells <the 27 flagged keys> --reps 12 --fresh`); users alike, k = 8, m = 100 (all
  four ε near the coverage edge) to 24 (`--cells alike|8|100|* --reps 24 --fresh`). Users who
  differ and the mixture ran on d701b27, before branch `distribution`'s fallback-interval
  change (5d4249e, 379bf2a, 6575d03), but for
* users who differ at ε = 8, k = 8 and 32 at m = 100 and 1000, k = 256 at m = 1000, 12
  repetitions on **6575d03** (the spread left out at `B̂ − se`; `--cells <those 5> --reps 12
  --fresh`); the same seeds at `B̂ − 2se` (a900375) are in `frontier_distribution_z1.md`.
  The flagged fallback cells differ 8/100/2, 8/1000/1, 32/10/0.5 and mixture 32/1000/8
  likewise (12 repetitions on 6575d03, `--fresh`); the other fallback cells still ran on
  d701b27's interval.
* session 6 (branch `distribution`, "distprobe"): every cell where `auto` now runs
  `oracle-probe` (the one-record oracle with a paired-record probe, c8660ab) — ε = 8 at
  k = 8 and 32, m = 10 and at k = 256, m = 10 and 100, all three populations — 12
  repetitions on **c8660ab** (`--cells <those 12> --reps 12 --fresh`), including the two
  cells of users who differ at k = 256 that were still on cb2c1a7; the k = 8 and 32 cells
  to 24 (`--reps 24`), and the plain-oracle cells at k = 8, m = 10, ε ≤ 2 still on d701b27 or
  cb2c1a7 to 24 fresh repetitions (the oracle's code unchanged since). 86ec274 moved where
  `auto` asks for the probe (the same choice in all 36 (k, m, ε)); nothing re-ran for it.

*Older cells.* The users-alike cells at m = 10 and 100 (k = 8, 32) ran at fc79fb6, after the
windows' clamping bias at m ≤ 400 came from the exact binomial law of a coefficient's average
(`binomial_bias2`); alike k = 32, m = 100, ε = 1 was brought to 60 repetitions at 06e6902
(12 – 59 new seeds pooled with the 12 before; no method code changed for the cell between):
coverage 0.943 ± 0.010, MSE / predicted 1.09 ± 0.08 — its 12-repetition 0.917 was chance.
Every cell still on cb2c1a7 (4 repetitions) ran before the spread rule priced the excess
outside share beyond two standard errors (Z_PRICE), the clamping was charged from the
measured spread (9a0b812, 59db9eb) and the paired-record probe (cf53cfa); the users-alike
k = 8 cells re-run after the first are in `frontier_distribution_honesty.md`.

"""

TITLE = """Generated by `bench/frontier_distribution.py` (`python bench/frontier.py --distribution`;
`--table` rewrites this file from `frontier_distribution.json`). n = 10^5 users; *alike*:
every record of every user from Zipf(1.1) over k categories; *differ*: each user puts 70 % of
its m records on its own category (drawn from that law), the rest as the law; *mixture*: half
the users of each. Each repetition draws new users (shared by the ε of one (users, k, m))
and new noise. *auto ran*: the method `auto` chose (`hadamard/window`: the Hadamard windows;
`hadamard/fallback`: the windows' spread phase saw users who differ and the rest of the users
sent the oracle's report; `oracle`: the one-record oracle from the start), with the number of
repetitions each when they differ. *public-parameter peer*: the oracle multi-freq-ldpy's
ADP rule runs at the public (k, ε) (GRR or OUE; its number is that oracle's run in the
cell). *best peer*: the smallest MSE among multi-freq-ldpy's GRR,
OUE and SS (one uniformly sampled record per user, estimated as the library does: matrix
inversion, clipped, renormalized), chosen after the fact; auto's MSE is that of its published
simplex projection. *best peer / auto*: the gain (above 1: auto better), ± two standard
errors (delta method). Honesty of auto's unbiased estimate: its MSE over the prediction
(`plan.predicted_mse` with the users' actual statistic mean and variance), and the share of
its 95 % intervals (every category) holding the truth, each with its band ([0.8, 1.25],
[0.93, 0.97]): ⚑ outside at the point estimate, ‼ outside by more than two standard errors
(MSE / predicted: the larger of the repetitions' own standard error and the model's,
`√(2/(k − 1))` per repetition; coverage: binomial at 0.95 over reps × k intervals). The
prediction of a Hadamard run weighs the windows' error and the fallback's by the chance
that the spread test passes, so a cell where the test rarely falls back reads below 1
until a repetition does. *s per run*: CPU seconds of one auto run of the cell (planner,
devices, collector).

"""


def model_table(n: int = N) -> str:
    """The spread rule on the normal model of users alike (Zipf 1.1, no simulation): per
    cell where auto runs method hadamard, the chance of a (false) fallback, the windows'
    and the fallback's predicted errors, and the prediction over the windows' error — what
    a cell's MSE / predicted reads while no repetition draws a fallback."""
    from frontier import zipf

    lines = ["| k | m | ε | auto | P(fallback) | windows' MSE | fallback's MSE | "
             "prediction / windows' MSE |", "|---|---|---|---|---|---|---|---|"]
    for k, m, eps in itertools.product(KS, MS, EPS):
        plan = compile_query(QuerySpec(kind="distribution", epsilon=eps, users=n, samples=m,
                                       dim=k))
        K = next_pow2(k)
        mean = hadamard_rows(zipf(k)[None], K)[0]
        sv = np.maximum(1.0 / K - mean**2, 0.0)
        if plan.spec.method != "hadamard":
            lines.append(f"| {k} | {m} | {eps:g} | {plan.spec.method} | – | – | – | – |")
            continue
        w, fb, p = plan.method.outcomes(plan, sv, sv / m, mean)
        if w is None:
            lines.append(f"| {k} | {m} | {eps:g} | hadamard (never windows) | 1 | – | "
                         f"{fb.sum():.3g} | – |")
            continue
        pred = p * w.sum() + (1 - p) * fb.sum()
        lines.append(f"| {k} | {m} | {eps:g} | hadamard | {1 - p:.4f} | {w.sum():.3g} | "
                     f"{fb.sum():.3g} | {pred / w.sum():.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--users", type=int, default=N)
    ap.add_argument("--quick", action="store_true", help="a few cells, 2 reps, 20000 users")
    ap.add_argument("--populations", nargs="+", default=list(POPS))
    ap.add_argument("--ks", nargs="+", type=int, default=list(KS))
    ap.add_argument("--ms", nargs="+", type=int, default=list(MS))
    ap.add_argument("--eps", nargs="+", type=float, default=list(EPS))
    ap.add_argument("--cells", nargs="+", default=[], metavar="USERS|K|M|EPS",
                    help="run these cells (instead of the grid the other flags span)")
    ap.add_argument("--fresh", action="store_true",
                    help="drop the named cells' repetitions on other code than the current")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--table", action="store_true", help="only rewrite the .md from --out")
    ap.add_argument("--model", action="store_true",
                    help="only print the spread rule's P(fallback) on users alike (no runs)")
    a = ap.parse_args(argv)
    if a.model:
        print(model_table(a.users))
        return 0
    out = Path(a.out)
    if a.quick:
        a.reps, a.users, a.ks, a.ms, a.eps = 2, 20_000, [8], [100], [1.0]
        out = Path("/tmp/frontier_distribution_quick.json")
    if not a.table:
        check()  # the batched peers equal the library's aggregators
        run_grid(a, out)
    md = report(json.loads(out.read_text()))
    if not a.quick:
        out.with_suffix(".md").write_text(NOTES + TITLE + md + "\n")
    print(md)
    return 0


if __name__ == "__main__":

    sys.exit(main())
