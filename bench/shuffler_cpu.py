"""Benchmark: the shuffler's CPU per report, by stage, in process (no network, no TLS).

    python bench/shuffler_cpu.py [--reports 20000] [--batch-size 500] [--batch-parts 1]
                                 [--checkers 0] [--repeat 3]

What ``uldp shuffler serve`` does with a report, run in one process over the real
``ShufflerStore`` (SQLite, WAL, ``synchronous=FULL``) and ``ShufflerServicer`` /
``Forwarder``, with a stand-in for the collector (its public view of one query, and a
ForwardBatch that serializes the request and acknowledges it). Every report carries a
real shuffler ticket and an HMAC app attestation. Per report, thread CPU time (µs) of:

* decode — the SubmitSealedBatch bytes counted (item cap) and parsed, as the gRPC
  handler does;
* checks 1–5 — ticket and attestation checks, the request's own checks
  (``uldp.collector.shuffler.checks``; of it: ticket, attestation), in the calling
  thread, or with ``--checkers N`` the thread's share (the request's bytes to a pool of N
  processes and their answers back) while the processes do the checks;
* check 6 — the query's cell (``ShufflerServicer._placed_admission``);
* store — ``ShufflerStore.submit`` (slot, cell and replay checks, inserts, commit);
* draw / send / finish — drawing the batches (uniform ordered sample, rows marked),
  reading them back, serializing the ForwardBatch request, forgetting the slots;
* total — the whole run's process CPU over the reports (includes the response
  messages and everything not listed), and with ``--checkers`` the CPU of the checking
  processes (from ``/proc``) and the sum of both.

The gRPC server's own work (TLS, HTTP/2) is not here: ``bench/shuffle_throughput.py``
measures the shuffler process as a whole. CPU seconds, not wall-clock rates, so the
numbers hold on a loaded machine better than rates do (best of ``--repeat`` runs).
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from uldp.client.wire import MAX_BATCH_ITEMS, shuffler_pb2
from uldp.collector.security.attestation import HmacAttestation
from uldp.collector.security.tickets import Ticket, TicketKey
from uldp.collector.service.handlers import decoder
from uldp.collector.shuffler import service as sv
from uldp.collector.shuffler import store as st

DIGEST = "cd" * 32
STAGES = [("decode", "decode"), ("checks 1–5", "check"), ("  of it: ticket", "ticket"),
          ("  of it: attestation", "attestation"), ("check 6 (the query's cell)", "placed"),
          ("store", "submit"), ("draw", "draw"), ("send (read back, serialize)", "send"),
          ("finish (forget slots)", "finish")]


class _Stub:
    def ForwardBatch(self, pieces: Any, timeout: float) -> Any:
        n = sum(len(r.SerializeToString()) and len(r.sealed)  # what the gRPC client does
                for r in pieces)

        class _Resp:
            stored, refused, duplicate = n, 0, False
        return _Resp()


class _Link:
    def __init__(self, placed: int) -> None:
        self.stub, self.polls = _Stub(), 0
        self.info = sv.QueryInfo(True, 100, {1: sv.PhaseInfo("open", 0, placed)},
                                 {(1, 0, 0): placed}, placed)

    def query(self, query_id: str, fresh: bool = False) -> sv.QueryInfo:
        return self.info


class _Ctx:
    def invocation_metadata(self) -> tuple[()]:
        return ()

    def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"{code}: {details}")


def _timed(spent: dict[str, float], lock: threading.Lock, label: str,
           fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*a: Any, **k: Any) -> Any:
        t0 = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            with lock:
                spent[label] += time.thread_time() - t0
    return run


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children() -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
                .read_text().split()]
    except OSError:
        return []


def once(n: int, batch: int, parts: int, checkers: int = 0) -> dict[str, float]:
    """One run: per-stage CPU µs per report."""
    work = Path(tempfile.mkdtemp(prefix="uldp-bench-shuffler-cpu-"))
    tickets, att = TicketKey.generate(), HmacAttestation(os.urandom(32))
    calls = [shuffler_pb2.SubmitSealedBatchRequest(reports=[
        shuffler_pb2.SealedReport(
            query_id="bench", phase=1, task_digest=DIGEST, sealed=os.urandom(129),
            ticket=tickets.issue(Ticket("bench", 1, 0, 0, DIGEST, i)),
            attestation=att.issue(f"device-{i}", 3600))
        for i in range(k, min(k + batch, n))]).SerializeToString() for k in range(0, n, batch)]
    spent: dict[str, float] = defaultdict(float)
    lock = threading.Lock()
    store = st.ShufflerStore(work / "shuffler.db")
    link = _Link(n)
    fwd = sv.Forwarder(store, link, sv.ShufflerConfig(min_batch=100, batch_parts=parts,
                                                       linger_s=3600),  # type: ignore[arg-type]
                       verifier_name="hmac-attestation")
    servicer = sv.ShufflerServicer(store, tickets, link, att,  # type: ignore[arg-type]
                                   "hmac-attestation", on_admit=fwd.admitted,
                                   checkers=checkers)
    if checkers:  # the processes up before the clock starts (a shuffler warms them once)
        t_up = time.monotonic() + 120
        while servicer.checkers._ready_pool() is None:
            assert time.monotonic() < t_up, "the checking processes did not start"
            time.sleep(0.05)
    # a draw is ShufflerStore.plan then .commit (a complete cell's batch is sent between
    # the two): both count as the draw
    patched = [(store, "submit"), (store, "plan"), (store, "commit"), (store, "finish"),
               (fwd, "_send"), (servicer.checkers, "check"), (servicer, "_placed_admission"),
               (tickets, "verify"), (att, "verify")]
    labels = ["submit", "draw", "draw", "finish", "send", "check", "placed", "ticket",
              "attestation"]
    for (obj, name), label in zip(patched, labels, strict=True):
        setattr(obj, name, _timed(spent, lock, label, getattr(obj, name)))
    decode = _timed(spent, lock, "decode", decoder(shuffler_pb2.SubmitSealedBatchRequest,
                                                   (1, MAX_BATCH_ITEMS)))
    ctx = _Ctx()
    kids = _children()
    k0 = {p: _cpu_s(p) for p in kids}
    try:
        t0 = time.process_time()
        for raw in calls:
            resp = servicer.SubmitSealedBatch(decode(raw), ctx)  # type: ignore[arg-type]
            resp.SerializeToString()
            assert all(r.code == 0 for r in resp.results), resp.results[0]
        fwd.tick(wait=True)
        while store.counts()["pending"] or fwd._sending:  # the last sends finish
            time.sleep(0.01)
            fwd.tick(wait=True)
        total = time.process_time() - t0
        pool = sum(_cpu_s(p) - k0[p] for p in kids)
        counts = store.counts()
        assert counts.get("reports_forwarded") == n, counts
    finally:
        fwd.stop()
        servicer.checkers.close()
        store.close()
    out = {k: v / n * 1e6 for k, v in spent.items()}
    out["total"] = total / n * 1e6
    out["pool"] = pool / n * 1e6
    out["pooled"] = servicer.checkers.pooled
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=20_000)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--batch-parts", type=int, default=1)
    ap.add_argument("--checkers", type=int, default=0,
                    help="processes for checks 1-5 of batch calls (the shuffler's "
                         "--checkers; 0: in the calling thread)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    runs = [once(a.reports, a.batch_size, a.batch_parts, a.checkers)
            for _ in range(a.repeat)]
    best = min(runs, key=lambda r: r["total"] + r["pool"])
    print(f"Shuffler CPU per report, in process, {a.reports} reports in calls of "
          f"{a.batch_size}, --batch-parts {a.batch_parts}, --checkers {a.checkers} "
          f"({best['pooled']:.0f} reports checked in the pool), best of {a.repeat} runs by "
          f"total (load average {os.getloadavg()[0]:.1f}; `python bench/shuffler_cpu.py "
          f"--reports {a.reports} --batch-parts {a.batch_parts} --checkers "
          f"{a.checkers}`).\n")
    print("| stage | µs per report |\n|---|---|")
    for label, key in STAGES:
        print(f"| {label} | {best.get(key, 0.0):.1f} |")
    print(f"| **main process CPU** | **{best['total']:.1f}** |")
    print(f"| checking processes' CPU | {best['pool']:.1f} |")
    print(f"| **total** | **{best['total'] + best['pool']:.1f}** |")


if __name__ == "__main__":
    main()
