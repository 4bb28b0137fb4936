"""In-process fleet simulation of a whole query (``uldp simulate``).

See ``docs/architecture.md``. Sections of ``docs/algorithms.md``: §2.2 (rounds), §13 (validation
plan). The simulation runs the production code: the query's program
(``uldp.collector.programs``) through the one simulation driver
(:func:`~uldp.collector.programs.synthetic.run_query`, shared with the analyst's
preview), the device function ``uldp.client.tasks.compute_reports`` over every group's
users in vectorized chunks, and the collector accumulators. Synthetic users are drawn
chunk by chunk (the next chunk on a second thread meanwhile) to bound memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.datasets import FleetData
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import QuerySpec
from uldp.collector.programs.synthetic import run_query, synthetic_privatizer
from uldp.collector.progress import Progress

__all__ = ["SIMULATE_JSON_KEYS", "Progress", "SimulationResult", "run_query",
           "simulate_json", "simulate_reps", "synthetic_privatizer"]

#: the keys of ``uldp simulate --json``, with a simulated fleet and with ``--data`` alike
#: (README, "Output"): sizes, the estimate of the last rep with its 95 % intervals, and
#: over the reps the mean squared ℓ2 error ``mse``, its root ``rmse``, the formula's
#: ``predicted_mse`` and ``coverage`` (share of rep × coordinate intervals holding the truth)
SIMULATE_JSON_KEYS = ("kind", "method", "mechanisms", "estimand", "epsilon", "users",
                      "samples", "dim",
                      "reps", "estimate", "truth", "ci_low", "ci_high", "std_error", "mse",
                      "rmse", "predicted_mse", "coverage", "regime", "auto", "advisories",
                      "range", "seconds")


def simulate_json(**fields: Any) -> dict[str, Any]:
    """One ``uldp simulate --json`` object: exactly :data:`SIMULATE_JSON_KEYS`, in order."""
    missing = set(SIMULATE_JSON_KEYS) ^ set(fields)
    if missing:
        raise ValueError(f"simulate JSON keys differ from the schema: {sorted(missing)}")
    return {k: fields[k] for k in SIMULATE_JSON_KEYS}

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

    def to_dict(self, spec: QuerySpec, predicted: float | None, plan: Any = None
                ) -> dict[str, Any]:
        """The ``uldp simulate --json`` object (:data:`SIMULATE_JSON_KEYS`)."""
        last = self.last
        return simulate_json(
            kind=spec.kind, method=plan.spec.method if plan is not None else spec.method,
            mechanisms=last.extra.get("mechanisms"),
            estimand="the mean of the simulated population's law (--dist)",
            epsilon=spec.epsilon, users=spec.users, samples=spec.samples, dim=spec.dim,
            reps=self.reps, estimate=self.estimate.tolist(), truth=self.truth.tolist(),
            ci_low=last.ci_low.tolist(), ci_high=last.ci_high.tolist(),
            std_error=last.std_error.tolist(), mse=self.sq_error,
            rmse=float(np.sqrt(self.sq_error)), predicted_mse=predicted,
            coverage=self.ci_coverage, regime=last.extra.get("regime"),
            auto=dict(plan.auto) if plan is not None and plan.auto else None,
            advisories=list(plan.advisories) if plan is not None else [],
            range=None if spec.bound is None else [-spec.bound, spec.bound],
            seconds=self.seconds)


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
