"""The collector's privacy odometer: the central (ε, δ) each dataset's shuffled queries
have composed to, and the refusal of a query that would take it past the budget.

See ``docs/privacy.md`` §7.2; the mathematics is ``uldp.collector.accounting.odometer``.
For each dataset name the odometer composes, with a PLD accountant, every shuffled query
over it: a finished query by the profile its result states (the largest of its cells'),
a running one — and a cancelled or failed one that received a batch — at its worst case
(every report at the query's ε, batches of ``min_batch``). Queries in the clear are not
in it: their reports are ε0-LDP to the collector itself, which each device's ledger
accounts (local ε stays per device).

CreateQuery of a shuffled query is refused (FAILED_PRECONDITION, before anything is
stored) when the dataset's composed ε with the new query at its worst case would exceed
the central budget (``uldp collector serve --central-budget EPS``, default
:data:`DEFAULT_BUDGET`, at δ ``--central-delta``); a retry of a stored query is never
refused. The check reads the database, so every replica applies the same budget; two
creates racing on the same dataset may both pass it (docs/privacy.md §7.2).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from uldp.collector.accounting.odometer import Cell, cells_of_privacy, compose, planned_cells
from uldp.collector.service.errors import ServiceError, echo
from uldp.collector.storage.db import Database

__all__ = ["DEFAULT_BUDGET", "DEFAULT_DELTA", "CentralBudget", "PrivacyOdometer"]

#: the default central budget of a dataset: ε = 10 (the device SDK's default total
#: budget, so a default device could not be asked for more anyway) at δ = 1e-8 (the
#: default δ of a shuffled query)
DEFAULT_BUDGET = 10.0
DEFAULT_DELTA = 1e-8


@dataclass(frozen=True)
class CentralBudget:
    """A dataset's central budget: composed ε at most ``epsilon`` at ``delta`` (``epsilon``
    None: the odometer counts, nothing is refused)."""

    epsilon: float | None = DEFAULT_BUDGET
    delta: float = DEFAULT_DELTA


class PrivacyOdometer:
    """Per-dataset composition of shuffled queries (see the module docstring)."""

    def __init__(self, db: Database, budget: CentralBudget | None = None) -> None:
        self.db = db
        self.budget = budget or CentralBudget()
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[Any, dict[str, Any]]] = {}

    # ---- what each query costs -------------------------------------------------------
    def _cost(self, row: dict[str, Any], shuffle: dict[str, Any]) -> tuple[Cell, ...]:
        state = str(row["state"])
        if state == "done" and row.get("result_json"):
            privacy = json.loads(row["result_json"]).get("privacy")
            if isinstance(privacy, dict):
                return cells_of_privacy(privacy)
        if state != "running" and not self.db.batch_counts(str(row["query_id"])):
            return ()  # ended before any batch came through: nobody's report was seen
        return planned_cells(float(row["epsilon"]), int(shuffle["min_batch"]))

    def _queries(self, dataset: str) -> list[tuple[str, str, tuple[Cell, ...]]]:
        out = []
        for row in self.db.list_queries():
            if row["dataset"] != dataset:
                continue
            shuffle = self.db.shuffle_query(str(row["query_id"]))
            if shuffle is None:
                continue
            out.append((str(row["query_id"]), str(row["state"]), self._cost(row, shuffle)))
        return out

    # ---- the odometer ----------------------------------------------------------------
    def state(self, dataset: str, current: tuple[str, tuple[Cell, ...]] | None = None
              ) -> dict[str, Any]:
        """The dataset's composed central ε (JSON: what results, the console and the
        metrics show); ``current``: a query being closed, counted by its own cells."""
        queries = self._queries(dataset)
        if current is not None:
            queries = [(q, "done", current[1]) if q == current[0] else (q, s, c)
                       for q, s, c in queries]
        key = tuple((q, s, c) for q, s, c in queries)
        with self._lock:
            hit = self._cache.get(dataset)
            if hit is not None and hit[0] == key:
                return hit[1]
        eps = compose([c for _, _, c in queries], self.budget.delta)
        out = {"dataset": dataset, "central_epsilon": eps, "delta": self.budget.delta,
               "budget": self.budget.epsilon, "shuffled_queries": len(queries),
               "queries": [{"query_id": q, "state": s, "counted": "result" if s == "done"
                            else ("worst case" if c else "nothing")}
                           for q, s, c in queries],
               "accountant": "PLD (dp-accounting), connect-the-dots of each query's "
                             "variation-ratio profile (docs/privacy.md §7.2)"}
        with self._lock:
            self._cache[dataset] = (key, out)
        return out

    def states(self) -> list[dict[str, Any]]:
        """:meth:`state` of every dataset with a shuffled query."""
        names = sorted({str(r["dataset"]) for r in self.db.list_queries()
                        if self.db.shuffle_query(str(r["query_id"])) is not None})
        return [self.state(d) for d in names]

    def check_create(self, *, dataset: str, query_id: str, epsilon: float,
                     min_batch: int) -> None:
        """Refuse (FAILED_PRECONDITION) a new shuffled query that would take ``dataset``
        past the central budget at its worst case."""
        limit = self.budget.epsilon
        if limit is None or (query_id and self.db.get_query(query_id) is not None):
            return
        before = [c for _, _, c in self._queries(dataset)]
        after = compose([*before, planned_cells(epsilon, min_batch)], self.budget.delta)
        if after > limit:
            now = compose(before, self.budget.delta)
            raise ServiceError(
                "FAILED_PRECONDITION",
                f"dataset {echo(dataset)}: this shuffled query would take the central "
                f"privacy odometer to ε = {after:.4g} at δ = {self.budget.delta:g} (now "
                f"{now:.4g} over {len(before)} shuffled queries), above the budget "
                f"{limit:g} (uldp collector serve --central-budget); ask for a smaller "
                f"epsilon or a larger shuffle min_batch")
