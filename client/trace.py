"""The intermediate values of one report, for the conformance vectors (``docs/device-protocol.md``
§9, ``conformance/README.md``): the pre-noise statistic every mechanism receives, the sampled
records an oracle receives, and the randomized-rounding bits — each in the order the report
draws them. Report integers alone hide a statistic that is off by less than the rounding
noise (×(1 + 10^-7) passes them); these values do not.

Inactive unless a caller opens :func:`tracing` (one report at a time, e.g. the vector
generator): then every report function records into it. A fleet simulation never opens one,
and the cost when inactive is one context-variable lookup per report call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Trace", "record_items", "record_rounding", "record_statistic", "tracing"]


@dataclass
class Trace:
    statistic: list[float] = field(default_factory=list)  # doubles, as the mechanism gets them
    items: list[int] = field(default_factory=list)  # an oracle's sampled records (0-based)
    rounding: list[int] = field(default_factory=list)  # 0/1: rounded up, per drawn entry


_ACTIVE: ContextVar[Trace | None] = ContextVar("uldp_trace", default=None)


@contextmanager
def tracing() -> Iterator[Trace]:
    """Record the intermediate values of the reports computed inside the block."""
    t = Trace()
    token = _ACTIVE.set(t)
    try:
        yield t
    finally:
        _ACTIVE.reset(token)


def record_statistic(Y: np.ndarray) -> None:
    """A batch of statistics (users × components) entering a mechanism, row-major."""
    t = _ACTIVE.get()
    if t is not None:
        t.statistic.extend(float(v) for v in np.asarray(Y, dtype=np.float64).ravel())


def record_items(items: np.ndarray) -> None:
    t = _ACTIVE.get()
    if t is not None:
        t.items.extend(int(v) for v in np.asarray(items).ravel())


def record_rounding(pos: np.ndarray, rounded: np.ndarray) -> None:
    """The rounding bits of grid positions ``pos`` (``rounded − ⌊pos⌋``), row-major."""
    t = _ACTIVE.get()
    if t is not None:
        bits = np.asarray(rounded, dtype=np.float64) - np.floor(pos)
        t.rounding.extend(int(b) for b in bits.ravel())
