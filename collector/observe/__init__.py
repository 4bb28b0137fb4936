"""Operating the collector: Prometheus metrics, call observation, JSON logs.

See ``docs/operations.md``. :func:`metrics_of` gives a replica's metrics,
:func:`instrument` observes a servicer's calls (both ports),
:class:`DatabaseGauges` reads the shared state at scrape time, and
:func:`configure_logging` sets up plain or JSON logs. The ``/metrics`` endpoint itself is
part of the HTTP port (``uldp.collector.http.metrics``).
"""

from uldp.collector.observe.calls import instrument
from uldp.collector.observe.gauges import DatabaseGauges
from uldp.collector.observe.logs import JsonFormatter, configure_logging
from uldp.collector.observe.metrics import CollectorMetrics, metrics_of

__all__ = ["CollectorMetrics", "DatabaseGauges", "JsonFormatter", "configure_logging",
           "instrument", "metrics_of"]
