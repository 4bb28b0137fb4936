"""``uldp central``: central user-level DP releases from a warehouse CSV file.

See ``docs/central.md`` (the estimators, their estimands and intervals). Algorithms, in
``docs/central-algorithms.md``: part H (``mean --method hlm|wme``), part P
(``--method pmwm``, ``robust-mean --method sa``),
issue 11 (``--method adaptive|simple``, the user-mean estimators of ``mean_of_means.py``;
``adaptive`` is the default of ``mean`` and ``robust-mean``: the best measured RMSE on
real skewed data, ``bench/results/realdata.md``),
part C (``subset-stats``, optionally planned by Clip-User, whose
plan is printed *before* any release and reads only the public occupancy counts).

Every ``--method`` is one :class:`CentralMethod` in :data:`METHODS`.

The CSV is read by the reader of every command (``uldp.collector.csvdata``: UTF-8 with or
without a BOM, cells stripped; a missing column, an empty file, an empty user id or subset,
a non-numeric or NaN value is reported with the row and column, and nothing is released;
values outside the public range are clamped into it, the count said on stderr). Every
release prints its estimand (which mean) and an interval.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from uldp.client.randomness import RandomSource

__all__ = ["METHODS", "CentralMethod", "methods_of", "read_columns", "register", "shifted_release"]


def read_columns(path: str, user_col: str, value_cols: Sequence[str],
                 subset_col: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Read ``(user ids, values (N,) or (N, d), subsets)`` from a CSV file with a header
    (:func:`uldp.collector.csvdata.read_csv_columns`: the rules of every command)."""
    from uldp.collector.csvdata import read_csv_columns

    t = read_csv_columns(path, user_col, value_cols, [subset_col] if subset_col else [])
    values = np.column_stack([t.numbers[c] for c in value_cols])
    if values.shape[1] == 1:
        values = values[:, 0]
    return t.users, values, (t.texts[subset_col] if subset_col else None)


def _clamped(values: np.ndarray, lo: float, hi: float, flags: str = "--lo/--hi"
             ) -> np.ndarray:
    """``values`` clamped into the public range, the count said on stderr (for the
    operator; never part of a release)."""
    from uldp.collector.csvdata import clamp_to_range

    out, note = clamp_to_range(values, lo, hi, flags)
    if note:
        print(f"uldp: note: {note}", file=sys.stderr)
    return out


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


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _print_release(release: Any, as_json: bool, title: str) -> None:
    d = _jsonable(release.to_dict())
    if as_json:
        print(json.dumps(d))
        return
    print(title)
    if d.get("estimand"):
        print(f"estimand: {d['estimand']}")
    est = d["estimate"]
    if isinstance(est, dict):
        print(f"{'subset':>16}  estimate")
        for k, v in est.items():
            print(f"{k:>16}  {v}")
    else:
        line = f"estimate: {_fmt(est)}"
        ci = d.get("interval")
        if ci is not None:
            cov = d["details"].get("coverage", d["details"].get("coverage_noise_only", 0.95))
            line += f"   {100 * cov:g}% interval [{_fmt(ci[0])}, {_fmt(ci[1])}]"
        else:
            line += "   (no interval: see the estimand)"
        print(line)
    priv = d["privacy"]
    spent = {k: priv[k] for k in ("epsilon", "delta", "rho") if priv.get(k) is not None}
    print(f"privacy: {priv['mechanism']} ({priv['mode']}, user-level) "
          + ", ".join(f"{k}={v:g}" for k, v in spent.items()))
    if priv.get("split"):
        print("  split: " + ", ".join(f"{k}={v:g}" for k, v in priv["split"].items()))
    if priv.get("public"):
        print("  public: " + ", ".join(f"{k}={v}" for k, v in priv["public"].items()))


def _public_range(args: argparse.Namespace, method: str, required: bool
                  ) -> tuple[float, float] | None:
    """``--lo/--hi`` (or ``--bound B`` = ``[-B, B]``), validated; errors name the flags."""
    lo, hi = args.lo, args.hi
    bound = getattr(args, "bound", None)
    if bound is not None:
        if lo is not None or hi is not None:
            raise ValueError("give either --bound B or --lo/--hi, not both")
        if not (math.isfinite(bound) and bound > 0):
            raise ValueError(f"--bound must be a finite positive number, got {bound!r}")
        return -bound, bound
    if (lo is None) != (hi is None):
        raise ValueError("--lo and --hi go together: give both (the public range of one "
                         "value)")
    if lo is None:
        if required:
            raise ValueError(f"--lo and --hi (the public range of one value, e.g. a rating "
                             f"scale; never computed from the data) are required for "
                             f"--method {method}")
        return None
    if not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        raise ValueError(f"--lo must be below --hi (finite numbers), got --lo {lo:g} "
                         f"--hi {hi:g}")
    return lo, hi


def _required_range(args: argparse.Namespace) -> tuple[float, float]:
    """:func:`_public_range` of ``--method`` when the method needs one (never None)."""
    return cast(tuple[float, float], _public_range(args, args.method, required=True))


def _one_column(values: np.ndarray, method: str) -> None:
    if values.ndim != 1:
        raise ValueError(f"--value-col: --method {method} takes exactly one value column "
                         f"(got {values.shape[1]})")


def shifted_release(rel: Any, c: float, lo: float, hi: float) -> Any:
    """A release of ``values - c`` reported on the original scale (a public shift), with
    the estimate and interval clamped into ``[lo, hi]`` again (the shift by ``c`` can
    round one ulp past the range)."""
    def back(v: float) -> float:
        return min(max(v + c, lo), hi)

    est = rel.estimate
    est = back(est) if isinstance(est, float) else tuple(back(v) for v in est)
    ci = None if rel.interval is None else (back(rel.interval[0]), back(rel.interval[1]))
    rel.privacy.public["center"] = c
    estimand = (rel.estimand or "") + (f" (computed on value - {c:g}, the centre of "
                                       "--lo/--hi, and shifted back)")
    return replace(rel, estimate=est, interval=ci, estimand=estimand)


@dataclass(frozen=True)
class CentralMethod:
    """One ``--method`` of ``uldp central mean`` / ``robust-mean``.

    ``release(args, users, values)`` checks the flags it needs (errors name them) and
    returns the release; ``commands`` are the subcommands that offer the method; ``help``
    is its entry in the ``--method`` help; ``statistic`` says that it releases
    ``--statistic`` of groups of users rather than the mean. A new method is one entry of
    :data:`METHODS`.
    """

    name: str
    release: Callable[[argparse.Namespace, np.ndarray, np.ndarray], Any]
    help: str
    commands: tuple[str, ...] = ("mean", "robust-mean")
    statistic: bool = False


# The estimators are imported when a method runs, so that ``uldp --help`` and the other
# ``uldp`` commands do not load them (HLM's smooth sensitivity needs scipy.stats).
def _user_mean(args: argparse.Namespace, users: np.ndarray, values: np.ndarray,
               adaptive: bool) -> Any:
    from uldp.collector.central.mean_of_means import adaptive_user_mean, user_mean

    lo, hi = _required_range(args)
    _one_column(values, args.method)
    fn = adaptive_user_mean if adaptive else user_mean
    return fn(users, values, epsilon=args.epsilon, lo=lo, hi=hi, alpha=args.alpha,
              rng=_rng(args))


def _release_adaptive(args: argparse.Namespace, users: np.ndarray, values: np.ndarray) -> Any:
    return _user_mean(args, users, values, adaptive=True)


def _release_simple(args: argparse.Namespace, users: np.ndarray, values: np.ndarray) -> Any:
    return _user_mean(args, users, values, adaptive=False)


def _release_pmwm(args: argparse.Namespace, users: np.ndarray, values: np.ndarray) -> Any:
    from uldp.collector.central.pmwm import PMWMParams, pmwm_mean

    rng = _public_range(args, args.method, required=False)
    params = None if rng is None else PMWMParams(lower=rng[0], upper=rng[1], hard_bounds=rng)
    return pmwm_mean(users, values, epsilon=args.epsilon, params=params, rng=_rng(args))


def _release_sa(args: argparse.Namespace, users: np.ndarray, values: np.ndarray) -> Any:
    """Subsample-and-aggregate; ``--lo/--hi`` are the PMWM aggregator's public range (its
    walk starts there and its quantiles are clamped into it), as for ``--method pmwm``."""
    from uldp.collector.central.pmwm import PMWMParams
    from uldp.collector.central.subsample_aggregate import SAParams, subsample_and_aggregate

    rng = _public_range(args, args.method, required=False)
    if rng is None:
        print("uldp: note: --method sa without --lo/--hi: the aggregator's walk starts from "
              "[-50, 50]; give the public range of a group's statistic", file=sys.stderr)
    params = None if rng is None else SAParams(
        pmwm=PMWMParams(lower=rng[0], upper=rng[1], hard_bounds=rng))
    return subsample_and_aggregate(users, values, args.statistic, epsilon=args.epsilon,
                                   params=params, rng=_rng(args))


def _release_wme(args: argparse.Namespace, users: np.ndarray, values: np.ndarray) -> Any:
    from uldp.collector.central.wme import WMEParams, wme_mean

    lo, hi = _required_range(args)
    c, B = (lo + hi) / 2, (hi - lo) / 2
    rel = wme_mean(users, values - c, epsilon=args.epsilon,
                   delta=args.delta if args.delta is not None else 1e-6,
                   params=WMEParams(bound=B), rng=_rng(args))
    return shifted_release(rel, c, lo, hi)


def _release_hlm(args: argparse.Namespace, users: np.ndarray, values: np.ndarray) -> Any:
    from uldp.collector.central.huber import HLMParams, hlm_mean

    lo, hi = _required_range(args)
    c, B = (lo + hi) / 2, (hi - lo) / 2
    if args.delta is None:
        raise ValueError("--delta is required for --method hlm ((epsilon, delta)-DP); the "
                         "other methods are pure epsilon-DP")
    params = HLMParams(radius=B, regime="warn" if args.allow_small_n else "refuse")
    try:
        rel = hlm_mean(users, values - c, epsilon=args.epsilon, delta=args.delta,
                       params=params, rng=_rng(args))
    except ValueError as exc:
        if "outside the regime" in str(exc):
            raise ValueError(f"{exc}. Use --method adaptive, or --allow-small-n to release "
                             "anyway") from None
        raise
    return shifted_release(rel, c, lo, hi)


#: every ``--method``, in the order of the help text; the first is the default
METHODS: dict[str, CentralMethod] = {m.name: m for m in (
    CentralMethod("adaptive", _release_adaptive,
                  "mean of user means, a small share of epsilon finds where the user means "
                  "lie and narrows the public range when that pays (pure DP; best measured "
                  "RMSE on real skewed data, docs/central.md)"),
    CentralMethod("simple", _release_simple,
                  "mean of user means clamped to --lo/--hi + discrete Laplace (pure DP)"),
    CentralMethod("pmwm", _release_pmwm,
                  "private modified winsorized mean of user means (pure DP)"),
    CentralMethod("wme", _release_wme,
                  "two-stage winsorized mean, user weighting (pure DP)", commands=("mean",)),
    CentralMethod("hlm", _release_hlm,
                  "Huber-loss mean ((epsilon, delta)-DP, needs --delta, refused below the "
                  "sample size of its theorem unless --allow-small-n)", commands=("mean",)),
    CentralMethod("sa", _release_sa,
                  "subsample-and-aggregate of --statistic over groups of users (PMWM "
                  "aggregation)", commands=("robust-mean",), statistic=True),
)}
DEFAULT_METHOD = next(iter(METHODS))


def methods_of(command: str) -> tuple[str, ...]:
    """The ``--method`` choices of one subcommand, in help order."""
    return tuple(name for name, m in METHODS.items() if command in m.commands)


def _methods_help(names: Iterable[str]) -> str:
    return "; ".join(f"{n} (default): {METHODS[n].help}" if n == DEFAULT_METHOD
                     else f"{n}: {METHODS[n].help}" for n in names)


def _release_mean(args: argparse.Namespace, users: np.ndarray, values: np.ndarray) -> Any:
    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise ValueError(f"--epsilon must be a finite positive number, got {args.epsilon:g}")
    if not 0 < getattr(args, "alpha", 0.05) < 1:
        raise ValueError(f"--alpha must be in (0, 1), got {args.alpha:g}")
    rng = _public_range(args, args.method, required=False)
    if rng is not None:
        values = _clamped(values, *rng, "--bound" if args.bound is not None else "--lo/--hi")
    return METHODS[args.method].release(args, users, values)


def _warehouse_mean(args: argparse.Namespace) -> Any:
    """``mean --method simple|adaptive`` over a Parquet table: the per-user means come
    from DuckDB (``uldp.collector.central.warehouse``), the rows never enter Python."""
    from uldp.collector.central.mean_of_means import (
        adaptive_user_mean_of_means,
        user_mean_of_means,
    )
    from uldp.collector.central.warehouse import UserTable, user_means

    if len(args.value_col) != 1:
        raise ValueError(f"--method {args.method} takes one --value-col")
    lo, hi = _required_range(args)
    got = user_means(UserTable(args.file, args.user_col, args.value_col[0]), lo=lo, hi=hi)
    if got.clamped:
        print(f"uldp: note: {got.clamped} of {got.records} values clamped into [{lo:g}, "
              f"{hi:g}]", file=sys.stderr)
    fn = {"adaptive": adaptive_user_mean_of_means, "simple": user_mean_of_means}[args.method]
    rel = fn(got.means, epsilon=args.epsilon, lo=lo, hi=hi, alpha=args.alpha, rng=_rng(args))
    rel.details["n_records"] = got.records
    return rel


def _cmd_mean(args: argparse.Namespace) -> int:
    if ".parquet" in args.file.lower() and args.method in ("simple", "adaptive"):
        rel = _warehouse_mean(args)
    else:
        users, values, _ = read_columns(args.file, args.user_col, args.value_col)
        rel = _release_mean(args, users, values)
    _print_release(rel, args.json, f"user-level mean of {', '.join(args.value_col)} "
                                   f"(--method {args.method})")
    return 0


def _cmd_robust(args: argparse.Namespace) -> int:
    users, values, _ = read_columns(args.file, args.user_col, args.value_col)
    rel = _release_mean(args, users, values)
    what = args.statistic if METHODS[args.method].statistic else "mean"
    _print_release(rel, args.json, f"user-level robust {what} of {', '.join(args.value_col)} "
                                   f"(--method {args.method})")
    return 0


def _per_subset_epsilon(total: float, users: np.ndarray, subsets: np.ndarray
                        ) -> tuple[float, int]:
    """``--epsilon`` (the total) split over the subsets one user touches: ``(ε per subset,
    K)``, ``K`` the largest number of subsets a user has records in (from the occupancy,
    declared public), ``K · ε per subset <= total`` exactly on the 2^-24 grid."""
    from uldp.client.budget import EpsilonError, split_epsilon
    from uldp.collector.central.occupancy import index_rows

    if not (math.isfinite(total) and total > 0):
        raise ValueError(f"--epsilon must be a finite positive number, got {total:g}")
    K = int(index_rows(users, subsets).occupancy.subsets_per_user().max())
    try:
        return split_epsilon(total, K), K
    except EpsilonError:
        raise ValueError(f"--epsilon {total:g} is too small to split over the {K} subsets "
                         "one user has records in (below 2^-24 each)") from None


def _loss_histogram(losses: np.ndarray) -> dict[str, int]:
    """How many users lose how much ε (no user id: the output never names a user)."""
    vals, counts = np.unique(np.round(np.asarray(losses, np.float64), 12), return_counts=True)
    return {f"{v:g}": int(c) for v, c in zip(vals, counts, strict=True)}


def _cmd_subset(args: argparse.Namespace) -> int:
    from uldp.collector.central.clip_user import plan_clip_user
    from uldp.collector.central.subset_release import subset_stats

    users, values, subsets = read_columns(args.file, args.user_col, args.value_col,
                                          args.subset_col)
    if values.ndim != 1:
        raise ValueError("subset-stats takes exactly one --value-col")
    assert subsets is not None
    eps, K = _per_subset_epsilon(args.epsilon, users, subsets)
    if args.lower < args.upper:  # else the release names the mistake
        values = _clamped(values, args.lower, args.upper, "--lower/--upper")
    plan = None
    if args.clip_user:
        plan = plan_clip_user(users, subsets, epsilon=eps, upper=args.upper,
                              lower=args.lower, statistic=args.statistic,
                              public_occupancy=True)
        if not args.json:
            print("Clip-User plan (from public occupancy counts only, before any release):")
            print(plan.describe())
            print()
    rel = subset_stats(users, values, subsets, epsilon=eps, upper=args.upper,
                       lower=args.lower, statistic=args.statistic, plan=plan,
                       public_occupancy=True, rng=_rng(args))
    details = rel.details
    details["users_by_loss"] = _loss_histogram(details.pop("user_loss"))
    details.pop("users")
    _print_release(rel, args.json, f"per-{args.subset_col} {args.statistic} of "
                                   f"{args.value_col[0]}")
    if not args.json:
        spent = rel.privacy.epsilon
        print(f"total: user-level epsilon {spent:g} for the whole release (--epsilon "
              f"{args.epsilon:g}): {eps:g} per subset, a user has records in at most "
              f"{rel.details['K']} subset(s)" + (f" ({K} before Clip-User)"
                                                  if rel.details["K"] != K else ""))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="CSV file with a header row; for mean --method simple or "
                                "adaptive also a Parquet file or glob (*.parquet), grouped "
                                "and clamped by DuckDB (uldp[scale])")
    p.add_argument("--user-col", required=True, help="column holding the user id")
    p.add_argument("--value-col", required=True, action="extend", type=_column_list,
                   help="value column; repeat it or give a comma-separated list for a "
                        "vector per row (--value-col x --value-col y, or --value-col x,y)")
    p.add_argument("--epsilon", type=float, required=True,
                   help="total user-level privacy budget of the release")
    p.add_argument("--seed", type=int, default=None,
                   help="seeded noise for tests/simulations only (never for a real release)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _column_list(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",")]
    if not all(cols):
        raise argparse.ArgumentTypeError(f"expected column name(s), got {text!r}")
    return cols


def _range_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lo", type=float, default=None,
                   help="public lower bound of one value (e.g. the bottom of a rating scale; "
                        "never computed from the data; sa: of a group's statistic)")
    p.add_argument("--hi", type=float, default=None, help="public upper bound of one value")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="the interval has coverage 1 - alpha (adaptive, simple)")


METHODS_HELP = _methods_help(methods_of("mean"))


def register(subparsers: Any) -> None:
    """Add ``uldp central ...`` to the main parser."""
    pc = subparsers.add_parser("central", help="central user-level DP releases from a CSV",
                               description=__doc__.split("\n\n")[0])
    sc = pc.add_subparsers(dest="central_command", required=True)
    m = sc.add_parser("mean", help="user-level mean of user means (default: adaptive)",
                      description=METHODS_HELP)
    _common(m)
    _range_flags(m)
    m.add_argument("--bound", type=float, default=None,
                   help="shorthand for --lo -BOUND --hi BOUND")
    m.add_argument("--delta", type=float, default=None,
                   help="required for --method hlm ((epsilon, delta)-DP); unused by the "
                        "pure-DP methods")
    m.add_argument("--method", choices=methods_of("mean"), default=DEFAULT_METHOD,
                   help=METHODS_HELP)
    m.add_argument("--allow-small-n", action="store_true",
                   help="hlm: release even below the sample size its accuracy theorem needs "
                        "(a warning instead of an error)")
    m.set_defaults(func=_cmd_mean, statistic="mean")
    r = sc.add_parser("robust-mean", help="robust user-level mean (default: adaptive), "
                                          "pmwm, or subsample-and-aggregate (sa)",
                      description=METHODS_HELP)
    _common(r)
    _range_flags(r)
    r.add_argument("--method", choices=methods_of("robust-mean"), default=DEFAULT_METHOD,
                   help=_methods_help(METHODS))
    r.add_argument("--statistic", default="mean",
                   help="sa: built-in statistic name ('mean' = mean of user means)")
    r.set_defaults(func=_cmd_robust, bound=None, delta=None, allow_small_n=False)
    s = sc.add_parser("subset-stats", help="per-subset means/variances (Clip-User optional)",
                      description="Per-subset mean and/or variance. --epsilon is the total "
                      "user-level budget: each subset's release gets --epsilon / K, K the "
                      "largest number of subsets one user has records in (the occupancy is "
                      "declared public), so no user loses more than --epsilon; the output "
                      "states the total spent.")
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
