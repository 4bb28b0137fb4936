"""A learning query in shuffle mode, end to end (issue 27 item 3): real collector and
shuffler processes on loopback, real devices behind a gateway sending sealed reports.

An SGD query of windowed rounds runs through the shuffler round after round (each round's
windows and θ published from the shuffled batches of the previous one), and its result
states both accountings: ``accounting`` (the ε every device spent, per round, and the
user-level total) and ``privacy`` (per round and group, the local ε0 and the central
(ε, δ) of shuffling the reports that came through; the query's central ε is the largest).
The deployment is the shuffle tests' own (``tests/shuffle/conftest.py``).
"""

from __future__ import annotations

import json

import pytest

from tests.shuffle.conftest import Deployment, deployment  # noqa: F401  (the fixture)
from uldp.collector.service.client import QueryRequest
from uldp.collector.simulation.fleet import FleetDataset, dataset_for_query
from uldp.collector.simulation.gateway import run_gateway_fleet

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

USERS, SAMPLES, EPS = 480, 20, 2.0


def test_a_shuffled_sgd_query_states_its_rounds_and_its_central_epsilon(
        deployment: Deployment) -> None:  # noqa: F811
    d = deployment
    an = d.analyst()
    extra = {"model": "logistic", "sgd": {"t0": 2, "method": "windowed", "seed": 3,
                                          "feature_bound": 0.5}}
    q = an.create(QueryRequest(kind="sgd", epsilon=EPS, dataset="ds-sgd", users=USERS,
                               samples=SAMPLES, dim=2, bound=1.0, phase_timeout_s=120,
                               params={"extra": extra,
                                       "shuffle": {"min_batch": 20, "delta": 1e-6}},
                               allow_simulated=True))
    data = dataset_for_query("sgd", "logistic", SAMPLES, 2, 1.0, seed=5)
    res = run_gateway_fleet(d.endpoint, d.work / "devices-sgd", USERS,
                            [FleetDataset("ds-sgd", data, modulo=1, residue=0)],
                            gateways=1, batch=240, budget=2 * EPS, seed=5, timeout_s=300,
                            shuffler=d.shuffler_endpoint,
                            shuffler_attestation_key=d.sp.attestation_hex())
    assert not res.errors and not res.rejected and not res.refused, res
    assert res.submitted == USERS
    final = an.wait(q.query_id, timeout_s=180)
    assert final.state == 2, final.error
    est = json.loads(an.result(q.query_id).estimate_json)
    an.close()
    assert est["method"] == "windowed" and est["t0"] == 2 and len(est["trajectory"]) == 2
    acct = est["accounting"]
    assert acct["rounds"] == 2 and acct["epsilon_per_user"] == EPS
    assert [r["epsilon"] for r in acct["per_round"]] == [EPS, EPS]
    p = est["privacy"]
    assert p["mode"] == "shuffle" and {c["phase"] for c in p["cells"]} == {1, 2}
    assert sum(c["reports"] for c in p["cells"]) == USERS
    for c in p["cells"]:
        assert c["epsilon"] <= c["epsilon0"] <= EPS and c["smallest_batch"] >= 20
    assert p["central_epsilon"] == max(c["epsilon"] for c in p["cells"])
    assert p["local_epsilon"] == max(c["epsilon0"] for c in p["cells"])
    # the second round's windows came from the first round's shuffled reports
    w0, w1 = (est["trajectory"][t]["windows_used"] for t in (0, 1))
    assert all(b - a < d_ - c_ for (a, b), (c_, d_) in zip(w1, w0, strict=True))
