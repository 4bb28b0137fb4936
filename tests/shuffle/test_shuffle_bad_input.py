"""Shuffle mode's bad input and operator mistakes: one clear line (a gRPC status with a
message, or a CLI line naming the flag, exit 2), and nothing changes.

* ``uldp shuffler serve`` / ``uldp collector serve`` flag mistakes;
* CreateQuery with unusable shuffle parameters (a minimum batch above a cell, a method with
  per-device tasks, δ out of range);
* the shuffler's checks, in order (a token instead of a ticket, missing, forged or foreign
  tickets, a missing attestation, malformed fields, a ticket for another task, unknown
  query, a query in the clear, a closed phase, a slot the query does not have), and a
  batch call over its item cap refused whole before decoding, committing nothing;
* the collector's batch checks (batch id, size below the minimum, another task's digest)
  and reports that do not open, dropped one by one and counted.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import grpc
import pytest

from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import device_pb2, device_pb2_grpc, shuffler_pb2, shuffler_pb2_grpc
from uldp.collector.security.attestation import HmacAttestation
from uldp.collector.security.tickets import Ticket, TicketKey
from uldp.collector.service.client import QueryRequest
from uldp.collector.shuffler.service import MAX_SEALED_BATCH

from .conftest import Deployment


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "uldp.collector.cli.service", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _inproc(capsys, *args: str) -> tuple[int, str]:
    """``uldp ARGS`` in this process (exit code, stderr): for mistakes caught before a
    server starts (a subprocess costs seconds of imports each)."""
    import warnings

    from uldp.collector.cli.service import main

    saved = warnings.showwarning
    try:
        rc = main(list(args))
    except SystemExit as exc:
        rc = int(exc.code or 0)
    finally:
        warnings.showwarning = saved
    return rc, capsys.readouterr().err


def test_shuffler_serve_names_the_flag(deployment: Deployment, tmp_path, capsys):
    sp = deployment.sp
    base = ["shuffler", "serve", "--db", str(tmp_path / "s.db"), "--tls-cert",
            str(sp.shuffler_cert), "--tls-key", str(sp.shuffler_key), "--collector",
            "127.0.0.1:1", "--collector-ca", str(sp.ca), "--client-cert", str(sp.client_cert),
            "--client-key", str(sp.client_key)]
    bad = tmp_path / "bad.key"
    bad.write_text("not hex\n")
    bad.chmod(0o600)
    tpk = ["--ticket-key-file", str(sp.ticket_key)]
    for args, why in (
            (["--ticket-key-file", str(tmp_path / "missing.key")], "--ticket-key-file"),
            (["--ticket-key-file", str(bad)], "--ticket-key-file"),
            ([*tpk, "--attestation-key-file", str(bad)], "--attestation-key-file"),
            ([*tpk, "--min-batch", "50", "--max-batch", "10"], "--max-batch"),
            ([*tpk, "--max-batch", "100001"], "--max-batch 100001: at most 100000"),
            ([*tpk, "--checkers", "65"], "--checkers 65: at most 64"),
            # --min-batch 1 is allowed (each query's own minimum of at least 2 applies):
            # the next mistake is the one reported
            ([*tpk, "--min-batch", "1", "--cors-origin", "https://app.example"],
             "--cors-origin needs --http-port"),
            ([*tpk, "--http-port", "0", "--cors-origin", "app.example"],
             "--cors-origin 'app.example'"),
            ([*tpk, "--port", "50999", "--http-port", "50999"],
             "--http-port 50999: the same port"),
            ([*tpk, "--metrics-token-file", str(sp.ticket_key)],
             "--metrics-token-file needs --http-port"),
            ([*tpk, "--http-port", "0", "--metrics-token-file", str(tmp_path / "none")],
             "--metrics-token-file")):
        rc, err = _inproc(capsys, *base, *args)
        assert rc == 2 and why in err and len(err.strip().splitlines()) == 1, (args, err)
    assert "hex" in _inproc(capsys, *base, "--ticket-key-file", str(bad))[1]
    r = _cli(*base, *tpk, "--port", "0", "--http-port", str(deployment.shuffler_http))
    assert r.returncode == 2 and f"--http-port {deployment.shuffler_http}: cannot listen" \
        in r.stderr  # the running shuffler's HTTP port
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "s.db").exists()  # nothing written


def test_collector_serve_needs_both_shuffler_flags(deployment: Deployment, tmp_path):
    r = _cli("collector", "serve", "--db", str(tmp_path / "c.db"), "--tls-dir",
             str(deployment.sp.pki.directory), "--port", "0", "--shuffler-port", "0")
    assert r.returncode == 2 and "--shuffler-ca" in r.stderr
    assert not (tmp_path / "c.db").exists()


@pytest.mark.parametrize("params,method,why", [
    ({"shuffle": {"min_batch": 500}}, "ssl", "above the"),
    ({"shuffle": {"min_batch": 20}}, "baseline-a", "its own task"),
    ({"shuffle": {"delta": 0.5}}, "ssl", "delta"),
    ({"shuffle": {"min_batch": 1}}, "ssl", "min_batch"),
    ({"shuffle": {"size": 3}}, "ssl", "keys among"),
])
def test_unusable_shuffle_parameters_are_refused(deployment, params, method, why):
    an = deployment.analyst()
    with pytest.raises(grpc.RpcError) as e:
        an.create(QueryRequest(kind="mean", epsilon=1.0, dataset="bad", users=300, samples=5,
                               bound=1.0, method=method, params=params,
                               query_id=f"bad-{secrets.token_hex(3)}"))
    an.close()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and why in e.value.details()


def _queries(d: Deployment) -> tuple[str, str]:
    an = d.analyst()
    an.create(QueryRequest(kind="mean", epsilon=1.0, dataset="plain", users=60, samples=5,
                           bound=1.0, method="ssl", query_id="plain"))
    an.create(QueryRequest(kind="mean", epsilon=1.0, dataset="sh", users=60, samples=5,
                           bound=1.0, method="ssl", query_id="sh",
                           params={"shuffle": {"min_batch": 20}}, allow_simulated=True))
    an.close()
    return "plain", "sh"


def _token_and_task(d: Deployment) -> tuple[str, device_pb2.Task]:
    with secure_channel(d.endpoint) as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        tok = stub.Enroll(device_pb2.EnrollRequest(), timeout=10).token
        meta = (("authorization", f"Bearer {tok}"),)
        (task,) = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["sh"], query_id="sh"),
                                metadata=meta, timeout=10).tasks
    return tok, task


@pytest.fixture(scope="module")
def queries(deployment):
    return _queries(deployment)


def test_the_shuffler_checks_in_order(deployment, queries):
    tok, task = _token_and_task(deployment)
    key = TicketKey.from_file(deployment.sp.ticket_key)  # minted as the collector would
    att = HmacAttestation.from_file(deployment.sp.attestation_key).issue("checks")

    def minted(q: str = "sh", phase: int = task.phase, slot: int = 1) -> str:
        return key.issue(Ticket(q, phase, task.group, task.stage, task.task_digest, slot))

    good = dict(query_id="sh", phase=task.phase, group=task.group, stage=task.stage,
                task_digest=task.task_digest, sealed=os.urandom(57),
                ticket=task.shuffle_ticket, attestation=att)
    foreign = TicketKey.generate().issue(Ticket("sh", task.phase, task.group, task.stage,
                                                task.task_digest, 1))
    cases = [(dict(good, ticket=""), "UNAUTHENTICATED", "missing shuffler ticket"),
             (dict(good, ticket=tok), "UNAUTHENTICATED", "malformed shuffler ticket"),
             (dict(good, ticket=foreign), "UNAUTHENTICATED", "invalid shuffler ticket"),
             (dict(good, attestation=""), "UNAUTHENTICATED", "attested devices"),
             (dict(good, attestation="v1.x.y"), "UNAUTHENTICATED", "attestation rejected"),
             (dict(good, task_digest="XY"), "INVALID_ARGUMENT", "task_digest"),
             (dict(good, sealed=bytes(10)), "INVALID_ARGUMENT", "bytes"),
             (dict(good, query_id=""), "INVALID_ARGUMENT", "query_id"),
             (dict(good, group=task.group + 1), "PERMISSION_DENIED", "another task"),
             (dict(good, query_id="nope", ticket=minted("nope")), "NOT_FOUND",
              "unknown query"),
             (dict(good, query_id="plain", ticket=minted("plain")), "FAILED_PRECONDITION",
              "not in shuffle mode"),
             (dict(good, phase=7, ticket=minted(phase=7)), "FAILED_PRECONDITION", "not open"),
             (dict(good, ticket=minted(slot=60)), "PERMISSION_DENIED", "60 slots")]
    with secure_channel(deployment.shuffler_endpoint) as ch:
        stub = shuffler_pb2_grpc.ShufflerServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:  # a token, even with a good report
            stub.SubmitSealed(shuffler_pb2.SubmitSealedRequest(
                report=shuffler_pb2.SealedReport(**good)),
                metadata=(("authorization", f"Bearer {tok}"),), timeout=10)
        assert e.value.code().name == "INVALID_ARGUMENT" and "no token" in e.value.details()
        for fields, code, why in cases:
            with pytest.raises(grpc.RpcError) as e:
                stub.SubmitSealed(shuffler_pb2.SubmitSealedRequest(
                    report=shuffler_pb2.SealedReport(**fields)), timeout=10)
            assert e.value.code().name == code and why in e.value.details(), fields
        # over the item cap: refused whole before decoding; its valid item is not stored
        first = shuffler_pb2.SealedReport(**good)
        big = shuffler_pb2.SubmitSealedBatchRequest(
            reports=[first] + [shuffler_pb2.SealedReport()] * MAX_SEALED_BATCH)
        with pytest.raises(grpc.RpcError) as e:
            stub.SubmitSealedBatch(big, timeout=30)
        assert e.value.code().name == "INVALID_ARGUMENT" and "at most" in e.value.details()
        batch = stub.SubmitSealedBatch(shuffler_pb2.SubmitSealedBatchRequest(reports=[
            shuffler_pb2.SealedReport(**cases[5][0]), shuffler_pb2.SealedReport(**cases[0][0]),
            first]), timeout=10)
    # INVALID_ARGUMENT, UNAUTHENTICATED, and OK *not* a duplicate: nothing had been stored
    assert [(r.code, r.duplicate) for r in batch.results] == [(3, False), (16, False),
                                                                (0, False)]


def test_the_collector_checks_batches_and_drops_what_does_not_open(deployment, queries):
    _, task = _token_and_task(deployment)
    sp = deployment.sp
    ep = Endpoint(f"127.0.0.1:{deployment.intake}", sp.ca, sp.client_cert, sp.client_key)

    def forward(**kw):
        req = dict(batch_id=secrets.token_hex(16), query_id="sh", phase=task.phase,
                   group=task.group, stage=task.stage, task_digest=task.task_digest,
                   sealed=[os.urandom(57) for _ in range(20)])
        req.update(kw)
        with secure_channel(ep) as ch:
            return shuffler_pb2_grpc.ShuffleIntakeServiceStub(ch).ForwardBatch(
                iter([shuffler_pb2.ForwardBatchRequest(**req)]), timeout=30)

    for kw, code, why in ((dict(batch_id="x"), "INVALID_ARGUMENT", "batch_id"),
                          (dict(sealed=[os.urandom(57)] * 5), "FAILED_PRECONDITION",
                           "below the query's minimum"),
                          (dict(task_digest="0" * 64), "FAILED_PRECONDITION",
                           "different task"),
                          (dict(group=9), "FAILED_PRECONDITION", "no group 9"),
                          (dict(query_id="plain"), "FAILED_PRECONDITION", "not in shuffle")):
        with pytest.raises(grpc.RpcError) as e:
            forward(**kw)
        assert e.value.code().name == code and why in e.value.details(), kw
    bid = secrets.token_hex(16)
    out = forward(batch_id=bid)  # 20 forgeries of the right size: none opens
    assert (out.stored, out.refused, out.duplicate) == (0, 20, False)
    again = forward(batch_id=bid)
    assert again.duplicate and (again.stored, again.refused) == (0, 20)
    q = deployment.analyst().get("sh")
    assert q.phases[0].received == 0  # nothing counted


def test_shuffle_ticket_key_export(deployment: Deployment, tmp_path, capsys):
    """``uldp collector shuffle-ticket-key`` writes the key the collector issues tickets
    with (0600) — the one the running shuffler checks them with; an existing file is
    replaced only with --force."""
    out = tmp_path / "ticket.key"
    db = f"sqlite:///{deployment.db_path}"
    rc, err = _inproc(capsys, "collector", "shuffle-ticket-key", "--db", db, "--out", str(out))
    assert rc == 0, err
    assert out.read_text().strip() == deployment.sp.ticket_key.read_text().strip()
    assert out.stat().st_mode & 0o777 == 0o600
    rc, err = _inproc(capsys, "collector", "shuffle-ticket-key", "--db", db, "--out", str(out))
    assert rc == 2 and "--force" in err
    assert _inproc(capsys, "collector", "shuffle-ticket-key", "--db", db, "--out", str(out),
                   "--force")[0] == 0
