"""Interval coverage of the learning queries on skewed real users (issue 27, honesty).

Run from the repository root (``pip install -e '.[dev,bench]'``)::

    nice python bench/learning_coverage.py --reps 20          # InstEval (lme4), ε = 1, 2

* **grid cells** — classify / regress on InstEval (a student is a user, the lectures it
  rated its records, median 22, a few with hundreds): the cells ``q̂_l`` (and ``p̂_l``) of
  a fixed grid against the same cells computed without privacy over every user; coverage
  of ``q̂_l ± 1.96·se_l`` over seeds (the users are the same in every repetition, the
  groups and the noise are redrawn). These standard errors are what the shrinkage reads
  (``collector/models/shrinkage.py``).
* **SGD rounds** — logistic SGD (``auto``) on InstEval: every round's gradient estimate
  against the mean over all students of their clipped mean gradient at the round's ``θ_t``
  (z-scores pooled over rounds and coordinates).

Appends its tables to ``bench/results/learning_coverage.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.linalg import hadamard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_frontier import append_section
from real_learning import _insteval

from uldp.client.hadamard import next_pow2
from uldp.client.kinds.learning import _logistic, clip_rows, grid_bins
from uldp.client.randomness import RandomSource
from uldp.collector.learning.estimators import LDPLogisticRegression
from uldp.collector.learning.fit import run_grid_query
from uldp.collector.learning.runner import as_source
from uldp.collector.models.grid import components_of, hadamard_inverse

OUT = Path(__file__).resolve().parent / "results" / "learning_coverage.md"


def grid_coverage(ds: dict, task: str, M: int, eps: float, reps: int) -> tuple[float, ...]:
    lo, hi = ds["box"]
    key = "cls" if task == "classify" else "reg"
    labels = ([np.where(c > 0, 1.0, -1.0) for c in ds[key]] if task == "classify"
              else [np.clip(r, -ds["T"], ds["T"]) for r in ds[key]])
    users = list(zip(ds["X"], labels, strict=True))
    K = next_pow2(M ** 2)
    H = hadamard(K)
    parts = 1 if task == "classify" else 2

    def stat(X: np.ndarray, y: np.ndarray) -> np.ndarray:
        b = grid_bins(X, M, lo, hi)
        ws = [y] if task == "classify" else [y, np.ones_like(y)]
        return np.concatenate([H @ (np.bincount(b, weights=w, minlength=K) / len(y))
                               for w in ws])

    def cells(v: np.ndarray) -> np.ndarray:
        return np.concatenate([hadamard_inverse(v[i * K:(i + 1) * K]) for i in range(parts)])

    truth = cells(np.mean([stat(X, y) for X, y in users], axis=0))
    z = []
    for r in range(reps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, est, _, _ = run_grid_query(
                task, as_source(users), epsilon=eps, lo=lo, hi=hi, M=M, beta=1.0,
                method="auto", seed=r, rng=RandomSource.seeded(f"coverage-{task}-{M}-{r}"),
                m_ref=ds["m_ref"], extra={} if task == "classify" else {"label_bound": ds["T"]},
                progress=False, query_id=task)
        z.append((cells(components_of(est)) - truth) / np.asarray(est.std_error))
    za = np.asarray(z)
    return float(np.mean(np.abs(za) <= 1.959964)), float(za.std()), float(za.size)


def sgd_coverage(ds: dict, eps: float, reps: int) -> tuple[float, ...]:
    users = list(zip(ds["X"], ds["cls"], strict=True))
    z: list[float] = []
    for rep in range(reps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = LDPLogisticRegression(epsilon=eps, alpha=0.0, feature_bounds=ds["box"],
                                        method="auto", random_state=rep,
                                        m_ref=ds["m_ref"]).fit(users)
        fx = est._scaler(2)
        Z = [fx(X) for X in ds["X"]]
        clip = est.result_["config"]["clip"]
        for row in est.result_["trajectory"]:
            th = np.asarray(row["theta"])
            truth = np.mean([clip_rows(_logistic(th, Zi, yi, {}), clip).mean(0)
                             for Zi, yi in zip(Z, ds["cls"], strict=True)], axis=0)
            z.extend(((np.asarray(row["gradient"]) - truth)
                      / np.asarray(row["std_error"])).tolist())
    za = np.asarray(z)
    return float(np.mean(np.abs(za) <= 1.959964)), float(za.std()), float(za.size)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sgd-reps", type=int, default=2)
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--grids", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    t0 = time.time()
    ds = _insteval()
    lines = ["| query | ε | grid M | intervals | coverage (95 %) | sd of z |",
             "|---|---|---|---|---|---|"]
    for eps in args.eps:
        for task in ("classify", "regress"):
            for M in args.grids:
                cov, sd, k = grid_coverage(ds, task, M, eps, args.reps)
                lines.append(f"| {task} cells | {eps:g} | {M} | {k:.0f} | {cov:.3f} | {sd:.2f} |")
                print(lines[-1], file=sys.stderr, flush=True)
        cov, sd, k = sgd_coverage(ds, eps, args.sgd_reps)
        lines.append(f"| logistic SGD round gradients | {eps:g} | – | {k:.0f} | {cov:.3f} | "
                     f"{sd:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    cmd = "python bench/learning_coverage.py " + " ".join(sys.argv[1:] if argv is None
                                                         else argv)
    append_section(args.out, f"InstEval coverage — `{cmd}` ({time.time() - t0:.0f} s)\n",
                   [f"{len(ds['X'])} students, {args.reps} seeds per grid row, "
                    f"{args.sgd_reps} SGD runs; z = (estimate − truth)/se.\n", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
