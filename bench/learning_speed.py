"""Speed of the learning queries: device time per SGD report, collector time per SGD step.

Sections of ``docs/algorithms.md``: §8.3 (per step: each device computes m clipped gradients, their
Kashin coefficients and one Algorithm-1 report; the collector aggregates ``n_t`` reports,
computes ``k̂``, then ``g_t = Uᵀ θ̂`` and the update).

* device: ``compute_report`` of one SGD task (stage I and stage II) for d = 100,
  m = 1000, logistic model, Gaussian and Hadamard Kashin frames;
* collector: one SGD step at n_t = 10⁵ users — stage-I accumulation of n_t/2 reports,
  ``k̂``, stage-II accumulation, finalize (Uᵀ θ̂) and the θ update. Reports are drawn as
  valid random integers of the right shape (the device work is measured separately);
* end to end: one simulated step (devices + collector in-process) at a smaller n_t.

    python bench/learning_speed.py [--quick]

Writes ``bench/results/learning_speed[_quick].md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_report, report_length, report_limit
from uldp.collector.learning.runner import SyntheticUsers, source_privatizer
from uldp.collector.models.sgd import SGDConfig, step_spec
from uldp.collector.planner import compile_query
from uldp.collector.programs import MeanEstProgram
from uldp.collector.programs.driver import run_program

OUT = Path(__file__).resolve().parent / "results"


def _spec(d: int, m: int, n_t: int, frame: str, eps: float = 4.0):
    cfg = SGDConfig(model="logistic", epsilon=eps, clip=1.0, frame_kind=frame, seed=1)
    theta = 0.1 * np.cos(np.arange(d))
    return step_spec(cfg, theta, n_t, m, d, 0)


def device_time(d: int, m: int, frame: str, repeats: int) -> dict[str, float]:
    spec = _spec(d, m, 10_000, frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = compile_query(spec)
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(m, d)) / np.sqrt(d)
    y = (rng.uniform(size=m) < 0.5).astype(float)
    t1 = plan.task_for(0, 1)
    t2 = plan.task_for(0, 2, tuple(B // 2 + 1 for _, _, B in t1.bins))
    src = RandomSource.seeded(3)
    out = {}
    for name, task in (("stage I", t1), ("stage II", t2)):
        compute_report(task, X, y, rng=src)  # warm-up (frame cache)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            compute_report(task, X, y, rng=src)
            times.append(time.perf_counter() - t)
        out[name] = statistics.median(times)
    out["components"] = plan.n_components
    out["regime"] = plan.grouping.regime
    out["report_ints_stage1"] = report_length(t1)
    return out


def collector_time(d: int, m: int, n_t: int, frame: str) -> dict[str, float]:
    spec = _spec(d, m, n_t, frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = compile_query(spec)
    group, stage = plan.assign_all()
    rng = np.random.default_rng(1)
    timings = {"stage I accumulate": 0.0, "k̂": 0.0, "stage II accumulate": 0.0,
               "finalize + update": 0.0}
    stage1 = {}
    for g in range(plan.n_groups):
        t1 = plan.task_for(g, 1)
        k = int((group == g).sum() - ((group == g) & (stage == 2)).sum())
        R = rng.integers(-5, 6, size=(k, report_length(t1)))
        t = time.perf_counter()
        acc = plan.new_accumulator(g, 1)
        acc.add(R)
        stage1[g] = acc
        timings["stage I accumulate"] += time.perf_counter() - t
    t = time.perf_counter()
    khat = plan.khat_from(stage1)
    timings["k̂"] = time.perf_counter() - t
    final = {}
    for g in range(plan.n_groups):
        t2 = plan.task_for(g, 2, khat[g])
        k = int(((group == g) & (stage == 2)).sum())
        lim = min(report_limit(t2), 1 << 20)
        R = rng.integers(-lim // 4, lim // 4, size=(k, report_length(t2)))
        t = time.perf_counter()
        acc = plan.new_accumulator(g, 2, khat[g])
        acc.add(R)
        final[g] = acc
        timings["stage II accumulate"] += time.perf_counter() - t
    t = time.perf_counter()
    est = plan.finalize(final)
    theta = np.asarray(spec.extra["theta"]) - 4.0 * est.values
    timings["finalize + update"] = time.perf_counter() - t
    assert theta.shape == (d,)
    timings["total"] = sum(timings.values())
    return timings


def end_to_end(d: int, m: int, n_t: int, frame: str) -> float:
    spec = _spec(d, m, n_t, frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = compile_query(spec)
    gen = np.random.default_rng(2)

    def draw(k: int):
        X = gen.uniform(-1, 1, size=(k, m, d)) / np.sqrt(d)
        return X, (gen.uniform(size=(k, m)) < 0.5).astype(float)
    src = SyntheticUsers(n_t, m, d, draw)
    t = time.perf_counter()
    run_program(MeanEstProgram(spec, plan=plan),
                source_privatizer(src, np.arange(n_t), RandomSource.seeded(4)))
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    q = args.quick
    d, m = 100, 1000
    n_t = 20_000 if q else 100_000
    lines = [f"# Learning speed ({'quick' if q else 'full'} run)", "",
             "Machine: shared 2-core VM (other benchmarks were running concurrently; "
             "timings are upper bounds).", "",
             f"## Device: one SGD report, logistic model, d = {d}, m = {m}, ε = 4", "",
             "| frame | N | regime | stage-I ints | stage I (s) | stage II (s) |",
             "|---|---|---|---|---|---|"]
    for frame in ("gaussian", "hadamard"):
        r = device_time(d, m, frame, 3 if q else 7)
        lines.append(f"| {frame} | {r['components']} | {r['regime']} | "
                     f"{r['report_ints_stage1']} | {r['stage I']:.3f} | {r['stage II']:.3f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines += ["", f"## Collector: one SGD step at n_t = {n_t} users (d = {d}, ε = 4)", "",
              "| frame | " + " | ".join(["stage I accumulate", "k̂", "stage II accumulate",
                                          "finalize + update", "total"]) + " |",
              "|---|---|---|---|---|---|"]
    for frame in ("gaussian", "hadamard"):
        c = collector_time(d, m, n_t, frame)
        lines.append(f"| {frame} | " + " | ".join(f"{c[k]:.3f} s" for k in
                                                   ("stage I accumulate", "k̂",
                                                    "stage II accumulate",
                                                    "finalize + update", "total")) + " |")
        print(lines[-1], file=sys.stderr, flush=True)
    n_e2e, m_e2e = (200, 1000) if q else (1000, 1000)
    e2e = end_to_end(d, m_e2e, n_e2e, "hadamard")
    lines += ["", f"## End to end: one simulated step, n_t = {n_e2e}, m = {m_e2e}, d = {d} "
              "(Hadamard frame)", "",
              f"{e2e:.2f} s ({1e3 * e2e / n_e2e:.2f} ms per device, all devices in one "
              "process)", ""]
    path = args.out / f"learning_speed{'_quick' if q else ''}.md"
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
