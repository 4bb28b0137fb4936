"""Shuffler tickets: the credential a device shows the shuffler, which no collector accepts.

See ``docs/privacy.md`` §7 ("Credentials") and ``proto/uldp/v1/shuffler.proto``. In shuffle
mode the collector hands every device, with its task (``Task.shuffle_ticket``), a ticket
for the one slot it assigned it: the device presents it to the shuffler with its sealed
report, never its collector token. A ticket is

    "t1." B64(payload) "." B64(HMAC-SHA256(key, "uldp-shuffle-ticket/1" 0x00 || payload))

with ``payload`` the compact JSON ``{"aud": "shuffler", "d": task digest, "g": group,
"n": slot, "p": phase, "q": query id, "s": stage, "v": 1}`` (keys sorted). It is

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
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_TICKET_CHARS", "Ticket", "TicketError", "TicketKey"]

#: characters of a ticket, at most (longer ones are refused unread)
MAX_TICKET_CHARS = 512
AUDIENCE = "shuffler"
_PREFIX = "t1."
_DOMAIN = b"uldp-shuffle-ticket/1\x00"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_U32 = (1 << 32) - 1


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
        return json.dumps({"aud": AUDIENCE, "d": self.task_digest, "g": self.group,
                           "n": self.slot, "p": self.phase, "q": self.query_id,
                           "s": self.stage, "v": 1},
                          sort_keys=True, separators=(",", ":")).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _u32(v: object) -> bool:
    return type(v) is int and 0 <= v <= _U32


class TicketKey:
    """Issues and verifies tickets with the shared key (see the module docstring)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a shuffle ticket key needs at least 32 bytes")
        self._key = bytes(key)

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
        return hmac.new(self._key, _DOMAIN + payload, hashlib.sha256).digest()

    def issue(self, t: Ticket) -> str:
        payload = t.payload()
        return f"{_PREFIX}{_b64(payload)}.{_b64(self._mac(payload))}"

    def verify(self, text: str) -> Ticket:
        """The grant of a genuine ticket; :class:`TicketError` otherwise."""
        if not text:
            raise TicketError("missing shuffler ticket (SealedReport.ticket: the "
                              "Task.shuffle_ticket of the task)")
        if len(text) > MAX_TICKET_CHARS or not text.startswith(_PREFIX):
            raise TicketError("malformed shuffler ticket")
        parts = text[len(_PREFIX):].split(".")
        if len(parts) != 2:
            raise TicketError("malformed shuffler ticket")
        try:
            payload, mac = _unb64(parts[0]), _unb64(parts[1])
        except (binascii.Error, ValueError):
            raise TicketError("malformed shuffler ticket (bad base64)") from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise TicketError("invalid shuffler ticket (not issued by this shuffler's "
                              "collector)")
        try:
            obj = json.loads(payload)
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict) or obj.get("v") != 1 or obj.get("aud") != AUDIENCE:
            raise TicketError("malformed shuffler ticket payload")
        q, d = obj.get("q"), obj.get("d")
        nums = [obj.get(k) for k in ("p", "g", "s", "n")]
        if not (isinstance(q, str) and 0 < len(q) <= 64 and isinstance(d, str)
                and _HEX64.fullmatch(d) and all(_u32(v) for v in nums)):
            raise TicketError("malformed shuffler ticket payload")
        p, g, s, n = (int(v) for v in nums)  # type: ignore[arg-type]
        return Ticket(q, p, g, s, d, n)
