"""Benchmark: Clip-User composition-loss reduction at fixed worst-case error.

``docs/central-algorithms.md`` C§4.3–C§4.5:

* C1 — the synthetic generator of §4.3 (G = 12, L = 4095, U = 65, q = 0.01, heavy hitter ×(1+γ),
  10 draws per cell), ε ∈ {0.1, 0.2, 0.5, 1}: mean K, P = Kε (vs 12ε), E and Ē, next to the
  prototype reference numbers of §4.4 (paper error model, as the reference used);
* C2 — an ITMS-like substitute (G = 50, L = 223, users in 1-11 subsets, one with exactly 11):
  P_ε against 11ε for ε ∈ [0.1, 2];
* C3 — empirical error check: realised clipping bias on the extremal datasets vs E_μ, E_Var,
  and the released error of a full Clip-User release vs the plan's worst-case error;
* run time of planning and release at n = 10^6 users (the §4.3 scheme with G = 20).

Writes ``bench/results/central_clip_user.md`` and PNG plots (matplotlib Agg).

    python bench/central_clip_user.py            # full (a few minutes)
    python bench/central_clip_user.py --quick    # small (≈ 20 s)
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.central.clip_user import plan_clip_user, plan_from_occupancy
from uldp.collector.central.occupancy import Occupancy
from uldp.collector.central.subset_bounds import mean_bias, var_bias
from uldp.collector.central.subset_params import SubsetStatsParams
from uldp.collector.central.subset_release import subset_stats

U = 65.0
# §4.4 prototype reference: (γ, ε) -> (K, E, Ē) for protect=False and (K, Ē) for True.
REFERENCE: dict[tuple[int, float], tuple[float, float, float, float, float]] = {
    (3, 0.1): (2.2, 4289, 1367, 2.7, 1319),
    (3, 1.0): (4.6, 428.9, 400.4, 4.9, 383.5),
    (6, 0.1): (1.9, 7205, 1388, 2.3, 1336),
    (6, 1.0): (4.0, 720.5, 685.0, 4.3, 659.9),
    (9, 0.1): (2.1, 9052, 1367, 2.6, 1326),
    (9, 0.5): (2.9, 1810, 1107, 3.4, 1029),
    (9, 1.0): (4.0, 905.2, 857.7, 4.2, 789.8),
}


# ---- generators ------------------------------------------------------------------------
def synthetic_pairs(n_grids: int, gamma: int, q: float, gen: np.random.Generator,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§4.3: user ℓ ∈ [2^j, 2^(j+1)−1] occupies G−j uniformly random subsets, counts
    Geo(q) on {1, 2, ...}; per subset the (first) max-count user is multiplied by 1+γ.
    Returns sparse (user, grid, count) triples (users are 0-based: ℓ−1)."""
    us, gs = [], []
    for j in range(n_grids):
        lo, n = 2**j - 1, 2**j
        k = n_grids - j
        pick = np.argsort(gen.random((n, n_grids)), axis=1)[:, :k]
        us.append(np.repeat(np.arange(lo, lo + n), k))
        gs.append(pick.ravel())
    u = np.concatenate(us)
    g = np.concatenate(gs)
    c = gen.geometric(q, u.size).astype(np.int64)
    order = np.lexsort((u, g))  # by grid, then user
    u, g, c = u[order], g[order], c[order]
    starts = np.searchsorted(g, np.arange(n_grids))
    ends = np.r_[starts[1:], g.size]
    for gi in range(n_grids):
        j = starts[gi] + int(np.argmax(c[starts[gi]:ends[gi]]))  # ties: smallest user
        c[j] *= 1 + gamma
    return u, g, c


def occupancy_from_pairs(u: np.ndarray, g: np.ndarray, c: np.ndarray) -> Occupancy:
    order = np.lexsort((u, g))
    users, u_idx = np.unique(u, return_inverse=True)
    grids, g_idx = np.unique(g, return_inverse=True)
    return Occupancy(users=users, subsets=grids, pair_user=u_idx[order].astype(np.int64),
                     pair_grid=g_idx[order].astype(np.int64), counts=c[order].astype(np.int64))


def itms_like(gen: np.random.Generator, gamma: int = 3, q: float = 0.05,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """C2: G = 50, L = 223; user 0 in exactly 11 subsets, the others in 1-10 (geometric)."""
    n_grids, n_users = 50, 223
    k = np.minimum(10, gen.geometric(0.3, n_users))
    k[0] = 11
    us, gs = [], []
    for ell in range(n_users):
        us.append(np.full(k[ell], ell))
        gs.append(gen.choice(n_grids, k[ell], replace=False))
    u, g = np.concatenate(us), np.concatenate(gs)
    c = gen.geometric(q, u.size).astype(np.int64)
    order = np.lexsort((u, g))
    u, g, c = u[order], g[order], c[order]
    for gi in np.unique(g):
        sel = np.flatnonzero(g == gi)
        c[sel[int(np.argmax(c[sel]))]] *= 1 + gamma
    return u, g, c


# ---- C1 ----------------------------------------------------------------------------------
def run_c1(gammas: list[int], epsilons: list[float], draws: int) -> list[dict]:
    rows = []
    for gamma in gammas:
        occs = [occupancy_from_pairs(*synthetic_pairs(
            12, gamma, 0.01, RandomSource.seeded(f"c1-{gamma}-{d}").numpy_generator()))
            for d in range(draws)]
        for eps in epsilons:
            params = SubsetStatsParams(epsilon=eps, upper=U, error_model="paper")
            row: dict = {"gamma": gamma, "eps": eps}
            for prot in (False, True):
                ks, es, ebars = [], [], []
                t0 = time.perf_counter()
                for occ in occs:
                    plan = plan_from_occupancy(occ, params, protect_min_grid=prot)
                    ks.append(plan.k_final)
                    es.append(plan.initial_max_error)
                    ebars.append(plan.max_error)
                tag = "prot" if prot else "free"
                row[f"K_{tag}"] = float(np.mean(ks))
                row[f"E_{tag}"] = float(np.mean(es))
                row[f"Ebar_{tag}"] = float(np.mean(ebars))
                row[f"sec_{tag}"] = (time.perf_counter() - t0) / len(occs)
            rows.append(row)
            ref = REFERENCE.get((gamma, eps))
            msg = (f"C1 γ={gamma} ε={eps:<4}: K={row['K_free']:.1f} (P={row['K_free'] * eps:.2f} "
                   f"vs 12ε={12 * eps:.1f}), E {row['E_free']:.4g} -> Ē {row['Ebar_free']:.4g}; "
                   f"protect: K={row['K_prot']:.1f}, Ē {row['Ebar_prot']:.4g}")
            if ref:
                msg += (f"\n      reference §4.4: K={ref[0]}, E {ref[1]} -> Ē {ref[2]}; "
                        f"protect: K={ref[3]}, Ē {ref[4]}")
            print(msg, flush=True)
    return rows


# ---- C2 ----------------------------------------------------------------------------------
def run_c2(epsilons: list[float], draws: int) -> list[dict]:
    occs = [occupancy_from_pairs(*itms_like(RandomSource.seeded(f"c2-{d}").numpy_generator()))
            for d in range(draws)]
    rows = []
    for eps in epsilons:
        params = SubsetStatsParams(epsilon=eps, upper=U, error_model="paper")
        plans = [plan_from_occupancy(occ, params) for occ in occs]
        k0 = float(np.mean([p.k_initial for p in plans]))
        k1 = float(np.mean([p.k_final for p in plans]))
        e0 = float(np.mean([p.initial_max_error for p in plans]))
        e1 = float(np.mean([p.max_error for p in plans]))
        rows.append({"eps": eps, "K0": k0, "K": k1, "E": e0, "Ebar": e1})
        print(f"C2 ε={eps:.3g}: P={k1 * eps:.3g} vs {k0:.0f}ε={k0 * eps:.3g}; "
              f"E {e0:.4g} -> Ē {e1:.4g}", flush=True)
    return rows


# ---- C3 ----------------------------------------------------------------------------------
def run_c3(reps: int) -> dict:
    """Extremal datasets realise the biases; a release's mean error stays below the plan."""
    bias_rows = []
    for n, s in [(9, 4), (9, 8), (100, 1), (100, 60), (11, 10)]:
        kept = np.arange(n) < s
        x = np.where(kept, 0.0, U)
        if 2 * s > n:
            y = x
        else:
            y = np.zeros(n)
            y[s:][: n // 2] = U
        bias_rows.append({"N": n, "S": s, "mean_bias": abs(x.mean() - x[kept].mean()),
                          "E_mu": float(mean_bias(s, n, U)),
                          "var_bias": abs(y.var() - y[kept].var()),
                          "E_var": float(var_bias(s, n, U))})
    # a Clip-User release on a §4.3-style occupancy with adversarial values (kept 0, dropped U)
    gen = RandomSource.seeded("c3").numpy_generator()
    u, g, c = synthetic_pairs(8, 6, 0.1, gen)
    occ = occupancy_from_pairs(u, g, c)
    users = np.repeat(occ.users[occ.pair_user], occ.counts)
    subs = np.repeat(occ.subsets[occ.pair_grid], occ.counts)
    plan = plan_clip_user(users, subs, epsilon=1.0, upper=U, public_occupancy=True)
    kept_pair = np.repeat(plan.kept, occ.counts)
    rank = np.arange(users.size) - np.repeat(np.cumsum(occ.counts) - occ.counts, occ.counts)
    vals = np.where(rank < kept_pair, 0.0, U)
    true_mu = np.array([vals[subs == s].mean() for s in occ.subsets])
    true_var = np.array([vals[subs == s].var() for s in occ.subsets])
    errs = np.zeros(occ.n_subsets)
    for r in range(reps):
        rel = subset_stats(users, vals, subs, epsilon=1.0, upper=U, plan=plan,
                           public_occupancy=True, rng=RandomSource.seeded(f"c3-{r}"))
        est = np.array([rel.estimate[s.item()] for s in occ.subsets])
        errs += np.abs(est[:, 0] - true_mu) + np.abs(est[:, 1] - true_var)
    errs /= reps
    exact = all(math.isclose(r["mean_bias"], r["E_mu"])
                and math.isclose(r["var_bias"], r["E_var"]) for r in bias_rows)
    print(f"C3 realised biases equal formulas: {exact}; "
          f"release mean error {errs.max():.4g} <= plan max {plan.max_error:.4g}", flush=True)
    return {"bias": bias_rows, "release_err": errs, "plan_err": plan.error_final,
            "K0": plan.k_initial, "K": plan.k_final, "reps": reps}


# ---- run time at n users -------------------------------------------------------------
def run_time(n_grids: int) -> dict:
    gen = RandomSource.seeded("timing").numpy_generator()
    t0 = time.perf_counter()
    u, g, c = synthetic_pairs(n_grids, 3, 0.5, gen)  # small counts keep the rows manageable
    t_gen = time.perf_counter() - t0
    users = np.repeat(u, c)
    subs = np.repeat(g, c)
    vals = gen.uniform(0, U, users.size)
    t0 = time.perf_counter()
    plan = plan_clip_user(users, subs, epsilon=1.0, upper=U, public_occupancy=True)
    t_plan = time.perf_counter() - t0
    t0 = time.perf_counter()
    rel = subset_stats(users, vals, subs, epsilon=1.0, upper=U, plan=plan,
                       public_occupancy=True, rng=RandomSource.seeded("timing-noise"))
    t_rel = time.perf_counter() - t0
    t0 = time.perf_counter()
    subset_stats(users, vals, subs, epsilon=1.0, upper=U, public_occupancy=True,
                 rng=RandomSource.seeded("timing-noise-2"))
    t_base = time.perf_counter() - t0
    planner_only = []
    for gamma, eps in ((9, 0.1), (3, 1.0)):
        occ = occupancy_from_pairs(*synthetic_pairs(
            n_grids, gamma, 0.01, RandomSource.seeded(f"timing-{gamma}").numpy_generator()))
        t0 = time.perf_counter()
        p = plan_from_occupancy(occ, SubsetStatsParams(epsilon=eps, upper=U))
        planner_only.append({"gamma": gamma, "eps": eps, "sec": time.perf_counter() - t0,
                             "K0": p.k_initial, "K": p.k_final, "suppressions": p.suppressions,
                             "users": occ.n_users, "records": int(occ.counts.sum())})
    out = {"planner_only": planner_only, "users": int(plan.occupancy.n_users),
           "subsets": n_grids, "pairs": int(u.size),
           "records": int(users.size), "gen_s": t_gen, "plan_s": t_plan, "release_s": t_rel,
           "baseline_s": t_base, "K0": plan.k_initial, "K": plan.k_final,
           "suppressions": plan.suppressions, "eps_total": rel.privacy.epsilon}
    print(f"timing: plan {t_plan:.2f}s, release {t_rel:.2f}s, baseline {t_base:.2f}s at "
          f"{out['users']:,} users / {out['records']:,} records; planner only: "
          + "; ".join(f"γ={r['gamma']} ε={r['eps']}: {r['sec']:.2f}s" for r in planner_only),
          flush=True)
    return out


# ---- report ------------------------------------------------------------------------------
def plot_c1(rows: list[dict], out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for gamma, col in zip(sorted({r["gamma"] for r in rows}), ["C0", "C1", "C2"], strict=False):
        rs = [r for r in rows if r["gamma"] == gamma]
        eps = np.array([r["eps"] for r in rs])
        axes[0].plot(eps, [r["K_free"] * r["eps"] for r in rs], "o-", color=col,
                     label=f"γ={gamma}")
        axes[0].plot(eps, [r["K_prot"] * r["eps"] for r in rs], "s--", color=col,
                     label=f"γ={gamma}, protect")
        axes[1].plot(eps, [r["E_free"] for r in rs], "o:", color=col, label=f"E γ={gamma}")
        axes[1].plot(eps, [r["Ebar_free"] for r in rs], "o-", color=col, label=f"Ē γ={gamma}")
    e = np.array(sorted({r["eps"] for r in rows}))
    axes[0].plot(e, 12 * e, "k-", label="12ε (no suppression)")
    axes[0].set(xscale="log", yscale="log", xlabel="ε per subset", ylabel="P = Kε",
                title="C1: composition loss")
    axes[1].set(xscale="log", yscale="log", xlabel="ε per subset", ylabel="worst-case error",
                title="C1: E (dotted) and Ē after Clip-User + cap")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_c2(rows: list[dict], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 4))
    eps = np.array([r["eps"] for r in rows])
    ax.plot(eps, [r["K"] * r["eps"] for r in rows], "o-", label="P after Clip-User")
    ax.plot(eps, 11 * eps, "k-", label="11ε")
    ax.set(xscale="log", yscale="log", xlabel="ε per subset", ylabel="P",
           title="C2: ITMS-like (G=50, L=223)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def write_markdown(path: Path, args: argparse.Namespace, c1: list[dict], c2: list[dict],
                   c3: dict, timing: dict) -> None:
    lines = [
        "# Clip-User benchmark (docs/central-algorithms.md C§4)",
        "",
        f"Command: `python bench/central_clip_user.py{' --quick' if args.quick else ''}`; "
        f"{args.draws} occupancy draws per cell; error model = paper (eq. 13, continuous "
        "Laplace terms) for comparability with §4.4. Seeds: `RandomSource.seeded('c1-γ-d')`.",
        "",
        "## C1: synthetic generator (§4.3), G = 12, L = 4095, U = 65, q = 0.01",
        "",
        "P = Kε is the pure-DP loss of the worst user after Clip-User (12ε without). E is the "
        "initial max worst-case error (kept as the bound), Ē the max after the pseudo-user cap.",
        "",
        "| γ | ε | K | P | 12ε | E | Ē | K (protect) | Ē (protect) | ref K | ref E | ref Ē "
        "| ref K prot | ref Ē prot | plan s/draw |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in c1:
        ref = REFERENCE.get((r["gamma"], r["eps"]))
        rs = ("| " + " | ".join(str(x) for x in ref)) if ref else "| - | - | - | - | -"
        lines.append(
            f"| {r['gamma']} | {r['eps']} | {r['K_free']:.1f} | {r['K_free'] * r['eps']:.2f} | "
            f"{12 * r['eps']:.1f} | {r['E_free']:.4g} | {r['Ebar_free']:.4g} | "
            f"{r['K_prot']:.1f} | {r['Ebar_prot']:.4g} {rs} | {r['sec_free']:.3f} |")
    lines += [
        "",
        "Reference columns are the prototype numbers of spec §4.4 (not the paper's; tolerance "
        "±1 in K, ±10% in E).",
        "",
        "![C1](central_clip_user_c1.png)",
        "",
        "## C2: ITMS-like substitute (G = 50, L = 223, one user in 11 subsets)",
        "",
        "| ε | K before | K after | P | 11ε | E | Ē |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in c2:
        lines.append(f"| {r['eps']:.3g} | {r['K0']:.1f} | {r['K']:.1f} | {r['K'] * r['eps']:.3g} "
                     f"| {11 * r['eps']:.3g} | {r['E']:.4g} | {r['Ebar']:.4g} |")
    lines += ["", "![C2](central_clip_user_c2.png)", "",
              "## C3: empirical error check", "",
              "Extremal datasets of §2.3 (kept samples 0, dropped at U / balanced):", "",
              "| N | S | realised mean bias | E_μ | realised Var bias | E_Var |",
              "|---|---|---|---|---|---|"]
    for r in c3["bias"]:
        lines.append(f"| {r['N']} | {r['S']} | {r['mean_bias']:.6g} | {r['E_mu']:.6g} | "
                     f"{r['var_bias']:.6g} | {r['E_var']:.6g} |")
    lines += [
        "",
        f"Full release after Clip-User (G = 8 generator, γ = 6, q = 0.1, ε = 1, K "
        f"{c3['K0']} → {c3['K']}) on adversarial values (kept records 0, dropped U), "
        f"{c3['reps']} seeded releases: mean |error| (mean + variance) per subset vs the plan's "
        "worst-case E_g:",
        "",
        "| subset | mean released error | plan E_g |", "|---|---|---|"]
    for i, (a, b) in enumerate(zip(c3["release_err"], c3["plan_err"], strict=True)):
        lines.append(f"| {i} | {a:.4g} | {b:.4g} |")
    lines += [
        "",
        "## Run time",
        "",
        f"§4.3 scheme with G = {timing['subsets']} subsets, {timing['users']:,} users, "
        f"{timing['pairs']:,} (user, subset) pairs, {timing['records']:,} records (counts "
        "Geo(0.5), γ = 3), ε = 1, 2 cores:",
        "",
        "| step | seconds |", "|---|---|",
        f"| plan (occupancy from rows + Clip-User + cap) | {timing['plan_s']:.2f} |",
        f"| release with plan | {timing['release_s']:.2f} |",
        f"| baseline release (no plan) | {timing['baseline_s']:.2f} |",
        "",
        f"K {timing['K0']} → {timing['K']} with {timing['suppressions']:,} suppressions; "
        f"released ε total = {timing['eps_total']:g}.",
        "",
        "Planner alone on the occupancy array (§4.3 counts, q = 0.01, no records "
        "materialised):",
        "",
        "| γ | ε | users | records (implied) | K before → after | suppressions | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in timing["planner_only"]:
        lines.append(f"| {r['gamma']} | {r['eps']} | {r['users']:,} | {r['records']:,} | "
                     f"{r['K0']} → {r['K']} | {r['suppressions']:,} | {r['sec']:.2f} |")
    lines.append("")
    path.write_text("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small run (fewer draws, n = 1.3e5)")
    ap.add_argument("--draws", type=int, default=None, help="occupancy draws per cell")
    ap.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    if args.draws is None:
        args.draws = 3 if args.quick else 10
    args.out_dir.mkdir(parents=True, exist_ok=True)
    gammas = [3, 9] if args.quick else [3, 6, 9]
    eps_c1 = [0.1, 1.0] if args.quick else [0.1, 0.2, 0.5, 1.0]
    c1 = run_c1(gammas, eps_c1, args.draws)
    c2 = run_c2(list(np.round(np.geomspace(0.1, 2.0, 5 if args.quick else 9), 3)), args.draws)
    c3 = run_c3(20 if args.quick else 200)
    timing = run_time(17 if args.quick else 20)
    plot_c1(c1, args.out_dir / "central_clip_user_c1.png")
    plot_c2(c2, args.out_dir / "central_clip_user_c2.png")
    write_markdown(args.out_dir / "central_clip_user.md", args, c1, c2, c3, timing)
    print(f"wrote {args.out_dir / 'central_clip_user.md'}")


if __name__ == "__main__":
    main()
