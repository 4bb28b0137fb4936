"""``uldp central``: central user-level DP releases from a warehouse CSV file.

Specs: ``huber_user_level_dp.md`` (``mean --method hlm|wme``),
``private_modified_winsorized_mean.md`` (``robust-mean --method pmwm|sa``),
``composition_suppression.md`` (``subset-stats``, optionally planned by Clip-User, whose
plan is printed *before* any release and reads only the public occupancy counts).

The CSV is read with the standard library; every problem with it (missing column, empty
file, non-numeric or NaN value) is reported with the row and column, and nothing is
released.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource

__all__ = ["read_columns", "register"]


def read_columns(path: str, user_col: str, value_cols: Sequence[str],
                 subset_col: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Read ``(user ids, values (N,) or (N, d), subsets)`` from a CSV file with a header."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no such CSV file: {path}")
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        wanted = [user_col, *value_cols] + ([subset_col] if subset_col else [])
        missing = [c for c in wanted if c not in header]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; the file has {header}")
        users, subsets, rows = [], [], []
        for i, row in enumerate(reader, start=2):
            vals = []
            for c in value_cols:
                text = (row[c] or "").strip()
                try:
                    v = float(text)
                except ValueError:
                    raise ValueError(f"{path}: row {i}, column {c!r}: {text!r} is not a "
                                     "number") from None
                if not math.isfinite(v):
                    raise ValueError(f"{path}: row {i}, column {c!r}: {text!r} is NaN or "
                                     "infinite")
                vals.append(v)
            uid = (row[user_col] or "").strip()
            if not uid:
                raise ValueError(f"{path}: row {i}: empty user id in column {user_col!r}")
            users.append(uid)
            rows.append(vals)
            if subset_col:
                subsets.append((row[subset_col] or "").strip())
    if not rows:
        raise ValueError(f"{path}: no data rows")
    values = np.asarray(rows, dtype=np.float64)
    if values.shape[1] == 1:
        values = values[:, 0]
    return np.asarray(users), values, (np.asarray(subsets) if subset_col else None)


def _rng(args: argparse.Namespace) -> RandomSource | None:
    return None if args.seed is None else RandomSource.seeded(args.seed)


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _print_release(release: Any, as_json: bool, title: str) -> None:
    d = _jsonable(release.to_dict())
    if as_json:
        print(json.dumps(d))
        return
    print(title)
    est = d["estimate"]
    if isinstance(est, dict):
        print(f"{'subset':>16}  estimate")
        for k, v in est.items():
            print(f"{k:>16}  {v}")
    else:
        print(f"estimate: {est}")
    priv = d["privacy"]
    spent = {k: priv[k] for k in ("epsilon", "delta", "rho") if priv.get(k) is not None}
    print(f"privacy: {priv['mechanism']} ({priv['mode']}, user-level) "
          + ", ".join(f"{k}={v:g}" for k, v in spent.items()))
    if priv.get("split"):
        print("  split: " + ", ".join(f"{k}={v:g}" for k, v in priv["split"].items()))
    if priv.get("public"):
        print("  public: " + ", ".join(f"{k}={v}" for k, v in priv["public"].items()))


def _cmd_mean(args: argparse.Namespace) -> int:
    users, values, _ = read_columns(args.file, args.user_col, args.value_col)
    if args.method == "hlm":
        from uldp.collector.central.huber import hlm_mean

        if args.delta is None:
            raise ValueError("--delta is required for --method hlm ((epsilon, delta)-DP)")
        rel = hlm_mean(users, values, epsilon=args.epsilon, delta=args.delta,
                       radius=args.bound, rng=_rng(args))
    else:
        from uldp.collector.central.wme import wme_mean

        rel = wme_mean(users, values, epsilon=args.epsilon,
                       delta=args.delta if args.delta is not None else 1e-6,
                       bound=args.bound, rng=_rng(args))
    _print_release(rel, args.json, f"user-level mean of {args.value_col} ({args.method})")
    return 0


def _cmd_robust(args: argparse.Namespace) -> int:
    users, values, _ = read_columns(args.file, args.user_col, args.value_col)
    if args.method == "pmwm":
        from uldp.collector.central.pmwm import pmwm_mean

        rel = pmwm_mean(users, values, epsilon=args.epsilon, rng=_rng(args))
    else:
        from uldp.collector.central.subsample_aggregate import subsample_and_aggregate

        rel = subsample_and_aggregate(users, values, args.statistic, epsilon=args.epsilon,
                                      rng=_rng(args))
    what = args.statistic if args.method == "sa" else "mean"
    _print_release(rel, args.json, f"user-level robust {what} of {args.value_col} "
                                   f"({args.method})")
    return 0


def _cmd_subset(args: argparse.Namespace) -> int:
    from uldp.collector.central.clip_user import plan_clip_user
    from uldp.collector.central.subset_stats import subset_stats

    users, values, subsets = read_columns(args.file, args.user_col, args.value_col,
                                          args.subset_col)
    if values.ndim != 1:
        raise ValueError("subset-stats takes exactly one --value-col")
    plan = None
    if args.clip_user:
        plan = plan_clip_user(users, subsets, epsilon=args.epsilon, upper=args.upper,
                              lower=args.lower, statistic=args.statistic,
                              public_occupancy=True)
        if not args.json:
            print("Clip-User plan (from public occupancy counts only, before any release):")
            print(plan.describe())
            print()
    rel = subset_stats(users, values, subsets, epsilon=args.epsilon, upper=args.upper,
                       lower=args.lower, statistic=args.statistic, plan=plan,
                       public_occupancy=True, rng=_rng(args))
    _print_release(rel, args.json, f"per-{args.subset_col} {args.statistic} of "
                                   f"{args.value_col[0]}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="CSV file with a header row")
    p.add_argument("--user-col", required=True, help="column holding the user id")
    p.add_argument("--value-col", required=True, action="extend", type=_column_list,
                   help="value column; repeat it or give a comma-separated list for a "
                        "vector per row (--value-col x --value-col y, or --value-col x,y)")
    p.add_argument("--epsilon", type=float, required=True,
                   help="user-level privacy budget of the release")
    p.add_argument("--seed", type=int, default=None,
                   help="seeded noise for tests/simulations only (never for a real release)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _column_list(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",")]
    if not all(cols):
        raise argparse.ArgumentTypeError(f"expected column name(s), got {text!r}")
    return cols


def register(subparsers: Any) -> None:
    """Add ``uldp central ...`` to the main parser."""
    pc = subparsers.add_parser("central", help="central user-level DP releases from a CSV",
                               description=__doc__.split("\n\n")[0])
    sc = pc.add_subparsers(dest="central_command", required=True)
    m = sc.add_parser("mean", help="Huber-loss mean (hlm) or winsorized mean estimator (wme)")
    _common(m)
    m.add_argument("--delta", type=float, default=None,
                   help="delta of (epsilon, delta)-DP (required by hlm; wme default 1e-6)")
    m.add_argument("--method", choices=("hlm", "wme"), default="hlm",
                   help="hlm: Huber-loss mean (default); wme: winsorized mean estimator")
    m.add_argument("--bound", type=float, default=None,
                   help="public bound/radius of the data (default: the estimator's)")
    m.set_defaults(func=_cmd_mean)
    r = sc.add_parser("robust-mean", help="private modified winsorized mean (pmwm) or "
                                          "subsample-and-aggregate (sa)")
    _common(r)
    r.add_argument("--method", choices=("pmwm", "sa"), default="pmwm",
                   help="pmwm: private modified winsorized mean (default); sa: "
                        "subsample-and-aggregate of --statistic")
    r.add_argument("--statistic", default="mean", help="sa: built-in statistic name")
    r.set_defaults(func=_cmd_robust)
    s = sc.add_parser("subset-stats", help="per-subset means/variances (Clip-User optional)")
    _common(s)
    s.add_argument("--subset-col", required=True,
                   help="column naming the subset (e.g. region) of each row")
    s.add_argument("--upper", type=float, required=True, help="public upper value bound")
    s.add_argument("--lower", type=float, default=0.0, help="public lower value bound")
    s.add_argument("--statistic", choices=("mean", "variance", "both"), default="both",
                   help="per-subset statistic to release (default both)")
    s.add_argument("--clip-user", action="store_true",
                   help="plan suppression with Clip-User first (the plan is printed)")
    s.set_defaults(func=_cmd_subset)
