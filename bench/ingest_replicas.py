"""Two replicas on one phase against one, measured as a ratio with its standard error
(issue 28: two replicas ≥ 1.6× one on unary reports).

One run of ``bench/ingest.py`` says little: the shared box's load moves a unary rate by
± 20 % between runs. This bench runs the same ingest (``bench/ingest.py``'s
``run_backend``: a real collector, TLS, PostgreSQL with fsync on, every report committed
before it is answered) ``--rounds`` times for each replica count, interleaved ABBA
(1, 2, 2, 1, 1, 2, …) on one PostgreSQL server (a fresh database per run), so a load
drift hits both counts alike. Each round pairs a one-replica run with a two-replica run;
the ratio of their unary rates (and of their collector CPU per report, ``2·x₁/x₂``,
which the box's load moves less) is averaged over the rounds, with its standard error.

Also printed: per replica count, the mean CPU µs per unary report of each thread role
(``bench/replica_cpu.py``; all replicas summed), of PostgreSQL, and the reports each
group commit held.

    python bench/ingest_replicas.py --rounds 3 -- --devices 3000 --unary-queries 2 \\
        --batch-queries 1 --batch-threads 8 --floor-calls 0 --channels 64 \\
        --cpu-quota 0.4 --route device

Everything after ``--`` is ``bench/ingest.py``'s own command line (``--processes``,
``--backend`` and ``--roles`` are set here).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest
from ingest import local_postgres, parser, run_backend

from uldp.collector.security.certs import make_dev_pki
from uldp.collector.security.tokens import new_admin_token

__all__ = ["mean_se", "order"]


def order(rounds: int) -> list[int]:
    """Replica counts in ABBA order: 1, 2, 2, 1, 1, 2, … (``2 · rounds`` runs)."""
    return [p for r in range(rounds) for p in ((1, 2) if r % 2 == 0 else (2, 1))]


def mean_se(xs: list[float]) -> tuple[float, float]:
    """Mean and its standard error (nan with fewer than two values)."""
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="pairs of runs (≥ 2 for an SE)")
    ap.add_argument("--label", default="", help="a name for this code in the tables")
    ap.add_argument("ingest", nargs=argparse.REMAINDER,
                    help="-- then bench/ingest.py's arguments")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {a.rounds}")
    rest = [x for x in a.ingest if x != "--"]
    b = parser().parse_args([*rest, "--backend", "postgres", "--roles"])
    ingest.CHANNELS, ingest.ROUTE = b.channels, b.route  # as ingest.main sets them
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="uldp-bench-replicas-") as tmp, \
            local_postgres(durable=True) as pg:
        work = Path(tmp)
        make_dev_pki(work / "pki", ["localhost", "127.0.0.1"])
        (work / "pki" / "admin.token").write_text(new_admin_token())
        for k, p in enumerate(order(a.rounds)):
            b.processes = p
            r = run_backend(f"p{k}", pg.new_database(), work, b)
            runs[p].append(r)
            print(f"run {k + 1}/{2 * a.rounds}: {p} replica(s): {r['unary_rps']:.0f} unary "
                  f"reports/s, collector {r['server_cpu_us_per_unary']:.0f} µs/report",
                  file=sys.stderr, flush=True)
    label = a.label or "this code"
    print(f"\n{label}: unary reports, {a.rounds} interleaved pairs (ABBA), "
          f"`{' '.join(rest)}`\n")
    print("| round | 1 replica reports/s | 2 replicas reports/s | 2 vs 1 (rate) | "
          "collector µs/report 1 | 2 (all replicas) | 2·x₁/x₂ (CPU) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    rates, cpus = [], []
    for i, (one, two) in enumerate(zip(runs[1], runs[2], strict=True)):
        rr = two["unary_rps"] / one["unary_rps"]
        x1, x2 = one["server_cpu_us_per_unary"], two["server_cpu_us_per_unary"]
        rates.append(rr)
        cpus.append(2 * x1 / x2)
        print(f"| {i + 1} | {one['unary_rps']:.0f} | {two['unary_rps']:.0f} | {rr:.2f}× | "
              f"{x1:.0f} | {x2:.0f} | {2 * x1 / x2:.2f}× |")
    (mr, sr), (mc, sc) = mean_se(rates), mean_se(cpus)
    print(f"| **mean ± SE** | | | **{mr:.2f} ± {sr:.2f}×** | | | **{mc:.2f} ± {sc:.2f}×** |")
    print(f"\n{label}: CPU µs per unary report by role (mean over runs; all replicas)\n")
    roles = sorted({k for p in (1, 2) for r in runs[p] for k in r["unary_roles"]},
                   key=lambda k: -sum(r["unary_roles"].get(k, 0.0) for r in runs[1]))
    print("| role | 1 replica | 2 replicas |\n|---|---:|---:|")

    def avg(p: int, f: Any) -> float:
        return sum(f(r) for r in runs[p]) / len(runs[p])
    for k in roles:
        v1, v2 = (avg(p, lambda r, k=k: r["unary_roles"].get(k, 0.0)) for p in (1, 2))
        if max(v1, v2) >= 1.0:
            print(f"| {k} | {v1:.0f} | {v2:.0f} |")
    for name, f in (("collector process (all threads)",
                     lambda r: r["server_cpu_us_per_unary"]),
                    ("PostgreSQL", lambda r: r["db_cpu_us_per_unary"]),
                    ("reports per group commit",
                     lambda r: r["unary_n"] / max(r["unary_db_commits"], 1)),
                    ("unary p50 ms", lambda r: r["p50_ms"]),
                    ("unary p99 ms", lambda r: r["p99_ms"])):
        print(f"| {name} | {avg(1, f):.1f} | {avg(2, f):.1f} |")


if __name__ == "__main__":
    main()
