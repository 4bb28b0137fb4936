"""The operator-facing error of every ``uldp`` entry point.

An :class:`OperatorError` is an operator mistake or an unusable environment (a bad flag
value, a missing file, a port in use): ``uldp.collector.cli.util.run_cli`` prints it as one
line naming what is wrong and exits with its ``exit_code`` (``docs/architecture.md``,
invariant 5). It lives here, below every layer, so that the modules a command runs (the
demo in ``uldp.collector.simulation``, the CLI itself) can raise it without importing the
CLI.
"""

from __future__ import annotations

__all__ = ["OperatorError"]


class OperatorError(Exception):
    """An operator mistake or unusable environment: printed as one line, exit code 2."""

    exit_code = 2
