"""Explicit methods and mechanisms (issue 24, item 4).

``--method X`` runs X with the best mechanisms for the public parameters (what ``auto``
would use with the same method), not discrete Laplace; a mechanism can be named on the
CLI, in the Python API and in ``params_json``; every result names the method *and* the
mechanisms that ran. Small fleets, fixed seeds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from uldp.client.wire import analyst_pb2
from uldp.collector.cli.app import main
from uldp.collector.mechanisms.choice import best_oracle, best_scalar
from uldp.collector.planner import QuerySpec, compile_query, with_best_mechanisms
from uldp.collector.service.catalogue import check_message
from uldp.collector.service.errors import ServiceError
from uldp.collector.simulation.own_data import UserData, run_users


def test_a_named_method_gets_the_best_mechanisms_unless_it_names_them():
    base = dict(kind="mean", epsilon=1.0, users=1000, samples=10)
    assert with_best_mechanisms({**base, "method": "ssl"})["randomizer"] == "best"
    assert with_best_mechanisms({**base, "method": "two-stage"})["oracle"] == "best"
    assert with_best_mechanisms({**base, "method": "two-stage-sized"})["randomizer"] == \
        "adaptive"
    assert "randomizer" not in with_best_mechanisms({**base, "method": "auto"})
    assert "randomizer" not in with_best_mechanisms({**base, "method": "baseline-a"})
    named = with_best_mechanisms({**base, "method": "ssl", "randomizer": "duchi"})
    assert named["randomizer"] == "duchi"
    plan = compile_query(QuerySpec(**with_best_mechanisms({**base, "method": "two-stage"})))
    task = plan.task_for(0, 1)
    assert task.mechanism == best_oracle(task.bins[0][2], 1.0)


def test_every_result_names_the_method_and_the_mechanisms_that_ran():
    g = np.random.default_rng(2)
    users = UserData([(g.random(20) < 0.3).astype(float) for _ in range(600)])
    ssl = run_users("mean", users, epsilon=1.0, lo=0.0, hi=1.0, method="ssl")
    assert ssl.method == "ssl"
    assert ssl.estimate.extra["mechanisms"] == {"oracle": None, "randomizer": best_scalar(1.0)}
    pm = run_users("mean", users, epsilon=1.0, lo=0.0, hi=1.0, method="ssl",
                   options={"randomizer": "pm"})
    assert pm.to_dict()["mechanisms"]["randomizer"] == "pm"
    sized = run_users("mean", users, epsilon=4.0, lo=0.0, hi=1.0, method="two-stage-sized")
    mech = sized.to_dict()["mechanisms"]
    assert mech["oracle"] in ("grr", "oue", "ss") and mech["randomizer"] in (
        "laplace", "duchi", "pm", "hm")  # the one stage I picked, not "from stage I"
    auto = run_users("mean", users, epsilon=1.0, lo=0.0, hi=1.0,
                     options={"assume": "users-alike"})
    assert auto.estimate.extra["auto"]["runner_up"]["method"] != auto.method


def _request(**kw) -> analyst_pb2.CreateQueryRequest:
    base = dict(kind="mean", epsilon=1.0, dataset="d", users=1000, samples=10, dim=1,
                bound=1.0)
    return analyst_pb2.CreateQueryRequest(**{**base, **kw})


def test_params_json_names_mechanisms_and_the_objective_with_clear_refusals():
    checked = check_message(_request(method="ssl", params_json='{"randomizer": "pm"}'),
                            max_users=None, program=False)
    assert checked is not None and checked.spec.randomizer == "pm"
    checked = check_message(_request(method="two-stage"), max_users=None, program=False)
    assert checked is not None and checked.spec.oracle == "best"
    checked = check_message(_request(params_json='{"objective": "mse"}'), max_users=None,
                            program=False)
    assert checked is not None and checked.spec.objective == "mse"
    for params, field in (('{"randomizer": "bogus"}', "params_json randomizer"),
                          ('{"oracle": "hm"}', "params_json oracle"),
                          ('{"objective": "fast"}', "params_json objective"),
                          ('{"stage1_share": 1.5}', "params_json stage1_share")):
        with pytest.raises(ServiceError) as err:
            check_message(_request(method="ssl", params_json=params), max_users=None,
                          program=False)
        assert err.value.code == "INVALID_ARGUMENT" and field in err.value.message


def test_the_cli_names_what_ran_and_refuses_a_bad_mechanism(capsys):
    assert main(["simulate", "mean", "--users", "800", "--samples", "5", "--method", "ssl",
                 "--randomizer", "duchi", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["method"] == "ssl" and out["mechanisms"]["randomizer"] == "duchi"
    assert main(["simulate", "mean", "--users", "800", "--samples", "5", "--method", "ssl",
                 "--no-progress"]) == 0
    assert f"ssl (randomizer {best_scalar(1.0)})" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "mean", "--randomizer", "bogus"])
    assert exit_.value.code == 2
    assert "--randomizer" in capsys.readouterr().err
