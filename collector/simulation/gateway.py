"""Simulated fleets behind gateways (``uldp fleet run --gateways N``, ``uldp demo``).

A gateway is what a deployment puts in front of many devices (an edge box, an app
backend relaying for its phones). Every device behind it is a real
:class:`uldp.client.device.Device` with its own identity, its own ledger (its rows of the
gateway's :class:`~uldp.client.ledger.StateFile`), its own task checks and its own
privatization with its own random source; the gateway only carries the devices' messages,
many per call, in the protocol's batch calls (``proto/uldp/v1/device.proto``):

1. ``EnrollBatch``: the devices' own EnrollRequests (``Device.enrollment_request``), each
   answer handed back to its device (``Device.enrolled``);
2. ``GetTasksBatch``: each device's token and GetTasksRequest; each device checks its
   tasks, charges its ledger and computes its report (``Device.prepare``);
3. ``SubmitReportBatch``: the reports, each with its device's token; each answer goes to
   its device's ledger (``Device.answered``). Sealed reports of shuffle-mode queries go to
   the shuffler instead (``SubmitSealedBatch``, ``shuffler=``), the same way.

A gateway checks its devices in ``batch`` at a time. Devices assigned to a phase that is
not open yet wait; the gateway asks through one of them, now and then, whether the phase
has opened, and then fetches the tasks of all of them in one GetTasksBatch.
``gateways=N`` runs N gateway processes (device ``i`` is behind gateway ``i % N``).
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from uldp.client.device import Device, StateFile, TaskRefused
from uldp.client.randomness import RandomSource
from uldp.client.transport import Endpoint, RetryPolicy, call_with_retry, secure_channel
from uldp.client.wire import device_pb2, device_pb2_grpc, shuffler_pb2, shuffler_pb2_grpc
from uldp.collector.simulation.fleet import (
    FleetDataset,
    FleetProgress,
    FleetResult,
    draw_datasets,
    fleet_attestation,
)

__all__ = ["run_gateway_fleet"]

log = logging.getLogger("uldp.fleet")

_UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]
_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}
Key = tuple[str, int]  # (query id, phase) a device waits for


@dataclass
class _Share:
    """The picklable job of one gateway: its devices and their local data."""

    index: int
    endpoint: Endpoint
    state_root: str
    device_ids: list[int]
    #: (dataset name, global ids of the holders in this share, values, labels or None)
    datasets: list[tuple[str, list[int], np.ndarray, np.ndarray | None]]
    budget: float
    enrollment_secret: str
    seed: int | None
    deadline: float  # time.time() after which nothing new is started
    batch: int  # devices checked in per batch call
    durable: bool
    max_failures: int = 8
    report_batch: int = 500  # reports per SubmitReportBatch call
    shuffler: Endpoint | None = None  # shuffle mode: where sealed reports go
    #: shuffle mode: the shuffler's attestation key (hex), standing in for the app's back
    #: end that vouches for each simulated device towards the shuffler's enrolment check
    shuffler_attestation_key: str | None = None


@dataclass
class _Dev:
    """The gateway's bookkeeping of one device it relays for."""

    device: Device
    keys: set[Key] = field(default_factory=set)  # phases it waits for
    failures: int = 0
    checked_in: bool = False


class _Gateway:
    """One gateway (one process): see the module docstring."""

    def __init__(self, share: _Share,
                 on_progress: Callable[[int, int, int], None] | None = None) -> None:
        self.share = share
        self.on_progress = on_progress
        self.res = FleetResult(devices=len(share.device_ids))
        root = Path(share.state_root)
        root.mkdir(parents=True, exist_ok=True)
        self.store = StateFile(root / f"gateway-{share.index}.sqlite", durable=share.durable)
        self.data: dict[int, list[tuple[str, np.ndarray, np.ndarray | None]]] = {}
        for name, ids, values, labels in share.datasets:
            for k, i in enumerate(ids):
                self.data.setdefault(i, []).append(
                    (name, values[k], None if labels is None else labels[k]))
        left = max(1.0, share.deadline - time.time())
        self.retry = RetryPolicy(attempts=6, base_s=0.2, cap_s=2.0, timeout_s=min(30.0, left))
        self.chan = secure_channel(share.endpoint)
        self.stub = device_pb2_grpc.DeviceServiceStub(self.chan)
        self.shuffler_chan = secure_channel(share.shuffler) if share.shuffler else None
        self.shuffler_stub = (shuffler_pb2_grpc.ShufflerServiceStub(self.shuffler_chan)
                              if self.shuffler_chan is not None else None)
        self.jitter = random.Random(None if share.seed is None else f"gw:{share.seed}")
        self.todo: deque[int] = deque(share.device_ids)  # not checked in yet
        self.live: dict[int, _Dev] = {}
        self.waiting: dict[Key, dict[int, None]] = {}
        self.probe_at: dict[Key, float] = {}
        self.done = 0
        self.checked_in = 0
        self._last_progress = 0.0

    # ---- devices --------------------------------------------------------------------------
    def _dev(self, i: int) -> _Dev:
        st = self.live.get(i)
        if st is None:
            s = self.share
            rng = RandomSource.seeded(f"fleet:{s.seed}:{i}") if s.seed is not None else None
            dev = Device(s.endpoint, self.store.slot(f"device-{i:07d}"), budget=s.budget,
                         enrollment_secret=s.enrollment_secret, label="uldp-gateway",
                         channel=self.chan, retry=self.retry, rng=rng,
                         simulation=True,  # a simulated fleet says so
                         shuffler_channel=self.shuffler_chan,
                         shuffler_attestation=fleet_attestation(
                             s.shuffler_attestation_key, f"gateway-device-{i}"))
            for name, values, labels in self.data.get(i, ()):
                dev.add_dataset(name, values, labels=labels,
                                dim=int(values.shape[1]) if np.ndim(values) == 2 else None)
            st = self.live[i] = _Dev(dev)
        return st

    def _finish(self, i: int, error: str | None = None) -> None:
        """Device ``i`` has nothing left to do (or failed for good with ``error``)."""
        st = self.live.pop(i, None)
        if st is None:
            return
        if error is not None:
            self.res.errors.append(f"device {i}: {error}")
        for key in st.keys:
            self.waiting.get(key, {}).pop(i, None)
        st.device.close()
        self.done += 1

    def _failed(self, ids: Iterable[int], error: str) -> None:
        """A call for ``ids`` failed: try them again later, or give up on each after
        ``max_failures`` attempts."""
        for i in ids:
            st = self.live.get(i)
            if st is None:
                continue
            st.failures += 1
            if st.failures >= self.share.max_failures:
                self._finish(i, error)
            else:
                self.todo.append(i)
        time.sleep(0.5)  # the call already retried with backoff: let the collector breathe

    def _call(self, method: Any, request: Any) -> Any:
        return call_with_retry(lambda t: method(request, timeout=t), self.retry, self.jitter)

    # ---- the three batch calls ------------------------------------------------------------
    def _enroll(self, ids: list[int], force: bool = False) -> list[int]:
        """Enroll the devices of ``ids`` that need it; the ids still fine. A device whose
        previous token the collector no longer accepts (UNAUTHENTICATED on a renewal)
        enrols as a new identity, as ``Device.enroll`` does (protocol §10)."""
        asks = [(i, r) for i in ids
                if (r := self.live[i].device.enrollment_request(force)) is not None]
        try:
            anew = self._enroll_batch(asks, new_identity=False)
            fresh = [(i, self.live[i].device.enrollment_request(new_identity=True))
                     for i in anew]
            self._enroll_batch([(i, r) for i, r in fresh if r is not None], new_identity=True)
        except grpc.RpcError as exc:
            self._failed(ids, f"EnrollBatch: {exc.code().name}: {exc.details()}")
            return []
        return [i for i in ids if i in self.live]

    def _enroll_batch(self, asks: list[tuple[int, device_pb2.EnrollRequest]],
                      new_identity: bool) -> list[int]:
        """One EnrollBatch for ``asks`` (a failed call raises), each answer handed to its
        device; the devices whose previous token was refused (to enrol anew); the others
        refused are finished."""
        if not asks:
            return []
        resp = self._call(self.stub.EnrollBatch,
                          device_pb2.EnrollBatchRequest(requests=[r for _, r in asks]))
        anew = []
        for (i, ask), r in zip(asks, resp.results, strict=True):
            if r.code == _UNAUTHENTICATED and ask.previous_token:
                log.warning("device %d: the collector no longer accepts its token: "
                            "enrolling anew", i)
                anew.append(i)
            elif r.code != 0:
                self._finish(i, f"enrollment refused: {_NAMES.get(r.code, r.code)}: "
                                f"{r.message}")
            else:
                self.live[i].device.enrolled(r.enrollment, new_identity=new_identity)
        return anew

    def _get_tasks(self, ids: list[int]) -> list[tuple[int, device_pb2.GetTasksResponse]]:
        """GetTasksBatch for ``ids`` (an expired token is renewed once)."""
        out: list[tuple[int, device_pb2.GetTasksResponse]] = []
        for attempt in (0, 1):
            items = [device_pb2.GetTasksItem(device_token=self.live[i].device.token or "",
                                             request=self.live[i].device.tasks_request())
                     for i in ids]
            try:
                resp = self._call(self.stub.GetTasksBatch,
                                  device_pb2.GetTasksBatchRequest(items=items))
            except grpc.RpcError as exc:
                self._failed(ids, f"GetTasksBatch: {exc.code().name}: {exc.details()}")
                return out
            again = []
            for i, r in zip(ids, resp.results, strict=True):
                if r.code == 0:
                    out.append((i, r.response))
                elif r.code == _UNAUTHENTICATED and attempt == 0:
                    again.append(i)
                else:
                    self._finish(i, f"GetTasks: {_NAMES.get(r.code, r.code)}: {r.message}")
            if not again:
                break
            ids = self._enroll(again, force=True)
        return out

    def _submit(self, reports: list[tuple[int, Any]]) -> None:
        """Send the reports in the clear to the collector (SubmitReportBatch) and the
        sealed ones to the shuffler (SubmitSealedBatch)."""
        sealed = [(i, r) for i, r in reports if isinstance(r, shuffler_pb2.SealedReport)]
        clear = [(i, r) for i, r in reports if not isinstance(r, shuffler_pb2.SealedReport)]
        if clear:
            self._submit_via(clear, "SubmitReportBatch", self.stub.SubmitReportBatch,
                             lambda reps: device_pb2.SubmitReportBatchRequest(reports=reps))
        if sealed and self.shuffler_stub is not None:
            self._submit_via(sealed, "SubmitSealedBatch", self.shuffler_stub.SubmitSealedBatch,
                             lambda reps: shuffler_pb2.SubmitSealedBatchRequest(reports=reps))

    def _submit_via(self, reports: list[tuple[int, Any]], name: str, method: Any,
                    make: Callable[[list[Any]], Any]) -> None:
        """Send the reports (each with its device's token) in batch calls and hand every
        answer to its device's ledger. UNAUTHENTICATED: the device enrolls again and the
        report goes once more; a retryable code: sent again."""
        rounds = 0
        while reports and rounds < self.share.max_failures:
            rounds += 1
            again: list[tuple[int, Any]] = []
            renew: list[int] = []
            for part in self._parts(reports):
                try:
                    resp = self._call(method, make([r for _, r in part]))
                except grpc.RpcError as exc:  # the reports stay pending in the ledgers
                    for i, _ in part:
                        self._finish(i, f"{name}: {exc.code().name}: {exc.details()}")
                    continue
                for (i, rep), r in zip(part, resp.results, strict=True):
                    if r.code == _UNAUTHENTICATED and rounds == 1:
                        if not isinstance(rep, shuffler_pb2.SealedReport):
                            renew.append(i)  # a shuffler takes no token: nothing to renew
                        again.append((i, rep))
                    elif not self.live[i].device.answered(rep.query_id, r.code, r.message,
                                                          r.duplicate):
                        again.append((i, rep))  # retryable: the same bytes again
                    elif r.code == 0:
                        self.res.submitted += 1
                    else:
                        self.res.rejected.append(
                            (rep.query_id, f"{_NAMES.get(r.code, r.code)}: {r.message}"))
            if renew:
                kept = set(self._enroll(renew, force=True))
                again = [(i, rep) for i, rep in again if i in kept or i not in renew]
            reports = [(i, rep) for i, rep in again if i in self.live]
        for i, rep in reports:
            self._finish(i, f"report for query {rep.query_id} not acknowledged")

    def _parts(self, items: list[tuple[int, Any]]) -> Iterator[list[tuple[int, Any]]]:
        """``items`` (device, message) of the devices still live, in calls of at most
        ``report_batch``, each message carrying its device's current credential: its
        token for the collector, its attestation (beside the ticket it holds) for the
        shuffler."""
        B = self.share.report_batch
        for k in range(0, len(items), B):
            part = [(i, m) for i, m in items[k:k + B] if i in self.live]
            for i, m in part:
                dev = self.live[i].device
                if isinstance(m, shuffler_pb2.SealedReport):
                    m.CopyFrom(dev.attested(m))
                else:
                    m.device_token = dev.token or ""
            yield part

    def _decline(self, declines: list[tuple[int, device_pb2.Decline]]) -> None:
        """Send the devices' declines (each with its token) in DeclineTaskBatch calls. A
        decline not acknowledged changes nothing: the device gets its task again at its
        next check-in (if it has one) and refuses it again."""
        for part in self._parts(declines):
            try:
                resp = self._call(self.stub.DeclineTaskBatch, device_pb2.DeclineTaskBatchRequest(
                    declines=[d for _, d in part]))
            except grpc.RpcError as exc:
                log.warning("DeclineTaskBatch: %s: %s", exc.code().name, exc.details())
                continue
            self.res.declined += sum(1 for r in resp.results if r.code == 0)

    # ---- checking devices in ----------------------------------------------------------------
    def _check_in(self, ids: list[int]) -> None:
        """Enroll (if needed), fetch tasks, privatize and submit, for ``ids``."""
        for i in ids:
            self._dev(i)
        ids = self._enroll(ids)
        reports: list[tuple[int, Any]] = []
        declines: list[tuple[int, device_pb2.Decline]] = []
        now = time.monotonic()
        for i, resp in self._get_tasks(ids):
            st = self.live[i]
            owed: set[str] = set()
            if not st.checked_in:
                st.checked_in = True
                self.checked_in += 1
                # a reused state file may hold reports persisted but never acknowledged
                for rep in () if self.store.fresh else st.device.pending_reports():
                    reports.append((i, rep))
                    owed.add(rep.query_id)
            for task in resp.tasks:
                if task.query_id in owed:
                    continue  # its stored report is on its way already
                try:
                    reports.append((i, st.device.prepare(task)))
                except TaskRefused as exc:
                    self.res.refused.append((task.query_id, str(exc)))
                    if (d := st.device.decline_message(task, exc)) is not None:
                        declines.append((i, d))
            keys = {(w.query_id, int(w.phase)) for w in resp.waiting}
            for key in keys - st.keys:
                self.waiting.setdefault(key, {})[i] = None
                self.probe_at.setdefault(key, now + max(resp.retry_after_ms / 1000.0, 0.2))
            st.keys = keys
        self._submit(reports)
        self._decline(declines)
        for i in ids:
            st_ = self.live.get(i)
            if st_ is not None and not st_.keys:
                self._finish(i)

    def _probe(self) -> None:
        """Ask, through one waiting device, whether each due phase has opened; check in
        every device waiting for a phase that did (or sleep until the next probe)."""
        now = time.monotonic()
        due = [k for k, t in self.probe_at.items() if t <= now]
        if not due:
            nxt = min(self.probe_at.values())
            time.sleep(max(0.005, min(nxt - now, self.share.deadline - time.time(), 0.5)))
            return
        for key in due:
            ids = list(self.waiting.get(key, {}))
            if not ids:
                self.probe_at.pop(key, None)
                continue
            got = self._get_tasks(ids[:1])
            if got and any((w.query_id, int(w.phase)) == key for w in got[0][1].waiting):
                hint = max(got[0][1].retry_after_ms / 1000.0, 0.2)
                self.probe_at[key] = now + hint * (0.75 + 0.5 * self.jitter.random())
                continue
            self.probe_at.pop(key, None)
            for i in self.waiting.pop(key, {}):  # open (or gone): all of them ask now
                if i in self.live:
                    self.live[i].keys.discard(key)
                    self.todo.append(i)

    # ---- run ----------------------------------------------------------------------------------
    def _progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.on_progress is not None and (force or now - self._last_progress >= 0.5):
            self._last_progress = now
            self.on_progress(self.done, self.res.submitted, self.checked_in)

    def run(self) -> FleetResult:
        t0 = time.monotonic()
        try:
            while time.time() <= self.share.deadline:
                if self.todo:
                    n = min(self.share.batch, len(self.todo))
                    self._check_in(list(dict.fromkeys(self.todo.popleft() for _ in range(n))))
                elif self.probe_at:
                    self._probe()
                else:
                    break
                self._progress()
        finally:
            self.chan.close()
            if self.shuffler_chan is not None:
                self.shuffler_chan.close()
            self.res.unfinished = len(self.share.device_ids) - self.done
            for st in self.live.values():
                st.device.close()
            self.store.close()
        self.res.seconds = time.monotonic() - t0
        self._progress(force=True)
        return self.res


def _gateway_main(share: _Share, queue: Any) -> None:
    """Entry point of a gateway process: progress and the result go to ``queue``."""
    logging.basicConfig(level=logging.WARNING)
    g = share.index
    try:
        res = _Gateway(share, lambda d, r, c: queue.put(("progress", g, d, r, c))).run()
        queue.put(("result", g, res))
    except BaseException as exc:  # the parent reports it; never a silent hang
        queue.put(("failed", g, f"{type(exc).__name__}: {exc}"))


def _shares(endpoint: Endpoint, root: Path, n_devices: int, datasets: list[FleetDataset],
            G: int, deadline: float, **kw: Any) -> list[_Share]:
    shares = []
    for g in range(G):
        parts = []
        for ds in datasets:
            assert ds.values is not None
            held = [i for i in range(ds.residue, n_devices, ds.modulo) if i % G == g]
            rows = np.asarray([i // ds.modulo for i in held], dtype=np.int64)
            parts.append((ds.name, held, ds.values[rows],
                          None if ds.labels is None else ds.labels[rows]))
        shares.append(_Share(g, endpoint, str(root), list(range(g, n_devices, G)), parts,
                             deadline=deadline, **kw))
    return shares


def run_gateway_fleet(endpoint: Endpoint, state_root: str | Path, n_devices: int,
                      datasets: list[FleetDataset], *, gateways: int = 2, batch: int = 500,
                      budget: float = 10.0, enrollment_secret: str = "",
                      seed: int | None = None, timeout_s: float = 900.0,
                      durable: bool = False, keep_state: bool = True,
                      progress: Callable[[FleetProgress], None] | None = None,
                      shuffler: Endpoint | None = None,
                      shuffler_attestation_key: str | None = None) -> FleetResult:
    """Run ``n_devices`` devices behind ``gateways`` gateway processes (0 or 1: in this
    process), each checking in ``batch`` devices per batch call. ``progress`` is called
    about twice a second. Devices still busy at ``timeout_s`` count as unfinished. The
    devices' state is in ``state_root/gateway-<g>.sqlite`` (a reused ``state_root`` resumes
    them: run it with the same number of gateways). ``shuffler``: shuffle mode, where the
    devices' sealed reports go; ``shuffler_attestation_key``: the shuffler's attestation
    key (hex), with which each device is vouched for (a subject of its own)."""
    root = Path(state_root)
    root.mkdir(parents=True, exist_ok=True)
    draw_datasets(datasets, n_devices)
    G = max(1, gateways)
    deadline = time.time() + timeout_s
    shares = _shares(endpoint, root, n_devices, datasets, G, deadline, budget=budget,
                     enrollment_secret=enrollment_secret, seed=seed, batch=max(1, batch),
                     durable=durable, shuffler=shuffler,
                     shuffler_attestation_key=shuffler_attestation_key)
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

    ctx = mp.get_context("spawn")  # no fork of a process holding gRPC channels
    q = ctx.Queue()
    procs = [ctx.Process(target=_gateway_main, args=(sh, q), daemon=True,
                         name=f"uldp-gateway-{sh.index}") for sh in shares]
    for pr in procs:
        pr.start()
    results: dict[int, FleetResult] = {}
    try:
        _collect(q, procs, shares, results, deadline, done, reports, checked, report)
    finally:
        for pr in procs:
            pr.join(timeout=5)
            if pr.is_alive():
                pr.terminate()
                pr.join(timeout=5)
    total = FleetResult(devices=sum(len(sh.device_ids) for sh in shares))
    for g, sh in enumerate(shares):
        r = results.get(g) or FleetResult(devices=len(sh.device_ids),
                                          errors=[f"gateway {g} did not report"],
                                          unfinished=len(sh.device_ids) - done[g])
        total.submitted += r.submitted
        total.refused += r.refused
        total.declined += r.declined
        total.rejected += r.rejected
        total.errors += r.errors
        total.unfinished += r.unfinished
    return total


def _collect(q: Any, procs: list[Any], shares: list[_Share], results: dict[int, FleetResult],
             deadline: float, done: list[int], reports: list[int], checked: list[int],
             report: Callable[[], None]) -> None:
    """Read the gateways' progress and results from ``q`` until every one reported (or
    died, or the deadline passed by 30 s)."""
    import queue as queue_mod

    while len(results) < len(procs):
        try:
            msg = q.get(timeout=0.5)
        except queue_mod.Empty:
            if time.time() > deadline + 30 or all(
                    not pr.is_alive() for g, pr in enumerate(procs) if g not in results):
                return
            continue
        kind, g = msg[0], msg[1]
        if kind == "progress":
            done[g], reports[g], checked[g] = msg[2], msg[3], msg[4]
        elif kind == "result":
            results[g] = msg[2]
            done[g] = len(shares[g].device_ids) - msg[2].unfinished
            reports[g] = msg[2].submitted
        else:
            results[g] = FleetResult(devices=len(shares[g].device_ids),
                                     errors=[f"gateway {g} failed: {msg[2]}"],
                                     unfinished=len(shares[g].device_ids) - done[g])
        report()
