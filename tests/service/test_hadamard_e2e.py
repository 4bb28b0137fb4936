"""Method ``hadamard`` over the real service: a three-phase query (centre, spread, window)
created through the analyst API, answered by production devices over gRPC on loopback
(``Sandbox``), closed phase by phase by the collector, with a result in the public range."""

from __future__ import annotations

import numpy as np

from uldp.collector.analyst import Analyst
from uldp.collector.simulation.sandbox import Sandbox


def test_a_hadamard_query_runs_its_three_phases_over_grpc():
    box = Sandbox.start()
    try:
        a = Analyst(box.target, ca=box.ca, token=box.admin_token)
        q = a.create("distribution", epsilon=2.0, dataset="cats", users=240, samples=30,
                     dim=4, method="hadamard", allow_simulated=True)
        assert box.fleet("cats", "distribution", users=240, samples=30, dim=4) == 240
        assert a.wait(q.query_id, timeout_s=120).state == "done"
        r = a.result(q.query_id).to_dict()
        phases = r["reports_per_phase"]
        assert len(phases) == 3 and sum(phases) == 240 and phases[1] >= 3
        low, high = np.array(r["ci_low"]), np.array(r["ci_high"])
        assert low.shape == (4,) and np.all((low >= 0) & (low <= high) & (high <= 1))
    finally:
        box.stop()
