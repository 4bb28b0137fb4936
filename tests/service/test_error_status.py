"""Every error a servicer lets out reaches the caller as its status and message, under every
server kind the services run on: ``grpc.server`` (threads), ``grpc.aio.server`` (a
synchronous method in its thread pool, or a coroutine / async generator on its loop) and
the HTTP port (Connect and gRPC-Web), through the one registration path they share
(``uldp.collector.service.handlers``: ``add_service`` and ``checked_method``).

Before ``handlers.answering``: a ServiceError raised out of a method came back UNKNOWN
with the Python class name (grpc.aio) or the exception text (threads, HTTP); an
unexpected exception's text reached the caller; and a synchronous generator under
grpc.aio that aborted after its first message left the client waiting until its
deadline (DEADLINE_EXCEEDED, ``GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`` in the log).
Now: the refusal's code and message; INTERNAL with a fixed message (logged) for a bug;
an answer well before the deadline. Also forced in the real collector (both modes).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from tests.service.conftest import ADMIN_TOKEN
from tests.service.connect_channel import ConnectChannel
from uldp.client.wire import analyst_pb2, analyst_pb2_grpc
from uldp.collector.http import HttpApp, HttpConfig, HttpFront
from uldp.collector.http.connect import service_app
from uldp.collector.service.errors import INTERNAL_ERROR, ServiceError
from uldp.collector.service.handlers import add_service

A = analyst_pb2.DESCRIPTOR.services_by_name["AnalystService"]
Q = analyst_pb2.Query
DEADLINE = 5.0


def _fail(how: str, ctx: Any) -> Any:
    """What a method does for query id ``how``; returns an awaitable abort for async."""
    if how == "raise":
        raise ServiceError("NOT_FOUND", "raised: no such query")
    if how == "bug":
        raise RuntimeError("a secret the caller must not see")
    return ctx.abort(grpc.StatusCode.NOT_FOUND, "aborted: no such query")


class SyncServicer:
    def GetQuery(self, req: Any, ctx: Any) -> Any:
        _fail(req.query_id, ctx)

    def WatchQuery(self, req: Any, ctx: Any) -> Iterator[Any]:
        yield Q(query_id="first")
        _fail(req.query_id, ctx)


class AsyncServicer:
    async def GetQuery(self, req: Any, ctx: Any) -> Any:
        await _fail(req.query_id, ctx)

    async def WatchQuery(self, req: Any, ctx: Any) -> Any:
        yield Q(query_id="first")
        await _fail(req.query_id, ctx)


for _name in ("CreateQuery", "ListQueries", "CancelQuery", "GetResult"):
    setattr(SyncServicer, _name, SyncServicer.GetQuery)
    setattr(AsyncServicer, _name, AsyncServicer.GetQuery)

class SyncUnaryServicer(SyncServicer):
    """Synchronous unary methods; the HTTP port streams from async generators only."""

    WatchQuery = AsyncServicer.WatchQuery  # type: ignore[assignment]


#: (server kind, servicer class)
KINDS = [("threads", SyncServicer), ("aio", SyncServicer), ("aio", AsyncServicer),
         ("connect", SyncUnaryServicer), ("grpc-web", SyncUnaryServicer),
         ("connect", AsyncServicer), ("grpc-web", AsyncServicer)]


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(params=KINDS, ids=[f"{k}-{c.__name__}" for k, c in KINDS])
def stub(request, pki):
    kind, cls = request.param
    pool = futures.ThreadPoolExecutor(4)
    servicer = cls()
    if kind == "threads":
        srv = grpc.server(pool)
        add_service(srv, servicer, A)
        port = srv.add_insecure_port("127.0.0.1:0")
        srv.start()
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        yield analyst_pb2_grpc.AnalystServiceStub(ch), kind, cls
        ch.close()
        srv.stop(0)
    elif kind == "aio":
        loop = _Loop()

        async def start() -> tuple[Any, int]:
            s = grpc.aio.server(migration_thread_pool=pool)
            add_service(s, servicer, A)
            p = s.add_insecure_port("127.0.0.1:0")
            await s.start()
            return s, p
        srv, port = loop.run(start())
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        yield analyst_pb2_grpc.AnalystServiceStub(ch), kind, cls
        ch.close()
        loop.run(srv.stop(0))
        loop.close()
    else:
        app = HttpApp()
        app.mount(f"/{A.full_name}/", service_app(servicer, A, pool, 1 << 20))
        front = HttpFront(app, HttpConfig(pki.server_cert, pki.server_key, port=0))
        front.start()
        ch = ConnectChannel(f"https://127.0.0.1:{front.port}", pki.ca_cert, kind)
        yield analyst_pb2_grpc.AnalystServiceStub(ch), kind, cls
        ch.close()
        front.stop(1)
    pool.shutdown(wait=False)


def _status(call: Any) -> tuple[str, str, float]:
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code().name, e.value.details(), time.monotonic() - t0


@pytest.mark.parametrize("how,code,message", [
    ("raise", "NOT_FOUND", "raised: no such query"),
    ("abort", "NOT_FOUND", "aborted: no such query"),
    ("bug", "INTERNAL", INTERNAL_ERROR),
])
def test_an_error_reaches_the_caller_as_its_status(stub, how, code, message, caplog):
    s, kind, _cls = stub
    got = _status(lambda: s.GetQuery(analyst_pb2.GetQueryRequest(query_id=how),
                                     timeout=DEADLINE))
    assert got[:2] == (code, message)
    assert got[2] < DEADLINE / 2
    got = _status(lambda: list(s.WatchQuery(analyst_pb2.WatchQueryRequest(query_id=how),
                                            timeout=DEADLINE)))
    assert got[:2] == (code, message), kind
    assert got[2] < DEADLINE / 2, "the stream's status never came: the client hit its deadline"
    if how == "bug":
        assert "a secret the caller must not see" in caplog.text  # logged, not sent


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_a_failing_collector_call_is_internal_in_both_server_modes(start_collector, mode,
                                                                   monkeypatch):
    """The real collector: a bug under the analyst's GetQuery (a synchronous method, run
    in grpc.aio's thread pool in aio mode) and a refusal out of it."""
    c = start_collector(server_mode=mode)
    assert c.server is not None

    def broken(query_id: str) -> Any:
        if query_id == "refused":
            raise ServiceError("FAILED_PRECONDITION", "refused on purpose")
        raise KeyError("not for the caller")
    monkeypatch.setattr(c.server.core, "get_query", broken)
    with c.channel() as ch:
        s = analyst_pb2_grpc.AnalystServiceStub(ch)
        meta = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
        for qid, want in (("x", ("INTERNAL", INTERNAL_ERROR)),
                          ("refused", ("FAILED_PRECONDITION", "refused on purpose"))):
            got = _status(lambda q=qid: s.GetQuery(analyst_pb2.GetQueryRequest(query_id=q),
                                                   metadata=meta, timeout=DEADLINE))
            assert got[:2] == want and got[2] < DEADLINE / 2
            got = _status(lambda q=qid: list(s.WatchQuery(
                analyst_pb2.WatchQueryRequest(query_id=q), metadata=meta, timeout=DEADLINE)))
            assert got[:2] == want and got[2] < DEADLINE / 2
