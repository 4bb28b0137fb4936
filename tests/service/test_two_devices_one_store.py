"""Two ``Device`` instances over one device state (two processes of one app, an app that
opens its device twice) must never spend more than the budget nor answer one query twice
(issue 17 item 2, issue 18): every check-and-charge and the enrolment go through the
store atomically. Real collector on loopback; the devices race from two threads, many
rounds, over a state directory and over a shared StateFile slot."""

from __future__ import annotations

import threading
import time
from contextlib import closing

import numpy as np
import pytest

from uldp.client.device import Device, StateFile
from uldp.client.randomness import RandomSource
from uldp.collector.service.client import QueryRequest

ROUNDS = 6


def _race(make, dataset: str, n: int = 2) -> list[object]:
    """Run ``make(i).poll()`` for i < n at the same moment; the results."""
    devices = [make(i) for i in range(n)]
    for d in devices:
        d.add_dataset(dataset, np.full(16, 0.25))
    gate = threading.Barrier(n)
    out: list[object] = [None] * n

    def go(i: int) -> None:
        gate.wait()
        try:
            out[i] = devices[i].poll()
        except Exception as exc:
            out[i] = exc
    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for d in devices:
        d.close()
    return out


@pytest.mark.parametrize("where", ["directory", "statefile"])
def test_two_devices_over_one_state_report_once(start_collector, tmp_path, where):
    c = start_collector()
    with closing(c.analyst()) as a:  # per round, two queries of ε = 2; the budget is 2
        for r in range(ROUNDS):
            for q in (f"a{r}", f"b{r}"):
                a.create(QueryRequest(kind="mean", method="ssl", epsilon=2.0,
                                      dataset=f"x{r}", users=50, samples=16, query_id=q,
                                      phase_timeout_s=3600, allow_simulated=True))
    time.sleep(0.3)  # the collector's list of running queries is cached for 0.25 s
    for r in range(ROUNDS):
        qa, qb = f"a{r}", f"b{r}"
        state = tmp_path / f"dev{r}"
        sf = StateFile(tmp_path / f"s{r}.db", durable=False) if where == "statefile" else None

        def make(i: int, state=state, sf=sf, r=r) -> Device:
            return Device(c.endpoint, sf.slot("me") if sf else state, budget=2.0,
                          rng=RandomSource.seeded(100 * r + i), simulation=True,
                          durable=False)
        got = _race(make, f"x{r}")
        assert not [g for g in got if isinstance(g, Exception)], got
        submitted = [q for g in got for q in g.submitted]
        refused = [q for g in got for q, _ in g.refused]
        rows = c.server.db.snapshot()["uldp_reports"]
        mine = [row for row in rows if row[0] in (qa, qb)]
        reports = [row for row in mine if row[6]]  # an empty payload is a decline
        # one report in all: the budget holds one ε=2 task; the device id is one; the
        # other query's task was refused for the budget and declined
        assert len(reports) == 1, (submitted, refused, mine)
        assert len(mine) == 2 and {row[0] for row in mine} == {qa, qb}
        assert len({row[1] for row in mine}) == 1
        led = (sf.ledger("me", 2.0) if sf else Device(c.endpoint, state).ledger)
        assert led.spent() == 2.0
        if sf is not None:
            sf.close()


def test_a_state_file_opens_once(tmp_path):
    """A second StateFile over a file in use fails at once, with a clear error (it used
    to wait 30 s for SQLite's lock and then raise 'database is locked')."""
    from uldp.client.ledger import LedgerError

    first = StateFile(tmp_path / "s.db", durable=False)
    t0 = time.monotonic()
    with pytest.raises(LedgerError, match="in use"):
        StateFile(tmp_path / "s.db", durable=False)
    assert time.monotonic() - t0 < 10
    first.ledger("a", 1.0).reserve("q", "d", 1, 1 << 23)
    first.close()
    again = StateFile(tmp_path / "s.db", durable=False)  # free again once closed
    assert again.ledger("a", 1.0).spent() == 0.5
    again.close()
