"""Phases close at their deadline with the reports received ([D12] dropouts): a phase
with no stage-I report publishes the full-support fallback k̂ = 0, the next phase opens,
and the result uses whatever stage-II reports arrived."""

from __future__ import annotations

import json
import time

import numpy as np

from uldp.client.device import Device
from uldp.client.randomness import RandomSource
from uldp.client.wire import bearer, device_pb2, device_pb2_grpc
from uldp.collector.service.client import QueryRequest


def test_deadline_closes_phases_with_dropouts(start_collector, tmp_path):
    c = start_collector()
    a = c.analyst()
    # enrol first: phase 1's deadline runs from the creation of the query, and 40
    # enrolments can take longer than that on a loaded machine; the check-ins that must
    # fall in phase 1 are then only 40 GetTasks calls on one channel. 3 s (not less): the
    # 10 stage-II reports below must also arrive before phase 2's deadline under load.
    enrolled = []
    for i in range(40):
        d = Device(c.endpoint, tmp_path / f"d{i}", budget=4.0,
                   rng=RandomSource.seeded(i), durable=False, simulation=True)
        d.add_dataset("x", np.full(16, 0.4))
        d.enroll()
        enrolled.append(d)
    a.create(QueryRequest(method="two-stage", kind="mean", epsilon=2.0, dataset="x", users=40,
                          samples=16,
                          query_id="dl", phase_timeout_s=3.0))
    # every device checks in during phase 1, but no stage-I device reports (dropouts)
    devices, waiting = [], []
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        for d in enrolled:
            r = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]),
                              metadata=bearer(d._load_identity()["token"]))
            (waiting if r.waiting else devices).append(d)
    assert len(waiting) == 20 and len(devices) == 20
    end = time.monotonic() + 20
    while a.get("dl").current_phase != 2 and time.monotonic() < end:
        time.sleep(0.1)
    q = a.get("dl")
    assert q.current_phase == 2 and q.phases[0].received == 0
    assert json.loads(q.phases[0].published_json)["khat"] == {"0": [0]}  # fallback
    # half of the stage-II devices report before the deadline
    for d in waiting[:10]:
        assert d.poll().submitted == ["dl"]
    final = a.wait("dl", 30)
    assert final.state == 2
    assert [p.received for p in final.phases] == [0, 10]
    est = json.loads(a.result("dl").estimate_json)
    assert est["counts"]["reports"] == 10
    # a late device finds nothing to do; its budget is untouched
    r = waiting[10].poll()
    assert not r.submitted and not r.waiting and waiting[10].ledger.spent() == 0
    for d in devices + waiting:
        d.close()
    a.close()
