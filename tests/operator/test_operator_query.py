"""Issue 17 item 20: ``uldp query create`` flags that contradicted each other.

* ``--moment-p 2 --moment-m 1`` always failed (``--bound`` defaulted to 1 and a
  heavy-tailed query has no support bound): the heavy-tailed query is created;
* ``--kind distribution`` without ``--dim`` created a one-category query: refused, naming
  ``dim``, nothing created (issue 29: with the message the Python API and the console get,
  ``tests/service/test_query_rules.py``).
"""

from __future__ import annotations

import json

from opcli import REPO, one_line_error, uldp

BASE = ["--epsilon", "1", "--dataset", "d", "--users", "40", "--samples", "10"]


def test_heavy_tailed_query_is_created(collector):
    r = uldp("query", "create", *collector.conn(), "--kind", "mean", *BASE, "--moment-p",
             "2", "--moment-m", "1", "--id", "heavy", "--json")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["spec"]
    assert spec["moment_p"] == 2 and spec["moment_m"] == 1 and spec["bound"] is None


def test_contradicting_shape_flags_are_one_line_and_create_nothing(collector):
    for argv, needles in (
            (["--kind", "distribution", "--id", "nodim"], ("dim", "number of its categories")),
            (["--kind", "mean", "--moment-p", "2", "--id", "half"], ("moment_m",)),
            (["--kind", "mean", "--moment-p", "2", "--moment-m", "1", "--bound", "3",
              "--id", "both"], ("bound", "moment_p"))):
        one_line_error(uldp("query", "create", *collector.conn(), *BASE, *argv), *needles)
    r = uldp("query", "list", *collector.conn(), "--json")
    ids = {q["query_id"] for q in json.loads(r.stdout)}
    assert not ids & {"nodim", "half", "both"}
    r = uldp("query", "create", *collector.conn(), *BASE, "--kind", "distribution", "--dim",
             "4", "--id", "dist4", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"]["dim"] == 4


def test_sgd_phases_are_t0_steps_of_one_or_two_phases(collector):
    """The README's sgd sentence: ``t0`` steps, one phase each (two for two-stage)."""
    phases = {}
    for method in ("ssl", "two-stage"):
        r = uldp("query", "create", *collector.conn(), "--kind", "sgd", "--epsilon", "4",
                 "--dataset", "d", "--users", "3000", "--samples", "10", "--dim", "2",
                 "--method", method, "--extra", '{"model": "logistic", "sgd": {"t0": 3}}',
                 "--id", f"sgd-{method}", "--json")
        assert r.returncode == 0, r.stderr
        phases[method] = len(json.loads(r.stdout)["phases"])
    assert phases == {"ssl": 3, "two-stage": 6}
    readme = (REPO / "README.md").read_text()
    assert "one phase per round, two for a two-stage Kashin step" in readme
