"""The closing lease: which replica aggregates a phase, and how another takes over.

A replica claims a due phase with ``Database.begin_close`` (phase state ``closing``,
``closer`` = its *incarnation id*, ``lease_until_ms`` = now + lease). While it aggregates,
a :class:`LeaseKeeper` thread renews the lease every third of its length; if a renewal
finds the lease held by someone else, the closer stops (:class:`LeaseLost`) without
publishing or failing anything. ``Database.finish_close`` is conditional on still being
the holder, so a phase is closed exactly once whatever the timing.

Takeover: a replica killed mid-close stops renewing, so its lease runs out within one
lease length and any replica's ticker claims the phase again. A replica restarted under
the same name frees the leases of its earlier incarnations at start-up
(``Database.expire_leases``): they cannot still be working. The incarnation id is
``<name>#<8 random hex digits>``, so a restart is a different holder even with the same
name, and two live replicas misconfigured with one name still never both finish a close.
"""

from __future__ import annotations

import logging
import secrets
import threading
from types import TracebackType
from typing import Any

__all__ = ["LeaseKeeper", "LeaseLost", "closer_id", "closer_name", "owned_by"]

log = logging.getLogger("uldp.collector")

#: characters of a replica name kept in the closer column (String(128) with the suffix)
_NAME_CHARS = 100


class LeaseLost(Exception):
    """Another replica holds the closing lease now; stop without publishing."""


def closer_id(name: str) -> str:
    """A fresh incarnation id of the replica called ``name``."""
    return f"{name[:_NAME_CHARS]}#{secrets.token_hex(4)}"


def closer_name(closer: str) -> str:
    """The replica name of a closer id (ids written before incarnations are names)."""
    return closer.rsplit("#", 1)[0] if "#" in closer else closer


def owned_by(name: str) -> Any:
    """Predicate: a closer id belongs to (an incarnation of) the replica ``name``."""
    short = name[:_NAME_CHARS]
    return lambda closer: closer_name(closer) == short


class LeaseKeeper:
    """Renews ``closer``'s lease on (query, phase) from a thread while the ``with`` block
    runs; :meth:`check` raises :class:`LeaseLost` once a renewal found it gone."""

    def __init__(self, db: Any, query_id: str, phase: int, closer: str,
                 lease_ms: int) -> None:
        self.db = db
        self.query_id, self.phase, self.closer = query_id, phase, closer
        self.lease_ms = lease_ms
        self.renewals = 0
        self._lost = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"uldp-lease-{query_id}-{phase}")

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join(timeout=max(1.0, self.lease_ms / 1000))

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        """Raise :class:`LeaseLost` if another replica took the phase over."""
        if self._lost.is_set():
            raise LeaseLost(f"phase {self.phase} of query {self.query_id} was taken over "
                            f"by another replica")

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (the tests' slow-close hook), stopping early if lost."""
        if self._lost.wait(seconds):
            self.check()

    def _run(self) -> None:
        interval = self.lease_ms / 3000
        while not self._done.wait(interval):
            try:
                held = self.db.renew_lease(self.query_id, self.phase, self.closer,
                                           self.lease_ms)
            except Exception as exc:  # database briefly unavailable: try again
                log.warning("renewing the closing lease of query %s phase %d: %s",
                            self.query_id, self.phase, exc)
                continue
            if not held:
                self._lost.set()
                return
            self.renewals += 1
