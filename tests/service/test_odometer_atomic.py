"""The privacy odometer's budget check and the query's insert are one step (issue 25;
docs/privacy.md §7.2), and its composition survives a restart.

* two collector replicas (two cores on one database, SQLite and PostgreSQL) create a
  shuffled query on one dataset at the same moment — both past the check before the
  create's transaction, held there until both are — against a budget that admits one:
  exactly one is stored, the other gets FAILED_PRECONDITION with the budget's message;
* a restarted odometer reads the persisted PLD of the ended queries instead of composing
  them again (no query's PLD is computed), and states the same ε.
"""

from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import update

from uldp.collector.accounting import odometer as acc
from uldp.collector.security.tokens import AdminAuth, TokenKey
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.errors import ServiceError
from uldp.collector.service.odometer import CentralBudget, PrivacyOdometer
from uldp.collector.storage import open_database
from uldp.collector.storage import schema as S  # noqa: N812

SHUFFLE = {"shuffle": {"min_batch": 100, "delta": 1e-8}}


def _create(core: CollectorCore, qid: str, epsilon: float = 2.0) -> dict:
    return core.catalogue.create(kind="distribution", epsilon=epsilon, dataset="steps",
                                 bound=1.0, samples=10, users=2000, dim=8, method="oracle",
                                 params_json=json.dumps(SHUFFLE), phase_timeout_s=0,
                                 query_id=qid)


def test_two_racing_creates_cannot_both_pass_the_budget(db_url, monkeypatch):
    one = acc.compose([acc.planned_cells(2.0, 100)], 1e-8)
    two = acc.compose([acc.planned_cells(2.0, 100)] * 2, 1e-8)
    budget = CentralBudget(epsilon=(one + two) / 2, delta=1e-8)  # admits one, not two
    cores = [CollectorCore(open_database(db_url), TokenKey.generate(), AdminAuth("a" * 32),
                           CoreConfig(central_budget=budget)) for _ in range(2)]
    both_checked = threading.Barrier(2, timeout=60)
    check = PrivacyOdometer.check_create

    def racing(self, **kw):  # the check before the transaction: both pass, then go on
        check(self, **kw)
        if kw.get("conn") is None:
            both_checked.wait()

    monkeypatch.setattr(PrivacyOdometer, "check_create", racing)
    outcomes: dict[str, object] = {}

    def run(core: CollectorCore, qid: str) -> None:
        try:
            outcomes[qid] = _create(core, qid)["query_id"]
        except ServiceError as exc:
            outcomes[qid] = exc

    threads = [threading.Thread(target=run, args=(c, q)) for c, q in zip(cores, "ab", strict=True)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        won = [q for q, o in outcomes.items() if o == q]
        lost = [o for o in outcomes.values() if isinstance(o, ServiceError)]
        assert len(won) == 1 and len(lost) == 1, outcomes
        assert lost[0].code == "FAILED_PRECONDITION"
        assert "above the budget" in str(lost[0]) and "--central-budget" in str(lost[0])
        assert "now" in str(lost[0]) and "over 1 shuffled queries" in str(lost[0])
        db = cores[0].db
        assert [r["query_id"] for r in db.list_queries()] == won
        assert db.shuffle_query("b" if won == ["a"] else "a") is None  # nothing stored
    finally:
        for c in cores:
            c.db.dispose()


def test_the_composed_odometer_survives_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    core = CollectorCore(open_database(url), TokenKey.generate(), AdminAuth("a" * 32),
                         CoreConfig(central_budget=CentralBudget(epsilon=None)))
    for i in range(3):
        _create(core, f"q{i}", epsilon=1.0 + i / 4)
    privacy = {"cells": [{"smallest_batch": 400, "counted": 400, "epsilon0": 1.0}]}
    with core.db.write() as conn:  # q0, q1 finished with a result; q2 still running
        for i, q in enumerate(("q1", "q0")):
            conn.execute(update(S.queries).where(S.queries.c.query_id == q).values(
                state="done", finished_at_ms=1000 + i,
                result_json=json.dumps({"privacy": privacy})))
    first = core.odometer.state("steps")
    for t in threading.enumerate():  # the background write of the composed PLD
        if t.name == "uldp-odometer-persist":
            t.join(30)
    core.db.dispose()
    stored = json.loads(open_database(url).get_meta("odometer/steps") or "{}")
    assert stored["queries"] == 2 and stored["pld"]
    acc.query_pld.cache_clear()
    again = PrivacyOdometer(open_database(url), CentralBudget(epsilon=None))
    with pytest.MonkeyPatch.context() as mp:  # the ended queries are not composed again
        seen: list = []
        real = acc.query_pld
        mp.setattr("uldp.collector.accounting.odometer.query_pld",
                   lambda cells: seen.append(cells) or real(cells))
        after = again.state("steps")
    assert seen == [acc.planned_cells(1.5, 100)]  # only the running query's worst case
    assert after["central_epsilon"] == pytest.approx(first["central_epsilon"], rel=1e-9)
    assert [q["counted"] for q in after["queries"]] == ["result", "result", "worst case"]
    again.db.dispose()
