"""RFC 9180 HPKE, base mode, for the one suite sealed reports use — with an explicit
ephemeral key, for conformance vectors and tests only.

Suite: DHKEM(X25519, HKDF-SHA256) (kem_id 0x0020), HKDF-SHA256 (kdf_id 0x0001),
ChaCha20-Poly1305 (aead_id 0x0003); single-shot ``Seal`` (sequence number 0). See
``docs/device-protocol.md`` §16.

A production device never uses :func:`seal_with_ephemeral`: it seals with
``cryptography``'s maintained ``hpke.Suite`` (``uldp.client.sealing.seal``), whose
ephemeral key is fresh from the OS for every report, and the collector opens with the
same library. This module exists so that the conformance vectors (``seal.json``) can fix
the ephemeral key and every SDK can be checked byte for byte; its output is checked
against RFC 9180 Appendix A.2.1 and opened by ``cryptography``'s ``Suite.decrypt`` in
``tests/shuffle/test_sealing.py``.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

__all__ = ["AEAD_ID", "KDF_ID", "KEM_ID", "seal_with_ephemeral"]

KEM_ID, KDF_ID, AEAD_ID = 0x0020, 0x0001, 0x0003
_KEM_SUITE = b"KEM" + KEM_ID.to_bytes(2, "big")
_HPKE_SUITE = b"HPKE" + KEM_ID.to_bytes(2, "big") + KDF_ID.to_bytes(2, "big") + \
    AEAD_ID.to_bytes(2, "big")


def _extract(salt: bytes, ikm: bytes) -> bytes:
    return hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()


def _expand(prk: bytes, info: bytes, length: int) -> bytes:
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        out += block
        i += 1
    return out[:length]


def _labeled_extract(suite: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return _extract(salt, b"HPKE-v1" + suite + label + ikm)


def _labeled_expand(suite: bytes, prk: bytes, label: bytes, info: bytes, length: int
                    ) -> bytes:
    return _expand(prk, length.to_bytes(2, "big") + b"HPKE-v1" + suite + label + info,
                   length)


def seal_with_ephemeral(public_key: bytes, info: bytes, aad: bytes, plaintext: bytes,
                        ephemeral_private_key: bytes) -> bytes:
    """``enc || ciphertext`` of RFC 9180 ``SealBase`` with the given ephemeral X25519
    private key (32 raw bytes) instead of a fresh one. Tests and vectors only."""
    sk_e = X25519PrivateKey.from_private_bytes(ephemeral_private_key)
    enc = sk_e.public_key().public_bytes_raw()
    dh = sk_e.exchange(X25519PublicKey.from_public_bytes(public_key))
    eae_prk = _labeled_extract(_KEM_SUITE, b"", b"eae_prk", dh)
    shared = _labeled_expand(_KEM_SUITE, eae_prk, b"shared_secret", enc + public_key, 32)
    context = (b"\x00" + _labeled_extract(_HPKE_SUITE, b"", b"psk_id_hash", b"")
               + _labeled_extract(_HPKE_SUITE, b"", b"info_hash", info))
    secret = _labeled_extract(_HPKE_SUITE, shared, b"secret", b"")
    key = _labeled_expand(_HPKE_SUITE, secret, b"key", context, 32)
    nonce = _labeled_expand(_HPKE_SUITE, secret, b"base_nonce", context, 12)
    return enc + ChaCha20Poly1305(key).encrypt(nonce, plaintext, aad or None)
