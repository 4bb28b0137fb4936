"""The ``uldp`` command line.

* ``uldp simulate KIND``: a whole query in-process over a simulated fleet
  (``commands/simulate``).
* ``uldp collector|query|fleet|demo``: the gRPC service (``service_cli``, which registers
  ``commands/collector``, ``query``, ``fleet`` and ``demo``).
* ``uldp central``: central user-level DP releases from a CSV file (``central/cli``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from uldp.collector.cliutil import Parser, add_debug_flag, quiet_grpc_logs, run_cli
from uldp.collector.commands import simulate

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="uldp", description="User-level local differential privacy: simulate, serve, "
                                 "collect and release.",
        epilog="exit codes: 0 done; 1 ran, but the outcome is not a success (e.g. a fleet "
               "with unfinished devices); 2 an operator mistake or unusable environment, "
               "shown as one line (--debug adds the traceback); 130 interrupted")
    sub = parser.add_subparsers(dest="command", required=True)
    simulate.register(sub)
    for module in ("uldp.collector.service_cli", "uldp.collector.central.cli"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``uldp``: exit codes and error lines as in ``uldp.collector.cliutil``."""
    quiet_grpc_logs()
    parser = build_parser()
    add_debug_flag(parser)
    return run_cli(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
