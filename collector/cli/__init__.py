"""The ``uldp`` command line, one module per command group.

* ``app`` — the entry point: the root parser and ``uldp simulate KIND`` (a whole query
  in-process over a simulated fleet);
* ``service`` — registers the service command groups below (also runs on its own:
  ``python -m uldp.collector.cli.service collector serve ...``);
* ``collector`` — ``uldp collector serve|certs|health|wait`` (``serve``: the server's
  flags, checks and run loop; ``serve`` module);
* ``query`` — ``uldp query create|list|status|result|cancel`` (analyst, on
  :class:`uldp.collector.analyst.Analyst`);
* ``fleet`` — ``uldp fleet run`` (simulated devices over gRPC);
* ``demo`` — ``uldp demo``;
* ``shuffler`` — ``uldp shuffler serve|certs``;
* ``common`` — what the service commands share (connection flags, output helpers);
* ``util`` — the parser, flag types and :class:`~uldp.collector.cli.util.OperatorError`
  (one line, exit code 2).

``uldp central`` and ``uldp learn`` live with their algorithms
(``uldp.collector.central.cli``, ``uldp.collector.learning.cli``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``uldp`` (the console script's entry point)."""
    from uldp.collector.cli.app import main as run

    return run(argv)
