"""Sybil enrolment (issue 17, item 10): rate limits per network address and per
credential, and the app-attestation verifier, against real collectors on loopback with
TLS (both server modes, the native gRPC port and the HTTP front), a real SQLite file.

A limit that refuses gives RESOURCE_EXHAUSTED with a message naming the limit and when to
retry, and changes nothing (no identity, no registry row); the verifier refuses a missing,
forged, tampered or expired attestation with UNAUTHENTICATED. Before this, one caller
enrolled 300 000 identities in 33 s."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import numpy as np
import pytest

from tests.service.connect_channel import ConnectChannel
from tests.service.wire import one_phase_query
from uldp.client.device import Device, EnrollmentError
from uldp.client.transport import RetryPolicy
from uldp.client.wire import device_pb2, device_pb2_grpc
from uldp.collector.security.attestation import HmacAttestation, new_attestation_key
from uldp.collector.service.enrolment import RateLimit, TokenBuckets, peer_key

RE = grpc.StatusCode.RESOURCE_EXHAUSTED
UNAUTH = grpc.StatusCode.UNAUTHENTICATED
E = device_pb2.EnrollRequest


def _devices(c) -> int:
    c.server.core.writer.run(lambda conn: None)  # the registry rows are written async
    return c.server.db.table_counts()["uldp_devices"]


def _refused(c, fn, code, fragment):
    before = _devices(c), c.server.db.snapshot()
    with pytest.raises(grpc.RpcError) as ei:
        fn()
    assert ei.value.code() == code, (ei.value.code(), ei.value.details())
    assert fragment in ei.value.details(), ei.value.details()
    assert (_devices(c), c.server.db.snapshot()) == before
    return ei.value.details()


def test_default_peer_limit_stops_a_sybil_flood(start_collector):
    """Default settings: a demo-sized fleet (20 000) enrols from one address at once; a
    flood beyond 25 000 is refused whole, and nothing of it is stored."""
    c = start_collector()
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        t0 = time.monotonic()
        for _ in range(2):
            r = stub.EnrollBatch(device_pb2.EnrollBatchRequest(requests=[E()] * 10_000),
                                 timeout=300)
            assert all(x.code == 0 for x in r.results)
        msg = _refused(c, lambda: stub.EnrollBatch(device_pb2.EnrollBatchRequest(
            requests=[E()] * 10_000), timeout=300), RE,
            "enrolment rate limit of this network address reached (25000/250s); retry in")
        # 5 000 tokens short at 100 per second: 50 s, less what refilled while the first
        # 20 000 enrolled (seconds under load on a shared box)
        refilled_s = time.monotonic() - t0
        assert int(msg.rsplit("retry in ", 1)[1].split()[0]) >= 50 - refilled_s - 1
        assert stub.Enroll(E(), timeout=30).device_id  # what is left is still served
    assert _devices(c) == 20_001


@pytest.mark.parametrize("mode", ["aio", "threads"])
def test_peer_limit_counts_calls_and_items_and_refuses_whole(start_collector, mode):
    c = start_collector(server_mode=mode, enroll_peer_limit=RateLimit(5, 3600.0))
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        first = [stub.Enroll(E(), timeout=30) for _ in range(3)]
        _refused(c, lambda: stub.EnrollBatch(device_pb2.EnrollBatchRequest(
            requests=[E()] * 3), timeout=30), RE, "network address reached (5/1h)")
        # renewals count too: the two left go to one renewal and one new device
        assert stub.Enroll(E(previous_token=first[0].token),
                           timeout=30).device_id == first[0].device_id
        assert stub.Enroll(E(), timeout=30).device_id
        _refused(c, lambda: stub.Enroll(E(), timeout=30), RE, "retry in 720 s")
    assert _devices(c) == 4


def test_peer_limit_holds_on_the_http_front_too(start_collector):
    """The limit is the servicers' (one implementation for both ports): the HTTP front
    and the native port of one address share it."""
    c = start_collector(http=True, enroll_peer_limit=RateLimit(2, 3600.0))
    with ConnectChannel(c.http_url, c.pki.ca_cert, "connect") as hch, c.channel() as gch:
        web, native = (device_pb2_grpc.DeviceServiceStub(x) for x in (hch, gch))
        assert web.Enroll(E(), timeout=30).device_id
        assert native.Enroll(E(), timeout=30).device_id
        for stub in (web, native):
            _refused(c, lambda s=stub: s.Enroll(E(), timeout=30), RE,
                     "network address reached (2/1h)")


def test_credential_limit_counts_new_identities_per_secret(start_collector):
    c = start_collector(enrollment_secret="fleet", enroll_credential_limit=RateLimit(2, 3600.0))
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        a = stub.Enroll(E(enrollment_secret="fleet"), timeout=30)
        before = _devices(c), c.server.db.snapshot()
        r = stub.EnrollBatch(device_pb2.EnrollBatchRequest(requests=[
            E(enrollment_secret="fleet"), E(enrollment_secret="fleet"),
            E(enrollment_secret="fleet", previous_token=a.token),  # a renewal: not counted
            E(enrollment_secret="wrong")]), timeout=30)
        codes = [x.code for x in r.results]
        assert codes == [0, RE.value[0], 0, UNAUTH.value[0]], [x.message for x in r.results]
        assert r.results[1].message.startswith(
            "enrolment rate limit of this credential reached (2/1h); retry in")
        assert r.results[2].enrollment.device_id == a.device_id
        assert _devices(c) == before[0] + 1  # the one new identity, nothing of the refused
        _refused(c, lambda: stub.Enroll(E(enrollment_secret="fleet"), timeout=30), RE,
                 "credential reached")


def test_verifier_refuses_missing_forged_and_expired_attestations(start_collector):
    key = bytes.fromhex(new_attestation_key())
    backend = HmacAttestation(key)
    c = start_collector(enrolment_verifier=HmacAttestation(key))
    forger = HmacAttestation(bytes.fromhex(new_attestation_key()))
    past = HmacAttestation(key, clock=lambda: time.time() - 7200)
    good = backend.issue("alice")
    head, _, mac = good.rpartition(".")
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        for att, fragment in (
                ("", "enrols new devices only with an app attestation"),
                (forger.issue("alice"), "attestation rejected: invalid signature"),
                (head[:-2] + "x" + head[-1] + "." + mac, "attestation rejected"),
                (past.issue("alice", ttl_s=600), "attestation rejected: expired"),
                (backend.issue("alice", ttl_s=3 * 86400), "longer than 24 h"),
                ("v1.garbage", "attestation rejected: malformed"),
                ("x" * 5000, "attestation rejected: malformed")):
            _refused(c, lambda a=att: stub.Enroll(E(attestation=a), timeout=30), UNAUTH,
                     fragment)
        # a genuine one enrols; the default per-subject limit is 3, then 3 a day
        ids = [stub.Enroll(E(attestation=backend.issue("alice")), timeout=30)
               for _ in range(3)]
        _refused(c, lambda: stub.Enroll(E(attestation=good), timeout=30), RE,
                 "credential reached (3/1d)")
        assert stub.Enroll(E(attestation=backend.issue("bob")), timeout=30).device_id
        # a renewal keeps its identity without an attestation
        assert stub.Enroll(E(previous_token=ids[0].token),
                           timeout=30).device_id == ids[0].device_id


def test_a_device_enrols_with_its_apps_attestation(start_collector, tmp_path):
    """The Python SDK sends the attestation its app hands it (a callable: one per
    enrolment) and runs a query end to end on a verifying collector."""
    key = bytes.fromhex(new_attestation_key())
    backend = HmacAttestation(key)
    c = start_collector(enrolment_verifier=HmacAttestation(key))
    one_phase_query(c, users=2)
    asked = []

    def attest() -> str:
        asked.append(1)
        return backend.issue(f"install-{len(asked)}")

    devs = [Device(c.endpoint, tmp_path / f"d{i}", budget=4.0, attestation=attest)
            for i in range(2)]
    for d in devs:
        d.add_dataset("x", np.linspace(-0.5, 0.5, 16))
        assert d.poll().submitted == ["q"]
    assert len(asked) == 2
    devs[0].enroll(force=True)  # a renewal: no attestation needed
    assert len(asked) == 2
    bare = Device(c.endpoint, tmp_path / "bare", budget=4.0,
                  retry=RetryPolicy(attempts=1))
    with pytest.raises(EnrollmentError, match="only with an app attestation"):
        bare.enroll()
    for d in (*devs, bare):
        d.close()


def test_token_buckets_and_peer_keys():
    now = [0.0]
    b = TokenBuckets(RateLimit(3, 30.0), max_keys=2, clock=lambda: now[0])
    assert [b.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("a") == pytest.approx(10.0)
    assert b.take("a", 4) == float("inf")  # more than the bucket holds
    now[0] = 10.0
    assert b.take("a") == 0.0 and b.take("a") == pytest.approx(10.0)
    assert b.take("b", 3) == 0.0 and b.take("c") == 0.0  # "a" is dropped (2 keys)
    assert b.take("a", 3) == 0.0
    assert RateLimit.parse("25000/250s") == RateLimit(25000, 250.0)
    assert RateLimit.parse("3/1d") == RateLimit(3, 86400.0) and RateLimit.parse("off") is None
    assert str(RateLimit.parse("3000/1h")) == "3000/1h"
    for bad in ("", "3", "0/1s", "3/0s", "3/1w", "-1/1s", "x/1s"):
        with pytest.raises(ValueError):
            RateLimit.parse(bad)
    assert peer_key("ipv4:10.1.2.3:5555") == "ipv4:10.1.2.3"
    assert peer_key("ipv6:[2001:db8:1:2:3::9]:443") == peer_key("ipv6:[2001:db8:1:2::1]:1")
    assert peer_key("ipv6:[2001:db8:1:2::1]:1") != peer_key("ipv6:[2001:db8:1:3::1]:1")
    assert peer_key("unix:/tmp/s") == "unix:/tmp/s"


def _uldp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "uldp.collector.cli.service", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flags, says", [
    (["--enroll-peer-limit", "lots"], "--enroll-peer-limit: 'lots': give N/T"),
    (["--enroll-credential-limit", "3/1w"], "--enroll-credential-limit"),
    (["--attestation-key-file", "/nonexistent/key"], "--attestation-key-file"),
    (["--attestation-key-file", "NOTAKEY"], "--attestation-key-file"),
])
def test_serve_enrolment_flags_are_checked_first(pki, tmp_path, flags, says):
    if "NOTAKEY" in flags:
        bad = tmp_path / "bad.key"
        bad.write_text("not hex\n")
        bad.chmod(0o600)
        flags = [str(bad) if f == "NOTAKEY" else f for f in flags]
    r = _uldp("collector", "serve", "--db", str(tmp_path / "x.db"), "--tls-dir",
              str(pki.directory), "--port", "0", *flags)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "x.db").exists()


def test_attestation_key_and_attest_commands_with_a_served_collector(start_collector, tmp_path):
    key = tmp_path / "attest.key"
    r = _uldp("collector", "attestation-key", "--out", str(key))
    assert r.returncode == 0, r.stderr
    assert key.stat().st_mode & 0o777 == 0o600
    again = _uldp("collector", "attestation-key", "--out", str(key))
    assert again.returncode != 0 and "--force" in again.stderr
    c = start_collector(subprocess_=True, extra_args=[
        "--attestation-key-file", str(key), "--enroll-credential-limit", "1/1h"])
    att = _uldp("collector", "attest", "--key-file", str(key), "--subject", "user-1")
    assert att.returncode == 0, att.stderr
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        assert stub.Enroll(E(attestation=att.stdout.strip()), timeout=30).device_id
        with pytest.raises(grpc.RpcError) as ei:
            stub.Enroll(E(attestation=att.stdout.strip()), timeout=30)
        assert ei.value.code() == RE and "credential reached (1/1h)" in ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            stub.Enroll(E(), timeout=30)
        assert ei.value.code() == UNAUTH
