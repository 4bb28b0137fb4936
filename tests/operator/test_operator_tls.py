"""Issue 17 item 19: TLS mistakes are one clear line at once, in the CLI and in the Python
``Device``: a ``--ca`` that is not a certificate, a collector certificate signed by
another CA, a certificate issued for another name (with the names it holds and the
``--server-name`` hint), a client key that is not the certificate's. Nothing waits out a
timeout, nothing prints gRPC's own log lines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opcli import Running, one_line_error, start_serve, stop_serve, uldp

from uldp.client.device import Device
from uldp.client.transport import Endpoint, RetryPolicy, TLSSetupError

NOISE = ("ssl_transport_security", "E1", "I1", "handshaker", "Traceback")


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A collector whose certificate names only ``localhost``."""
    d = tmp_path_factory.mktemp("tls")
    r = uldp("collector", "certs", "--out", str(d / "pki"), "--host", "localhost")
    assert r.returncode == 0, r.stderr
    c = start_serve(d / "pki", d)
    yield c
    assert stop_serve(c) == 0


def _port(c: Running) -> str:
    return c.target.rsplit(":", 1)[1]


def _quick_line(r, *needles: str) -> str:
    err = one_line_error(r, *needles)
    for n in NOISE:
        assert n not in r.stderr, r.stderr
    return err


@pytest.mark.parametrize("content", ["not a certificate\n", "",
                                     "-----BEGIN CERTIFICATE-----\nAAAA\n"
                                     "-----END CERTIFICATE-----\n"])
def test_a_ca_that_is_not_a_certificate_is_one_line(named, tmp_path, content):
    bad = tmp_path / "bad.pem"
    bad.write_text(content)
    for argv in (["query", "list", "--admin-token-file", str(named.pki / "admin.token")],
                 ["collector", "health"], ["collector", "wait", "--timeout", "180"]):
        t0 = time.monotonic()
        r = uldp(*argv, "--target", named.target, "--ca", str(bad))
        _quick_line(r, "--ca", "not a PEM certificate")
        assert time.monotonic() - t0 < 90  # a fresh interpreter, no timeout waited out


def test_a_name_mismatch_names_the_certificate_and_server_name(named):
    ip = f"127.0.0.1:{_port(named)}"
    conn = ["--ca", str(named.pki / "ca.pem"), "--admin-token-file",
            str(named.pki / "admin.token")]
    err = _quick_line(uldp("query", "list", "--target", ip, *conn), "--server-name",
                      "names localhost")
    assert "127.0.0.1" in err
    r = uldp("query", "list", "--target", ip, "--server-name", "localhost", *conn)
    assert r.returncode == 0, r.stderr
    t0 = time.monotonic()
    r = uldp("collector", "wait", "--target", ip, "--ca", str(named.pki / "ca.pem"),
             "--timeout", "180")
    _quick_line(r, "--server-name")
    assert time.monotonic() - t0 < 90  # not waited out


def test_a_client_key_of_another_certificate_is_one_line(named, tmp_path):
    other = tmp_path / "other"
    assert uldp("collector", "certs", "--out", str(other)).returncode == 0
    admin = named.pki.parent / (named.pki.name + "-admin")
    r = uldp("query", "list", "--target", named.target, "--ca", str(named.pki / "ca.pem"),
             "--admin-token-file", str(named.pki / "admin.token"), "--client-cert",
             str(admin / "client.pem"), "--client-key",
             str(tmp_path / "other-admin" / "client.key"))
    _quick_line(r, "--client-key", "does not belong")


def _device(tmp_path: Path, target: str, ca: Path, **kw) -> Device:
    return Device(Endpoint(target, ca, **kw), tmp_path / "dev", budget=1.0,
                  retry=RetryPolicy(attempts=8, base_s=30.0, cap_s=30.0, timeout_s=10.0))


@pytest.mark.parametrize("case", ["not-a-cert", "other-ca", "name"])
def test_device_raises_a_tls_setup_error_at_once(named, tmp_path, case):
    ca = named.pki / "ca.pem"
    target = named.target
    if case == "not-a-cert":
        ca = tmp_path / "bad.pem"
        ca.write_text("hello\n")
        needle = "not a PEM certificate"
    elif case == "other-ca":
        assert uldp("collector", "certs", "--out", str(tmp_path / "o")).returncode == 0
        ca = tmp_path / "o" / "ca.pem"
        needle = "not signed by the CA"
    else:
        target = f"127.0.0.1:{_port(named)}"
        needle = "server_name"
    dev = _device(tmp_path, target, ca)
    t0 = time.monotonic()
    try:
        with pytest.raises(TLSSetupError, match=needle) as ei:
            dev.poll()
    finally:
        dev.close()
    # retrying would sleep 7 times U(0, 30 s): under 20 s with probability ~1e-5
    assert time.monotonic() - t0 < 20
    assert len(str(ei.value).splitlines()) == 1
    if case == "name":
        assert "names localhost" in str(ei.value)
        ok = _device(tmp_path / "ok", target, ca, server_name="localhost")
        try:
            assert ok.poll().submitted == []  # connected: no task yet
        finally:
            ok.close()
