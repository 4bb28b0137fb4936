"""Simulated fleets over real gRPC (``uldp fleet run``).

Every simulated device is a real :class:`uldp.client.device.Device` with its own state
directory (identity + ledger), its own local datasets drawn from the same populations as
``uldp simulate`` (``uldp.collector.datasets.make_fleet_data``), and it talks to the
collector over TLS exactly like an app would: enroll, GetTasks, check, privatize, persist,
SubmitReport. Concurrency is bounded by a pool of worker threads sharing a few channels;
devices whose phase is not open yet are re-polled after the collector's retry hint.

The same fleet behind gateways, which relay the devices' messages in batch calls, is
:func:`uldp.collector.simulation.gateway.run_gateway_fleet`; this module holds what both share (the
datasets, the result, the progress).
"""

from __future__ import annotations

import heapq
import logging
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
import numpy as np

from uldp.client.device import Device
from uldp.client.randomness import RandomSource
from uldp.client.transport import Endpoint, RetryPolicy, secure_channel
from uldp.collector.datasets import FleetData, make_fleet_data

__all__ = ["FleetDataset", "FleetProgress", "FleetResult", "dataset_for_query",
           "draw_datasets", "fleet_attestation", "run_fleet", "summarize"]

log = logging.getLogger("uldp.fleet")


@dataclass
class FleetDataset:
    """A named dataset every device of (a share of) the fleet holds."""

    name: str
    data: FleetData
    #: which devices hold it: device i holds it iff ``i % modulo == residue``
    modulo: int = 1
    residue: int = 0
    values: np.ndarray | None = None  # (devices, m[, d]) drawn lazily
    labels: np.ndarray | None = None  # (devices, m) for the learning kinds


@dataclass
class FleetResult:
    devices: int
    submitted: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)
    declined: int = 0  # refused tasks the collector acknowledged a decline of
    rejected: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unfinished: int = 0
    seconds: float = 0.0


LEARNING_DISTS = {"classify": "sine[:PHASE] (default)", "regress": "sine[:PHASE] (default)",
                  "sgd": "quadratic (default) | logistic"}


def dataset_for_query(kind: str, dist: str, samples: int, dim: int, bound: float | None,
                      seed: int | None, moment_p: float | None = None,
                      centre: float = 0.0) -> FleetData:
    """The population of a query kind; learning kinds draw ``(samples, labels)`` pairs.
    ``centre``: the population of ``[-bound, bound]`` moved to ``[centre − bound, centre +
    bound]`` (a query with the range ``[lo, hi]``: ``centre = lo/2 + hi/2``)."""
    rng = np.random.default_rng(seed)
    if kind in LEARNING_DISTS:
        return _learning_population(kind, dist, samples, dim, rng)
    data = make_fleet_data(kind, dist, samples, dim, bound, rng, moment_p=moment_p)
    if not centre:
        return data
    draw = data.draw
    return FleetData(lambda n: draw(n) + centre, data.truth + centre, data.moment)


def _pairs(draw: Callable[[int], tuple[np.ndarray, np.ndarray | None]]
           ) -> Callable[[int], np.ndarray]:
    """A labelled population's ``draw`` (``(values, labels)`` pairs) as a FleetData draw;
    :func:`draw_datasets` unpacks the pairs."""
    return cast(Callable[[int], np.ndarray], draw)


def _learning_population(kind: str, dist: str, samples: int, dim: int,
                         rng: np.random.Generator) -> FleetData:
    from uldp.collector.learning import synthetic

    name, _, arg = (dist or "").partition(":")
    if kind in ("classify", "regress"):
        if name not in ("", "sine", "uniform"):  # uniform features, η = sin(2π(x₁+φ))/2
            raise ValueError(f"--dist for {kind} must be {LEARNING_DISTS[kind]}, got {dist!r}")
        phase = float(arg) if arg else 0.0
        pop = synthetic.sine_population(0, samples, dim, rng, task=kind, phase=phase)
        return FleetData(_pairs(pop.draw), np.zeros(0))
    if name in ("", "quadratic", "uniform"):
        pop, mu = synthetic.quadratic_population(0, samples, dim, rng)
        return FleetData(lambda k: pop.draw(k)[0], mu)
    if name == "logistic":
        w = np.linspace(1.0, -1.0, dim) if dim > 1 else np.array([1.5])
        pop = synthetic.logistic_population(0, samples, w, 0.0, rng)
        return FleetData(_pairs(pop.draw), w)
    raise ValueError(f"--dist for sgd must be {LEARNING_DISTS['sgd']}, got {dist!r}")


class _Bar:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.done, self._last = max(total, 1), enabled, 0, 0.0
        self._lock = threading.Lock()
        self.t0 = time.monotonic()

    def update(self, k: int = 1) -> None:
        with self._lock:
            self.done += k
            now = time.monotonic()
            if self.enabled and (now - self._last > 0.2 or self.done >= self.total):
                self._last = now
                frac = min(self.done / self.total, 1.0)
                rate = self.done / max(now - self.t0, 1e-9)
                sys.stderr.write(f"\rfleet [{'#' * int(30 * frac):<30}] {self.done}/"
                                 f"{self.total} devices done ({rate:,.0f}/s)")
                if self.done >= self.total:
                    sys.stderr.write("\n")
                sys.stderr.flush()


def fleet_attestation(key_hex: str | None, subject: str) -> Callable[[], str] | str:
    """What a simulated device shows a shuffler that runs an enrolment check: a fresh
    attestation for ``subject`` under the shuffler's key (hex), as the app's back end
    would issue it; "" without a key."""
    if not key_hex:
        return ""
    from uldp.collector.security.attestation import HmacAttestation

    att = HmacAttestation(bytes.fromhex(key_hex))
    return lambda: att.issue(subject)


def run_fleet(endpoint: Endpoint | list[Endpoint], state_root: str | Path, n_devices: int,
              datasets: list[FleetDataset], *, concurrency: int = 32, budget: float = 10.0,
              enrollment_secret: str = "", seed: int | None = None, channels: int = 4,
              timeout_s: float = 900.0, progress: bool | None = None, durable: bool = False,
              keep_state: bool = True, max_failures: int = 8,
              on_device: Callable[[int, Device], None] | None = None,
              shuffler: Endpoint | None = None,
              shuffler_attestation_key: str | None = None,
              stop: threading.Event | None = None) -> FleetResult:
    """Run ``n_devices`` devices until none has anything left to do (or ``timeout_s``, or
    until ``stop`` is set: like the deadline, the calls in flight are cut off and the
    devices left count as unfinished).

    With several endpoints (collector replicas), device ``i`` uses ``endpoint[i % k]``.

    ``seed`` makes the devices' noise reproducible (simulation mode); None uses the
    production OS-keyed source. ``durable=False`` skips fsync in the device ledgers
    (they still survive a crash of the fleet process, not of the machine). ``shuffler``:
    shuffle mode, where the devices send their sealed reports; ``shuffler_attestation_key``:
    the shuffler's attestation key (hex), with which each device is vouched for.
    """
    root = Path(state_root)
    root.mkdir(parents=True, exist_ok=True)
    draw_datasets(datasets, n_devices)
    fleet = _ThreadFleet(endpoint if isinstance(endpoint, list) else [endpoint], root,
                         n_devices, datasets, budget=budget,
                         enrollment_secret=enrollment_secret, seed=seed, channels=channels,
                         timeout_s=timeout_s, durable=durable, max_failures=max_failures,
                         on_device=on_device)
    fleet.shuffler = secure_channel(shuffler) if shuffler is not None else None
    fleet.attestation_key = shuffler_attestation_key
    fleet.bar = _Bar(n_devices, sys.stderr.isatty() if progress is None else progress)
    fleet.stop = stop or threading.Event()
    res = fleet.run(concurrency)
    if not keep_state:
        shutil.rmtree(root, ignore_errors=True)
    return res


class _ThreadFleet:
    """The devices of :func:`run_fleet`: worker threads take the device due next from a
    heap, poll it (the whole production ``Device.poll``) and put it back at the
    collector's retry hint while it waits for a phase."""

    def __init__(self, eps: list[Endpoint], root: Path, n_devices: int,
                 datasets: list[FleetDataset], *, budget: float, enrollment_secret: str,
                 seed: int | None, channels: int, timeout_s: float, durable: bool,
                 max_failures: int, on_device: Callable[[int, Device], None] | None) -> None:
        self.eps, self.root, self.datasets = eps, root, datasets
        self.budget, self.secret, self.seed = budget, enrollment_secret, seed
        self.durable, self.max_failures, self.on_device = durable, max_failures, on_device
        # device i talks to eps[i % len(eps)] through one of `channels` channels per endpoint
        self.chans = [[secure_channel(e) for _ in range(max(1, channels))] for e in eps]
        self.shuffler: Any = None  # shuffle mode: the channel to the shuffler
        self.attestation_key: str | None = None  # and the shuffler's attestation key
        self.stop = threading.Event()  # set: end now, like the deadline
        self.retry = RetryPolicy(attempts=10, base_s=0.2, cap_s=5.0,
                                 timeout_s=min(30.0, timeout_s))
        self.res = FleetResult(devices=n_devices)
        self.bar = _Bar(n_devices, False)
        self.heap: list[tuple[float, int]] = [(0.0, i) for i in range(n_devices)]
        self.cv = threading.Condition()
        self.active = 0
        self.failures: dict[int, int] = {}
        self.devices: dict[int, Device] = {}
        self.t0 = time.monotonic()
        self.deadline = self.t0 + timeout_s
        # scheduling only
        self.jitter = random.Random(None if seed is None else f"fleet-jitter:{seed}")

    def make(self, i: int) -> Device:
        dev = self.devices.get(i)
        if dev is None:
            rng = (RandomSource.seeded(f"fleet:{self.seed}:{i}") if self.seed is not None
                   else None)
            e = i % len(self.eps)
            pool = self.chans[e]
            dev = Device(self.eps[e], self.root / f"device-{i:07d}", budget=self.budget,
                         enrollment_secret=self.secret, label="uldp-fleet",
                         channel=pool[(i // len(self.eps)) % len(pool)], retry=self.retry,
                         rng=rng, durable=self.durable, simulation=True,
                         shuffler_channel=self.shuffler,
                         shuffler_attestation=fleet_attestation(self.attestation_key,
                                                                f"fleet-device-{i}"),
                         send_delay=None)  # a simulation: send at once (privacy.md §2)
            for ds in self.datasets:
                if i % ds.modulo == ds.residue:
                    assert ds.values is not None
                    j = i // ds.modulo
                    vals = ds.values[j]
                    dev.add_dataset(ds.name, vals,
                                    labels=None if ds.labels is None else ds.labels[j],
                                    dim=int(vals.shape[1]) if vals.ndim == 2 else None)
            if self.on_device is not None:
                self.on_device(i, dev)
            self.devices[i] = dev
        return dev

    def _next(self) -> int | None:
        """(under cv) The device due next, waiting for it; None when done or too late."""
        while True:
            if not self.heap and self.active == 0:
                self.cv.notify_all()
                return None
            if time.monotonic() > self.deadline or self.stop.is_set():
                return None
            if self.heap and self.heap[0][0] <= time.monotonic():
                _, i = heapq.heappop(self.heap)
                self.active += 1
                return i
            wait = self.heap[0][0] - time.monotonic() if self.heap else 0.1
            self.cv.wait(timeout=max(0.005, min(wait, 0.1)))

    def _poll(self, i: int) -> float | None:
        """Poll device ``i``; when to poll it again (None: it is done)."""
        try:
            dev = self.make(i)
            r = dev.poll()
            with self.cv:
                self.res.submitted += len(r.submitted)
                self.res.refused += r.refused
                self.res.declined += len(r.declined)
                self.res.rejected += r.rejected
            if r.waiting:
                dev.ledger.close()  # reopened on the next poll; keeps idle devices small
                return time.monotonic() + r.retry_after_ms / 1000 * (0.5 + self.jitter.random())
            return None
        except Exception as exc:
            msg = (f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError)
                   else f"{type(exc).__name__}: {exc}")
            with self.cv:
                self.failures[i] = self.failures.get(i, 0) + 1
                if self.failures[i] >= self.max_failures:
                    self.res.errors.append(f"device {i}: {msg}")
                    return None
                return time.monotonic() + 0.5 * self.failures[i]

    def worker(self) -> None:
        while True:
            with self.cv:
                i = self._next()
            if i is None:
                return
            again = self._poll(i)
            with self.cv:
                self.active -= 1
                if again is not None:
                    heapq.heappush(self.heap, (again, i))
                else:
                    done_dev = self.devices.pop(i, None)
                    if done_dev is not None:
                        done_dev.close()
                    self.bar.update()
                self.cv.notify_all()

    def run(self, concurrency: int) -> FleetResult:
        threads = [threading.Thread(target=self.worker, name=f"fleet-{k}", daemon=True)
                   for k in range(max(1, concurrency))]
        for t in threads:
            t.start()
        for t in threads:  # a call in flight at the deadline or a stop is cut off, not waited for
            while (t.is_alive() and not self.stop.is_set()
                   and time.monotonic() < self.deadline + 1.0):
                t.join(timeout=0.25)
        stuck = any(t.is_alive() for t in threads)
        for pool in self.chans:
            for c in pool:
                c.close()  # cancels calls still in flight
        if stuck:
            for t in threads:
                t.join(timeout=5.0)
        with self.cv:
            self.res.unfinished = len(self.heap) + self.active
        self.res.seconds = time.monotonic() - self.t0
        return self.res


def summarize(res: FleetResult) -> dict[str, Any]:
    return {"devices": res.devices, "reports_acknowledged": res.submitted,
            "refused": len(res.refused), "declined": res.declined,
            "rejected": len(res.rejected),
            "errors": len(res.errors), "unfinished": res.unfinished,
            "seconds": round(res.seconds, 2)}


@dataclass(frozen=True)
class FleetProgress:
    """Progress of a fleet: devices finished, reports acknowledged, of ``devices``."""

    devices: int
    done: int
    reports: int
    seconds: float
    checked_in: int = 0  # devices that fetched their tasks at least once

    @property
    def fraction(self) -> float:
        """Share of the work done: a device counts half once it checked in, fully once
        it is done (devices of a later phase wait for the earlier one to close)."""
        return (self.checked_in + self.done) / max(2 * self.devices, 1)


def draw_datasets(datasets: list[FleetDataset], n_devices: int) -> None:
    """Draw the local data of every dataset's holders (once; kept in the dataset)."""
    for ds in datasets:
        if ds.values is None:
            holders = len(range(ds.residue, n_devices, ds.modulo))
            drawn = ds.data.draw(holders)
            ds.values, ds.labels = drawn if isinstance(drawn, tuple) else (drawn, None)
