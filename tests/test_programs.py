"""The phase protocol (``uldp.collector.programs``): one driver runs every program, and a
run resumes from the published JSON alone (spec §2.2, §8.3, §9.3; INV-4).

SGD: 2·t0 phases with θ published between steps; a restart mid-run (the program rebuilt
from its spec) and a resume from a partial store give identical results. Classification:
the result feeds the scikit-style estimator. Mean kinds: every method's program places
every slot once and publishes JSON only.
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.collector.learning.estimators import LDPHistogramClassifier, LDPSGDRegressor
from uldp.collector.models.rounds import sgd_query
from uldp.collector.models.sgd import SGDConfig
from uldp.collector.planner import QuerySpec
from uldp.collector.programs import MeanEstProgram, SGDProgram, program_for
from uldp.collector.programs.driver import run_program

N, M, D = 1200, 40, 2
MU = np.array([0.3, -0.2])


def _quadratic(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(slots)  # each device's data are fixed by its slot
    X = MU + rng.uniform(-0.3, 0.3, size=(slots.size, M, D))
    return X, np.zeros((slots.size, M))


def _privatize(data, seed):
    def privatize(slots, task, offsets, acc):
        key = hashlib.sha256(task.to_json().encode()).hexdigest()
        X, y = data(slots)
        acc.add(compute_reports(task, X, RandomSource.seeded(f"{seed}:{key}"), labels=y,
                                offsets=offsets), slots)
    return privatize


def _spec() -> QuerySpec:
    cfg = SGDConfig(model="quadratic", epsilon=32.0, clip=1.0, t0=4, seed=3,
                    method="two-stage")
    return sgd_query(cfg, N, M, D, query_id="sgd-svc")


def test_sgd_phase_layout() -> None:
    prog = program_for(QuerySpec.from_dict(json.loads(json.dumps(_spec().to_dict()))))
    assert isinstance(prog, SGDProgram)
    assert prog.num_phases == 8 and prog.t0 == 4
    places = [prog.place(s) for s in range(N)]
    quotas = prog.quotas()
    assert sum(quotas) == N and len(quotas) == 8
    for _g, stage, phase in places:
        assert stage == (2 if phase % 2 == 0 else 1)
    per_step = np.bincount([(p - 1) // 2 for _, _, p in places])
    assert per_step.max() - per_step.min() <= 1
    task = prog.task(1, 0, 1, {})
    assert task.query_id == "sgd-svc" and task.kind == "sgd" and task.extra["theta"] == [0, 0]
    with pytest.raises(ValueError, match="theta_1 is not published"):
        prog.plan_for(3, {})
    with pytest.raises(ValueError, match="extra"):
        SGDProgram(QuerySpec(method="two-stage", kind="sgd", epsilon=1.0, users=10, samples=5,
                             extra={"model": "quadratic", "theta": [0]}))


def test_sgd_runs_and_restart_mid_run_is_identical() -> None:
    spec = _spec()
    store: dict = {}
    res = run_program(program_for(spec), _privatize(_quadratic, 5),
                      on_close=lambda p, j: store.__setitem__(p, j))
    assert res["t0"] == 4 and len(res["trajectory"]) == 4
    assert np.linalg.norm(np.asarray(res["theta"]) - MU) < 0.2
    for t, step in enumerate(res["trajectory"]):  # θ_{t+1} = θ_t − η g_t, published
        assert np.allclose(np.asarray(step["theta"]) - np.asarray(step["gradient"]),
                           store[2 * t + 2]["theta"])
    # a collector restart after phase 3 (mid-step 1): the program rebuilt from its spec JSON
    text = json.dumps(spec.to_dict())
    again = run_program(program_for(spec), _privatize(_quadratic, 5),
                        rebuild=lambda: program_for(QuerySpec.from_dict(json.loads(text))),
                        restart_after=3)
    assert again == res
    # a crash after phase 5: only phases 1..5 were persisted; resume from them
    partial = {p: copy.deepcopy(j) for p, j in store.items() if p <= 5}
    resumed = run_program(program_for(spec), _privatize(_quadratic, 5),
                          published=json.loads(json.dumps(partial)))
    assert resumed == res
    fitted = LDPSGDRegressor.from_result({**res, "n_features": 2,
                                          "estimator": {"fit_intercept": False}})
    assert np.allclose(fitted.theta_, res["theta"])


@pytest.mark.parametrize("method", ["ssl", "baseline-b", "auto"])
def test_sgd_steps_of_a_single_stage_method(method: str) -> None:
    """A step of a single-stage method is one phase; θ is published after it."""
    cfg = SGDConfig(model="quadratic", epsilon=32.0, clip=1.0, t0=3, seed=3, method=method)
    spec = sgd_query(cfg, N, M, D, query_id="sgd-1")
    prog = program_for(spec)
    per_step = 1 if method != "two-stage" else 2
    assert prog.num_phases == 3 * per_step and sum(prog.quotas()) == N
    store: dict = {}
    res = run_program(prog, _privatize(_quadratic, 7), on_close=store.__setitem__)
    assert len(res["trajectory"]) == 3 and all("theta" in store[p] for p in (1, 2, 3))
    assert np.linalg.norm(np.asarray(res["theta"]) - MU) < 0.3


def test_classify_query_result_feeds_the_estimator() -> None:
    spec = QuerySpec(method="two-stage",
                     kind="classify", epsilon=4.0, users=3000, samples=60, dim=1,
                     extra={"grid": 4}, query_id="cls-svc", seed=2)

    def data(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(slots)
        X = rng.uniform(size=(slots.size, 60, 1))
        eta = np.sin(2 * np.pi * X[..., 0]) / 2
        return X, np.where(rng.uniform(size=eta.shape) < (1 + eta) / 2, 1.0, -1.0)
    prog = program_for(spec)
    assert prog.num_phases == 2 and sum(prog.quotas()) == 3000
    res = run_program(prog, _privatize(data, 1))
    assert res["model"]["kind"] == "classify" and res["model"]["grid"]["M"] == 4
    assert len(res["values"]) == 4  # the estimate itself comes with it
    est = LDPHistogramClassifier.from_result(res["model"])
    x = np.array([[0.1], [0.4], [0.6], [0.9]])
    assert np.array_equal(est.predict(x), [1, 1, -1, -1])


@pytest.mark.parametrize("method", ["two-stage", "ssl", "baseline-a", "baseline-b"])
def test_mean_programs_place_every_slot_once_and_publish_json(method: str) -> None:
    spec = QuerySpec(kind="mean-linf", epsilon=2.0, users=900, samples=6, dim=3,
                     method=method, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = MeanEstProgram(spec)
    place = prog.placements()
    assert place.shape == (900, 3) and sum(prog.quotas()) == 900
    assert set(np.unique(place[:, 2])) == set(range(1, prog.num_phases + 1))
    seen: dict = {}

    def data(slots):
        return np.full((slots.size, 6, 3), 0.25), None
    res = run_program(prog, _privatize(data, 2), on_close=seen.__setitem__)
    assert json.loads(json.dumps(seen)) == {str(k): v for k, v in seen.items()}
    assert res["counts"]["reports"] == 900 - (len(seen) - 1) * (900 // 2 if method ==
                                                                 "two-stage" else 0)
    err = np.abs(np.asarray(res["values"]) - 0.25)  # every user's mean is 0.25 exactly
    assert np.all(err <= 4.5 * np.asarray(res["std_error"]) + 1e-9), (err, res["std_error"])


def test_planner_notes_are_data_not_warnings():
    """A weak stage I is a note on the plan (shown by the CLI, warned by the estimators),
    never a warning that modules pass around and suppress."""
    import warnings as _w

    from uldp.collector.planner import QuerySpec, compile_query

    spec = QuerySpec(kind="mean", epsilon=0.5, users=600, samples=100, dim=1, bound=1.0,
                     method="two-stage")
    with _w.catch_warnings():
        _w.simplefilter("error")
        plan = compile_query(spec)
        strong = compile_query(QuerySpec(kind="mean", epsilon=4.0, users=100_000,
                                         samples=100, dim=1, bound=1.0, method="two-stage"))
    assert any("stage I" in note for note in plan.advisories)
    assert strong.advisories == []
    auto = compile_query(QuerySpec(kind="mean", epsilon=1.0, users=10_000, samples=100,
                                   dim=1, bound=1.0))
    assert auto.auto["chosen"] == auto.spec.method and not plan.auto


def test_auto_takes_the_risk_of_a_larger_stage_one_only_for_a_larger_gain():
    """``method="auto"`` (docs/algorithms.md, "Choosing a method"). Vector kinds keep the
    KAPPA rule: the gain two-stage must promise grows with the stage-I share it needs, as
    the loss it risks on spread users. The 1-d mean compares ``ssl`` with
    ``two-stage-sized`` at every stage-I share by minimax regret over reference
    populations, in the query's objective."""
    from uldp.collector.methods.auto import (
        KAPPA,
        MAX_STAGE1_SHARE,
        POPULATIONS,
        SIZED_SHARES,
        required_gain,
    )
    from uldp.collector.planner import QuerySpec, compile_query

    assert required_gain(0.05) == required_gain(1 / 6) == KAPPA
    assert required_gain(0.4) == pytest.approx(KAPPA * (5 / 6) / 0.6)
    assert required_gain(MAX_STAGE1_SHARE) == pytest.approx(4.0)

    def auto(users: int, samples: int, eps: float, objective: str = "width",
             assume: str = "users-alike"):
        return compile_query(QuerySpec(kind="mean", epsilon=eps, users=users,
                                       samples=samples, dim=1, bound=1.0,
                                       objective=objective, assume=assume))

    # no assumption: no window's interval valid for every population beats single-stage
    # by more than stage I costs (docs/mechanisms.md, "What an assumption buys"): ssl, or
    # a stage I that only chooses the randomizer on the whole support
    for eps, ran in ((0.5, "ssl"), (8.0, "two-stage-adaptive")):
        for objective in ("width", "mse"):
            plain = auto(4000, 1000, eps, objective, assume="none")
            assert plain.spec.method == ran and set(plain.auto["predicted"]) == \
                set(POPULATIONS)
    # users alike, stated: the reference population is users alike, the objective decides
    plan = auto(4000, 1000, 0.5)
    assert plan.auto["objective"] == "width" and plan.auto["assume"] == "users-alike"
    assert set(plan.auto["predicted"]) == {"alike"}
    mse = auto(4000, 1000, 8.0, "mse")
    assert mse.spec.method == "two-stage-sized" and mse.spec.stage1_share in SIZED_SHARES
    assert mse.auto["predicted"]["alike"] < mse.auto["runner_up"]["predicted"]["alike"]
    # a strong stage I: two-stage-sized, the regret of its runner-up (ssl) larger
    strong = auto(4000, 1000, 8.0)
    assert strong.spec.method == "two-stage-sized"
    assert strong.auto["regret"] < strong.auto["runner_up"]["regret"]
    # the record is what the estimate and the preview show
    assert strong.auto["chosen"] == "two-stage-sized" and strong.spec.randomizer == "adaptive"
