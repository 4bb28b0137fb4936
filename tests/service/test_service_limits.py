"""Limits before work (invariant 9) on the device service, over real gRPC with TLS and a
real SQLite file (issue 17, items 5–7):

* every batch call caps its items — SubmitReportBatch too — and refuses an oversized batch
  whole, before it looks at any item (2 M empty items: one short INVALID_ARGUMENT);
* a batch answer is bounded by its item count, never by what the items carry, so a batch
  that is answered at all was answered in full: no report is committed by a call that
  then fails for the size of its answer;
* every error message quotes a caller's string through one helper (at most 40 characters
  of it): a 10 000-character query id gets NOT_FOUND with a short message everywhere.
"""

from __future__ import annotations

import grpc
import pytest

from tests.service.conftest import ADMIN_TOKEN
from tests.service.wire import enroll_with_task, one_phase_query, report_for
from uldp.client.wire import (
    MAX_BATCH_ITEMS,
    analyst_pb2,
    analyst_pb2_grpc,
    bearer,
    device_pb2,
    device_pb2_grpc,
)
from uldp.collector.service.errors import MAX_MESSAGE_BYTES, ServiceError
from uldp.collector.service.servicers import RESULT_BOUND_BYTES, DeviceLogic, batch_cap

NOT_FOUND = grpc.StatusCode.NOT_FOUND
INVALID = grpc.StatusCode.INVALID_ARGUMENT
#: a query id of 0.9 MB of control characters: ``repr`` makes it 3.6 MB
HUGE_ID = "\x01" * 900_000
LONG_ID = "q" * 10_000


def _raw_batch(ch: grpc.Channel, n: int) -> bytes:
    """SubmitReportBatch with ``n`` empty reports, built as bytes (2 bytes per item)."""
    call = ch.unary_unary("/uldp.v1.DeviceService/SubmitReportBatch",
                          request_serializer=None, response_deserializer=None)
    return call(b"\x0a\x00" * n, timeout=120)


def _one_device(c):
    """A one-phase query on ``c``, an enrolled device with its task: (channel, stub,
    token, a good report carrying the token as a batch item does)."""
    one_phase_query(c)
    ch = c.channel()
    stub = device_pb2_grpc.DeviceServiceStub(ch)
    tok, task = enroll_with_task(stub)
    good = report_for(task, 1)
    good.device_token = tok
    return ch, stub, tok, good


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_submit_report_batch_caps_its_items(start_collector, mode):
    c = start_collector(server_mode=mode)
    ch, stub, _tok, good = _one_device(c)
    before = c.server.db.snapshot()
    n = MAX_BATCH_ITEMS + 1
    over = f"a batch holds at most {MAX_BATCH_ITEMS} items, got more than {MAX_BATCH_ITEMS}"
    req = device_pb2.SubmitReportBatchRequest(reports=[good] + [device_pb2.Report()] * (n - 1))
    with pytest.raises(grpc.RpcError) as ei:
        stub.SubmitReportBatch(req, timeout=60)
    assert (ei.value.code(), ei.value.details()) == (INVALID, over)
    # the request of the issue: 2 M empty items in 4 MB, no token (refused undecoded)
    with pytest.raises(grpc.RpcError) as ei:
        _raw_batch(ch, 2_000_000)
    assert (ei.value.code(), ei.value.details()) == (INVALID, over)
    assert c.server.db.snapshot() == before  # the good report of the first batch too
    # the servicers' own check (every front calls it), with the exact count
    with pytest.raises(ServiceError) as se:
        DeviceLogic(c.server.core).check_batch(req)
    assert (se.value.code, se.value.message) == (
        "INVALID_ARGUMENT", f"a batch holds at most {MAX_BATCH_ITEMS} items, got {n}")
    assert c.server.db.snapshot() == before
    # at the cap the batch is served, one result per item
    r = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(
        reports=[good] + [device_pb2.Report()] * (MAX_BATCH_ITEMS - 1)), timeout=120)
    assert len(r.results) == MAX_BATCH_ITEMS and r.results[0].code == 0
    assert r.ByteSize() <= MAX_BATCH_ITEMS * RESULT_BOUND_BYTES
    ch.close()


def test_answer_of_a_batch_with_huge_query_ids_is_bounded(start_collector):
    """[valid report, 2 items with 0.9 MB query ids]: before, the answer echoed the ids
    (7.2 MB, RESOURCE_EXHAUSTED) after the valid report was committed. Now the answer is
    small and complete: what it acknowledges is exactly what is stored."""
    c = start_collector()
    ch, stub, tok, good = _one_device(c)
    bad = device_pb2.Report(query_id=HUGE_ID, phase=1, values=good.values,
                            task_digest=good.task_digest, device_token=tok)
    r = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(reports=[good, bad, bad]),
                               timeout=60)
    assert [x.code for x in r.results] == [0, NOT_FOUND.value[0], NOT_FOUND.value[0]]
    assert r.results[1].message.startswith("unknown query '\\x01\\x01")
    assert r.results[1].message.endswith("(900000 characters)")
    assert all(len(x.message.encode()) <= MAX_MESSAGE_BYTES for x in r.results)
    assert r.ByteSize() < 1000
    assert c.server.db.table_counts()["uldp_reports"] == 1
    # the hostile items change nothing: the same batch again is an OK duplicate + 2 refusals
    again = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(reports=[good, bad]),
                                   timeout=60)
    assert [(x.code, x.duplicate) for x in again.results] == [(0, True),
                                                              (NOT_FOUND.value[0], False)]
    assert c.server.db.table_counts()["uldp_reports"] == 1
    ch.close()


def test_a_batch_whose_answer_could_exceed_the_message_limit_changes_nothing(
        start_collector):
    """The item cap follows the collector's message limit: every answered batch fits in
    it, so a batch is refused whole (nothing stored) or answered in full."""
    limit = 64 * 1024
    c = start_collector(server={"max_message_bytes": limit})
    ch, stub, tok, good = _one_device(c)
    cap = batch_cap(limit)
    assert cap == limit // RESULT_BOUND_BYTES < MAX_BATCH_ITEMS
    before = c.server.db.snapshot()
    bad = device_pb2.Report(query_id="\x01" * 100, device_token=tok)
    with pytest.raises(grpc.RpcError) as ei:
        stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(
            reports=[good] + [bad] * cap), timeout=60)
    assert ei.value.code() == INVALID
    assert ei.value.details() == f"a batch holds at most {cap} items, got more than {cap}"
    assert c.server.db.snapshot() == before
    r = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(
        reports=[good] + [bad] * (cap - 1)), timeout=60)
    assert r.results[0].code == 0 and r.ByteSize() <= limit
    assert c.server.db.table_counts()["uldp_reports"] == 1
    ch.close()


def _not_found_short(fn) -> None:
    with pytest.raises(grpc.RpcError) as ei:
        fn()
    assert ei.value.code() == NOT_FOUND, (ei.value.code(), ei.value.details()[:200])
    details = ei.value.details()
    assert len(details.encode()) <= MAX_MESSAGE_BYTES, len(details)
    assert "(10000 characters)" in details


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_long_query_id_gets_not_found_with_a_short_message(start_collector, mode):
    """A 10 000-character query id: before, NOT_FOUND's message echoed it whole and the
    status metadata went over 16 KiB (RESOURCE_EXHAUSTED instead of NOT_FOUND)."""
    c = start_collector(server_mode=mode)
    ch, stub, tok, rep = _one_device(c)
    rep.device_token = ""
    rep.query_id = LONG_ID
    before = c.server.db.snapshot()
    _not_found_short(lambda: stub.SubmitReport(device_pb2.SubmitReportRequest(report=rep),
                                               metadata=bearer(tok), timeout=30))
    _not_found_short(lambda: stub.GetTasks(device_pb2.GetTasksRequest(
        datasets=["x"], query_id=LONG_ID), metadata=bearer(tok), timeout=30))
    got = stub.GetTasksBatch(device_pb2.GetTasksBatchRequest(items=[device_pb2.GetTasksItem(
        device_token=tok, request=device_pb2.GetTasksRequest(datasets=["x"],
                                                              query_id=LONG_ID))]), timeout=30)
    assert got.results[0].code == NOT_FOUND.value[0]
    assert "(10000 characters)" in got.results[0].message
    an = analyst_pb2_grpc.AnalystServiceStub(ch)
    meta = bearer(ADMIN_TOKEN)
    _not_found_short(lambda: an.GetQuery(analyst_pb2.GetQueryRequest(query_id=LONG_ID),
                                         metadata=meta, timeout=30))
    _not_found_short(lambda: an.CancelQuery(analyst_pb2.CancelQueryRequest(query_id=LONG_ID),
                                            metadata=meta, timeout=30))
    _not_found_short(lambda: an.GetResult(analyst_pb2.GetResultRequest(query_id=LONG_ID),
                                          metadata=meta, timeout=30))
    _not_found_short(lambda: next(iter(an.WatchQuery(
        analyst_pb2.WatchQueryRequest(query_id=LONG_ID), metadata=meta, timeout=30))))
    assert c.server.db.snapshot() == before
    ch.close()


def test_count_items_agrees_with_the_decoder():
    """The byte count (``wirescan.count_items``) equals protobuf's item count up to the
    cap, for random messages with every wire type; malformed bytes give None."""
    import random

    from uldp.collector.service.wirescan import count_items

    rng = random.Random(17)
    for _ in range(300):
        n = rng.randrange(0, 40)
        reps = [device_pb2.Report(
            query_id="q" * rng.randrange(0, 300), phase=rng.randrange(0, 2**32),
            values=[rng.randrange(-2**62, 2**62) for _ in range(rng.randrange(0, 20))],
            simulated=rng.random() < 0.5) for _ in range(n)]
        data = device_pb2.SubmitReportBatchRequest(reports=reps).SerializeToString()
        cap = rng.randrange(0, 50)
        assert count_items(data, 1, cap) == min(n, cap + 1)
    # other top-level fields (an unknown varint, fixed64, fixed32) are skipped
    assert count_items(b"\x10\x96\x01" + b"\x19" + b"\0" * 8 + b"\x25" + b"\0" * 4
                       + b"\x0a\x00" * 3, 1, 10) == 3
    for bad in (b"\x0a\x05ab", b"\xff", b"\x0b", b"\x0a", b"\x19\0\0", b"\x0a\xff" * 10):
        assert count_items(bad, 1, 10) is None
