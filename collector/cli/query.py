"""``uldp query create|list|status|result|cancel``: the analyst's commands.

Built on :class:`uldp.collector.analyst.Analyst` (one client for Python and the shell);
``--json`` prints the same records the Python API returns (``Query.to_dict``,
``Result.to_dict``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from uldp.collector.analyst import AnalystError
from uldp.collector.cli.common import analyst, conn_flags, fail, progress_line, table
from uldp.collector.cli.util import (
    OperatorError,
    add_mechanism_flags,
    add_method_flag,
    mechanism_options,
    nonneg_int,
    positive_float,
    positive_int,
)

__all__ = ["register"]


def _create_kwargs(a: argparse.Namespace) -> dict[str, Any]:
    """The keywords of ``Analyst.create`` from the flags, as given: a flag left out is
    "not given" on the wire, and the collector's one set of rules
    (``uldp.collector.service.requests.check_shape``) decides, with the message the
    Python API and the console get too."""
    kw: dict[str, Any] = {k: getattr(a, k) for k in ("moment_p", "moment_m", "frame_kind",
                                                      "mode", "confidence", "lo", "hi",
                                                      "dim", "bound")
                          if getattr(a, k) is not None}
    kw.update(mechanism_options(a))
    if a.shuffle_min_batch is not None or a.shuffle_delta is not None:
        kw["shuffle"] = {k: v for k, v in (("min_batch", a.shuffle_min_batch),
                                           ("delta", a.shuffle_delta)) if v is not None}
    if a.extra is not None:
        try:
            kw["extra"] = json.loads(a.extra)
        except json.JSONDecodeError as exc:
            raise OperatorError(f"--extra is not JSON: {exc}") from None
    if a.by is not None:
        kw["by"] = a.by
    if a.groups is not None:
        kw["groups"] = tuple(g.strip() for g in a.groups.split(","))
    return dict(kw, method=a.method, phase_timeout_s=a.phase_timeout, query_id=a.id or "",
                allow_simulated=a.allow_simulated)


def _cmd_query_create(a: argparse.Namespace) -> int:
    kw = _create_kwargs(a)
    with analyst(a) as c:
        try:
            q = c.create(a.kind, epsilon=a.epsilon, dataset=a.dataset, users=a.users,
                         samples=a.samples, **kw)
        except AnalystError as exc:
            return fail(exc)
    if a.json:
        print(json.dumps(q.to_dict(), indent=2))
    else:
        print(f"created query {q.query_id} ({q.kind}, eps={q.epsilon:g}, "
              f"{q.target_users} users, {len(q.phases)} phase(s))")
    return 0


def _cmd_query_list(a: argparse.Namespace) -> int:
    with analyst(a) as c:
        try:
            qs = c.list(a.state)
        except AnalystError as exc:
            return fail(exc)
    if a.json:
        print(json.dumps([q.to_dict() for q in qs], indent=2))
        return 0
    rows = [[q.query_id, q.kind, q.dataset, f"{q.epsilon:g}", q.state,
             str(q.current_phase or "-"), f"{q.assigned}/{q.target_users}",
             " ".join(f"{p.received}/{p.quota}" for p in q.phases)] for q in qs]
    print(table(rows, ["QUERY", "KIND", "DATASET", "EPS", "STATE", "PHASE", "ASSIGNED",
                        "REPORTS/QUOTA"]))
    return 0


def _cmd_query_status(a: argparse.Namespace) -> int:
    with analyst(a) as c:
        try:
            if not a.watch:
                q = c.get(a.query_id)
                print(json.dumps(q.to_dict(), indent=2) if a.json else progress_line(q))
                return 0
            tty = sys.stdout.isatty()
            last = None
            for q in c.watch(a.query_id):
                last = q
                if a.json:
                    print(json.dumps(q.to_dict()), flush=True)
                else:
                    end = "" if tty and q.state == "running" else "\n"
                    print(("\r" if tty else "") + progress_line(q), end=end, flush=True)
        except AnalystError as exc:
            return fail(exc)
    if last is not None and last.state != "done":
        why = f": {last.error}" if last.error else ""
        print(f"uldp: query {last.query_id} ended {last.state}{why}", file=sys.stderr)
        return 1
    return 0


def _not_done(c: Any, query_id: str) -> int:
    """The one line of ``query result`` for a query that has no result (yet)."""
    q = c.get(query_id)
    if q.state in ("cancelled", "failed"):
        why = f" ({q.error})" if q.error else ""
        print(f"uldp: error: query {q.query_id} was {q.state}{why}: it has no result "
              "(FAILED_PRECONDITION)", file=sys.stderr)
    else:
        print(f"uldp: error: query {q.query_id} is still {q.state} ({progress_line(q)}); "
              f"`uldp query status {q.query_id} --watch` follows it until it is done "
              "(FAILED_PRECONDITION)", file=sys.stderr)
    return 2


def _cmd_query_result(a: argparse.Namespace) -> int:
    with analyst(a) as c:
        try:
            try:
                r = c.result(a.query_id)
            except AnalystError as exc:
                if exc.code != "FAILED_PRECONDITION":
                    return fail(exc)
                return _not_done(c, a.query_id)
        except AnalystError as exc:
            return fail(exc)
    if a.json:
        print(json.dumps(r.to_dict(), indent=2))
        return 0
    print(f"query {r.query_id} ({r.kind}, {r.method}, eps={r.epsilon:g}): "
          f"{int(r.confidence * 100)}% confidence intervals, reports per phase "
          f"{list(r.reports_per_phase)}")
    print(f"estimand: {r.estimand}")
    if r.central is not None:
        print(f"central guarantee (shuffled): epsilon={r.central.epsilon:.4g}, "
              f"delta={r.central.delta:g}")
    if r.kind == "mean-by":
        _print_groups(r)
        return 0
    rows = [[str(i), f"{v:+.5f}", f"[{lo:+.5f}, {hi:+.5f}]"]
            for i, (v, lo, hi) in enumerate(zip(r.values, r.ci_low, r.ci_high, strict=True))]
    edges = r.edge_share
    if edges is not None and any(e is not None for e in edges):
        for row, e in zip(rows, edges, strict=True):
            row.append("-" if e is None else f"{100 * e[0]:.0f}% / {100 * e[1]:.0f}%")
        print(table(rows, ["#", "ESTIMATE", "INTERVAL", "AT LO / HI (stage I)"]))
    else:
        print(table(rows, ["#", "ESTIMATE", "INTERVAL"]))
    for note in r.advisories:
        print(f"note: {note}")
    return 0


def _print_groups(r: Any) -> None:
    """A grouped mean: one row per group, its mean and its number of users with their
    intervals (``Result.groups()``)."""
    rows = [[g["group"], f"{g['mean']:+.5f}", f"[{g['mean_low']:+.5f}, {g['mean_high']:+.5f}]",
             f"{g['users']:.0f}", f"[{g['users_low']:.0f}, {g['users_high']:.0f}]"]
            for g in r.groups()]
    print(table(rows, ["GROUP", "MEAN", "INTERVAL", "USERS", "INTERVAL"]))
    for note in r.advisories:
        print(f"note: {note}")


def _cmd_query_cancel(a: argparse.Namespace) -> int:
    with analyst(a) as c:
        try:
            q = c.cancel(a.query_id)
        except AnalystError as exc:
            return fail(exc)
    print(json.dumps(q.to_dict(), indent=2) if a.json else
          f"query {q.query_id} is {q.state}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``query`` to the ``uldp`` parser."""
    pq = subparsers.add_parser("query", help="create and inspect queries (analyst)")
    sq = pq.add_subparsers(dest="query_cmd", required=True)
    _add_create(sq)
    s = sq.add_parser("list", help="list queries")
    s.add_argument("--state", choices=("running", "done", "cancelled", "failed"),
                   help="only queries in this state")
    s.set_defaults(func=_cmd_query_list)
    s = sq.add_parser("status", help="progress of a query")
    s.add_argument("query_id", help="the query's id")
    s.add_argument("--watch", action="store_true",
                   help="follow until it ends; exit 1 if it ends cancelled or failed")
    s.set_defaults(func=_cmd_query_status)
    s = sq.add_parser("result", help="estimate with confidence intervals")
    s.add_argument("query_id", help="the query's id")
    s.set_defaults(func=_cmd_query_result)
    s = sq.add_parser("cancel", help="cancel a running query")
    s.add_argument("query_id", help="the query's id")
    s.set_defaults(func=_cmd_query_cancel)
    for sub in sq.choices.values():
        conn_flags(sub)
        sub.add_argument("--json", action="store_true", help="machine-readable output")


def _number(text: str) -> float:
    """A number as written (its bounds are the collector's rules, the same message for
    every surface); only text that is not a number is an argument error here."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _add_create(sq: Any) -> None:
    s = sq.add_parser("create", help="create a query")
    s.add_argument("--kind", required=True,
                   help="what to estimate: mean, mean-linf, mean-l2, mean-l1, distribution, "
                        "classify, regress or sgd (as in `uldp simulate`)")
    s.add_argument("--epsilon", type=_number, required=True,
                   help="user-level privacy budget each device spends on this query")
    s.add_argument("--dataset", required=True, help="name of the devices' local dataset")
    s.add_argument("--users", type=nonneg_int, required=True,
                   help="target number of devices")
    s.add_argument("--samples", type=nonneg_int, required=True,
                   help="reference samples per user m")
    s.add_argument("--dim", type=nonneg_int, default=None,
                   help="dimension d (default 1); for distribution the number of "
                        "categories, required")
    s.add_argument("--lo", type=_number, default=None,
                   help="public lower end of a value's range [lo, hi] (mean, mean-linf): "
                        "devices clamp their values into it")
    s.add_argument("--hi", type=_number, default=None,
                   help="public upper end of a value's range (with --lo)")
    s.add_argument("--bound", type=_number, default=None,
                   help="public support bound D: shorthand for --lo -D --hi D (default 1; "
                        "mean-l2/mean-l1: the norm ball's radius; sgd: the gradient clip; "
                        "not with --lo/--hi or --moment-p/--moment-m)")
    s.add_argument("--by", default=None,
                   help="group-by: a categorical dataset of the same devices (codes 0 .. "
                        "G-1, e.g. country); a mean per group, each device's group never "
                        "sent in the clear (docs/analyst.md, \"Group-by\")")
    s.add_argument("--groups", default=None,
                   help="with --by: the groups' public names in code order, comma-separated "
                        "(e.g. de,fr,it)")
    add_method_flag(s, "")
    add_mechanism_flags(s)
    s.add_argument("--moment-p", dest="moment_p", type=_number,
                   help="heavy tails: the moment order p of E|X|^p <= M (instead of --bound)")
    s.add_argument("--moment-m", dest="moment_m", type=_number,
                   help="heavy tails: the moment bound M of E|X|^p <= M")
    s.add_argument("--frame-kind", dest="frame_kind",
                   help="Kashin frame of mean-l2: gaussian (default) or hadamard")
    s.add_argument("--mode",
                   help="grouping: default (spec [D7]), paper (eps_c = 1), or tuned "
                        "(minimizes the explicit error bound; as in `uldp simulate`)")
    s.add_argument("--confidence", type=_number,
                   help="confidence level of the intervals, e.g. 0.95 (the default)")
    s.add_argument("--extra", help="JSON object of public values of the learning kinds: "
                   "grid, lo, hi, label_bound (classify/regress); for sgd "
                   '\'{"model": "logistic", "sgd": {"t0": 5, ...}}\' (SGDConfig fields)')
    s.add_argument("--phase-timeout", type=_number, default=0.0,
                   help="seconds each phase stays open at most (0 = collector default)")
    s.add_argument("--id", help="query id (idempotent create; default: generated)")
    s.add_argument("--shuffle-min-batch", type=positive_int, default=None,
                   help="shuffle mode (docs/privacy.md §7): devices seal their reports and "
                        "send them through a shuffler, which forwards batches of at least "
                        "this many; the result states the central (eps, delta)")
    s.add_argument("--shuffle-delta", type=positive_float, default=None,
                   help="shuffle mode: the delta of the central guarantee (default 1e-8)")
    s.add_argument("--allow-simulated", action="store_true",
                   help="this query accepts reports marked simulated (seeded noise, e.g. "
                        "`uldp fleet run`)")
    s.set_defaults(func=_cmd_query_create)
