"""Creating ``sgd`` queries on the collector: ``uldp query create --kind sgd --extra ...``
(the CLI passes the public SGD configuration in ``params_json``), t0 fixed at creation,
``2·t0`` phases whose quotas add up to the users, idempotent re-create, refusals."""

from __future__ import annotations

import json

import grpc
import pytest

from uldp.collector.cli.app import main
from uldp.collector.planner import QuerySpec
from uldp.collector.programs import program_for
from uldp.collector.service.client import QueryRequest


def test_cli_creates_sgd_query(start_collector, pki, capsys) -> None:
    c = start_collector()
    extra = {"model": "quadratic", "sgd": {"t0": 2, "seed": 5, "method": "two-stage"}}
    argv = ["query", "create", "--kind", "sgd", "--epsilon", "16", "--dataset", "pts",
            "--users", "300", "--samples", "20", "--dim", "2", "--extra", json.dumps(extra),
            "--id", "sgd-cli", "--json", "--target", c.target, "--ca", str(pki.ca_cert),
            "--admin-token-file", str(pki.directory / "admin.token")]
    assert main(argv) == 0
    q = json.loads(capsys.readouterr().out)
    assert q["kind"] == "sgd" and q["state"] == "running" and q["current_phase"] == 1
    assert len(q["phases"]) == 4  # 2·t0
    spec = q["spec"]
    cfg = spec["extra"]["sgd"]
    assert cfg["t0"] == 2 and cfg["seed"] == 5 and cfg["query_id"] == "sgd-cli"
    assert cfg["epsilon"] == 16.0 and cfg["clip"] == 1.0 and spec["extra"]["model"] == "quadratic"
    quotas = [p["quota"] for p in q["phases"]]
    assert quotas == program_for(QuerySpec.from_dict(spec)).quotas() and sum(quotas) == 300
    # the same command again is an idempotent create
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["query_id"] == "sgd-cli"


def test_sgd_create_draws_seed_and_refuses_bad_config(start_collector) -> None:
    c = start_collector()
    a = c.analyst()
    req = QueryRequest(kind="sgd", method="two-stage", epsilon=8.0, dataset="pts", users=200,
                       samples=10, dim=3,
                       bound=0.5,
                       params={"extra": {"model": "logistic",
                                         "sgd": {"t0": 2, "method": "two-stage"}}},
                       query_id="sgd-seed")
    q = a.create(req)
    cfg = json.loads(q.spec_json)["extra"]["sgd"]
    assert cfg["clip"] == 0.5 and cfg["model"] == "logistic" and cfg["seed"] > 0
    assert len(q.phases) == 4
    again = a.create(req)  # the drawn seed is kept; re-create is idempotent
    assert json.loads(again.spec_json)["extra"]["sgd"]["seed"] == cfg["seed"]
    bad = [{"extra": {"model": "no-such-model"}},
           {"extra": {"model": "logistic", "sgd": {"epsilon": 2.0}}},  # request says 8
           {"extra": {"model": "logistic", "sgd": {"theta0": [0.0]}}},  # dim is 3
           {"extra": {"model": "logistic"}, "moment_p": 2.0}]
    for i, params in enumerate(bad):
        with pytest.raises(grpc.RpcError) as err:
            a.create(QueryRequest(kind="sgd", method="two-stage", epsilon=8.0, dataset="pts",
                                  users=200,
                                  samples=10, dim=3, params=params, query_id=f"sgd-bad{i}"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, params
