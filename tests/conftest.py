"""The whole suite's settings.

Devices send each report at a deadline drawn from a public window of 2 to 8 s by default
(``uldp.client.schedule``, ``docs/privacy.md`` §2 "Timing"); the suite's devices send at
once so that it stays fast. ``tests/test_send_delay.py`` checks the default itself."""

from __future__ import annotations

from uldp.client.schedule import set_default_send_delay


def pytest_configure(config: object) -> None:
    set_default_send_delay(None)
