"""The phase protocol every query kind and method is run through.

See ``docs/architecture.md`` ("Programs"). Sections of ``docs/algorithms.md``: §2.2 (round
template), §3.7 (assignment before data use, INV-3), §8.3 (SGD steps).

A *program* is a query as numbered phases 1..``num_phases``: every enrolment slot is
placed in one (group, stage, phase) from public randomness drawn at creation; the tasks of
a phase and what its closing publishes are pure functions of the query spec and of the
JSON the earlier phases published. So one driver loop runs every program — in simulation
(:func:`uldp.collector.programs.driver.run_program`) and in the service (the phase closer,
``uldp.collector.service``) — and a restart resumes from the published JSON alone.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from uldp.client.taskspec import TaskSpec
from uldp.collector.estimators.accumulators import Accumulator

__all__ = ["Program", "PublishedPhases"]

#: phase number -> the JSON its closing published
PublishedPhases = dict[int, dict[str, Any]]


class Program(Protocol):
    """A query as phases (see the module docstring)."""

    @property
    def num_phases(self) -> int:
        """Number of phases, fixed when the query is created."""

    def placements(self) -> np.ndarray:
        """``(users, 3)`` array: the (group, stage, phase) of every enrolment slot — for
        simulations, which hold every user anyway; the service never calls it
        (``place``, ``cells``, ``slot_in`` need no per-slot state)."""

    def place(self, slot: int) -> tuple[int, int, int]:
        """``(group, stage, phase)`` of one enrolment slot."""

    def slot_in(self, phase: int, group: int, stage: int) -> int | None:
        """Some enrolment slot placed in ``(group, stage)`` of ``phase`` (None: none is)."""

    def quotas(self) -> list[int]:
        """Reports expected per phase (a phase closes early when its quota is in)."""

    def cells(self, phase: int) -> list[tuple[int, int, int]]:
        """``(group, stage, slots)`` of every group of ``phase`` with at least one slot
        (from the plan's sizes: no per-slot array)."""

    def task(self, phase: int, group: int, stage: int, published: PublishedPhases,
             slot: int | None = None) -> TaskSpec:
        """The public task of a device of ``(group, stage)`` in ``phase``."""

    def accumulator(self, phase: int, group: int, stage: int,
                    published: PublishedPhases) -> Accumulator:
        """An empty accumulator for that group's reports in ``phase``."""

    def offsets(self, phase: int, slots: np.ndarray) -> np.ndarray | None:
        """Per-device task parameters of ``slots`` (simulation: baseline A), or None."""

    def close(self, phase: int, accs: dict[int, Any],
              published: PublishedPhases) -> dict[str, Any]:
        """The JSON published when ``phase`` closes."""

    def result(self, published: PublishedPhases) -> dict[str, Any]:
        """The query's result once the last phase has closed."""
