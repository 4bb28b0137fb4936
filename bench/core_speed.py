"""Speed and memory of the core (issue 2 targets), printed as a markdown table.

Cases, each in a fresh subprocess so peak RSS is its own:

* ``simulate``: ``uldp simulate mean --users 1000000 --samples 100 --epsilon 1`` end to end
  (target <= 3 s, <= 2 GiB);
* ``privatize-1d``: device batch calls for n = 10^6 users, m = 100, d = 1 (stage I and II),
  users privatized per second, and collector aggregation (reports per second);
* ``privatize-l2``: d = 128 ℓ2 (Kashin) with n = 10^5, m = 10;
* ``noise``: exact discrete-Laplace draws per second.

Usage: ``python bench/core_speed.py [--quick] [--out bench/results/core_speed.md]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def case_simulate(users: int) -> dict:
    from uldp.collector.cli.app import main

    t = time.perf_counter()
    main(["simulate", "mean", "--users", str(users), "--samples", "100", "--epsilon", "1",
          "--json", "--no-progress"])
    return {"seconds": time.perf_counter() - t}


def _privatize(kind: str, users: int, samples: int, dim: int, frame: str = "gaussian") -> dict:
    import warnings

    import numpy as np

    from uldp.client.randomness import RandomSource
    from uldp.client.tasks import compute_reports
    from uldp.collector.datasets import make_fleet_data
    from uldp.collector.planner import QuerySpec, compile_query

    spec = QuerySpec(method="two-stage",
                     kind=kind, epsilon=1.0 if kind == "mean" else 8.0, users=users,
                     samples=samples, dim=dim, frame_kind=frame)
    dist = "bernoulli" if kind == "mean" else "sphere"
    data = make_fleet_data(kind, dist, samples, dim, 1.0, np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = compile_query(spec)
    rng = RandomSource.seeded(1)
    X = data.draw(users)
    out = {}
    t = time.perf_counter()
    r1 = compute_reports(plan.task_for(0, 1), X, rng)
    out["stage1_users_per_s"] = users / (time.perf_counter() - t)
    acc = plan.new_accumulator(0, 1)
    t = time.perf_counter()
    acc.add(r1)
    out["stage1_reports_aggregated_per_s"] = users / (time.perf_counter() - t)
    khat = plan.khat_from({0: acc})[0]
    t = time.perf_counter()
    r2 = compute_reports(plan.task_for(0, 2, khat), X, rng)
    out["stage2_users_per_s"] = users / (time.perf_counter() - t)
    acc2 = plan.new_accumulator(0, 2, khat)
    t = time.perf_counter()
    acc2.add(r2)
    out["stage2_reports_aggregated_per_s"] = users / (time.perf_counter() - t)
    out["regime"] = plan.grouping.regime
    return out


def case_noise(n: int) -> dict:
    from uldp.client.noise import discrete_laplace, laplace_scale
    from uldp.client.randomness import RandomSource

    rng = RandomSource.seeded(0)
    out = {}
    for label, sens in (("stage1", 2), ("stage2", 1 << 16)):
        t = time.perf_counter()
        discrete_laplace(laplace_scale(sens, 1.0), n, rng)
        out[f"{label}_draws_per_s"] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    rng.words(n)
    out["chacha_words_per_s"] = n / (time.perf_counter() - t)
    return out


def _run_child(name: str, args: list[str]) -> dict:
    cmd = [sys.executable, __file__, "--child", name, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10x smaller fleets")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        fn = {"simulate": lambda: case_simulate(int(a.rest[0])),
              "privatize-1d": lambda: _privatize("mean", int(a.rest[0]), 100, 1),
              "privatize-l2": lambda: _privatize("mean-l2", int(a.rest[0]), 10, 128,
                                                 a.rest[1]),
              "noise": lambda: case_noise(int(a.rest[0]))}[a.child]
        t = time.perf_counter()
        res = fn()
        res["wall_s"] = time.perf_counter() - t
        res["peak_rss_mib"] = _peak_mib()
        print(json.dumps(res))
        return
    k = 10 if a.quick else 1
    rows = [
        ("uldp simulate mean, n=1e6/k, m=100", _run_child("simulate", [str(1_000_000 // k)])),
        ("device+collector 1-d, n=1e6/k, m=100", _run_child("privatize-1d",
                                                           [str(1_000_000 // k)])),
        ("device+collector l2 d=128 Kashin (gaussian), n=1e5/k, m=10",
         _run_child("privatize-l2", [str(100_000 // k), "gaussian"])),
        ("device+collector l2 d=128 Kashin (hadamard), n=1e5/k, m=10",
         _run_child("privatize-l2", [str(100_000 // k), "hadamard"])),
        ("exact discrete Laplace, 1e6/k draws", _run_child("noise", [str(1_000_000 // k)])),
    ]
    lines = [f"k = {k}", "", "| case | metric | value |", "|---|---|---|"]
    for name, res in rows:
        for key, val in res.items():
            v = f"{val:,.0f}" if isinstance(val, float) and val > 100 else (
                f"{val:.3f}" if isinstance(val, float) else str(val))
            lines.append(f"| {name} | {key} | {v} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
