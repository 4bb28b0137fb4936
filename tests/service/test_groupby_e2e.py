"""Group-by end to end (issue 29, item 2): ``uldp query create --kind mean --dataset steps
--by country --groups ...`` and ``Analyst.create(..., by=, groups=)`` over a real collector on
loopback, simulated devices (real ``uldp.client.Device`` objects over gRPC) holding a
``steps`` dataset and a categorical ``country`` dataset; devices without ``country`` are
never given the task (registrations are public; a device's group is not). Every group's
interval holds its truth (at a 99.99 % level: the slot permutation is drawn at creation, so
the run is not seeded end to end; ``tests/test_groupby.py`` checks 95 % coverage with fixed
seeds); ``uldp query result`` prints one row per group.
"""

from __future__ import annotations

import numpy as np

from tests.service.conftest import ADMIN_TOKEN
from uldp.client.transport import Endpoint
from uldp.collector.analyst import Analyst
from uldp.collector.cli import main as cli_main
from uldp.collector.datasets import FleetData
from uldp.collector.simulation.fleet import FleetDataset, run_fleet

GROUPS = ("de", "fr", "it")
N, EXTRA, M = 450, 30, 5  # devices with both datasets; devices with steps only


def test_a_grouped_mean_runs_end_to_end(pki, tmp_path, launcher, capsys):
    rng = np.random.default_rng(7)
    g = rng.choice(3, size=N, p=[0.5, 0.3, 0.2])
    mu = np.array([4000.0, 7000.0, 9000.0])[g] + rng.normal(0, 500, N)
    steps = np.clip(mu[:, None] + rng.normal(0, 800, (N, M)), 0, 20_000)
    truth = [np.clip(steps[g == k], 0, 12_000).mean() for k in range(3)]
    none = FleetData(lambda n: np.zeros((n, 1)), np.zeros(1))
    # devices 0 .. N-1 hold both datasets, N .. N+EXTRA-1 only steps
    values = np.vstack([steps, rng.uniform(0, 12_000, (EXTRA, M))])
    (tmp_path / "c").mkdir()
    c = launcher(pki, tmp_path / "c")
    try:
        tok = tmp_path / "admin.token"
        tok.write_text(ADMIN_TOKEN)
        assert cli_main(["query", "create", "--target", c.target, "--ca", str(c.pki.ca_cert),
                         "--admin-token-file", str(tok), "--kind", "mean", "--epsilon", "4",
                         "--dataset", "steps", "--users", str(N), "--samples", str(M),
                         "--lo", "0", "--hi", "12000", "--by", "country", "--groups",
                         ",".join(GROUPS), "--id", "cli", "--allow-simulated",
                         "--confidence", "0.9999"]) == 0
        with Analyst(c.target, ca=c.pki.ca_cert, token=ADMIN_TOKEN) as a:
            q = a.create("mean", epsilon=4.0, dataset="steps", users=N, samples=M, lo=0,
                         hi=12_000, by="country", groups=GROUPS, query_id="api",
                         allow_simulated=True, confidence=0.9999)
            assert q.kind == "mean-by" and q.spec["by"] == "country"
            assert q.spec["groups"] == list(GROUPS) and q.spec["dim"] == 3
            ep = Endpoint(c.target, c.pki.ca_cert)
            # devices with steps only: never given the task (nothing to do, nothing sent)
            extra = run_fleet(ep, tmp_path / "extra", EXTRA,
                              [FleetDataset("steps", none, values=values[N:])], concurrency=4,
                              seed=2, progress=False, timeout_s=120)
            assert extra.submitted == 0 and not extra.refused and not extra.errors
            both = [FleetDataset("steps", none, values=values[:N]),
                    FleetDataset("country", none, values=g[:, None].astype(float))]
            res = run_fleet(ep, tmp_path / "fleet", N, both, concurrency=8, seed=3,
                            progress=False, timeout_s=300)
            assert res.submitted == 2 * N and not res.errors and not res.rejected
            assert [a.wait(x, timeout_s=60).state for x in ("cli", "api")] == ["done"] * 2
            results = {x: a.result(x) for x in ("cli", "api")}
        assert cli_main(["query", "result", "--target", c.target, "--ca", str(c.pki.ca_cert),
                         "--admin-token-file", str(tok), "cli"]) == 0
        printed = capsys.readouterr().out
    finally:
        c.stop()
    for r in results.values():
        groups = r.groups()
        assert [x["group"] for x in groups] == list(GROUPS)
        for k, x in enumerate(groups):
            assert x["mean_low"] <= truth[k] <= x["mean_high"], (k, x, truth[k])
            assert x["users_low"] <= (g == k).sum() <= x["users_high"], (k, x)
        assert "grouped-ssl" in r.method
    for name in GROUPS:
        assert f"\n{name} " in printed, printed
