"""CreateQuery bounds every field before any work (invariant 9; issue 17, item 9): each
out-of-range number or oversized string gets INVALID_ARGUMENT with a short message
naming the field, and nothing is stored — never INTERNAL (``phase_timeout_seconds =
1e308`` overflowed), never accepted past what devices take (``samples = 2^32 − 1``,
``dim = 0``). Real collector on loopback with TLS, real SQLite file."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import grpc
import pytest

from uldp.client.wire import analyst_pb2
from uldp.collector.service.client import QueryRequest
from uldp.collector.service.errors import MAX_MESSAGE_BYTES

PROTO = Path(__file__).resolve().parents[2] / "proto" / "uldp" / "v1" / "analyst.proto"


@pytest.fixture(scope="module")
def collector(pki, tmp_path_factory, launcher):
    c = launcher(pki, tmp_path_factory.mktemp("create-limits"))
    a = c.analyst()
    yield c, a
    a.close()
    c.stop()


def _q(**kw) -> QueryRequest:
    base = dict(kind="mean", epsilon=1.0, dataset="x", users=100, samples=16)
    return QueryRequest(**{**base, **kw})


def _params(**kw) -> dict:
    return {"params": kw}


CASES = [
    # (field named in the message, request fields)
    ("phase_timeout_seconds", dict(phase_timeout_s=1e308)),
    ("phase_timeout_seconds", dict(phase_timeout_s=math.inf)),
    ("phase_timeout_seconds", dict(phase_timeout_s=math.nan)),
    ("phase_timeout_seconds", dict(phase_timeout_s=-1.0)),
    ("phase_timeout_seconds", dict(phase_timeout_s=0.5)),
    ("phase_timeout_seconds", dict(phase_timeout_s=400 * 24 * 3600.0)),
    ("samples", dict(samples=2**32 - 1)),
    ("samples", dict(samples=2**20 + 1)),
    ("samples", dict(samples=0)),
    ("dim", dict(kind="distribution", dim=0)),  # 0 = not given: 1, but a distribution needs it
    ("dim", dict(kind="mean-linf", dim=4097)),
    ("dim", dict(kind="distribution", dim=2**32 - 1)),
    ("users", dict(users=0)),
    ("users", dict(users=1)),
    ("users", dict(users=2**32 - 1)),
    ("epsilon", dict(epsilon=0.0)),
    ("epsilon", dict(epsilon=math.nan)),
    ("epsilon", dict(epsilon=math.inf)),
    ("epsilon", dict(epsilon=1e308)),
    ("epsilon", dict(epsilon=2.0**-25)),
    ("bound", dict(bound=-1.0)),
    ("bound", dict(bound=math.nan)),
    ("bound", dict(bound=math.inf)),
    ("bound", dict(bound=1e300)),
    ("bound", dict(bound=1e-300)),
    ("kind", dict(kind="k" * 10_000)),
    ("method", dict(method="m" * 10_000)),
    ("moment_m", dict(bound=0.0, **_params(moment_p=2, moment_m=1e308))),
    ("moment_m", dict(bound=0.0, **_params(moment_p=2, moment_m=-1))),
    ("moment_p", dict(bound=0.0, **_params(moment_p=1e308, moment_m=1))),
    ("moment_p", dict(bound=0.0, **_params(moment_p=1.5, moment_m=1))),
    ("frame_seed", dict(kind="mean-l2", dim=4, **_params(frame_seed=-1))),
    ("frame_seed", dict(kind="mean-l2", dim=4, **_params(frame_seed=10**25))),
    ("confidence", _params(confidence=1e-300)),
    ("params_json", _params(extra={"pad": "x" * 70_000})),
    ("dataset", dict(dataset="d" * 257)),
]


@pytest.mark.parametrize("field,kw", CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_out_of_range_fields_are_refused_by_name(collector, field, kw):
    c, a = collector
    before = c.server.db.snapshot()
    with pytest.raises(grpc.RpcError) as ei:
        a.create(_q(**kw))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (ei.value.code(),
                                                                 ei.value.details())
    details = ei.value.details()
    assert field in details, details
    assert len(details.encode()) <= MAX_MESSAGE_BYTES
    assert c.server.db.snapshot() == before


def test_nested_or_broken_params_json_is_invalid_argument(collector):
    c, a = collector
    before = c.server.db.snapshot()
    for text in ("[" * 100_000, '{"extra": ' + "[" * 100_000 + "]" * 100_000 + "}",
                 "{" * 5000, "not json"):
        msg = _q().message()
        msg.params_json = text
        with pytest.raises(grpc.RpcError) as ei:
            a.stub.CreateQuery(msg, metadata=a.meta, timeout=30)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value.details()
        assert "params_json" in ei.value.details()
    assert c.server.db.snapshot() == before


def test_edges_inside_the_bounds_are_accepted(collector):
    _, a = collector
    for i, kw in enumerate([dict(samples=2**20), dict(phase_timeout_s=1.0),
                            dict(phase_timeout_s=365 * 24 * 3600.0), dict(bound=2.0**40),
                            dict(bound=2.0**-40), dict(epsilon=2.0**20),
                            dict(epsilon=2.0**-24 * 8, users=10),
                            dict(kind="mean-l2", dim=4, **_params(frame_seed=2**53 - 1))]):
        q = a.create(_q(query_id=f"edge{i}", **kw))
        assert q.query_id == f"edge{i}"


def test_empty_method_is_the_default_the_proto_names(collector):
    """analyst.proto says which method an empty ``method`` means; the collector agrees."""
    _, a = collector
    comment = re.search(r"((?:[ \t]*//.*\n)+)[ \t]*string method = 8;",
                        PROTO.read_text()).group(1)
    named = re.search(r'empty = "([a-z-]+)"', comment)
    assert named, comment
    q = a.create(_q(query_id="default-method"))
    assert json.loads(q.spec_json)["method"] == named.group(1) == "auto"
    got = a.stub.GetQuery(analyst_pb2.GetQueryRequest(query_id="default-method"),
                          metadata=a.meta, timeout=30)
    assert got.query_id == "default-method"
