"""The shuffler's HTTP port (``uldp shuffler serve --http-port``; issue 19 item 2): real
collector and shuffler processes on loopback (TLS), devices whose sealed reports go to the
shuffler over Connect and gRPC-Web (``tests/service/connect_channel.py``: an independent
client of both protocols behind the generated stubs).

* real Devices send their sealed reports over both protocols and the shuffled query
  completes, its result stating shuffle mode and the truth inside its interval;
* the HTTP port answers every refusal with the gRPC port's code and message (one
  servicer), an identical resend is a duplicate on either port;
* ``GET /healthz``, and the CORS allow-list (``--cors-origin``) before any work.
"""

from __future__ import annotations

import json
import time

import grpc
import numpy as np
import pytest

from tests.service.connect_channel import ConnectChannel, https_call
from uldp.client.device import Device
from uldp.client.randomness import RandomSource
from uldp.client.transport import secure_channel
from uldp.client.wire import device_pb2, device_pb2_grpc, shuffler_pb2, shuffler_pb2_grpc
from uldp.collector.security.attestation import HmacAttestation
from uldp.collector.service.client import QueryRequest
from uldp.collector.simulation.fleet import fleet_attestation

from .conftest import APP_ORIGIN, METRICS_TOKEN, Deployment

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
PROTOCOLS = ("connect", "grpc-web")
SUBMIT = "/uldp.v1.ShufflerService/SubmitSealed"


def _url(d: Deployment) -> str:
    return f"https://127.0.0.1:{d.shuffler_http}"


def _http(d: Deployment, path: str, method: str = "GET", headers: dict[str, str] | None = None,
          body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    return https_call(_url(d) + path, d.sp.ca, method, headers, body)


def _query(d: Deployment, qid: str, users: int) -> None:
    an = d.analyst()
    an.create(QueryRequest(kind="mean", epsilon=1.0, dataset=qid, users=users, samples=2,
                           bound=1.0, method="ssl", phase_timeout_s=120, query_id=qid,
                           params={"shuffle": {"min_batch": 20}}, allow_simulated=True))
    an.close()
    time.sleep(0.3)  # the collector's list of running queries is cached for 0.25 s


def test_devices_send_sealed_reports_over_http_and_the_query_completes(deployment, tmp_path):
    d, users = deployment, 40
    _query(d, "web", users)
    channels = {p: ConnectChannel(_url(d), d.sp.ca, p) for p in PROTOCOLS}
    data = np.array([0.25, 0.5])
    try:
        for i in range(users):
            dev = Device(d.endpoint, tmp_path / f"dev{i}", budget=2.0, durable=False,
                         rng=RandomSource.seeded(100 + i), simulation=True,
                         shuffler_channel=channels[PROTOCOLS[i % 2]],
                         shuffler_attestation=fleet_attestation(d.sp.attestation_hex(),
                                                                f"web-{i}"))
            dev.add_dataset("web", data)
            r = dev.poll("web")
            assert (r.submitted, r.refused, r.rejected) == (["web"], [], []), r
            dev.close()
    finally:
        for ch in channels.values():
            ch.close()
    an = d.analyst()
    final = an.wait("web", timeout_s=120)
    assert final.state == 2, final.error
    res = an.result("web")
    an.close()
    p = json.loads(res.estimate_json)["privacy"]
    assert p["mode"] == "shuffle"
    assert sum(c["reports"] for c in p["cells"]) == users
    assert all(c["smallest_batch"] >= 20 for c in p["cells"])
    assert res.ci_low[0] <= data.mean() <= res.ci_high[0]


def _token_and_task(d: Deployment, qid: str) -> tuple[str, device_pb2.Task]:
    with secure_channel(d.endpoint) as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        tok = stub.Enroll(device_pb2.EnrollRequest(), timeout=10).token
        (task,) = stub.GetTasks(device_pb2.GetTasksRequest(datasets=[qid], query_id=qid),
                                metadata=(("authorization", f"Bearer {tok}"),),
                                timeout=10).tasks
    return tok, task


def _answer(stub: shuffler_pb2_grpc.ShufflerServiceStub, report: shuffler_pb2.SealedReport,
            token: str | None = None) -> tuple[str, str]:
    meta = (("authorization", f"Bearer {token}"),) if token is not None else ()
    try:
        dup = stub.SubmitSealed(shuffler_pb2.SubmitSealedRequest(report=report),
                                metadata=meta, timeout=10).duplicate
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""
    return "OK", f"duplicate={dup}"


def test_the_http_port_answers_as_the_grpc_port(deployment):
    d = deployment
    _query(d, "web-checks", 60)
    tok, task = _token_and_task(d, "web-checks")
    att = HmacAttestation.from_file(d.sp.attestation_key).issue("web-checks")
    good = dict(query_id="web-checks", phase=task.phase, group=task.group, stage=task.stage,
                task_digest=task.task_digest, sealed=bytes(57), ticket=task.shuffle_ticket,
                attestation=att)
    S = shuffler_pb2.SealedReport
    refused = [(S(**good), tok), (S(**dict(good, ticket="")), None),
               (S(**dict(good, ticket="forged.token")), None),
               (S(**dict(good, attestation="")), None),
               (S(**dict(good, task_digest="XY")), None),
               (S(**dict(good, sealed=bytes(10))), None),
               (S(**dict(good, query_id="nope")), None), (S(**dict(good, phase=7)), None)]
    with secure_channel(d.shuffler_endpoint) as g, ConnectChannel(_url(d), d.sp.ca) as c, \
            ConnectChannel(_url(d), d.sp.ca, "grpc-web") as w:
        stubs = [shuffler_pb2_grpc.ShufflerServiceStub(ch) for ch in (c, w, g)]
        for rep, token in refused:  # the same code and message on every port
            got = [_answer(s, rep, token) for s in stubs]
            assert got[0][0] != "OK" and got[0] == got[1] == got[2], got
        # stored over Connect; the identical resend is a duplicate on every port
        assert [_answer(s, S(**good)) for s in stubs] == [
            ("OK", "duplicate=False"), ("OK", "duplicate=True"), ("OK", "duplicate=True")]
        other = [_answer(s, S(**dict(good, sealed=bytes(58)))) for s in stubs]
        assert other[0][0] == "ALREADY_EXISTS" and other[0] == other[1] == other[2]
        batch = stubs[0].SubmitSealedBatch(shuffler_pb2.SubmitSealedBatchRequest(reports=[
            S(**dict(good, task_digest="XY")), S(**dict(good, ticket="forged.token")),
            S(**good)]), timeout=10)
    assert [(r.code, r.duplicate) for r in batch.results] == [(3, False), (16, False), (0, True)]


def test_healthz_and_cors(deployment):
    d = deployment
    assert _http(d, "/healthz")[0] == 200
    assert _http(d, "/uldp.v1.DeviceService/Enroll", "POST",
                 {"content-type": "application/proto"}, b"")[0] == 404  # shuffler only
    proto = {"content-type": "application/proto"}
    st, h, body = _http(d, SUBMIT, "POST", {**proto, "origin": "https://evil.example"}, b"")
    assert st == 403 and b"CORS" in body and "access-control-allow-origin" not in h
    st, h, _ = _http(d, SUBMIT, "OPTIONS", {
        "origin": APP_ORIGIN, "access-control-request-method": "POST",
        "access-control-request-headers": "content-type, authorization"})
    assert st == 204 and h["access-control-allow-origin"] == APP_ORIGIN
    # an allowed page's call reaches the servicer: no ticket, UNAUTHENTICATED (Connect JSON)
    st, h, body = _http(d, SUBMIT, "POST", {**proto, "origin": APP_ORIGIN}, b"")
    assert st == 401 and h["access-control-allow-origin"] == APP_ORIGIN
    assert json.loads(body)["code"] == "unauthenticated"


def test_the_shuffler_serves_aggregate_metrics_to_its_scraper(deployment):
    """``GET /metrics`` on the shuffler's HTTP port: 401 without its token (before any
    work), then aggregate counts — reports by state, refusals by code, the enrolment
    check — and no query id, slot or subject."""
    from prometheus_client.parser import text_string_to_metric_families

    d = deployment
    st, h, _ = _http(d, "/metrics")
    assert st == 401 and "www-authenticate" in h
    assert _http(d, "/metrics", headers={"authorization": "Bearer wrong-token-000000"})[0] == 401
    st, _, body = _http(d, "/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"})
    assert st == 200
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    reports = {s.labels["state"]: s.value for s in fams["uldp_shuffler_reports"].samples}
    assert reports["admitted"] >= 40 and set(reports) == {"admitted", "waiting", "batched",
                                                          "forwarded", "dropped"}
    refusals = {s.labels["code"] for s in fams["uldp_shuffler_refusals"].samples}
    assert "UNAUTHENTICATED" in refusals  # the forged tickets of the checks above
    assert fams["uldp_shuffler_enrolment_check"].samples[0].value == 1
    assert fams["uldp_shuffler_collector_polls"].samples[0].value >= 1
    assert fams["uldp_shuffler_reports_checked_in_pool"].samples[0].value >= 0
    assert b"query_id" not in body and b"web-checks" not in body


@pytest.mark.parametrize("ctype", ["application/proto", "application/json"])
def test_an_oversized_batch_is_refused_before_decoding_and_stores_nothing(deployment, ctype):
    """SubmitSealedBatch over Connect with 10 001 items, the first a valid report: refused
    with the count made in the bytes ("more than 10000": the items were never decoded),
    and that report was not stored (sent alone afterwards it is new, not a duplicate)."""
    d = deployment
    qid = "web-cap-" + ctype.split("/")[1]
    _query(d, qid, 40)
    _, task = _token_and_task(d, qid)
    good = shuffler_pb2.SealedReport(
        query_id=qid, phase=task.phase, group=task.group, stage=task.stage,
        task_digest=task.task_digest, sealed=bytes(57), ticket=task.shuffle_ticket,
        attestation=HmacAttestation.from_file(d.sp.attestation_key).issue(qid))
    if ctype == "application/proto":
        body = shuffler_pb2.SubmitSealedBatchRequest(
            reports=[good] + [shuffler_pb2.SealedReport()] * 10_000).SerializeToString()
    else:
        from google.protobuf.json_format import MessageToJson
        body = (b'{"reports":[' + MessageToJson(good).encode() + b"," +
                b",".join([b"{}"] * 10_000) + b"]}")
    status, _, out = _http(d, "/uldp.v1.ShufflerService/SubmitSealedBatch", "POST",
                           {"content-type": ctype}, body)
    err = json.loads(out)
    assert status == 400 and err["code"] == "invalid_argument", (status, out)
    assert err["message"] == "a batch holds at most 10000 items, got more than 10000"
    with secure_channel(d.shuffler_endpoint) as ch:
        assert not shuffler_pb2_grpc.ShufflerServiceStub(ch).SubmitSealed(
            shuffler_pb2.SubmitSealedRequest(report=good), timeout=10).duplicate
