"""The ``uldp`` command line.

* ``uldp simulate KIND``: a whole query in-process over a simulated fleet (issue 2).
* ``uldp collector|query|fleet|demo``: the gRPC service (``service_cli``).
* ``uldp central``: central user-level DP releases from a CSV file (``central/cli``).
* ``uldp privacy shuffle``: the central ε of shuffle mode (``cli/privacy``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from uldp.collector.cli.util import (
    Parser,
    add_debug_flag,
    add_mechanism_flags,
    add_method_flag,
    mechanism_options,
    positive_float,
    positive_int,
    quiet_grpc_logs,
    run_cli,
)

__all__ = ["build_parser", "main"]

SIM_KINDS = ("mean", "mean-linf", "mean-l2", "mean-l1", "distribution")


def _add_population_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``uldp simulate`` that describe the simulated fleet and the runs."""
    p.add_argument("--users", type=positive_int, default=10_000,
                   help="number of simulated users n (default 10000)")
    p.add_argument("--samples", type=positive_int, default=100,
                   help="samples per user m (default 100)")
    p.add_argument("--dim", type=positive_int, default=None,
                   help="dimension d (alphabet size for distribution); default 1, or 8")
    p.add_argument("--epsilon", type=positive_float, default=1.0,
                   help="user-level privacy budget epsilon of each user (default 1)")
    p.add_argument("--dist", default=None,
                   help="uniform | bernoulli | gaussian | student-t:DF | sphere | zipf:S")
    p.add_argument("--bound", type=positive_float, default=1.0, help="support bound D")
    p.add_argument("--moment", default=None, metavar="P[:M]",
                   help="heavy tails: E|X|^P <= M (M computed from --dist when omitted)")
    p.add_argument("--frame", default="gaussian", choices=("gaussian", "hadamard"),
                   help="Kashin frame for mean-l2")
    p.add_argument("--mode", default="default", choices=("default", "paper", "tuned"),
                   help="grouping: spec [D7] default, paper (eps_c = 1), or tuned (minimizes "
                        "the explicit error bound; monotone in epsilon)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the simulated data and noise (simulation only; default 0)")
    p.add_argument("--reps", type=positive_int, default=1,
                   help="repetitions averaged into the reported error (default 1)")


def _add_simulate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate", help="run a query in-process over a simulated fleet",
        description="Run one user-level LDP query in-process over n virtual users x m "
                    "samples with the production device and collector code.")
    p.add_argument("kind", choices=SIM_KINDS + ("sgd", "classify", "regress"),
                   help="what to estimate: mean (1-d), mean-linf / mean-l2 / mean-l1 "
                        "(d-dimensional mean, error in that norm), distribution (histogram "
                        "over --dim symbols), sgd / classify / regress (learning)")
    add_method_flag(p, "auto")
    add_mechanism_flags(p)
    _add_population_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    own = p.add_argument_group(
        "own data", "run the query over the users of a CSV file instead of a simulated "
        "fleet: prints the estimate, the same estimand without privacy, the interval and "
        "the error (--users/--dist are then unused; --samples is m_ref, default the "
        "median count, the least count with --assume users-alike)")
    own.add_argument("--data", metavar="FILE.csv", help="CSV file, one row per sample")
    own.add_argument("--user-col", help="column naming each row's user")
    own.add_argument("--value-col", action="extend", type=_column_list, default=[],
                     help="value column(s): repeat it or give x,y for vectors")
    own.add_argument("--label-col", help="label column (classify, regress)")
    own.add_argument("--category-col", help="category column (distribution)")
    own.add_argument("--lo", type=float, help="public lower end of a value's range (mean "
                     "kinds; default: the data's minimum, fine for a check, never for a "
                     "deployment)")
    own.add_argument("--hi", type=float, help="public upper end of a value's range (values "
                     "outside are clamped into it, and how many is said on stderr; classify/"
                     "regress: the feature box [--lo, --hi] of every feature)")
    own.add_argument("--grid", type=positive_int, default=None,
                     help="classify/regress: cells per feature axis (default: sized by the "
                          "rule of the learning queries, docs/algorithms.md §9.4)")
    own.add_argument("--label-bound", type=positive_float, default=None,
                     help="regress: public bound on |label| (default: the data's largest, "
                          "fine for a check only)")
    own.add_argument("--compare", action="store_true",
                     help="run every method (--reps times each, fresh noise) and print "
                          "their RMSE, predicted RMSE and interval coverage side by side")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: only on a terminal)")
    p.set_defaults(func=_cmd_simulate)


_DEFAULT_DIST = {"mean": "bernoulli", "mean-linf": "uniform", "mean-l2": "sphere",
                 "mean-l1": "bernoulli", "distribution": "zipf:1.1"}


def _column_list(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise argparse.ArgumentTypeError("give a column name")
    return cols


def _read_own_data(args: argparse.Namespace) -> Any:
    """The users of ``--data`` (``uldp.collector.csvdata``'s rules), the flags checked."""
    from uldp.collector.simulation.own_data import read_user_csv

    if not args.user_col:
        raise ValueError("--user-col: name the column of each row's user")
    if args.kind == "distribution" and not args.category_col:
        raise ValueError("--category-col: a distribution needs the category column")
    if args.kind != "distribution" and not args.value_col:
        raise ValueError("--value-col: name the value column(s)")
    if args.kind in ("classify", "regress", "sgd") and not args.label_col:
        raise ValueError(f"--label-col: kind {args.kind} needs labels")
    if (args.lo is None) != (args.hi is None) or (args.lo is not None and not args.lo < args.hi):
        raise ValueError("--lo and --hi go together, with --lo below --hi (the public range "
                         "of one value)")
    from uldp.collector.service.requests import LIMITS

    # a range taken from the data must be one a query can state (|lo|, |hi| <= 2^40)
    bound = LIMITS.max_range_end if args.lo is None and args.kind != "distribution" else None
    return read_user_csv(args.data, args.user_col, args.value_col, label_col=args.label_col,
                         category_col=args.category_col, max_abs=bound)


def _data_range(data: Any, lo: float | None, hi: float | None
                ) -> tuple[float, float, str, Any]:
    """``(lo, hi, note, data)``: the public range (from the data when not given, with a
    note) and the users' values clamped into it, the count said on stderr."""
    from uldp.collector.csvdata import clamp_to_range
    from uldp.collector.simulation.own_data import UserData

    note = ""
    if lo is None or hi is None:
        allv = np.concatenate([np.ravel(v) for v in data.values])
        lo, hi = float(allv.min()), float(allv.max())
        hi = hi if hi > lo else lo + 1.0
        note = " (range from the data: give --lo/--hi from domain knowledge in a deployment)"
        return lo, hi, note, data
    flat, said = clamp_to_range(np.concatenate([np.ravel(v) for v in data.values]), lo, hi)
    if said:
        print(f"uldp: note: {said}", file=sys.stderr)
    cut = np.cumsum([np.size(v) for v in data.values])[:-1]
    values = [part.reshape(np.shape(v)) for part, v in zip(np.split(flat, cut), data.values,
                                                             strict=True)]
    return lo, hi, note, UserData(values, data.labels, data.categories)


def _learning_extra(args: argparse.Namespace, data: Any, lo: float, hi: float
                    ) -> dict[str, Any]:
    """classify/regress over one's own data: the feature box ``[--lo, --hi]^d``, the grid
    (``--grid``, else sized by the rule of ``run_classify``) and the label bound of regress
    (``--label-bound``, else the data's largest |label|, said on stderr)."""
    from uldp.collector.models.grid import choose_grid, grid_extra

    d = len(args.value_col)
    T = 1.0
    if args.kind == "regress":
        T = args.label_bound
        if T is None:
            T = float(max(np.max(np.abs(y)) for y in data.labels if np.size(y))) or 1.0
            print(f"uldp: note: --label-bound {T:g} from the data (fine for a check; give it "
                  "from domain knowledge in a deployment)", file=sys.stderr)
    M = args.grid
    if M is None:
        m = max(int(np.median([np.size(v) // d for v in data.values])), 1)
        choice = choose_grid(len(data.values), m, d, args.epsilon, task=args.kind,
                             method=args.method, label_bound=T)
        M = choice.M
        print(f"uldp: note: grid {M} cells per axis, the least predicted risk: squared bias "
              f"{choice.bias2:.3g} + variance {choice.variance:.3g} (--grid to fix it)",
              file=sys.stderr)
    extra: dict[str, Any] = grid_extra(M, np.full(d, lo), np.full(d, hi))
    if args.kind == "regress":
        extra["label_bound"] = T
    return extra


def _cmd_own_data(args: argparse.Namespace) -> int:
    """``uldp simulate KIND --data FILE.csv ...`` (``uldp.collector.simulation.own_data``)."""
    from uldp.collector.simulation.own_data import run_users

    data = _read_own_data(args)
    lo, hi, note = args.lo, args.hi, ""
    extra: dict[str, Any] = {}
    if args.kind in ("mean", "mean-linf", "classify", "regress"):
        lo, hi, note, data = _data_range(data, lo, hi)
    if args.kind in ("classify", "regress"):
        extra = _learning_extra(args, data, lo, hi)
        note += f" (feature box [{lo:g}, {hi:g}], grid {extra['grid']} cells per axis)"
        lo = hi = None  # the box is in extra; the values are not centred
    dim = len(data.categories) if args.kind == "distribution" else None
    if args.kind == "distribution" and args.dim is not None and args.dim < len(data.categories):
        raise ValueError(f"--dim {args.dim}: the file has {len(data.categories)} categories")
    if args.kind == "distribution" and args.dim is not None:
        dim = args.dim
    common = dict(epsilon=args.epsilon, lo=lo, hi=hi, dim=dim, seed=args.seed, extra=extra,
                  samples=args.samples if args.samples != 100 else None, reps=args.reps,
                  options=mechanism_options(args) or None)
    if args.compare:
        return _print_comparison(args, data, common, note)
    res = run_users(args.kind, data, method=args.method, **common)
    for advisory in res.advisories:
        print(f"note: {advisory}", file=sys.stderr)
    if args.json:
        print(json.dumps(res.to_dict()))
        return 0
    _print_own_data(args, data, res, note)
    return 0


def _print_own_data(args: argparse.Namespace, data: Any, res: Any, note: str) -> None:
    e = res.estimate
    print(f"{res.kind} over {res.users} users of {args.data} (m_ref={res.m_ref}, "
          f"epsilon={res.epsilon:g}), method {ran_as(res.method, e.extra)}"
          + (" (chosen by auto)" if res.auto else "") + note)
    print(f"estimand: {res.estimand}")
    labels = data.categories or [str(j) for j in range(len(res.truth))]
    print(f"{'coord':>12} {'estimate':>11} {'truth':>11} {'95% interval':>27}")
    for j in range(min(len(res.truth), 16)):
        print(f"{labels[j][:12]:>12} {e.values[j]:>11.5f} {res.truth[j]:>11.5f}    "
              f"[{e.ci_low[j]:>10.5f}, {e.ci_high[j]:>10.5f}]")
    pred = math.sqrt(res.predicted_mse or 0)
    if res.reps > 1:
        print(f"over {res.reps} reps: RMSE (l2) {res.rmse:.5f}; predicted RMSE {pred:.5f}; "
              f"{100 * res.coverage:.1f}% of the intervals hold the truth (last rep shown)")
    else:
        print(f"error (l2) {res.error:.5f}; predicted RMSE {pred:.5f}; "
              f"{int(res.covered.sum())}/{res.covered.size} intervals hold the truth")


#: what ``--compare`` runs (the learning kinds run their one program: no comparison)
COMPARED = ("auto", "two-stage", "two-stage-paper", "ssl", "baseline-b", "baseline-a")


def _print_comparison(args: argparse.Namespace, data: Any, common: dict[str, Any],
                      note: str) -> int:
    from uldp.collector.simulation.own_data import run_users

    if args.kind not in SIM_KINDS:
        raise ValueError(f"--compare: kind {args.kind} has one method; drop --compare")
    runs = [run_users(args.kind, data, method=m, **common) for m in COMPARED]
    if args.json:
        print(json.dumps([r.to_dict() for r in runs]))
        return 0
    r0 = runs[0]
    print(f"{r0.kind} over {r0.users} users of {args.data} (m_ref={r0.m_ref}, "
          f"epsilon={r0.epsilon:g}), {r0.reps} rep(s) per method{note}")
    print(f"{'method':<16} {'runs as':<16} {'RMSE':>10} {'predicted':>10} {'coverage':>9}")
    for name, r in zip(COMPARED, runs, strict=True):
        pred = math.sqrt(r.predicted_mse) if r.predicted_mse is not None else math.nan
        print(f"{name:<16} {r.method:<16} {r.rmse:>10.5f} {pred:>10.5f} "
              f"{100 * r.coverage:>8.1f}%")
    print("RMSE: root mean squared l2 error over the reps; predicted: the error formula "
          "with these users' spread (docs/algorithms.md, \"Predicted error\"; two-stage: at "
          "its narrowest stage-II interval, clamping bias left to the interval); coverage: "
          "share of the 95% intervals holding the truth")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    if args.data:
        return _cmd_own_data(args)
    if args.kind not in SIM_KINDS:
        mod = importlib.import_module("uldp.collector.learning.cli")
        return mod.simulate_learning(args)
    from uldp.client.randomness import RandomSource
    from uldp.collector.datasets import make_fleet_data
    from uldp.collector.planner import (
        QuerySpec,
        compile_query,
        predicted_mse,
        with_best_mechanisms,
    )
    from uldp.collector.simulation.simulate import simulate_reps

    dim = args.dim or (1 if args.kind == "mean" else 8)
    if args.kind == "mean" and dim != 1:
        raise ValueError("--dim must be 1 for kind mean (use mean-linf for vectors)")
    dist = args.dist or _DEFAULT_DIST[args.kind]
    moment_p = moment_m = None
    bound: float | None = args.bound
    if args.moment:
        p_text, _, m_text = args.moment.partition(":")
        moment_p = float(p_text)
        moment_m = float(m_text) if m_text else None
        bound = None
    rng_data = np.random.default_rng(args.seed)
    data = make_fleet_data(args.kind, dist, args.samples, dim, bound, rng_data,
                           moment_p=moment_p)
    if moment_p is not None and moment_m is None:
        if data.moment is None:
            raise ValueError(f"give --moment {moment_p:g}:M explicitly for --dist {dist}")
        moment_m = data.moment[1]
    spec = QuerySpec(**with_best_mechanisms(dict(
        kind=args.kind, epsilon=args.epsilon, users=args.users, samples=args.samples,
        dim=dim, bound=bound, method=args.method, moment_p=moment_p, moment_m=moment_m,
        frame_kind=args.frame, mode=args.mode, seed=args.seed, query_id=f"sim-{args.seed}",
        **mechanism_options(args))))
    plan = compile_query(spec)
    for note in plan.advisories:
        print(f"note: {note}", file=sys.stderr)
    rng = RandomSource.seeded(args.seed)
    result = simulate_reps(spec, data, rng, reps=args.reps, progress=args.progress)
    predicted = None
    if spec.moment_p is None:
        pilot = data.draw(max(1, 20_000 // args.samples))
        flat = pilot.reshape((-1,) + pilot.shape[2:])
        sample_var = plan.kind.sample_map(plan.template, flat).var(axis=0)
        predicted = predicted_mse(plan, sample_var)
    out = result.to_dict(spec, predicted, plan)
    if args.json:
        print(json.dumps(out))
        return 0
    _print_simulation(args, spec, result, out, predicted)
    return 0


def ran_as(method: str, est_extra: dict[str, Any]) -> str:
    """``method (oracle X, randomizer Y)``: what ran, as a result names it, and ``auto``'s
    runner-up with what it would likely have given."""
    mech = est_extra.get("mechanisms") or {}
    parts = [f"{k} {v}" for k, v in (("oracle", mech.get("oracle")),
                                      ("randomizer", mech.get("randomizer"))) if v]
    out = method + (f" ({', '.join(parts)})" if parts else "")
    auto = est_extra.get("auto") or {}
    r = auto.get("runner_up")
    if r and r.get("likely_half_width"):
        what = ("likely interval ±" + f"{max(r['likely_half_width']):.4g}"
                if auto.get("objective", "width") == "width"
                else f"predicted MSE {r['likely_mse']:.4g}")
        out += f"; auto's runner-up: {r['method']} ({what})"
    if est_extra.get("assume", "none") != "none":
        out += f"; interval {est_extra.get('valid_if')}"
    return out


def _print_simulation(args: argparse.Namespace, spec: Any, result: Any, out: dict[str, Any],
                      predicted: float | None) -> None:
    print(f"{spec.kind} via {ran_as(out['method'], result.last.extra)}: n={spec.users} "
          f"users x m={spec.samples} samples, "
          f"d={spec.dim}, epsilon={spec.epsilon:g} ({out['regime']} regime), "
          f"{args.reps} rep(s) in {result.seconds:.2f}s")
    width = min(len(result.truth), 16)
    print(f"{'coord':>5} {'estimate':>11} {'truth':>11} {'95% CI':>25}")
    for j in range(width):
        lo, hi = result.last.ci_low[j], result.last.ci_high[j]
        print(f"{j:>5} {result.estimate[j]:>11.5f} {result.truth[j]:>11.5f} "
              f"   [{lo:>10.5f}, {hi:>10.5f}]")
    if len(result.truth) > width:
        print(f"  ... {len(result.truth) - width} more coordinates (use --json)")
    pred = f"{predicted:.4g}" if predicted is not None else "n/a"
    print(f"squared error {result.sq_error:.4g} (predicted MSE {pred}); "
          f"CI coverage {result.ci_coverage:.3f}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="uldp", description="User-level local differential privacy: simulate, serve, "
                                 "collect and release.",
        epilog="exit codes: 0 done; 1 ran, but the outcome is not a success (e.g. a fleet "
               "with unfinished devices); 2 an operator mistake or unusable environment, "
               "shown as one line (--debug adds the traceback); 130 interrupted")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_simulate(sub)
    for module in ("uldp.collector.cli.service", "uldp.collector.central.cli",
                   "uldp.collector.cli.privacy"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``uldp``: exit codes and error lines as in ``uldp.collector.cli.util``."""
    quiet_grpc_logs()
    parser = build_parser()
    add_debug_flag(parser)
    return run_cli(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
