#!/usr/bin/env python3
"""Why method ``hadamard``'s window runs on a real population err more than their own
prediction: the windows' clamping bias on the users' actual statistics against the normal
model's (the prediction's), and given that the spread test passes.

    python bench/window_clamping.py --population flights

``auto``'s plan for a distribution at ε (``run_users``' plan and the users' exact moments,
as ``bench/fallback_pairs.py``), its windows placed by ``window()`` around the true
coefficients; the centre off by ``N(0, v_c)`` at its predicted variance (``--draws`` draws).
Per served coefficient: the squared clamping bias ``(mean_i clip(Y_ic) − θ_c)²`` of the
users' real statistics, of normal statistics of the same mean and variance (the model), and
the model's closed form (``_truth_bias2``); then the spread test run on each draw (the
users' real outside share, its noise at the spread phase's size, the rule's limit): the
real bias given a pass, P(pass) and the outside share, real and normal. No randomized
reports: seconds of CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fallback_pairs import captured_plan
from realdata_ldp import population

from uldp.client.kinds.means import hadamard_rows
from uldp.collector.methods.hadamard_model import (
    excess_limit,
    normal_cdf,
    share_se,
    share_variance,
    test_windows,
)
from uldp.collector.methods.hadamard_predict import _truth_bias2, centre_variance


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--population", default="flights")
    ap.add_argument("--eps", type=float, default=8.0)
    ap.add_argument("--draws", type=int, default=1000)
    a = ap.parse_args(argv)
    pop = population(a.population)
    cats = [np.asarray(c, dtype=np.int64) for c in pop["categories"]]
    A = max(int(np.max(c)) for c in cats if len(c)) + 1
    got = captured_plan([c.astype(np.float64) for c in cats], A, a.eps)
    plan, M = got["plan"], got["plan"].method
    K, G = plan.n_components, M.n_groups(plan)
    F = np.array([np.bincount(c, minlength=A) / len(c) if len(c) else np.full(A, 1 / A)
                  for c in cats])
    Y = hadamard_rows(np.pad(F, ((0, 0), (0, K - A))), K)
    th, S2 = Y.mean(0), Y.var(0)
    sizes = np.array([plan.stage_sizes(g) for g in range(G)], dtype=np.float64)
    var = centre_variance(M, plan, got["sv"], got["stv"], sizes[:, 0])
    alike = M.alike_var(plan, th, var)
    q, mech, _, _, _, mse = M.window(plan, th, var, alike)
    comps = [M._comp(plan, g) for g in range(G)]
    Yc, v = Y[:, comps], var[comps]
    D = np.array([M._bound(plan, c) for c in comps])
    tau = np.sqrt(alike[comps] + v)
    half = q * tau
    model = _truth_bias2(M, plan, S2[comps], v, half, th[comps], D)
    _, fallback, _ = M.outcomes(plan, got["sv"], got["stv"], got["theta"])
    _, _, qt = test_windows(np.clip(th[comps], -D, D), tau, q, D)
    alike_out = float(np.mean(2 * normal_cdf(-qt)))
    unit = float(np.sum(M._excess_bias2(plan, 1.0)))
    n2 = int(sizes[:, 1].sum())
    g = np.random.default_rng(0)
    zs = th[comps] + np.sqrt(S2[comps]) * g.standard_normal((len(Yc), len(comps)))
    real, normal, passed, out_real, out_normal = [], [], [], [], []
    for _ in range(a.draws):
        c0 = np.clip(th[comps] + g.normal(0, np.sqrt(v)), -D, D)
        lo_, hi_ = np.maximum(c0 - half, -D), np.minimum(c0 + half, D)
        b_real = (np.clip(Yc, lo_, hi_).mean(0) - th[comps]) ** 2
        real.append(b_real)
        normal.append((np.clip(zs, lo_, hi_).mean(0) - th[comps]) ** 2)
        tlo, thi = np.maximum(c0 - qt * tau, -D), np.minimum(c0 + qt * tau, D)
        share = float(((Yc < tlo) | (Yc > thi)).mean())
        out_real.append(share)
        out_normal.append(float(((zs < tlo) | (zs > thi)).mean()))
        seen = share + g.normal(0, np.sqrt(share_variance(share, a.eps) / max(n2, 1)))
        sd = share_se(seen, 0.0, n2, a.eps)
        if seen <= alike_out + excess_limit(sd, mse, float(np.sum(fallback)), unit):
            passed.append(b_real)
    print(f"{a.population}, ε = {a.eps:g}: K = {K}, q = {q:g}, randomizer {mech}, "
          f"spread phase {n2} users, {a.draws} centre draws\n")
    print("| coefficient | users' S² | alike S² | bias² real | bias² normal (sim) | "
          "bias² model | real / model |")
    print("|---|---|---|---|---|---|---|")
    R, N = np.mean(real, axis=0), np.mean(normal, axis=0)
    for j, c in enumerate(comps):
        print(f"| {c} | {S2[c]:.4f} | {alike[c]:.4f} | {R[j]:.2e} | {N[j]:.2e} | "
              f"{model[j]:.2e} | {R[j] / model[j]:.2f} |")
    P = np.mean(passed, axis=0).sum() if passed else float("nan")
    print(f"| **total** | | | **{R.sum():.2e}** | {N.sum():.2e} | {model.sum():.2e} | "
          f"**{R.sum() / model.sum():.2f}** |")
    print(f"\ngiven a pass: bias² total {P:.2e} ({P / model.sum():.2f}× the model); "
          f"P(pass) {len(passed) / a.draws:.3f}; outside share of the test's windows: real "
          f"{np.mean(out_real):.4f}, normal {np.mean(out_normal):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
