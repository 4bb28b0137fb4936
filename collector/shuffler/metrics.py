"""The shuffler's Prometheus metrics (``GET /metrics`` on ``uldp shuffler serve --http-port``).

See ``docs/operations.md`` ("The shuffler's metrics") and ``docs/privacy.md`` §7. Every
series is an aggregate over the whole shuffler — no query id, no slot, no subject, no
time finer than the scrape — read from the store at scrape time (at most once per
``cache_s``) and from the service's counters:

* ``uldp_shuffler_reports{state}``: ``admitted`` (every report admitted, ever),
  ``waiting`` (not yet in a batch), ``batched`` (drawn, not yet answered by the
  collector), ``forwarded`` (in batches the collector acknowledged), ``dropped`` (their
  phase closed before they made a batch of the minimum size);
* ``uldp_shuffler_batches{state}``: ``forwarding``, ``forwarded``, ``refused``;
* ``uldp_shuffler_refusals_total{code}``: reports refused by the checks of
  ``shuffler.proto``, by gRPC status name (UNAUTHENTICATED = a bad ticket or attestation);
* ``uldp_shuffler_collector_polls_total``: GetShuffleQuery calls to the collector;
* ``uldp_shuffler_reports_checked_in_pool_total``: reports whose checks 1 to 5 ran in the
  shuffler's checking processes (``--checkers``; the rest ran in the gRPC threads);
* ``uldp_shuffler_enrolment_check``: 1 when the shuffler runs its own enrolment check
  (without one, no result counts its reports towards an amplified ε).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["ShufflerMetrics"]


class ShufflerMetrics(Collector):
    """A Prometheus collector over a running shuffler's store, servicer and forwarder."""

    def __init__(self, store: Any, servicer: Any, forwarder: Any, link: Any,
                 cache_s: float = 5.0) -> None:
        self.store, self.servicer, self.forwarder, self.link = store, servicer, forwarder, link
        self.cache_s = cache_s
        self._cached: tuple[float, dict[str, int]] = (-1e9, {})
        self._lock = threading.Lock()

    def _counts(self) -> dict[str, int]:
        with self._lock:
            t, counts = self._cached
            if time.monotonic() - t >= self.cache_s:
                counts = self.store.counts()
                self._cached = (time.monotonic(), counts)
        return counts

    def collect(self) -> Iterator[Any]:
        c = self._counts()
        reports = GaugeMetricFamily("uldp_shuffler_reports", "Reports by state (see the "
                                    "module docstring)", labels=["state"])
        reports.add_metric(["admitted"], c.get("admitted", 0))
        reports.add_metric(["waiting"], c.get("pending", 0))
        reports.add_metric(["batched"], c.get("reports_forwarding", 0))
        reports.add_metric(["forwarded"], c.get("reports_forwarded", 0))
        reports.add_metric(["dropped"], c.get("dropped", 0))
        yield reports
        batches = GaugeMetricFamily("uldp_shuffler_batches", "Batches drawn, by state",
                                    labels=["state"])
        for state in ("forwarding", "forwarded", "refused"):
            batches.add_metric([state], c.get(f"batches_{state}", 0))
        yield batches
        refused = CounterMetricFamily("uldp_shuffler_refusals", "Reports refused by the "
                                      "shuffler's checks, by gRPC status", labels=["code"])
        for code, n in sorted(dict(self.servicer.refused).items()):
            refused.add_metric([code], n)
        yield refused
        yield CounterMetricFamily("uldp_shuffler_collector_polls", "GetShuffleQuery calls "
                                  "to the collector", value=self.link.polls)
        yield CounterMetricFamily("uldp_shuffler_reports_checked_in_pool", "Reports whose "
                                  "ticket and attestation were checked in the shuffler's "
                                  "checking processes (--checkers)",
                                  value=self.servicer.checkers.pooled)
        yield GaugeMetricFamily("uldp_shuffler_enrolment_check", "1 when the shuffler runs "
                                "its own enrolment check", value=int(bool(
                                    self.servicer.verifier_name)))
