"""``uldp privacy shuffle``: the central ε that shuffling buys, before any query runs.

See ``docs/privacy.md`` §7.1 and §7.2. Given the number of users whose reports are
shuffled together, the local ε0, the report mechanism (``--k`` categories for GRR, OUE,
subset selection; discrete Laplace bins with ``--k``, a value without) and δ, it prints
the variation-ratio bound of ``uldp.collector.accounting`` — the number a shuffled
query's result states — and, with ``--queries T``, T such queries composed with the PLD
accountant of the collector's privacy odometer, next to their plain sum.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from uldp.collector.cli.util import OperatorError, open_unit_float, positive_float, positive_int

__all__ = ["MAX_K", "MAX_QUERIES", "MAX_USERS", "register"]

#: the largest inputs accepted (the computation grows with √users; checked before it runs)
MAX_USERS = 100_000_000
MAX_K = 1 << 16
MAX_QUERIES = 100_000
MAX_EPSILON0 = 20.0


def register(subparsers: Any) -> None:
    """Add ``uldp privacy shuffle``."""
    from uldp.collector.accounting.parameters import MECHANISMS

    g = subparsers.add_parser("privacy", help="privacy accounting: the central ε of shuffle "
                              "mode", description=__doc__.split("\n\n")[0])
    sub = g.add_subparsers(dest="privacy_command", required=True)
    s = sub.add_parser("shuffle", help="the central ε of n shuffled ε0-LDP reports",
                       description="The central (ε, δ) of shuffling one report per user "
                                   "(the variation-ratio bound of the report's mechanism; "
                                   "docs/privacy.md §7.1), composed over --queries with a "
                                   "PLD accountant (§7.2).")
    s.add_argument("--users", type=positive_int, required=True,
                   help=f"reports shuffled together (1..{MAX_USERS:.0e})")
    s.add_argument("--epsilon0", type=positive_float, required=True,
                   help=f"the local ε of each report (at most {MAX_EPSILON0:g})")
    s.add_argument("--mechanism", choices=MECHANISMS, default="any",
                   help="the report mechanism (default any: every ε0-LDP randomizer)")
    s.add_argument("--k", type=positive_int, default=None,
                   help="categories of grr, oue, ss (required there), or the bins of a "
                        "laplace bin report (without it: a laplace value report)")
    s.add_argument("--delta", type=open_unit_float, required=True, help="the central δ")
    s.add_argument("--queries", type=positive_int, default=None,
                   help=f"compose T such queries (1..{MAX_QUERIES})")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=_cmd_shuffle)


def _check(a: argparse.Namespace) -> None:
    """Every limit, before any work (one line naming the flag)."""
    from uldp.collector.accounting.parameters import NEEDS_K

    if a.users > MAX_USERS:
        raise OperatorError(f"--users {a.users}: at most {MAX_USERS} (the bound only "
                            "shrinks with more users: state it for this many)")
    if a.epsilon0 > MAX_EPSILON0 or a.epsilon0 < 2.0**-24:
        raise OperatorError(f"--epsilon0 {a.epsilon0:g}: expected a value in [2^-24, "
                            f"{MAX_EPSILON0:g}]")
    if a.mechanism in NEEDS_K and a.k is None:
        raise OperatorError(f"--k is required with --mechanism {a.mechanism} (the number "
                            "of categories)")
    if a.k is not None and a.mechanism not in (*NEEDS_K, "laplace"):
        raise OperatorError(f"--k applies to --mechanism grr, oue, ss or laplace, not "
                            f"{a.mechanism}")
    if a.k is not None and not 2 <= a.k <= MAX_K:
        raise OperatorError(f"--k {a.k}: expected 2..{MAX_K} categories")
    if a.queries is not None and a.queries > MAX_QUERIES:
        raise OperatorError(f"--queries {a.queries}: at most {MAX_QUERIES}")


def _cmd_shuffle(a: argparse.Namespace) -> int:
    _check(a)
    from uldp.collector.accounting.guarantee import shuffle_guarantee
    from uldp.collector.accounting.odometer import Cell, self_composed
    from uldp.collector.accounting.parameters import mechanism_parameters

    vr = mechanism_parameters(a.mechanism, a.epsilon0, a.k)
    g = shuffle_guarantee(a.users, vr, a.delta)
    out: dict[str, Any] = g.to_json()
    if a.queries is not None:
        composed = self_composed((Cell(a.users, vr),), a.queries, a.delta)
        out.update({"queries": a.queries, "composed_epsilon": min(composed, a.queries * g.epsilon0),
                    "sum_epsilon": a.queries * g.epsilon,
                    "accountant": "PLD (dp-accounting), docs/privacy.md §7.2"})
    if a.json:
        print(json.dumps(out))
        return 0
    what = f"{a.mechanism}" + (f" (k = {a.k})" if a.k is not None else "")
    print(f"{a.users} shuffled reports, {what}, local ε0 = {g.epsilon0:g}: central ε = "
          f"{g.epsilon:.5g} at δ = {a.delta:g}" + ("" if g.amplified else
                                                   " (shuffling gains nothing here: δ = 0)"))
    print(f"  variation-ratio parameters p = {vr.p:.6g}, β = {vr.beta:.6g}, q = {vr.q:.6g}")
    if a.queries is not None:
        print(f"{a.queries} such queries composed (PLD accountant): central ε = "
              f"{out['composed_epsilon']:.5g} at δ = {a.delta:g} (summed: "
              f"{out['sum_epsilon']:.4g})")
    return 0
