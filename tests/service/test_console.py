"""The console's HTTP side (``uldp.collector.http.console``) against a real collector: its
files from package data with a strict Content-Security-Policy, the preview endpoint (admin
token first, then the collector's own CreateQuery checks: the same refusal and message as
CreateQuery, nothing stored), same-origin calls allowed while foreign origins stay refused,
and ``Analyst.preview`` giving the endpoint's numbers."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import grpc
import pytest

from tests.service.conftest import ADMIN_TOKEN
from uldp.collector.analyst import Analyst, AnalystError
from uldp.collector.service.client import QueryRequest


def _http(c, path: str, method: str = "GET", body: dict | bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    ctx = ssl.create_default_context(cafile=str(c.pki.ca_cert))
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(c.http_url + path, data=data, method=method,
                                 headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx),
                                         _NoRedirect())
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):  # type: ignore[no-untyped-def]
        return None


ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}", "content-type": "application/json"}


@pytest.fixture
def collector(start_collector):
    return start_collector(http=True)


def test_console_files_and_headers(collector):
    c = collector
    status, h, body = _http(c, "/console/")
    assert status == 200 and h["content-type"].startswith("text/html")
    assert b'<script src="console.js">' in body and b"http" not in body.split(b"<body>")[1]
    csp = h["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp and h["x-content-type-options"] == "nosniff"
    for name, ctype in (("console.js", "text/javascript"), ("console.css", "text/css")):
        status, h, body = _http(c, f"/console/{name}")
        assert status == 200 and h["content-type"].startswith(ctype) and len(body) > 1000
        assert b"https://" not in body  # nothing from elsewhere
    assert _http(c, "/console")[0] == 308
    assert _http(c, "/console/../metrics")[0] in (400, 404)
    assert _http(c, "/console/secret.txt")[0] == 404
    assert _http(c, "/console/", "POST", b"x")[0] == 405


def test_preview_checks_like_create_query(collector):
    c = collector
    req = {"kind": "mean", "epsilon": 1.0, "users": 4000, "samples": 100, "bound": 1.0,
           "dim": 1, "dataset": "steps"}
    status, _, body = _http(c, "/console/api/preview", "POST", req,
                            {"content-type": "application/json"})
    assert status == 401 and json.loads(body)["code"] == "unauthenticated"
    status, _, body = _http(c, "/console/api/preview", "POST", req, ADMIN)
    assert status == 200, body
    p = json.loads(body)
    assert p["phases"] == [4000] or sum(p["phases"]) == 4000
    assert len(p["half_width"]) == 1 and p["half_width"][0] > 0
    assert p["worst_half_width"][0] >= p["half_width"][0]
    a = Analyst(c.target, ca=c.pki.ca_cert, token=ADMIN_TOKEN)
    local = a.preview("mean", epsilon=1.0, users=4000, samples=100)
    assert local.half_width == tuple(p["half_width"]) and local.method == p["method"]
    # a query the collector would refuse: the same code and message as CreateQuery
    bad = {**req, "epsilon": -1.0}
    status, _, body = _http(c, "/console/api/preview", "POST", bad, ADMIN)
    err = json.loads(body)
    with pytest.raises(grpc.RpcError) as ei:
        c.analyst().create(QueryRequest(kind="mean", epsilon=-1.0, dataset="steps",
                                        users=4000, samples=100))
    assert status == 400 and err["code"] == "invalid_argument"
    assert err["message"] == ei.value.details()
    with pytest.raises(AnalystError) as ea:
        a.preview("mean", epsilon=-1.0, users=4000, samples=100)
    assert ea.value.code == "INVALID_ARGUMENT" and ea.value.message == err["message"]
    for body_, code in ((b"{not json", "invalid_argument"), (b'{"kind": 3}', "invalid_argument"),
                        (b'{"paramsJson": "{\\"nope\\": 1}"}', "invalid_argument"),
                        (b"x" * 70_000, "resource_exhausted")):
        status, _, out = _http(c, "/console/api/preview", "POST", body_, ADMIN)
        assert json.loads(out)["code"] == code, out
    assert a.list() == []  # a preview stores nothing
    a.close()


def test_same_origin_calls_pass_cors_and_foreign_origins_do_not(collector):
    c = collector
    own = {**ADMIN, "origin": c.http_url}
    status, h, _ = _http(c, "/uldp.v1.AnalystService/ListQueries", "POST", {}, own)
    assert status == 200 and "access-control-allow-origin" not in h
    foreign = {**ADMIN, "origin": "https://evil.example"}
    assert _http(c, "/uldp.v1.AnalystService/ListQueries", "POST", {}, foreign)[0] == 403
    assert _http(c, "/console/api/preview", "POST", {"kind": "mean"}, foreign)[0] == 403


def test_odometer_endpoint(collector):
    """``GET /console/api/odometer`` (issue 25): admin token first; every dataset with a
    shuffled query and the central ε its queries compose to (a running one at its worst
    case), next to the budget."""
    assert _http(collector, "/console/api/odometer")[0] == 401
    a = collector.analyst()
    try:
        a.create(QueryRequest(kind="mean", epsilon=1.0, dataset="odo", users=300, samples=2,
                              bound=1.0, params={"shuffle": {"min_batch": 100}}))
        a.create(QueryRequest(kind="mean", epsilon=1.0, dataset="clear", users=300, samples=2,
                              bound=1.0))
    finally:
        a.close()
    code, _, body = _http(collector, "/console/api/odometer", headers=ADMIN)
    assert code == 200
    got = {d["dataset"]: d for d in json.loads(body)["datasets"]}
    assert set(got) == {"odo"} and got["odo"]["shuffled_queries"] == 1
    assert 0 < got["odo"]["central_epsilon"] <= 1.0 and got["odo"]["budget"] == 10.0
