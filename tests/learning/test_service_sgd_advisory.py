"""The rounds advisory of an SGD query on the service path (issue 27): a learning query whose
rounds are predicted to recover little of the model says so in its preview, in its result
(``Result.advisories``, the program's ``advisories``) and in ``uldp query result`` — as
``run_sgd`` warns on the simulate path (tests/learning/test_sgd_settle.py). A real collector
on loopback, 40 real devices over gRPC, one windowed round."""

from __future__ import annotations

import json
import math

import numpy as np

from tests.service.conftest import ADMIN_TOKEN
from uldp.collector.analyst import Analyst
from uldp.collector.cli import main as cli_main
from uldp.collector.models.rounds import sgd_advisories, sgd_query
from uldp.collector.models.sgd import SGDConfig
from uldp.collector.simulation.fleet import run_fleet

N, M, D, EPS = 40, 5, 4, 0.5
SGD = {"seed": 3, "feature_bound": 1 / math.sqrt(D), "label_bound": 1.0}


def test_a_learning_query_that_will_recover_little_says_so_in_preview_and_result(
        start_collector, pki, tmp_path, capsys) -> None:
    cfg = SGDConfig(model="least_squares", epsilon=EPS, clip=2.0, **SGD)  # type: ignore[arg-type]
    spec = sgd_query(cfg, N, M, D)
    notes = sgd_advisories(spec)
    assert len(notes) == 1 and "recover little" in notes[0]  # 40 users, ε = 0.5: noise only
    # a query with many users does not carry it
    assert sgd_advisories(sgd_query(SGDConfig(model="least_squares", epsilon=2.0, clip=2.0,
                                              **SGD), 100_000, 100, D)) == []  # type: ignore[arg-type]
    c = start_collector()
    tok = tmp_path / "admin.token"
    tok.write_text(ADMIN_TOKEN)
    kw = dict(epsilon=EPS, dataset="lin", users=N, samples=M, dim=D, bound=2.0,
              extra={"model": "least_squares", "sgd": SGD})
    with Analyst(c.target, ca=pki.ca_cert, token=ADMIN_TOKEN) as a:
        pv = a.preview("sgd", **kw)  # type: ignore[arg-type]
        assert pv.advisories == tuple(notes), pv.advisories
        q = a.create("sgd", query_id="little", **kw)  # type: ignore[arg-type]
        assert q.spec["extra"]["rounds"]["chosen"] == "windowed"
        rng = np.random.default_rng(5)
        X = rng.uniform(-1, 1, size=(N, M, D)) / math.sqrt(D)
        y = np.clip(X @ np.full(D, 0.5) + 0.3 * rng.standard_normal((N, M)), -1, 1)

        def give(i: int, dev) -> None:
            dev.add_dataset("lin", X[i], labels=y[i], dim=D)

        res = run_fleet(c.endpoint, tmp_path / "fleet", N, [], concurrency=8, seed=2,
                        progress=False, timeout_s=120, on_device=give)
        assert not res.errors and res.submitted == N, res
        assert a.wait("little", 120).state == "done"
        r = a.result("little")
        assert r.advisories == tuple(notes), r.advisories
        assert json.loads(json.dumps(r.estimate))["advisories"] == notes
    assert cli_main(["query", "result", "little", "--target", c.target, "--ca",
                     str(pki.ca_cert), "--admin-token-file", str(tok)]) == 0
    assert f"note: {notes[0]}" in capsys.readouterr().out
