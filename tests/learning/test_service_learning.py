"""Learning queries on the collector's phase machinery (spec §2.2, §8.3, §9.3): the phase
layout of SGD (2·t0 phases, θ published between steps), JSON-only persistence and a
restart mid-SGD. The gRPC collector cannot run these kinds yet (see
``uldp.collector.learning.service.INTEGRATION``), so the phases are driven in process with
the production device function and plan accumulators."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from uldp.collector.learning.estimators import LDPHistogramClassifier, LDPSGDRegressor
from uldp.collector.learning.service import LearningProgram, run_in_process, sgd_query
from uldp.collector.learning.sgd import SGDConfig
from uldp.collector.planner import QuerySpec

N, M, D = 1200, 40, 2
MU = np.array([0.3, -0.2])


def _quadratic(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(slots)  # each device's data are fixed by its slot
    X = MU + rng.uniform(-0.3, 0.3, size=(slots.size, M, D))
    return X, np.zeros((slots.size, M))


def _spec() -> QuerySpec:
    cfg = SGDConfig(model="quadratic", epsilon=32.0, clip=1.0, t0=4, seed=3)
    return sgd_query(cfg, N, M, D, query_id="sgd-svc")


def test_sgd_phase_layout() -> None:
    prog = LearningProgram.from_spec(_spec().to_dict())
    assert prog.num_phases == 8 and prog.t0 == 4
    places = [prog.place(s) for s in range(N)]
    quotas = prog.quotas()
    assert sum(quotas) == N and len(quotas) == 8
    for _g, stage, phase in places:
        assert stage == (2 if phase % 2 == 0 else 1)
    # each step's users form one balanced group, half (±1) in each stage
    per_step = np.bincount([(p - 1) // 2 for _, _, p in places])
    assert per_step.max() - per_step.min() <= 1
    task = prog.task_for(1, 0, 1, {})
    assert task.query_id == "sgd-svc" and task.kind == "sgd" and task.extra["theta"] == [0, 0]
    with pytest.raises(ValueError, match="theta_1 is not published"):
        prog.plan_for(3, {})
    with pytest.raises(ValueError, match="extra"):
        LearningProgram.from_spec(QuerySpec(kind="sgd", epsilon=1.0, users=10, samples=5,
                                            extra={"model": "quadratic", "theta": [0]}))


def test_sgd_runs_and_restart_mid_run_is_identical() -> None:
    spec = _spec()
    full_store: dict = {}
    res = run_in_process(spec, _quadratic, seed=5, store=full_store)
    assert res["t0"] == 4 and len(res["trajectory"]) == 4
    assert np.linalg.norm(np.asarray(res["theta"]) - MU) < 0.2
    # θ_{t+1} = θ_t − η g_t, published between steps
    for t, step in enumerate(res["trajectory"]):
        nxt = full_store["published"][str(2 * t + 2)]["theta"]
        assert np.allclose(np.asarray(step["theta"]) - np.asarray(step["gradient"]), nxt)
    # a collector restart after phase 3 (mid-step 1): rebuild from the JSON store only
    again = run_in_process(spec, _quadratic, seed=5, restart_after=3)
    assert again == res
    # a crash after phase 5: only phases 1..5 were persisted; resume from them
    partial = copy.deepcopy(full_store)
    partial["published"] = {k: v for k, v in partial["published"].items() if int(k) <= 5}
    resumed = run_in_process(spec, _quadratic, seed=5, store=json.loads(json.dumps(partial)))
    assert resumed == res
    # the result dict is the estimators' format
    fitted = LDPSGDRegressor.from_result({**res, "n_features": 2,
                                          "estimator": {"fit_intercept": False}})
    assert np.allclose(fitted.theta_, res["theta"])


def test_classify_query_result_feeds_the_estimator() -> None:
    spec = QuerySpec(kind="classify", epsilon=4.0, users=3000, samples=60, dim=1,
                     extra={"grid": 4}, query_id="cls-svc", seed=2)

    def data(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(slots)
        X = rng.uniform(size=(slots.size, 60, 1))
        eta = np.sin(2 * np.pi * X[..., 0]) / 2
        return X, np.where(rng.uniform(size=eta.shape) < (1 + eta) / 2, 1.0, -1.0)
    prog = LearningProgram.from_spec(spec)
    assert prog.num_phases == 2 and sum(prog.quotas()) == 3000
    res = run_in_process(spec, data, seed=1)
    assert res["kind"] == "classify" and res["grid"]["M"] == 4
    est = LDPHistogramClassifier.from_result(res)
    x = np.array([[0.1], [0.4], [0.6], [0.9]])
    assert np.array_equal(est.predict(x), [1, 1, -1, -1])
