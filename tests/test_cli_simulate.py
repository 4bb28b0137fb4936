"""``uldp simulate`` (issue 2 §4): JSON contract, human output, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from uldp.collector.cli.app import main
from uldp.collector.simulation.simulate import SIMULATE_JSON_KEYS

FIELDS = set(SIMULATE_JSON_KEYS)


@pytest.mark.parametrize("argv", [
    ["mean", "--users", "2000", "--reps", "2"],
    ["mean-linf", "--dim", "3", "--users", "3000", "--epsilon", "2", "--method", "ssl"],
    ["mean-l2", "--dim", "4", "--users", "3000", "--epsilon", "4", "--samples", "10"],
    ["mean-l1", "--dim", "4", "--users", "3000", "--method", "baseline-b"],
    ["distribution", "--dim", "5", "--users", "3000", "--dist", "zipf:1.5"],
    ["mean", "--users", "500", "--samples", "10", "--method", "baseline-a"],
    ["mean", "--users", "3000", "--dist", "student-t:4", "--moment", "3"],
])
def test_simulate_json_has_the_documented_fields(argv, capsys):
    assert main(["simulate", *argv, "--json", "--seed", "3", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == FIELDS
    assert len(out["estimate"]) == len(out["truth"]) == out["dim"]
    assert 0.0 <= out["coverage"] <= 1.0 and out["mse"] >= 0
    assert out["rmse"] == pytest.approx(out["mse"] ** 0.5)


def test_simulate_is_reproducible_with_a_seed(capsys):
    args = ["simulate", "mean", "--users", "1000", "--json", "--seed", "9", "--no-progress"]
    main(args)
    a = json.loads(capsys.readouterr().out)
    main(args)
    b = json.loads(capsys.readouterr().out)
    assert a["estimate"] == b["estimate"]


def test_human_output_shows_estimate_truth_and_interval(capsys):
    main(["simulate", "mean", "--users", "1000", "--no-progress"])
    out = capsys.readouterr().out
    assert "estimate" in out and "truth" in out and "95% CI" in out and "predicted MSE" in out


@pytest.mark.parametrize("argv,needle", [
    (["mean", "--epsilon", "0"], "--epsilon"),
    (["mean", "--users", "-5"], "--users"),
    (["mean", "--dist", "nope"], "unknown --dist"),
    (["distribution", "--dist", "gaussian"], "not available"),
    (["mean", "--dim", "3"], "--dim must be 1"),
    (["mean-linf", "--dim", "8", "--epsilon", "0.5", "--users", "10", "--method", "two-stage"],
     "too few"),
])
def test_bad_arguments_give_a_clear_error(argv, needle):
    proc = subprocess.run([sys.executable, "-m", "uldp.collector.cli", "simulate", *argv],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert needle in proc.stderr


def test_the_method_flag_offers_exactly_the_planner_methods():
    """``--method`` (cliutil.METHODS, kept free of the planner for a fast start) names every
    method the planner knows and no other."""
    from uldp.collector.cli.util import METHODS
    from uldp.collector.planner import METHOD_PLANS, RESOLVERS

    assert sorted(METHODS) == sorted([*RESOLVERS, *METHOD_PLANS])


def test_the_console_offers_the_mean_methods_the_planner_runs():
    """The analyst console's method list (console.js ``METHODS``; "" is ``auto``) names only
    planner methods and every two-stage mean method, ``two-stage-adaptive`` included."""
    import re
    from pathlib import Path

    from uldp.collector.cli.util import METHODS

    js = (Path(__file__).resolve().parents[1] / "collector" / "http" / "console" / "static"
          / "console.js").read_text()
    listed = re.search(r"const METHODS = \[(.*?)\];", js)
    assert listed is not None
    names = [n for n in re.findall(r'"([^"]*)"', listed.group(1)) if n]
    assert set(names) <= set(METHODS)
    assert {"ssl", "two-stage", "two-stage-sized", "two-stage-adaptive"} <= set(names)
