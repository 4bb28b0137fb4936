"""Service commands of the ``uldp`` CLI: ``collector``, ``query``, ``fleet``, ``demo``,
``shuffler``.

``register(subparsers)`` adds them to the main ``uldp`` parser; this module also runs on
its own: ``python -m uldp.collector.cli.service collector serve ...``. The commands live
in :mod:`uldp.collector.cli`, one module per command group.

Connection flags of the client commands fall back to environment variables:
``ULDP_TARGET`` (host:port), ``ULDP_CA`` (CA certificate), ``ULDP_ADMIN_TOKEN_FILE``,
``ULDP_CLIENT_CERT`` / ``ULDP_CLIENT_KEY`` (mutual TLS).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from uldp.collector.cli.util import Parser, add_debug_flag, quiet_grpc_logs, run_cli

quiet_grpc_logs()  # before gRPC's C core starts: no C-core log lines on the terminal

from uldp.collector.cli import collector, demo, fleet, query, shuffler  # noqa: E402

__all__ = ["main", "register"]


def register(subparsers: Any) -> None:
    """Add ``collector``, ``query``, ``fleet`` and ``demo`` to the ``uldp`` parser."""
    for group in (collector, query, fleet, demo, shuffler):
        group.register(subparsers)


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="uldp", description="uldp service commands")
    register(p.add_subparsers(dest="cmd", required=True))
    add_debug_flag(p)
    t0 = time.perf_counter()
    rc = run_cli(p, argv)
    logging.getLogger("uldp").debug("done in %.2fs", time.perf_counter() - t0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
