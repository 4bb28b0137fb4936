"""The query catalogue: creating, listing and cancelling queries, and each query's program.

See ``docs/architecture.md`` ("Service"). A query row stores its spec JSON; the
:class:`QueryRuntime` of a query is rebuilt from it on first use (any replica, after any
restart) and holds the query's program (``uldp.collector.programs.program_for``) — the
only thing the task server and the phase closer consult about the query's phases.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from uldp.collector.planner import QuerySpec
from uldp.collector.programs import Program, program_for
from uldp.collector.service.errors import ServiceError, echo
from uldp.collector.service.requests import (
    SPEC_PARAMS,
    CreateRequest,
    build_spec,
    check_limits,
    same_query,
)
from uldp.collector.storage.db import Database, now_ms

__all__ = ["ALLOW_SIMULATED", "QueryCatalogue", "QueryRuntime"]

log = logging.getLogger("uldp.collector")

_QUERY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: CreateQuery params key (JSON bool): the query accepts reports marked simulated; stored
#: with the query (not part of its statistical spec)
ALLOW_SIMULATED = "allow_simulated"


@dataclass
class QueryRuntime:
    """What the service keeps in memory about one query (rebuilt from its row)."""

    query_id: str
    dataset: str
    kind: str
    spec: QuerySpec
    program: Program
    num_phases: int
    allow_simulated: bool = False  # the query accepts reports marked simulated


#: characters of CreateQuery's params_json, at most
MAX_PARAMS_JSON = 65_536


def _params(params_json: str) -> tuple[dict[str, Any], bool]:
    if len(params_json) > MAX_PARAMS_JSON:
        raise ServiceError("INVALID_ARGUMENT", f"params_json must be at most "
                           f"{MAX_PARAMS_JSON} characters, got {len(params_json)}")
    try:
        params = json.loads(params_json) if params_json else {}
    except json.JSONDecodeError as exc:
        raise ServiceError("INVALID_ARGUMENT", f"params_json is not JSON: {exc}") from None
    except RecursionError:
        raise ServiceError("INVALID_ARGUMENT", "params_json is nested too deeply") from None
    allowed = {*SPEC_PARAMS, ALLOW_SIMULATED}
    if not isinstance(params, dict) or set(params) - allowed:
        raise ServiceError("INVALID_ARGUMENT", "params_json must be an object with keys "
                           f"among {tuple(sorted(allowed))}")
    allow = params.pop(ALLOW_SIMULATED, False)
    if not isinstance(allow, bool):
        raise ServiceError("INVALID_ARGUMENT",
                           f"params_json {ALLOW_SIMULATED!r} must be true or false")
    return params, allow


class QueryCatalogue:
    """Create, look up, list and cancel queries; cache each query's runtime."""

    def __init__(self, db: Database, *, max_users: int, default_phase_timeout_s: float,
                 ) -> None:
        self.db = db
        self.max_users = max_users
        self.default_phase_timeout_s = default_phase_timeout_s
        self._runtimes: dict[str, QueryRuntime] = {}
        self._lock = threading.Lock()

    def runtime(self, query_id: str) -> QueryRuntime | None:
        """The runtime of a stored query (None if there is no such query)."""
        with self._lock:
            rt = self._runtimes.get(query_id)
        if rt is not None:
            return rt
        row = self.db.get_query(query_id)
        if row is None:
            return None
        spec = QuerySpec.from_dict(json.loads(row["spec_json"]))
        program = program_for(spec)
        rt = QueryRuntime(query_id, row["dataset"], row["kind"], spec, program,
                          int(row["num_phases"]), bool(row["allow_simulated"]))
        with self._lock:
            self._runtimes[query_id] = rt
        return rt

    def create(self, *, kind: str, epsilon: float, dataset: str, bound: float,
               samples: int, users: int, dim: int, method: str, params_json: str,
               phase_timeout_s: float, query_id: str) -> dict[str, Any]:
        """CreateQuery: validate, build the spec, store it (idempotent on the same id)."""
        if query_id and not _QUERY_ID.match(query_id):
            raise ServiceError("INVALID_ARGUMENT", "query_id must match [A-Za-z0-9_.-]{1,64}")
        if not dataset or len(dataset) > 256:
            raise ServiceError("INVALID_ARGUMENT", "dataset must be a name of 1..256 chars")
        params, allow = _params(params_json)
        qid = query_id or "q-" + secrets.token_hex(6)
        req = CreateRequest(kind, epsilon, bound, samples, users, dim, method, params, qid)
        check_limits(req, phase_timeout_s, self.max_users)
        try:
            spec, drawn = build_spec(req)
            program = program_for(spec)
            quotas = program.quotas()
        except (ValueError, TypeError, KeyError, ArithmeticError, RecursionError) as exc:
            # the planner's refusals of a combination of bounded values (e.g. an unknown
            # kind, too few users for the grouping)
            raise ServiceError("INVALID_ARGUMENT", f"invalid query: {exc}") from None
        timeout = phase_timeout_s or self.default_phase_timeout_s
        row = dict(query_id=qid, kind=kind, dataset=dataset, epsilon=float(spec.epsilon),
                   spec_json=json.dumps(spec.to_dict(), sort_keys=True), seed=str(spec.seed),
                   state="running", current_phase=1, num_phases=program.num_phases,
                   target_users=int(spec.users), phase_timeout_s=float(timeout),
                   result_json=None, allow_simulated=allow)
        stored, created = self.db.create_query(row, quotas, now_ms() + int(timeout * 1000))
        if not created and (not same_query(json.loads(stored["spec_json"]), spec, drawn)
                            or stored["dataset"] != dataset
                            or bool(stored["allow_simulated"]) != allow):
            raise ServiceError("ALREADY_EXISTS", f"query {qid} exists with different parameters")
        log.info("query %s (%s, %d phases) %s", qid, kind, program.num_phases,
                 "created" if created else "exists")
        return stored

    def get(self, query_id: str) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        """(query row, phase rows, devices assigned so far)."""
        row = self.db.get_query(query_id)
        if row is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        return row, self.db.get_phases(query_id), min(int(row["next_slot"]),
                                                      int(row["target_users"]))

    def list(self, state: str | None) -> list[dict[str, Any]]:
        return self.db.list_queries(state)

    def cancel(self, query_id: str) -> None:
        if self.db.get_query(query_id) is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        if not self.db.cancel_query(query_id):
            row = self.db.get_query(query_id)
            raise ServiceError("FAILED_PRECONDITION",
                               f"query {query_id} is {row['state'] if row else 'gone'}; "
                               "only a running query can be cancelled")
