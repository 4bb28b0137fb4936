"""Conformance vectors of sealed reports (``conformance/v1/seal.json``, protocol §16).

Each case fixes the collector's X25519 key pair, the report (values, ``simulated``), the
task it belongs to (query, phase, group, stage, digest) and — for reproducibility only —
the HPKE ephemeral private key. An SDK must produce the same ``info``, ``plaintext`` and
``sealed`` bytes; the recipient private key lets it (and ``tests/shuffle``) open them.
Production devices never fix the ephemeral key (``uldp.client.sealing.seal``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from uldp.client.hpke import seal_with_ephemeral
from uldp.client.sealing import SealKey, plaintext, seal_info, sealed_length

__all__ = ["SEAL_FILES"]


def _key(label: str) -> bytes:
    return hashlib.sha256(f"uldp-conformance:seal:{label}".encode()).digest()


def _case(name: str, query_id: str, phase: int, group: int, stage: int, values: list[int],
          simulated: bool, i: int) -> dict[str, Any]:
    sk = X25519PrivateKey.from_private_bytes(_key(f"recipient:{i % 2}"))
    pk = sk.public_key().public_bytes_raw()
    eph = _key(f"ephemeral:{i}")
    digest = hashlib.sha256(f"task {i}".encode()).hexdigest()
    info = seal_info(query_id, phase, group, stage, digest)
    pt = plaintext(values, simulated)
    sealed = seal_with_ephemeral(pk, info, b"", pt, eph)
    assert len(sealed) == sealed_length(len(values))
    return {"name": name, "seal": SealKey.of(pk).to_json(),
            "recipient_private_key": sk.private_bytes_raw().hex(),
            "ephemeral_private_key": eph.hex(), "query_id": query_id, "phase": phase,
            "group": group, "stage": stage, "task_digest": digest,
            "values": [str(v) for v in values], "simulated": simulated,
            "info": info.hex(), "plaintext": pt.hex(), "sealed": sealed.hex()}


def seal() -> dict[str, Any]:
    big = (1 << 40)
    rows = [
        ("one-value", "q-mean", 2, 0, 2, [12345], False),
        ("simulated", "q-mean", 2, 0, 2, [-7], True),
        ("stage1-bins", "q-dist-7", 1, 3, 1, [0, 1, -1, 2, 0, 0, 5, -3], False),
        ("extremes", "q-x", 1, 0, 0, [big, -big, 0, 1, -1, (1 << 31), -(1 << 31)], False),
        ("u32-routing", "q", 4294967295, 4294967295, 4294967295, [3, 4], True),
        ("unicode-query", "q-\u00e9t\u00e9-\u2211", 3, 1, 2, [9, -9, 99], False),
        ("long-report", "q-long", 1, 2, 1, [(k * 7919) % 201 - 100 for k in range(300)],
         False),
    ]
    cases = [_case(*row, i) for i, row in enumerate(rows)]
    return {"description": "sealed reports (shuffle mode, protocol §16): info, plaintext "
                           "(flags byte, then int64 little-endian values) and "
                           "enc || ciphertext of RFC 9180 base mode, DHKEM(X25519, "
                           "HKDF-SHA256) / HKDF-SHA256 / ChaCha20-Poly1305, empty aad, with "
                           "the ephemeral private key fixed for reproducibility",
            "cases": cases}


SEAL_FILES = {"seal": seal}


def seal_object(label: str = "refusals") -> dict[str, Any]:
    """A valid task ``seal`` object (a fixed key pair)."""
    sk = X25519PrivateKey.from_private_bytes(_key(f"recipient:{label}"))
    return SealKey.of(sk.public_key().public_bytes_raw()).to_json()


def seal_refusals(base: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Refusal cases of shuffle-mode tasks (protocol §14.1): ``base`` with a seal object,
    on a device with (``shuffler``) or without a shuffler, the task carrying a shuffler
    ticket unless ``ticket`` is ""."""
    ok = seal_object()
    zero = {**ok, "public_key": "00" * 32,
            "key_id": hashlib.sha256(bytes(32)).hexdigest()[:16]}
    yes = {"shuffler": True}

    def w(**change: Any) -> dict[str, Any]:
        return {**base, "seal": {**ok, **change}}
    return [
        ("seal-accepted", {**base, "seal": ok}, yes),
        ("seal-no-shuffler", {**base, "seal": ok}, {}),
        ("seal-no-ticket", {**base, "seal": ok}, {"shuffler": True, "ticket": ""}),
        ("seal-not-object", {**base, "seal": 5}, yes),
        ("seal-null", {**base, "seal": None}, yes),
        ("seal-field-missing", {**base, "seal": {k: v for k, v in ok.items()
                                                 if k != "kdf_id"}}, yes),
        ("seal-field-unknown", w(shuffler="x"), yes),
        ("seal-suite-aes", w(aead_id=1), yes),
        ("seal-suite-bool", w(kdf_id=True), yes),
        ("seal-key-uppercase", w(public_key=ok["public_key"].upper()), yes),
        ("seal-key-short", w(public_key=ok["public_key"][:62]), yes),
        ("seal-key-id-mismatch", w(key_id="0" * 16), yes),
        ("seal-low-order-key", {**base, "seal": zero}, yes),
        ("seal-before-dataset", {**base, "seal": {**ok, "aead_id": 1}},
         {"shuffler": True, "dataset": "other"}),
        ("seal-after-over-budget", {**base, "seal": {**ok, "aead_id": 1}, "eps_c": 5.0},
         yes),
    ]
