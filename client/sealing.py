"""Sealed reports (shuffle mode): a report encrypted to the collector's HPKE key.

See ``docs/device-protocol.md`` §16 and ``docs/privacy.md`` ("Shuffle mode"). A task whose
JSON carries ``"seal"`` asks for its report sealed with RFC 9180 HPKE (base mode, suite
DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / ChaCha20-Poly1305) to the collector's public
key, and sent to a shuffler instead of the collector:

* plaintext = one flags byte (bit 0: the report is ``simulated``; the other bits 0),
  then the report values as int64 little-endian — exactly ``1 + 8 · report_length``
  bytes, a function of public task parameters only (no length leak);
* info = ``"uldp-seal/1" 0x00`` ‖ u32be(len(query_id)) ‖ query_id (UTF-8) ‖ u32be(phase) ‖
  u32be(group) ‖ u32be(stage) ‖ the 32 bytes of the task digest: the key schedule is
  bound to the task, so a sealed report opens only as the report of that (query, phase,
  group, stage, task) and cannot be replayed into another;
* sealed = ``enc`` (32 bytes) ‖ ciphertext (plaintext + 16-byte tag):
  ``49 + 8 · report_length`` bytes.

The seal object is checked before anything is charged (refusal code ``seal``); the
device seals with ``cryptography``'s HPKE (a fresh ephemeral key per report). The sealed
bytes are what the ledger stores and every resend sends.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from uldp.client.hpke import AEAD_ID, KDF_ID, KEM_ID, BaseOpener
from uldp.client.taskspec import TaskRefused

__all__ = [
    "ENC_BYTES",
    "SEAL_FIELDS",
    "TAG_BYTES",
    "SealKey",
    "key_id_of",
    "open_plaintext",
    "open_reports",
    "parse_seal",
    "plaintext",
    "seal",
    "seal_info",
    "sealed_length",
    "suite",
]

ENC_BYTES = 32
TAG_BYTES = 16
INFO_TAG = b"uldp-seal/1\x00"
#: the fields of a task's ``seal`` object, all required
SEAL_FIELDS = ("aead_id", "kdf_id", "kem_id", "key_id", "public_key")
_HEX16 = re.compile(r"[0-9a-f]{16}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: the fixed scalar of the low-order check (any clamped scalar kills the 8-torsion)
_PROBE = bytes([0x40] + [0] * 30 + [0x40])


def suite() -> hpke.Suite:
    """The one HPKE suite of sealed reports, as ``cryptography`` names it."""
    return hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)


def key_id_of(public_key: bytes) -> str:
    """The key id of a raw X25519 public key: the first 16 lowercase hex digits of its
    SHA-256."""
    return hashlib.sha256(public_key).hexdigest()[:16]


@dataclass(frozen=True)
class SealKey:
    """The collector's public sealing key as a task carries it."""

    key_id: str
    public_key: bytes

    @classmethod
    def of(cls, public_key: bytes) -> SealKey:
        return cls(key_id_of(public_key), bytes(public_key))

    def to_json(self) -> dict[str, Any]:
        return {"kem_id": KEM_ID, "kdf_id": KDF_ID, "aead_id": AEAD_ID,
                "key_id": self.key_id, "public_key": self.public_key.hex()}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_seal(obj: Any) -> SealKey:
    """The key of a task's ``seal`` object; :class:`TaskRefused` (code ``seal``) unless it
    is exactly ``{kem_id: 32, kdf_id: 1, aead_id: 3, key_id, public_key}`` with a 64-hex
    public key that is not of low order and whose key id matches."""
    if not isinstance(obj, dict):
        raise TaskRefused("seal must be an object", code="seal")
    if sorted(obj) != sorted(SEAL_FIELDS):
        raise TaskRefused(f"seal must have exactly the fields {list(SEAL_FIELDS)}, got "
                          f"{sorted(obj)}", code="seal")
    got = (obj["kem_id"], obj["kdf_id"], obj["aead_id"])
    if not all(_is_int(v) for v in got) or got != (KEM_ID, KDF_ID, AEAD_ID):
        raise TaskRefused(f"unsupported HPKE suite {got!r}: this device seals with "
                          f"kem 0x0020, kdf 0x0001, aead 0x0003", code="seal")
    pk, kid = obj["public_key"], obj["key_id"]
    if not isinstance(pk, str) or not _HEX64.fullmatch(pk):
        raise TaskRefused("seal.public_key must be 64 lowercase hex digits", code="seal")
    raw = bytes.fromhex(pk)
    if not isinstance(kid, str) or not _HEX16.fullmatch(kid) or kid != key_id_of(raw):
        raise TaskRefused("seal.key_id is not the key id of seal.public_key", code="seal")
    try:
        shared = X25519PrivateKey.from_private_bytes(_PROBE).exchange(
            X25519PublicKey.from_public_bytes(raw))
    except ValueError:
        shared = bytes(32)
    if shared == bytes(32):
        raise TaskRefused("seal.public_key is a low-order point", code="seal")
    return SealKey(kid, raw)


def plaintext(values: Sequence[int] | np.ndarray, simulated: bool) -> bytes:
    """The sealed plaintext of a report: flags byte, then int64 little-endian values."""
    data = np.asarray(values, dtype="<i8").tobytes()
    return bytes([1 if simulated else 0]) + data


def open_plaintext(data: bytes) -> tuple[np.ndarray, bool] | None:
    """(values, simulated) of a plaintext, or None if it is malformed (unknown flag
    bits, a length that is not 1 + 8·L)."""
    if len(data) < 1 or (len(data) - 1) % 8 or data[0] & 0xFE:
        return None
    return np.frombuffer(data, dtype="<i8", offset=1), bool(data[0] & 1)


def seal_info(query_id: str, phase: int, group: int, stage: int, task_digest: str) -> bytes:
    """The HPKE ``info`` binding a sealed report to its task (module docstring)."""
    q = query_id.encode()
    return (INFO_TAG + struct.pack(">I", len(q)) + q + struct.pack(">III", phase, group, stage)
            + bytes.fromhex(task_digest))


def sealed_length(report_length: int) -> int:
    """Bytes of a sealed report of ``report_length`` values."""
    return ENC_BYTES + 1 + 8 * report_length + TAG_BYTES


def seal(key: SealKey, info: bytes, data: bytes) -> bytes:
    """``enc || ciphertext`` of ``data`` sealed to ``key`` (fresh ephemeral key)."""
    return suite().encrypt(data, X25519PublicKey.from_public_bytes(key.public_key), info=info)


def open_reports(private_key: bytes, info: bytes, length: int, limit: int,
                 allow_simulated: bool, sealed: Sequence[bytes]) -> list[bytes | None]:
    """The collector's half: the int64 little-endian payload of each sealed report of one
    task (``info``) under the raw X25519 private key, or None where it does not open or
    fails a report check (its size, the plaintext's form, ``length`` values each within
    ``[-limit, limit]``, a simulated report where ``allow_simulated`` is false). A plain
    function of bytes, so that a pool of processes can open a large batch in parallel;
    the checks run on the whole batch at once."""
    opener, want, size = BaseOpener(private_key, info), sealed_length(length), 1 + 8 * length
    flags = (0, 1) if allow_simulated else (0,)
    opened: list[int] = []
    body: list[bytes] = []
    for i, s in enumerate(sealed):
        if len(s) != want:
            continue
        try:
            pt = opener.open(s)
        except Exception:  # authentication failure, malformed enc: dropped
            continue
        if len(pt) == size and pt[0] in flags:
            opened.append(i)
            body.append(pt[1:])
    out: list[bytes | None] = [None] * len(sealed)
    if not opened:
        return out
    values = np.frombuffer(b"".join(body), dtype="<i8").reshape(len(opened), length)
    inside = np.asarray(((values >= -limit) & (values <= limit)).all(axis=1))  # no abs: -2⁶³
    for k, i in enumerate(opened):
        if inside[k]:
            out[i] = values[k].tobytes()
    return out
