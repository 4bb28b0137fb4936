"""The collector's logs: plain lines, or one JSON object per line (``--log-format json``).

See ``docs/operations.md`` ("Logs"). A JSON line has ``ts`` (UTC, ISO 8601 with
milliseconds), ``level``, ``logger``, ``msg`` and ``replica``, plus the fields of an
access record (``call``, ``code``, ``ms``, ``front``: ``uldp.collector.observe.calls``)
and ``exc`` for a traceback. With ``--log-format json`` every call gets an access record
(unless ``--log-level`` is above info); in plain format the access log is off unless
``--log-level debug``.

What is never logged: a report's values, a token or secret, a request's content. The
collector's own log lines name queries, phases, counts and peers; database errors are
logged without their SQL parameters (the engine hides them,
``uldp.collector.storage.db``).

Under a flood (connections that never send a request, undecodable requests, a database
going away) the same line would be written thousands of times a second: the
:class:`RateLimit` filter lets each kind of line (logger, level and message template)
through in a burst of :attr:`RateLimit.burst`, then :attr:`RateLimit.per_second` a
second, and the next line of that kind that passes says how many were suppressed
(``[N similar lines suppressed]``; field ``suppressed`` in JSON). Access records
(``uldp.collector.access``, one per call by the operator's choice) are not limited.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

__all__ = ["ACCESS_FIELDS", "JsonFormatter", "RateLimit", "configure_logging"]

#: the extra fields of an access record
ACCESS_FIELDS = ("call", "code", "ms", "front")
PLAIN = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def __init__(self, replica: str | None = None) -> None:
        super().__init__()
        self.replica = replica

    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created)
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        if self.replica:
            out["replica"] = self.replica
        for key in (*ACCESS_FIELDS, "suppressed"):
            if key in record.__dict__:
                out[key] = record.__dict__[key]
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class RateLimit(logging.Filter):
    """At most ``burst`` lines of one kind at once, then ``per_second`` a second (see the
    module docstring); at most ``kinds`` kinds are tracked (the least recent forgotten)."""

    def __init__(self, burst: int = 20, per_second: float = 1.0, kinds: int = 1024,
                 exempt: tuple[str, ...] = ("uldp.collector.access",)) -> None:
        super().__init__()
        self.burst, self.per_second, self.kinds, self.exempt = burst, per_second, kinds, exempt
        #: kind -> (tokens, time of the last refill, lines suppressed since the last pass)
        self._buckets: OrderedDict[tuple[str, int, str], tuple[float, float, int]] = \
            OrderedDict()
        self._lock = threading.Lock()
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name in self.exempt:
            return True
        kind = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        with self._lock:
            tokens, then, dropped = self._buckets.pop(kind, (float(self.burst), now, 0))
            tokens = min(float(self.burst), tokens + (now - then) * self.per_second)
            if tokens < 1.0:
                self._buckets[kind] = (tokens, now, dropped + 1)
                self.suppressed += 1
                return False
            self._buckets[kind] = (tokens - 1.0, now, 0)
            while len(self._buckets) > self.kinds:
                self._buckets.popitem(last=False)
        if dropped:
            record.msg = f"{record.msg} [{dropped} similar lines suppressed]"
            record.suppressed = dropped
        return True


def configure_logging(level: int, fmt: str = "plain", replica: str | None = None) -> None:
    """Root logging for ``uldp collector serve``: ``fmt`` is ``plain`` or ``json``; the
    access log is on with ``json`` (and with ``level`` DEBUG)."""
    if fmt not in ("plain", "json"):
        raise ValueError(f"log format must be plain or json, got {fmt!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(replica) if fmt == "json" else
                         logging.Formatter(PLAIN))
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    access = logging.getLogger("uldp.collector.access")
    on = level <= logging.DEBUG or (fmt == "json" and level <= logging.INFO)
    access.setLevel(logging.INFO if on else logging.WARNING)
