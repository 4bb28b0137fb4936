"""Benchmark: shuffle mode at 10^5 .. 10^7 users in one query, through the storage API.

    python bench/shuffle_scale.py [--users 100000,1000000,10000000] [--polls 50]
                                  [--admitted 10000,1000000] [--out bench/results/shuffle_scale.md]

No fleet: the collector's logic runs in process over a SQLite file (``CollectorCore``, the
code behind the gRPC servicers), the shuffler's store over its own SQLite file. Per query
size it measures, in CPU seconds of this process:

* creating the shuffled query (the placements and the one count of devices per cell);
* the shuffler's view of the query (``GetShuffleQuery``, polled every second by every
  shuffler): the first call, then the median of ``--polls`` calls — and, for comparison,
  what the earlier implementation did on every poll (sorting every user's placement:
  ``np.unique(placements, axis=0)``);
* the collector's checks of a forwarded batch before it opens it (``ForwardBatch`` of 200
  reports that do not open: the whole batch path but the X25519s);
* the resident memory of the process after all of it.

and, for the shuffler, the CPU of one forwarder tick's reads (``buckets``, ``admitted``)
and of admitting 10 000 reports with ``--admitted`` reports already in its store (slots
drawn from [0, 10^7)): work per report and per tick that does not grow with the query.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from uldp.collector.security.tokens import AdminAuth, TokenKey, new_admin_token
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.errors import ServiceError
from uldp.collector.service.shuffled import ForwardedBatch
from uldp.collector.shuffler.store import Admission, ShufflerStore, Submission
from uldp.collector.storage.db import open_database


def _cpu() -> float:
    return time.process_time()


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def collector_side(users: int, polls: int, work: Path) -> dict[str, Any]:
    db = open_database(f"sqlite:///{work / f'collector-{users}.db'}")
    core = CollectorCore(db, TokenKey.generate(), AdminAuth(new_admin_token()),
                         CoreConfig(max_users=max(users, 10_000_000)))
    qid = f"scale-{users}"
    c0 = _cpu()
    core.create_query(kind="mean", epsilon=1.0, dataset="d", bound=1.0, samples=10,
                      users=users, dim=1, method="ssl", params_json='{"shuffle": true}',
                      phase_timeout_s=3600.0, query_id=qid)
    create_s = _cpu() - c0
    c0 = _cpu()
    first = core.shuffled.query(qid)
    first_s = _cpu() - c0
    times = []
    for _ in range(polls):
        c0 = _cpu()
        core.shuffled.query(qid)
        times.append(_cpu() - c0)
    rt = core.runtime(qid)
    assert rt is not None
    c0 = _cpu()
    np.unique(rt.program.placements(), axis=0, return_counts=True)
    old_s = _cpu() - c0
    (p, g, s, _n, _d), = first["cells"]
    info = core.tasks.task_info(rt, {"grp": g, "stage": s, "phase": p, "slot": 0})
    batch = ForwardedBatch(secrets.token_hex(16), qid, p, g, s, info.digest,
                           [os.urandom(57) for _ in range(200)], 0, "")
    c0 = _cpu()
    try:
        out = core.shuffled.forward(batch)
        assert out.refused == 200
    except ServiceError as exc:  # pragma: no cover - reported, not hidden
        print("forward:", exc.code, exc.message)
    forward_s = _cpu() - c0
    core.stop()
    db.dispose()
    return {"users": users, "create_s": create_s, "first_poll_s": first_s,
            "poll_ms": statistics.median(times) * 1000, "old_poll_s": old_s,
            "forward_ms": forward_s * 1000, "rss_mib": _rss_mib()}


def shuffler_side(admitted: int, work: Path) -> dict[str, Any]:
    store = ShufflerStore(work / f"shuffler-{admitted}.db")
    rng = np.random.default_rng(admitted)
    slots = rng.choice(10_000_000, size=admitted + 10_000, replace=False)
    dig = "ab" * 32

    def items(part: np.ndarray) -> list[Admission]:
        return [Admission(Submission("q", 1, 0, 0, dig, os.urandom(57), int(x)), 10**7)
                for x in part]
    for k in range(0, admitted, 10_000):
        store.submit(items(slots[k:k + 10_000]))
        if store.buckets()[0].count >= 50_000:  # forwarded meanwhile, as in service
            (b,) = store.buckets()
            batch = store.draw(b, b.count)
            assert batch is not None
            store.finish(batch, "forwarded", b.count, 0)
    c0 = _cpu()
    for _ in range(100):
        store.buckets()
        store.admitted("q", 1)
    tick_ms = (_cpu() - c0) / 100 * 1000
    part = items(slots[admitted:])
    c0 = _cpu()
    store.submit(part)
    admit_us = (_cpu() - c0) / len(part) * 1e6
    size = sum(f.stat().st_size for f in work.glob(f"shuffler-{admitted}.db*"))
    store.close()
    return {"admitted": admitted, "tick_ms": tick_ms, "admit_us": admit_us,
            "db_mib": size / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", default="100000,1000000,10000000")
    ap.add_argument("--polls", type=int, default=50)
    ap.add_argument("--admitted", default="10000,1000000")
    ap.add_argument("--out", default=None, help="write the markdown tables here too")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="uldp-bench-shuffle-scale-"))
    rows = [collector_side(int(u), a.polls, work) for u in a.users.split(",")]
    srows = [shuffler_side(int(n), work) for n in a.admitted.split(",")]
    lines = [
        "Shuffle mode at scale, through the storage API (`python bench/shuffle_scale.py`): "
        "CPU seconds of one process, SQLite.", "",
        "| users in the query | create (s) | GetShuffleQuery, first (s) | GetShuffleQuery, "
        "then (ms, median) | before: sort every placement per poll (s) | ForwardBatch "
        "checks, 200 reports (ms) | max RSS (MiB) |", "|---|---|---|---|---|---|---|",
        *[f"| {r['users']:,} | {r['create_s']:.2f} | {r['first_poll_s']:.2f} | "
          f"{r['poll_ms']:.2f} | {r['old_poll_s']:.2f} | {r['forward_ms']:.1f} | "
          f"{r['rss_mib']:.0f} |" for r in rows], "",
        "| reports in the shuffler's store | one tick's reads (ms) | admitting a report "
        "(µs CPU, in a call of 10 000) | store on disk (MiB) |", "|---|---|---|---|",
        *[f"| {r['admitted']:,} | {r['tick_ms']:.3f} | {r['admit_us']:.1f} | "
          f"{r['db_mib']:.0f} |" for r in srows], ""]
    print("\n".join(lines))
    if a.out:
        Path(a.out).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
