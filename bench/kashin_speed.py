"""Throughput of the Kashin coefficient map (spec §3.6, [D9]; target ≥ 100k samples/s at d = 128).

Measures ``kashin_coefficients`` for both frame kinds at several dimensions: wall-clock and
process-CPU samples/s, LV iteration counts, the observed level on the benchmark data and the
calibrated level (random + aligned + basis + adversarial probes). Prints a markdown table.

    python bench/kashin_speed.py                       # defaults: d = 16, 128, 512
    python bench/kashin_speed.py --dims 128 --tols 1e-10 1e-3 --samples 200000
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Sequence

import numpy as np

from uldp.client.kashin import (
    KASHIN_DELTA_DEFAULT,
    KASHIN_TOL_DEFAULT,
    KashinFrame,
    kashin_coefficients_info,
    kashin_level,
)
from uldp.client.kashin_calibration import calibrate


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dims", type=int, nargs="+", default=[16, 128, 512])
    p.add_argument("--kinds", nargs="+", default=["gaussian", "hadamard"],
                   choices=["gaussian", "hadamard"])
    p.add_argument("--tols", type=float, nargs="+", default=[KASHIN_TOL_DEFAULT, 1e-10],
                   help="LV tolerances (default: library default and the spec's 1e-10)")
    p.add_argument("--delta", type=float, default=KASHIN_DELTA_DEFAULT)
    p.add_argument("--samples", type=int, default=None,
                   help="samples per run (default: 131072 for d ≤ 128, ∝ 1/d² above)")
    p.add_argument("--repeats", type=int, default=3, help="best-of repeats")
    p.add_argument("--workers", type=int, default=None, help="threads (default: library auto)")
    p.add_argument("--calib-trials", type=int, default=500)
    p.add_argument("--calib-steps", type=int, default=20)
    p.add_argument("--no-calibrate", action="store_true")
    p.add_argument("--seed", type=int, default=2024, help="public frame seed")
    return p.parse_args(argv)


def sphere_data(S: int, d: int, seed: int) -> np.ndarray:
    """Samples uniform on the unit sphere (the ℓ2-support setting of §6.1)."""
    X = np.random.default_rng(seed).standard_normal((S, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def time_run(frame: KashinFrame, X: np.ndarray, tol: float, delta: float,
             workers: int | None, repeats: int) -> tuple[float, float, np.ndarray, np.ndarray]:
    """Best wall and CPU seconds over ``repeats`` runs, plus the coefficients and iterations."""
    kashin_coefficients_info(frame, X[:256], tol=tol, delta=delta, workers=workers)  # warm-up
    best_wall = best_cpu = float("inf")
    info = None
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        info = kashin_coefficients_info(frame, X, tol=tol, delta=delta, workers=workers)
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    assert info is not None
    return best_wall, best_cpu, info.coefficients, info.iterations


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    load = os.getloadavg()
    print(f"# Kashin coefficient throughput\n\nhost: {platform.machine()}, "
          f"{os.cpu_count()} CPUs, numpy {np.__version__}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
          f"load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
          f"delta={args.delta}, workers={args.workers or 'auto'}, "
          f"data uniform on the unit sphere\n")
    print("| frame | d | N | tol | threads | samples | samples/s (wall) | samples/s (CPU) "
          "| iters mean | iters p50/p99/max | level (data) | level (calibrated) "
          "| max ‖Uᵀa−x‖/‖x‖ |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in args.dims:
        S = args.samples or min(131072, max(4096, int(131072 * (128 / d) ** 2)))
        X = sphere_data(S, d, seed=d)
        for kind in args.kinds:
            frame = KashinFrame.from_seed(d, args.seed, kind=kind)
            calib = "—"
            if not args.no_calibrate:
                res = calibrate(frame, delta=args.delta, trials=args.calib_trials,
                                adversarial_steps=args.calib_steps, rng_seed=0)
                calib = f"{res.level:.3f}"
            for tol in args.tols:
                wall, cpu, A, it = time_run(frame, X, tol, args.delta, args.workers,
                                            args.repeats)
                lev = kashin_level(frame, X, A).max()
                err = (np.linalg.norm(frame.synthesis(A) - X, axis=1)).max()
                p50, p99 = np.percentile(it, [50, 99])
                threads = str(args.workers) if args.workers else (
                    "1 + BLAS" if kind == "gaussian" else str(min(4, os.cpu_count() or 1)))
                print(f"| {kind} | {d} | {frame.N} | {tol:g} | {threads} | {S} | {S / wall:,.0f} "
                      f"| {S / cpu:,.0f} | {it.mean():.1f} | {p50:.0f}/{p99:.0f}/{it.max()} "
                      f"| {lev:.3f} | {calib} | {err:.1e} |", flush=True)
    load = os.getloadavg()
    print(f"\nload average at end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")


if __name__ == "__main__":
    main()
