"""The analyst's Python API: queries of a collector as typed records.

See ``docs/analyst.md``. :class:`Analyst` creates, lists, watches, cancels and reads
queries (``uldp query ...`` is built on it); :class:`Result` has ``to_frame()``;
:meth:`Analyst.preview` predicts a query's interval widths before it runs.
"""

from uldp.collector.analyst.client import Analyst, AnalystError
from uldp.collector.analyst.preview import preview_message
from uldp.collector.analyst.types import Central, Phase, Preview, Query, Result, estimand

__all__ = ["Analyst", "AnalystError", "Central", "Phase", "Preview", "Query", "Result",
           "estimand", "preview_message"]
