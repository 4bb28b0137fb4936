"""RFC 9180 HPKE, base mode, for the one suite sealed reports use — with an explicit
ephemeral key, for conformance vectors and tests only.

Suite: DHKEM(X25519, HKDF-SHA256) (kem_id 0x0020), HKDF-SHA256 (kdf_id 0x0001),
ChaCha20-Poly1305 (aead_id 0x0003); single-shot ``Seal`` (sequence number 0). See
``docs/device-protocol.md`` §16.

A production device never uses :func:`seal_with_ephemeral`: it seals with
``cryptography``'s maintained ``hpke.Suite`` (``uldp.client.sealing.seal``), whose
ephemeral key is fresh from the OS for every report. This module exists so that the
conformance vectors (``seal.json``) can fix the ephemeral key and every SDK can be checked
byte for byte; its output is checked against RFC 9180 Appendix A.2.1 and opened by
``cryptography``'s ``Suite.decrypt`` in ``tests/shuffle/test_sealing.py``.

:class:`BaseOpener` is the collector's ``OpenBase`` of a batch: the same key schedule,
with what is fixed for a batch (the recipient's public key, ``psk_id_hash``,
``info_hash``) computed once and HMAC-SHA256 from ``hashlib`` (the X25519 and the AEAD are
``cryptography``'s); a report opens with it exactly when ``Suite.decrypt`` opens it, to the
same bytes (``tests/shuffle/test_sealing.py``).
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

__all__ = ["AEAD_ID", "KDF_ID", "KEM_ID", "BaseOpener", "seal_with_ephemeral"]

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


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))
_ENC = 32  # Nenc of DHKEM(X25519)


def _pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's inner and outer key blocks of ``key`` (at most 64 bytes here)."""
    k = key.ljust(64, b"\0")
    return k.translate(_IPAD), k.translate(_OPAD)


def _hmac(pads: tuple[bytes, bytes], msg: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of ``msg`` under the key whose :func:`_pads` are given."""
    return hashlib.sha256(pads[1] + hashlib.sha256(pads[0] + msg).digest()).digest()


class BaseOpener:
    """RFC 9180 single-shot ``OpenBase`` (sequence number 0, empty aad) of reports sealed
    to one X25519 key under one ``info``. Per report: the DH with its ``enc``, then
    ``eae_prk``, ``shared_secret``, ``secret``, ``key`` and ``base_nonce`` (five HMACs)
    and the AEAD; the rest of the key schedule is the batch's."""

    def __init__(self, private_key: bytes, info: bytes) -> None:
        self._sk = X25519PrivateKey.from_private_bytes(private_key)
        self._pk = self._sk.public_key().public_bytes_raw()
        context = (b"\x00" + _labeled_extract(_HPKE_SUITE, b"", b"psk_id_hash", b"")
                   + _labeled_extract(_HPKE_SUITE, b"", b"info_hash", info))
        self._salt0 = _pads(bytes(32))  # Extract with an empty salt
        self._eae = b"HPKE-v1" + _KEM_SUITE + b"eae_prk"
        self._shared = (b"\x00\x20HPKE-v1" + _KEM_SUITE + b"shared_secret", self._pk + b"\x01")
        self._secret = b"HPKE-v1" + _HPKE_SUITE + b"secret"  # psk = ""
        self._key = b"\x00\x20HPKE-v1" + _HPKE_SUITE + b"key" + context + b"\x01"
        self._nonce = b"\x00\x0cHPKE-v1" + _HPKE_SUITE + b"base_nonce" + context + b"\x01"

    def open(self, sealed: bytes) -> bytes:
        """The plaintext of ``enc || ciphertext``; raises (``ValueError`` for a bad or
        low-order ``enc``, ``cryptography.exceptions.InvalidTag`` for a forgery) if it
        does not open."""
        if len(sealed) < _ENC + 16:
            raise ValueError("a sealed report is at least enc and a tag")
        enc = sealed[:_ENC]
        dh = self._sk.exchange(X25519PublicKey.from_public_bytes(enc))  # 0: ValueError
        eae_prk = _hmac(self._salt0, self._eae + dh)
        head, tail = self._shared
        shared = _hmac(_pads(eae_prk), head + enc + tail)
        secret = _pads(_hmac(_pads(shared), self._secret))
        key = _hmac(secret, self._key)
        nonce = _hmac(secret, self._nonce)[:12]
        return ChaCha20Poly1305(key).decrypt(nonce, sealed[_ENC:], None)
