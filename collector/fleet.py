"""Simulated fleets over real gRPC (``uldp fleet run``).

Every simulated device is a real :class:`uldp.client.device.Device` with its own state
directory (identity + ledger), its own local datasets drawn from the same populations as
``uldp simulate`` (``uldp.collector.datasets.make_fleet_data``), and it talks to the
collector over TLS exactly like an app would: enroll, GetTasks, check, privatize, persist,
SubmitReport. Concurrency is bounded by a pool of worker threads sharing a few channels;
devices whose phase is not open yet are re-polled after the collector's retry hint.

:func:`run_gateway_fleet` is the same fleet behind gateways, as a deployment with many
devices behind an edge gateway runs it: every device still enrolls, fetches, checks and
computes its own report and keeps its own ledger (the production ``Device`` code), but
the gateway sends the reports in batches (``SubmitReportBatch``, each report carrying its
device's token) and, instead of every waiting device polling, asks for one device per
(query, phase) whether the phase has opened. ``gateways=N`` runs N gateway processes.
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
from typing import Any

import grpc
import numpy as np

from uldp.client import ledger as _ledger
from uldp.client.device import Device, TaskRefused
from uldp.client.randomness import RandomSource
from uldp.client.transport import Endpoint, RetryPolicy, call_with_retry, secure_channel
from uldp.client.wire import device_pb2, device_pb2_grpc
from uldp.collector.datasets import FleetData, make_fleet_data

__all__ = ["FleetDataset", "FleetProgress", "FleetResult", "dataset_for_query", "run_fleet",
           "run_gateway_fleet", "summarize"]

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
    rejected: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unfinished: int = 0
    seconds: float = 0.0


LEARNING_DISTS = {"classify": "sine[:PHASE] (default)", "regress": "sine[:PHASE] (default)",
                  "sgd": "quadratic (default) | logistic"}


def dataset_for_query(kind: str, dist: str, samples: int, dim: int, bound: float | None,
                      seed: int | None, moment_p: float | None = None) -> FleetData:
    """The population of a query kind; learning kinds draw ``(samples, labels)`` pairs."""
    rng = np.random.default_rng(seed)
    if kind in LEARNING_DISTS:
        return _learning_population(kind, dist, samples, dim, rng)
    return make_fleet_data(kind, dist, samples, dim, bound, rng, moment_p=moment_p)


def _learning_population(kind: str, dist: str, samples: int, dim: int,
                         rng: np.random.Generator) -> FleetData:
    from uldp.collector.learning import synthetic

    name, _, arg = (dist or "").partition(":")
    if kind in ("classify", "regress"):
        if name not in ("", "sine", "uniform"):  # uniform features, η = sin(2π(x₁+φ))/2
            raise ValueError(f"--dist for {kind} must be {LEARNING_DISTS[kind]}, got {dist!r}")
        phase = float(arg) if arg else 0.0
        pop = synthetic.sine_population(0, samples, dim, rng, task=kind, phase=phase)
        return FleetData(pop.draw, np.zeros(0))
    if name in ("", "quadratic", "uniform"):
        pop, mu = synthetic.quadratic_population(0, samples, dim, rng)
        return FleetData(lambda k: pop.draw(k)[0], mu)
    if name == "logistic":
        w = np.linspace(1.0, -1.0, dim) if dim > 1 else np.array([1.5])
        pop = synthetic.logistic_population(0, samples, w, 0.0, rng)
        return FleetData(pop.draw, w)
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


def run_fleet(endpoint: Endpoint | list[Endpoint], state_root: str | Path, n_devices: int,
              datasets: list[FleetDataset], *, concurrency: int = 32, budget: float = 10.0,
              enrollment_secret: str = "", seed: int | None = None, channels: int = 4,
              timeout_s: float = 900.0, progress: bool | None = None, durable: bool = False,
              keep_state: bool = True, max_failures: int = 8,
              on_device: Callable[[int, Device], None] | None = None) -> FleetResult:
    """Run ``n_devices`` devices until none has anything left to do (or ``timeout_s``).

    With several endpoints (collector replicas), device ``i`` uses ``endpoint[i % k]``.

    ``seed`` makes the devices' noise reproducible (simulation mode); None uses the
    production OS-keyed source. ``durable=False`` skips fsync in the device ledgers
    (they still survive a crash of the fleet process, not of the machine).
    """
    root = Path(state_root)
    root.mkdir(parents=True, exist_ok=True)
    for ds in datasets:
        if ds.values is None:
            holders = len(range(ds.residue, n_devices, ds.modulo))
            drawn = ds.data.draw(holders)
            ds.values, ds.labels = drawn if isinstance(drawn, tuple) else (drawn, None)
    eps = endpoint if isinstance(endpoint, list) else [endpoint]
    # device i talks to eps[i % len(eps)] through one of `channels` channels per endpoint
    chans = [[secure_channel(e) for _ in range(max(1, channels))] for e in eps]
    retry = RetryPolicy(attempts=10, base_s=0.2, cap_s=5.0, timeout_s=min(30.0, timeout_s))
    res = FleetResult(devices=n_devices)
    bar = _Bar(n_devices, sys.stderr.isatty() if progress is None else progress)
    heap: list[tuple[float, int]] = [(0.0, i) for i in range(n_devices)]
    cv = threading.Condition()
    active = [0]
    failures: dict[int, int] = {}
    devices: dict[int, Device] = {}
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    jitter = random.Random(None if seed is None else f"fleet-jitter:{seed}")  # scheduling only

    def make(i: int) -> Device:
        dev = devices.get(i)
        if dev is None:
            rng = RandomSource.seeded(f"fleet:{seed}:{i}") if seed is not None else None
            e = i % len(eps)
            pool = chans[e]
            dev = Device(eps[e], root / f"device-{i:07d}", budget=budget,
                         enrollment_secret=enrollment_secret, label="uldp-fleet",
                         channel=pool[(i // len(eps)) % len(pool)], retry=retry, rng=rng,
                         durable=durable, simulation=True)
            for ds in datasets:
                if i % ds.modulo == ds.residue:
                    assert ds.values is not None
                    j = i // ds.modulo
                    vals = ds.values[j]
                    dev.add_dataset(ds.name, vals,
                                    labels=None if ds.labels is None else ds.labels[j],
                                    dim=int(vals.shape[1]) if vals.ndim == 2 else None)
            if on_device is not None:
                on_device(i, dev)
            devices[i] = dev
        return dev

    def worker() -> None:
        while True:
            with cv:
                while True:
                    if not heap and active[0] == 0:
                        cv.notify_all()
                        return
                    if time.monotonic() > deadline:
                        return
                    if heap and heap[0][0] <= time.monotonic():
                        _, i = heapq.heappop(heap)
                        active[0] += 1
                        break
                    wait = heap[0][0] - time.monotonic() if heap else 0.1
                    cv.wait(timeout=max(0.005, min(wait, 0.1)))
            again = None
            try:
                dev = make(i)
                r = dev.poll()
                with cv:
                    res.submitted += len(r.submitted)
                    res.refused += r.refused
                    res.rejected += r.rejected
                if r.waiting:
                    dev.ledger.close()  # reopened on the next poll; keeps idle devices small
                    again = time.monotonic() + r.retry_after_ms / 1000 * (0.5 + jitter.random())
            except Exception as exc:
                msg = (f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError)
                       else f"{type(exc).__name__}: {exc}")
                with cv:
                    failures[i] = failures.get(i, 0) + 1
                    if failures[i] >= max_failures:
                        res.errors.append(f"device {i}: {msg}")
                    else:
                        again = time.monotonic() + 0.5 * failures[i]
            with cv:
                active[0] -= 1
                if again is not None:
                    heapq.heappush(heap, (again, i))
                else:
                    done_dev = devices.pop(i, None)
                    if done_dev is not None:
                        done_dev.close()
                    bar.update()
                cv.notify_all()

    threads = [threading.Thread(target=worker, name=f"fleet-{k}", daemon=True)
               for k in range(max(1, concurrency))]
    for t in threads:
        t.start()
    for t in threads:  # a device call in flight at the deadline is cut off, not waited for
        t.join(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
    stuck = any(t.is_alive() for t in threads)
    for pool in chans:
        for c in pool:
            c.close()  # cancels calls still in flight
    if stuck:
        for t in threads:
            t.join(timeout=5.0)
    with cv:
        res.unfinished = len(heap) + active[0]
    res.seconds = time.monotonic() - t0
    if not keep_state:
        shutil.rmtree(root, ignore_errors=True)
    return res


def summarize(res: FleetResult) -> dict[str, Any]:
    return {"devices": res.devices, "reports_acknowledged": res.submitted,
            "refused": len(res.refused), "rejected": len(res.rejected),
            "errors": len(res.errors), "unfinished": res.unfinished,
            "seconds": round(res.seconds, 2)}


# ---- gateways -------------------------------------------------------------------------------
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


@dataclass
class _Share:
    """The picklable job of one gateway: its devices and their local data."""

    endpoint: Endpoint
    state_root: str
    device_ids: list[int]
    #: (dataset name, global ids of the holders in this share, values, labels or None)
    datasets: list[tuple[str, list[int], np.ndarray, np.ndarray | None]]
    budget: float
    enrollment_secret: str
    seed: int | None
    deadline: float  # time.time() after which nothing new is started
    batch_size: int
    concurrency: int
    durable: bool
    max_failures: int = 8


@dataclass
class _DevState:
    keys: set[tuple[str, int]] = field(default_factory=set)  # (query, phase) waited for
    unacked: int = 0  # reports handed to the batcher, not yet answered
    queued: bool = False
    active: bool = False
    failures: int = 0
    done: bool = False
    polled: bool = False
    checked_in: bool = False


_RETRYABLE_CODES = {grpc.StatusCode.UNAVAILABLE.value[0], grpc.StatusCode.ABORTED.value[0],
                    grpc.StatusCode.DEADLINE_EXCEEDED.value[0]}
_UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]
_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}
# the ledger's name of an acknowledged report ("acked" before the ledger gained its
# explicit STATES tuple, "acknowledged" after)
_ACKED = "acknowledged" if "acknowledged" in getattr(_ledger, "STATES", ()) else "acked"


def _device_token(dev: Device) -> str:
    """The bearer token ``dev`` enrolled with (the gateway puts it in each batch item)."""
    dev.enroll()  # no call unless the token is missing or expiring
    ident = dev._load_identity()  # the SDK has no public accessor for it yet
    assert ident is not None
    return str(ident["token"])


class _Gateway:
    """One gateway (one process): its devices poll and compute through the production
    ``Device``; their reports leave in ``SubmitReportBatch`` calls."""

    LINGER_S = 0.05  # a partial batch waits this long for more reports

    def __init__(self, share: _Share,
                 on_progress: Callable[[int, int, int], None] | None = None) -> None:
        self.share = share
        self.on_progress = on_progress
        self.res = FleetResult(devices=len(share.device_ids))
        self.root = Path(share.state_root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.data: dict[int, list[tuple[str, np.ndarray, np.ndarray | None]]] = {}
        for name, ids, values, labels in share.datasets:
            for k, i in enumerate(ids):
                self.data.setdefault(i, []).append(
                    (name, values[k], None if labels is None else labels[k]))
        self.left = max(1.0, share.deadline - time.time())
        self.retry = RetryPolicy(attempts=6, base_s=0.2, cap_s=2.0,
                                 timeout_s=min(30.0, self.left))
        self.chans = [secure_channel(share.endpoint) for _ in range(2)]
        self.stub = device_pb2_grpc.DeviceServiceStub(self.chans[0])
        self.cv = threading.Condition()
        self.ready: list[tuple[str, Any]] = []  # ("poll", i) | ("probe", key); LIFO is fine
        self.state = {i: _DevState() for i in share.device_ids}
        self.devices: dict[int, Device] = {}
        self.waiting: dict[tuple[str, int], dict[int, None]] = {}
        self.probe_at: dict[tuple[str, int], float] = {}
        self.outbox: list[tuple[int, device_pb2.Report]] = []
        self.oldest = 0.0
        self.active = 0
        self.sending = 0
        self.done = 0
        self.checked_in = 0
        self.stop = False
        self.jitter = random.Random(None if share.seed is None else f"gw:{share.seed}")
        for i in reversed(share.device_ids):
            self.state[i].queued = True
            self.ready.append(("poll", i))

    # ---- devices ------------------------------------------------------------------------
    def _make(self, i: int) -> Device:
        dev = self.devices.get(i)
        if dev is None:
            s = self.share
            rng = RandomSource.seeded(f"fleet:{s.seed}:{i}") if s.seed is not None else None
            dev = Device(s.endpoint, self.root / f"device-{i:07d}", budget=s.budget,
                         enrollment_secret=s.enrollment_secret, label="uldp-gateway",
                         channel=self.chans[i % len(self.chans)], retry=self.retry, rng=rng,
                         durable=s.durable, simulation=True)  # a simulated fleet says so
            for name, values, labels in self.data.get(i, ()):
                dev.add_dataset(name, values, labels=labels,
                                dim=int(values.shape[1]) if np.ndim(values) == 2 else None)
            self.devices[i] = dev
        return dev

    def _finish_if_idle(self, i: int) -> None:
        """(under cv) Close device ``i`` when nothing about it is outstanding."""
        st = self.state[i]
        if st.done or st.queued or st.active or st.keys or st.unacked:
            return
        st.done = True
        self.done += 1
        dev = self.devices.pop(i, None)
        if dev is not None:
            dev.close()

    def _poll(self, i: int) -> None:
        dev = self._make(i)
        st = self.state[i]
        if not st.polled:  # a reused state dir: reports persisted but never acknowledged
            st.polled = True
            if dev.ledger.entries("pending"):
                dev.resend_pending()
        resp = dev.fetch_tasks()
        out: list[tuple[int, device_pb2.Report]] = []
        refused = []
        for task in resp.tasks:
            try:
                rep = dev.prepare(task)
            except TaskRefused as exc:
                refused.append((task.query_id, str(exc)))
                continue
            rep.device_token = _device_token(dev)
            out.append((i, rep))
        keys = {(w.query_id, int(w.phase)) for w in resp.waiting}
        if keys:
            dev.ledger.close()  # reopened when its phase opens; keeps idle devices small
        now = time.monotonic()
        hint = max(resp.retry_after_ms / 1000.0, 0.2)
        with self.cv:
            self.res.refused += refused
            st = self.state[i]
            if not st.checked_in:
                st.checked_in = True
                self.checked_in += 1
            for key in keys - st.keys:
                self.waiting.setdefault(key, {})[i] = None
                if key not in self.probe_at:
                    self.probe_at[key] = now + hint
            for key in st.keys - keys:
                self.waiting.get(key, {}).pop(i, None)
            st.keys = keys
            if out:
                if not self.outbox:
                    self.oldest = now
                self.outbox += out
                st.unacked += len(out)
            self.cv.notify_all()

    def _probe(self, key: tuple[str, int]) -> None:
        """Has the phase ``key`` opened? Ask through one of the devices waiting for it."""
        with self.cv:
            ids = list(self.waiting.get(key, {}))
        if not ids:
            return
        dev = self._make(ids[0])
        resp = dev.fetch_tasks(query_id=key[0])
        still = any((w.query_id, int(w.phase)) == key for w in resp.waiting)
        with self.cv:
            if still:
                wait = max(resp.retry_after_ms / 1000.0, 0.2) * (0.75 + 0.5 * self.jitter.random())
                self.probe_at[key] = time.monotonic() + wait
                return
            # open (or gone): every device waiting for it polls now
            for i in self.waiting.pop(key, {}):
                st = self.state[i]
                st.keys.discard(key)
                if not st.queued and not st.active:
                    st.queued = True
                    self.ready.append(("poll", i))
            self.cv.notify_all()

    def _worker(self) -> None:
        while True:
            with self.cv:
                while True:
                    if self.stop or time.time() > self.share.deadline:
                        return
                    now = time.monotonic()
                    due = [k for k, t in self.probe_at.items() if t <= now]
                    if due:
                        key = due[0]
                        del self.probe_at[key]
                        item: tuple[str, Any] = ("probe", key)
                        break
                    if self.ready:
                        item = self.ready.pop()
                        if item[0] == "poll":
                            self.state[item[1]].queued = False
                            self.state[item[1]].active = True
                        break
                    if (not self.active and not self.outbox and not self.sending
                            and not self.probe_at):
                        self.stop = True
                        self.cv.notify_all()
                        return
                    nxt = min(self.probe_at.values(), default=now + 0.1)
                    self.cv.wait(timeout=max(0.005, min(nxt - now, 0.1)))
                self.active += 1
            try:
                if item[0] == "poll":
                    self._poll(item[1])
                else:
                    self._probe(item[1])
                failed = None
            except Exception as exc:
                failed = (f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError)
                          else f"{type(exc).__name__}: {exc}")
            with self.cv:
                self.active -= 1
                if item[0] == "poll":
                    i = item[1]
                    st = self.state[i]
                    st.active = False
                    if failed is not None:
                        st.failures += 1
                        if st.failures >= self.share.max_failures:
                            self.res.errors.append(f"device {i}: {failed}")
                            st.keys.clear()
                        else:
                            st.queued = True
                            self.ready.insert(0, ("poll", i))
                    self._finish_if_idle(i)
                elif failed is not None:  # probe again later
                    self.probe_at[item[1]] = time.monotonic() + 0.5
                self.cv.notify_all()

    # ---- reports --------------------------------------------------------------------------
    def _sender(self) -> None:
        B = self.share.batch_size
        while True:
            with self.cv:
                while True:
                    if time.time() > self.share.deadline:
                        return
                    if self.outbox:
                        full = len(self.outbox) >= B
                        idle = not self.ready and self.active == 0
                        if full or idle or time.monotonic() - self.oldest >= self.LINGER_S:
                            break
                    elif self.stop:
                        return
                    self.cv.wait(timeout=self.LINGER_S / 2)
                batch, self.outbox = self.outbox[:B], self.outbox[B:]
                self.oldest = time.monotonic()
                self.sending += 1
            try:
                self._send(batch)
            except Exception as exc:  # never a silent sender death: count and go on
                with self.cv:
                    self.res.errors.append(f"batch of {len(batch)}: {type(exc).__name__}: "
                                           f"{exc}")
                    for i, _ in batch:
                        self.state[i].unacked = 0
                        self._finish_if_idle(i)
            finally:
                with self.cv:
                    self.sending -= 1
                    self.cv.notify_all()

    def _send(self, batch: list[tuple[int, device_pb2.Report]]) -> None:
        req = device_pb2.SubmitReportBatchRequest(reports=[r for _, r in batch])
        try:
            resp = call_with_retry(lambda t: self.stub.SubmitReportBatch(req, timeout=t),
                                   self.retry, self.jitter)
        except grpc.RpcError as exc:
            with self.cv:  # the reports stay pending in the devices' ledgers
                self.res.errors.append(f"batch of {len(batch)}: {exc.code().name}: "
                                       f"{exc.details()}")
                for i, _ in batch:
                    self.state[i].unacked -= 1
                    self._finish_if_idle(i)
            return
        again: list[tuple[int, device_pb2.Report]] = []
        acked = 0
        for (i, rep), r in zip(batch, resp.results, strict=True):
            dev = self._make(i)
            if r.code == 0:
                dev.ledger.mark(rep.query_id, _ACKED, "duplicate" if r.duplicate else "")
                acked += 1
            elif r.code in _RETRYABLE_CODES:
                again.append((i, rep))
            elif r.code == _UNAUTHENTICATED and self.state[i].failures < 2:
                self.state[i].failures += 1
                dev.enroll(force=True)
                rep.device_token = _device_token(dev)
                again.append((i, rep))
            else:
                name = _CODE_NAMES.get(r.code, str(r.code))
                dev.ledger.mark(rep.query_id, "rejected", f"{name}: {r.message}")
                with self.cv:
                    self.res.rejected.append((rep.query_id, f"{name}: {r.message}"))
        with self.cv:
            self.res.submitted += acked
            retried = {id(x) for x in again}
            for item in batch:
                if id(item) not in retried:
                    i = item[0]
                    self.state[i].unacked -= 1
                    self._finish_if_idle(i)
                    if not self.state[i].done and i in self.devices:
                        self.devices[i].ledger.close()  # still waiting for another phase
            if again:
                self.outbox += again
                self.oldest = time.monotonic()
            self.cv.notify_all()

    # ---- run --------------------------------------------------------------------------------
    def run(self) -> FleetResult:
        t0 = time.monotonic()
        threads = [threading.Thread(target=self._worker, name=f"gw-{k}", daemon=True)
                   for k in range(max(1, self.share.concurrency))]
        threads.append(threading.Thread(target=self._sender, name="gw-send", daemon=True))
        for t in threads:
            t.start()
        last = 0.0
        while any(t.is_alive() for t in threads):
            threads[-1].join(timeout=0.5)
            now = time.monotonic()
            if self.on_progress is not None and now - last >= 0.5:
                last = now
                self.on_progress(self.done, self.res.submitted, self.checked_in)
            if time.time() > self.share.deadline + 1.0:
                break  # calls in flight are cut off below
        with self.cv:
            self.stop = True
            self.cv.notify_all()
        for c in self.chans:
            c.close()
        for t in threads:
            t.join(timeout=5.0)
        with self.cv:
            self.res.unfinished = sum(1 for st in self.state.values() if not st.done)
        for dev in list(self.devices.values()):
            dev.close()
        self.res.seconds = time.monotonic() - t0
        if self.on_progress is not None:
            self.on_progress(self.done, self.res.submitted, self.checked_in)
        return self.res


def _gateway_main(share: _Share, queue: Any, g: int) -> None:
    """Entry point of a gateway process: progress and the result go to ``queue``."""
    logging.basicConfig(level=logging.WARNING)
    try:
        res = _Gateway(share, lambda d, r, c: queue.put(("progress", g, d, r, c))).run()
        queue.put(("result", g, res))
    except BaseException as exc:  # the parent reports it; never a silent hang
        queue.put(("failed", g, f"{type(exc).__name__}: {exc}"))


def run_gateway_fleet(endpoint: Endpoint, state_root: str | Path, n_devices: int,
                      datasets: list[FleetDataset], *, gateways: int = 2,
                      concurrency: int = 16, batch_size: int = 500, budget: float = 10.0,
                      enrollment_secret: str = "", seed: int | None = None,
                      timeout_s: float = 900.0, durable: bool = False,
                      keep_state: bool = True,
                      progress: Callable[[FleetProgress], None] | None = None
                      ) -> FleetResult:
    """Run ``n_devices`` devices behind ``gateways`` gateway processes (0 or 1: in this
    process). Device ``i`` is behind gateway ``i % gateways``; ``progress`` is called about
    twice a second. Devices still busy at ``timeout_s`` count as unfinished."""
    root = Path(state_root)
    root.mkdir(parents=True, exist_ok=True)
    for ds in datasets:
        if ds.values is None:
            holders = len(range(ds.residue, n_devices, ds.modulo))
            drawn = ds.data.draw(holders)
            ds.values, ds.labels = drawn if isinstance(drawn, tuple) else (drawn, None)
    G = max(1, gateways)
    deadline = time.time() + timeout_s
    shares = []
    for g in range(G):
        ids = list(range(g, n_devices, G))
        parts = []
        for ds in datasets:
            assert ds.values is not None
            held = [i for i in range(ds.residue, n_devices, ds.modulo) if i % G == g]
            rows = np.asarray([i // ds.modulo for i in held], dtype=np.int64)
            parts.append((ds.name, held, ds.values[rows],
                          None if ds.labels is None else ds.labels[rows]))
        shares.append(_Share(endpoint, str(root), ids, parts, budget, enrollment_secret, seed,
                             deadline, batch_size, concurrency, durable))
    t0 = time.monotonic()
    done, reports, checked = [0] * G, [0] * G, [0] * G

    def report() -> None:
        if progress is not None:
            progress(FleetProgress(n_devices, sum(done), sum(reports), time.monotonic() - t0,
                                   sum(checked)))

    if G == 1:
        def one(d: int, r: int, c: int) -> None:
            done[0], reports[0], checked[0] = d, r, c
            report()
        res = _Gateway(shares[0], one).run()
    else:
        res = _run_gateway_processes(shares, deadline, done, reports, checked, report)
    res.devices = n_devices
    res.seconds = time.monotonic() - t0
    if not keep_state:
        shutil.rmtree(root, ignore_errors=True)
    return res


def _run_gateway_processes(shares: list[_Share], deadline: float, done: list[int],
                           reports: list[int], checked: list[int],
                           report: Callable[[], None]) -> FleetResult:
    import multiprocessing as mp
    import queue as queue_mod

    ctx = mp.get_context("spawn")  # no fork of a process holding gRPC channels
    q = ctx.Queue()
    procs = [ctx.Process(target=_gateway_main, args=(sh, q, g), daemon=True,
                         name=f"uldp-gateway-{g}") for g, sh in enumerate(shares)]
    for pr in procs:
        pr.start()
    results: dict[int, FleetResult] = {}
    total = FleetResult(devices=sum(len(sh.device_ids) for sh in shares))
    try:
        while len(results) < len(procs):
            try:
                msg = q.get(timeout=0.5)
            except queue_mod.Empty:
                if time.time() > deadline + 30 or all(
                        not pr.is_alive() for g, pr in enumerate(procs) if g not in results):
                    break
                continue
            kind, g = msg[0], msg[1]
            if kind == "progress":
                done[g], reports[g], checked[g] = msg[2], msg[3], msg[4]
                report()
            elif kind == "result":
                results[g] = msg[2]
                done[g], reports[g] = len(shares[g].device_ids) - msg[2].unfinished, \
                    msg[2].submitted
                report()
            else:
                results[g] = FleetResult(devices=len(shares[g].device_ids),
                                         errors=[f"gateway {g} failed: {msg[2]}"],
                                         unfinished=len(shares[g].device_ids) - done[g])
    finally:
        for pr in procs:
            pr.join(timeout=5)
            if pr.is_alive():
                pr.terminate()
                pr.join(timeout=5)
    for g, sh in enumerate(shares):
        r = results.get(g) or FleetResult(devices=len(sh.device_ids),
                                          errors=[f"gateway {g} did not report"],
                                          unfinished=len(sh.device_ids) - done[g])
        total.submitted += r.submitted
        total.refused += r.refused
        total.rejected += r.rejected
        total.errors += r.errors
        total.unfinished += r.unfinished
    return total
