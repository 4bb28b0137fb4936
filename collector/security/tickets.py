"""Shuffler tickets: the credential a device shows the shuffler, which no collector accepts.

See ``docs/privacy.md`` §7 ("Credentials") and ``proto/uldp/v1/shuffler.proto``. In shuffle
mode the collector hands every device, with its task (``Task.shuffle_ticket``), a ticket
for the one slot it assigned it: the device presents it to the shuffler with its sealed
report, never its collector token. A ticket is

    "t1." B64URL(payload || HMAC-SHA256(key, "uldp-shuffle-ticket/1" 0x00 || payload))

(unpadded base64url) with ``payload`` = ``"shuffler"`` (the audience, 8 bytes) ‖
u32be(phase) ‖ u32be(group) ‖ u32be(stage) ‖ u32be(slot) ‖ the 32 bytes of the task
digest ‖ the query id (UTF-8, 1 to 64 bytes). It is

* **bound to one audience**: only the shuffler verifies tickets; the collector's device
  service takes device tokens only (``uldp.collector.security.tokens``: another format,
  another key), so a shuffler replaying a ticket to the collector gets UNAUTHENTICATED,
  and a device token shown to a shuffler is refused too;
* **bound to one slot of one task**: the shuffler admits one report per (query, slot), the
  report's routing fields must be the ticket's, and the slot must be one of the query's;
* **deterministic**: asking for the task again gives the same ticket (no state).

The key is a 32-byte secret the collector and its shuffler share (the collector keeps it in
its database like its sealing keys, ``uldp collector shuffle-ticket-key`` writes it to a
file for the shuffler). Only the two of them can make a ticket: the collector, which
assigns the slots anyway, and the shuffler, which admits reports anyway. HMAC keeps a
check at about a microsecond (an Ed25519 signature per report costs 50–200 µs on the
shuffler's hot path and at every assignment).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

from uldp.collector.security.attestation import b64url_decode

__all__ = ["MAX_TICKET_CHARS", "Ticket", "TicketError", "TicketKey"]

#: characters of a ticket, at most (longer ones are refused unread)
MAX_TICKET_CHARS = 512
AUDIENCE = b"shuffler"
_PREFIX = "t1."
_DOMAIN = b"uldp-shuffle-ticket/1\x00"
_HEAD = struct.Struct(">8sIIII32s")  # audience, phase, group, stage, slot, digest
_MAC = 32


class TicketError(Exception):
    """A ticket is missing, malformed or forged (maps to UNAUTHENTICATED); the message
    never quotes the ticket."""


@dataclass(frozen=True)
class Ticket:
    """What a ticket grants: one report for ``slot`` of the task (query, phase, group,
    stage, task digest)."""

    query_id: str
    phase: int
    group: int
    stage: int
    task_digest: str
    slot: int

    def payload(self) -> bytes:
        return _HEAD.pack(AUDIENCE, self.phase, self.group, self.stage, self.slot,
                          bytes.fromhex(self.task_digest)) + self.query_id.encode()


class TicketKey:
    """Issues and verifies tickets with the shared key (see the module docstring)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a shuffle ticket key needs at least 32 bytes")
        self._key = bytes(key)
        # a keyed HMAC state copied per ticket: ~3x cheaper than hmac.digest, which
        # looks the digest up by name in OpenSSL 3 on every call (two MACs per report)
        self._template = hmac.new(self._key, _DOMAIN, hashlib.sha256)
        # the OpenSSL HMAC state inside it when there is one (its copy() skips the
        # Python wrapper's: two of these per shuffled report)
        self._state = getattr(self._template, "_hmac", None) or self._template

    def __reduce__(self) -> tuple[type[TicketKey], tuple[bytes]]:
        """Pickled as its key (the shuffler's checking processes rebuild it)."""
        return (TicketKey, (self._key,))

    @classmethod
    def generate(cls) -> TicketKey:
        return cls(secrets.token_bytes(32))

    @classmethod
    def from_text(cls, text: str, where: str = "the ticket key") -> TicketKey:
        """The key of one line of at least 64 hex digits (ValueError naming ``where``)."""
        try:
            key = bytes.fromhex(text.strip())
        except ValueError:
            raise ValueError(f"{where}: not a hex key (one line of at least 64 hex digits; "
                             "`uldp collector shuffle-ticket-key` writes it)") from None
        if len(key) < 32:
            raise ValueError(f"{where}: the key has {len(key)} bytes; at least 32 are needed")
        return cls(key)

    @classmethod
    def from_file(cls, path: str | Path) -> TicketKey:
        return cls.from_text(Path(path).read_text(), str(path))

    def to_text(self) -> str:
        return self._key.hex()

    @property
    def key_id(self) -> str:
        """A public fingerprint of the key (16 hex digits), for logs and errors."""
        return hashlib.sha256(b"uldp-ticket-key-id\x00" + self._key).hexdigest()[:16]

    def _mac(self, payload: bytes) -> bytes:
        h = self._state.copy()
        h.update(payload)
        return h.digest()

    def issue(self, t: Ticket) -> str:
        payload = t.payload()
        raw = base64.urlsafe_b64encode(payload + self._mac(payload)).rstrip(b"=")
        return _PREFIX + raw.decode("ascii")

    def verify(self, text: str) -> Ticket:
        """The grant of a genuine ticket; :class:`TicketError` otherwise."""
        if not text:
            raise TicketError("missing shuffler ticket (SealedReport.ticket: the "
                              "Task.shuffle_ticket of the task)")
        if len(text) > MAX_TICKET_CHARS or not text.startswith(_PREFIX):
            raise TicketError("malformed shuffler ticket")
        body = text[len(_PREFIX):]
        try:
            raw = b64url_decode(body)
        except (binascii.Error, ValueError):
            raise TicketError("malformed shuffler ticket (bad base64)") from None
        if not _HEAD.size < len(raw) - _MAC <= _HEAD.size + 256:
            raise TicketError("malformed shuffler ticket")
        payload, mac = raw[:-_MAC], raw[-_MAC:]
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise TicketError("invalid shuffler ticket (not issued by this shuffler's "
                              "collector)")
        aud, p, g, s, n, d = _HEAD.unpack_from(payload)
        try:
            q = payload[_HEAD.size:].decode("utf-8")
        except UnicodeDecodeError:
            q = ""
        if aud != AUDIENCE or not q:
            raise TicketError("malformed shuffler ticket payload")
        return Ticket(q, p, g, s, d.hex(), n)
