"""Who may enrol, and how fast: rate limits per network address and per credential, and
the enrolment verifier.

See ``docs/privacy.md`` ("Sybil identities") and ``proto/uldp/v1/device.proto``
(``Enroll``). Every enrolment without a previous token is a new identity, and an
identity takes a slot of every query over a dataset it names. These limits bound how
many identities one caller can make:

* **per network address** (``--enroll-peer-limit``): every Enroll call and every
  EnrollBatch item from one address (IPv4 address, IPv6 /64) counts, renewals too; a call
  the bucket cannot take whole is refused whole (RESOURCE_EXHAUSTED), nothing happens;
* **per credential** (``--enroll-credential-limit``): every new identity counts against
  its credential — the subject an app attestation names when the collector verifies
  them (``uldp.collector.security.attestation``), else the enrollment secret (one
  credential for the fleet).

A limit ``N/T`` is a token bucket: at most N at once, refilled at N per T. The buckets live
in the replica's memory (N replicas admit up to N times as much; a restart refills them),
at most :data:`MAX_KEYS` of them, least recently used dropped first.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from uldp.collector.security.attestation import AttestationRefused, EnrolmentVerifier
from uldp.collector.service.errors import ServiceError

__all__ = ["DEFAULT_ATTESTED_LIMIT", "DEFAULT_CREDENTIAL_LIMIT", "DEFAULT_PEER_LIMIT",
           "MAX_KEYS", "EnrolmentPolicy", "RateLimit", "TokenBuckets", "peer_key"]

log = logging.getLogger("uldp.collector")

#: buckets kept per limit, at most
MAX_KEYS = 100_000
#: seconds between two log lines about refusals of one limit (a flood logs few lines)
LOG_EVERY_S = 10.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_LIMIT = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([smhd])\s*$")


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` at once, refilled at ``count`` per ``period_s`` seconds."""

    count: int
    period_s: float

    @property
    def rate(self) -> float:
        return self.count / self.period_s

    @classmethod
    def parse(cls, text: str) -> RateLimit | None:
        """``"N/T"`` with T a duration (``250s``, ``10m``, ``1h``, ``d``); ``off``: None."""
        if text.strip().lower() == "off":
            return None
        m = _LIMIT.match(text)
        if not m or int(m.group(1)) < 1 or float(m.group(2) or 1) <= 0:
            raise ValueError(f"{text!r}: give N/T, e.g. 25000/250s, 3/1d (units s, m, h, d), "
                             "or off")
        return cls(int(m.group(1)), float(m.group(2) or 1) * _UNITS[m.group(3)])

    def __str__(self) -> str:
        p = self.period_s
        for unit, s in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
            if p >= s and p % s == 0:
                return f"{self.count}/{p / s:g}{unit}"
        return f"{self.count}/{p:g}s"


#: every enrolment from one network address: a 20 000-device demo or gateway fleet
#: enrols at once, then 100 per second
DEFAULT_PEER_LIMIT = RateLimit(25_000, 250.0)
#: new identities per enrollment secret (the fleet's one credential): 1000 per second
DEFAULT_CREDENTIAL_LIMIT = RateLimit(100_000, 100.0)
#: new identities per attested subject (an app user or install): 3, then 3 a day
DEFAULT_ATTESTED_LIMIT = RateLimit(3, 86400.0)


class TokenBuckets:
    """One token bucket per key, all with ``limit``; thread-safe."""

    def __init__(self, limit: RateLimit, max_keys: int = MAX_KEYS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str, n: int = 1) -> float:
        """Take ``n`` tokens from ``key``'s bucket: 0.0 if taken, else the seconds until
        the bucket could take them (nothing is taken; inf if it never can)."""
        cap, rate = float(self.limit.count), self.limit.rate
        with self._lock:
            now = self._clock()
            tokens, then = self._buckets.pop(key, (cap, now))
            tokens = min(cap, tokens + (now - then) * rate)
            wait = 0.0 if tokens >= n else (float("inf") if n > cap else (n - tokens) / rate)
            if wait == 0.0:
                tokens -= n
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            return wait


def peer_key(peer: str) -> str:
    """The rate-limit key of a caller named as gRPC names peers: the IPv4 address of
    ``ipv4:1.2.3.4:5678``, the /64 prefix of ``ipv6:[2001:db8::1]:5678``, else the name."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return "ipv4:" + rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        import ipaddress

        addr = rest.rsplit(":", 1)[0].strip("[]").split("%")[0]
        try:
            net = ipaddress.ip_network(f"{addr}/64", strict=False)
        except ValueError:
            return peer
        return f"ipv6:{net}"
    return peer


def _retry(wait: float) -> str:
    if wait == float("inf"):
        return "the call asks for more than it takes at once: send fewer per call"
    return f"retry in {max(1, round(wait))} s"


class EnrolmentPolicy:
    """The rate limits and the verifier of one replica (see the module docstring)."""

    def __init__(self, peer_limit: RateLimit | None, credential_limit: RateLimit | None,
                 verifier: EnrolmentVerifier | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.verifier = verifier
        self.peers = TokenBuckets(peer_limit, clock=clock) if peer_limit else None
        self.credentials = (TokenBuckets(credential_limit, clock=clock)
                            if credential_limit else None)
        self._clock = clock
        #: limit name -> (refusals not logged yet, when the last line was logged)
        self._refused: dict[str, tuple[int, float]] = {}
        self._log_lock = threading.Lock()

    def _note(self, limit: str, key: str) -> None:
        """Log refusals by ``limit``: at most one line per LOG_EVERY_S, with the count."""
        with self._log_lock:
            n, last = self._refused.get(limit, (0, float("-inf")))
            now = self._clock()
            if now - last < LOG_EVERY_S:
                self._refused[limit] = (n + 1, last)
                return
            self._refused[limit] = (0, now)
        log.warning("enrolment refused by the %s rate limit (%s; %d more refusals since "
                    "the last line)", limit, key, n)

    def admit_call(self, peer: str, n: int) -> None:
        """Refuse (RESOURCE_EXHAUSTED) a call of ``n`` enrolments from ``peer`` that its
        address's bucket cannot take whole; nothing is taken then."""
        if self.peers is None or n == 0:
            return
        key = peer_key(peer)
        wait = self.peers.take(key, n)
        if wait:
            self._note("network address", key)
            raise ServiceError("RESOURCE_EXHAUSTED", "enrolment rate limit of this network "
                               f"address reached ({self.peers.limit}); {_retry(wait)}")

    def credential(self, secret: str, attestation: str) -> str:
        """The credential a new identity counts against: the attested subject (when a
        verifier is configured; UNAUTHENTICATED if it refuses), else the secret."""
        if self.verifier is not None:
            try:
                return "attested:" + self.verifier.verify(attestation)
            except AttestationRefused as exc:
                raise ServiceError("UNAUTHENTICATED", str(exc)) from None
        return "secret:" + hashlib.sha256(secret.encode()).hexdigest()[:16]

    def admit_identity(self, credential: str) -> None:
        """Refuse (RESOURCE_EXHAUSTED) a new identity its credential's bucket cannot take."""
        if self.credentials is None:
            return
        wait = self.credentials.take(credential)
        if wait:
            self._note("credential", credential[:48])
            raise ServiceError("RESOURCE_EXHAUSTED", "enrolment rate limit of this "
                               f"credential reached ({self.credentials.limit}); "
                               f"{_retry(wait)}")
