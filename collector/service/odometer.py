"""The collector's privacy odometer: the central (ε, δ) each dataset's shuffled queries
have composed to, and the refusal of a query that would take it past the budget.

See ``docs/privacy.md`` §7.2; the mathematics is ``uldp.collector.accounting.odometer``.
For each dataset name the odometer composes, with a PLD accountant, every shuffled query
over it: a finished query by the profile its result states (the largest of its cells'),
a running one — and a cancelled or failed one that received a batch — at its worst case
(every report at the query's ε, batches of ``min_batch``). Queries in the clear are not
in it: their reports are ε0-LDP to the collector itself, which each device's ledger
accounts (local ε stays per device).

Composition is incremental: the queries that have ended (their cost never changes again)
are composed once, in the order they ended, and each new one is composed onto that PLD;
the composed PLD is persisted in the database (``meta``, under ``odometer/<dataset>``,
with a digest of what it composes), so a restarted collector — or another replica — reads
it back instead of composing every finished query again. Running queries, all alike at
their worst case, are one self-composition on top.

CreateQuery of a shuffled query is refused (FAILED_PRECONDITION, before anything is
stored) when the dataset's composed ε with the new query at its worst case would exceed
the central budget (``uldp collector serve --central-budget EPS``, default
:data:`DEFAULT_BUDGET`, at δ ``--central-delta``); a retry of a stored query is never
refused. The check runs twice: once before the create's transaction (the slow
composition, cached), then again inside it, under a lock per dataset (PostgreSQL: an
advisory lock; SQLite: the one writer) held until the query is stored — so two creates
racing on one dataset, on one replica or two, cannot both pass a budget that admits one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uldp.collector.accounting.odometer import (
    Cell,
    cells_of_privacy,
    compose_plds,
    planned_cells,
    pld_from_bytes,
    pld_to_bytes,
)
from uldp.collector.service.errors import ServiceError, echo
from uldp.collector.storage.db import Database

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

__all__ = ["DEFAULT_BUDGET", "DEFAULT_DELTA", "CentralBudget", "PrivacyOdometer"]

log = logging.getLogger("uldp.collector")

#: the default central budget of a dataset: ε = 10 (the device SDK's default total
#: budget, so a default device could not be asked for more anyway) at δ = 1e-8 (the
#: default δ of a shuffled query)
DEFAULT_BUDGET = 10.0
DEFAULT_DELTA = 1e-8
#: the ``meta`` key of a dataset's persisted PLD of its ended queries
META_PREFIX = "odometer/"

#: a query as the odometer sees it: (id, state, cost, when it ended in ms: -1 running)
Counted = tuple[str, str, tuple[Cell, ...], int]


@dataclass(frozen=True)
class CentralBudget:
    """A dataset's central budget: composed ε at most ``epsilon`` at ``delta`` (``epsilon``
    None: the odometer counts, nothing is refused)."""

    epsilon: float | None = DEFAULT_BUDGET
    delta: float = DEFAULT_DELTA


def _digest(ended: list[tuple[str, tuple[Cell, ...]]]) -> str:
    return hashlib.sha256(repr(ended).encode()).hexdigest()


class PrivacyOdometer:
    """Per-dataset composition of shuffled queries (see the module docstring)."""

    def __init__(self, db: Database, budget: CentralBudget | None = None) -> None:
        self.db = db
        self.budget = budget or CentralBudget()
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[Any, dict[str, Any]]] = {}
        #: dataset -> (the ended queries composed, in order; their PLD)
        self._ended: dict[str, tuple[list[tuple[str, tuple[Cell, ...]]],
                                     PrivacyLossDistribution | None]] = {}
        #: dataset -> (every query's cost and the candidate's, the ε with the candidate)
        self._checked: dict[str, tuple[Any, float, float]] = {}

    # ---- what each query costs -------------------------------------------------------
    @staticmethod
    def _cost(row: dict[str, Any]) -> tuple[Cell, ...]:
        state = str(row["state"])
        if state == "done" and row.get("result_json"):
            privacy = json.loads(row["result_json"]).get("privacy")
            if isinstance(privacy, dict):
                return cells_of_privacy(privacy)
        if state != "running" and not row["batched"]:
            return ()  # ended before any batch came through: nobody's report was seen
        return planned_cells(float(row["epsilon"]), int(row["min_batch"]))

    def _queries(self, dataset: str, leave_out: str = "") -> list[Counted]:
        return [(str(r["query_id"]), str(r["state"]), self._cost(r),
                 -1 if r["state"] == "running" else int(r["finished_at_ms"] or 0))
                for r in self.db.shuffled_queries(dataset) if r["query_id"] != leave_out]

    # ---- composition -----------------------------------------------------------------
    def _total(self, dataset: str, queries: list[Counted], *, persist: bool = True
               ) -> PrivacyLossDistribution | None:
        """The PLD of ``queries``: the ended ones composed incrementally (in memory, else
        from the database, else from scratch), the running ones on top."""
        ended = [(q, c) for _, q, c in sorted((e, q, c) for q, _, c, e in queries
                                              if e >= 0)]  # in the order they ended
        with self._lock:
            have, pld = self._ended.get(dataset, ([], None))
        if have != ended[:len(have)]:
            have, pld = [], None
        if len(have) < len(ended):
            stored = self._load(dataset, ended) if not have else None
            if stored is not None:
                have, pld = stored
            pld = compose_plds([c for _, c in ended[len(have):]], pld)
            with self._lock:
                self._ended[dataset] = (ended, pld)
            if persist:
                self._persist(dataset, ended, pld)
        return compose_plds([c for _, _, c, e in queries if e < 0], pld)

    def _load(self, dataset: str, ended: list[tuple[str, tuple[Cell, ...]]]
              ) -> tuple[list[tuple[str, tuple[Cell, ...]]], PrivacyLossDistribution | None
                         ] | None:
        """The persisted PLD of a prefix of ``ended`` (None: none, or not of these)."""
        try:
            raw = self.db.get_meta(META_PREFIX + dataset)
            if raw is None:
                return None
            doc = json.loads(raw)
            n = int(doc["queries"])
            if not 0 < n <= len(ended) or doc["digest"] != _digest(ended[:n]):
                return None
            pld = pld_from_bytes(base64.b64decode(doc["pld"])) if doc["pld"] else None
            return ended[:n], pld
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("dataset %s: the stored privacy odometer is unreadable (%s); "
                        "composing again", dataset, exc)
            return None

    def _persist(self, dataset: str, ended: list[tuple[str, tuple[Cell, ...]]],
                 pld: PrivacyLossDistribution | None) -> None:
        """Store the ended queries' PLD, in the background (a caller may hold the
        database's writer; a lost write only means composing again after a restart)."""
        doc = json.dumps({"queries": len(ended), "digest": _digest(ended),
                          "pld": base64.b64encode(pld_to_bytes(pld)).decode()
                          if pld is not None else ""})

        def run() -> None:
            try:
                self.db.set_meta(META_PREFIX + dataset, doc)
            except Exception as exc:  # best effort: logged
                log.warning("dataset %s: the privacy odometer was not persisted: %s",
                            dataset, exc)
        threading.Thread(target=run, name="uldp-odometer-persist", daemon=True).start()

    def _epsilon(self, pld: PrivacyLossDistribution | None) -> float:
        return 0.0 if pld is None else float(pld.get_epsilon_for_delta(self.budget.delta))

    # ---- the odometer ----------------------------------------------------------------
    def state(self, dataset: str, current: tuple[str, tuple[Cell, ...]] | None = None
              ) -> dict[str, Any]:
        """The dataset's composed central ε (JSON: what results, the console and the
        metrics show); ``current``: a query being closed, counted by its own cells."""
        queries = self._queries(dataset)
        if current is not None:
            queries = [(q, "done", current[1], -1) if q == current[0] else (q, s, c, e)
                       for q, s, c, e in queries]
        key = tuple(queries)
        with self._lock:
            hit = self._cache.get(dataset)
            if hit is not None and hit[0] == key:
                return hit[1]
        eps = self._epsilon(self._total(dataset, queries))
        out = {"dataset": dataset, "central_epsilon": eps, "delta": self.budget.delta,
               "budget": self.budget.epsilon, "shuffled_queries": len(queries),
               "queries": [{"query_id": q, "state": s, "counted": "result" if s == "done"
                            else ("worst case" if c else "nothing")}
                           for q, s, c, _ in queries],
               "accountant": "PLD (dp-accounting), connect-the-dots of each query's "
                             "variation-ratio profile (docs/privacy.md §7.2)"}
        with self._lock:
            self._cache[dataset] = (key, out)
        return out

    def states(self) -> list[dict[str, Any]]:
        """:meth:`state` of every dataset with a shuffled query."""
        names = sorted({str(r["dataset"]) for r in self.db.shuffled_queries()})
        return [self.state(d) for d in names]

    def _after(self, dataset: str, query_id: str, epsilon: float, min_batch: int,
               persist: bool) -> tuple[float, float, int]:
        """(ε with the new query, ε now, queries now) — the last answer again when
        nothing changed since (the check inside the create's lock is then free)."""
        queries = self._queries(dataset, leave_out=query_id)
        key = (tuple(queries), epsilon, min_batch)
        with self._lock:
            hit = self._checked.get(dataset)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2], len(queries)
        before = self._total(dataset, queries, persist=persist)
        after = self._epsilon(compose_plds([planned_cells(epsilon, min_batch)], before))
        now = self._epsilon(before)
        with self._lock:
            self._checked[dataset] = (key, after, now)
        return after, now, len(queries)

    def check_create(self, *, dataset: str, query_id: str, epsilon: float,
                     min_batch: int, conn: Any = None) -> None:
        """Refuse (FAILED_PRECONDITION) a new shuffled query that would take ``dataset``
        past the central budget at its worst case. With ``conn``, the create's write
        transaction (the query not stored yet): first take the dataset's lock in it, so
        the check and the insert are one step for every replica."""
        limit = self.budget.epsilon
        if limit is None:
            return
        if conn is None:
            if query_id and self.db.get_query(query_id) is not None:
                return  # a retry of a stored query
        else:
            self.db.lock_dataset_in(conn, dataset)
        after, now, n = self._after(dataset, query_id, epsilon, min_batch,
                                    persist=conn is None)
        if after > limit:
            raise ServiceError(
                "FAILED_PRECONDITION",
                f"dataset {echo(dataset)}: this shuffled query would take the central "
                f"privacy odometer to ε = {after:.4g} at δ = {self.budget.delta:g} (now "
                f"{now:.4g} over {n} shuffled queries), above the budget "
                f"{limit:g} (uldp collector serve --central-budget); ask for a smaller "
                f"epsilon or a larger shuffle min_batch")
