"""Queries as phase programs, and the registry that builds a query's program.

See ``docs/architecture.md`` ("Programs"). :func:`program_for` is the one place that maps a
query to its program: ``sgd`` → :class:`~uldp.collector.programs.sgd.SGDProgram`; every
other kind → :class:`~uldp.collector.programs.meanest.MeanEstProgram`, whose result is the
estimate (plus the model in ``result["model"]`` for ``classify``/``regress``). The simulation driver
(:mod:`uldp.collector.programs.driver`) and the service's phase closer run them.
"""

from __future__ import annotations

from typing import Any

from uldp.collector.models.grid import grid_result
from uldp.collector.planner import QuerySpec
from uldp.collector.programs.base import Program, PublishedPhases
from uldp.collector.programs.meanest import MeanEstProgram, jsonable
from uldp.collector.programs.sgd import SGDProgram

__all__ = ["MeanEstProgram", "Program", "PublishedPhases", "SGDProgram", "jsonable",
           "program_for"]

def _with_model(spec: QuerySpec, estimate: dict[str, Any]) -> dict[str, Any]:
    """The estimate plus the classifier/regressor built from it (``result["model"]``,
    read by the estimators' ``from_result``)."""
    return {**estimate, "model": grid_result(spec, estimate)}


#: kinds whose result also carries a model built from the final estimate
FINISHERS = {"classify": _with_model, "regress": _with_model}


def program_for(spec: QuerySpec) -> Program:
    """The program that runs ``spec`` (see the module docstring)."""
    if spec.kind == "sgd":
        return SGDProgram(spec)
    return MeanEstProgram(spec, finish=FINISHERS.get(spec.kind))
