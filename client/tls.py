"""TLS set-up mistakes, found before a connection or at the first handshake, as one line.

See ``docs/device-protocol.md`` (transport: TLS always). A CA file that is not a
certificate, a client key that does not belong to the client certificate, a collector
certificate signed by another CA or issued for another name: none of these heals by
waiting, so :func:`load_credentials` checks the files before gRPC sees them (gRPC would
only log ``Could not load any root certificate`` and fail every call as ``UNAVAILABLE``),
and :func:`tls_failure` tells a handshake that failed verification (permanent, with the
fix) from a collector that is down or restarting (transient, retried by
``uldp.client.transport.call_with_retry``).
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

__all__ = ["TLSSetupError", "certificate_names", "load_credentials", "tls_failure"]


class TLSSetupError(ValueError):
    """A TLS configuration mistake (a file, a name): one line saying what and how to fix
    it. Never retried: it stays wrong until the configuration changes."""


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TLSSetupError(f"{what} {path}: {exc.strerror or exc}") from None


def _certificates(path: Path, what: str) -> tuple[bytes, list[x509.Certificate]]:
    data = _read(path, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise TLSSetupError(f"{what} {path} is not a PEM certificate (expected "
                            "'-----BEGIN CERTIFICATE-----', e.g. the ca.pem of `uldp "
                            "collector certs`)")
    return data, certs


def load_credentials(ca_cert: Path | None, client_cert: Path | None,
                     client_key: Path | None) -> tuple[bytes | None, bytes | None,
                                                        bytes | None]:
    """``(root certificates, client key, client certificate chain)`` as gRPC takes them,
    each checked: the CA file holds PEM certificates, the client key is a PEM private key
    that belongs to the client certificate, and the two come together."""
    roots = _certificates(ca_cert, "CA certificate")[0] if ca_cert else None
    if (client_cert is None) != (client_key is None):
        raise TLSSetupError("mutual TLS needs both a client certificate and its key")
    if client_cert is None or client_key is None:
        return roots, None, None
    chain, certs = _certificates(client_cert, "client certificate")
    key_pem = _read(client_key, "client key")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise TLSSetupError(f"client key {client_key} is not an unencrypted PEM private "
                            "key") from None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, pub) != certs[0].public_key().public_bytes(der, pub):
        raise TLSSetupError(f"client key {client_key} does not belong to the client "
                            f"certificate {client_cert}")
    return roots, key_pem, chain


def certificate_names(target: str, timeout: float = 2.0) -> list[str]:
    """The names (DNS and IP subject alternative names) of the certificate the server at
    ``target`` presents, read without verifying it (only to word an error); [] when it
    cannot be read."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]") or "localhost"
    try:
        pem = ssl.get_server_certificate((host, int(port)), timeout=timeout)
        cert = x509.load_pem_x509_certificate(pem.encode())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except Exception:
        return []
    return [str(n) for n in san.get_values_for_type(x509.DNSName)] + \
        [str(n) for n in san.get_values_for_type(x509.IPAddress)]


#: (what gRPC says, what is wrong and how to fix it) for handshakes that failed
#: verification: deterministic, so waiting never helps
_PERMANENT = (
    ("Hostname Verification", "the collector's certificate does not name the host of the "
                              "target"),
    ("Peer name", "the collector's certificate does not name the host of the target"),
    ("certificate signature failure", "the collector's certificate is not signed by the "
                                      "CA given (--ca, Endpoint.ca_cert)"),
    ("CERTIFICATE_VERIFY_FAILED", "the collector's certificate could not be verified with "
                                  "the CA given (--ca, Endpoint.ca_cert)"),
    ("certificate verify failed", "the collector's certificate could not be verified with "
                                  "the CA given (--ca, Endpoint.ca_cert)"),
    ("WRONG_VERSION_NUMBER", "the target does not speak TLS (is it a uldp collector?)"),
    ("Failed to create security handshaker", "the TLS credentials could not be loaded "
                                             "(CA certificate, client certificate or key)"),
)


def tls_failure(exc: Any, target: str | None = None, server_name: str | None = None
                ) -> TLSSetupError | None:
    """The :class:`TLSSetupError` a failed call stands for, or None when it is not a
    verification failure (a collector down or restarting: retry). A name mismatch lists
    the names the certificate of the server at ``target`` (default: the address gRPC
    names in the error) holds."""
    try:
        if exc.code().name != "UNAVAILABLE":
            return None
        details = exc.details() or ""
    except Exception:
        return None
    what = next((w for needle, w in _PERMANENT if needle in details), None)
    if what is None:
        return None
    if target is None:  # the address gRPC tried, e.g. "ipv4:127.0.0.1:50051: ..."
        found = re.search(r"ipv[46]:(\[[^\]]+\]|[\d.]+):(\d+)", details)
        target = f"{found.group(1)}:{found.group(2)}" if found else None
    where = f" at {target}" if target else ""
    if "name" not in what:
        return TLSSetupError(f"TLS handshake with the collector{where} failed: {what}")
    names = certificate_names(target) if target else []
    checked = f"'{server_name}'" if server_name else "the host of the target"
    held = f" (it names {', '.join(names)})" if names else ""
    return TLSSetupError(
        f"TLS handshake with the collector{where} failed: its certificate does not name "
        f"{checked}{held}; connect to a name it was issued for, or set the name to check "
        "with --server-name (Endpoint.server_name)")
