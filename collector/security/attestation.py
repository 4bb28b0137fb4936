"""App attestation for enrolment: who may create a new device identity.

See ``docs/privacy.md`` ("Sybil identities") and ``proto/uldp/v1/device.proto``
(``EnrollRequest.attestation``). Anyone who can reach the collector can enrol, and every
enrolment is a new identity that takes a slot of every query it asks about: one caller
can hold many slots and decide what those slots report. A collector started with
``--attestation-key-file`` enrols a new identity only with an attestation that the app's
back end issued: a statement naming the app user or install it vouches for (its
*subject*), which the collector then rate-limits per subject
(``uldp.collector.service.enrolment``).

:class:`EnrolmentVerifier` is the hook (a ``Protocol``: a platform attestation — Play
Integrity, App Attest, a signed account session — plugs in the same way);
:class:`HmacAttestation` is the reference implementation: an HMAC-SHA256 over a small
JSON payload with a key the back end and the collector share (``key file``: one line of
at least 64 hex digits, not readable by others).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

__all__ = ["MAX_ATTESTATION_CHARS", "AttestationRefused", "EnrolmentVerifier",
           "HmacAttestation", "new_attestation_key"]

#: characters of an attestation, at most (longer ones are refused unread)
MAX_ATTESTATION_CHARS = 2048
#: characters of a subject, at most
MAX_SUBJECT_CHARS = 128
_PREFIX = "v1."
_SKEW_MS = 5 * 60 * 1000  # clocks of the back end and the collector may differ this much


class AttestationRefused(Exception):
    """The attestation is missing, malformed, forged or expired (message for the caller;
    it never quotes the attestation)."""


class EnrolmentVerifier(Protocol):
    """Decides whether an enrolment may create a new identity."""

    def verify(self, attestation: str) -> str:
        """The credential ``attestation`` proves — e.g. the app user or install it was
        issued for — which the collector's per-credential rate limit counts; raise
        :class:`AttestationRefused` when it proves nothing."""
        ...


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_URLSAFE = bytes.maketrans(b"-_", b"+/")


def b64url_decode(text: str) -> bytes:
    """``base64.urlsafe_b64decode`` of unpadded text, the same rules (non-alphabet
    characters skipped; ``ValueError`` for non-ASCII, ``binascii.Error`` for bad
    padding) without its per-call wrappers (two of these run per shuffled report)."""
    data = text.encode("ascii").translate(_URLSAFE)
    return binascii.a2b_base64(data + b"=" * (-len(data) % 4))


_unb64 = b64url_decode

#: the payload exactly as :meth:`HmacAttestation.issue` writes it (sorted keys, no
#: spaces, integers without leading zeros, a subject of printable ASCII without quote or
#: backslash): read without the JSON parser, the same values it would give
_CANONICAL = re.compile(rb'\{"exp":(0|-?[1-9][0-9]{0,17}),"iat":(0|-?[1-9][0-9]{0,17}),'
                        rb'"sub":"([\x20\x21\x23-\x5b\x5d-\x7e]*)"\}')


def _payload(data: bytes) -> object:
    """The JSON value of an attestation's payload (None when it is not JSON): the
    canonical form by one regular expression, anything else by ``json.loads``."""
    m = _CANONICAL.fullmatch(data)
    if m is not None:
        return {"exp": int(m[1]), "iat": int(m[2]), "sub": m[3].decode("ascii")}
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def new_attestation_key() -> str:
    """A fresh key, as the text of a key file (64 hex digits)."""
    return secrets.token_hex(32)


class HmacAttestation:
    """The reference :class:`EnrolmentVerifier`: ``"v1." B64(payload) "." B64(HMAC-SHA256(
    key, payload))`` with payload the JSON object ``{"sub": …, "iat": ms, "exp": ms}``
    (format in ``device.proto``). :meth:`issue` is what the app's back end runs (in any
    language: the format is the contract)."""

    def __init__(self, key: bytes, *, max_lifetime_s: float = 24 * 3600.0,
                 clock: Callable[[], float] = time.time) -> None:
        if len(key) < 32:
            raise ValueError("an attestation key needs at least 32 bytes")
        self._key = key
        # a keyed HMAC state copied per call (cheaper than hmac.digest's lookup by name)
        self._template = hmac.new(key, digestmod=hashlib.sha256)
        # the OpenSSL HMAC state inside it when there is one (its copy() skips the
        # Python wrapper's: two of these per shuffled report)
        self._state = getattr(self._template, "_hmac", None) or self._template
        self.max_lifetime_ms = int(max_lifetime_s * 1000)
        self._clock = clock

    def __reduce__(self) -> tuple[Callable[..., HmacAttestation], tuple[object, ...]]:
        """Pickled as its key, lifetime and clock (the shuffler's checking processes
        rebuild it; a clock that cannot be pickled makes the verifier unpicklable)."""
        return (_restore, (self._key, self.max_lifetime_ms / 1000, self._clock))

    @classmethod
    def from_file(cls, path: str | Path) -> HmacAttestation:
        """The key in ``path``: one line of at least 64 hex digits (ValueError if not)."""
        text = Path(path).read_text().strip()
        try:
            key = bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"{path}: not a hex key (one line of at least 64 hex digits; "
                             "make one with `uldp collector attestation-key`)") from None
        if len(key) < 32:
            raise ValueError(f"{path}: the key has {len(key)} bytes; at least 32 are needed")
        return cls(key)

    def _mac(self, payload: bytes) -> bytes:
        h = self._state.copy()
        h.update(payload)
        return h.digest()

    def issue(self, subject: str, ttl_s: float = 600.0) -> str:
        """An attestation for ``subject``, valid for ``ttl_s`` seconds from now."""
        if not 0 < len(subject) <= MAX_SUBJECT_CHARS:
            raise ValueError(f"a subject has 1..{MAX_SUBJECT_CHARS} characters")
        now = int(self._clock() * 1000)
        payload = json.dumps({"exp": now + int(ttl_s * 1000), "iat": now, "sub": subject},
                             sort_keys=True, separators=(",", ":")).encode()
        return f"{_PREFIX}{_b64(payload)}.{_b64(self._mac(payload))}"

    def verify(self, attestation: str) -> str:
        if not attestation:
            raise AttestationRefused("this collector enrols new devices only with an app "
                                     "attestation (EnrollRequest.attestation); none was given")
        if len(attestation) > MAX_ATTESTATION_CHARS or not attestation.startswith(_PREFIX):
            raise AttestationRefused("attestation rejected: malformed")
        parts = attestation[len(_PREFIX):].split(".")
        if len(parts) != 2:
            raise AttestationRefused("attestation rejected: malformed")
        try:
            payload, mac = _unb64(parts[0]), _unb64(parts[1])
        except (binascii.Error, ValueError):
            raise AttestationRefused("attestation rejected: malformed (bad base64)") from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise AttestationRefused("attestation rejected: invalid signature")
        return self._subject(_payload(payload))

    def _subject(self, obj: object) -> str:
        """The subject of a genuine payload, checked for its fields and its times."""
        if not isinstance(obj, dict):
            raise AttestationRefused("attestation rejected: malformed payload")
        sub, iat, exp = obj.get("sub"), obj.get("iat"), obj.get("exp")
        if not (isinstance(sub, str) and 0 < len(sub) <= MAX_SUBJECT_CHARS
                and all(type(v) is int for v in (iat, exp))):
            raise AttestationRefused("attestation rejected: malformed payload")
        assert isinstance(iat, int) and isinstance(exp, int)
        now = int(self._clock() * 1000)
        if now >= exp:
            raise AttestationRefused("attestation rejected: expired")
        if iat > now + _SKEW_MS or exp - iat > self.max_lifetime_ms:
            raise AttestationRefused("attestation rejected: issued in the future or for "
                                     "longer than 24 h")
        return sub


def _restore(key: bytes, max_lifetime_s: float, clock: Callable[[], float]
             ) -> HmacAttestation:
    return HmacAttestation(key, max_lifetime_s=max_lifetime_s, clock=clock)
