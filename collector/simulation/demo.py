"""``uldp demo``: the whole system on one machine, over real gRPC with TLS.

1. checks the arguments (every demo query must compile) before anything starts;
2. writes a development CA, a server certificate and an admin token to a private work
   directory;
3. starts ``uldp collector serve`` (a separate process) on a SQLite file, loopback only,
   and waits for its ready file;
4. creates one query per kind of the core algorithms (mean, mean-linf, mean-l2, mean-l1,
   distribution), each over its own dataset name;
5. runs a fleet of simulated devices (default 20 000; device ``i`` holds the dataset of
   kind ``i mod 5``), every one a real ``uldp.client.Device`` with its own identity,
   ledger, task checks and privatization, behind ``--gateways`` gateway processes that
   relay the devices' messages in batch calls (``EnrollBatch``, ``GetTasksBatch``,
   ``SubmitReportBatch``; ``uldp.collector.simulation.gateway.run_gateway_fleet``), with a progress
   line and an ETA (one plain line every few seconds when stdout is not a terminal);
6. waits for every query to finish and prints a table of each estimate next to the truth
   of the simulated population, with its confidence interval and a legend;
7. stops the collector (SIGTERM, graceful) and removes the work directory (unless
   ``--workdir`` was given).

With ``--shuffle`` the queries run in shuffle mode (``docs/privacy.md`` §7): a shuffler
process (``uldp shuffler serve``) stands between the gateways and the collector, the
devices seal their reports to the collector's key and send them to it, it forwards them
in shuffled batches to the collector's shuffler port (mutual TLS), and the table is
followed by each query's local ε0 and the central (ε, δ) its result states.

Exit code 0 when every query finished and every device reported, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from uldp.client.transport import Endpoint
from uldp.collector.analyst import Analyst
from uldp.collector.errors import OperatorError
from uldp.collector.security.certs import make_dev_pki
from uldp.collector.security.files import write_private
from uldp.collector.security.tokens import new_admin_token
from uldp.collector.shuffler.launch import (
    ShufflePki,
    free_port,
    make_shuffle_pki,
    seed_ticket_key,
    start_shuffler_process,
    wait_serving,
)
from uldp.collector.simulation.fleet import (
    FleetDataset,
    FleetProgress,
    dataset_for_query,
    summarize,
)
from uldp.collector.simulation.gateway import run_gateway_fleet

__all__ = ["DEMO_QUERIES", "check_demo_args", "run_demo", "start_collector_process",
           "start_shuffled_collector"]

#: shuffle mode: the smallest batch the shuffler forwards and the queries accept
DEMO_MIN_BATCH = 50

#: (kind, dimension, population) of the demo queries
DEMO_QUERIES: tuple[tuple[str, int, str], ...] = (
    ("mean", 1, "gaussian"),
    ("mean-linf", 4, "uniform"),
    ("mean-l2", 4, "sphere"),
    ("mean-l1", 4, "bernoulli"),
    ("distribution", 8, "zipf:1.1"),
)


def start_collector_process(workdir: Path, db_url: str, tls_dir: Path,
                            extra: list[str] | None = None,
                            timeout_s: float = 60.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``uldp collector serve`` on 127.0.0.1 (free port); wait until it serves."""
    ready = workdir / f"collector-{os.getpid()}-{time.monotonic_ns()}.ready"
    log = open(workdir / "collector.log", "ab")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "uldp.collector.cli.service", "collector", "serve",
         "--db", db_url, "--host", "127.0.0.1", "--port", "0", "--ready-file", str(ready),
         "--tls-dir", str(tls_dir), "--log-level", os.environ.get("ULDP_LOG_LEVEL", "warning"),
         "--allow-simulated", *(extra or [])],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc, wait_serving(proc, ready, workdir / "collector.log", tls_dir / "ca.pem",
                              "collector", timeout_s)


def start_shuffled_collector(work: Path, sp: ShufflePki, extra: list[str] | None = None
                             ) -> tuple[subprocess.Popen[bytes], int, int]:
    """Shuffle mode: a collector on ``sp``'s PKI (and the shuffler-ticket key it shares
    with the shuffler) with its shuffler port on a free port; (process, device port,
    shuffler port)."""
    intake = free_port()
    url = f"sqlite:///{work / 'collector.db'}"
    seed_ticket_key(url, sp)
    proc, port = start_collector_process(
        work, url, sp.pki.directory,
        extra=["--token-key-file", str(sp.token_key), "--shuffler-port", str(intake),
               "--shuffler-ca", str(sp.ca), *(extra or [])])
    return proc, port, intake


def check_demo_args(devices: int, epsilon: float, samples: int, shuffle: bool = False) -> None:
    """OperatorError (naming the flag) unless every demo query compiles — and, in shuffle
    mode, places at least the minimum batch in every (phase, group, stage)."""
    from uldp.collector.planner import QuerySpec, compile_query
    from uldp.collector.programs import program_for
    from uldp.collector.service.catalogue import cell_sizes

    k = len(DEMO_QUERIES)
    if devices < 2 * k:
        raise OperatorError(f"--devices {devices}: the demo needs at least {2 * k} devices "
                            f"(2 for each of its {k} queries)")
    for i, (kind, dim, _) in enumerate(DEMO_QUERIES):
        users = len(range(i, devices, k))
        spec = QuerySpec(kind=kind, epsilon=epsilon, users=users, samples=samples, dim=dim,
                         bound=1.0)
        try:  # a weak stage I is a note on the plan (Plan.advisories), never a warning
            compile_query(spec)
        except ValueError as exc:
            raise OperatorError(f"--devices {devices} --epsilon {epsilon:g} --samples "
                                f"{samples}: the {kind} query cannot run over {users} "
                                f"devices: {exc}") from None
        small = min(cell_sizes(program_for(spec)).values()) if shuffle else DEMO_MIN_BATCH
        if small < DEMO_MIN_BATCH:
            raise OperatorError(f"--devices {devices} --shuffle: the {kind} query would put "
                                f"{small} devices in one of its groups, below the smallest "
                                f"shuffled batch ({DEMO_MIN_BATCH}); give more devices")


class ProgressPrinter:
    """A progress line with an ETA: redrawn in place on a terminal, otherwise one plain
    line every ``every_s`` seconds (CI logs, ``| tee``)."""

    def __init__(self, say: Callable[..., None], tty: bool, every_s: float | None = None
                 ) -> None:
        if every_s is None:  # ULDP_PROGRESS_SECONDS: the interval of the plain lines
            try:
                every_s = float(os.environ.get("ULDP_PROGRESS_SECONDS", "5"))
            except ValueError:
                every_s = 5.0
        self.say, self.tty, self.every_s = say, tty, every_s
        self.last = -1e9
        self.open = False
        self.finished = False

    def __call__(self, p: FleetProgress) -> None:
        now = time.monotonic()
        final = p.done >= p.devices
        if self.finished or (not final and now - self.last < (0.25 if self.tty
                                                              else self.every_s)):
            return
        self.finished = final
        self.last = now
        frac = 1.0 if final else p.fraction
        if final:
            eta = "done"
        elif frac < 0.02 or p.seconds <= 0:
            eta = "ETA --:--"
        else:
            left = p.seconds * (1.0 - frac) / frac
            eta = f"ETA {int(left // 60)}:{int(left % 60):02d}"
        line = (f"fleet [{'#' * int(24 * frac):<24}] {p.done:,}/{p.devices:,} devices done, "
                f"{p.reports:,} reports acknowledged, {p.seconds:4.0f}s elapsed, {eta}")
        if self.tty:
            sys.stdout.write("\r" + line + ("\n" if final else ""))
            sys.stdout.flush()
            self.open = not final
        else:
            self.say(line)

    def close(self) -> None:
        if self.tty and self.open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open = False


LEGEND = """\
  truth     the value over the whole simulated population (what the query estimates:
            the mean of per-user means, or the share of users per symbol)
  estimate  the collector's answer, computed from the privatized reports only
  95% interval  the interval the collector reports; it holds the truth 95% of the time
  error     estimate - truth
  covered   yes when the interval holds the truth (expect about 1 in 20 'no')"""


def _table(rows: list[dict[str, Any]], per_query: dict[str, int]) -> str:
    head = (f"{'query':<13} {'coord':>5} {'users':>6} {'truth':>8} {'estimate':>9} "
            f"{'95% interval':>21} {'error':>8}  covered")
    out = [head, "-" * len(head)]
    prev = None
    for r in rows:
        kind = r["kind"] if r["kind"] != prev else ""
        users = str(per_query.get(r["query"], "")) if r["kind"] != prev else ""
        prev = r["kind"]
        out.append(f"{kind:<13} {r['component']:>5} {users:>6} {r['truth']:>+8.4f} "
                   f"{r['estimate']:>+9.4f} [{r['ci_low']:>+8.4f}, {r['ci_high']:>+8.4f}] "
                   f"{r['estimate'] - r['truth']:>+8.4f}  {'yes' if r['covered'] else 'NO'}")
    return "\n".join(out)


def _device_root(work: Path, keep: bool) -> Path:
    """Where the simulated devices keep their state (identity, ledger): in the work
    directory when it is kept, else in a memory-backed directory when the machine has one
    (20 000 small SQLite ledgers cost the disk a lot of system time; they are removed at
    the end either way). The collector's database stays on disk (durable acks)."""
    shm = Path("/dev/shm")
    if keep or not (shm.is_dir() and os.access(shm, os.W_OK)):
        return work / "devices"
    return Path(tempfile.mkdtemp(prefix="uldp-demo-devices-", dir=shm))


def run_demo(devices: int = 20_000, epsilon: float = 2.0, samples: int = 100,
             concurrency: int = 500, workdir: str | None = None, as_json: bool = False,
             seed: int | None = None, gateways: int = 2, shuffle: bool = False,
             http_port: int | None = None) -> int:
    check_demo_args(devices, epsilon, samples, shuffle)
    if workdir is not None and Path(workdir).exists() and not Path(workdir).is_dir():
        raise OperatorError(f"--workdir {workdir} is a file, not a directory")
    t0 = time.perf_counter()
    old_umask = os.umask(0o077)  # the work directory holds keys and the database
    tmp = None
    try:
        if workdir is None:
            tmp = tempfile.TemporaryDirectory(prefix="uldp-demo-")
            work = Path(tmp.name)
        else:
            work = Path(workdir)
            work.mkdir(parents=True, exist_ok=True)
        return _run(work, tmp is None, devices, epsilon, samples, concurrency, as_json, seed,
                    gateways, t0, shuffle, http_port)
    finally:
        os.umask(old_umask)
        if tmp is not None:
            tmp.cleanup()


def _http_ports(http_port: int | None, shuffle: bool) -> tuple[list[str], list[str], str]:
    """``--http-port P``: the collector's HTTP port on P (Connect, gRPC-Web, the console,
    /metrics) and, in shuffle mode, the shuffler's on P + 1 (0: free ports); the flags of
    each process and a line saying where they are."""
    if http_port is None:
        return [], [], ""
    cport = http_port or free_port()
    sport = http_port + 1 if http_port else free_port()
    where = (f"; HTTP: collector https://127.0.0.1:{cport} (Connect, gRPC-Web, /console/, "
             "/metrics)")
    if shuffle:
        where += f", shuffler https://127.0.0.1:{sport} (Connect, gRPC-Web)"
    return ["--http-port", str(cport)], ["--http-port", str(sport), "--cors-origin", "*"], where


def _start_shuffled(work: Path, say: Callable[..., None], http_port: int | None = None
                    ) -> tuple[list[subprocess.Popen[bytes]], Endpoint, Path, Endpoint, str]:
    """Shuffle mode: the PKI of both parties, a collector with its shuffler port and a
    shuffler process forwarding to it (with its own enrolment check: the devices show it
    attestations under its key, the last element)."""
    sp = make_shuffle_pki(work)
    col_http, sh_http, where = _http_ports(http_port, True)
    proc, port, intake = start_shuffled_collector(work, sp, col_http)
    try:
        shuffler, sport = start_shuffler_process(
            work, sp, f"127.0.0.1:{intake}",
            extra=["--min-batch", str(DEMO_MIN_BATCH), "--linger", "30", *sh_http])
    except BaseException:
        _stop(proc)
        raise
    say(f"collector on 127.0.0.1:{port} (TLS), its shuffler port 127.0.0.1:{intake} (mutual "
        f"TLS); shuffler on 127.0.0.1:{sport} (TLS), batches of at least {DEMO_MIN_BATCH}"
        + where)
    return ([shuffler, proc], Endpoint(f"127.0.0.1:{port}", sp.ca),
            sp.pki.directory / "admin.token", Endpoint(f"127.0.0.1:{sport}", sp.ca),
            sp.attestation_hex())


def _start(work: Path, say: Callable[..., None], http_port: int | None = None
           ) -> tuple[subprocess.Popen[bytes], Endpoint, Path]:
    """The work directory's PKI and admin token, and a collector process on it."""
    tls = work / "pki"
    if not (tls / "server.pem").exists():
        make_dev_pki(tls, ["localhost", "127.0.0.1"])
    admin_file = tls / "admin.token"
    if not admin_file.exists():
        write_private(admin_file, (new_admin_token() + "\n").encode())
    db_url = f"sqlite:///{work / 'collector.db'}"
    # every simulated device enrols from this one address: no per-address limit
    # (docs/privacy.md §8; the default takes a 20 000-device demo at once, not more)
    col_http, _, where = _http_ports(http_port, False)
    proc, port = start_collector_process(work, db_url, tls,
                                         extra=["--enroll-peer-limit", "off", *col_http])
    say(f"collector on 127.0.0.1:{port} (TLS), database {work / 'collector.db'}"
        + where)
    return proc, Endpoint(f"127.0.0.1:{port}", tls / "ca.pem"), admin_file


def _create_queries(analyst: Analyst, devices: int, epsilon: float, samples: int,
                    seed: int | None, say: Callable[..., None], shuffle: bool = False
                    ) -> tuple[list[str], list[FleetDataset], dict[str, int]]:
    """One query per kind of :data:`DEMO_QUERIES`, and the dataset its devices hold."""
    k = len(DEMO_QUERIES)
    datasets, qids, per_query = [], [], {}
    rng_seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
    for i, (kind, dim, dist) in enumerate(DEMO_QUERIES):
        users = len(range(i, devices, k))
        name = f"demo-{kind}"
        try:
            q = analyst.create(kind, epsilon=epsilon, dataset=name, users=users,
                               samples=samples, dim=dim, bound=1.0, phase_timeout_s=600.0,
                               query_id=f"demo-{kind}-{rng_seed % 100000}",
                               shuffle={"min_batch": DEMO_MIN_BATCH, "delta": 1e-8}
                               if shuffle else None)
        except grpc.RpcError as exc:
            if shuffle and "could ever be forwarded" in (exc.details() or ""):
                raise OperatorError(f"--devices {devices} --shuffle: {exc.details()}; give "
                                    "more devices") from None
            raise
        qids.append(q.query_id)
        per_query[q.query_id] = users
        data = dataset_for_query(kind, dist, samples, dim, 1.0, rng_seed + i)
        datasets.append(FleetDataset(name, data, modulo=k, residue=i))
        say(f"query {q.query_id}: {kind} d={dim} eps={epsilon:g} over {users} devices "
            f"({dist} data, {len(q.phases)} phases)")
    return qids, datasets, per_query


def _privacy_table(privacy: dict[str, Any]) -> str:
    """Shuffle mode: each query's local ε0 and the central guarantee its result states."""
    head = (f"{'query':<24} {'local eps0':>10} {'central eps':>11} {'delta':>7} "
            f"{'reports':>8} {'smallest batch':>14} {'counted':>8}")
    out = [head, "-" * len(head)]
    for qid, p in privacy.items():
        cells = p["cells"]
        out.append(f"{qid:<24} {p['local_epsilon']:>10.4g} {p['central_epsilon']:>11.4g} "
                   f"{p['delta']:>7.0e} {sum(c['reports'] for c in cells):>8} "
                   f"{min((c['smallest_batch'] for c in cells), default=0):>14} "
                   f"{min((c.get('counted', 0) for c in cells), default=0):>8}")
    out.append("central eps: user-level (eps, delta)-DP of each user against the collector, "
               "from amplification by shuffling (variation-ratio bound of each report's "
               "mechanism) over the reports of the smallest batch of each (phase, group, "
               "stage) that the shuffler admitted from distinct devices its own enrolment "
               "check attested ('counted'); docs/privacy.md §7")
    return "\n".join(out)


def _estimates(analyst: Analyst, qids: list[str], datasets: list[FleetDataset],
               say: Callable[..., None]
               ) -> tuple[list[dict[str, Any]], bool, dict[str, Any]]:
    """One row per estimated coordinate; whether every query finished; the privacy
    section of each shuffled query's result."""
    rows: list[dict[str, Any]] = []
    privacy: dict[str, Any] = {}
    ok = True
    for qid, ds in zip(qids, datasets, strict=True):
        final = analyst.wait(qid, timeout_s=600)
        if final.state != "done":
            say(f"query {qid} did not finish: state {final.state} {final.error}")
            ok = False
            continue
        r = analyst.result(qid)
        truth = np.asarray(ds.data.truth, dtype=float).ravel()
        for j, (v, lo, hi) in enumerate(zip(r.values, r.ci_low, r.ci_high, strict=True)):
            rows.append({"query": qid, "kind": r.kind, "component": j,
                         "truth": float(truth[j]), "estimate": v, "ci_low": lo,
                         "ci_high": hi, "covered": bool(lo <= truth[j] <= hi)})
        section = r.estimate.get("privacy")
        if section is not None:
            privacy[qid] = section
    return rows, ok, privacy


def _print_report(rows: list[dict[str, Any]], per_query: dict[str, int],
                  summary: dict[str, Any], devices: int, fleet_s: float) -> None:
    cov = sum(r_["covered"] for r_ in rows)
    print()
    print(_table(rows, per_query))
    print()
    print(LEGEND)
    print()
    print(f"{summary['reports_acknowledged']:,} reports from {devices:,} devices in "
          f"{fleet_s:.1f}s ({summary['reports_acknowledged'] / max(fleet_s, 1e-9):,.0f}"
          f"/s); {cov} of {len(rows)} intervals hold the truth; total "
          f"{summary['wall_seconds']:.1f}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _run(work: Path, keep: bool, devices: int, epsilon: float, samples: int,
         concurrency: int, as_json: bool, seed: int | None, gateways: int, t0: float,
         shuffle: bool = False, http_port: int | None = None) -> int:
    out = sys.stderr if as_json else sys.stdout

    def say(*a: Any) -> None:
        print(*a, file=out, flush=True)

    shuffler: Endpoint | None = None
    attest: str | None = None
    if shuffle:
        procs, ep, admin_file, shuffler, attest = _start_shuffled(work, say, http_port)
    else:
        proc, ep, admin_file = _start(work, say, http_port)
        procs = [proc]
    analyst = Analyst.from_endpoint(ep, admin_file.read_text())
    rc = 0
    try:
        qids, datasets, per_query = _create_queries(analyst, devices, epsilon, samples, seed,
                                                    say, shuffle)
        say(f"fleet: {devices} devices behind {gateways} gateway process(es), checked in "
            f"{concurrency} at a time with batch calls (EnrollBatch, GetTasksBatch, "
            + ("SubmitSealedBatch to the shuffler)" if shuffle else "SubmitReportBatch)"))
        printer = ProgressPrinter(say, tty=out.isatty())
        t_fleet = time.perf_counter()
        res = run_gateway_fleet(ep, _device_root(work, keep), devices, datasets,
                                gateways=gateways, batch=concurrency,
                                budget=max(epsilon, 1.0) * 2, seed=seed, keep_state=keep,
                                timeout_s=1800, progress=printer, shuffler=shuffler,
                                shuffler_attestation_key=attest)
        printer.close()
        fleet_s = time.perf_counter() - t_fleet
        rows, finished, privacy = _estimates(analyst, qids, datasets, say)
        rc = 0 if finished else 1
        summary = summarize(res)
        summary.update(fleet_seconds=round(fleet_s, 2),
                       wall_seconds=round(time.perf_counter() - t0, 2))
        if as_json:
            print(json.dumps({"fleet": summary, "estimates": rows, "privacy": privacy},
                             indent=2))
        else:
            _print_report(rows, per_query, summary, devices, fleet_s)
            if privacy:
                print()
                print(_privacy_table(privacy))
        if res.errors or res.unfinished or res.rejected or res.refused:
            rc = 1
            say(f"fleet incomplete: {res.unfinished} unfinished, {len(res.rejected)} "
                f"rejected, {len(res.refused)} refused, {len(res.errors)} errors")
            for e in res.errors[:5]:
                say("error:", e)
    finally:
        analyst.close()
        for p in procs:
            _stop(p)
    return rc
