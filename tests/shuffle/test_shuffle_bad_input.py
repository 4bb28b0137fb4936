"""Shuffle mode's bad input and operator mistakes: one clear line (a gRPC status with a
message, or a CLI line naming the flag, exit 2), and nothing changes.

* ``uldp shuffler serve`` / ``uldp collector serve`` flag mistakes;
* CreateQuery with unusable shuffle parameters (a minimum batch above a cell, a method with
  per-device tasks, δ out of range);
* the shuffler's checks (malformed fields, unknown query, a query in the clear);
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
from uldp.collector.service.client import QueryRequest

from .conftest import Deployment


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "uldp.collector.service_cli", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_shuffler_serve_names_the_flag(deployment: Deployment, tmp_path):
    sp = deployment.sp
    base = ["shuffler", "serve", "--db", str(tmp_path / "s.db"), "--tls-cert",
            str(sp.shuffler_cert), "--tls-key", str(sp.shuffler_key), "--collector",
            "127.0.0.1:1", "--collector-ca", str(sp.ca), "--client-cert", str(sp.client_cert),
            "--client-key", str(sp.client_key)]
    r = _cli(*base, "--token-public-key", str(tmp_path / "missing.pem"))
    assert r.returncode == 2 and "--token-public-key" in r.stderr
    r = _cli(*base, "--token-public-key", str(sp.token_public), "--min-batch", "1")
    assert r.returncode == 2 and "--min-batch" in r.stderr
    r = _cli(*base, "--token-public-key", str(sp.token_public), "--min-batch", "50",
             "--max-batch", "10")
    assert r.returncode == 2 and "--max-batch" in r.stderr
    tpk = ["--token-public-key", str(sp.token_public)]
    r = _cli(*base, *tpk, "--cors-origin", "https://app.example")
    assert r.returncode == 2 and "--cors-origin needs --http-port" in r.stderr
    r = _cli(*base, *tpk, "--http-port", "0", "--cors-origin", "app.example")
    assert r.returncode == 2 and "--cors-origin 'app.example'" in r.stderr
    r = _cli(*base, *tpk, "--port", "50999", "--http-port", "50999")
    assert r.returncode == 2 and "--http-port 50999: the same port" in r.stderr
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
    good = dict(query_id="sh", phase=task.phase, group=task.group, stage=task.stage,
                task_digest=task.task_digest, sealed=bytes(57))
    cases = [(dict(good, task_digest="XY"), "INVALID_ARGUMENT", "task_digest"),
             (dict(good, sealed=bytes(10)), "INVALID_ARGUMENT", "bytes"),
             (dict(good, query_id=""), "INVALID_ARGUMENT", "query_id"),
             (dict(good, query_id="nope"), "NOT_FOUND", "unknown query"),
             (dict(good, query_id="plain"), "FAILED_PRECONDITION", "not in shuffle mode"),
             (dict(good, phase=7), "FAILED_PRECONDITION", "not open")]
    with secure_channel(deployment.shuffler_endpoint) as ch:
        stub = shuffler_pb2_grpc.ShufflerServiceStub(ch)
        for fields, code, why in cases:
            with pytest.raises(grpc.RpcError) as e:
                stub.SubmitSealed(shuffler_pb2.SubmitSealedRequest(
                    report=shuffler_pb2.SealedReport(**fields)),
                    metadata=(("authorization", f"Bearer {tok}"),), timeout=10)
            assert e.value.code().name == code and why in e.value.details(), fields
        batch = stub.SubmitSealedBatch(shuffler_pb2.SubmitSealedBatchRequest(reports=[
            shuffler_pb2.SealedReport(**cases[0][0], device_token=tok),
            shuffler_pb2.SealedReport(**good, device_token="forged.token")]), timeout=10)
    assert [r.code for r in batch.results] == [3, 16]  # INVALID_ARGUMENT, UNAUTHENTICATED


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
                shuffler_pb2.ForwardBatchRequest(**req), timeout=30)

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
