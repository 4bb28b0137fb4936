"""The simulation driver: one loop that runs every program in-process.

See ``docs/architecture.md`` ("Programs"). The loop is the collector's round template
(spec §2.2): for each phase, every group's devices compute their reports on the task the
program gives them (``privatize``: the production device function over simulated or
user-supplied data), the reports go into the program's accumulator, and closing the phase
publishes JSON; only that JSON carries over between phases, exactly as in the service.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import Accumulator
from uldp.collector.programs.base import Program, PublishedPhases
from uldp.collector.programs.meanest import jsonable

__all__ = ["Privatize", "run_program"]

#: ``privatize(slots, task, offsets, acc)``: compute the reports of the devices in
#: ``slots`` for ``task`` (``offsets``: per-device task parameters or None) and add them
#: to ``acc`` with their slots.
Privatize = Callable[[np.ndarray, TaskSpec, "np.ndarray | None", Accumulator], None]


def run_program(program: Program, privatize: Privatize, *,
                published: PublishedPhases | None = None,
                on_close: Callable[[int, dict[str, Any]], None] | None = None,
                rebuild: Callable[[], Program] | None = None,
                restart_after: int | None = None) -> dict[str, Any]:
    """Run ``program`` phase by phase; returns its result.

    ``published``: phases already closed (a resumed run skips them); ``on_close(phase,
    json)`` persists each closing; ``rebuild`` with ``restart_after=k`` replaces the
    program by a fresh one after phase ``k`` (what a collector restart does).
    """
    pub: PublishedPhases = {int(k): v for k, v in (published or {}).items()}
    place = program.placements()
    for phase in range(1, program.num_phases + 1):
        if phase in pub:
            continue
        accs: dict[int, Accumulator] = {}
        in_phase = np.flatnonzero(place[:, 2] == phase)
        for g in np.unique(place[in_phase, 0]):
            slots = in_phase[place[in_phase, 0] == g]
            stage = int(place[slots[0], 1])
            task = program.task(phase, int(g), stage, pub)
            acc = program.accumulator(phase, int(g), stage, pub)
            privatize(slots, task, program.offsets(phase, slots), acc)
            accs[int(g)] = acc
        pub[phase] = jsonable(program.close(phase, accs, pub))
        if on_close is not None:
            on_close(phase, pub[phase])
        if rebuild is not None and restart_after == phase:
            program = rebuild()
            place = program.placements()
    return program.result(pub)
