"""Benchmark HLM vs WME (``docs/central-algorithms.md`` H§5.2 plans B1 and B3).

B1 (balanced): MSE vs m for Uniform[-1,1]^d, N(0, I_d), Lomax(4)^d, d ∈ {1, 3},
n ∈ {1000, 10000}. B3 (imbalanced): MSE vs γ for Uniform, N(0,1), Exponential(1),
n = 1000, N = 100 000, sizes ``s_i = ⌈N (i/n)^γ⌉``. Plus wall-clock time of each estimator
at n = 10^6 users. ε = 1, δ = 1e-5, R_c = B = 1, HLM constants ``"calibrated"`` with the
default β (§2.9 proxy).

Protocol (spec §5.2, oracle tuning A22): for every configuration each estimator's scale
(``T = c σ_X/√m`` / ``A = c σ_X`` for HLM, ``τ = c σ_X/√m̄`` for WME) is tuned on
``--tune`` data sets whose seeds are disjoint from the ``--trials`` evaluation seeds; the
MSE ± standard error at the best ``c`` is reported.

Speed-up (exact, not an approximation): in the balanced case both estimators depend on
the data only through the user means and the public sizes, so B1 feeds one row per user
(its mean) with equal sizes; the estimators' outputs are identical in law to feeding the
raw records (for HLM the sizes only enter through ``T``, which is given; for WME all
weights are equal). Gaussian user means are drawn as ``N(μ, I/m)`` directly (spec §5.2).

Usage: ``python bench/central_hlm_wme.py [--quick] [--jobs 2] [--out bench/results]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.central.huber import HLMParams, hlm_mean
from uldp.collector.central.wme import WMEParams, wme_mean

EPS, DELTA, RC = 1.0, 1e-5, 1.0
SIGMA_X = {"uniform": 1 / math.sqrt(3), "gauss": 1.0, "lomax": math.sqrt(2 / 9),
           "exponential": 1.0}
MEAN = {"uniform": 0.0, "gauss": 0.0, "lomax": 1 / 3, "exponential": 1.0}
C_HLM_B1 = (1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0, 11.0, 16.0, 22.0)
C_WME = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0, 11.0)
C_HLM_B3 = (2.0, 2.8, 4.0, 5.6, 8.0, 11.0, 16.0, 22.0, 32.0)


# ---- data --------------------------------------------------------------------------------
def _draw(law: str, rng: np.random.Generator, size) -> np.ndarray:
    if law == "uniform":
        return rng.uniform(-1.0, 1.0, size)
    if law == "gauss":
        return rng.normal(0.0, 1.0, size)
    if law == "lomax":
        return rng.pareto(4.0, size)  # numpy's pareto is Lomax: density a/(1+x)^{a+1}
    if law == "exponential":
        return rng.exponential(1.0, size)
    raise ValueError(law)


def balanced_user_means(law: str, n: int, m: int, d: int, rng: np.random.Generator,
                        ) -> np.ndarray:
    """(n, d) user means of m iid draws each."""
    if law == "gauss":
        return rng.normal(0.0, 1.0 / math.sqrt(m), (n, d))
    out = np.empty((n, d))
    chunk = max(1, 4_000_000 // (m * d))
    for s in range(0, n, chunk):
        k = min(chunk, n - s)
        out[s : s + k] = _draw(law, rng, (k, m, d)).mean(axis=1)
    return out


def imbalanced_sizes(n: int, N: int, gamma: float) -> np.ndarray:
    """``m_i = s_i − s_{i−1}``, ``s_i = ⌈N (i/n)^γ⌉``; zero gaps set to 1 (A21)."""
    s = np.ceil(N * (np.arange(n + 1) / n) ** gamma).astype(np.int64)
    return np.maximum(np.diff(s), 1)


def imbalanced_user_means(law: str, m: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if law == "gauss":
        return rng.normal(0.0, 1.0 / np.sqrt(m))
    x = _draw(law, rng, int(m.sum()))
    off = np.r_[0, np.cumsum(m)[:-1]]
    return np.add.reduceat(x, off) / m


# ---- one configuration -----------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    plan: str  # "B1" or "B3"
    law: str
    d: int
    n: int
    x: float  # m (B1) or γ (B3)
    tune: int
    trials: int
    seed: int
    constants: str = "calibrated"


def _mse(est, mu) -> float:
    return float(np.sum((np.atleast_1d(np.asarray(est, float)) - mu) ** 2))


def _run_b1(cfg: Config, y: np.ndarray, which: str, c: float, rs: RandomSource):
    m = int(cfg.x)
    scale = SIGMA_X[cfg.law] / math.sqrt(m)
    ids = np.arange(cfg.n)
    vals = y[:, 0] if cfg.d == 1 else y
    if which == "hlm":
        return hlm_mean(ids, vals, epsilon=EPS, delta=DELTA, rng=rs,
                        params=HLMParams(radius=RC, T=c * scale,
                                         constants=cfg.constants)).estimate
    return wme_mean(ids, vals, epsilon=EPS, delta=DELTA, rng=rs,
                    params=WMEParams(tau=c * scale, bound=RC)).estimate


def _run_b3(cfg: Config, data: tuple, which: str, c: float, rs: RandomSource):
    m, y = data
    ids = np.repeat(np.arange(m.size), m)
    vals = np.repeat(y, m)  # each record = its user's mean (same means and sizes)
    sx = SIGMA_X[cfg.law]
    if which == "hlm":
        if np.all(m == m[0]):
            params = HLMParams(radius=RC, T=c * sx / math.sqrt(m[0]), constants=cfg.constants)
        else:
            params = HLMParams(radius=RC, A=c * sx, gamma=max(1.0, cfg.x),
                               constants=cfg.constants)
        return hlm_mean(ids, vals, epsilon=EPS, delta=DELTA, rng=rs, params=params).estimate
    tau = c * sx / math.sqrt(m.sum() / m.size)
    return wme_mean(ids, vals, epsilon=EPS, delta=DELTA, rng=rs,
                    params=WMEParams(tau=tau, bound=RC)).estimate


def run_config(cfg: Config) -> dict:
    if cfg.constants == "paper":  # reproduction mode: the d = 1 warning is expected
        warnings.filterwarnings("ignore", message="constants='paper'")
    mu = np.full(cfg.d, MEAN[cfg.law])
    root = RandomSource.seeded(f"bench:{cfg.plan}:{cfg.law}:{cfg.d}:{cfg.n}:{cfg.x}:{cfg.seed}")
    if cfg.plan == "B1":
        m = int(cfg.x)
        grids = {"hlm": C_HLM_B1 if cfg.d == 1 else C_HLM_B1[4:], "wme": C_WME}
        make = lambda g: balanced_user_means(cfg.law, cfg.n, m, cfg.d, g)  # noqa: E731
        run = _run_b1
    else:
        sizes = imbalanced_sizes(cfg.n, 100 * cfg.n, cfg.x)
        grids = {"hlm": C_HLM_B3, "wme": C_WME + (16.0,)}
        make = lambda g: (sizes, imbalanced_user_means(cfg.law, sizes, g))  # noqa: E731
        run = _run_b3
    out: dict = {"cfg": cfg}
    tune_src = root.spawn("tune")
    tune_data = [make(tune_src.spawn(f"d{k}").numpy_generator()) for k in range(cfg.tune)]
    for which, grid in grids.items():
        scores = []
        for c in grid:
            errs = [_mse(run(cfg, data, which, c, tune_src.spawn(f"{which}{c}{k}")), mu)
                    for k, data in enumerate(tune_data)]
            scores.append(np.mean(errs))
        out[f"{which}_c"] = grid[int(np.argmin(scores))]
    eval_src = root.spawn("eval")
    errs = {"hlm": [], "wme": []}
    for k in range(cfg.trials):
        data = make(eval_src.spawn(f"d{k}").numpy_generator())
        for which in ("hlm", "wme"):
            errs[which].append(_mse(run(cfg, data, which, out[f"{which}_c"],
                                        eval_src.spawn(f"{which}{k}")), mu))
    for which, e in errs.items():
        e = np.asarray(e)
        out[which] = float(e.mean())
        out[f"{which}_se"] = float(e.std(ddof=1) / math.sqrt(e.size))
    return out


# ---- timing ------------------------------------------------------------------------------
def timing(n: int, m: int, reps: int) -> dict:
    g = RandomSource.seeded("bench:timing").numpy_generator()
    ids = np.repeat(np.arange(n), m)
    x = g.normal(0.0, 1.0, n * m)
    res = {}
    for name, fn in (
        ("hlm", lambda: hlm_mean(ids, x, epsilon=EPS, delta=DELTA,
                                 params=HLMParams(T=4 / math.sqrt(m)),
                                 rng=RandomSource.seeded(1))),
        ("wme", lambda: wme_mean(ids, x, epsilon=EPS, delta=DELTA, tau=2 / math.sqrt(m),
                                 rng=RandomSource.seeded(1))),
    ):
        fn()  # warm-up (caches the calibrated constants)
        res[name] = _median_seconds(fn, reps)
    # estimator core only: one row per user (the user means)
    y = x.reshape(n, m).mean(axis=1)
    uid = np.arange(n)
    for name, fn in (
        ("hlm_core", lambda: hlm_mean(uid, y, epsilon=EPS, delta=DELTA,
                                      params=HLMParams(T=4 / math.sqrt(m)),
                                      rng=RandomSource.seeded(1))),
        ("wme_core", lambda: wme_mean(uid, y, epsilon=EPS, delta=DELTA, tau=2 / math.sqrt(m),
                                      rng=RandomSource.seeded(1))),
    ):
        res[name] = _median_seconds(fn, reps)
    return res


def _median_seconds(fn, reps: int) -> float:
    """The median wall time of ``reps`` calls of ``fn``."""
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


# ---- output ------------------------------------------------------------------------------
def _fmt(v: float, se: float) -> str:
    return f"{v:.3g} ± {se:.2g}"


def b1_table(results: list[dict]) -> str:
    lines = ["| law | d | n | m | HLM MSE ± se | c_T | WME MSE ± se | c_τ | WME/HLM |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        c = r["cfg"]
        lines.append(f"| {c.law} | {c.d} | {c.n} | {int(c.x)} | {_fmt(r['hlm'], r['hlm_se'])} "
                     f"| {r['hlm_c']} | {_fmt(r['wme'], r['wme_se'])} | {r['wme_c']} "
                     f"| {r['wme'] / r['hlm']:.2f} |")
    return "\n".join(lines)


def b3_table(results: list[dict]) -> str:
    lines = ["| law | n | γ | m_max/m̄ | HLM MSE ± se | c_A | WME MSE ± se | c_τ | WME/HLM |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        c = r["cfg"]
        s = imbalanced_sizes(c.n, 100 * c.n, c.x)
        lines.append(f"| {c.law} | {c.n} | {c.x:g} | {s.max() / s.mean():.2f} "
                     f"| {_fmt(r['hlm'], r['hlm_se'])} | {r['hlm_c']} "
                     f"| {_fmt(r['wme'], r['wme_se'])} | {r['wme_c']} "
                     f"| {r['wme'] / r['hlm']:.2f} |")
    return "\n".join(lines)


def plot_b1(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    laws = sorted({r["cfg"].law for r in results}, key=list(SIGMA_X).index)
    ds = sorted({r["cfg"].d for r in results})
    fig, axes = plt.subplots(len(ds), len(laws), figsize=(4.2 * len(laws), 3.4 * len(ds)),
                             squeeze=False)
    for i, d in enumerate(ds):
        for j, law in enumerate(laws):
            ax = axes[i][j]
            for n, col in zip(sorted({r["cfg"].n for r in results}), ("C0", "C3", "C2"),
                              strict=False):
                rs = sorted((r for r in results if r["cfg"].law == law and r["cfg"].d == d
                             and r["cfg"].n == n), key=lambda r: r["cfg"].x)
                if not rs:
                    continue
                xs = [r["cfg"].x for r in rs]
                ax.errorbar(xs, [r["hlm"] for r in rs], [r["hlm_se"] for r in rs], color=col,
                            marker="o", label=f"HLM n={n}")
                ax.errorbar(xs, [r["wme"] for r in rs], [r["wme_se"] for r in rs], color=col,
                            marker="s", ls="--", label=f"WME n={n}")
            ax.set(xscale="log", yscale="log", xlabel="m", ylabel="MSE", title=f"{law}, d={d}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_b3(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    laws = sorted({r["cfg"].law for r in results}, key=list(SIGMA_X).index)
    fig, axes = plt.subplots(1, len(laws), figsize=(4.2 * len(laws), 3.4), squeeze=False)
    for j, law in enumerate(laws):
        ax = axes[0][j]
        for n, col in zip(sorted({r["cfg"].n for r in results}), ("C0", "C3", "C2"),
                          strict=False):
            rs = sorted((r for r in results if r["cfg"].law == law and r["cfg"].n == n),
                        key=lambda r: r["cfg"].x)
            xs = [r["cfg"].x for r in rs]
            ax.errorbar(xs, [r["hlm"] for r in rs], [r["hlm_se"] for r in rs], marker="o",
                        color=col, label=f"HLM n={n}")
            ax.errorbar(xs, [r["wme"] for r in rs], [r["wme_se"] for r in rs], marker="s",
                        color=col, ls="--", label=f"WME n={n}")
        ax.set(yscale="log", xlabel="γ", ylabel="MSE", title=f"{law} (N = 100 n)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _key(c: Config) -> tuple:
    return (c.plan, c.law, c.d, c.n, c.x)


def _load(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as fh:
        for line in fh:
            r = json.loads(line)
            r["cfg"] = Config(**r["cfg"])
            out.append(r)
    return out


def _budget(args, tune: int, trials: int, d: int, n: int) -> tuple[int, int]:
    """Fewer data sets for the expensive d = 3 lattice runs (documented in the report)."""
    if d == 3 and n >= 10_000:
        return max(1, tune // 2), max(2, trials // 3)
    if d == 3:
        return tune, max(2, (2 * trials) // 3)
    return tune, trials


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small grids, few trials (~1 min)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--trials", type=int, default=None, help="evaluation trials per point")
    ap.add_argument("--tune", type=int, default=None, help="tuning data sets per point")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: b1,b3,timing")
    ap.add_argument("--timing-n", type=int, default=1_000_000)
    ap.add_argument("--constants", default="calibrated", choices=("calibrated", "nrs", "paper"),
                    help="HLM (alpha, beta) mode (spec §2.9); 'paper' = reproduction only")
    ap.add_argument("--dims", default="1,3", help="B1 dimensions, e.g. 1")
    ap.add_argument("--report-only", action="store_true",
                    help="only rebuild tables/plots from the JSONL log (no new runs)")
    ap.add_argument("--resume", action="store_true",
                    help="reuse finished configurations from the JSONL log")
    ap.add_argument("--b3-n", type=lambda v: [int(x) for x in v.split(",")],
                    default=[1000, 10000], help="user counts for B3 (spec: 1000; N = 100 n)")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    os.makedirs(args.out, exist_ok=True)

    if args.quick:
        b1_grid = [(law, 1, 1000, m) for law in ("uniform", "gauss", "lomax")
                   for m in (1, 10, 100)]
        b3_grid = [(law, 1000, g) for law in ("uniform", "gauss", "exponential")
                   for g in (1, 3, 10)]
        trials, tune = args.trials or 10, args.tune or 2
    else:
        ms = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
        dims = tuple(int(v) for v in args.dims.split(","))
        b1_grid = [(law, d, n, m) for d in dims for law in ("uniform", "gauss", "lomax")
                   for n in (1000, 10000) for m in ms
                   if d == 1 or n == 1000 or m in (1, 10, 100, 1000)]
        b3_grid = [(law, n, g) for law in ("uniform", "gauss", "exponential")
                   for n in args.b3_n for g in (1, 1.5, 2, 3, 4, 5, 6, 8, 10)]
        trials, tune = args.trials or 30, args.tune or 3

    md = ["# HLM vs WME — measured (bench/central_hlm_wme.py"
          + (" --quick" if args.quick else "") + ")", "",
          f"ε = {EPS}, δ = {DELTA}, R_c = B = {RC}; HLM constants = {args.constants}.", ""]
    suffix = ("_quick" if args.quick else "") + \
        ("" if args.constants == "calibrated" else f"_{args.constants}")
    log = os.path.join(args.out, f"central_hlm_wme{suffix}.jsonl")
    done = _load(log) if args.resume or args.report_only else []
    seen = {_key(r["cfg"]) for r in done}
    cfgs = []
    if "b1" not in skip:
        cfgs += [Config("B1", law, d, n, float(m), *_budget(args, tune, trials, d, n), 0,
                        args.constants) for law, d, n, m in b1_grid]
    if "b3" not in skip:
        cfgs += [Config("B3", law, 1, n, float(g), tune, trials, 0, args.constants)
                 for law, n, g in b3_grid]
    todo = [] if args.report_only else [c for c in cfgs if _key(c) not in seen]
    todo.sort(key=lambda c: (c.d == 3 and c.n >= 10_000, c.d == 3))  # cheap ones first
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool, open(log, "a") as fh:
        for r in pool.map(run_config, todo):
            done.append(r)
            fh.write(json.dumps({**r, "cfg": r["cfg"].__dict__}) + "\n")
            fh.flush()
            c = r["cfg"]
            print(f"[{time.time() - t0:6.0f}s] {c.plan} {c.law} d={c.d} n={c.n} x={c.x:g}: "
                  f"HLM {r['hlm']:.3g} WME {r['wme']:.3g}", flush=True)
    budgets = sorted({(r["cfg"].plan, r["cfg"].d, r["cfg"].n, r["cfg"].tune, r["cfg"].trials)
                      for r in done})
    md += ["Budgets (plan, d, n, tuning data sets, evaluation trials): "
           + "; ".join(f"{p} d={d} n={n}: {tu}/{tr}" for p, d, n, tu, tr in budgets), ""]
    b1 = sorted((r for r in done if r["cfg"].plan == "B1"),
                key=lambda r: (r["cfg"].d, r["cfg"].law, r["cfg"].n, r["cfg"].x))
    b3 = sorted((r for r in done if r["cfg"].plan == "B3"),
                key=lambda r: (r["cfg"].law, r["cfg"].n, r["cfg"].x))
    if b1:
        table = b1_table(b1)
        print("## B1 balanced: MSE vs m\n\n" + table + "\n", flush=True)
        md += ["## B1 balanced: MSE vs m", "", table, "",
               f"![B1](central_hlm_wme_b1{suffix}.png)", ""]
        plot_b1(b1, os.path.join(args.out, f"central_hlm_wme_b1{suffix}.png"))
    if b3:
        table = b3_table(b3)
        print("## B3 imbalanced: MSE vs γ\n\n" + table + "\n", flush=True)
        md += ["## B3 imbalanced: MSE vs γ (N ≈ 100 n)", "", table, "",
               f"![B3](central_hlm_wme_b3{suffix}.png)", ""]
        plot_b3(b3, os.path.join(args.out, f"central_hlm_wme_b3{suffix}.png"))
    if "timing" not in skip:
        n = 10_000 if args.quick else args.timing_n
        tm = timing(n, 10, 3)
        table = ("| estimator | end-to-end (N = 10·n records) s | core (n user means) s |\n"
                 "|---|---|---|\n"
                 f"| HLM (d=1, exact Δ̃) | {tm['hlm']:.2f} | {tm['hlm_core']:.2f} |\n"
                 f"| WME (d=1, Laplace) | {tm['wme']:.2f} | {tm['wme_core']:.2f} |")
        print(f"## Run time at n = {n} users (median of 3)\n\n{table}\n", flush=True)
        md += [f"## Run time at n = {n:,} users, m = 10 (median of 3)", "", table, ""]
    name = f"central_hlm_wme_raw{suffix}.md"
    with open(os.path.join(args.out, name), "w") as fh:
        fh.write("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
