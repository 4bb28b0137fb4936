"""The shuffler's view of the collector: the public parameters of a query
(``GetShuffleQuery``: :class:`QueryInfo`, :class:`PhaseInfo`) and :class:`CollectorLink`,
its client of the collector's shuffler port with a short cache of them. See
``proto/uldp/v1/shuffler.proto`` and :mod:`uldp.collector.shuffler.service`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import grpc

from uldp.client.wire import shuffler_pb2, shuffler_pb2_grpc

__all__ = ["CollectorLink", "PhaseInfo", "QueryInfo"]


@dataclass(frozen=True)
class PhaseInfo:
    state: str
    deadline_ms: int
    quota: int = 0  # slots placed in the phase
    declined: int = 0  # of which declined their task


@dataclass(frozen=True)
class QueryInfo:
    """What the collector says about a query (public): GetShuffleQuery."""

    shuffled: bool
    min_batch: int
    phases: dict[int, PhaseInfo]
    cells: dict[tuple[int, int, int], int]  # (phase, group, stage) -> devices placed there
    users: int = 0  # slots 0 .. users - 1
    #: (phase, group, stage) -> devices placed there that declined their task
    declined: dict[tuple[int, int, int], int] = field(default_factory=dict)



class CollectorLink:
    """The shuffler's client of the collector's shuffler port (mutual TLS), with a short
    cache of each query's public parameters."""

    def __init__(self, channel: grpc.Channel, ttl_s: float) -> None:
        self.stub = shuffler_pb2_grpc.ShuffleIntakeServiceStub(channel)
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, QueryInfo | None]] = {}
        self._lock = threading.Lock()
        self.polls = 0  # GetShuffleQuery calls made (metrics)

    def query(self, query_id: str, fresh: bool = False) -> QueryInfo | None:
        """The query's info; None if the collector knows no such query. Raises
        grpc.RpcError when the collector cannot be asked."""
        with self._lock:
            hit = self._cache.get(query_id)
        if hit is not None and not fresh and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        try:
            self.polls += 1
            q = self.stub.GetShuffleQuery(
                shuffler_pb2.GetShuffleQueryRequest(query_id=query_id), timeout=10)
            info: QueryInfo | None = QueryInfo(
                q.shuffled, q.min_batch,
                {p.phase: PhaseInfo(p.state, p.deadline_ms, p.quota, p.declined)
                 for p in q.phases},
                {(c.phase, c.group, c.stage): c.devices for c in q.cells}, q.users,
                {(c.phase, c.group, c.stage): c.declined for c in q.cells if c.declined})
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            info = None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[query_id] = (time.monotonic(), info)
        return info
