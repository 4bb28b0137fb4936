"""The send time of a report does not depend on the computation (issue 17, item 4;
``docs/privacy.md`` §2, "Timing"): with ``poll(send_delay=SendDelay(low, high))`` a device
sends each report at ``accepted + U``, U uniform over the public window, whatever its
dataset. Deterministic: an injected clock, and a computation whose (simulated) duration
grows with the dataset — 1 µs per sample, as if m = 10^6 took a second.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import uldp.client.device as device_mod
from uldp.client.device import Device
from uldp.client.randomness import RandomSource
from uldp.client.schedule import SendDelay
from uldp.client.tasks import TaskSpec

from .device_recorder import serve_recorder, wire_task

TASK = TaskSpec(query_id="q", kind="mean", method="ssl", stage=0, epsilon=1.0, eps_c=1.0,
                components=(0,), bound=1.0, intervals=((-1.0, 1.0),))
LOW, HIGH = 2.0, 3.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.now += s


@pytest.fixture(scope="module")
def recorder():
    with serve_recorder() as rec:
        yield rec


def _send_times(recorder, tmp_path, monkeypatch, *, m_cost: int, seed: int, tasks: int,
                delay: bool, samples=None):
    """Send times (on the fake clock) of ``tasks`` reports computed by a device whose
    computation takes ``m_cost`` µs of fake time each."""
    svc, chan = recorder
    clock = FakeClock()
    honest = device_mod.compute_report

    def slow(*a, **kw):
        clock.now += m_cost * 1e-6
        return honest(*a, **kw)

    monkeypatch.setattr(device_mod, "compute_report", slow)
    svc.tasks, svc.reports = [wire_task(TASK, f"q{i}") for i in range(tasks)], []
    dev = Device("unused:1", tmp_path / f"d{seed}-{m_cost}-{delay}", budget=1e6,
                 channel=chan, rng=RandomSource.seeded(seed), simulation=True,
                 durable=False)
    dev.add_dataset("data", np.zeros(m_cost if samples is None else samples))
    sent: list[float] = []
    dev.before_send = lambda q: sent.append(clock())
    r = dev.poll(send_delay=SendDelay(LOW, HIGH, clock=clock, sleep=clock.sleep)
                 if delay else None)
    dev.close()
    assert len(r.submitted) == tasks
    return np.diff([1000.0, *sent]), r


def test_the_send_time_does_not_depend_on_the_dataset_size(recorder, tmp_path, monkeypatch):
    """m = 0 and m = 10^6 with the same keystream: the same send offsets to the µs — and
    without the option, offsets that tell the two apart."""
    small, r0 = _send_times(recorder, tmp_path, monkeypatch, m_cost=0, seed=5, tasks=3,
                            delay=True)
    big, r1 = _send_times(recorder, tmp_path, monkeypatch, m_cost=10**6, seed=5, tasks=3,
                          delay=True)
    assert small.tolist() == big.tolist() and r0.late == r1.late == 0
    assert all(LOW <= x <= HIGH for x in small)
    plain0, _ = _send_times(recorder, tmp_path, monkeypatch, m_cost=0, seed=5, tasks=3,
                            delay=False)
    plain1, _ = _send_times(recorder, tmp_path, monkeypatch, m_cost=10**6, seed=5, tasks=3,
                            delay=False)
    assert plain0.tolist() == [0.0] * 3 and plain1.tolist() == pytest.approx([1.0] * 3)


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), grid, side="right") / a.size
    fb = np.searchsorted(np.sort(b), grid, side="right") / b.size
    return float(np.abs(fa - fb).max())


def test_send_offsets_have_one_distribution_uniform_over_the_window(recorder, tmp_path,
                                                                   monkeypatch):
    """Independent keystreams, 0 vs 1 s of computation (m = 0 vs m = 10^6 at 1 µs each):
    the two samples of offsets have the same distribution (two-sample Kolmogorov–Smirnov,
    α = 0.001), uniform over [low, high] (one-sample KS)."""
    n = 150
    a, _ = _send_times(recorder, tmp_path, monkeypatch, m_cost=0, seed=11, tasks=n,
                       delay=True)
    b, _ = _send_times(recorder, tmp_path, monkeypatch, m_cost=10**6, seed=12, tasks=n,
                       delay=True, samples=1000)
    crit2 = 1.95 * np.sqrt(2 / n)
    assert _ks(a, b) < crit2
    u = np.linspace(LOW, HIGH, 10_001)
    for x in (a, b):
        assert ((x >= LOW) & (x <= HIGH)).all()
        assert _ks(x, u) < 1.95 / np.sqrt(n)


def test_an_overrun_is_sent_at_once_and_counted(recorder, tmp_path, monkeypatch):
    late, r = _send_times(recorder, tmp_path, monkeypatch, m_cost=5 * 10**6, seed=3,
                          tasks=2, delay=True, samples=10)
    assert r.late == 2 and late.tolist() == pytest.approx([5.0, 5.0])


def test_a_real_clock_waits_for_the_window(recorder, tmp_path):
    """The default clock and sleep: m = 10^6 real samples, window [1.0, 1.05] s (well
    above the computation even on a loaded machine)."""
    svc, chan = recorder
    svc.tasks, svc.reports = [wire_task(TASK, "q0")], []
    dev = Device("unused:1", tmp_path / "real", budget=10.0, channel=chan,
                 rng=RandomSource.seeded(1), simulation=True, durable=False)
    dev.add_dataset("data", np.random.default_rng(0).uniform(-1, 1, 10**6))
    t0 = time.monotonic()
    sent: list[float] = []
    dev.before_send = lambda q: sent.append(time.monotonic() - t0)
    r = dev.poll(send_delay=SendDelay(1.0, 1.05))
    dev.close()
    assert r.submitted == ["q0"] and r.late == 0 and 1.0 <= sent[0] < 3.0


def test_a_window_must_be_public_and_sane():
    for lo, hi in ((-1.0, 1.0), (2.0, 1.0), (0.0, float("inf")), (float("nan"), 1.0),
                   (0.0, 1e9)):
        with pytest.raises(ValueError, match="send window"):
            SendDelay(lo, hi)
    d = SendDelay(1.0, 1.0)
    assert d.draw(RandomSource.seeded(1)) == 1.0


def test_devices_send_at_a_drawn_deadline_by_default(recorder, tmp_path, monkeypatch):
    """Issue 25 item 8: a device made without ``send_delay`` uses the public default window
    (2–8 s) in ``poll``; ``Device(send_delay=None)`` and ``poll(send_delay=None)`` opt out.
    (The suite's conftest turns the default off; this test turns it back on.)"""
    from uldp.client import schedule

    assert (schedule.DEFAULT_SEND_DELAY.low_s, schedule.DEFAULT_SEND_DELAY.high_s) == (2.0, 8.0)
    clock = FakeClock()
    window = SendDelay(2.0, 8.0, clock=clock, sleep=clock.sleep)
    old = schedule.set_default_send_delay(window)
    try:
        svc, chan = recorder

        def device(name: str, **kw) -> tuple[Device, list[float]]:
            dev = Device("unused:1", tmp_path / name, budget=100.0, channel=chan,
                         rng=RandomSource.seeded(7), simulation=True, durable=False, **kw)
            dev.add_dataset("data", np.zeros(3))
            sent: list[float] = []
            dev.before_send = lambda q: sent.append(clock())
            return dev, sent

        svc.tasks, svc.reports = [wire_task(TASK, "qa"), wire_task(TASK, "qb")], []
        dev, sent = device("default")
        assert dev.send_delay is window
        t0 = clock()
        assert dev.poll().submitted == ["qa", "qb"]
        offsets = np.diff([t0, *sent])
        assert all(2.0 <= x <= 8.0 for x in offsets), offsets
        dev.close()
        svc.tasks, svc.reports = [wire_task(TASK, "qc")], []
        dev, sent = device("off", send_delay=None)
        t0 = clock()
        assert dev.poll().submitted == ["qc"] and sent == [t0]  # at once
        dev.close()
        # never held past the task's own deadline (public): 3 s away -> sent within 2 s
        t = wire_task(TASK, "qd")
        t.deadline_ms = int((time.time() + 3.0) * 1000)
        svc.tasks, svc.reports = [t], []
        dev, sent = device("deadline", send_delay=SendDelay(30.0, 40.0, clock=clock,
                                                            sleep=clock.sleep))
        t0 = clock()
        assert dev.poll().submitted == ["qd"] and sent[0] - t0 <= 2.0 + 1e-6
        dev.close()
    finally:
        schedule.set_default_send_delay(old)
