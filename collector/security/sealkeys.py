"""The collector's HPKE key pairs for sealed reports (shuffle mode), kept by key id.

See ``docs/device-protocol.md`` §16 and ``docs/privacy.md`` ("Shuffle mode"). A query in
shuffle mode is created with the *current* key id; its tasks carry that key's public half
for the query's whole life, and the collector opens its reports with that key's private
half. :meth:`SealKeyring.rotate` makes a new current key for the queries created from then
on; older keys stay in the keyring so that no running query's reports are stranded.

The keys live in the collector's database (``uldp_meta``: ``seal_key:<key id>`` = the raw
32-byte X25519 private key in hex, ``seal_key_current`` = the current key id), like the
database-managed token signing key: replicas sharing the database share them. Nothing
but these private keys opens a sealed report.
"""

from __future__ import annotations

import threading
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from uldp.client.sealing import SealKey, key_id_of

__all__ = ["SealKeyring"]

_CURRENT = "seal_key_current"


def _hex(sk: X25519PrivateKey) -> str:
    return sk.private_bytes_raw().hex()


class SealKeyring:
    """The collector's sealing keys in its database (see the module docstring)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self._keys: dict[str, X25519PrivateKey] = {}
        self._lock = threading.Lock()

    def _store(self, sk: X25519PrivateKey) -> str:
        kid = key_id_of(sk.public_key().public_bytes_raw())
        self.db.get_or_create_meta(f"seal_key:{kid}", lambda: _hex(sk))
        return kid

    def current(self) -> SealKey:
        """The public half of the current key (created on first use)."""
        kid = self.db.get_meta(_CURRENT)
        if kid is None:  # first use: store a key, then make it current (two transactions;
            fresh = self._store(X25519PrivateKey.generate())  # a race leaves a spare key)
            kid = self.db.get_or_create_meta(_CURRENT, lambda: fresh)
        return self.public(kid)

    def rotate(self) -> SealKey:
        """Make a new key the current one; earlier keys stay usable by their queries."""
        sk = X25519PrivateKey.generate()
        kid = self._store(sk)
        self.db.set_meta(_CURRENT, kid)
        return self.public(kid)

    def private(self, key_id: str) -> X25519PrivateKey | None:
        """The private key of ``key_id`` (None if this collector has no such key)."""
        with self._lock:
            sk = self._keys.get(key_id)
        if sk is not None:
            return sk
        raw = self.db.get_meta(f"seal_key:{key_id}")
        if raw is None:
            return None
        sk = X25519PrivateKey.from_private_bytes(bytes.fromhex(raw))
        with self._lock:
            self._keys[key_id] = sk
        return sk

    def public(self, key_id: str) -> SealKey:
        sk = self.private(key_id)
        if sk is None:
            raise KeyError(f"no sealing key {key_id!r} in this collector's keyring")
        return SealKey.of(sk.public_key().public_bytes_raw())
