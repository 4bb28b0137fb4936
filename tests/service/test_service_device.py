"""The device SDK against a *hostile* collector (a real gRPC server on loopback with TLS
that hands out crafted tasks): it refuses what breaks its rules (DESIGN invariants 1 and
3), persists before sending and re-sends only stored bytes."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import warnings
from concurrent import futures

import grpc
import numpy as np
import pytest

import uldp.client.device as device_mod
from uldp.client.device import Device
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskRefused, TaskSpec, report_length
from uldp.client.transport import Endpoint, RetryPolicy
from uldp.client.wire import device_pb2, device_pb2_grpc
from uldp.collector.planner import QuerySpec, compile_query


class Hostile(device_pb2_grpc.DeviceServiceServicer):
    """Hands out ``self.tasks``; records every report; can fail the first sends."""

    def __init__(self) -> None:
        self.tasks: list[device_pb2.Task] = []
        self.reports: list[device_pb2.Report] = []
        self.fail_sends = 0
        self.lock = threading.Lock()

    def Enroll(self, request, context):
        return device_pb2.EnrollResponse(device_id="dev-1", token="tok",
                                         expires_at_ms=2**62)

    def GetTasks(self, request, context):
        return device_pb2.GetTasksResponse(tasks=self.tasks)

    def SubmitReport(self, request, context):
        with self.lock:
            self.reports.append(request.report)
            if self.fail_sends > 0:
                self.fail_sends -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "flaky")
        return device_pb2.SubmitReportResponse()


@pytest.fixture
def hostile(pki):
    svc = Hostile()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    device_pb2_grpc.add_DeviceServiceServicer_to_server(svc, server)
    creds = grpc.ssl_server_credentials([(pki.server_key.read_bytes(),
                                          pki.server_cert.read_bytes())])
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    yield svc, Endpoint(f"127.0.0.1:{port}", pki.ca_cert)
    server.stop(0).wait()


def make_device(ep, path, budget=1.0) -> Device:
    d = Device(ep, path, budget=budget, rng=RandomSource.seeded(str(path)),
               retry=RetryPolicy(attempts=4, base_s=0.01, cap_s=0.05, timeout_s=5),
               simulation=True)
    d.add_dataset("x", np.linspace(-0.5, 0.5, 16))
    return d


def base_task(eps: float = 1.0) -> TaskSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = compile_query(QuerySpec(method="two-stage",
                                       kind="mean", epsilon=eps, users=100, samples=16,
                                       query_id="h1"))
    return plan.task_for(0, 1)


def _length(spec: TaskSpec) -> int:
    try:
        return report_length(spec)
    except TaskRefused:
        return 1


def wire(spec: TaskSpec, **over) -> device_pb2.Task:
    text = spec.to_json()
    fields = dict(query_id=spec.query_id, phase=1 if spec.stage != 2 else 2, group=0,
                  stage=spec.stage, dataset="x", task_json=text,
                  report_length=_length(spec),
                  task_digest=hashlib.sha256(text.encode()).hexdigest(), max_abs_value=1 << 40)
    fields.update(over)
    return device_pb2.Task(**fields)


def raw(text: str, **over) -> device_pb2.Task:
    fields = dict(query_id="h1", phase=1, dataset="x", task_json=text, report_length=1,
                  task_digest=hashlib.sha256(text.encode()).hexdigest())
    fields.update(over)
    return device_pb2.Task(**fields)


def test_refuses_hostile_tasks(hostile, tmp_path):
    svc, ep = hostile
    dev = make_device(ep, tmp_path / "d", budget=1.0)
    t = base_task()
    over_budget = dataclasses.replace(base_task(eps=2.0))  # spends 2 > device budget 1
    stage2 = dataclasses.replace(t, stage=2, bins=(), intervals=((1.0, -1.0),))  # empty
    greedy = dataclasses.replace(t, eps_c=5.0)  # share above the query's ε
    bad_kind = t.to_dict() | {"kind": "exfiltrate"}
    import json
    cases = {
        "budget": wire(over_budget),
        "finite lo < hi": wire(stage2),
        "above the query budget": wire(greedy),
        "unknown task kind": raw(json.dumps(bad_kind)),
        "digest does not match": wire(t, task_digest="0" * 64),
        "announces": wire(t, report_length=99),
        "is not registered": wire(t, dataset="contacts"),
        "not valid JSON": raw("{nope"),
        "unknown fields": raw(json.dumps(t.to_dict() | {"noise_scale": 0.0})),
    }
    for reason, task in cases.items():
        svc.tasks = [task]
        r = dev.poll()
        assert not r.submitted, reason
        assert len(r.refused) == 1 and reason in r.refused[0][1], (reason, r.refused)
    assert svc.reports == []
    assert dev.ledger.spent() == 0.0 and dev.ledger.entries() == []
    # a valid task is run once; a *second* (different) task for the same query is refused
    svc.tasks = [wire(t)]
    assert dev.poll().submitted == ["h1"]
    second = dataclasses.replace(t, stage=2, bins=(), intervals=((-1.0, 1.0),))
    svc.tasks = [wire(second)]
    r = dev.poll()
    assert "at most once per query" in r.refused[0][1]
    assert len(svc.reports) == 1
    assert dev.ledger.spent() == pytest.approx(1.0)
    # and a new query no longer fits in the budget
    other = dataclasses.replace(t, query_id="h2")
    svc.tasks = [wire(other)]
    r = dev.poll()
    assert "budget" in r.refused[0][1]
    dev.close()


def test_retries_resend_the_same_bytes(hostile, tmp_path):
    svc, ep = hostile
    dev = make_device(ep, tmp_path / "d")
    svc.tasks = [wire(base_task())]
    svc.fail_sends = 2
    r = dev.poll()
    assert r.submitted == ["h1"]
    assert len(svc.reports) == 3
    assert len({tuple(x.values) for x in svc.reports}) == 1
    e = dev.ledger.get("h1")
    assert e.state == "acknowledged"
    assert np.frombuffer(e.report, "<i8").tolist() == list(svc.reports[0].values)
    # asked again for the same task (lost ack): the stored bytes, not a fresh draw
    dev.poll()
    assert len({tuple(x.values) for x in svc.reports}) == 1
    dev.close()


def test_crash_after_persist_resends_stored_bytes(hostile, tmp_path, monkeypatch):
    svc, ep = hostile
    svc.tasks = [wire(base_task())]
    dev = make_device(ep, tmp_path / "d")

    class Crash(BaseException):
        pass

    def crash(_q):
        raise Crash
    dev.before_send = crash
    with pytest.raises(Crash):
        dev.poll()
    assert svc.reports == []
    stored = dev.ledger.get("h1")
    assert stored is not None and stored.state == "pending"
    dev.close()
    # "restart": a new Device on the same state; computing a new report would be a bug

    def no_compute(*a, **k):
        raise AssertionError("a retry must not draw fresh noise")
    monkeypatch.setattr(device_mod, "compute_report", no_compute)
    dev2 = make_device(ep, tmp_path / "d")
    svc.tasks = []
    r = dev2.poll()
    assert r.submitted == ["h1"]
    assert list(svc.reports[0].values) == np.frombuffer(stored.report, "<i8").tolist()
    assert dev2.ledger.get("h1").state == "acknowledged"
    dev2.close()


def test_production_device_refuses_seeded_noise(hostile, tmp_path):
    svc, ep = hostile
    svc.tasks = [wire(base_task())]
    with pytest.raises(ValueError, match="simulation=True"):
        Device(ep, tmp_path / "s", budget=2.0, rng=RandomSource.seeded(1))
    dev = Device(ep, tmp_path / "p", budget=2.0)
    dev.add_dataset("x", np.zeros(16))
    dev._rng = RandomSource.secure()  # a non-simulation source smuggled in
    with pytest.raises(TypeError):
        dev.poll()
    assert dev.ledger.entries() == []  # refused before anything was charged
    dev._rng = None
    assert dev.poll().submitted == ["h1"]
    assert svc.reports[-1].simulated is False  # production reports say so
    dev.close()
    sim = Device(ep, tmp_path / "q", budget=2.0, rng=RandomSource.seeded(1), simulation=True)
    sim.add_dataset("x", [0.0, float("nan")])  # values are never rejected (totality)
    assert sim.poll().submitted == ["h1"]
    assert svc.reports[-1].simulated is True
    sim.close()
