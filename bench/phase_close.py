"""Benchmark: closing one phase of 10^5 … 10^8 stored reports — CPU per report (collector and
database) and the close's memory, as the reports and the alphabet grow.

    python bench/phase_close.py --case dist256 --reports 200000 10000000 --backend postgres
    python bench/phase_close.py --case mean --reports 100000000 --backend postgres
    python bench/phase_close.py --case dist256 dist1024 dist4096 --reports 100000

Cases (one phase each, created through ``CollectorCore.create_query``, default method):

* ``mean``: a 1-d ``mean`` (method ``ssl``, one phase): one value per report,
  closed by sums in the database (typed column ``v0``);
* ``distK``: a ``distribution`` over K categories at ε = 1 (method ``auto`` → ``oracle``):
  subset selection (K = 256: 69 values per report, stored at 2 bytes each; K = 4096 at
  ε = 1: OLH), streamed in bounded windows and scatter-added.

The reports are valid reports of the phase's task, written straight into the database
(not through a fleet): ``--load storage`` stores them with ``Database.store_reports`` (the
service's write path; up to a few 10^5), ``--load bulk`` with PostgreSQL's COPY or
SQLite's ``executemany`` (packed exactly as the service packs them), ``--load sql``
generates them inside PostgreSQL (``mean`` only; what 10^8 needs). Then
``CollectorCore.close_phase`` is timed: wall seconds, CPU seconds of this process and of
every PostgreSQL process (from /proc; parallel query and autovacuum are off so no CPU
escapes into short-lived workers), µs of CPU per report, and the largest growth of this
process's resident memory during the close (sampled from /proc). Each (case, size) runs
in a process of its own.

Run the big cases under ``nice -n 10``; a 10^8-report PostgreSQL database takes ~25 GB
of disk (the bench deletes it; with ``--keep DIR`` it stays in DIR, ~21 GB, until DIR is deleted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from sqlalchemy import update

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import _postgres_cpu, local_postgres

from uldp.client.mechanisms.exact import units_of
from uldp.client.mechanisms.olh import SEED_BITS, olh_design
from uldp.client.tasks import report_length, report_limit
from uldp.client.wire import MAX_ABS_REPORT_VALUE
from uldp.collector.security.tokens import AdminAuth, TokenKey
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.storage import open_database
from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.db import Database, PendingReport
from uldp.collector.storage.records import VALUE_DTYPES, pack_values, typed_values, value_bytes

CASES = {"mean": dict(kind="mean", dim=1, samples=100, epsilon=1.0, bound=1.0,
                      method="ssl")} | {
    f"dist{k}": dict(kind="distribution", dim=k, samples=10, epsilon=1.0, bound=1.0,
                     method="") for k in (256, 1024, 2048, 4096)}


class _RssPeak:
    """The largest growth of this process's resident memory while it runs (sampled every
    5 ms from /proc: no allocation tracing slowing the close down)."""

    def __init__(self) -> None:
        self.base = self.peak = self._rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    @staticmethod
    def _rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGESIZE")

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return max(self.peak, self._rss()) - self.base


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---- valid reports without a fleet -----------------------------------------------------------
def _reports(task, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` reports a device could have sent for ``task`` (random, valid layouts)."""
    width = report_length(task)
    limit = report_limit(task)
    if task.kind == "mean":  # a scalar randomizer's integers (HM at ε = 1)
        return rng.integers(0, limit + 1, size=(n, width))
    mech = task.mechanism
    if mech == "ss":
        k = task.dim
        keys = rng.random((n, k))
        return np.sort(np.argpartition(keys, width, axis=1)[:, :width], axis=1)
    if mech == "olh":  # a seed and a hash value in [0, g - 1] (g the design's buckets)
        g = olh_design(units_of(task.epsilon)).k
        return np.stack([rng.integers(0, 1 << SEED_BITS, n), rng.integers(0, g, n)], axis=1)
    if mech == "grr":
        return rng.integers(0, task.dim, size=(n, 1))
    if mech == "oue":
        return rng.integers(0, 2, size=(n, width))
    raise SystemExit(f"no report generator for mechanism {mech}")


def _create(core: CollectorCore, case: str, n: int) -> tuple[object, int]:
    c = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        core.create_query(kind=c["kind"], epsilon=c["epsilon"], dataset="x", bound=c["bound"],
                          samples=c["samples"], users=n, dim=c["dim"], method=c["method"],
                          params_json="", phase_timeout_s=366 * 86400, query_id="close")
    rt = core.runtime("close")
    assert rt is not None and rt.num_phases == 1, "the bench closes single-phase queries"
    (g, s, _), = rt.program.cells(1)
    task = rt.program.task(1, g, s, {})
    return task, value_bytes(min(report_limit(task), MAX_ABS_REPORT_VALUE))


def _load_storage(db: Database, task, vb: int, n: int, rng) -> None:
    for lo in range(0, n, 20_000):
        reps = _reports(task, min(20_000, n - lo), rng)
        db.store_reports([PendingReport("close", 1, f"d-{lo + i:024x}", 0, 0, lo + i,
                                        pack_values(r, vb), vb) for i, r in enumerate(reps)])


def _load_bulk(db: Database, task, vb: int, n: int, rng) -> None:
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        cols = ("query_id, device_id, phase, grp, stage, slot, payload, received_at_ms, "
                "vbytes, v0, v1, v2, v3")
        for lo in range(0, n, 100_000):
            reps = _reports(task, min(100_000, n - lo), rng).astype(VALUE_DTYPES[vb])
            rows = [("close", f"d-{lo + i:024x}", 1, 0, 0, lo + i, r.tobytes(), 0, vb,
                     *typed_values(r.tobytes(), vb)) for i, r in enumerate(reps)]
            if db.is_sqlite:
                cur.execute("BEGIN IMMEDIATE")
                cur.executemany(f"INSERT INTO uldp_reports ({cols}) VALUES "
                                f"({','.join('?' * 13)})", rows)
            else:
                with cur.copy(f"COPY uldp_reports ({cols}) FROM STDIN") as cp:
                    for r in rows:
                        cp.write_row(r)
            raw.commit()
        _count(db, n)
    finally:
        raw.close()


def _load_sql(db: Database, n: int, limit: int) -> None:
    """PostgreSQL generates ``n`` one-integer reports in ``[0, limit]`` itself (4 bytes a
    value, little endian), in 10^7-row statements, into a copy of the query's partition
    made in the same transaction and then attached in its place — what the catalog does
    for a new query (``CREATE TABLE .. LIKE``, ``ATTACH PARTITION``), only with the
    indexes built once at the end by the ATTACH (sorted, instead of 10^8 index inserts)
    and, with ``wal_level=minimal``, no WAL for a table created in the loading transaction.
    The rows, their order and the indexes are those of the service's own inserts."""
    part = S.partition_name("close")
    le = ("set_byte(set_byte(set_byte(set_byte('\\x00000000'::bytea, 0, v & 255), 1, "
          "(v >> 8) & 255), 2, (v >> 16) & 255), 3, (v >> 24) & 255)")
    with db.engine.begin() as conn:
        conn.exec_driver_sql("SET maintenance_work_mem = '1GB'")
        conn.exec_driver_sql(f"ALTER TABLE {S.reports.name} DETACH PARTITION {part}")
        conn.exec_driver_sql(f"DROP TABLE {part}")
        conn.exec_driver_sql(f"CREATE TABLE {part} (LIKE {S.reports.name} INCLUDING DEFAULTS)")
        for lo in range(0, n, 10_000_000):
            hi = min(n, lo + 10_000_000)
            conn.exec_driver_sql(
                f"INSERT INTO {part} (query_id, device_id, phase, grp, stage, slot, "
                "payload, received_at_ms, vbytes, v0) SELECT 'close', 'd-' || "
                f"lpad(to_hex(i), 24, '0'), 1, 0, 0, i, {le}, 0, 4, v FROM (SELECT i, "
                f"floor(random() * {limit + 1})::int AS v FROM generate_series("
                f"{lo}, {hi - 1}) i) s")
            print(f"  loaded {hi:,} reports", file=sys.stderr, flush=True)
        conn.exec_driver_sql(f"ALTER TABLE {S.reports.name} ATTACH PARTITION {part} "
                             "FOR VALUES IN ('close')")
    _count(db, n)


def _reopen(db: Database) -> None:
    """A kept database whose phase was closed by an earlier run: open it again (the same
    reports, counted; the close is then timed as on a freshly loaded one)."""
    with db.engine.begin() as conn:
        conn.execute(update(S.phases).where(S.phases.c.query_id == "close").values(
            state="open", closer="", lease_until_ms=0, published_json="", closed_at_ms=0,
            close_error=""))
        conn.execute(update(S.queries).where(S.queries.c.query_id == "close").values(
            state="running", current_phase=1, result_json=None, finished_at_ms=0))


def _count(db: Database, n: int) -> None:
    """Count bulk-loaded reports as received (what the writer does per batch)."""
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        if db.is_sqlite:
            cur.execute("BEGIN IMMEDIATE")
        db.count_in(cur, "close", 1, received=n)
        raw.commit()
    finally:
        raw.close()


def one(case: str, n: int, url: str, load: str, threads: int) -> dict[str, float]:
    db = open_database(url)
    core = CollectorCore(db, TokenKey.generate(), AdminAuth("x" * 32),
                         CoreConfig(max_users=max(n, CoreConfig.max_users)))
    core.closer.engine.threads = threads  # type: ignore[attr-defined]
    load_s = 0.0
    if db.get_query("close") is not None:  # a kept database (--keep): loaded already
        _reopen(db)
        rt = core.runtime("close")
        assert rt is not None
        (g, s, _), = rt.program.cells(1)
        task = rt.program.task(1, g, s, {})
    else:
        task, vb = _create(core, case, n)
        rng = np.random.default_rng(1)
        t0 = time.perf_counter()
        if load == "storage":
            _load_storage(db, task, vb, n, rng)
        elif load == "bulk":
            _load_bulk(db, task, vb, n, rng)
        else:
            _load_sql(db, n, report_limit(task))
        load_s = time.perf_counter() - t0
    if not db.is_sqlite and load_s:
        raw = db.engine.raw_connection()
        raw.driver_connection.autocommit = True
        raw.driver_connection.execute("VACUUM ANALYZE uldp_reports")
        raw.driver_connection.autocommit = False
        raw.close()
    assert db.get_phases("close")[0]["received"] == n
    db.engine.dispose()  # the close opens its own connections
    time.sleep(1.0)  # let the closed backends exit before the CPU is read
    sampler = _RssPeak()
    port = None if db.is_sqlite else db.url.port
    c0, p0, t0 = _cpu(), _postgres_cpu(port), time.perf_counter()
    assert core.close_phase("close", 1, force=True)
    wall = time.perf_counter() - t0
    cpu, pg = _cpu() - c0, _postgres_cpu(port) - p0
    rss_growth = sampler.stop()
    pub = db.published("close", 1)
    assert pub["reports"] == n, pub
    size = 0
    if not db.is_sqlite:
        with db.read() as conn:
            size = conn.exec_driver_sql("SELECT pg_total_relation_size('uldp_reports_q' || "
                                        "substr(encode(sha256('close'), 'hex'), 1, 24))"
                                        ).scalar() or 0
    else:
        size = Path(db.url.database).stat().st_size
    core.stop()
    db.dispose()
    vb = value_bytes(min(report_limit(task), MAX_ABS_REPORT_VALUE))
    return {"reports": n, "ints": report_length(task), "vbytes": vb, "load_s": load_s,
            "wall_s": wall, "cpu_s": cpu, "db_cpu_s": pg, "us": (cpu + pg) / n * 1e6,
            "rss_mb": rss_growth / 2**20,
            "bytes_per_report": size / n}


@contextlib.contextmanager
def _database(backend: str, tmp: Path, shared_buffers: str = "2GB",
              keep: Path | None = None) -> Iterator[object]:
    if backend == "sqlite":
        yield lambda name=None: f"sqlite:///{tmp}/close-{time.monotonic_ns()}.db"
        return
    # parallel workers and autovacuum are short-lived processes whose CPU /proc loses;
    # wal_level=minimal: the bulk load (--load sql) writes its new table without WAL
    with local_postgres(durable=True, keep=keep,
                        settings={"max_parallel_workers_per_gather": "0",
                                  "autovacuum": "off", "shared_buffers": shared_buffers,
                                  "wal_level": "minimal", "max_wal_senders": "0",
                                  "max_wal_size": "8GB"}) as pg:
        yield pg.new_database


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs="+", default=["mean", "dist256"], choices=sorted(CASES))
    ap.add_argument("--reports", nargs="+", type=int, default=[200_000])
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="postgres")
    ap.add_argument("--load", choices=("auto", "storage", "bulk", "sql"), default="auto",
                    help="auto: storage up to 2·10^5, sql for a PostgreSQL mean beyond, "
                         "else bulk")
    ap.add_argument("--threads", type=int, default=2, help="close threads (LocalEngine)")
    ap.add_argument("--shared-buffers", default="2GB",
                    help="PostgreSQL shared_buffers (smaller than the partition: the "
                         "regime of 10^8 reports, whose heap is ~12 GB, at 10^7)")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="PostgreSQL: run the cluster in DIR and keep each case's database "
                         "there, loaded once: a later run with the same DIR, case and size "
                         "only reopens the phase and times the close again (delete DIR "
                         "to free the disk: 10^8 reports take ~21 GB)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # case,n,url,load (child process)
    a = ap.parse_args()
    if a.one:
        case, n, url, load = a.one.split(",", 3)
        print(json.dumps(one(case, int(n), url, load, a.threads)))
        return
    backends = ["sqlite", "postgres"] if a.backend == "both" else [a.backend]
    rows = []
    with tempfile.TemporaryDirectory(prefix="uldp-bench-close-", dir="/tmp") as tmp:
        for backend in backends:
            with _database(backend, Path(tmp), a.shared_buffers, a.keep) as new_url:
                for case in a.case:
                    for n in a.reports:
                        load = a.load
                        if load == "auto":
                            load = ("storage" if n <= 200_000 else
                                    "sql" if case == "mean" and backend == "postgres"
                                    else "bulk")
                        url = new_url(f"close_{case}_{n}" if a.keep else None)  # type: ignore[operator]
                        out = subprocess.run(
                            [sys.executable, __file__, "--threads", str(a.threads),
                             "--one", f"{case},{n},{url},{load}"],
                            capture_output=True, text=True, check=False)
                        if out.returncode:
                            sys.exit(f"{backend} {case} {n}: {out.stderr[-3000:]}")
                        r = json.loads(out.stdout.strip().splitlines()[-1])
                        rows.append((backend, case, load, r))
                        print(f"{backend} {case} {n:,}: {r}", file=sys.stderr, flush=True)
                        if backend == "postgres" and not a.keep:  # free the disk at once
                            _drop(url)
    print("| backend | case | reports | ints × bytes | load | close wall (s) | collector CPU "
          "(s) | database CPU (s) | CPU µs/report | close RSS growth (MiB) | disk B/report | "
          "load (s) |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for backend, case, load, r in rows:
        print(f"| {backend} | {case} | {r['reports']:,} | {r['ints']} × {r['vbytes']} | "
              f"{load} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['db_cpu_s']:.2f} | "
              f"{r['us']:.2f} | {r['rss_mb']:.1f} | {r['bytes_per_report']:.0f} | "
              f"{r['load_s']:.0f} |")


def _drop(url: str) -> None:
    import psycopg
    from sqlalchemy.engine import make_url
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname="postgres",
                         autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{u.database}" WITH (FORCE)')


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
