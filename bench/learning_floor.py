"""How close user-level linear regression can get on the learning bench, and what stands in
the way (issue 27: linear d = 10 misses its R² targets).

Run from the repository root::

    python bench/learning_floor.py floor                       # < 1 s, no simulation
    nice python bench/learning_floor.py what-if --dims 10 --eps 1 --reps 2

* ``floor`` — the R² loss, against the non-private fit, of an *oracle* version of the
  windowed rounds on the data of ``bench/learning_frontier.py sgd`` (linear, ``X ~ U[−1,
  1]^d``, n = 10⁵, m = 100): no optimization error (the Hessian known, one step from θ*),
  every user's report in one gradient estimate, every window at the narrowest the design
  ever uses — the spread prior ``±Z_SPREAD·h_j/√m`` around the exact mean gradient
  (``uldp.collector.models.windows``), ``h_j`` the half-width of a record gradient's
  support at θ*. The θ noise is ``Var(ĝ_j)/H_jj²`` per coordinate (diagonal Hessian:
  independent features), turned into R² through the bench's design. Columns: the spread
  prior as built and scaled by ½ and ¼ (what a measured, smaller spread of the users' mean
  gradients would allow). A cell below the target here cannot be met by better
  optimization (steps, rounds, averaging) with these windows.
* ``what-if`` — the bench's uldp runs (same data, seeds and code path as
  ``learning_frontier.py sgd``) with two *oracle* knobs that no deployment has, to show
  what each missing private measurement would buy: ``spread/4`` (``Z_SPREAD`` ÷ 4: the
  users' mean gradients spread 4× less than the worst case ``h/√m`` assumes — true on this
  bench, where a record gradient's coordinate has standard deviation ≈ 0.03 against
  ``h ≈ 0.5``) and ``trace`` (the smoothness ``G`` set to the true ``tr E[zzᵀ]`` instead
  of the public ``Σ b_j² = 1``: the step ``η = 1/G`` grows by ``1/tr``, about 2.5 at
  d = 10). Not privacy results: the knobs use the data.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning_frontier as lf

from uldp.client.randomness import RandomSource
from uldp.collector.learning.fit import run_sgd
from uldp.collector.models import windows
from uldp.collector.models.windows import (
    choose_grouping,
    coordinate_variances,
    record_support,
    steady_widths,
)


def floor_loss(d: int, eps: float, n: int, m: int, shrink: float) -> tuple[float, int]:
    """The oracle R² loss (module docstring) and the coordinates per user it uses."""
    p = d + 1
    b = np.full(p, 1 / math.sqrt(p))
    w, b0 = lf.true_model("linear", d)
    theta = np.append(w, b0) * math.sqrt(p) / lf.LABEL_BOUND  # the estimator's scaling
    sup = record_support("least_squares", theta, 2.0, 0.0, b, 1.0)
    h = (sup[:, 1] - sup[:, 0]) / 2
    stat_var = h * h / m
    widths = shrink * steady_widths(sup, m, False)
    grouping = choose_grouping(p, eps, n, widths, stat_var)
    v = coordinate_variances(grouping, n, widths, stat_var)
    H = np.append(np.full(d, b[0] ** 2 / 3), b[-1] ** 2)  # E z_j², x uniform on [−1, 1]
    var = v / H ** 2 * (lf.LABEL_BOUND / math.sqrt(p)) ** 2  # original coordinates
    mse = float(var[:d].sum()) / 3 + float(var[d])  # E x_j² = 1/3
    return mse / (float(w @ w) / 3 + lf.NOISE_SD ** 2), len(grouping.groups[0].components)


def part_floor(args: argparse.Namespace) -> list[str]:
    lines = ["| d | ε | floor, spread prior as built | spread × ½ | spread × ¼ | "
             "coordinates per user |", "|---|---|---|---|---|---|"]
    for d in args.dims:
        for eps in args.eps:
            cells = [floor_loss(d, eps, args.users, args.samples, s) for s in (1, .5, .25)]
            lines.append(f"| {d} | {eps:g} | " + " | ".join(f"−{100 * c[0]:.2f}"
                                                         for c in cells)
                         + f" | {cells[0][1]} |")
    return ["R² loss in points against the non-private fit (oracle: no optimization "
            f"error; n = {args.users}, m = {args.samples}):\n", *lines]


def _run(d: int, eps: float, rep: int, knob: str, args: argparse.Namespace
         ) -> tuple[float, int]:
    src = lf.BlockUsers("linear", args.users, args.samples, d, 1000 + rep)
    cfg = lf.config_for("linear", d, eps, "auto", rep)
    if "trace" in knob:
        Z, _ = src.mapped(*src.raw(np.arange(min(args.users, 2000))))
        cfg = replace(cfg, smoothness=float(np.mean(np.sum(Z * Z, axis=-1))))
    saved = windows.Z_SPREAD
    windows.Z_SPREAD = saved / 4 if "spread" in knob else saved
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = run_sgd(cfg, src, rng=RandomSource.seeded(f"lf-linear-{d}-{eps}-{rep}"),
                          m_ref=src.samples, progress=False)
    finally:
        windows.Z_SPREAD = saved
    return lf.quality("linear", d, lf.original("linear", res.theta)), res.t0


KNOBS = ("default", "spread/4", "trace", "spread/4+trace")


def part_what_if(args: argparse.Namespace) -> list[str]:
    lines = ["| d | ε | reps | non-private R² | " + " | ".join(f"{k}: R² − non-private"
                                                              for k in KNOBS)
             + " | rounds |", "|---|---|---|---|" + "---|" * (len(KNOBS) + 1)]
    for d in args.dims:
        for eps in args.eps:
            gaps: dict[str, list[float]] = {k: [] for k in KNOBS}
            rounds: dict[str, list[int]] = {k: [] for k in KNOBS}
            nps = []
            for rep in range(args.reps):
                src = lf.BlockUsers("linear", args.users, args.samples, d, 1000 + rep)
                npq = lf.quality("linear", d, lf.sklearn_fit("linear",
                                                             *src.records(1_000_000)))
                nps.append(npq)
                for k in KNOBS:
                    q, T = _run(d, eps, rep, k, args)
                    gaps[k].append(q - npq)
                    rounds[k].append(T)
                    print(f"  d={d} eps={eps} rep={rep} {k}: {q:.4f}", file=sys.stderr,
                          flush=True)
            lines.append(f"| {d} | {eps:g} | {args.reps} | {np.mean(nps):.4f} | "
                         + " | ".join(lf.fmt(*lf.stats(gaps[k])) for k in KNOBS) + " | "
                         + " / ".join(f"{np.mean(rounds[k]):.0f}" for k in KNOBS) + " |")
    return ["uldp linear regression with oracle knobs (not private: module docstring); "
            "R² − non-private, mean ± 2 SE over the repetitions:\n", *lines]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=("floor", "what-if"))
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 10, 50])
    ap.add_argument("--eps", type=float, nargs="+", default=list(lf.EPS))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", type=Path, default=lf.OUT)
    args = ap.parse_args(argv)
    t = time.time()
    lines = {"floor": part_floor, "what-if": part_what_if}[args.part](args)
    cmd = "python bench/learning_floor.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lf.append_section(args.out, f"{args.part} — `{cmd}` ({time.time() - t:.0f} s)", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
