"""The privacy odometer (issue 25, item 5; docs/privacy.md §7.2).

* 100 shuffled queries of n = 10⁵ reports at ε0 = 1 compose to ≤ 0.24 at δ = 1e-8 (the
  issue's figure; their sum is 1.69, 2.06 with the older FMT21 bound);
* each query's PLD is pessimistic: its δ(ε) is never below the variation-ratio profile;
* the collector (in process, real SQLite) states the composed ε of the dataset in every
  shuffled result, refuses at CreateQuery a shuffled query that would take the dataset
  past its central budget — with FAILED_PRECONDITION, one message, nothing stored — and
  never refuses a retry, a query in the clear, or anything when the budget is off.
"""

from __future__ import annotations

import json

import pytest

from uldp.collector.accounting.odometer import (
    Cell,
    cells_of_privacy,
    compose,
    planned_cells,
    query_pld,
    self_composed,
)
from uldp.collector.accounting.parameters import mechanism_parameters
from uldp.collector.accounting.variation_ratio import central_epsilon, delta_bound
from uldp.collector.security.tokens import AdminAuth, TokenKey
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.errors import ServiceError
from uldp.collector.service.odometer import CentralBudget
from uldp.collector.service.shuffled import privacy_section
from uldp.collector.storage import open_database
from uldp.collector.storage.shuffle import StoredBatch


def test_hundred_queries_compose_far_below_their_sum():
    cell = (Cell(10**5, mechanism_parameters("any", 1.0)),)
    one = central_epsilon(10**5, cell[0].params, 1e-8)
    composed = self_composed(cell, 100, 1e-8)
    assert one <= 0.0170
    assert 100 * one * 0.1 < composed <= 0.24  # the issue: ≤ 0.24 (naive sum 1.69)
    assert compose([cell], 1e-8) >= one * 0.999  # the pessimistic PLD is not below the bound


@pytest.mark.parametrize("mech,k,n", [("any", None, 2000), ("oue", 16, 800), ("pm", None, 500)])
def test_query_pld_is_pessimistic(mech, k, n):
    vr = mechanism_parameters(mech, 1.5, k)
    pld = query_pld((Cell(n, vr),))
    for eps in (0.0, 0.05, 0.1, 0.3, 0.8):
        assert pld.get_delta_for_epsilon(eps) >= delta_bound(n, vr, eps) * (1 - 1e-9)


def test_queries_add_up_and_worst_cases():
    a = (Cell(5000, mechanism_parameters("grr", 1.0, 32)),)
    b = planned_cells(1.0, 100)
    assert b == (Cell(100, mechanism_parameters("any", 1.0)),)
    ea, eab = compose([a], 1e-8), compose([a, b], 1e-8)
    assert 0 < ea < eab < ea + 1.0 + 1e-9
    assert compose([], 1e-8) == 0.0


def test_cells_of_privacy():
    sec = {"cells": [
        {"smallest_batch": 300, "epsilon0": 1.0, "mechanism": "grr", "detail": "k=4",
         "variation_ratio": {"p": 2.718281828459045, "beta": 0.3, "q": 2.718281828459045}},
        {"smallest_batch": 0, "epsilon0": 1.0},  # nobody reported: costs nothing
        {"smallest_batch": 50, "epsilon0": 2.0, "closed_form_epsilon": None}]}  # an old result
    cells = cells_of_privacy(sec)
    assert [c.n for c in cells] == [50, 300]
    assert cells[0].params == mechanism_parameters("any", 2.0)
    assert cells[1].params.beta == 0.3
    # issue 25: the guarantee counts only attested reports; none counted = its local ε0
    sec = {"cells": [{"smallest_batch": 300, "counted": 120, "epsilon0": 1.0},
                     {"smallest_batch": 500, "counted": 0, "epsilon0": 1.0}]}
    assert [c.n for c in cells_of_privacy(sec)] == [1, 120]


# ---- the collector -----------------------------------------------------------------------
def _core(tmp_path, budget: CentralBudget) -> CollectorCore:
    db = open_database(str(tmp_path / "odometer.db"))
    return CollectorCore(db, TokenKey.generate(), AdminAuth("a" * 32),
                         CoreConfig(central_budget=budget))


def _create(core: CollectorCore, qid: str, *, dataset: str = "steps", epsilon: float = 2.0,
            shuffle: dict | None = None) -> dict:
    params = {"shuffle": shuffle} if shuffle is not None else {}
    return core.catalogue.create(kind="distribution", epsilon=epsilon, dataset=dataset,
                                 bound=1.0, samples=10, users=2000, dim=8, method="oracle",
                                 params_json=json.dumps(params), phase_timeout_s=0,
                                 query_id=qid)


def test_the_collector_refuses_a_query_past_the_budget(tmp_path):
    core = _core(tmp_path, CentralBudget(epsilon=3.0, delta=1e-8))
    sh = {"min_batch": 100, "delta": 1e-8}
    _create(core, "q1", shuffle=sh)
    _create(core, "q2", shuffle=sh)
    before = core.db.list_queries()
    with pytest.raises(ServiceError) as err:
        _create(core, "q3", shuffle=sh)
    assert err.value.code == "FAILED_PRECONDITION"
    msg = str(err.value)
    assert "steps" in msg and "--central-budget" in msg and "above the budget 3" in msg
    assert core.db.list_queries() == before and core.db.get_query("q3") is None
    _create(core, "q2", shuffle=sh)  # a retry of a stored query is never refused
    _create(core, "plain", epsilon=8.0)  # in the clear: the device ledgers account it
    _create(core, "other", dataset="other", shuffle=sh)  # another dataset's budget
    state = core.odometer.state("steps")
    assert state["shuffled_queries"] == 2 and 2.0 < state["central_epsilon"] <= 3.0
    assert [q["counted"] for q in state["queries"]] == ["worst case", "worst case"]


def test_the_budget_can_be_off_and_results_state_the_odometer(tmp_path):
    core = _core(tmp_path, CentralBudget(epsilon=None))
    sh = {"min_batch": 200, "delta": 1e-8}
    for i in range(4):
        _create(core, f"q{i}", shuffle=sh)
    rt = core.catalogue.runtime("q0")
    cells = sorted({(int(g), int(s), int(p)) for g, s, p in rt.program.placements()})
    section = privacy_section(rt, [StoredBatch(p, g, s, 500, 0, 500, "hmac-attestation")
                                   for g, s, p in cells], {})
    assert section["amplified"] and section["central_epsilon"] < section["local_epsilon"]
    for c in section["cells"]:
        assert c["mechanism"] != "any" and set(c["variation_ratio"]) == {"p", "beta", "q"}
        assert c["epsilon"] == pytest.approx(central_epsilon(
            500, cells_of_privacy(section)[0].params, 1e-8))
    assert section["bound"].startswith("variation-ratio")
    done = core.odometer.state("steps", ("q0", cells_of_privacy(section)))
    worst = core.odometer.state("steps")
    assert done["central_epsilon"] < worst["central_epsilon"]
    assert done["queries"][0]["counted"] == "result" and done["budget"] is None


def test_the_metrics_show_each_datasets_odometer(tmp_path):
    from uldp.collector.observe.gauges import DatabaseGauges

    core = _core(tmp_path, CentralBudget(epsilon=6.0))
    _create(core, "q1", shuffle={"min_batch": 100})
    _create(core, "plain")
    fams = {f.name: f for f in DatabaseGauges(core.db, odometer=core.odometer.states)
            .collector(admin=False).collect()}
    central = {s.labels["dataset"]: s.value for s in fams["uldp_dataset_central_epsilon"].samples}
    budget = {s.labels["dataset"]: s.value for s in fams["uldp_dataset_central_budget"].samples}
    assert set(central) == {"steps"} and central["steps"] == pytest.approx(
        compose([planned_cells(2.0, 100)], 1e-8))
    assert budget == {"steps": 6.0}
