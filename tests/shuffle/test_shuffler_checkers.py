"""Checks 1 to 5 of a batch call in the shuffler's pool of processes
(``uldp.collector.shuffler.checks``) decide exactly what the gRPC thread decides: the same
answer, code and message for every report of a call mixing every kind of refusal, in the
same order, and the same rows stored. A pool whose process dies is replaced while the
calls are checked in their thread; a verifier that cannot go to another process (a test
clock) is checked in the thread."""

from __future__ import annotations

import os
import time
from typing import Any

import grpc

from uldp.client.wire import shuffler_pb2
from uldp.collector.security.attestation import HmacAttestation
from uldp.collector.security.tickets import Ticket, TicketKey
from uldp.collector.shuffler.checks import POOL_MIN_REPORTS, Checkers
from uldp.collector.shuffler.service import PhaseInfo, QueryInfo, ShufflerServicer
from uldp.collector.shuffler.store import ShufflerStore

DIGEST = "ab" * 32
OTHER = "cd" * 32
PLACED = 200


class _Link:
    def __init__(self) -> None:
        self.info = QueryInfo(True, 2, {1: PhaseInfo("open", 0, PLACED)},
                              {(1, 0, 0): PLACED}, PLACED)

    def query(self, query_id: str, fresh: bool = False) -> QueryInfo | None:
        return self.info if query_id == "q" else None


class _Ctx:
    def invocation_metadata(self) -> tuple[()]:
        return ()

    def abort(self, code: Any, details: str) -> None:
        raise AssertionError(f"aborted: {code} {details}")


def _mixed(key: TicketKey, att: HmacAttestation) -> list[shuffler_pb2.SealedReport]:
    """A call with every refusal of checks 1 to 6 among valid reports."""
    forged = TicketKey.generate()
    other_app = HmacAttestation(os.urandom(32))

    def rep(slot: int, **kw: Any) -> shuffler_pb2.SealedReport:
        base: dict[str, Any] = dict(
            query_id="q", phase=1, task_digest=DIGEST, sealed=bytes([slot % 256]) * 60,
            ticket=key.issue(Ticket("q", 1, 0, 0, DIGEST, slot)),
            attestation=att.issue(f"user-{slot}", 600))
        base.update(kw)
        return shuffler_pb2.SealedReport(**base)

    out = [rep(s) for s in range(70)]  # valid
    out += [
        rep(70, ticket=""),  # 1: missing ticket
        rep(71, ticket="t1.!!!"),  # 1: bad base64
        rep(72, ticket=forged.issue(Ticket("q", 1, 0, 0, DIGEST, 72))),  # 1: forged
        rep(73, attestation=""),  # 2: no attestation
        rep(74, attestation=other_app.issue("user-74", 600)),  # 2: another key
        rep(75, attestation=att.issue("user-75", 600)[:-3] + "AAA"),  # 2: bad MAC
        rep(76, task_digest="AB" * 32),  # 3: not lowercase hex
        rep(77, sealed=b"x" * 10),  # 3: too short
        rep(78, task_digest=OTHER),  # 4: the ticket's task is another
        rep(79, phase=2),  # 4: another phase than the ticket's
        rep(80, query_id="nope", ticket=key.issue(Ticket("nope", 1, 0, 0, DIGEST, 80))),
        rep(PLACED + 5),  # 6: a slot the query does not have
        rep(81, sealed=bytes([0]) * 60),  # replay of slot 0's ciphertext
        rep(3, sealed=b"\x07" * 61),  # slot 3 again with another report
        rep(4),  # slot 4 again, the same report: OK duplicate
    ]
    return out


def _answers(resp: shuffler_pb2.SubmitSealedBatchResponse) -> list[tuple[int, bool, str]]:
    return [(r.code, r.duplicate, r.message) for r in resp.results]


def _wait_up(c: Checkers) -> None:
    end = time.monotonic() + 120
    while c._ready_pool() is None:
        assert time.monotonic() < end, "the checking process did not start"
        time.sleep(0.05)


def test_the_pool_decides_what_the_thread_decides(tmp_path):
    key, att = TicketKey.generate(), HmacAttestation(os.urandom(32))
    calls = [_mixed(key, att)]
    assert len(calls[0]) >= POOL_MIN_REPORTS
    results, stored = [], []
    for k, processes in enumerate((0, 1)):
        store = ShufflerStore(tmp_path / f"s{k}.db")
        sv = ShufflerServicer(store, key, _Link(), att, "hmac-attestation",  # type: ignore[arg-type]
                              checkers=processes)
        try:
            if processes:
                assert sv.checkers.available
                _wait_up(sv.checkers)
            resp = sv.SubmitSealedBatch(
                shuffler_pb2.SubmitSealedBatchRequest(reports=calls[0]), _Ctx())  # type: ignore[arg-type]
            results.append(_answers(resp))
            assert sv.checkers.pooled == (len(calls[0]) if processes else 0)
            stored.append(store.counts()["admitted"])
            if processes:  # the process dies: the next call is answered all the same
                pids = list(sv.checkers._pool._processes)  # type: ignore[union-attr]
                for pid in pids:
                    os.kill(pid, 9)
                again = sv.SubmitSealedBatch(
                    shuffler_pb2.SubmitSealedBatchRequest(reports=calls[0]), _Ctx())  # type: ignore[arg-type]
                assert sv.checkers.pooled == len(calls[0])  # checked in the thread
                codes = [a[0] for a in _answers(again)]
                ok = grpc.StatusCode.OK.value[0]
                assert codes[:70] == [ok] * 70  # resends of stored reports: duplicates
                assert all(r.duplicate for r in again.results[:70])
                _wait_up(sv.checkers)  # a new pool comes up
                assert sv.checkers._pool is not None
        finally:
            sv.checkers.close()
            store.close()
    assert results[0] == results[1]
    assert stored[0] == stored[1] == 70  # only the valid ones (the replays refused)
    codes = [a[0] for a in results[0]]
    names = {c.value[0]: c.name for c in grpc.StatusCode}
    assert [names[c] for c in codes[70:]] == [
        "UNAUTHENTICATED", "UNAUTHENTICATED", "UNAUTHENTICATED", "UNAUTHENTICATED",
        "UNAUTHENTICATED", "UNAUTHENTICATED", "INVALID_ARGUMENT", "INVALID_ARGUMENT",
        "PERMISSION_DENIED", "PERMISSION_DENIED", "NOT_FOUND", "PERMISSION_DENIED",
        "ALREADY_EXISTS", "ALREADY_EXISTS", "OK"]


def test_a_verifier_that_cannot_travel_is_checked_in_the_thread(tmp_path):
    key = TicketKey.generate()
    att = HmacAttestation(os.urandom(32), clock=lambda: time.time())  # a local lambda
    c = Checkers(key, att, 2)
    assert not c.available and c._ready_pool() is None
    reports = [shuffler_pb2.SealedReport(
        query_id="q", phase=1, task_digest=DIGEST, sealed=b"s" * 60,
        ticket=key.issue(Ticket("q", 1, 0, 0, DIGEST, s)), attestation=att.issue(f"u{s}"))
        for s in range(POOL_MIN_REPORTS)]
    out = c.check(shuffler_pb2.SubmitSealedBatchRequest(reports=reports))
    assert [x.slot for x in out] == list(range(POOL_MIN_REPORTS))  # type: ignore[union-attr]
    assert c.pooled == 0
    c.close()
