"""The ledger's check reads one snapshot (issue 18's two instances over one state).

Two ``Device`` instances over one state directory each open the ledger file. If
``Ledger.check`` read the query's entry and the spent sum in two separate statements,
another instance's reservation of *that very query* committed between them looked like
a budget refusal; the device then declined the query (DeclineTask), and the collector
refused the other instance's report as already declined — seen as a flaky
``tests/service/test_two_devices_one_store.py`` under load. Here the interleaving is
forced: the other instance reserves exactly between the two reads.
"""

from __future__ import annotations

import threading

import pytest

import uldp.client.ledger as ledger_mod
from uldp.client.ledger import Ledger

UNITS = 2 << 24  # ε = 2 in units of 2^-24: the whole budget


@pytest.mark.parametrize("durable", [False, True])
def test_a_reservation_between_the_reads_is_not_a_budget_refusal(tmp_path, monkeypatch,
                                                                durable):
    path = tmp_path / "ledger.sqlite"
    mine, other = Ledger(path, 2.0, durable=durable), Ledger(path, 2.0, durable=durable)
    real_spent = ledger_mod._spent
    racer: list[threading.Thread] = []

    def spent_after_the_other_reserves(c, owner):  # runs between check's two reads
        if not racer:
            t = threading.Thread(target=other.reserve, args=("q", "d", 1, UNITS))
            racer.append(t)
            t.start()
            t.join(1.0)  # with one snapshot the other commit waits (or is not seen)
        return real_spent(c, owner)

    monkeypatch.setattr(ledger_mod, "_spent", spent_after_the_other_reserves)
    assert mine.check("q", "d", UNITS) is None  # nothing stored in this snapshot: fits
    monkeypatch.setattr(ledger_mod, "_spent", real_spent)
    racer[0].join(30)
    assert not racer[0].is_alive()
    # the other instance holds the query now: the same task is its entry, never a refusal
    e = mine.check("q", "d", UNITS)
    assert e is not None and e.query_id == "q"
    assert mine.spent() == pytest.approx(2.0)
