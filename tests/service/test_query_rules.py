"""One set of query rules on every surface (issue 29, item 3): ``uldp query create``, the
Python API (``Analyst.create`` and ``Analyst.preview``), the console (its preview endpoint,
which it calls before it offers "Create query") and ``CreateQuery`` on the wire refuse the
same queries with the same message — ``uldp.collector.service.requests.check_shape`` and the
limits before it — and accept the same ones. Real collector on loopback (gRPC and the HTTP
port, TLS, SQLite); the CLI runs in-process.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import grpc
import pytest

from tests.service.conftest import ADMIN_TOKEN
from uldp.client.transport import secure_channel
from uldp.client.wire import analyst_pb2, analyst_pb2_grpc, bearer
from uldp.collector.analyst import Analyst, AnalystError
from uldp.collector.cli import main as cli_main

BASE = dict(kind="mean", epsilon=1.0, dataset="steps", users=400, samples=20)

#: (what the message must contain, the query as Python keywords beyond BASE)
REFUSALS = [
    ("dim: a distribution query needs the number of its categories", dict(kind="distribution")),
    ("dim: a distribution query needs the number of its categories",
     dict(kind="distribution", dim=1)),
    ("lo and hi go together", dict(lo=0.0)),
    ("lo must be below hi", dict(lo=5.0, hi=5.0)),
    ("lo must be below hi", dict(lo=6.0, hi=5.0)),
    ("bound and lo/hi are alternatives", dict(lo=0.0, hi=120.0, bound=60.0)),
    ("lo/hi: a distribution's values are its categories", dict(kind="distribution", dim=4,
                                                               lo=0.0, hi=1.0)),
    ("lo/hi: kind mean-l2 bounds each vector's l2 norm", dict(kind="mean-l2", dim=4, lo=0.0,
                                                              hi=1.0)),
    ("hi must be a number between -2^40 and 2^40", dict(lo=0.0, hi=1e300)),
    ("moment_p and moment_m go together", dict(moment_p=2.0)),
    ("are alternatives", dict(moment_p=2.0, moment_m=1.0, bound=3.0)),
    ("epsilon must be between 2^-24 and 2^20", dict(epsilon=0.0)),
    ("users must be between 2 and", dict(users=1)),
    ("bound must be between 2^-40 and 2^40", dict(bound=-1.0)),
    ("confidence must be between", dict(confidence=1.5)),
    ("kind must be one of", dict(kind="median")),
    # group-by (item 2)
    ("by: group-by applies to kind mean", dict(kind="distribution", dim=4, by="country",
                                               groups=["a", "b"])),
    ("groups go with by", dict(groups=["a", "b"])),
    ("groups: a grouped mean names its groups", dict(by="country", groups=["a"])),
    ("groups: a grouped mean names its groups", dict(by="country", groups=["a", "a"])),
    ("dim: a grouped mean has one dimension per group", dict(by="country", groups=["a", "b"],
                                                            dim=3)),
    ("method: a grouped mean reports every group", dict(by="country", groups=["a", "b"],
                                                        method="two-stage")),
]


def _cli_args(q: dict) -> list[str]:
    flags = {"moment_p": "--moment-p", "moment_m": "--moment-m"}
    out = []
    for k, v in q.items():
        if k == "kind" or k in BASE:
            continue
        out += [flags.get(k, f"--{k}"), ",".join(v) if isinstance(v, list) else str(v)]
    return ["--kind", q["kind"], "--epsilon", str(q["epsilon"]), "--dataset", q["dataset"],
            "--users", str(q["users"]), "--samples", str(q["samples"]), *out]


def _message(q: dict) -> analyst_pb2.CreateQueryRequest:
    params = {k: q[k] for k in ("moment_p", "moment_m", "confidence", "lo", "hi", "by",
                                "groups") if k in q}
    return analyst_pb2.CreateQueryRequest(
        kind=q["kind"], epsilon=q["epsilon"], dataset=q["dataset"], users=q["users"],
        samples=q["samples"], dim=q.get("dim", 0), bound=q.get("bound", 0.0),
        method=q.get("method", ""), params_json=json.dumps(params) if params else "")


def _console(c, q: dict) -> tuple[int, dict]:
    """The console's preview endpoint with the JSON the page sends (proto3 JSON)."""
    from google.protobuf import json_format

    body = json_format.MessageToJson(_message(q)).encode()
    ctx = ssl.create_default_context(cafile=str(c.pki.ca_cert))
    req = urllib.request.Request(c.http_url + "/console/api/preview?simulate=0", data=body,
                                 method="POST", headers={
                                     "authorization": f"Bearer {ADMIN_TOKEN}",
                                     "content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def collector(pki, tmp_path_factory, launcher):
    c = launcher(pki, tmp_path_factory.mktemp("rules"), http=True)
    channel = secure_channel(c.endpoint)
    yield c, analyst_pb2_grpc.AnalystServiceStub(channel)
    channel.close()
    c.stop()


@pytest.fixture(scope="module")
def cli_flags(collector, tmp_path_factory):
    c, _ = collector
    tok = tmp_path_factory.mktemp("tok") / "admin.token"
    tok.write_text(ADMIN_TOKEN)
    return ["--target", c.target, "--ca", str(c.pki.ca_cert), "--admin-token-file", str(tok)]


@pytest.mark.parametrize("want,kw", REFUSALS, ids=[f"r{i}" for i in range(len(REFUSALS))])
def test_each_refusal_is_the_same_on_every_surface(collector, cli_flags, capsys, want, kw):
    c, stub = collector
    q = {**BASE, **kw}
    # 1. CreateQuery on the wire
    with pytest.raises(grpc.RpcError) as wire:
        stub.CreateQuery(_message(q), metadata=bearer(ADMIN_TOKEN), timeout=30)
    assert wire.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    message = wire.value.details()
    assert want in message, message
    # 2. the Python API: create and preview
    with Analyst(c.target, ca=c.pki.ca_cert, token=ADMIN_TOKEN) as a:
        api = {k: v for k, v in q.items() if k not in ("kind",)}
        with pytest.raises(AnalystError) as created:
            a.create(q["kind"], **api)
        assert (created.value.code, created.value.message) == ("INVALID_ARGUMENT", message)
        api.pop("dataset")
        with pytest.raises(AnalystError) as previewed:
            a.preview(q["kind"], **api)
        assert (previewed.value.code, previewed.value.message) == ("INVALID_ARGUMENT",
                                                                   message)
    # 3. the console's preview endpoint
    status, err = _console(c, q)
    assert (status, err) == (400, {"code": "invalid_argument", "message": message})
    # 4. the CLI: one line, exit code 2, the same message
    code = cli_main(["query", "create", *cli_flags, *_cli_args(q)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines


def test_what_one_surface_accepts_every_surface_accepts(collector, cli_flags, capsys):
    """The same accepted queries, with the defaults filled in alike: a range on every
    surface, and a query that leaves dim and bound out (dim 1, the range [-1, 1])."""
    c, stub = collector
    ranged = {**BASE, "lo": 0.0, "hi": 120.0}
    msg = _message(ranged)
    msg.query_id = "wire"
    stub.CreateQuery(msg, metadata=bearer(ADMIN_TOKEN), timeout=30)
    with Analyst(c.target, ca=c.pki.ca_cert, token=ADMIN_TOKEN) as a:
        a.create("mean", **{k: v for k, v in ranged.items() if k != "kind"},
                 query_id="api")
        assert cli_main(["query", "create", *cli_flags, *_cli_args(ranged), "--id", "cli"]) == 0
        assert cli_main(["query", "create", *cli_flags, *_cli_args(BASE), "--id", "plain"]) == 0
        specs = [q.spec for q in a.list()]
        p = a.preview("mean", epsilon=1.0, users=400, samples=20, lo=0.0, hi=120.0)
    status, out = _console(c, ranged)
    assert status == 200 and out["half_width"] == list(p.half_width)
    by_id = {s["query_id"]: s for s in specs}
    for qid in ("wire", "api", "cli"):
        s = by_id[qid]
        assert (s["lo"], s["hi"], s["bound"], s["dim"]) == (0.0, 120.0, 60.0, 1)
    plain = by_id["plain"]
    assert (plain["lo"], plain["hi"], plain["bound"], plain["dim"]) == (None, None, 1.0, 1)
    capsys.readouterr()
