"""The shuffler's view of a query is O(cells) (issue 25, item 6; ``docs/privacy.md`` §7):
what it polls every second (``GetShuffleQuery``) and the collector's checks of a forwarded
batch read the plan's cell sizes, never a per-user array, so a query of 10⁷ users answers
as one of 10³ does. Measured at scale in ``bench/shuffle_scale.py``; here the property
itself: with ``Program.placements`` (the per-slot array) made to fail, a shuffled query of
10⁷ users still answers the poll with every cell's size and still checks a batch."""

from __future__ import annotations

import json
import secrets

import pytest

from uldp.collector.security.tokens import AdminAuth, TokenKey, new_admin_token
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.errors import ServiceError
from uldp.collector.service.shuffled import ForwardedBatch
from uldp.collector.storage.db import open_database

USERS = 10**7


@pytest.fixture
def core(tmp_path):
    c = CollectorCore(open_database(f"sqlite:///{tmp_path / 'c.db'}"), TokenKey.generate(),
                      AdminAuth(new_admin_token()), CoreConfig(commit_linger_ms=0.0))
    yield c
    c.stop()


@pytest.mark.parametrize("kind,dim,method", [("mean", 1, "two-stage"),
                                             ("distribution", 4, "")])
def test_the_poll_and_the_batch_checks_need_no_per_user_array(core, monkeypatch, kind, dim,
                                                               method):
    qid = f"big-{kind}"
    core.create_query(kind=kind, epsilon=1.0, dataset=qid, bound=1.0, samples=10,
                      users=USERS, dim=dim, method=method, query_id=qid,
                      params_json=json.dumps({"shuffle": {"min_batch": 1000, "delta": 1e-8}}),
                      phase_timeout_s=3600.0)
    rt = core.catalogue.runtime(qid)
    assert rt is not None

    def per_user_array(*_: object) -> None:
        raise AssertionError("the shuffler's view read a per-user array")

    monkeypatch.setattr(type(rt.program), "placements", per_user_array)
    q = core.shuffled.query(qid)
    assert q["shuffled"] and q["users"] == USERS and q["min_batch"] == 1000
    per_phase: dict[int, int] = {}
    for p, _, _, n, _ in q["cells"]:
        per_phase[p] = per_phase.get(p, 0) + n
    assert sum(per_phase.values()) == USERS  # every user in exactly one cell
    assert {p: quota for p, _, _, quota, _ in q["phases"]} == per_phase
    p, g, s, _, _ = q["cells"][0]
    with pytest.raises(ServiceError) as e:  # the batch's checks run, on the cells alone
        core.shuffled.forward(ForwardedBatch(secrets.token_hex(16), qid, p, g, s, "0" * 64,
                                             [bytes(57)] * 10, 10, "v"))
    assert e.value.code == "FAILED_PRECONDITION" and "below the query's minimum" in \
        e.value.message
