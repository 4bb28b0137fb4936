"""One query run in-process over synthetic users: the driver's ``privatize`` step that
draws them, and :func:`run_query`.

See ``docs/architecture.md`` ("Programs"). The production device function
``uldp.client.tasks.compute_reports`` runs over every group's users in vectorized chunks
(the next chunk drawn on a second thread meanwhile, to bound memory), and the program's
accumulators take the reports. It sits with the programs, below both of its users —
``uldp simulate`` (``uldp.collector.simulation.simulate``) and the analyst's preview
(``uldp.collector.analyst.preview``) — so neither imports the other's package.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.client.taskspec import TaskSpec
from uldp.collector.datasets import FleetData
from uldp.collector.estimators.accumulators import Accumulator
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import QuerySpec
from uldp.collector.programs.driver import Privatize, run_program
from uldp.collector.programs.meanest import MeanEstProgram
from uldp.collector.progress import Progress

__all__ = ["CHUNK_CELLS", "run_query", "synthetic_privatizer"]

CHUNK_CELLS = 1 << 23  # samples·dims generated per chunk (≈ 64 MiB of float64)


def _chunk_users(spec: QuerySpec) -> int:
    cells = spec.samples * (spec.dim if spec.kind != "mean" else 1)
    return max(1, CHUNK_CELLS // max(cells, 1))


def synthetic_privatizer(spec: QuerySpec, data: FleetData, rng: RandomSource,
                         progress: Progress | None) -> Privatize:
    """The driver's ``privatize`` step over fresh synthetic users from ``data``."""
    step = _chunk_users(spec)

    def privatize(slots: np.ndarray, task: TaskSpec, offsets: np.ndarray | None,
                  acc: Accumulator) -> None:
        starts = list(range(0, slots.size, step))
        if not starts:
            return
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(data.draw, min(step, slots.size))
            for i, start in enumerate(starts):
                idx = slots[start: start + step]
                X = pending.result()
                if i + 1 < len(starts):
                    nxt = slots[starts[i + 1]: starts[i + 1] + step]
                    pending = pool.submit(data.draw, nxt.size)
                offs = None if offsets is None else offsets[start: start + step]
                acc.add(compute_reports(task, X, rng, offsets=offs), idx)
                if progress:
                    progress.update(idx.size)
    return privatize


def run_query(spec: QuerySpec, data: FleetData, rng: RandomSource,
              progress: Progress | None = None) -> Estimate:
    """Run one query over ``spec.users`` simulated users; return the collector's estimate."""
    program = MeanEstProgram(spec)
    result = run_program(program, synthetic_privatizer(spec, data, rng, progress))
    return Estimate.from_dict(result)
