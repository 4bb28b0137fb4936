"""Classification and regression queries through the real gRPC collector on loopback
(spec §9.3, §10.3; DESIGN: the same query over real gRPC with simulated devices).

The collector's ``CreateQuery`` accepts the public ``extra`` values of the learning kinds
(grid, feature box, label bound) in ``params_json``; the test runs the unmodified
service: enrolment, assignment, two phases, device SDK with labelled datasets (the
production ``compute_report``), aggregation, result.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from uldp.collector.fleet import run_fleet
from uldp.collector.learning.estimators import (
    LDPHistogramClassifier,
    LDPHistogramRegressor,
)
from uldp.collector.learning.service import grid_result
from uldp.collector.planner import QuerySpec
from uldp.collector.service.client import QueryRequest

N, M = 600, 40


def _data(task: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    X = rng.uniform(10, 20, size=(N, M, 1))
    eta = np.sin(2 * np.pi * (X[..., 0] - 10) / 10) / 2
    if task == "classify":
        return X, np.where(rng.uniform(size=eta.shape) < (1 + eta) / 2, 1.0, 0.0)
    return X, eta + rng.uniform(-0.5, 0.5, size=eta.shape)


@pytest.mark.parametrize("kind", ["classify", "regress"])
def test_learning_query_over_grpc(kind, start_collector, tmp_path) -> None:
    c = start_collector()
    a = c.analyst()
    extra = {"grid": 2, "lo": [10.0], "hi": [20.0]}
    if kind == "regress":
        extra["label_bound"] = 1.0
    qid = f"{kind}-grpc"
    a.create(QueryRequest(kind=kind, epsilon=8.0, dataset="flights", users=N, samples=M,
                          params={"extra": extra}, query_id=qid))
    X, y = _data(kind)

    def give(i: int, dev) -> None:
        dev.add_dataset("flights", X[i], labels=y[i])

    res = run_fleet(c.endpoint, tmp_path / "fleet", N, [], concurrency=16, seed=1,
                    progress=False, timeout_s=180, on_device=give)
    assert not res.errors, res.errors[:3]
    assert res.submitted == N
    final = a.wait(qid, 120)
    assert final.state == 2, final
    est = json.loads(a.result(qid).estimate_json)
    spec = QuerySpec(kind=kind, epsilon=8.0, users=N, samples=M, extra=extra)
    result = grid_result(spec, est)
    x = np.array([[12.5], [17.5]])
    if kind == "classify":
        model = LDPHistogramClassifier.from_result(result)
        assert np.array_equal(model.predict(x), [1, -1])
    else:
        model = LDPHistogramRegressor.from_result(result)
        pred = model.predict(x)
        assert pred[0] > 0.1 and pred[1] < -0.1, pred  # cell means ±1/π ≈ ±0.32
