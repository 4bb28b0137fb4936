"""Benchmark: closing a phase over 10^6 stored stage-I reports (target <= 5 s, bounded
memory: the reports are streamed in chunks into the plan's accumulators).

    python bench/phase_close.py [--reports 1000000] [--backend sqlite|postgres]

Stores N stage-I reports of a two-stage ``mean`` query (users = 2N, m = 100, so each
report has B = 5 integers) directly through the storage layer, then times
``CollectorCore.close_phase`` (stream → accumulate → k̂ → publish, one transaction), and
reports the peak Python heap during the close (tracemalloc) and the process RSS growth.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import local_postgres

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.collector.security.tokens import AdminAuth, TokenKey
from uldp.collector.service.core import CollectorCore
from uldp.collector.storage import open_database
from uldp.collector.storage.db import PendingReport


def run(n: int, db_url: str) -> dict[str, float]:
    db = open_database(db_url)
    core = CollectorCore(db, TokenKey.generate(), AdminAuth("x" * 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        core.create_query(kind="mean", epsilon=1.0, dataset="x", bound=1.0, samples=100,
                          users=2 * n, dim=1, method="", params_json="", phase_timeout_s=3600,
                          query_id="close")
    rt = core.runtime("close")
    assert rt is not None
    plan = rt.program.plan
    group, stage = plan.assign_all()
    slots = np.flatnonzero(stage == 1)
    assert slots.size == n
    task = plan.task_for(0, 1)
    rng = RandomSource.seeded(1)
    t0 = time.perf_counter()
    chunk = 20_000
    for s in range(0, n, chunk):
        sl = slots[s:s + chunk]
        X = rng.numpy_generator().uniform(-0.5, 0.5, size=(sl.size, 100))
        reps = compute_reports(task, X, rng).astype("<i8")
        db.store_reports([PendingReport("close", 1, f"d{int(k)}", int(group[k]), 1, int(k),
                                        reps[j].tobytes()) for j, k in enumerate(sl)])
    load_s = time.perf_counter() - t0
    assert db.get_phases("close")[0]["received"] == n
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t0 = time.perf_counter()
    assert core.close_phase("close", 1)
    close_s = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    phases = db.get_phases("close")
    assert [p["state"] for p in phases] == ["closed", "open"]
    pub = json.loads(phases[0]["published_json"])
    assert pub["reports"] == n, pub  # every stored report was aggregated
    core.stop()
    db.dispose()
    return {"reports": n, "report_ints": int(reps.shape[1]), "load_s": load_s,
            "close_s": close_s, "peak_heap_mb": peak / 2**20,
            "rss_growth_mb": (rss1 - rss0) / 1024, "khat": pub["khat"]["0"][0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=1_000_000)
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="uldp-bench-close-") as tmp:
        if a.backend in ("sqlite", "both"):
            rows.append(("sqlite", run(a.reports, f"sqlite:///{tmp}/close.db")))
        if a.backend in ("postgres", "both"):
            with local_postgres(durable=True) as pg:
                rows.append(("postgres", run(a.reports, pg.new_database())))
    print("| backend | reports | ints/report | load (s) | close (s) | peak heap (MiB) | "
          "RSS growth (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['reports']:,} | {r['report_ints']} | {r['load_s']:.1f} | "
              f"{r['close_s']:.2f} | {r['peak_heap_mb']:.1f} | {r['rss_growth_mb']:.1f} |")


if __name__ == "__main__":
    main()
