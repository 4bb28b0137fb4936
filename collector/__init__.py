"""uldp collector: queries as phase programs, estimates, simulations and the gRPC service.

See ``docs/architecture.md``. The in-process API::

    from uldp.collector import QuerySpec, simulate_reps, make_fleet_data
    spec = QuerySpec(kind="mean", epsilon=1.0, users=100_000, samples=100)
    res = simulate_reps(spec, make_fleet_data("mean", "bernoulli", 100), RandomSource.seeded(1))

* :class:`QuerySpec`, :func:`compile_query` — a query and its plan;
* :func:`program_for`, :func:`run_program` — the phase program of a query and the one
  simulation driver; :func:`run_query` / :func:`simulate_reps` — synthetic fleets;
* :class:`Estimate` — values, standard errors, intervals;
* central user-level DP estimators: ``uldp.collector.central``; scikit-style learners:
  ``uldp.collector.learning``; the service: ``uldp.collector.service``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from uldp.collector.lazy import lazy_exports

__all__ = [
    "Estimate",
    "FleetData",
    "MeanEstProgram",
    "Plan",
    "Program",
    "QuerySpec",
    "SGDProgram",
    "SimulationResult",
    "compile_query",
    "make_fleet_data",
    "predicted_mse",
    "program_for",
    "run_program",
    "run_query",
    "simulate_reps",
]

#: name -> the module that defines it (imported on first use: importing one submodule,
#: e.g. the shuffler's, does not load the planner, the simulations and SciPy)
_EXPORTS = {
    "Estimate": "estimators.estimate",
    "FleetData": "datasets",
    "MeanEstProgram": "programs",
    "Plan": "planner",
    "Program": "programs",
    "QuerySpec": "planner",
    "SGDProgram": "programs",
    "SimulationResult": "simulation.simulate",
    "compile_query": "planner",
    "make_fleet_data": "datasets",
    "predicted_mse": "planner",
    "program_for": "programs",
    "run_program": "programs.driver",
    "run_query": "simulation.simulate",
    "simulate_reps": "simulation.simulate",
}

if TYPE_CHECKING:  # what a type checker and an IDE see; at run time, __getattr__ below
    from uldp.collector.datasets import FleetData, make_fleet_data
    from uldp.collector.estimators.estimate import Estimate
    from uldp.collector.planner import Plan, QuerySpec, compile_query, predicted_mse
    from uldp.collector.programs import MeanEstProgram, Program, SGDProgram, program_for
    from uldp.collector.programs.driver import run_program
    from uldp.collector.simulation.simulate import SimulationResult, run_query, simulate_reps


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
