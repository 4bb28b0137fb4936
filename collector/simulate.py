"""In-process fleet simulation of a whole query (``uldp simulate``).

Spec: ``user_level_ldp.md`` §2.2 (rounds), §13 (validation plan). The simulation runs the
production code: the plan of ``uldp.collector.planner`` assigns users, the device function
``uldp.client.tasks.compute_reports`` privatizes every user of a (group, stage) in one
vectorized call (chunked to bound memory), and the collector accumulators aggregate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.collector.datasets import FleetData
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import Plan, QuerySpec, compile_query

__all__ = ["Progress", "SimulationResult", "drive_plan", "run_query", "simulate_reps"]

CHUNK_CELLS = 1 << 23  # samples·dims generated per chunk (≈ 64 MiB of float64)


class Progress:
    """A minimal progress bar on stderr (silent when not a TTY unless forced)."""

    def __init__(self, total: int, label: str, enabled: bool | None = None) -> None:
        self.total, self.label, self.done = max(total, 1), label, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._last = 0.0

    def update(self, k: int) -> None:
        self.done += k
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done >= self.total):
            self._last = now
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(30 * frac)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}%")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _chunk_users(spec: QuerySpec) -> int:
    cells = spec.samples * (spec.dim if spec.kind != "mean" else 1)
    return max(1, CHUNK_CELLS // max(cells, 1))


def _run_stage(plan: Plan, data: FleetData, members: np.ndarray, task_of: Callable[..., Any],
               acc: Any, rng: RandomSource, progress: Progress | None) -> None:
    """Privatize and aggregate ``members`` chunk by chunk; the next chunk's synthetic data
    are generated on a second thread meanwhile (numpy releases the GIL while filling)."""
    step = _chunk_users(plan.spec)
    starts = list(range(0, members.size, step))
    if not starts:
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(data.draw, min(step, members.size))
        for i, start in enumerate(starts):
            idx = members[start: start + step]
            X = pending.result()
            if i + 1 < len(starts):
                nxt = members[starts[i + 1]: starts[i + 1] + step]
                pending = pool.submit(data.draw, nxt.size)
            _privatize_chunk(plan, X, idx, task_of, acc, rng)
            if progress:
                progress.update(idx.size)


def _privatize_chunk(plan: Plan, X: np.ndarray, idx: np.ndarray, task_of: Callable[..., Any],
                     acc: Any, rng: RandomSource) -> None:
    task = task_of()
    if plan.spec.method == "baseline-a":
        offs = plan.offset_for(idx)
        acc.add(compute_reports(task, X, rng, offsets=offs), offs)
    else:
        acc.add(compute_reports(task, X, rng))


StageRunner = Callable[[np.ndarray, Callable[[], Any], Any], None]


def drive_plan(plan: Plan, run_stage: StageRunner) -> Estimate:
    """The collector's round template (§2.2) over a plan: stage I of every group, k̂,
    stage II, finalize (or the single stage of SSL/baselines). ``run_stage(mask, task_of,
    acc)`` privatizes the slots selected by the boolean ``mask`` into ``acc``."""
    group, stage = plan.assign_all()
    final: dict[int, Any] = {}
    if plan.two_stage:
        stage1 = {}
        for g in range(plan.n_groups):
            acc = plan.new_accumulator(g, 1)
            run_stage((group == g) & (stage == 1), lambda g=g: plan.task_for(g, 1), acc)
            stage1[g] = acc
        khat = plan.khat_from(stage1)
        for g in range(plan.n_groups):
            acc = plan.new_accumulator(g, 2, khat[g])
            run_stage((group == g) & (stage == 2), lambda g=g: plan.task_for(g, 2, khat[g]),
                      acc)
            final[g] = acc
        est = plan.finalize(final)
        est.extra["khat"] = {str(g): list(k) for g, k in khat.items()}
        return est
    for g in range(plan.n_groups):
        acc = plan.new_accumulator(g, 0)
        run_stage(group == g, lambda g=g: plan.task_for(g, 0), acc)
        final[g] = acc
    return plan.finalize(final)


def run_query(spec: QuerySpec, data: FleetData, rng: RandomSource,
              progress: Progress | None = None) -> Estimate:
    """Run one query over ``spec.users`` simulated users; return the collector's estimate."""
    plan = compile_query(spec)
    return drive_plan(plan, lambda mask, task_of, acc: _run_stage(
        plan, data, np.flatnonzero(mask), task_of, acc, rng, progress))


@dataclass
class SimulationResult:
    estimate: np.ndarray
    truth: np.ndarray
    sq_error: float  # mean over reps of ||estimate - truth||²
    ci_coverage: float  # fraction of (rep, coordinate) intervals holding the truth
    seconds: float
    reps: int
    last: Estimate
    errors: list[float] = field(default_factory=list)

    def to_dict(self, spec: QuerySpec, predicted: float | None) -> dict[str, Any]:
        return {
            "kind": spec.kind, "method": spec.method,
            "estimate": self.estimate.tolist(), "truth": self.truth.tolist(),
            "sq_error": self.sq_error, "predicted_mse": predicted,
            "ci_coverage": self.ci_coverage, "users": spec.users, "samples": spec.samples,
            "dim": spec.dim, "epsilon": spec.epsilon, "reps": self.reps,
            "regime": self.last.extra.get("regime"), "seconds": self.seconds,
            "ci_low": self.last.ci_low.tolist(), "ci_high": self.last.ci_high.tolist(),
        }


def simulate_reps(spec: QuerySpec, data: FleetData, rng: RandomSource, reps: int = 1,
                  progress: bool | None = None) -> SimulationResult:
    """``reps`` independent runs of the query (fresh data and noise each time)."""
    t0 = time.perf_counter()
    errs, cover = [], []
    bar = Progress(reps * spec.users, f"simulate {spec.kind}", progress)
    est = None
    for _ in range(reps):
        est = run_query(spec, data, rng, bar)
        errs.append(float(np.sum((est.values - data.truth) ** 2)))
        cover.append(est.covers(data.truth))
    assert est is not None
    return SimulationResult(est.values, data.truth, float(np.mean(errs)),
                            float(np.mean(np.concatenate(cover))),
                            time.perf_counter() - t0, reps, est, errs)
