"""ForwardBatch as a stream of pieces (shuffler.proto, docs/privacy.md §7): the collector
checks a batch on its first piece, opens each piece as it arrives and stores the whole
batch in one transaction once the stream has ended — in process, over the production
``ShuffleIntake`` (SQLite), the shuffler's ``ShufflerStore`` and ``Forwarder``; only the
network hop is a direct call.

* a stream that breaks midway, or ends before its announced size, stores nothing (and the
  same batch, re-sent whole, is then stored — not answered as a duplicate);
* a batch announced over the cap, a piece that takes a batch past its size and a later
  piece that names the batch again are refused before any of their reports is opened;
* the order of the stored batch is the shuffler's drawn order, whatever order the opening
  jobs finish in, and says nothing about the order the reports arrived at the shuffler.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from tests.service.test_hostile_reports import store_query
from uldp.client.sealing import parse_seal, plaintext, seal, seal_info
from uldp.client.taskspec import TaskSpec
from uldp.client.wire import MAX_FORWARD_REPORTS, shuffler_pb2
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.security.tokens import AdminAuth, TokenKey
from uldp.collector.service import intake
from uldp.collector.service import shuffled as sh
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.errors import ServiceError
from uldp.collector.service.shuffled import ForwardedBatch
from uldp.collector.shuffler import service as sv
from uldp.collector.shuffler.store import Admission, ShufflerStore, Submission
from uldp.collector.storage import open_database

USERS = 200


@pytest.fixture
def rig(tmp_path) -> Iterator[tuple[CollectorCore, Any, bytes]]:
    """A collector core with one shuffled mean query (one phase, one cell of USERS):
    (core, the task's info, the HPKE info of its reports)."""
    db = open_database(f"sqlite:///{tmp_path / 'c.db'}")
    core = CollectorCore(db, TokenKey.generate(), AdminAuth("x" * 32),
                         CoreConfig(commit_linger_ms=0.0))
    try:
        spec = compile_query(QuerySpec(kind="mean", epsilon=1.0, bound=1.0, samples=5,
                                       users=USERS, method="ssl", randomizer="hm",
                                       query_id="st")).spec
        store_query(db, spec, shuffle=dict(min_batch=10, delta=1e-9,
                                           key_id=core.seal_keys.current().key_id))
        rt = core.runtime("st")
        assert rt is not None
        info = core.tasks.task_info(rt, {"grp": 0, "stage": 0, "phase": 1, "slot": 0})
        yield core, info, seal_info("st", 1, 0, 0, info.digest)
    finally:
        core.stop()
        db.dispose()


def _sealed(info: Any, hinfo: bytes, n: int, first: int = 0) -> list[bytes]:
    """``n`` valid sealed reports whose first value is their index (``first`` + k)."""
    task = TaskSpec.from_json(info.task_json)
    assert task.seal is not None
    key = parse_seal(task.seal)
    out = []
    for k in range(n):
        v = [0] * info.length
        v[0] = first + k
        out.append(seal(key, hinfo, plaintext(v, True)))
    return out


def _head(info: Any, sealed: list[bytes], size: int, bid: str = "ab" * 16) -> ForwardedBatch:
    return ForwardedBatch(bid, "st", 1, 0, 0, info.digest, sealed, size=size)


def _stored(core: CollectorCore) -> int:
    return int(core.db.table_counts()["uldp_reports"])


def test_a_batch_whose_stream_breaks_midway_stores_nothing(rig):
    core, info, hinfo = rig
    reps = _sealed(info, hinfo, 40)

    def breaking() -> Iterator[list[bytes]]:
        yield reps[10:20]
        yield reps[20:30]
        raise ConnectionResetError("the shuffler's stream broke")  # what gRPC raises there

    with pytest.raises(ConnectionResetError):
        core.shuffled.forward(_head(info, reps[:10], 40), breaking())
    with pytest.raises(ServiceError) as e:  # a stream that ends before its size
        core.shuffled.forward(_head(info, reps[:10], 40), iter([reps[10:30]]))
    assert e.value.code == "INVALID_ARGUMENT" and "ended after 30 of the batch's 40" in \
        e.value.message
    assert _stored(core) == 0 and core.db.get_phases("st")[0]["received"] == 0
    out = core.shuffled.forward(_head(info, reps[:10], 40),  # the same batch, whole
                                iter([reps[10:25], reps[25:40]]))
    assert (out.duplicate, out.stored, out.refused) == (False, 40, 0)
    assert _stored(core) == 40


def test_pieces_over_the_cap_are_refused_before_work(rig, monkeypatch):
    core, info, hinfo = rig
    opened: list[int] = []

    def counting(*args: Any) -> Any:
        opened.append(len(args[-1]))
        return real(*args)
    real = sh.open_reports
    monkeypatch.setattr(sh, "open_reports", counting)
    reps = _sealed(info, hinfo, 30)
    for head, why in ((_head(info, reps[:10], MAX_FORWARD_REPORTS + 1), "more than the"),
                      (_head(info, reps[:10], 5), "more than the batch's size 5")):
        with pytest.raises(ServiceError) as e:
            core.shuffled.forward(head, iter([reps[10:]]))
        assert e.value.code == "INVALID_ARGUMENT" and why in e.value.message
    assert opened == []  # refused on the first piece: nothing opened
    huge = [b"\0" * 10] * 1000  # a piece past the announced size: never opened
    with pytest.raises(ServiceError) as e:
        core.shuffled.forward(_head(info, reps[:10], 20), iter([reps[10:20], huge]))
    assert e.value.code == "INVALID_ARGUMENT" and "past its size 20" in e.value.message
    assert opened == [10, 10]  # the two pieces within the size, not the third
    assert _stored(core) == 0
    # on the wire: a later piece that names the batch again is refused
    later = [shuffler_pb2.ForwardBatchRequest(sealed=reps[:2]),
             shuffler_pb2.ForwardBatchRequest(sealed=reps[2:4], batch_id="cd" * 16)]
    got = intake._later(iter(later))
    assert next(got) == reps[:2]
    with pytest.raises(ServiceError, match="only the first piece"):
        next(got)


def test_opened_pieces_keep_the_batch_order_whatever_finishes_first(monkeypatch):
    """Jobs of the opening pool that finish out of order: the opened reports still come
    back in the batch's order."""
    def slow(key: bytes, info: bytes, length: int, limit: int, allow: bool,
             part: list[bytes]) -> list[bytes | None]:
        time.sleep(random.random() * 0.02)
        return list(part)
    monkeypatch.setattr(sh, "open_reports", slow)
    with ThreadPoolExecutor(4) as pool:
        op = sh._Opening(pool, b"", b"", 1, 1, True)  # type: ignore[arg-type]
        items = [bytes([k // 256, k % 256]) for k in range(600)]
        for i in range(0, 600, 50):
            op.add(items[i:i + 50] + items[i:i + 3])  # with copies: opened once
        assert op.result() == items and op.firsts == items


class _Link:
    """The shuffler's link to the in-process collector, counting the pieces it sends."""

    def __init__(self, core: CollectorCore) -> None:
        self.core, self.stub, self.pieces = core, self, 0
        self.lock = threading.Lock()

    def query(self, query_id: str, fresh: bool = False) -> sv.QueryInfo:
        q = self.core.shuffled.query(query_id)
        return sv.QueryInfo(q["shuffled"], q["min_batch"],
                            {p: sv.PhaseInfo(s, d, quota, dec)
                             for p, s, d, quota, dec in q["phases"]},
                            {(p, g, s): n for p, g, s, n, _ in q["cells"]}, q["users"])

    def ForwardBatch(self, pieces: Any, timeout: float = 0) -> Any:
        it = iter(pieces)
        r = next(it)

        def rest() -> Iterator[list[bytes]]:
            for x in it:
                self.pieces += 1
                yield list(x.sealed)
        out = self.core.shuffled.forward(ForwardedBatch(
            r.batch_id, r.query_id, r.phase, r.group, r.stage, r.task_digest,
            list(r.sealed), r.attested, r.verifier, r.size), rest())
        return shuffler_pb2.ForwardBatchResponse(duplicate=out.duplicate, stored=out.stored,
                                                 refused=out.refused)


def test_the_stored_order_says_nothing_about_arrival(rig, tmp_path, monkeypatch):
    """USERS reports arrive at the shuffler in a known order (the first value of each is
    its arrival index); the batch goes out in pieces of 16 and the collector's rows, in
    the order it stored them, are the drawn order: every report once, and no trace of
    the arrival order (rank correlation within 5 standard deviations of a uniform
    permutation's, |ρ| < 5/√(n − 1)), nor in the ids and slots it gave them."""
    core, info, hinfo = rig
    monkeypatch.setattr(sv, "FORWARD_PIECE", 16)
    store = ShufflerStore(tmp_path / "s.db")
    link = _Link(core)
    fwd = sv.Forwarder(store, link, sv.ShufflerConfig(min_batch=10))  # type: ignore[arg-type]
    try:
        reps = _sealed(info, hinfo, USERS)
        for k in range(0, USERS, 50):  # four calls, in arrival order
            assert {c for c, _, _ in store.submit([Admission(Submission(
                "st", 1, 0, 0, info.digest, reps[i], i), USERS)
                for i in range(k, k + 50)])} == {"OK"}
        fwd.tick(wait=True)
        assert link.pieces == -(-USERS // 16) - 1  # streamed, not one message
    finally:
        fwd.stop()
        store.close()
    with core.db.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT device_id, slot, payload FROM uldp_reports WHERE query_id = 'st' "
            "ORDER BY rowid").fetchall()
    arrival = [int(np.frombuffer(bytes(p), "<i8")[0]) for _, _, p in rows]
    assert sorted(arrival) == list(range(USERS))
    bound = 5 / np.sqrt(USERS - 1)

    def rho(a: list[Any]) -> float:
        ranks = np.argsort(np.argsort(np.asarray(a), kind="stable"), kind="stable")
        return float(np.corrcoef(ranks, np.arange(len(a)))[0, 1])
    assert abs(rho(arrival)) < bound
    by_id = [a for _, a in sorted(zip([r[0] for r in rows], arrival, strict=True))]
    by_slot = [a for _, _, a in sorted(zip([r[1] for r in rows], [r[0] for r in rows],
                                           arrival, strict=True))]
    assert abs(rho(by_id)) < bound and abs(rho(by_slot)) < bound


def test_a_complete_cell_streams_while_its_draw_is_recorded(rig, tmp_path, monkeypatch):
    """A complete cell's batch goes out while its draw is being recorded, its last piece
    only after the record: a record that fails breaks the stream (the collector stores
    nothing) and leaves the reports undrawn; the next round draws and stores them all."""
    core, info, hinfo = rig
    monkeypatch.setattr(sv, "FORWARD_PIECE", 16)
    store = ShufflerStore(tmp_path / "s.db")
    link = _Link(core)
    fwd = sv.Forwarder(store, link, sv.ShufflerConfig(min_batch=10))  # type: ignore[arg-type]
    reps = _sealed(info, hinfo, USERS)
    real, calls = store.commit, []

    def failing(plan: Any) -> None:
        calls.append(plan.batch.batch_id)
        while link.pieces < 3:  # the collector already has pieces of it
            time.sleep(0.01)
        raise OSError("disk full")
    try:
        store.submit([Admission(Submission("st", 1, 0, 0, info.digest, reps[i], i), USERS)
                      for i in range(USERS)])
        monkeypatch.setattr(store, "commit", failing)
        with pytest.raises(OSError):
            fwd.tick(wait=True)
        for _ in range(500):  # until the broken send has ended
            if not fwd._sending:
                break
            time.sleep(0.01)
        assert _stored(core) == 0 and store.counts()["pending"] == USERS
        assert store.counts().get("batches_forwarding", 0) == 0
        monkeypatch.setattr(store, "commit", real)
        fwd.tick(wait=True)
    finally:
        fwd.stop()
        store.close()
    assert _stored(core) == USERS and len(calls) == 1
    assert core.db.batch_counts("st")[0].stored == USERS
