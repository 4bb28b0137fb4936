"""A small Python client of the analyst service (used by the CLI, fleets and the demo)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import analyst_pb2, analyst_pb2_grpc, bearer, common_pb2

__all__ = ["QUERY_STATES", "AnalystClient", "QueryRequest"]

QUERY_STATES = {"running": common_pb2.QUERY_STATE_RUNNING, "done": common_pb2.QUERY_STATE_DONE,
                "cancelled": common_pb2.QUERY_STATE_CANCELLED,
                "failed": common_pb2.QUERY_STATE_FAILED}


@dataclass(frozen=True)
class QueryRequest:
    """Parameters of ``CreateQuery`` (see ``proto/uldp/v1/analyst.proto``)."""

    kind: str
    epsilon: float
    dataset: str
    users: int
    samples: int
    dim: int = 1
    bound: float = 1.0
    method: str = ""
    params: dict[str, Any] | None = None
    phase_timeout_s: float = 0.0
    query_id: str = ""
    #: the query accepts reports marked simulated (params_json "allow_simulated": true)
    allow_simulated: bool = False
    #: the public range [lo, hi] of a value (params_json "lo", "hi"; instead of bound:
    #: give bound=0)
    lo: float | None = None
    hi: float | None = None
    #: group-by (params_json "by", "groups"): the categorical dataset of the groups and
    #: their names in code order
    by: str | None = None
    groups: tuple[str, ...] | None = None

    def message(self) -> analyst_pb2.CreateQueryRequest:
        params = dict(self.params or {})
        if self.allow_simulated:
            params["allow_simulated"] = True
        for key in ("lo", "hi", "by"):
            if getattr(self, key) is not None:
                params[key] = getattr(self, key)
        if self.groups is not None:
            params["groups"] = list(self.groups)
        return analyst_pb2.CreateQueryRequest(
            kind=self.kind, epsilon=self.epsilon, dataset=self.dataset, bound=self.bound,
            samples=self.samples, users=self.users, dim=self.dim, method=self.method,
            params_json=json.dumps(params) if params else "",
            phase_timeout_seconds=self.phase_timeout_s, query_id=self.query_id)


class AnalystClient:
    """Analyst calls with the admin credential over a TLS channel."""

    def __init__(self, endpoint: Endpoint, admin_token: str,
                 channel: grpc.Channel | None = None, timeout_s: float = 30.0) -> None:
        self._own = channel is None
        self.channel = channel or secure_channel(endpoint)
        self.stub = analyst_pb2_grpc.AnalystServiceStub(self.channel)
        token = admin_token.strip()
        if not token or any(ch.isspace() or not ch.isprintable() for ch in token):
            raise ValueError("the admin token must be one line of printable characters")
        self.meta = bearer(token)
        self.timeout_s = timeout_s

    @classmethod
    def from_files(cls, target: str, ca: str | Path, admin_token_file: str | Path,
                   client_cert: str | Path | None = None,
                   client_key: str | Path | None = None) -> AnalystClient:
        ep = Endpoint(target, Path(ca), Path(client_cert) if client_cert else None,
                      Path(client_key) if client_key else None)
        return cls(ep, Path(admin_token_file).read_text())

    def close(self) -> None:
        if self._own:
            self.channel.close()

    def create(self, req: QueryRequest) -> analyst_pb2.Query:
        return self.stub.CreateQuery(req.message(), metadata=self.meta, timeout=self.timeout_s)

    def list(self, state: str | None = None) -> list[analyst_pb2.Query]:
        r = self.stub.ListQueries(analyst_pb2.ListQueriesRequest(
            state=QUERY_STATES.get(state or "", common_pb2.QUERY_STATE_UNSPECIFIED)),
            metadata=self.meta, timeout=self.timeout_s)
        return list(r.queries)

    def get(self, query_id: str) -> analyst_pb2.Query:
        return self.stub.GetQuery(analyst_pb2.GetQueryRequest(query_id=query_id),
                                  metadata=self.meta, timeout=self.timeout_s)

    def cancel(self, query_id: str) -> analyst_pb2.Query:
        return self.stub.CancelQuery(analyst_pb2.CancelQueryRequest(query_id=query_id),
                                     metadata=self.meta, timeout=self.timeout_s)

    def result(self, query_id: str) -> analyst_pb2.QueryResult:
        return self.stub.GetResult(analyst_pb2.GetResultRequest(query_id=query_id),
                                   metadata=self.meta, timeout=self.timeout_s)

    def watch(self, query_id: str, timeout_s: float | None = None
              ) -> Iterator[analyst_pb2.Query]:
        return self.stub.WatchQuery(analyst_pb2.WatchQueryRequest(query_id=query_id),
                                    metadata=self.meta, timeout=timeout_s)

    def wait(self, query_id: str, timeout_s: float = 600.0) -> analyst_pb2.Query:
        """Block until the query leaves RUNNING; returns its final state."""
        last = None
        for q in self.watch(query_id, timeout_s):
            last = q
        assert last is not None
        return last
