#!/usr/bin/env python3
"""The accuracy frontier: uldp's ``auto`` against the standard local randomizers.

    pip install -e '.[bench]'                     # pure-ldp, multi-freq-ldpy and their deps
    python bench/frontier.py --quick              # a few cells, a few reps (minutes)
    python bench/frontier.py                      # the whole grid -> bench/results/frontier.md

Grid (issue 16): ε ∈ {0.5, 1, 2, 4, 8}, samples per user m ∈ {1, 10, 100, 1000}, n = 10^5
users; the ``mean`` kind (values in [0, 1]) and the ``distribution`` kind with k ∈ {8, 32,
256} categories; users who are alike ("identical": every sample from one law) and users
who differ ("differ": their own rate / their own preferred category); and the real
populations of ``bench/realdata_ldp.py`` (``--real``). Every cell: MSE ± standard error
over ``--reps`` repetitions (fresh users and noise, common random numbers across methods)
against the same estimand — the mean over users of each user's statistic (mean; category
frequencies) — and the time per report.

uldp runs ``method="auto"`` through the production code: the planner, the program's
phases, the collector's accumulators and the device function ``compute_reports`` over
numpy fleets. A user is handed to the device as its *sufficient* data so that m = 1000 ×
n = 10^5 fits: for the mean, its one-sample dataset holding its mean (the statistic is the
same); for the sampled-records method, the one record it samples (drawn here from its
counts: the device's own uniform draw has the same law). The peers see exactly the same
users:

* distributions — one record per user, drawn uniformly from its records, through each
  oracle of **multi-freq-ldpy** (GRR, OUE, SS, OLH, and its ADP rule choosing GRR or OUE
  from the public (k, ε): the *public-parameter peer*) and **pure-ldp** (Hadamard
  response), as the libraries estimate (multi-freq-ldpy clips and renormalizes); uldp's
  estimate is its simplex projection (``extra["projected"]``);
* means — Duchi et al.'s one bit, the piecewise and the hybrid mechanism (Wang et al.,
  ICDE 2019; written here from the papers, continuous, in floats: no maintained package
  has them) on the user's mean; the public-parameter peer is HM, the worst-case best.

*best peer* is the smallest measured MSE over every peer (chosen after the fact).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import MeanEstProgram
from uldp.collector.programs.driver import run_program

RESULTS = Path(__file__).resolve().parent / "results"
EPS = (0.5, 1.0, 2.0, 4.0, 8.0)
MS = (1, 10, 100, 1000)
KS = (8, 32, 256)
N = 100_000
CHUNK = 20_000


# ---- populations ---------------------------------------------------------------------
def zipf(k: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1) ** s
    return w / w.sum()


def draw_users(kind: str, pop: str, n: int, m: int, k: int, g: np.random.Generator
               ) -> dict[str, Any]:
    """One repetition's users: their statistic (mean) or counts (distribution)."""
    if kind == "mean":
        rate = np.full(n, 0.3) if pop == "identical" else g.beta(2, 5, n)
        Y = g.binomial(m, rate) / m
        return {"Y": Y, "truth": np.array([Y.mean()])}
    f = zipf(k)
    if pop == "identical":
        counts = g.multinomial(m, f, size=n)
    else:  # every user prefers its own category (70 % of its records), the rest as f
        own = g.choice(k, size=n, p=f)
        mine = g.binomial(m, 0.7, size=n)
        counts = g.multinomial(m - mine, f)
        counts[np.arange(n), own] += mine
    return {"counts": counts, "truth": (counts / m).mean(axis=0)}


def sample_records(counts: np.ndarray, g: np.random.Generator) -> np.ndarray:
    """One record per user, uniformly among its records (the category of a uniform draw)."""
    cum = np.cumsum(counts, axis=1)
    u = g.integers(0, cum[:, -1])
    return np.argmax(cum > u[:, None], axis=1)


# ---- uldp ----------------------------------------------------------------------------
def run_uldp(spec: QuerySpec, users: dict[str, Any], rng: RandomSource,
             g: np.random.Generator) -> Estimate:
    """``spec`` through the production program, devices fed their sufficient data."""
    program = MeanEstProgram(spec)
    records = sample_records(users["counts"], g) if "counts" in users else None

    def privatize(slots: np.ndarray, task: Any, offsets: Any, acc: Any) -> None:
        for start in range(0, slots.size, CHUNK):
            idx = slots[start:start + CHUNK]
            if task.kind == "mean":
                X = users["Y"][idx, None] - 0.5  # centred on the public range [0, 1]
            elif task.method == "oracle":
                X = records[idx, None].astype(np.float64)
            else:  # Hadamard components: the frequency vectors, as records
                X = _records_of(users["counts"][idx])
            acc.add(compute_reports(task, X, rng, exact=False), idx)
    return Estimate.from_dict(run_program(program, privatize))


def _records_of(counts: np.ndarray) -> np.ndarray:
    m = int(counts[0].sum())
    return np.stack([np.repeat(np.arange(counts.shape[1]), c) for c in counts]).reshape(-1, m
                                                                                     ).astype(float)


def uldp_spec(kind: str, eps: float, m: int, k: int, n: int, seed: int) -> QuerySpec:
    if kind == "mean":
        return QuerySpec(kind="mean", epsilon=eps, users=n, samples=m, bound=0.5, seed=seed)
    return QuerySpec(kind="distribution", epsilon=eps, users=n, samples=m, dim=k, seed=seed)


# ---- peers ---------------------------------------------------------------------------
def duchi(t: np.ndarray, eps: float, g: np.random.Generator) -> np.ndarray:
    """Duchi et al. (JASA 2018) one bit on t ∈ [−1, 1]."""
    e = math.exp(eps)
    C = (e + 1) / (e - 1)
    p = 0.5 + t * (e - 1) / (2 * (e + 1))
    return np.where(g.random(t.size) < p, C, -C)


def piecewise(t: np.ndarray, eps: float, g: np.random.Generator) -> np.ndarray:
    """Wang et al. (ICDE 2019) Algorithm 2."""
    h = math.exp(eps / 2)
    C = (h + 1) / (h - 1)
    left = (C + 1) / 2 * t - (C - 1) / 2
    right = left + C - 1
    inside = g.random(t.size) < h / (h + 1)
    u = g.random(t.size)
    mid = left + u * (right - left)
    # outside: uniform on [−C, left) ∪ (right, C]
    len_l, len_r = left + C, C - right
    v = g.random(t.size) * (len_l + len_r)
    out = np.where(v < len_l, -C + v, right + (v - len_l))
    return np.where(inside, mid, out)


def hybrid(t: np.ndarray, eps: float, g: np.random.Generator) -> np.ndarray:
    """Wang et al. (ICDE 2019) Algorithm 3: PM w.p. 1 − e^{−ε/2} above ε* ≈ 0.61."""
    alpha = 1 - math.exp(-eps / 2) if eps > 0.61 else 0.0
    pm = g.random(t.size) < alpha
    return np.where(pm, piecewise(t, eps, g), duchi(t, eps, g))


MEAN_PEERS = {"Duchi": duchi, "PM": piecewise, "HM": hybrid}


def mean_peers(Y: np.ndarray, eps: float, g: np.random.Generator) -> dict[str, tuple[float, float]]:
    """Each peer's estimate of the mean of ``Y ∈ [0, 1]`` and its seconds."""
    out = {}
    for name, mech in MEAN_PEERS.items():
        t0 = time.perf_counter()
        est = (mech(2 * Y - 1, eps, g).mean() + 1) / 2
        out[name] = (float(np.clip(est, 0, 1)), time.perf_counter() - t0)
    return out


def dist_peers(items: np.ndarray, k: int, eps: float, which: tuple[str, ...]
               ) -> dict[str, tuple[np.ndarray, float]]:
    """Each library oracle on one record per user: estimate and seconds."""
    from multi_freq_ldpy.pure_frequency_oracles import ADP, GRR, LH, SS, UE

    lib = {"ADP": (lambda x: ADP.ADP_Client(x, k, eps), lambda r: ADP.ADP_Aggregator_MI(r, k, eps)),
           "GRR": (lambda x: GRR.GRR_Client(x, k, eps), lambda r: GRR.GRR_Aggregator_MI(r, k, eps)),
           "OUE": (lambda x: UE.UE_Client(x, k, eps), lambda r: UE.UE_Aggregator_MI(r, eps)),
           "SS": (lambda x: SS.SS_Client(x, k, eps), lambda r: SS.SS_Aggregator_MI(r, k, eps)),
           "OLH": (lambda x: LH.LH_Client(x, k, eps), lambda r: LH.LH_Aggregator_MI(r, k, eps))}
    out = {}
    for name in which:
        t0 = time.perf_counter()
        if name == "HR":
            est = _hadamard_response(items, k, eps)
        else:
            client, agg = lib[name]
            est = np.asarray(agg([client(int(x)) for x in items]), dtype=np.float64)
        out[name] = (est, time.perf_counter() - t0)
    return out


def _hadamard_response(items: np.ndarray, k: int, eps: float) -> np.ndarray:
    from pure_ldp.frequency_oracles.hadamard_response import (
        HadamardResponseClient,
        HadamardResponseServer,
    )

    server = HadamardResponseServer(eps, k)
    client = HadamardResponseClient(eps, k, server.get_hash_funcs())
    for x in items:
        server.aggregate(client.privatise(int(x) + 1))
    return np.array([server.estimate(v + 1) for v in range(k)]) / items.size


# ---- cells ---------------------------------------------------------------------------
def cell(args: tuple) -> dict[str, Any]:
    kind, pop, k, m, eps, reps, n, peers = args
    errs: dict[str, list[float]] = {}
    secs: dict[str, float] = {}
    ran = None
    for rep in range(reps):
        g = np.random.default_rng([rep, m, int(eps * 10), k, len(pop), len(kind)])
        users = draw_users(kind, pop, n, m, k, g)
        spec = uldp_spec(kind, eps, m, k, n, seed=rep)
        t0 = time.perf_counter()
        est = run_uldp(spec, users, RandomSource.seeded(f"frontier:{rep}"), g)
        secs["uldp"] = secs.get("uldp", 0.0) + time.perf_counter() - t0
        plan = compile_query(spec)
        ran = _ran(plan)
        value = est.extra["projected"] if kind == "distribution" else est.values + 0.5
        errs.setdefault("uldp", []).append(float(np.sum((np.asarray(value) -
                                                         users["truth"]) ** 2)))
        if kind == "mean":
            res = mean_peers(users["Y"], eps, g)
            for name, (v, s) in res.items():
                errs.setdefault(name, []).append((v - users["truth"][0]) ** 2)
                secs[name] = secs.get(name, 0.0) + s
        else:
            items = sample_records(users["counts"], g)
            for name, (v, s) in dist_peers(items, k, eps, peers).items():
                errs.setdefault(name, []).append(float(np.sum((v - users["truth"]) ** 2)))
                secs[name] = secs.get(name, 0.0) + s
    return {"kind": kind, "population": pop, "k": k, "m": m, "epsilon": eps, "n": n,
            "reps": reps, "ran": ran,
            "mse": {a: float(np.mean(e)) for a, e in errs.items()},
            "se": {a: float(np.std(e) / math.sqrt(len(e))) for a, e in errs.items()},
            "us_per_report": {a: 1e6 * s / (reps * n) for a, s in secs.items()}}


def _ran(plan: Any) -> str:
    s = plan.spec
    if s.method == "oracle":
        return f"oracle/{plan.method.mechanism(plan)}"
    if s.method == "ssl":
        from uldp.collector.methods.common import value_mechanism

        return f"ssl/{value_mechanism(s, plan.grouping.groups[0].eps_c)}"
    return f"{s.method} (stage I {s.stage1_share:.2g})"


# ---- table ---------------------------------------------------------------------------
PUBLIC_PEER = {"mean": "HM", "distribution": "ADP"}
NOTES = "## Where uldp still loses, and why"


def row(r: dict[str, Any]) -> str:
    mse, se = r["mse"], r["se"]
    peers = [a for a in mse if a != "uldp"]
    best = min(peers, key=lambda a: mse[a])
    pub = PUBLIC_PEER[r["kind"]]
    ratio_pub = mse["uldp"] / mse[pub]
    ratio_best = mse["uldp"] / mse[best]
    rel = 2 * math.hypot(se["uldp"] / mse["uldp"], se[best] / mse[best])
    rel_pub = 2 * math.hypot(se["uldp"] / mse["uldp"], se[pub] / mse[pub])
    k = r["k"] if r["kind"] == "distribution" else "–"
    return (f"| {r['kind']} | {r['population']} | {k} | {r['m']} | {r['epsilon']:g} | "
            f"{r['ran']} | {mse['uldp']:.3g} ± {se['uldp']:.2g} | {pub} {mse[pub]:.3g} | "
            f"{ratio_pub:.2f} ± {ratio_pub * rel_pub:.2f} | {best} {mse[best]:.3g} | "
            f"{ratio_best:.2f} ± {ratio_best * rel:.2f} | "
            f"{r['us_per_report']['uldp']:.1f} / {r['us_per_report'][best]:.1f} |")


TITLE = """# The accuracy frontier (issue 16)

Generated by `bench/frontier.py` (`python bench/frontier.py --table` rewrites this file from
`frontier.json`). n = 10^5 users; the mean kind over values in [0, 1] (users alike: every
sample Bernoulli(0.3); users who differ: each user's rate from Beta(2, 5)); the
distribution kind over k categories (alike: every record from a Zipf(1.1) law; differ: each
user puts 70 % of its records on its own category, drawn from that law). MSE over the
repetitions (mean: 60; distribution: 8 — the peers' per-user Python clients are slow)
against the mean over users of their statistic. *public-parameter peer*: the rule that
chooses its mechanism from (k, ε) alone — multi-freq-ldpy's ADP (GRR or OUE) for
distributions, HM (the worst-case best of Duchi/PM/HM) for means; *best peer*: the
smallest measured MSE over every peer (Duchi, PM, HM; ADP, GRR, OUE, SS), chosen after the
fact. Ratios carry ± two standard errors. Time per report: µs of CPU in the simulation
(uldp: the planner, device function and collector together; peers: their client and
aggregator).

"""

HEADER = ("| kind | users | k | m | ε | auto ran | auto MSE ± SE | public-parameter peer | "
          "auto / public | best peer (after the fact) | auto / best | µs per report "
          "(auto / best) |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def _verdicts(r: dict[str, Any]) -> tuple[bool, bool]:
    """(auto ≤ 1.1× the public-parameter peer within 2 SE, auto ≤ 1.25× the best peer)."""
    mse, se = r["mse"], r["se"]
    pub = PUBLIC_PEER[r["kind"]]
    ratio = mse["uldp"] / mse[pub]
    rel = 2 * math.hypot(se["uldp"] / mse["uldp"], se[pub] / mse[pub])
    best = min(v for a, v in mse.items() if a != "uldp")
    return ratio <= 1.1 or ratio * (1 - rel) <= 1.1, mse["uldp"] <= 1.25 * best


def report(results: list[dict[str, Any]], path: Path) -> str:
    """The whole table, the verdict counts and the identical-users gain against m."""
    order = {"mean": 0, "distribution": 1}
    rows = sorted(results, key=lambda r: (order[r["kind"]], r["population"] != "identical",
                                          r["k"], r["m"], r["epsilon"]))
    v = [_verdicts(r) for r in rows]
    lines = [f"{sum(a for a, _ in v)} of {len(v)} cells: auto ≤ 1.1× the public-parameter "
             f"peer (within 2 SE); {sum(b for _, b in v)} of {len(v)}: auto ≤ 1.25× the "
             "best peer chosen after the fact.", "", HEADER]
    lines += [row(r) for r in rows]
    lines += ["", "**Users alike: the gain of the whole dataset** (best peer's MSE / auto's)",
              "", "| kind | k | ε | " + " | ".join(f"m = {m}" for m in MS) + " |",
              "|---|---|---|" + "---|" * len(MS)]
    for kind in ("mean", "distribution"):
        for k in sorted({r["k"] for r in rows if r["kind"] == kind}):
            for eps in EPS:
                cells = {r["m"]: r for r in rows if r["kind"] == kind and r["k"] == k
                         and r["epsilon"] == eps and r["population"] == "identical"}
                if not cells:
                    continue
                gains = [f"{_gain(cells[m]):.2f}" if m in cells else "–" for m in MS]
                lines.append(f"| {kind} | {k if kind == 'distribution' else '–'} | {eps:g} | "
                             + " | ".join(gains) + " |")
    _plot(rows, path.with_suffix(".png"))
    return "\n".join(lines)


def _gain(r: dict[str, Any]) -> float:
    return min(x for a, x in r["mse"].items() if a != "uldp") / r["mse"]["uldp"]


def _plot(rows: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, kind in zip(axes, ("mean", "distribution"), strict=True):
        for pop, mark in (("identical", "o"), ("differ", "s")):
            for m in MS:
                pts = sorted((r["epsilon"], r["mse"]["uldp"] / r["mse"][PUBLIC_PEER[kind]])
                             for r in rows if r["kind"] == kind and r["population"] == pop
                             and r["m"] == m and r["k"] in (0, 32))
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker=mark, label=f"{pop}, m={m}")
        ax.axhline(1.1, color="k", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ε")
        ax.set_title(f"{kind}" + (" (k = 32)" if kind == "distribution" else ""))
    axes[0].set_ylabel("auto MSE / public-parameter peer's")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--users", type=int, default=N)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a few cells, 3 reps, 20000 users")
    ap.add_argument("--kinds", nargs="+", default=["mean", "distribution"])
    ap.add_argument("--populations", nargs="+", default=["identical", "differ"])
    ap.add_argument("--eps", nargs="+", type=float, default=list(EPS))
    ap.add_argument("--ms", nargs="+", type=int, default=list(MS))
    ap.add_argument("--ks", nargs="+", type=int, default=list(KS))
    ap.add_argument("--peers", nargs="+", default=["ADP", "GRR", "OUE", "SS", "OLH", "HR"])
    ap.add_argument("--out", default=str(RESULTS / "frontier.json"))
    ap.add_argument("--table", action="store_true",
                    help="only write bench/results/frontier.md (+ .png) from --out")
    a = ap.parse_args(argv)
    if a.table:
        md = report(json.loads(Path(a.out).read_text()), RESULTS / "frontier.md")
        path = RESULTS / "frontier.md"
        old = path.read_text() if path.exists() else ""
        notes = old[old.index(NOTES):] if NOTES in old else ""  # written by hand, kept
        path.write_text(TITLE + md + "\n" + ("\n" + notes if notes else ""))
        print(md)
        return 0
    if a.quick:
        a.reps, a.users, a.eps, a.ms, a.ks = 3, 20_000, [1.0, 8.0], [1, 100], [8]
    jobs = [(kind, pop, k, m, eps, a.reps, a.users, tuple(a.peers))
            for kind in a.kinds for pop in a.populations
            for k in (a.ks if kind == "distribution" else [0]) for m in a.ms for eps in a.eps]
    out = Path(a.out)
    done = json.loads(out.read_text()) if out.exists() and not a.quick else []
    have = {(r["kind"], r["population"], r["k"], r["m"], r["epsilon"]) for r in done}
    jobs = [j for j in jobs if j[:5] not in have]
    print(HEADER, flush=True)
    with mp.Pool(a.procs) as pool:
        for r in pool.imap_unordered(cell, jobs):
            print(row(r), flush=True)
            done.append(r)
            if not a.quick:
                out.write_text(json.dumps(done, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
