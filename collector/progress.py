"""Progress lines for long runs (simulations, fits): a bar on a terminal, silent otherwise
unless forced."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """A minimal progress bar on stderr (silent when not a TTY unless forced)."""

    def __init__(self, total: int, label: str, enabled: bool | None = None) -> None:
        self.total, self.label, self.done = max(total, 1), label, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._last = 0.0

    def update(self, k: int) -> None:
        self.done += k
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done >= self.total):
            self._last = now
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(30 * frac)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}%")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
