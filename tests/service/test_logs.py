"""``uldp collector serve --log-format json`` (``uldp.collector.observe.logs``): a fleet
reports to a collector process whose logs are one JSON object per line, with an access
record (call, status code, latency, port) for every call; the logs never hold a token,
the enrolment secret or a report's values."""

from __future__ import annotations

import json
import re

import grpc
import numpy as np

from tests.service.conftest import ADMIN_TOKEN
from tests.service.wire import report_for, send
from uldp.client.wire import bearer, device_pb2, device_pb2_grpc
from uldp.collector.datasets import make_fleet_data
from uldp.collector.service.client import QueryRequest
from uldp.collector.simulation.fleet import FleetDataset, run_fleet

N = 40
SECRET = "enrolment-secret-0123456789abcdef"


def test_json_logs_of_a_fleet_run_hold_no_token_or_report(start_collector, tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    c = start_collector(subprocess_=True, extra_args=[
        "--log-format", "json", "--enrollment-secret-file", str(secret_file)])
    a = c.analyst()
    a.create(QueryRequest(kind="mean", method="ssl", epsilon=2.0, dataset="x", users=N + 3,
                          samples=16, query_id="q", phase_timeout_s=600,
                          allow_simulated=True))
    data = make_fleet_data("mean", "uniform", 16, 1, 1.0, np.random.default_rng(2))
    res = run_fleet(c.endpoint, tmp_path / "fleet", N, [FleetDataset("x", data)],
                    concurrency=4, enrollment_secret=SECRET, seed=5, progress=False,
                    timeout_s=300)
    assert res.submitted == N and not res.errors
    secrets_seen, values_seen = [SECRET, ADMIN_TOKEN], []
    with c.channel() as ch:  # devices written from the proto: their tokens and reports
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        for seed in range(3):
            tok = stub.Enroll(device_pb2.EnrollRequest(label="t", enrollment_secret=SECRET)
                              ).token
            r = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]), metadata=bearer(tok))
            rep = report_for(r.tasks[0], seed=seed)
            send(stub, tok, rep)
            secrets_seen.append(tok)
            values_seen.append(list(rep.values))
        try:
            send(stub, "forged-token-" + "7" * 40, rep)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
        secrets_seen.append("forged-token-" + "7" * 40)
    a.wait("q", 120)
    c.stop()
    log = "".join(p.read_text() for p in tmp_path.glob(f"collector-{c.port}-*.log"))
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    other = [line for line in log.splitlines() if line and not line.startswith("{")]
    assert records and all(line.startswith("uldp collector ") for line in other), other[:3]
    # (the one plain line is the start-up banner on stdout; the logs are on stderr)
    access = [r for r in records if r["logger"] == "uldp.collector.access"]
    submits = [r for r in access if r["call"] == "/uldp.v1.DeviceService/SubmitReport"]
    assert len(submits) == N + 4
    assert sorted({r["code"] for r in submits}) == ["OK", "UNAUTHENTICATED"]
    assert all(isinstance(r["ms"], float) and r["front"] == "grpc" for r in access)
    assert {r["call"] for r in access} >= {"/uldp.v1.DeviceService/Enroll",
                                            "/uldp.v1.DeviceService/GetTasks",
                                            "/uldp.v1.AnalystService/CreateQuery"}
    assert any("phase 1 closed" in r["msg"] for r in records)
    for s in secrets_seen:
        assert s not in log
    numbers = set(re.findall(r"-?\d+", log))
    for values in values_seen:
        assert json.dumps(values) not in log and str(values) not in log
        assert not [v for v in values if abs(v) >= 1000 and str(v) in numbers], values
