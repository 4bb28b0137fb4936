"""When a device sends: a deadline drawn from public parameters, independent of the
computation (``docs/privacy.md`` §2, "Timing"; issue 17).

The time a report takes to compute grows with the dataset (Python ``prepare``: about 1 ms at
m = 0, 30–60 ms at m = 10^6) and with the magnitude of the noise the exact sampler draws. A
device that sends as soon as it has computed lets anyone who sees the send time learn about
both. With a :class:`SendDelay` the device instead sends each report at
``accepted + U``: ``accepted`` is the moment the task was received (before the checks, the
charge and the computation), and ``U`` is uniform over the public window ``[low, high]``
(on a grid of 1 µs), drawn exactly from the ChaCha20 stream (a fresh OS key; in simulation
the device's seeded source). Provided ``low`` exceeds the worst-case computation time, the
send time is a function of public facts and fresh randomness only. A computation that
overruns its deadline is sent at once and counted (``PollResult.late``): widen the window.

**On by default.** A device without a ``send_delay`` of its own uses
:data:`DEFAULT_SEND_DELAY` (2 to 8 s): every report of ``poll``/``run`` leaves at a drawn
deadline. ``Device(send_delay=None)`` (or ``poll(send_delay=None)`` for one call) opts out —
for simulations and tests, or an app that hides the computation time otherwise (a fixed
polling schedule). The deadline is never later than 1 s before the task's own deadline
(``Task.deadline_ms``, public): a report is never held past its phase.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from uldp.client.randomness import RandomSource

__all__ = ["DEFAULT_SEND_DELAY", "DEVICE_DEFAULT", "SendDelay", "default_send_delay",
           "set_default_send_delay"]

#: The grid of the drawn delays (seconds).
RESOLUTION_S = 1e-6
#: The widest window a device accepts (a day).
MAX_WINDOW_S = 86_400.0


@dataclass(frozen=True)
class SendDelay:
    """Send each report at ``accepted + U``, ``U ~ Uniform{low_s, low_s + 1 µs, …, high_s}``.

    ``clock`` (monotonic seconds) and ``sleep`` are injectable for tests."""

    low_s: float
    high_s: float
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        lo, hi = self.low_s, self.high_s
        if not (isinstance(lo, (int, float)) and isinstance(hi, (int, float))
                and math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi <= MAX_WINDOW_S):
            raise ValueError(f"a send window needs 0 <= low <= high <= {MAX_WINDOW_S:g} s, "
                             f"got [{lo!r}, {hi!r}]")

    def draw(self, rng: RandomSource) -> float:
        """One delay, exactly uniform over the window's grid (one ``below`` draw, §3.1)."""
        steps = round((self.high_s - self.low_s) / RESOLUTION_S)
        k = int(rng.below(steps + 1, 1)[0])
        return min(self.low_s + k * RESOLUTION_S, self.high_s)

    def wait_until(self, deadline: float) -> bool:
        """Sleep until ``deadline`` (on ``clock``); False if it had already passed."""
        left = deadline - self.clock()
        if left < 0:
            return False
        self.sleep(left)
        return True


#: The window a device uses unless told otherwise (``Device(send_delay=...)``): 2 s is well
#: above the worst computation time of every kind at m = 10^6 on this machine (Python
#: ``prepare`` ≈ 0.14 s); the upper end spreads the send times over 6 s.
DEFAULT_SEND_DELAY = SendDelay(2.0, 8.0)
_default: SendDelay | None = DEFAULT_SEND_DELAY

#: ``poll``/``run``'s ``send_delay`` default: the device's own setting
DEVICE_DEFAULT: Literal["device"] = "device"
#: the margin kept before a task's deadline (seconds)
DEADLINE_MARGIN_S = 1.0


def default_send_delay() -> SendDelay | None:
    """The window a new ``Device`` takes by default: :data:`DEFAULT_SEND_DELAY` unless a
    test suite or a simulation changed it (:func:`set_default_send_delay`)."""
    return _default


def set_default_send_delay(window: SendDelay | None) -> SendDelay | None:
    """Change the default of the devices made from now on in this process (None: send at
    once); returns the previous one. For test suites and simulations that run many
    devices in one process — an app sets ``Device(send_delay=...)`` instead."""
    global _default
    old, _default = _default, window
    return old
