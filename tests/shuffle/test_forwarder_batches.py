"""The forwarder's batching rule (``uldp.collector.shuffler.service``, docs/privacy.md §7
"Batch sizes"), in process over a real shuffler store and a stand-in for the collector:
a cell goes out in about ``--batch-parts`` batches while its reports arrive, every batch
at least the minimum, the last one never left below it; and an admission wakes the
forwarder at once."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from uldp.collector.security.tickets import TicketKey
from uldp.collector.shuffler.service import (
    Forwarder,
    PhaseInfo,
    QueryInfo,
    ShufflerConfig,
    ShufflerServicer,
)
from uldp.collector.shuffler.store import Admission, ShufflerStore, Submission

DIGEST = "cd" * 32
T = 10  # the query's minimum batch


class _Stub:
    """The collector's ForwardBatch: records each batch's size."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.sent = threading.Event()

    def ForwardBatch(self, pieces: Any, timeout: float) -> Any:
        n = sum(len(r.sealed) for r in pieces)  # the stream of one batch's pieces
        self.sizes.append(n)
        self.sent.set()

        class _Resp:
            stored, refused, duplicate = n, 0, False
        return _Resp()


class _Link:
    def __init__(self, placed: int) -> None:
        self.stub = _Stub()
        self.info = QueryInfo(True, T, {1: PhaseInfo("open", 0, placed)}, {(1, 0, 0): placed},
                              placed)

    def query(self, query_id: str, fresh: bool = False) -> QueryInfo:
        return self.info


def _admit(store: ShufflerStore, slots: range, placed: int) -> None:
    store.submit([Admission(Submission("q", 1, 0, 0, DIGEST, os.urandom(57), s), placed)
                  for s in slots])


@pytest.mark.parametrize("parts, arrivals, want", [
    # 100 devices in 4 parts: a batch of 25 once 35 wait (25 + T), the tail at completion
    (4, [30, 30, 30, 10], [25, 25, 25, 25]),
    # one part: nothing leaves before the cell is complete, then one batch of all
    (1, [30, 30, 30, 10], [100]),
    # arrivals of one at a time: the same sizes, never a batch below T
    (4, [1] * 100, [25, 25, 25, 25]),
])
def test_a_cell_goes_out_in_parts_while_it_arrives(tmp_path, parts, arrivals, want):
    store = ShufflerStore(tmp_path / "s.db")
    link = _Link(100)
    cfg = ShufflerConfig(min_batch=2, batch_parts=parts, linger_s=3600)
    fwd = Forwarder(store, link, cfg)  # type: ignore[arg-type]
    try:
        slot, before_complete = 0, []
        for n in arrivals:
            _admit(store, range(slot, slot + n), 100)
            slot += n
            fwd.tick(wait=True)
            if slot < 100:
                before_complete.append(sum(link.stub.sizes))
        fwd.tick(wait=True)
        assert link.stub.sizes == want
        assert min(link.stub.sizes) >= T and sum(link.stub.sizes) == 100
        assert (max(before_complete) > 0) == (parts > 1)  # forwarded while arriving
        assert store.counts()["pending"] == 0
    finally:
        fwd.stop()
        store.close()


def test_an_admission_draws_and_sends_at_once(tmp_path):
    """With a tick of an hour, a cell completed by a call is forwarded at once."""
    store = ShufflerStore(tmp_path / "s.db")
    link = _Link(T)
    fwd = Forwarder(store, link, ShufflerConfig(min_batch=2, tick_s=3600.0))  # type: ignore[arg-type]
    servicer = ShufflerServicer(store, TicketKey.generate(), link,  # type: ignore[arg-type]
                                on_admit=fwd.admitted)
    fwd.start()
    try:
        items = [Admission(Submission("q", 1, 0, 0, DIGEST, os.urandom(57), s), T)
                 for s in range(T)]
        servicer._store(items)
        assert link.stub.sent.wait(20), "the admission did not draw and send the complete cell"
        assert link.stub.sizes == [T]
    finally:
        fwd.stop()
        store.close()
