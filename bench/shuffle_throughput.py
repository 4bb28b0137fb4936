"""Benchmark: report throughput through the shuffler (shuffle mode) next to the direct path.

    python bench/shuffle_throughput.py [--devices 20000] [--batch-size 500] [--threads 4]
                                       [--max-batch 50000] [--batch-parts 1] [--checkers N]
                                       [--out bench/results/shuffle.md]

Real processes on loopback, TLS everywhere, SQLite (WAL, synchronous=FULL) on both sides:
a ``uldp collector serve`` with its shuffler port (mutual TLS) and a ``uldp shuffler
serve``. Preparation (not timed): ``--devices`` devices enroll (EnrollBatch) and fetch
their tasks (GetTasksBatch) for two single-phase ``ssl`` mean queries over the same
dataset — one in the clear, one in shuffle mode — and their reports are computed with the
production device function (and sealed, for the shuffled query).

Timed, each from ``--threads`` threads in batch calls of ``--batch-size`` reports, every
report with its own credential:

* direct: ``SubmitReportBatch`` to the collector, each report with its device token; an OK
  = committed at the collector;
* shuffled, ingest: ``SubmitSealedBatch`` to the shuffler, each report with its device's
  shuffler ticket and an app attestation for the shuffler's own enrolment check; an OK =
  committed at the shuffler (one report per slot, cell and ciphertext checked);
* shuffled, end to end: from the first sealed report sent until the collector has stored
  every report (the shuffler's batches drawn, forwarded over mutual TLS, opened with HPKE,
  checked and stored);

and, in process, the per-report CPU cost of sealing (device) and opening (collector).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.sealing import SealKey, parse_seal, plaintext, seal, seal_info, suite
from uldp.client.tasks import TaskSpec, compute_reports
from uldp.client.transport import Endpoint, secure_channel
from uldp.client.wire import device_pb2, device_pb2_grpc, shuffler_pb2, shuffler_pb2_grpc
from uldp.collector.security.attestation import HmacAttestation
from uldp.collector.service.client import AnalystClient, QueryRequest
from uldp.collector.shuffler.launch import make_shuffle_pki, start_shuffler_process
from uldp.collector.simulation.demo import _stop, start_shuffled_collector


def _deploy(work: Path, max_batch: int, parts: int, checkers: int | None = None
            ) -> dict[str, Any]:
    sp = make_shuffle_pki(work)
    col, port, intake = start_shuffled_collector(work, sp)
    sh, sport = start_shuffler_process(work, sp, f"127.0.0.1:{intake}",
                                       extra=["--min-batch", "100", "--linger", "2",
                                              "--max-batch", str(max_batch),
                                              "--batch-parts", str(parts),
                                              *([] if checkers is None else
                                                ["--checkers", str(checkers)])])
    return {"sp": sp, "procs": [sh, col], "collector": Endpoint(f"127.0.0.1:{port}", sp.ca),
            "shuffler": Endpoint(f"127.0.0.1:{sport}", sp.ca)}


def _prepare(d: dict[str, Any], n: int, batch: int) -> dict[str, Any]:
    """Enroll n devices, assign them to both queries, compute (and seal) their reports."""
    an = AnalystClient(d["collector"], (d["sp"].pki.directory / "admin.token").read_text())
    for qid, params in (("direct", None), ("shuffled", {"shuffle": {"min_batch": 100}})):
        an.create(QueryRequest(kind="mean", epsilon=1.0, dataset="bench", users=n, samples=10,
                               bound=1.0, method="ssl", phase_timeout_s=3600, query_id=qid,
                               params=params, allow_simulated=True))
    an.close()
    ch = secure_channel(d["collector"])
    stub = device_pb2_grpc.DeviceServiceStub(ch)
    tokens, tasks, tickets = [], {}, []
    for k in range(0, n, batch):
        m = min(batch, n - k)
        er = stub.EnrollBatch(device_pb2.EnrollBatchRequest(
            requests=[device_pb2.EnrollRequest() for _ in range(m)]), timeout=60)
        toks = [r.enrollment.token for r in er.results]
        tokens += toks
        gr = stub.GetTasksBatch(device_pb2.GetTasksBatchRequest(items=[
            device_pb2.GetTasksItem(device_token=t, request=device_pb2.GetTasksRequest(
                datasets=["bench"])) for t in toks]), timeout=60)
        for r in gr.results:
            for t in r.response.tasks:
                tasks.setdefault(t.query_id, t)
                if t.shuffle_ticket:
                    tickets.append(t.shuffle_ticket)
    ch.close()
    x = np.random.default_rng(1).uniform(-1, 1, (n, 10))
    assert len(tickets) == n
    att = HmacAttestation.from_file(d["sp"].attestation_key)
    out: dict[str, Any] = {"tokens": tokens, "tickets": tickets,
                           "attestations": [att.issue(f"bench-{i}", 3600) for i in range(n)]}
    for qid, t in tasks.items():
        spec = TaskSpec.from_json(t.task_json)
        vals = compute_reports(spec, x, RandomSource.seeded(f"bench:{qid}"))
        out[qid] = (t, vals)
    t, vals = out["shuffled"]
    key = parse_seal(TaskSpec.from_json(t.task_json).seal)
    info = seal_info(t.query_id, t.phase, t.group, t.stage, t.task_digest)
    t0 = time.perf_counter()
    out["sealed"] = [seal(key, info, plaintext(v, True)) for v in vals]
    out["seal_us"] = (time.perf_counter() - t0) / n * 1e6
    return out


def _send(ep: Endpoint, calls: list[Any], threads: int) -> float:
    """Send the prepared batch calls ``(method name, request)`` from ``threads`` threads;
    seconds until every one is answered (every item must be OK)."""
    chans = [secure_channel(ep) for _ in range(threads)]

    def one(k: int) -> None:
        name, req = calls[k]
        ch = chans[k % threads]
        stub: Any = (shuffler_pb2_grpc.ShufflerServiceStub(ch) if name == "SubmitSealedBatch"
                     else device_pb2_grpc.DeviceServiceStub(ch))
        resp = getattr(stub, name)(req, timeout=120)
        bad = [r for r in resp.results if r.code != 0]
        assert not bad, bad[:3]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(len(calls))))
    dt = time.perf_counter() - t0
    for c in chans:
        c.close()
    return dt


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stored(work: Path, qid: str) -> int:
    db = sqlite3.connect(f"file:{work / 'collector.db'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM uldp_reports WHERE query_id = ?",
                              (qid,)).fetchone()[0])
    finally:
        db.close()


def _wait_done(work: Path, qid: str) -> None:
    """Wait until the query's last phase is closed (its estimate computed)."""
    end = time.monotonic() + 300
    while time.monotonic() < end:
        db = sqlite3.connect(f"file:{work / 'collector.db'}?mode=ro", uri=True)
        try:
            state = db.execute("SELECT state FROM uldp_queries WHERE query_id = ?",
                               (qid,)).fetchone()[0]
        finally:
            db.close()
        if state != "running":
            return
        time.sleep(0.1)
    raise AssertionError(f"query {qid} never finished")


def _timeline(work: Path, ingest_end: float) -> dict[str, float]:
    """Seconds after the last SubmitSealedBatch was answered until the shuffler had
    recorded the draw of its first batch (the commit; a complete cell's batch is already
    on the wire then) and until the collector began the transaction that stores its last
    batch (the stores' own clocks; the serial part of the end-to-end time at
    --batch-parts 1)."""
    sdb = sqlite3.connect(f"file:{work / 'shuffler.db'}?mode=ro", uri=True)
    cdb = sqlite3.connect(f"file:{work / 'collector.db'}?mode=ro", uri=True)
    try:
        drawn = sdb.execute("SELECT min(created_at_ms) FROM batches").fetchone()[0]
        stored = cdb.execute("SELECT max(received_at_ms) FROM uldp_shuffle_batches WHERE "
                             "query_id = 'shuffled'").fetchone()[0]
    finally:
        sdb.close()
        cdb.close()
    return {"drawn": drawn / 1000 - ingest_end, "stored": stored / 1000 - ingest_end}


def _children(pid: int) -> list[str]:
    """Process ids of ``pid``'s children (the collector's opening processes)."""
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


def _open_us(prep: dict[str, Any], work: Path) -> float:
    db = sqlite3.connect(f"file:{work / 'collector.db'}?mode=ro", uri=True)
    (raw,) = db.execute("SELECT value FROM uldp_meta WHERE key LIKE 'seal_key:%'").fetchone()
    db.close()
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    sk = X25519PrivateKey.from_private_bytes(bytes.fromhex(raw))
    assert SealKey.of(sk.public_key().public_bytes_raw())
    t = prep["shuffled"][0]
    info = seal_info(t.query_id, t.phase, t.group, t.stage, t.task_digest)
    sample = prep["sealed"][:2000]
    t0 = time.perf_counter()
    for s in sample:
        suite().decrypt(s, sk, info=info)
    return (time.perf_counter() - t0) / len(sample) * 1e6


def run(n: int, batch: int, threads: int, max_batch: int = 50_000, parts: int = 4,
        checkers: int | None = None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="uldp-bench-shuffle-"))
    d = _deploy(work, max_batch, parts, checkers)
    try:
        prep = _prepare(d, n, batch)
        toks = prep["tokens"]
        t, vals = prep["direct"]
        direct = [("SubmitReportBatch", device_pb2.SubmitReportBatchRequest(reports=[
            device_pb2.Report(query_id="direct", phase=t.phase, values=[int(v) for v in vals[i]],
                              task_digest=t.task_digest, device_token=toks[i], simulated=True)
            for i in range(k, min(k + batch, n))])) for k in range(0, n, batch)]
        ts = prep["shuffled"][0]
        sealed = [("SubmitSealedBatch", shuffler_pb2.SubmitSealedBatchRequest(reports=[
            shuffler_pb2.SealedReport(query_id="shuffled", phase=ts.phase, group=ts.group,
                                      stage=ts.stage, task_digest=ts.task_digest,
                                      sealed=prep["sealed"][i], ticket=prep["tickets"][i],
                                      attestation=prep["attestations"][i])
            for i in range(k, min(k + batch, n))])) for k in range(0, n, batch)]
        sh, col = d["procs"]
        c0, b0 = _cpu_s(col.pid), time.process_time()
        t_direct = _send(d["collector"], direct, threads)
        _wait_done(work, "direct")  # its phase close counts as its CPU, not the next's
        cpu_direct = (_cpu_s(col.pid) - c0, time.process_time() - b0)
        c0, s0, b0 = _cpu_s(col.pid), _cpu_s(sh.pid), time.process_time()
        o0 = {p: _cpu_s(int(p)) for p in _children(col.pid)}  # warm: started at boot
        k0 = {p: _cpu_s(int(p)) for p in _children(sh.pid)}  # its checking processes
        t0, w0 = time.perf_counter(), time.time()
        t_ingest = _send(d["shuffler"], sealed, threads)
        cpu_ingest = (_cpu_s(sh.pid) - s0 + sum(_cpu_s(int(p)) - k0.get(p, 0.0)
                                                for p in _children(sh.pid))) / n * 1e6
        while _stored(work, "shuffled") < n:
            time.sleep(0.05)
            assert time.perf_counter() - t0 < 600, "the collector never got every report"
        t_e2e = time.perf_counter() - t0
        timeline = _timeline(work, w0 + t_ingest)
        _wait_done(work, "shuffled")
        opener = sum(_cpu_s(int(p)) - o0.get(p, 0.0) for p in _children(col.pid))
        checker = sum(_cpu_s(int(p)) - k0.get(p, 0.0) for p in _children(sh.pid))
        an = AnalystClient(d["collector"], (d["sp"].pki.directory / "admin.token").read_text())
        privacy = json.loads(an.result("shuffled").estimate_json)["privacy"]
        an.close()
        cpu_shuffled = (_cpu_s(col.pid) - c0, _cpu_s(sh.pid) - s0, time.process_time() - b0,
                        opener, checker)
        return {"devices": n, "batch": batch, "threads": threads, "max_batch": max_batch,
                "batch_parts": parts, "checkers": checkers,
                "direct_rps": n / t_direct, "shuffler_ingest_rps": n / t_ingest,
                "shuffled_e2e_rps": n / t_e2e, "e2e_seconds": t_e2e,
                "seal_us": prep["seal_us"], "open_us": _open_us(prep, work),
                "timeline_s": timeline, "shuffler_ingest_cpu_us": cpu_ingest,
                "central_epsilon": privacy["central_epsilon"], "delta": privacy["delta"],
                "local_epsilon": privacy["local_epsilon"],
                "mechanism": privacy["cells"][0]["mechanism"],
                "batches": [c["batches"] for c in privacy["cells"]],
                "smallest_batch": min(c["smallest_batch"] for c in privacy["cells"]),
                "cpu_us": {"direct": [x / n * 1e6 for x in cpu_direct],
                           "shuffled": [x / n * 1e6 for x in cpu_shuffled]}}
    finally:
        for p in d["procs"]:
            _stop(p)


def n_fmt(r: dict[str, Any]) -> str:
    return f"{r['devices'] / r['shuffler_ingest_rps']:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=20_000)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--max-batch", type=int, default=50_000,
                    help="the shuffler's --max-batch: smaller batches are forwarded (and "
                         "opened) while reports still arrive")
    ap.add_argument("--batch-parts", type=int, default=1,
                    help="the shuffler's --batch-parts: a cell goes out in about this many "
                         "batches (1: one batch once the cell is complete)")
    ap.add_argument("--checkers", type=int, default=None,
                    help="the shuffler's --checkers (default: its own default, one "
                         "process per core up to 4)")
    ap.add_argument("--out", default=None, help="write the markdown table here too")
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    r = run(a.devices, a.batch_size, a.threads, a.max_batch, a.batch_parts, a.checkers)
    r["load_average"] = [load0, os.getloadavg()[0]]  # rates follow the machine's load
    table = "\n".join([
        f"Shuffle mode throughput, {r['devices']} devices, batch calls of {r['batch']} "
        f"reports from {r['threads']} threads, shuffler --max-batch {r['max_batch']} "
        f"--batch-parts {r['batch_parts']}"
        + ("" if r["checkers"] is None else f" --checkers {r['checkers']}") + ", "
        "loopback TLS, SQLite (WAL, synchronous=FULL) on both sides, 1-minute load average "
        f"{r['load_average'][0]:.1f} at the start, {r['load_average'][1]:.1f} at the end "
        f"(`python bench/shuffle_throughput.py --devices {r['devices']} --max-batch "
        f"{r['max_batch']} --batch-parts {r['batch_parts']}"
        + ("" if r["checkers"] is None else f" --checkers {r['checkers']}") + "`).", "",
        "| path | reports/s | what an OK means |", "|---|---|---|",
        f"| direct: SubmitReportBatch → collector | {r['direct_rps']:,.0f} | committed at "
        "the collector |",
        f"| shuffled: SubmitSealedBatch → shuffler | {r['shuffler_ingest_rps']:,.0f} | "
        "committed at the shuffler (ticket, attestation, slot, cell and replay checked) |",
        f"| shuffled, end to end (→ shuffler → batches → collector opens and stores) | "
        f"{r['shuffled_e2e_rps']:,.0f} | every report stored at the collector "
        f"({r['e2e_seconds']:.1f} s for all; {r['shuffled_e2e_rps'] / r['direct_rps']:.2f}× "
        "direct) |", "",
        f"After the last report was admitted ({n_fmt(r)} s of ingest, "
        f"{r['shuffler_ingest_cpu_us']:.0f} µs CPU per report in the shuffler and its "
        f"checkers): first draw recorded {r['timeline_s']['drawn']:+.2f} s, the collector "
        f"began storing the last batch {r['timeline_s']['stored']:+.2f} s.", "",
        f"Stated guarantee of the shuffled query ({r['mechanism']}, local ε0 = "
        f"{r['local_epsilon']:g}, δ = {r['delta']:g}): central ε = "
        f"{r['central_epsilon']:.4f} from its smallest batch of {r['smallest_batch']} "
        f"({sum(r['batches'])} batches).", "",
        f"Per report, in process: sealing (device, HPKE X25519/HKDF-SHA256/ChaCha20-Poly1305)"
        f" {r['seal_us']:.0f} µs, opening (collector) {r['open_us']:.0f} µs.", "",
        "CPU per report (µs, user + system, from /proc, each path until its query is closed "
        "and estimated): the machine's cores are what both paths share.", "",
        "| path | collector | its opening processes | shuffler | its checking processes "
        "| bench client | total |",
        "|---|---|---|---|---|---|---|",
        "| direct | {:.0f} | – | – | – | {:.0f} | {:.0f} |".format(
            *r["cpu_us"]["direct"], sum(r["cpu_us"]["direct"])),
        "| shuffled, end to end | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} |".format(
            r["cpu_us"]["shuffled"][0], r["cpu_us"]["shuffled"][3],
            r["cpu_us"]["shuffled"][1], r["cpu_us"]["shuffled"][4],
            r["cpu_us"]["shuffled"][2], sum(r["cpu_us"]["shuffled"])), ""])
    print(table)
    print(json.dumps(r))
    if a.out:
        Path(a.out).write_text(table)


if __name__ == "__main__":
    main()
