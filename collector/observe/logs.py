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
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

__all__ = ["ACCESS_FIELDS", "JsonFormatter", "configure_logging"]

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
        for key in ACCESS_FIELDS:
            if key in record.__dict__:
                out[key] = record.__dict__[key]
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(level: int, fmt: str = "plain", replica: str | None = None) -> None:
    """Root logging for ``uldp collector serve``: ``fmt`` is ``plain`` or ``json``; the
    access log is on with ``json`` (and with ``level`` DEBUG)."""
    if fmt not in ("plain", "json"):
        raise ValueError(f"log format must be plain or json, got {fmt!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(replica) if fmt == "json" else
                         logging.Formatter(PLAIN))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    access = logging.getLogger("uldp.collector.access")
    on = level <= logging.DEBUG or (fmt == "json" and level <= logging.INFO)
    access.setLevel(logging.INFO if on else logging.WARNING)
