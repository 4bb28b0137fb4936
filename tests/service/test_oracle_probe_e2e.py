"""Method ``oracle-probe`` over the real service: ``auto`` at ε = 8 runs the one-record
oracle with its paired-record probe; production devices answer over gRPC on loopback
(``Sandbox``) — a sixteenth of them with two records at ε/2 — and the result carries the
probe's users and an interval in the public range."""

from __future__ import annotations

import numpy as np

from uldp.collector.analyst import Analyst
from uldp.collector.simulation.sandbox import Sandbox


def test_auto_runs_the_oracle_probe_over_grpc():
    box = Sandbox.start()
    try:
        a = Analyst(box.target, ca=box.ca, token=box.admin_token)
        q = a.create("distribution", epsilon=8.0, dataset="cats", users=320, samples=10,
                     dim=4, method="auto", allow_simulated=True)
        assert box.fleet("cats", "distribution", users=320, samples=10, dim=4) == 320
        assert a.wait(q.query_id, timeout_s=120).state == "done"
        r = a.result(q.query_id).to_dict()
        extra = r  # the result carries the estimate's extra fields at the top
        assert extra["method"] == "oracle-probe" and extra["auto"]["chosen"] == "oracle-probe"
        assert extra["paired"]["users"] == 320 // 16 and extra["reports"] == 320
        low, high = np.array(r["ci_low"]), np.array(r["ci_high"])
        assert low.shape == (4,) and np.all((low >= 0) & (low <= high) & (high <= 1))
    finally:
        box.stop()
