"""Development PKI for TLS on every collector port (``uldp collector certs``).

Creates, with ``cryptography`` only, in two directories:

* the **server directory** (what ``uldp collector serve --tls-dir`` reads and what a
  deployment ships to every collector): ``server.pem`` / ``server.key``, a server
  certificate for the given DNS names / IPs (serverAuth) signed by the CA, and ``ca.pem``
  (public: the health probe verifies the server with it);
* the **admin directory** (stays with the operator, never on a server): ``ca.pem`` /
  ``ca.key``, a self-signed CA (ECDSA P-256) valid for ``days`` whose key signs further
  certificates, and ``client.pem`` / ``client.key``, a client certificate (clientAuth)
  for optional mutual TLS (devices, gateways or analysts present it when the collector
  runs with ``--tls-client-ca``).

A server that holds the CA key can mint certificates every client trusts; one that holds
the client key can impersonate a client: so neither is in the server directory.
Private keys are written with mode 0600 (also when they existed with a wider mode), the
admin directory is created 0700.
This is a development/test CA: production
deployments bring certificates from their own PKI and point the same flags at them.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["DevPki", "admin_directory_for", "existing_pki", "issue_leaf", "make_dev_pki"]


@dataclass(frozen=True)
class DevPki:
    """Paths of the files written by :func:`make_dev_pki`: ``directory`` is the server's
    (``--tls-dir``), ``admin_directory`` the operator's (CA key, client credentials)."""

    directory: Path
    admin_directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file existed with a wider mode (--force)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def _leaf(name: str, hosts: list[str], usage: x509.ObjectIdentifier,
          ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
          now: _dt.datetime, days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                     content_commitment=False, data_encipherment=False,
                                     key_agreement=True, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
    )
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def existing_pki(directory: str | Path) -> Path | None:
    """The first certificate of a dev PKI already in ``directory``, or None."""
    out = Path(directory)
    for name in ("ca.pem", "server.pem", "client.pem"):
        if (out / name).exists():
            return out / name
    return None


def admin_directory_for(directory: str | Path) -> Path:
    """The default admin directory of a server directory: ``DIR-admin`` beside it."""
    out = Path(directory)
    return out.with_name(out.name + "-admin")


def make_dev_pki(directory: str | Path, hosts: list[str] | None = None, *,
                 days: int = 365, overwrite: bool = False,
                 admin_directory: str | Path | None = None) -> DevPki:
    """Write a dev CA and a client certificate into ``admin_directory`` (default
    :func:`admin_directory_for`), a server certificate for ``hosts`` and the CA
    certificate into ``directory`` (module docstring); parents are created."""
    out = Path(directory)
    adm = Path(admin_directory) if admin_directory is not None else admin_directory_for(out)
    if out.resolve() == adm.resolve() or adm.resolve().is_relative_to(out.resolve()):
        raise ValueError(f"the admin directory {adm} must lie outside the server directory "
                         f"{out} (a deployment ships the server directory whole)")
    for d in (out, adm):
        if existing_pki(d) is not None and not overwrite:
            raise FileExistsError(f"{existing_pki(d)} exists (pass overwrite=True / --force)")
    out.mkdir(parents=True, exist_ok=True)
    adm.mkdir(parents=True, exist_ok=True, mode=0o700)
    adm.chmod(0o700)
    pki = DevPki(out, adm, out / "ca.pem", adm / "ca.key", out / "server.pem",
                 out / "server.key", adm / "client.pem", adm / "client.key")
    hosts = hosts or ["localhost", "127.0.0.1", "::1"]
    now = _dt.datetime.now(_dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "uldp development CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                     content_commitment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_cert, server_key = _leaf(hosts[0], hosts, ExtendedKeyUsageOID.SERVER_AUTH,
                                    ca_cert, ca_key, now, days)
    client_cert, client_key = _leaf("uldp-client", [], ExtendedKeyUsageOID.CLIENT_AUTH,
                                    ca_cert, ca_key, now, days)
    for path, cert in ((pki.ca_cert, ca_cert), (adm / "ca.pem", ca_cert),
                       (pki.server_cert, server_cert), (pki.client_cert, client_cert)):
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.ca_key, ca_key)
    _write_key(pki.server_key, server_key)
    _write_key(pki.client_key, client_key)
    return pki


def issue_leaf(ca_cert: str | Path, ca_key: str | Path, out: str | Path, stem: str,
               name: str, hosts: list[str] | None = None, *, client: bool,
               days: int = 365) -> tuple[Path, Path]:
    """Sign one more certificate with a dev CA: ``<out>/<stem>.pem`` and ``.key`` with
    subject common name ``name`` — a client certificate (``client=True``; e.g. the
    shuffler's identity on the collector's shuffler port, whose name the collector
    checks) or a server certificate for ``hosts`` (e.g. the shuffler's own port)."""
    ca = x509.load_pem_x509_certificate(Path(ca_cert).read_bytes())
    key = serialization.load_pem_private_key(Path(ca_key).read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the dev CA key must be an EC key")
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    cert, leaf_key = _leaf(name, list(hosts or []), usage, ca, key,
                           _dt.datetime.now(_dt.UTC), days)
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(d / f"{stem}.key", leaf_key)
    return d / f"{stem}.pem", d / f"{stem}.key"
