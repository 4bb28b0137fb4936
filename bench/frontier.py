#!/usr/bin/env python3
"""The accuracy frontier: uldp's ``auto`` against the standard local randomizers.

    pip install -e '.[bench]'                     # multi-freq-ldpy (the peers) and xxhash < 4
    python bench/frontier.py --quick              # a few cells, a few reps (minutes)
    python bench/frontier.py                      # the whole grid -> bench/results/frontier.md
    python bench/frontier.py --distribution       # the distribution frontier of issue 26
                                                  # (bench/frontier_distribution.py)

Grid (issue 16): ε ∈ {0.5, 1, 2, 4, 8}, samples per user m ∈ {1, 10, 100, 1000}, n = 10^5
users; the ``mean`` kind (values in [0, 1]) and the ``distribution`` kind with k ∈ {8, 32,
256} categories; users who are alike ("identical": every sample from one law) and users
who differ ("differ": their own rate / their own preferred category); and the real
populations of ``bench/realdata_ldp.py`` (``bench/frontier_real.py``). Every cell: MSE ±
standard error over ``--reps`` repetitions (fresh users and noise, common random numbers
across methods; resumable, checkpointed after every repetition in ``frontier.json``)
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
  oracle of **multi-freq-ldpy** (GRR, OUE, SS; its ADP rule choosing GRR or OUE from the
  public (k, ε) is the *public-parameter peer*), its compiled clients batched by
  ``bench/frontier_peers.py``, as the library estimates (matrix inversion, clipped and
  renormalized); uldp's estimate is its simplex projection (``extra["projected"]``);
* means — Duchi et al.'s one bit, the piecewise and the hybrid mechanism (Wang et al.,
  ICDE 2019; written here from the papers, continuous, in floats: no maintained package
  has them) on the user's mean; the public-parameter peer is HM, the worst-case best.

*best peer* is the smallest measured MSE over every peer (chosen after the fact).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontier_peers import check, dist_peers

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
#: what ``auto`` minimizes (``QuerySpec.objective``; ``--objective``)
OBJECTIVE = {"value": "width"}
#: what the mean queries assume about the users (``QuerySpec.assume``; ``--assume``)
ASSUME = {"value": "none"}


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
        return QuerySpec(kind="mean", epsilon=eps, users=n, samples=m, bound=0.5, seed=seed,
                         objective=OBJECTIVE["value"], assume=ASSUME["value"])
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
        t0 = time.process_time()
        est = (mech(2 * Y - 1, eps, g).mean() + 1) / 2
        out[name] = (float(np.clip(est, 0, 1)), time.process_time() - t0)
    return out


# ---- cells ---------------------------------------------------------------------------
# A cell is (kind, population, k, m, ε). Its repetitions are stored as running sums
# ``stats[alg] = [count, Σ err, Σ err²]`` (and ``secs[alg]``), so a run can stop anywhere and
# a later run adds repetitions (new, independent seeds) to the same cells.
KINDS = ("mean", "distribution")
POPS = ("identical", "differ")


def one_rep(kind: str, pop: str, k: int, m: int, eps_list: list[float], rep: int, n: int
            ) -> dict[float, dict[str, tuple[float, float]]]:
    """Repetition ``rep`` of the cells (kind, pop, k, m, ε), ε ∈ ``eps_list``, on one draw
    of users (common across ε): ``{ε: {algorithm: (squared error, seconds)}}``."""
    g = np.random.default_rng([rep, m, k, POPS.index(pop), KINDS.index(kind), 16])
    users = draw_users(kind, pop, n, m, k, g)
    items = sample_records(users["counts"], g) if kind == "distribution" else None
    out = {}
    for eps in eps_list:
        spec = uldp_spec(kind, eps, m, k, n, seed=rep)
        rng = RandomSource.seeded(f"frontier:{kind}:{pop}:{k}:{m}:{eps:g}:{rep}")
        t0 = time.process_time()
        est = run_uldp(spec, users, rng, g)
        secs = time.process_time() - t0
        value = est.extra["projected"] if kind == "distribution" else est.values + 0.5
        res = {"uldp": (_sq(value, users["truth"]), secs)}
        if kind == "mean":
            for name, (v, s) in mean_peers(users["Y"], eps, g).items():
                res[name] = (_sq(np.array([v]), users["truth"]), s)
        else:
            pseed = rep * 1_000_003 + int(eps * 10) * 1009 + k * 17 + m + 31 * POPS.index(pop)
            for name, (v, s) in dist_peers(items, k, eps, pseed).items():
                res[name] = (_sq(v, users["truth"]), s)
        out[eps] = res
    return out


def _sq(value: Any, truth: np.ndarray) -> float:
    return float(np.sum((np.asarray(value, dtype=np.float64) - truth) ** 2))


def _legacy(r: dict[str, Any]) -> dict[str, Any]:
    """A cell stored by an earlier version (mse, se with ddof 0, reps) as running sums."""
    if "stats" in r:
        return r
    c = r["reps"]
    stats = {a: [c, mse * c, c * ((r["se"][a] * math.sqrt(c)) ** 2 + mse ** 2)]
             for a, mse in r["mse"].items()}
    secs = {a: us * c * r["n"] / 1e6 for a, us in r["us_per_report"].items()}
    return {k: r[k] for k in ("kind", "population", "k", "m", "epsilon", "n", "ran")} | {
        "stats": stats, "secs": secs}


def summary(r: dict[str, Any]) -> tuple[dict[str, float], dict[str, float], int]:
    """(MSE, its standard error, repetitions) of every algorithm of a cell."""
    mse, se = {}, {}
    for a, (c, s1, s2) in r["stats"].items():
        mse[a] = s1 / c
        var = max(s2 - c * mse[a] ** 2, 0.0) / max(c - 1, 1)
        se[a] = math.sqrt(var / c)
    return mse, se, int(r["stats"]["uldp"][0])


def _key(r: dict[str, Any]) -> tuple:
    return (r["kind"], r["population"], r["k"], r["m"], r["epsilon"])


def _undecided(r: dict[str, Any]) -> bool:
    """Is auto / best-after-the-fact or auto / public within 2 SE of its bar (1.25, 1.1)?"""
    mse, se, _ = summary(r)
    ratios = _ratios(r["kind"], mse, se)
    return any(abs(x - bar) <= 2 * sd for (x, sd), bar in zip(ratios, (1.1, 1.25), strict=True))


def _ratios(kind: str, mse: dict[str, float], se: dict[str, float]
            ) -> tuple[tuple[float, float], tuple[float, float]]:
    """(auto / public, SE), (auto / best after the fact, SE) by the delta method."""
    best = min((a for a in mse if a != "uldp"), key=lambda a: mse[a])
    out = []
    for peer in (PUBLIC_PEER[kind], best):
        x = mse["uldp"] / mse[peer]
        out.append((x, x * math.hypot(se["uldp"] / mse["uldp"], se[peer] / mse[peer])))
    return out[0], out[1]


def retime(out: Path, old: Path) -> None:
    """Take the seconds of ``old``'s distribution cells (an earlier run through the peer
    libraries' per-user Python entry points) out of the pooled cells of ``out``, so that
    µs per report is over the repetitions run with the batched peers only."""
    cells = {_key(r): _legacy(r) for r in json.loads(out.read_text())}
    for o in json.loads(old.read_text()):
        r = cells.get(_key(o))
        if o["kind"] != "distribution" or r is None or "timed" in r:
            continue
        r["timed"] = {}
        for alg, (c, _, _) in r["stats"].items():
            r["secs"][alg] -= o["us_per_report"].get(alg, 0.0) * o["reps"] * o["n"] / 1e6
            r["timed"][alg] = c - o["reps"]
    out.write_text(json.dumps(list(cells.values()), indent=1))


def run_grid(a: argparse.Namespace, out: Path) -> None:
    """Bring every cell of the grid to ``--reps`` (undecided cells to ``--close``),
    checkpointing ``out`` after every repetition."""
    done = json.loads(out.read_text()) if out.exists() else []
    cells = {_key(r): _legacy(r) for r in done}
    groups: dict[tuple, dict[float, int]] = {}
    for kind in a.kinds:
        for pop, k, m, eps in itertools.product(
                a.populations, a.ks if kind == "distribution" else [0], a.ms, a.eps):
            key = (kind, pop, k, m, eps)
            ran = _ran(compile_query(uldp_spec(kind, eps, m, k, a.users, 0)))
            r = cells.get(key)
            if r is None or r["ran"] != ran or r["n"] != a.users:
                r = cells[key] = {"kind": kind, "population": pop, "k": k, "m": m,
                                  "epsilon": eps, "n": a.users, "ran": ran, "stats": {},
                                  "secs": {}}
            need = a.reps
            if a.close and r["stats"] and _undecided(r):
                need = max(need, a.close)
            groups.setdefault(key[:4], {})[eps] = need
    for (kind, pop, k, m), need in sorted(groups.items(), key=lambda kv: kv[0][2]):
        while True:
            have = {e: summary(cells[(kind, pop, k, m, e)])[2]
                    if cells[(kind, pop, k, m, e)]["stats"] else 0 for e in need}
            todo = [e for e in need if have[e] < need[e]]
            if not todo:
                break
            rep = min(have[e] for e in todo)
            todo = [e for e in todo if have[e] == rep]
            t0 = time.process_time()
            for e, res in one_rep(kind, pop, k, m, todo, rep, a.users).items():
                r = cells[(kind, pop, k, m, e)]
                for alg, (err, s) in res.items():
                    st = r["stats"].setdefault(alg, [0, 0.0, 0.0])
                    st[0], st[1], st[2] = st[0] + 1, st[1] + err, st[2] + err * err
                    r["secs"][alg] = r["secs"].get(alg, 0.0) + s
                    if "timed" in r:
                        r["timed"][alg] = r["timed"].get(alg, 0) + 1
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(list(cells.values()), indent=1))
            tmp.replace(out)
            print(f"{kind} {pop} k={k} m={m} ε={todo} rep {rep}: "
                  f"{time.process_time() - t0:.1f} s", flush=True)

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
    mse, se, reps = summary(r)
    best = min((a for a in mse if a != "uldp"), key=lambda a: mse[a])
    pub = PUBLIC_PEER[r["kind"]]
    (x_pub, sd_pub), (x_best, sd_best) = _ratios(r["kind"], mse, se)
    timed = r.get("timed", {})
    us = {a: 1e6 * s / (timed.get(a, r["stats"][a][0]) * r["n"]) if timed.get(a, 1) else math.nan
          for a, s in r["secs"].items()}
    k = r["k"] if r["kind"] == "distribution" else "–"
    return (f"| {r['kind']} | {r['population']} | {k} | {r['m']} | {r['epsilon']:g} | "
            f"{reps} | {r['ran']} | {mse['uldp']:.3g} ± {se['uldp']:.2g} | "
            f"{pub} {mse[pub]:.3g} | {x_pub:.2f} ± {2 * sd_pub:.2f} | {best} {mse[best]:.3g} | "
            f"{x_best:.2f} ± {2 * sd_best:.2f} | {us['uldp']:.1f} / {us[best]:.1f} |")


TITLE = """# The accuracy frontier (issue 16)

Generated by `bench/frontier.py` (`python bench/frontier.py --table` rewrites this file from
`frontier.json`; the run is resumable: `python bench/frontier.py --reps R --close R2` brings
every cell to R repetitions and the cells whose ratio is within 2 SE of its bar to R2,
continuing where `frontier.json` stopped). n = 10^5 users; the mean kind over values in
[0, 1] (users alike: every sample Bernoulli(0.3); users who differ: each user's rate from
Beta(2, 5)); the distribution kind over k categories (alike: every record from a Zipf(1.1)
law; differ: each user puts 70 % of its records on its own category, drawn from that law).
MSE over the repetitions (the *reps* column: fresh users and noise each; the ε of one
(kind, users, k, m) share the users of a repetition) against the mean over users of their
statistic. *public-parameter peer*: the rule that chooses its mechanism from (k, ε) alone —
multi-freq-ldpy's ADP for distributions (it runs GRR or OUE by a rule on (k, ε); its number
is that oracle's run in the cell, not a separate run), HM (the worst-case best of
Duchi/PM/HM) for means; *best peer*: the smallest measured MSE over every peer (Duchi, PM,
HM; GRR, OUE, SS), chosen after the fact — the minimum of three noisy MSEs, so biased low.
The distribution peers are multi-freq-ldpy's own compiled clients called in a numba loop,
folded and estimated as its aggregators do (`bench/frontier_peers.py`, checked bit for bit
against the aggregators before every run); OLH and Hadamard response are not in this grid
(OLH's aggregator hashes every user × category pair in Python; its variance at its integer
g is at least OUE's, Wang et al. 2017). Ratios carry ± two standard errors (delta method).
Time per report: µs of CPU (process time) in the simulation (uldp: the planner, device
function and collector together; peers: their client and aggregator). The cells of an
earlier run of this bench (distribution: m ∈ {1, 1000}, ε ∈ {0.5, 2, 8}, 5 repetitions
through the libraries' per-user Python entry points, ADP run separately; mean: 40
repetitions) are pooled with the new repetitions (independent seeds, the same laws).

"""

HEADER = ("| kind | users | k | m | ε | reps | auto ran | auto MSE ± SE | "
          "public-parameter peer | auto / public | best peer (after the fact) | auto / best | "
          "µs per report (auto / best) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def _verdicts(r: dict[str, Any]) -> tuple[bool, bool, bool, bool]:
    """auto / public ≤ 1.1 (point; within 2 SE), auto / best ≤ 1.25 (point; within 2 SE)."""
    mse, se, _ = summary(r)
    (x_pub, sd_pub), (x_best, sd_best) = _ratios(r["kind"], mse, se)
    return (x_pub <= 1.1, x_pub - 2 * sd_pub <= 1.1, x_best <= 1.25,
            x_best - 2 * sd_best <= 1.25)


def _counts(rows: list[dict[str, Any]]) -> str:
    v = [_verdicts(r) for r in rows]
    n = len(v)
    c = [sum(x[i] for x in v) for i in range(4)]
    return (f"{c[1]} of {n} cells: auto ≤ 1.1× the public-parameter peer within 2 SE "
            f"({c[0]} of {n} at the point estimate); {c[3]} of {n}: auto ≤ 1.25× the best "
            f"peer chosen after the fact within 2 SE ({c[2]} of {n} at the point estimate; "
            f"{n - c[3]} cells are above 1.25× by more than 2 SE).")


def report(results: list[dict[str, Any]], path: Path) -> str:
    """The whole table, the verdict counts and the identical-users gain against m."""
    order = {"mean": 0, "distribution": 1}
    rows = sorted([_legacy(r) for r in results],
                  key=lambda r: (order[r["kind"]], r["population"] != "identical", r["k"],
                                 r["m"], r["epsilon"]))
    lines = [f"All {len(rows)} cells: " + _counts(rows)]
    for kind in ("mean", "distribution"):
        sub = [r for r in rows if r["kind"] == kind]
        reps = sorted({summary(r)[2] for r in sub})
        if sub:
            lines.append(f"\n{kind} ({len(sub)} cells, {reps[0]}–{reps[-1]} repetitions): "
                         + _counts(sub))
    lines += ["", HEADER]
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
    mse = summary(r)[0]
    return min(x for a, x in mse.items() if a != "uldp") / mse["uldp"]


def _plot(rows: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, kind in zip(axes, ("mean", "distribution"), strict=True):
        for pop, mark in (("identical", "o"), ("differ", "s")):
            for m in MS:
                pts = sorted((r["epsilon"], _ratios(kind, *summary(r)[:2])[0][0])
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
    argv = sys.argv[1:] if argv is None else argv
    if "--distribution" in argv:  # the distribution section (issue 26): its own grid
        from frontier_distribution import main as distribution_main

        return distribution_main([x for x in argv if x != "--distribution"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="repetitions every cell gets")
    ap.add_argument("--close", type=int, default=0,
                    help="repetitions for cells whose ratio is within 2 SE of its bar")
    ap.add_argument("--users", type=int, default=N)
    ap.add_argument("--quick", action="store_true", help="a few cells, 3 reps, 20000 users")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    ap.add_argument("--populations", nargs="+", default=list(POPS))
    ap.add_argument("--eps", nargs="+", type=float, default=list(EPS))
    ap.add_argument("--ms", nargs="+", type=int, default=list(MS))
    ap.add_argument("--ks", nargs="+", type=int, default=list(KS))
    ap.add_argument("--out", default=str(RESULTS / "frontier.json"))
    ap.add_argument("--objective", choices=("width", "mse"), default="width",
                    help="what auto minimizes for the mean (the interval's width by default)")
    ap.add_argument("--assume", choices=("none", "users-alike"), default="none",
                    help="what the mean queries assume about the users (issue 24: "
                         "users-alike lets auto run a two-stage window; write the cells to "
                         "their own --out, e.g. bench/results/frontier_alike.json)")
    ap.add_argument("--table", action="store_true",
                    help="only write bench/results/frontier.md (+ .png) from --out")
    ap.add_argument("--retime-from", metavar="OLD_JSON",
                    help="take OLD_JSON's distribution seconds out of the pooled cells")
    a = ap.parse_args(argv)
    OBJECTIVE["value"] = a.objective
    ASSUME["value"] = a.assume
    if a.retime_from:
        retime(Path(a.out), Path(a.retime_from))
    if a.table:
        md = report(json.loads(Path(a.out).read_text()), RESULTS / "frontier.md")
        path = RESULTS / "frontier.md"
        old = path.read_text() if path.exists() else ""
        notes = old[old.index(NOTES):] if NOTES in old else ""  # written by hand, kept
        path.write_text(TITLE + md + "\n" + ("\n" + notes if notes else ""))
        print(md)
        return 0
    out = Path(a.out)
    if a.quick:
        a.reps, a.users, a.eps, a.ms, a.ks = 3, 20_000, [1.0, 8.0], [1, 100], [8]
        out = Path("/tmp/frontier_quick.json")
    check()  # the batched peers equal the library's aggregators
    run_grid(a, out)
    print(report(json.loads(out.read_text()), out.with_suffix(".md")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
