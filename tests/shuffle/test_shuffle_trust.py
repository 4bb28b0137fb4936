"""Shuffle mode against its own threat model (issue 25; ``docs/privacy.md`` §7).

Real collector and shuffler processes on loopback (``conftest.py``: the shuffler runs its
own enrolment check, HMAC app attestations under a key the collector does not hold).
Devices are driven with the batch calls a gateway uses, their reports sealed with the
production code.

* a device's shuffler ticket is no collector credential (GetTasks, SubmitReport refuse it,
  as they refuse its attestation), and the shuffler takes no collector token;
* 499 enrolled identities without a slot, beside one honest device, cannot add a single
  report to its batch (no ticket; forged, copied or token-as-ticket ones are refused);
* 499 slot holders sending garbage beside one honest report: the batch goes through, the
  collector can only store the honest report — and the result states the local ε0, not
  an amplified one;
* a replayed ciphertext is refused under another ticket, a duplicate under its own;
* the collector minting identities (it holds the ticket key): without the shuffler's
  attestations its reports are refused; with one subject's attestation on all of them
  they count once; received never exceeds a cell's placement or the phase's quota; one
  ciphertext repeated in a forwarded batch, or forwarded again in another batch, is
  stored once;
* a device that declines releases its slot: the cell is forwarded at once, not at the
  phase deadline, nor when the phase's other cells have answered.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass

import grpc
import pytest

from uldp.client.sealing import parse_seal, plaintext, seal, seal_info
from uldp.client.taskspec import TaskSpec
from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import device_pb2, device_pb2_grpc, shuffler_pb2, shuffler_pb2_grpc
from uldp.collector.security.attestation import HmacAttestation
from uldp.collector.security.tickets import Ticket, TicketKey
from uldp.collector.service.client import QueryRequest
from uldp.collector.service.shuffled import counted, privacy_section
from uldp.collector.storage.shuffle import StoredBatch

from .conftest import Deployment

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

OK, INVALID, PERMISSION, UNAUTH = 0, 3, 7, 16


@dataclass
class Member:
    token: str
    task: device_pb2.Task | None


def _query(d: Deployment, qid: str, users: int, min_batch: int, timeout_s: float = 120,
           method: str = "ssl") -> None:
    an = d.analyst()
    an.create(QueryRequest(kind="mean", epsilon=1.0, dataset=qid, users=users, samples=2,
                           bound=1.0, method=method, phase_timeout_s=timeout_s, query_id=qid,
                           params={"shuffle": {"min_batch": min_batch}},
                           allow_simulated=True))
    an.close()
    time.sleep(0.3)  # the collector's list of running queries is cached for 0.25 s


def _members(d: Deployment, qid: str, n: int, tasks: bool = True) -> list[Member]:
    """``n`` enrolled identities; with ``tasks``, each asked for its task (a slot)."""
    with secure_channel(d.endpoint) as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        er = stub.EnrollBatch(device_pb2.EnrollBatchRequest(
            requests=[device_pb2.EnrollRequest() for _ in range(n)]), timeout=60)
        toks = [r.enrollment.token for r in er.results]
        if not tasks:
            return [Member(t, None) for t in toks]
        gr = stub.GetTasksBatch(device_pb2.GetTasksBatchRequest(items=[
            device_pb2.GetTasksItem(device_token=t, request=device_pb2.GetTasksRequest(
                datasets=[qid], query_id=qid)) for t in toks]), timeout=60)
    return [Member(t, r.response.tasks[0] if r.response.tasks else None)
            for t, r in zip(toks, gr.results, strict=True)]


def _sealed(task: device_pb2.Task, values: list[int] | None = None) -> bytes:
    spec = TaskSpec.from_json(task.task_json)
    info = seal_info(task.query_id, task.phase, task.group, task.stage, task.task_digest)
    vals = values if values is not None else [0] * task.report_length
    return seal(parse_seal(spec.seal), info, plaintext(vals, True))


def _attest(d: Deployment, subject: str) -> str:
    return HmacAttestation.from_file(d.sp.attestation_key).issue(subject)


def _report(task: device_pb2.Task, sealed: bytes, ticket: str | None = None,
            attestation: str = "") -> shuffler_pb2.SealedReport:
    return shuffler_pb2.SealedReport(
        query_id=task.query_id, phase=task.phase, group=task.group, stage=task.stage,
        task_digest=task.task_digest, sealed=sealed,
        ticket=task.shuffle_ticket if ticket is None else ticket, attestation=attestation)


def _submit(d: Deployment, reports: list[shuffler_pb2.SealedReport]) -> list[int]:
    with secure_channel(d.shuffler_endpoint) as ch:
        resp = shuffler_pb2_grpc.ShufflerServiceStub(ch).SubmitSealedBatch(
            shuffler_pb2.SubmitSealedBatchRequest(reports=reports), timeout=60)
    return [r.code for r in resp.results]


def _wait_done(d: Deployment, qid: str, timeout_s: float) -> dict:
    an = d.analyst()
    try:
        final = an.wait(qid, timeout_s=timeout_s)
        assert final.state == 2, final.error
        return json.loads(an.result(qid).estimate_json)
    finally:
        an.close()


def _received(d: Deployment, qid: str) -> list[tuple[int, int]]:
    an = d.analyst()
    try:
        return [(p.received, p.quota) for p in an.get(qid).phases]
    finally:
        an.close()


def test_a_shuffler_ticket_is_no_collector_credential(deployment):
    d = deployment
    _query(d, "cred", 40, 20)
    (m,) = _members(d, "cred", 1)
    assert m.task is not None and m.task.shuffle_ticket.startswith("t1.")
    ticket = m.task.shuffle_ticket
    with secure_channel(d.endpoint) as ch:  # the shuffler replays it to the collector
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        meta = (("authorization", f"Bearer {ticket}"),)
        with pytest.raises(grpc.RpcError) as e:
            stub.GetTasks(device_pb2.GetTasksRequest(datasets=["cred"]), metadata=meta,
                          timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        forged = device_pb2.Report(query_id="cred", phase=m.task.phase, values=[0],
                                   task_digest=m.task.task_digest, simulated=True)
        with pytest.raises(grpc.RpcError) as e:
            stub.SubmitReport(device_pb2.SubmitReportRequest(report=forged), metadata=meta,
                              timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        batch = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(reports=[
            device_pb2.Report(query_id="cred", phase=m.task.phase, values=[0],
                              task_digest=m.task.task_digest, simulated=True,
                              device_token=ticket)]), timeout=10)
        assert [r.code for r in batch.results] == [UNAUTH]
    rep = _report(m.task, _sealed(m.task), attestation=_attest(d, "cred-0"))
    with secure_channel(d.endpoint) as ch:  # nor the attestation the shuffler saw
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        for seen in (rep.attestation, rep.SerializeToString().hex()):
            with pytest.raises(grpc.RpcError) as e:
                stub.GetTasks(device_pb2.GetTasksRequest(datasets=["cred"]), timeout=10,
                              metadata=(("authorization", f"Bearer {seen}"),))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with secure_channel(d.shuffler_endpoint) as ch:  # and the shuffler takes no token
        stub2 = shuffler_pb2_grpc.ShufflerServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub2.SubmitSealed(shuffler_pb2.SubmitSealedRequest(report=rep), timeout=10,
                               metadata=(("authorization", f"Bearer {m.token}"),))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "never the collector token" in (e.value.details() or "")
    assert _submit(d, [_report(m.task, _sealed(m.task), ticket=m.token,
                               attestation=_attest(d, "cred-0"))]) == [UNAUTH]
    assert _submit(d, [rep]) == [OK]


def test_slotless_identities_cannot_fill_a_batch(deployment):
    """The issue's 499 enrolled identities that never asked for a task, beside 1 honest
    device: none of their 499 reports is admitted, whatever ticket they show."""
    d = deployment
    _query(d, "slotless", 500, 500)
    (honest,) = _members(d, "slotless", 1)
    assert honest.task is not None
    others = _members(d, "slotless", 499, tasks=False)
    good = _report(honest.task, _sealed(honest.task), attestation=_attest(d, "honest"))
    assert _submit(d, [good]) == [OK]
    forged = TicketKey.generate().issue(Ticket("slotless", honest.task.phase,
                                               honest.task.group, honest.task.stage,
                                               honest.task.task_digest, 7))
    tickets = ["", forged, honest.task.shuffle_ticket]
    reports = [_report(honest.task, _sealed(honest.task),
                       ticket=tickets[i % 3] if i % 4 else o.token,
                       attestation=_attest(d, f"sybil-{i}")) for i, o in enumerate(others)]
    codes = _submit(d, reports)
    assert OK not in codes and set(codes) <= {UNAUTH, 6}  # 6: ALREADY_EXISTS (the slot's)
    assert codes.count(6) == sum(1 for i in range(499) if i % 4 and i % 3 == 2)
    time.sleep(1.0)  # a tick of the forwarder: nothing can be forwarded
    assert _received(d, "slotless") == [(0, 500)]


def test_garbage_from_slot_holders_states_no_amplified_epsilon(deployment):
    """The issue's garbage blobs + 1 honest report (399 + 1 here: the fixture's shuffler
    forwards at most 400 per batch), now from slot holders that pass the enrolment check:
    the batch is forwarded, the collector can store only the honest report — which it
    could then read — so the result must not state an amplified ε."""
    d = deployment
    _query(d, "garbage", 400, 400, timeout_s=8)  # setup + forwarding must fit under load
    members = _members(d, "garbage", 400)
    honest = members[0]
    assert honest.task is not None
    reports = [_report(honest.task, _sealed(honest.task), attestation=_attest(d, "h"))]
    for i, m in enumerate(members[1:]):
        assert m.task is not None
        reports.append(_report(m.task, os.urandom(len(reports[0].sealed)),
                               attestation=_attest(d, f"garbage-{i}")))
    assert _submit(d, reports) == [OK] * 400
    est = _wait_done(d, "garbage", timeout_s=60)
    p = est["privacy"]
    (cell,) = p["cells"]
    assert (cell["reports"], cell["dropped"], cell["counted"]) == (1, 399, 1)
    assert not p["amplified"] and p["central_epsilon"] == p["local_epsilon"] == 1.0
    assert p["delta"] == 0.0


def test_replayed_ciphertexts_are_refused(deployment):
    d = deployment
    _query(d, "replay", 40, 20)
    a, b = _members(d, "replay", 2)
    assert a.task is not None and b.task is not None
    sealed = _sealed(a.task)
    mine = _report(a.task, sealed, attestation=_attest(d, "replay-a"))
    assert _submit(d, [mine, mine]) == [OK, OK]  # the second: the same slot, a duplicate
    stolen = _report(b.task, sealed, attestation=_attest(d, "replay-b"))
    with secure_channel(d.shuffler_endpoint) as ch:
        stub = shuffler_pb2_grpc.ShufflerServiceStub(ch)
        assert stub.SubmitSealed(shuffler_pb2.SubmitSealedRequest(report=mine),
                                 timeout=10).duplicate
        with pytest.raises(grpc.RpcError) as e:
            stub.SubmitSealed(shuffler_pb2.SubmitSealedRequest(report=stolen), timeout=10)
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "replayed" in (e.value.details() or "")
    fresh = _report(b.task, _sealed(b.task), attestation=_attest(d, "replay-b"))
    assert _submit(d, [fresh]) == [OK]  # b's own report still goes in


def test_a_collector_minting_identities_is_held_by_the_shuffler(deployment):
    """The collector holds the ticket key: it mints tickets for every slot of a cell and
    seals valid reports. Without the shuffler's attestations they are refused; with one
    stolen attestation on all of them they are admitted (the tickets are genuine) but
    count as one subject — and a cell never takes more reports than were placed in it,
    nor a phase more than its quota, whatever slots the tickets name."""
    d = deployment
    _query(d, "mint", 60, 20, method="two-stage", timeout_s=6)
    t = next(m.task for m in _members(d, "mint", 10) if m.task)  # a device of phase 1
    key = TicketKey.from_file(d.sp.ticket_key)  # what the collector holds

    def minted(slot: int, attestation: str) -> shuffler_pb2.SealedReport:
        ticket = key.issue(Ticket("mint", t.phase, t.group, t.stage, t.task_digest, slot))
        return _report(t, _sealed(t), ticket=ticket, attestation=attestation)

    assert set(_submit(d, [minted(s, "") for s in range(60)])) == {UNAUTH}
    stolen = _attest(d, "one-stolen-subject")
    codes = _submit(d, [minted(s, stolen) for s in range(60)])
    info = _received(d, "mint")
    placed = codes.count(OK)  # the devices placed in that cell, no more
    assert 0 < placed < 60 and set(codes) == {OK, 9}  # 9: FAILED_PRECONDITION (full)
    assert placed == info[t.phase - 1][1]  # phase 1 has one cell: its quota
    assert all(received <= quota for received, quota in info)
    assert _submit(d, [minted(60, stolen)]) == [PERMISSION]  # no slot 60 in 60 users
    est = _wait_done(d, "mint", timeout_s=60)
    for c in est["privacy"]["cells"]:
        assert c["counted"] <= 1 and not c["amplified"]  # one subject, however many reports
    assert not est["privacy"]["amplified"]


def test_the_collector_refuses_a_batch_past_the_quota_and_stores_a_ciphertext_once(deployment):
    d = deployment
    _query(d, "quota", 40, 20)
    (m,) = _members(d, "quota", 1)
    t = m.task
    assert t is not None
    sp = d.sp
    ep = Endpoint(f"127.0.0.1:{d.intake}", sp.ca, sp.client_cert, sp.client_key)
    req = shuffler_pb2.ForwardBatchRequest(
        batch_id=secrets.token_hex(16), query_id="quota", phase=t.phase, group=t.group,
        stage=t.stage, task_digest=t.task_digest, sealed=[_sealed(t) for _ in range(41)],
        attested=41, verifier="hmac-attestation")
    with secure_channel(ep) as ch:
        stub = shuffler_pb2_grpc.ShuffleIntakeServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.ForwardBatch(iter([req]), timeout=30)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "past its quota" in (e.value.details() or "")
        for bad, why in ((dict(attested=42), "attested"), (dict(verifier="Bad Name"),
                                                          "verifier")):
            r2 = shuffler_pb2.ForwardBatchRequest()
            r2.CopyFrom(req)
            for k, v in bad.items():
                setattr(r2, k, v)
            with pytest.raises(grpc.RpcError) as e:
                stub.ForwardBatch(iter([r2]), timeout=30)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and why in \
                (e.value.details() or "")
    assert _received(d, "quota") == [(0, 40)]
    copies = shuffler_pb2.ForwardBatchRequest()
    copies.CopyFrom(req)  # a shuffler replaying one ciphertext: it is stored once
    del copies.sealed[:]
    copies.sealed.extend([req.sealed[0]] * 20 + [_sealed(t)])
    copies.attested = 2
    with secure_channel(ep) as ch:
        out = shuffler_pb2_grpc.ShuffleIntakeServiceStub(ch).ForwardBatch(iter([copies]),
                                                                          timeout=30)
    assert (out.stored, out.refused) == (2, 19)
    assert _received(d, "quota") == [(2, 40)]


def test_a_ciphertext_replayed_in_another_batch_is_stored_once(deployment):
    """A shuffler (or anyone holding its identity) forwarding the same sealed reports in
    a second batch: the collector stores them once — a digest per (query, phase), checked
    in the transaction that stores the batch — and counts the copies as refused, so the
    result's guarantee counts only distinct reports."""
    d = deployment
    _query(d, "rebatch", 40, 10, timeout_s=6)
    (m,) = _members(d, "rebatch", 1)
    t = m.task
    assert t is not None
    sp = d.sp
    ep = Endpoint(f"127.0.0.1:{d.intake}", sp.ca, sp.client_cert, sp.client_key)
    first = [_sealed(t) for _ in range(12)]

    def batch(sealed: list[bytes]) -> shuffler_pb2.ForwardBatchRequest:
        return shuffler_pb2.ForwardBatchRequest(
            batch_id=secrets.token_hex(16), query_id="rebatch", phase=t.phase, group=t.group,
            stage=t.stage, task_digest=t.task_digest, sealed=sealed, attested=len(sealed),
            verifier="hmac-attestation")

    with secure_channel(ep) as ch:
        stub = shuffler_pb2_grpc.ShuffleIntakeServiceStub(ch)
        out = stub.ForwardBatch(iter([batch(first)]), timeout=30)
        assert (out.stored, out.refused, out.duplicate) == (12, 0, False)
        # 10 of the same ciphertexts again, with 2 fresh ones, under a new batch id
        out = stub.ForwardBatch(iter([batch(first[:10] + [_sealed(t), _sealed(t)])]), timeout=30)
        assert (out.stored, out.refused, out.duplicate) == (2, 10, False)
        out = stub.ForwardBatch(iter([batch(first[2:])]), timeout=30)  # only replays: nothing new
        assert (out.stored, out.refused) == (0, 10)
    assert _received(d, "rebatch")[t.phase - 1][0] == 14
    est = _wait_done(d, "rebatch", timeout_s=60)
    cell = next(c for c in est["privacy"]["cells"]
                if (c["phase"], c["group"], c["stage"]) == (t.phase, t.group, t.stage))
    assert cell["reports"] == 14 and cell["dropped"] == 20
    assert cell["counted"] == 2 and cell["smallest_batch"] == 2  # the replays count out


def test_declines_release_the_slot_and_the_cell_completes_at_once(deployment):
    """30 slots, minimum batch 20, 5 devices decline: the 25 reports are forwarded as
    soon as the last one is in (the declines complete the cell), long before the phase's
    300 s deadline; the shuffler's linger would need 40 (twice the minimum)."""
    d = deployment
    _query(d, "decl", 30, 20, timeout_s=300)
    members = _members(d, "decl", 30)
    with secure_channel(d.endpoint) as ch:
        resp = device_pb2_grpc.DeviceServiceStub(ch).DeclineTaskBatch(
            device_pb2.DeclineTaskBatchRequest(declines=[device_pb2.Decline(
                query_id="decl", phase=m.task.phase, task_digest=m.task.task_digest,
                reason="budget", device_token=m.token) for m in members[25:] if m.task]),
            timeout=30)
    assert [r.code for r in resp.results] == [OK] * 5
    t0 = time.monotonic()
    assert _submit(d, [_report(m.task, _sealed(m.task), attestation=_attest(d, f"dc-{i}"))
                       for i, m in enumerate(members[:25]) if m.task]) == [OK] * 25
    est = _wait_done(d, "decl", timeout_s=60)
    assert time.monotonic() - t0 < 30
    (cell,) = est["privacy"]["cells"]
    assert cell["reports"] == cell["counted"] == 25


def test_declines_complete_their_own_cell_while_the_rest_of_the_phase_is_silent(deployment):
    """A phase of four cells (an L2 mean in 2-d: 30 devices each, minimum batch 20): in one
    cell 25 devices report and 5 decline, the other cells stay silent. The declines are
    counted per cell, so that cell is forwarded at once — not when the phase's other 90
    devices have answered, nor at its 300 s deadline."""
    d = deployment
    an = d.analyst()
    an.create(QueryRequest(kind="mean-l2", epsilon=1.0, dataset="decl4", users=120, dim=2,
                           samples=2, bound=1.0, phase_timeout_s=300, query_id="decl4",
                           params={"shuffle": {"min_batch": 20}}, allow_simulated=True))
    an.close()
    time.sleep(0.3)
    members = [m for m in _members(d, "decl4", 120) if m.task and m.task.group == 0]
    assert len(members) == 30
    with secure_channel(d.endpoint) as ch:
        resp = device_pb2_grpc.DeviceServiceStub(ch).DeclineTaskBatch(
            device_pb2.DeclineTaskBatchRequest(declines=[device_pb2.Decline(
                query_id="decl4", phase=m.task.phase, task_digest=m.task.task_digest,
                reason="budget", device_token=m.token) for m in members[25:] if m.task]),
            timeout=30)
    assert [r.code for r in resp.results] == [OK] * 5
    assert _submit(d, [_report(m.task, _sealed(m.task), attestation=_attest(d, f"d4-{i}"))
                       for i, m in enumerate(members[:25]) if m.task]) == [OK] * 25
    end = time.monotonic() + 30
    while _received(d, "decl4")[0][0] < 25:
        assert time.monotonic() < end, _received(d, "decl4")
        time.sleep(0.2)
    assert _received(d, "decl4")[0] == (25, 120)


def test_the_guarantee_counts_only_what_the_shuffler_attested():
    """``counted``: attested subjects less every report that did not open; nothing from a
    shuffler without its own enrolment check (the collector could have minted them)."""
    assert counted(StoredBatch(1, 0, 0, stored=500, refused=0, attested=500,
                               verifier="hmac-attestation")) == 500
    assert counted(StoredBatch(1, 0, 0, 500, 0, 500, "")) == 0
    assert counted(StoredBatch(1, 0, 0, 1, 499, 500, "hmac-attestation")) == 1
    assert counted(StoredBatch(1, 0, 0, 300, 0, 2, "hmac-attestation")) == 2
    assert counted(StoredBatch(1, 0, 0, 10, 5, 3, "hmac-attestation")) == 0
    rt = _runtime()
    full = privacy_section(rt, [StoredBatch(1, 0, 0, 5000, 0, 5000, "hmac-attestation")], {})
    assert full["amplified"] and full["central_epsilon"] < 1.0
    assert "hmac-attestation" in full["assumption"]
    bare = privacy_section(rt, [StoredBatch(1, 0, 0, 5000, 0, 5000, "")], {})
    assert not bare["amplified"] and bare["central_epsilon"] == bare["local_epsilon"]
    assert "no enrolment check" in bare["assumption"]


def _runtime():
    from uldp.collector.planner import QuerySpec
    from uldp.collector.programs import program_for
    from uldp.collector.service.catalogue import QueryRuntime

    spec = QuerySpec(kind="mean", epsilon=1.0, users=5000, samples=2, bound=1.0,
                     method="ssl")
    prog = program_for(spec)
    return QueryRuntime("q", "ds", "mean", spec, prog, prog.num_phases,
                        shuffle={"min_batch": 100, "delta": 1e-8, "key_id": "0" * 16})
