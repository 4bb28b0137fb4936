#!/usr/bin/env python3
"""Method ``hadamard``'s fallback interval: the variance calibrated for its own noise against
Student's ``t`` and fixed cuts of the users' spread, on the same runs.

    python bench/fallback_variance.py --cells 'differ|32|100|8' 'differ|256|1000|8' --reps 40

``auto`` on ``bench/frontier_distribution.py``'s cells (its users, seeds and device
randomness; ``auto`` only, no peers), through the production program. In every run that
falls back, the fallback's variance (``hadamard_pairs._weighted_variance``) is captured and
the same estimate's 95 % intervals are formed under each rule:

* ``predictive`` — the production rule: the spread left out at ``B̂`` (``V̂``), the
  interval ``±z√V*`` holding the error with probability 95 % averaged over
  ``V ~ N(V̂, Var V̂)`` cut to the bounds ``V`` holds (the oracle's floor; the variance
  with no spread, ``B ≥ 0``) (``hadamard_pairs.stated_variance``; docs/algorithms.md,
  "The interval of a noisy variance");
* ``2nd order`` — ``V* = (V̂ + √(V̂² + (z² + 1)·Var V̂))/2``, the second-order correction
  for the noise of ``V̂`` taken at its own root;
* ``t`` — ``V̂`` (cut to the bounds) with Student's ``t`` at the Satterthwaite
  ``ν = 2V̂²/Var V̂``;
* ``Z = z`` — the spread left out at ``(B̂ − z·se)⁺``, the normal quantile (session 5's rules;
  ``Z = 1`` was the code before; ``Z = 0`` is the plug-in ``V̂`` cut to the bounds).

Per cell and rule: the coverage of every category's interval, the mean ``z²`` of the
estimate against its stated standard error (1 for an honest variance; ``t`` states the
same ``V̂`` as ``Z = 0``), the coverage of the categories whose ``ν < 30`` (the noisy
variances) and of the rest, and the mean half-width over ``Z = 0``'s. Seconds of CPU per run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
from scipy.stats import t as student

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontier import sample_records
from frontier_distribution import POPS, N, run_auto, users_of

import uldp.collector.methods.hadamard_pairs as hp
from uldp.client.randomness import RandomSource
from uldp.collector.planner import QuerySpec

ZS = (0.0, 1.0, 2.0)
NOISY = 30.0


def run_cell(pop: str, k: int, m: int, eps: float, rep: int, n: int
             ) -> tuple[str | None, dict[str, Any] | None]:
    """One repetition of a frontier cell (its users and seeds): the mode ``auto`` ran and,
    after a fallback, what its variance saw."""
    g = np.random.default_rng([rep, m, k, POPS.index(pop), 26])
    users = users_of(pop, n, m, k, g)
    items = sample_records(users["counts"], g)
    spec = QuerySpec(kind="distribution", epsilon=eps, users=n, samples=m, dim=k, seed=rep)
    rng = RandomSource.seeded(f"frontier-dist:{pop}:{k}:{m}:{eps:g}:{rep}")
    got: dict[str, Any] = {}
    inner = hp._weighted_variance

    def hook(method, plan, v, w, n_all):  # type: ignore[no-untyped-def]
        got.update(method=method, plan=plan, v=v, w=np.asarray(w), n_all=n_all)
        return inner(method, plan, v, w, n_all)

    hp._weighted_variance = hook
    try:
        est = run_auto(spec, users, items, rng)
    finally:
        hp._weighted_variance = inner
    mode = est.extra.get("hadamard", {}).get("mode")
    if mode != "fallback" or "v" not in got:
        return mode, None
    got["truth"] = np.asarray(users["truth"], dtype=np.float64)
    got["level"] = float(spec.confidence)
    return mode, got


def rules(got: dict[str, Any]) -> dict[str, tuple[np.ndarray, ...]]:
    """Per rule ``(f̂, se, quantile, ν)`` per category of one fallback run."""
    v, w = got["v"], got["w"]
    present = [v[key] for key in ("a", "b") if key in v]
    f = sum(wk * fk for wk, (fk, _, _) in zip(w, present, strict=True))
    args = (got["method"], got["plan"])
    raw, noise, floor, ceiling = hp._weighted_variance(*args, v, w, got["n_all"])
    var = np.clip(raw, floor, ceiling)
    dof = np.maximum(2 * var * var / np.maximum(noise, 1e-300), 1.0)
    z = NormalDist().inv_cdf(0.5 + got["level"] / 2)
    # the second-order correction at its own root: V* = V̂ + (z² + 1)·Var V̂/(4V*)
    fixed = (var + np.sqrt(var * var + (z * z + 1) * noise)) / 2
    pred = hp.stated_variance(raw, noise, floor, ceiling, got["level"])
    out = {"predictive": (f, np.sqrt(pred), np.full_like(var, z), dof),
           "2nd order": (f, np.sqrt(fixed), np.full_like(var, z), dof),
           "t": (f, np.sqrt(var), student.ppf(0.5 + got["level"] / 2, dof), dof)}
    for Z in ZS:
        vz = dict(v)
        if "B" in v:
            vz["B"] = np.maximum(v["B"] - Z * v["seB"], 0.0)  # session 5's cut
        raw_z, _, _, _ = hp._weighted_variance(*args, vz, w, got["n_all"])
        var_z = np.clip(raw_z, floor, ceiling)
        out[f"Z = {Z:g}"] = (f, np.sqrt(var_z), np.full_like(var_z, z), dof)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="+", required=True, help="'users|k|m|ε' …")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--users", type=int, default=N)
    a = ap.parse_args(argv)
    print("| users | k | m | ε | fallback runs / runs | rule | coverage | mean z² | "
          "coverage ν < 30 (share) | coverage ν ≥ 30 | half-width / Z = 0's | s per run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cell in a.cells:
        pop, k, m, eps = cell.split("|")
        got_runs, t0 = [], time.process_time()
        for rep in range(a.start, a.start + a.reps):
            _, got = run_cell(pop, int(k), int(m), float(eps), rep, a.users)
            if got is not None:
                got_runs.append(rules(got) | {"truth": got["truth"]})
        secs = (time.process_time() - t0) / a.reps
        if not got_runs:
            print(f"| {pop} | {k} | {m} | {eps} | 0 / {a.reps} | | | | | | | {secs:.1f} |")
            continue
        for rule in ["predictive", "2nd order", "t"] + [f"Z = {Z:g}" for Z in ZS]:
            cov, z2, noisy, calm, width = [], [], [], [], []
            for r in got_runs:
                f, se, q, dof = r[rule]
                truth = r["truth"]
                lo, hi = np.clip(f - q * se, 0, 1), np.clip(f + q * se, 0, 1)
                hit = (lo <= truth) & (truth <= hi)
                cov.append(hit)
                z2.append(((f - truth) / se) ** 2)
                noisy.append(hit[dof < NOISY])
                calm.append(hit[dof >= NOISY])
                width.append(q * se / (NormalDist().inv_cdf(0.975) * r["Z = 0"][1]))
            c, nz = np.concatenate(cov), np.concatenate(noisy)
            cn = f"{np.mean(nz):.3f} ({nz.size / c.size:.2f})" if nz.size else "– (0)"
            print(f"| {pop} | {k} | {m} | {eps} | {len(got_runs)} / {a.reps} | {rule} | "
                  f"{np.mean(c):.3f} | {np.mean(np.concatenate(z2)):.3f} | {cn} | "
                  f"{np.mean(np.concatenate(calm)):.3f} | "
                  f"{np.mean(np.concatenate(width)):.3f} | {secs:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
