"""One rule in every place (issue 17, item 14): the status codes a device retries, stated in
``docs/device-protocol.md`` §10 and ``proto/uldp/v1/device.proto``, implemented by the Python
transport (``call_with_retry``), the ledger's reading of a gateway's batch result
(``Device.answered``) and the TypeScript SDK (``client-ts/test/transport.test.ts`` reads the
same ``conformance/v1/transport.json``); and re-enrolment failures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import grpc
import pytest

from uldp.client.device import Device, EnrollmentError
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec
from uldp.client.transport import RETRYABLE, RetryPolicy, call_with_retry
from uldp.client.wire import device_pb2, device_pb2_grpc

from .device_recorder import serve, wire_task

ROOT = Path(__file__).resolve().parent.parent
VECTORS = json.loads((ROOT / "conformance/v1/transport.json").read_text())["cases"]
CODES = {c.name: c for c in grpc.StatusCode}
TASK = TaskSpec(query_id="q", kind="mean", method="ssl", stage=0, epsilon=1.0, eps_c=1.0,
                components=(0,), bound=1.0, intervals=((-1.0, 1.0),))


class _Err(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


@pytest.mark.parametrize("case", [c for c in VECTORS if c["code"]], ids=lambda c: c["name"])
def test_the_transport_retries_exactly_the_codes_of_the_contract(case):
    calls = []

    def fn(timeout):
        calls.append(timeout)
        if len(calls) == 1:
            raise _Err(CODES[case["name"]])
        return "ok"

    policy = RetryPolicy(attempts=3, base_s=0.0, cap_s=0.0)
    if case["retried"]:
        assert call_with_retry(fn, policy, sleep=lambda s: None) == "ok" and len(calls) == 2
    else:
        with pytest.raises(grpc.RpcError):
            call_with_retry(fn, policy, sleep=lambda s: None)
        assert len(calls) == 1


def test_a_gateway_result_is_read_with_the_same_rule(tmp_path):
    dev = Device("unused:1", tmp_path, budget=10.0, durable=False)
    try:
        for i, case in enumerate(c for c in VECTORS if c["code"]):
            q = f"q{i}"
            dev.ledger.record(q, "d" * 64, 1, 1, b"\0" * 8)
            done = dev.answered(q, case["code"], "injected")
            assert done is not case["retried"], case
            assert dev.ledger.get(q).state == ("pending" if case["retried"] else "rejected")
    finally:
        dev.close()


def _named(text: str) -> set[str]:
    m = re.search(r"Retried \(the identical request, with backoff\):([^.]*)\.", text)
    assert m, "the retry rule sentence is missing"
    return set(re.findall(r"[A-Z_]{4,}", m.group(1)))


@pytest.mark.parametrize("doc", ["docs/device-protocol.md", "proto/uldp/v1/device.proto"])
def test_the_docs_state_the_same_rule(doc):
    text = re.sub(r"\s*//\s*", " ", (ROOT / doc).read_text())
    assert _named(text) == {c.name for c in RETRYABLE}
    assert {c["name"] for c in VECTORS if c["retried"]} == {c.name for c in RETRYABLE}


# ---- re-enrolment failures (protocol §10) ----------------------------------------------
class _Collector(device_pb2_grpc.DeviceServiceServicer):
    """Issues d-1, d-2, ...; ``unauth``: calls to answer UNAUTHENTICATED first;
    ``refuse_previous``: Enroll with a previous token is UNAUTHENTICATED; ``enroll_code``:
    every Enroll fails with it."""

    def __init__(self) -> None:
        self.ids = 0
        self.unauth: list[str] = []
        self.refuse_previous = False
        self.enroll_code: grpc.StatusCode | None = None
        self.tasks: list = []
        self.reports: list = []
        self.enrolls: list[str] = []

    def Enroll(self, request, context):
        self.enrolls.append(request.previous_token)
        if self.enroll_code is not None:
            context.abort(self.enroll_code, "injected")
        if request.previous_token:
            if self.refuse_previous:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "previous token expired too "
                                                               "long ago")
            dev = request.previous_token.split(":")[0]
        else:
            self.ids += 1
            dev = f"d-{self.ids}"
        return device_pb2.EnrollResponse(device_id=dev, token=f"{dev}:{len(self.enrolls)}",
                                         expires_at_ms=2**62)

    def _gate(self, name, context):
        if self.unauth and self.unauth[0] == name:
            self.unauth.pop(0)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "token expired")

    def GetTasks(self, request, context):
        self._gate("GetTasks", context)
        return device_pb2.GetTasksResponse(tasks=self.tasks)

    def SubmitReport(self, request, context):
        self._gate("SubmitReport", context)
        self.reports.append(request.report.query_id)
        return device_pb2.SubmitReportResponse()


@pytest.fixture
def collector():
    with serve(_Collector()) as rec:
        yield rec


def _dev(chan, tmp) -> Device:
    dev = Device("unused:1", tmp / "dev", budget=10.0, channel=chan, durable=False,
                 rng=RandomSource.seeded(3), simulation=True,
                 retry=RetryPolicy(attempts=2, base_s=0.0, cap_s=0.0))
    dev.add_dataset("data", [0.5])
    return dev


def test_a_refused_previous_token_enrols_a_new_identity(collector, tmp_path):
    svc, chan = collector
    dev = _dev(chan, tmp_path)
    assert dev.enroll() == "d-1"
    svc.tasks = [wire_task(TASK, "q1")]
    svc.unauth, svc.refuse_previous = ["GetTasks"], True
    r = dev.poll()
    assert r.submitted == ["q1"] and dev.device_id == "d-2"
    assert svc.enrolls == ["", "d-1:1", ""]  # renewal refused, then a fresh enrolment
    dev.close()


@pytest.mark.parametrize("code", [grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.UNAVAILABLE])
def test_a_failed_re_enrolment_changes_nothing(collector, tmp_path, code):
    svc, chan = collector
    dev = _dev(chan, tmp_path)
    dev.enroll()
    svc.tasks, svc.unauth, svc.enroll_code = [wire_task(TASK, "q1")], ["SubmitReport"], code
    with pytest.raises(EnrollmentError):
        dev.poll()
    assert dev.device_id == "d-1" and dev.ledger.get("q1").state == "pending"
    svc.enroll_code, svc.tasks = None, []
    assert dev.poll().submitted == ["q1"] and svc.reports == ["q1"]
    assert dev.device_id == "d-1"
    dev.close()
