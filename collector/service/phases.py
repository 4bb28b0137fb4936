"""A short-lived cache of each query's phase rows, and what the closed phases published.

See ``docs/architecture.md`` ("Service"). The writer re-checks the phase state under the
phase-row lock before it commits a report, so a stale answer from this cache can delay a
report, never corrupt anything.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from uldp.collector.programs import PublishedPhases
from uldp.collector.service.errors import ServiceError
from uldp.collector.storage.db import Database

__all__ = ["PhaseView"]


class PhaseView:
    """Phase rows per query, cached for :attr:`CACHE_S` seconds."""

    CACHE_S = 0.25

    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: dict[str, tuple[float, dict[int, dict[str, Any]]]] = {}
        self._lock = threading.Lock()

    def rows(self, query_id: str, fresh: bool = False) -> dict[int, dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(query_id)
        if hit is not None and not fresh and now - hit[0] < self.CACHE_S:
            return hit[1]
        rows = {r["phase"]: r for r in self.db.get_phases(query_id)}
        with self._lock:  # never let an older read replace a newer one
            cur = self._cache.get(query_id)
            if cur is None or cur[0] <= now:
                self._cache[query_id] = (now, rows)
        return rows

    def forget(self, query_id: str) -> None:
        with self._lock:
            self._cache.pop(query_id, None)

    def published_before(self, query_id: str, phase: int) -> PublishedPhases:
        """Published JSON of phases ``1 .. phase-1`` (all closed once ``phase`` is open)."""
        rows = self.rows(query_id)
        if any(not (rows.get(p) or {}).get("published_json") for p in range(1, phase)):
            rows = self.rows(query_id, fresh=True)
        out: PublishedPhases = {}
        for p in range(1, phase):
            text = (rows.get(p) or {}).get("published_json")
            if not text:
                raise ServiceError("FAILED_PRECONDITION",
                                   f"phase {phase} of query {query_id} is not open yet")
            out[p] = json.loads(text)
        return out
