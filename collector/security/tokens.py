"""Signed, expiring device tokens (Ed25519) and the analyst admin credential.

Device token: ``base64url(payload) "." base64url(signature)`` where ``payload`` is compact
JSON ``{"v": 1, "sub": <device id>, "iat": <ms>, "exp": <ms>, "kid": <key id>}`` and the
signature is Ed25519 over the payload bytes. Any collector replica holding the public key
verifies a token without a database lookup; replicas that enroll devices share the
private key (a file mounted from a secret, or — for single-host setups — a key the first
collector stores in the database, see ``uldp.collector.storage``).

Admin credential: an opaque random string. The collector keeps only its SHA-256 and
compares in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "AdminAuth",
    "DeviceClaims",
    "TokenError",
    "TokenKey",
    "TokenVerifier",
    "new_admin_token",
]

TOKEN_VERSION = 1
_MAX_TOKEN_CHARS = 1024


class TokenError(Exception):
    """A token is malformed, forged or expired (maps to gRPC UNAUTHENTICATED)."""


@dataclass(frozen=True)
class DeviceClaims:
    device_id: str
    issued_at_ms: int
    expires_at_ms: int
    key_id: str


def _b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenVerifier:
    """Verifies device tokens with the collector's *public* key only: a party holding it
    (a shuffler, ``uldp.collector.shuffler``) can check a token, never make one.

    Verified tokens are cached (bounded LRU keyed by the token string, honouring the
    expiry) so that a device's GetTasks → SubmitReport sequence pays for one signature
    check."""

    def __init__(self, public_key: Ed25519PublicKey, cache_size: int = 200_000) -> None:
        self._pk = public_key
        raw = self._pk.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = hashlib.sha256(raw).hexdigest()[:16]
        self._cache: OrderedDict[str, DeviceClaims] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @classmethod
    def from_public_pem(cls, data: bytes) -> TokenVerifier:
        key = serialization.load_pem_public_key(data)
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("the token verification key must be an Ed25519 public key")
        return cls(key)

    def public_pem(self) -> bytes:
        """The verification key as PEM (SubjectPublicKeyInfo), for a shuffler."""
        return self._pk.public_bytes(serialization.Encoding.PEM,
                                     serialization.PublicFormat.SubjectPublicKeyInfo)

    def _remember(self, token: str, claims: DeviceClaims) -> None:
        with self._lock:
            self._cache[token] = claims
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def verify(self, token: str, *, now_ms: int | None = None,
               allow_expired: bool = False) -> DeviceClaims:
        """The claims of a genuine, unexpired token; :class:`TokenError` otherwise."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            claims = self._cache.get(token)
            if claims is not None:
                self._cache.move_to_end(token)
        if claims is None:
            claims = self._check_signature(token)
            self._remember(token, claims)
        if not allow_expired and now_ms >= claims.expires_at_ms:
            raise TokenError("device token expired; enroll again (pass the old token)")
        return claims

    def _check_signature(self, token: str) -> DeviceClaims:
        if not token or len(token) > _MAX_TOKEN_CHARS or token.count(".") != 1:
            raise TokenError("malformed device token")
        p64, s64 = token.split(".")
        try:
            payload, sig = _b64d(p64), _b64d(s64)
        except (ValueError, UnicodeError) as exc:
            raise TokenError("malformed device token (bad base64)") from exc
        try:
            self._pk.verify(sig, payload)
        except InvalidSignature as exc:
            raise TokenError("invalid device token signature") from exc
        try:
            obj = json.loads(payload)
            if obj.get("v") != TOKEN_VERSION:
                raise TokenError(f"unsupported device token version {obj.get('v')!r}")
            return DeviceClaims(str(obj["sub"]), int(obj["iat"]), int(obj["exp"]),
                                str(obj.get("kid", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise TokenError("malformed device token payload") from exc


class TokenKey(TokenVerifier):
    """An Ed25519 key pair that issues and verifies device tokens. A token this key
    issued enters the verification cache when it is issued (its signature is genuine by
    construction), so it is never verified in the process that signed it."""

    def __init__(self, private_key: Ed25519PrivateKey, cache_size: int = 200_000) -> None:
        super().__init__(private_key.public_key(), cache_size)
        self._sk = private_key

    # ---- key material ---------------------------------------------------------------
    @classmethod
    def generate(cls) -> TokenKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes) -> TokenKey:
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("the token signing key must be an Ed25519 private key")
        return cls(key)

    @classmethod
    def from_file(cls, path: str | Path) -> TokenKey:
        return cls.from_pem(Path(path).read_bytes())

    def private_pem(self) -> bytes:
        return self._sk.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())

    # ---- tokens ---------------------------------------------------------------------
    def issue(self, device_id: str, ttl_seconds: float,
              now_ms: int | None = None) -> tuple[str, int]:
        """A token for ``device_id`` valid ``ttl_seconds``; returns (token, expiry ms)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        exp = now_ms + int(ttl_seconds * 1000)
        payload = json.dumps({"v": TOKEN_VERSION, "sub": device_id, "iat": now_ms, "exp": exp,
                              "kid": self.key_id}, separators=(",", ":"), sort_keys=True).encode()
        token = _b64e(payload) + "." + _b64e(self._sk.sign(payload))
        self._remember(token, DeviceClaims(device_id, now_ms, exp, self.key_id))
        return token, exp


def new_admin_token() -> str:
    """A fresh random admin credential (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


class AdminAuth:
    """Checks the analyst credential; stores only its SHA-256."""

    def __init__(self, token: str) -> None:
        token = token.strip()
        if len(token) < 16:
            raise ValueError("the admin token must have at least 16 characters")
        self._digest = hashlib.sha256(token.encode()).digest()

    @classmethod
    def from_file(cls, path: str | Path) -> AdminAuth:
        return cls(Path(path).read_text())

    def check(self, presented: str | None) -> bool:
        if not presented:
            return False
        return hmac.compare_digest(hashlib.sha256(presented.encode()).digest(), self._digest)
