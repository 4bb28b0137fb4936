"""What one group commit of reports costs, by group size (issue 28).

The group-commit writer (``uldp.collector.storage.writer``) stores every batch of
reports in one transaction. With two replicas on one phase each writer gathers about
half as many reports per commit, so whatever a commit costs regardless of its size is
paid twice as often per report. This bench commits ``--commits`` groups of each size in
``--sizes`` on a local PostgreSQL (``bench/ingest.py``'s ``local_postgres``) through the
writer's own path (``Database.raw_write(hold=True)`` + ``store_reports_cursor``) and
prints the writer thread's CPU and the PostgreSQL server's CPU per commit and per
report; a least-squares fit ``cpu = fixed + per_report * size`` says how much of a
commit does not scale with its size.

    nice -n 19 python bench/commit_cost.py --sizes 8,16,32,64 --commits 400
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import _postgres_cpu, local_postgres

from uldp.collector.storage.db import Database, PendingReport, open_database


def _query(db: Database, qid: str) -> None:
    db.create_query(dict(query_id=qid, kind="mean", dataset="x", epsilon=1.0, spec_json="{}",
                         seed="1", state="running", current_phase=1, num_phases=2,
                         target_users=10**7, phase_timeout_s=3600.0, result_json=None),
                    [10**7, 10**7], 2**62)


def measure(db: Database, port: int, size: int, commits: int, tag: str) -> tuple[float, float]:
    """(writer CPU µs, PostgreSQL CPU µs) per commit of ``size`` reports."""
    payload = b"\x01" * 8
    groups = [[PendingReport("q", 1, f"{tag}-{c}-{i}", 0, 1, c * size + i, payload)
               for i in range(size)] for c in range(commits)]
    for g in groups[:20]:  # warm-up: held connection, prepared statements
        with db.raw_write(hold=True) as cur:
            db.store_reports_cursor(cur, g, commit=True)
    pg0, t0 = _postgres_cpu(port), time.thread_time()
    for g in groups[20:]:
        with db.raw_write(hold=True) as cur:
            out = db.store_reports_cursor(cur, g, commit=True)
        assert all(o.code == "OK" for o in out), out[0]
    n = commits - 20
    return (1e6 * (time.thread_time() - t0) / n, 1e6 * (_postgres_cpu(port) - pg0) / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,16,32,64", help="reports per commit, comma-separated")
    ap.add_argument("--commits", type=int, default=400, help="commits per size (20 warm-up)")
    ap.add_argument("--durable", action="store_true", help="fsync=on (default off: CPU only)")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if any(s < 1 for s in sizes) or a.commits <= 20:
        ap.error("--sizes must be positive and --commits > 20")
    with local_postgres(durable=a.durable) as pg:
        db = open_database(pg.new_database())
        _query(db, "q")
        rows = []
        for k, s in enumerate(sizes):
            w, p = measure(db, pg.port, s, a.commits, f"s{k}")
            rows.append((s, w, p))
        db.engine.dispose()
    print("| reports per commit | writer µs/commit | writer µs/report | PostgreSQL µs/commit "
          "| PostgreSQL µs/report |")
    print("|---:|---:|---:|---:|---:|")
    for s, w, p in rows:
        print(f"| {s} | {w:,.0f} | {w / s:,.1f} | {p:,.0f} | {p / s:,.1f} |")
    x = np.array([r[0] for r in rows], float)
    for name, col in (("writer", 1), ("PostgreSQL", 2)):
        y = np.array([r[col] for r in rows])
        slope, fixed = np.polyfit(x, y, 1)
        print(f"{name}: {fixed:,.0f} µs fixed per commit + {slope:,.1f} µs per report")


if __name__ == "__main__":
    main()
