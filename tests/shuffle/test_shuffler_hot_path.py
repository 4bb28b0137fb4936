"""The shuffler's per-report work made cheaper (bench/shuffle_throughput.py) without changing
what it decides: the batch order is still a uniform ordered sample (now from one OS-keyed
ChaCha20 read per batch), an attestation's canonical payload reads as ``json.loads`` reads
it, a submission's digests are the documented hashes, and a batch call asks the collector
about a query once, not once per report — a failure to ask still refuses every report of
the query with UNAVAILABLE."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import struct
from collections import Counter
from typing import Any

import grpc
import pytest
from scipy import stats

from uldp.client.randomness import RandomSource
from uldp.client.wire import shuffler_pb2
from uldp.collector.security.attestation import HmacAttestation, _payload
from uldp.collector.security.tickets import Ticket, TicketKey
from uldp.collector.shuffler.service import PhaseInfo, QueryInfo, ShufflerServicer
from uldp.collector.shuffler.store import ShufflerStore, Submission, draw_order

DIGEST = "ef" * 32


@pytest.mark.parametrize("m, k", [(3, 3), (4, 2), (5, 1)])
def test_draw_order_is_a_uniform_ordered_sample(m, k):
    """Every one of the m!/(m-k)! ordered samples equally likely: a chi-square test of
    6000 draws from a seeded stream (fixed: the same draws every run)."""
    rng = RandomSource.seeded(f"draw-order:{m}:{k}")
    draws = Counter(tuple(draw_order(m, k, rng)) for _ in range(6000))
    cells = list(itertools.permutations(range(m), k))
    assert set(draws) == set(cells)  # nothing outside, nothing missing
    counts = [draws[c] for c in cells]
    assert stats.chisquare(counts).pvalue > 1e-3


def test_draw_order_edges():
    rng = RandomSource.seeded("draw-order-edges")
    assert draw_order(5, 0, rng) == []
    assert sorted(draw_order(1000, 1000, rng)) == list(range(1000))  # a permutation
    got = draw_order(1000, 10, rng)
    assert len(set(got)) == 10 and all(0 <= i < 1000 for i in got)
    for m, k in ((3, 4), (0, 1), (3, -1)):
        with pytest.raises(ValueError, match="cannot draw"):
            draw_order(m, k, rng)


@pytest.mark.parametrize("text", [
    b'{"exp":1700000600000,"iat":1700000000000,"sub":"user-1"}',  # as issue() writes
    b'{"exp":0,"iat":0,"sub":""}',
    b'{"exp":-5,"iat":7,"sub":"a b!#$%&()*+,-./:;<=>?@[]^_`{|}~"}',
    b'{"exp":-0,"iat":1,"sub":"x"}',  # -0: left to json (which reads 0)
    b'{"exp":01,"iat":1,"sub":"x"}',  # a leading zero: not JSON
    b'{"exp":1,"iat":1,"sub":"\\u00e9"}',  # an escape: left to json
    b'{"exp":1,"iat":1,"sub":"\xc3\xa9"}',  # raw UTF-8: left to json
    b'{"exp":1,"iat":1,"sub":"a\tb"}',  # a raw control character: not JSON
    b'{"exp": 1,"iat":1,"sub":"x"}',  # a space: left to json
    b'{"exp":1,"iat":1,"sub":"x","extra":2}',
    b'{"exp":1.0,"iat":1,"sub":"x"}',
    b'{"exp":123456789012345678901234,"iat":1,"sub":"x"}',
    b'{"exp":1,"iat":1,"sub":"x"}x',
    b"[1, 2]", b"", b"\xff",
])
def test_a_canonical_payload_reads_as_json_reads_it(text):
    try:
        want = json.loads(text)
    except ValueError:
        want = None
    got = _payload(text)
    assert got == want and type(got) is type(want)
    if isinstance(got, dict):
        assert [type(v) for v in got.values()] == [type(v) for v in want.values()]


def test_issued_attestations_still_verify_and_expire():
    now = [1_700_000_000.0]
    att = HmacAttestation(os.urandom(32), clock=lambda: now[0])
    a = att.issue("install-42", 60)
    assert att.verify(a) == "install-42"
    now[0] += 61
    with pytest.raises(Exception, match="expired"):
        att.verify(a)


def test_submission_digests_are_the_documented_hashes():
    sealed = os.urandom(57)
    s = Submission("qé", 3, 1, 2, DIGEST, sealed, 9)
    q = "qé".encode()
    want = hashlib.sha256(struct.pack(">I", len(q)) + q + struct.pack(">III", 3, 1, 2)
                          + DIGEST.encode() + sealed).digest()
    assert s.digest == want and s.sealed_hash == hashlib.sha256(sealed).digest()
    assert s == Submission("qé", 3, 1, 2, DIGEST, sealed, 9)  # digests not compared twice


class _CountingLink:
    """The collector's view of one query, counting the questions (or failing them)."""

    def __init__(self, placed: int, fail: bool = False) -> None:
        self.asked, self.fail = 0, fail
        self.info = QueryInfo(True, 2, {1: PhaseInfo("open", 0, placed)},
                              {(1, 0, 0): placed}, placed)

    def query(self, query_id: str, fresh: bool = False) -> QueryInfo:
        self.asked += 1
        if self.fail:
            raise _Unreachable()
        return self.info


class _Unreachable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


class _Ctx:
    def invocation_metadata(self) -> tuple[()]:
        return ()

    def abort(self, code: Any, details: str) -> None:
        raise AssertionError(f"aborted: {code} {details}")


def _batch(key: TicketKey, n: int) -> shuffler_pb2.SubmitSealedBatchRequest:
    return shuffler_pb2.SubmitSealedBatchRequest(reports=[
        shuffler_pb2.SealedReport(query_id="q", phase=1, task_digest=DIGEST,
                                  sealed=os.urandom(57),
                                  ticket=key.issue(Ticket("q", 1, 0, 0, DIGEST, slot)))
        for slot in range(n)])


@pytest.mark.parametrize("fail", [False, True])
def test_a_batch_call_asks_about_its_query_once(tmp_path, fail):
    store = ShufflerStore(tmp_path / "s.db")
    key, link = TicketKey.generate(), _CountingLink(20, fail)
    try:
        sv = ShufflerServicer(store, key, link)  # type: ignore[arg-type]
        resp = sv.SubmitSealedBatch(_batch(key, 12), _Ctx())  # type: ignore[arg-type]
        assert link.asked == 1
        codes = {r.code for r in resp.results}
        if fail:
            assert codes == {grpc.StatusCode.UNAVAILABLE.value[0]}
            assert all("retry later" in r.message for r in resp.results)
            assert store.counts()["admitted"] == 0
        else:
            assert codes == {0} and store.counts()["admitted"] == 12
            again = sv.SubmitSealedBatch(_batch(key, 12), _Ctx())  # type: ignore[arg-type]
            # new ciphertexts for slots that reported: refused one by one, as before
            assert {r.code for r in again.results} == {
                grpc.StatusCode.ALREADY_EXISTS.value[0]}
    finally:
        store.close()
