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
    add_method_flag,
    nonneg_float,
    positive_float,
    positive_int,
)

__all__ = ["register"]


def _shape_flags(a: argparse.Namespace) -> tuple[float, int]:
    """``(bound, dim)`` of ``query create`` from ``--bound``/``--moment-p/-m`` and ``--dim``:
    a heavy-tailed query has no support bound (``--bound`` defaults to 1 only without
    ``--moment-p``); a distribution names its alphabet size."""
    heavy = a.moment_p is not None or a.moment_m is not None
    if heavy and (a.moment_p is None or a.moment_m is None):
        raise OperatorError("--moment-p and --moment-m go together (E|X|^p <= M)")
    if heavy and a.bound is not None:
        raise OperatorError("--bound and --moment-p/--moment-m are alternatives: a support "
                            "bound D, or a moment bound for heavy tails; give one")
    if a.kind == "distribution" and a.dim is None:
        raise OperatorError("--dim: a distribution query needs the alphabet size (the "
                            "number of categories)")
    bound = 0.0 if heavy else (1.0 if a.bound is None else a.bound)
    return bound, 1 if a.dim is None else a.dim


def _create_kwargs(a: argparse.Namespace) -> dict[str, Any]:
    bound, dim = _shape_flags(a)
    kw: dict[str, Any] = {k: getattr(a, k) for k in ("moment_p", "moment_m", "frame_kind",
                                                      "mode", "confidence")
                          if getattr(a, k) is not None}
    if a.shuffle_min_batch is not None or a.shuffle_delta is not None:
        kw["shuffle"] = {k: v for k, v in (("min_batch", a.shuffle_min_batch),
                                           ("delta", a.shuffle_delta)) if v is not None}
    if a.extra is not None:
        try:
            kw["extra"] = json.loads(a.extra)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--extra is not JSON: {exc}") from None
    return dict(kw, dim=dim, bound=bound, method=a.method,
                phase_timeout_s=a.phase_timeout, query_id=a.id or "",
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
    rows = [[str(i), f"{v:+.5f}", f"[{lo:+.5f}, {hi:+.5f}]"]
            for i, (v, lo, hi) in enumerate(zip(r.values, r.ci_low, r.ci_high, strict=True))]
    print(table(rows, ["#", "ESTIMATE", "INTERVAL"]))
    return 0


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


def _add_create(sq: Any) -> None:
    s = sq.add_parser("create", help="create a query")
    s.add_argument("--kind", required=True,
                   choices=("mean", "mean-linf", "mean-l2", "mean-l1", "distribution",
                            "classify", "regress", "sgd"),
                   help="what to estimate (as in `uldp simulate`)")
    s.add_argument("--epsilon", type=positive_float, required=True,
                   help="user-level privacy budget each device spends on this query")
    s.add_argument("--dataset", required=True, help="name of the devices' local dataset")
    s.add_argument("--users", type=positive_int, required=True,
                   help="target number of devices")
    s.add_argument("--samples", type=positive_int, required=True,
                   help="reference samples per user m")
    s.add_argument("--dim", type=positive_int, default=None,
                   help="dimension d (default 1); for distribution the alphabet size, "
                        "required")
    s.add_argument("--bound", type=positive_float, default=None,
                   help="public support bound D of the data (default 1; not with "
                        "--moment-p/--moment-m)")
    add_method_flag(s, "")
    s.add_argument("--moment-p", dest="moment_p", type=positive_float,
                   help="heavy tails: the moment order p of E|X|^p <= M (instead of --bound)")
    s.add_argument("--moment-m", dest="moment_m", type=positive_float,
                   help="heavy tails: the moment bound M of E|X|^p <= M")
    s.add_argument("--frame-kind", dest="frame_kind", choices=("gaussian", "hadamard"),
                   help="Kashin frame of mean-l2 (default gaussian)")
    s.add_argument("--mode", choices=("default", "paper", "tuned"),
                   help="grouping: spec [D7] default, paper (eps_c = 1), or tuned "
                        "(minimizes the explicit error bound; as in `uldp simulate`)")
    s.add_argument("--confidence", type=positive_float,
                   help="confidence level of the intervals, e.g. 0.95 (the default)")
    s.add_argument("--extra", help="JSON object of public values of the learning kinds: "
                   "grid, lo, hi, label_bound (classify/regress); for sgd "
                   '\'{"model": "logistic", "sgd": {"t0": 5, ...}}\' (SGDConfig fields)')
    s.add_argument("--phase-timeout", type=nonneg_float, default=0.0,
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
