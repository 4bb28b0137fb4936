"""A query states its public range ``[lo, hi]`` end to end (issue 29, item 1).

``Analyst.create(..., lo=0, hi=120)`` and ``uldp query create --lo 0 --hi 120`` create the
same query; simulated devices holding the users of ``examples/visits.csv`` (real
``uldp.client.Device`` objects over gRPC) answer both; each result lies in ``[0, 120]`` and
its interval is as wide as the own-data check's (``uldp simulate mean --data ... --lo 0
--hi 120``, :func:`uldp.collector.simulation.own_data.run_users`) on the same users, within
10 % — the check runs exactly what a real query does (no centring of its own). Before the
range existed the check promised ±8.61 where a real query, stating ``[0, 120]`` as
``--bound 120``, got ±17.22.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.service.conftest import ADMIN_TOKEN
from uldp.client.transport import Endpoint
from uldp.collector.analyst import Analyst
from uldp.collector.cli import main as cli_main
from uldp.collector.simulation.fleet import FleetDataset, run_fleet
from uldp.collector.simulation.own_data import UserData, read_user_csv, run_users

VISITS = Path(__file__).resolve().parents[2] / "examples" / "visits.csv"
USERS = 300  # of the file's 800 (CI time)
EPS = 1.0


@pytest.fixture(scope="module")
def users() -> UserData:
    data = read_user_csv(VISITS, "user", ["minutes"])
    return UserData(data.values[:USERS])


def test_a_range_runs_end_to_end_and_matches_the_own_data_check(pki, tmp_path, launcher,
                                                                users, capsys):
    m_ref = max(int(np.median(users.counts)), 1)
    own = run_users("mean", users, epsilon=EPS, lo=0.0, hi=120.0, samples=m_ref, seed=3)
    (tmp_path / "collector").mkdir()
    c = launcher(pki, tmp_path / "collector")
    try:
        tok = tmp_path / "admin.token"
        tok.write_text(ADMIN_TOKEN)
        with Analyst(c.target, ca=c.pki.ca_cert, token=ADMIN_TOKEN) as a:
            preview = a.preview("mean", epsilon=EPS, users=USERS, samples=m_ref, lo=0, hi=120)
            a.create("mean", epsilon=EPS, dataset="minutes", users=USERS, samples=m_ref,
                     lo=0, hi=120, query_id="api", allow_simulated=True)
            assert cli_main(["query", "create", "--target", c.target, "--ca",
                             str(c.pki.ca_cert), "--admin-token-file", str(tok), "--kind",
                             "mean", "--epsilon", str(EPS), "--dataset", "minutes", "--users",
                             str(USERS), "--samples", str(m_ref), "--lo", "0", "--hi", "120",
                             "--id", "cli", "--allow-simulated"]) == 0
            # the devices hold the file's users (NaN pads the shorter ones: unusable samples)
            m = int(users.counts.max())
            values = np.full((USERS, m), np.nan)
            for i, v in enumerate(users.values):
                values[i, : len(v)] = v
            ds = FleetDataset("minutes", own_data_population(), values=values)
            res = run_fleet(Endpoint(c.target, c.pki.ca_cert), tmp_path / "fleet", USERS, [ds],
                            concurrency=8, seed=5, progress=False, timeout_s=300)
            assert res.submitted == 2 * USERS and not res.errors and not res.rejected
            assert [a.wait(q, timeout_s=60).state for q in ("api", "cli")] == ["done"] * 2
            results = {q: a.result(q) for q in ("api", "cli")}
            specs = {q: a.get(q).spec for q in ("api", "cli")}
    finally:
        c.stop()
    own_w = float(own.estimate.ci_high[0] - own.estimate.ci_low[0])
    assert own.range == (0.0, 120.0) and 0 <= own.truth[0] <= 120
    for q, r in results.items():
        assert (specs[q]["lo"], specs[q]["hi"], specs[q]["bound"]) == (0.0, 120.0, 60.0)
        assert 0.0 <= r.ci_low[0] <= r.values[0] <= r.ci_high[0] <= 120.0
        assert r.ci_low[0] <= own.truth[0] <= r.ci_high[0], (q, r.values, own.truth)
        width = r.ci_high[0] - r.ci_low[0]
        assert abs(width / own_w - 1) <= 0.10, (q, width, own_w)
        # the preview said so before anything was spent (noise prediction, users alike)
        assert abs(width / (2 * preview.likely_half_width[0]) - 1) <= 0.15, (width, preview)
    capsys.readouterr()


def own_data_population():
    """A placeholder population (the devices' values are given)."""
    from uldp.collector.datasets import FleetData

    return FleetData(lambda n: np.zeros((n, 1)), np.zeros(1))
