"""Issue 17 items 20 and 23: ``uldp simulate`` as a newcomer meets it.

* ``--json`` has one schema with a simulated fleet and with ``--data``
  (``uldp.collector.simulation.simulate.SIMULATE_JSON_KEYS``, documented in the README);
* ``classify|regress --data`` honours ``--lo/--hi`` (the feature box), sizes its grid (or
  takes ``--grid``) and bounds regress labels by ``--label-bound``: on features in
  [0, 8] the model sees the signal, where it used to squeeze every feature into one cell.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from opcli import REPO, uldp

from uldp.collector.simulation.simulate import SIMULATE_JSON_KEYS


@pytest.fixture(scope="module")
def features_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2000 users x 20 rows; feature x uniform on [0, 8]; label 1 iff x > 4 (10 % flipped);
    a regress target 10·(x > 4)."""
    g = np.random.default_rng(8)
    rows = ["user,x,y,t"]
    for u in range(2000):
        for _ in range(20):
            x = g.uniform(0, 8)
            y = int((x > 4) ^ (g.random() < 0.1))
            rows.append(f"u{u},{x:.4f},{y},{10.0 * (x > 4) + g.normal(0, 0.5):.3f}")
    p = tmp_path_factory.mktemp("learn") / "features.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def test_one_json_schema_with_and_without_data(tmp_path):
    fleet = uldp("simulate", "mean", "--users", "500", "--samples", "10", "--json",
                 "--no-progress")
    assert fleet.returncode == 0, fleet.stderr
    p = tmp_path / "v.csv"
    p.write_text("user,v\n" + "".join(f"u{i % 50},{(i % 7) / 7:.3f}\n" for i in range(500)))
    own = uldp("simulate", "mean", "--data", str(p), "--user-col", "user", "--value-col",
               "v", "--lo", "0", "--hi", "1", "--json")
    assert own.returncode == 0, own.stderr
    a, b = json.loads(fleet.stdout), json.loads(own.stdout)
    assert list(a) == list(b) == list(SIMULATE_JSON_KEYS)
    for d in (a, b):
        assert d["rmse"] == pytest.approx(d["mse"] ** 0.5) and 0 <= d["coverage"] <= 1
    readme = (REPO / "README.md").read_text()
    documented = set(re.findall(r"`(\w+)`", readme[readme.index("- **Output:**"):][:1500]))
    assert documented >= set(SIMULATE_JSON_KEYS)


def _cells(d: dict) -> np.ndarray:
    return np.asarray(d["truth"]), np.asarray(d["estimate"])


def test_classify_on_features_in_0_8_sees_the_signal(features_csv):
    r = uldp("simulate", "classify", "--data", str(features_csv), "--user-col", "user",
             "--value-col", "x", "--label-col", "y", "--lo", "0", "--hi", "8", "--grid", "4",
             "--epsilon", "4", "--json")
    assert r.returncode == 0, r.stderr
    truth, est = _cells(json.loads(r.stdout))
    # per cell of [0, 8]: E[±1 label · 1{x in cell}] = ∓0.2 below 4, ±0.2 above
    np.testing.assert_allclose(truth, [-0.2, -0.2, 0.2, 0.2], atol=0.03)
    assert np.array_equal(np.sign(est), np.sign(truth)), est


def test_classify_default_grid_and_clamping_note(features_csv):
    r = uldp("simulate", "classify", "--data", str(features_csv), "--user-col", "user",
             "--value-col", "x", "--label-col", "y", "--lo", "0", "--hi", "6", "--epsilon",
             "4", "--json")
    assert r.returncode == 0, r.stderr
    assert "lie outside [0, 6]" in r.stderr  # features in (6, 8]: clamped, counted
    truth, _ = _cells(json.loads(r.stdout))
    # the signal is in the box, whatever grid the predicted risk chose (finer cells each
    # hold less of it): summed over the cells of each sign
    assert truth[truth < 0].sum() < -0.1 and truth[truth > 0].sum() > 0.1, truth


def test_regress_honours_the_label_bound(features_csv):
    r = uldp("simulate", "regress", "--data", str(features_csv), "--user-col", "user",
             "--value-col", "x", "--label-col", "t", "--lo", "0", "--hi", "8", "--grid", "2",
             "--label-bound", "12", "--epsilon", "4", "--json")
    assert r.returncode == 0, r.stderr
    truth, est = _cells(json.loads(r.stdout))
    # per cell: E[label · 1{x in cell}] ≈ 0 below 4 and 10 · 0.5 = 5 above
    assert truth.max() == pytest.approx(5.0, abs=0.2)
    assert np.abs(est - truth).max() < 1.0
