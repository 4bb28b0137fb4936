"""Shared plumbing of the ``uldp`` command line: argument types, operator errors and the
one place that turns any failure into one clear line and an exit code.

Exit codes of every ``uldp`` command:

* ``0`` — done;
* ``1`` — the command ran but its outcome is not a success (a fleet with unfinished or
  rejected devices, a query that was cancelled or failed, an unhealthy collector);
* ``2`` — an operator mistake or an unusable environment (bad flag value, missing file,
  port in use, unreachable collector or database, wrong CA, wrong credential): one line
  naming what is wrong and how to fix it, nothing written;
* ``130`` — interrupted (Ctrl-C).

``--debug`` (or ``ULDP_DEBUG=1``) prints the traceback as well.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from uldp.collector.errors import OperatorError

__all__ = [
    "OperatorError",
    "Parser",
    "add_debug_flag",
    "add_mechanism_flags",
    "describe_error",
    "finite_float",
    "nonneg_float",
    "nonneg_int",
    "open_unit_float",
    "port_number",
    "positive_float",
    "positive_int",
    "quiet_grpc_logs",
    "redact_url",
    "run_cli",
]


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage dump) naming the flag and
    pointing at ``--help``; sub-command parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


# ---- argument types (argparse prefixes their message with the flag's name) --------------
def _int_in(text: str, lo: int, hi: int | None, expected: str) -> int:
    """``text`` as an int in ``[lo, hi]``, else an ArgumentTypeError naming what was
    ``expected``."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if v < lo or (hi is not None and v > hi):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return v


#: the methods a query may name (``uldp.collector.planner``: its RESOLVERS and METHOD_PLANS;
#: tests/test_cli_simulate.py checks the two agree); kept here so that building the parser
#: does not import the planner
METHODS = ("auto", "two-stage", "two-stage-paper", "two-stage-sized", "two-stage-adaptive",
           "ssl", "baseline-a", "baseline-b", "oracle", "oracle-probe", "hadamard",
           "grouped-ssl")


def add_method_flag(p: argparse.ArgumentParser | Any, default: str) -> None:
    """``--method`` with the same choices and help wherever a query is compiled."""
    p.add_argument("--method", default=default, choices=METHODS,
                   help="auto (default: chosen from the public parameters by the explicit "
                        "error bound), two-stage (Algorithm 1, adaptive stage-II interval), "
                        "two-stage-paper (the paper's interval), two-stage-sized (interval and "
                        "randomizer sized from stage I), two-stage-adaptive (the randomizer "
                        "chosen from stage I, stage II on the whole range), ssl (user mean, "
                        "single stage), "
                        "baseline-a / baseline-b (docs/algorithms.md §12), oracle (sampled "
                        "records through a frequency oracle, distribution), hadamard (one "
                        "Hadamard coefficient per user in a window sized from the users' "
                        "spread, or the oracle where users differ; distribution, mean-l1); "
                        "see the README's method guide")


def add_mechanism_flags(p: argparse.ArgumentParser | Any) -> None:
    """``--objective``, ``--assume``, ``--oracle``, ``--randomizer``, ``--stage1-share``: what
    ``auto`` and a sized stage II minimize, and the report mechanisms of a named method (default:
    the best ones for the public parameters, docs/mechanisms.md)."""
    from uldp.client.mechanisms import ORACLES, SCALARS

    p.add_argument("--objective", choices=("width", "mse"), default=None,
                   help="what auto (and two-stage-sized's stage II) minimize: width, the "
                        "expected width of the interval (default), or mse")
    p.add_argument("--assume", choices=("none", "users-alike"), default=None,
                   help="what you assume about the users, stated publicly like the range: "
                        "users-alike (every user's records i.i.d. from one distribution; "
                        "auto may then narrow a two-stage window and its interval is valid "
                        "if users are alike) or none (default: intervals valid for every "
                        "population; docs/mechanisms.md)")
    p.add_argument("--oracle", choices=(*sorted(ORACLES), "best"), default=None,
                   help="frequency oracle of categorical reports (stage-I bins, sampled "
                        "records); default: the best for the public parameters")
    p.add_argument("--randomizer", choices=(*sorted(SCALARS), "best", "adaptive"),
                   default=None,
                   help="scalar randomizer of value reports; default: the worst-case best "
                        "(two-stage-sized: adaptive, chosen from stage I)")
    p.add_argument("--stage1-share", type=_share, default=None,
                   help="two-stage methods: the share of each group's users in stage I")


def mechanism_options(a: argparse.Namespace) -> dict[str, Any]:
    """The QuerySpec fields of :func:`add_mechanism_flags` that were given."""
    out = {k: getattr(a, k, None) for k in ("objective", "oracle", "randomizer",
                                            "stage1_share", "assume")}
    return {k: v for k, v in out.items() if v is not None}


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got "
                                         f"{text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1 (exclusive), "
                                         f"got {text!r}")
    return v


def positive_int(text: str) -> int:
    return _int_in(text, 1, None, "a positive integer")


def nonneg_int(text: str) -> int:
    return _int_in(text, 0, None, "an integer >= 0")


def port_number(text: str) -> int:
    return _int_in(text, 0, 65535, "a port number 0-65535 (0 = any free port)")


def _float_where(text: str, what: str, ok: Callable[[float], bool]) -> float:
    """``text`` as a float that is finite and passes ``ok``; else an argparse error naming
    ``what`` was expected (the same message for a non-number and an out-of-range one)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not math.isfinite(v) or not ok(v):
        raise argparse.ArgumentTypeError(f"expected a finite {what.removeprefix('a ')}, "
                                         f"got {text!r}")
    return v


def finite_float(text: str) -> float:
    return _float_where(text, "a number", lambda v: True)


def positive_float(text: str) -> float:
    return _float_where(text, "a positive number", lambda v: v > 0)


def nonneg_float(text: str) -> float:
    return _float_where(text, "a number >= 0", lambda v: v >= 0)


def open_unit_float(text: str) -> float:
    """A number strictly between 0 and 1 (a δ)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return v


# ---- errors ------------------------------------------------------------------------------
def quiet_grpc_logs() -> None:
    """Keep gRPC's C core from printing its own log lines (e.g. a failed TLS handshake)
    on the operator's terminal; the CLI reports the failure itself. Must run before the
    C core initializes (the first ``import grpc`` of the process)."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def describe_rpc_error(exc: Any) -> str:
    """One line for a failed gRPC call, with the likely fix."""
    try:
        code, details = exc.code(), exc.details() or ""
        name = code.name
    except Exception:  # pragma: no cover - not a call error
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if name == "UNAVAILABLE":
        from uldp.client.tls import tls_failure

        if (tls := tls_failure(exc)) is not None:
            return str(tls)
        if "Connection refused" in details or "connection refused" in details.lower():
            return ("no collector is listening at --target (connection refused); start "
                    "`uldp collector serve` or fix --target (`uldp collector wait` waits "
                    "until it is up) (UNAVAILABLE)")
        if "failed to connect" in details or "Deadline" in details:
            return f"cannot reach the collector at --target: {details} (UNAVAILABLE)"
    if name == "DEADLINE_EXCEEDED":
        return "the collector did not answer in time (DEADLINE_EXCEEDED); is --target right?"
    if name == "UNAUTHENTICATED":
        return (f"the collector refused the credential (UNAUTHENTICATED): {details}; check "
                "--admin-token-file")
    return f"{name}: {details}"


def describe_error(exc: BaseException) -> tuple[str, int]:
    """(one line, exit code) for any exception a command raised."""
    import grpc

    if isinstance(exc, OperatorError):
        return str(exc), exc.exit_code
    if isinstance(exc, grpc.RpcError):
        return describe_rpc_error(exc), 2
    rpc = getattr(exc, "rpc", None)  # an AnalystError (uldp.collector.analyst)
    if isinstance(rpc, grpc.RpcError):
        return describe_rpc_error(rpc), 2
    if isinstance(exc, OSError) and exc.filename is None and exc.strerror is None:
        return str(exc), 2  # raised with a message of our own
    if isinstance(exc, FileNotFoundError):
        return f"no such file or directory: {exc.filename}", 2
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename}", 2
    if isinstance(exc, FileExistsError):
        return f"already exists: {exc.filename}", 2
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}", 2
    db_errors: tuple[type[BaseException], ...] = ()
    try:
        from sqlalchemy.exc import SQLAlchemyError
        db_errors = (SQLAlchemyError,)
    except ModuleNotFoundError:  # pragma: no cover - client-only install
        pass
    if db_errors and isinstance(exc, db_errors):
        orig = getattr(exc, "orig", None) or exc
        first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        return f"database error: {first}", 2
    if isinstance(exc, ValueError):
        return str(exc), 2
    text = str(exc).splitlines()[0] if str(exc) else ""
    return (f"unexpected {type(exc).__name__}{': ' + text if text else ''} "
            "(rerun with --debug for the traceback and report it)"), 1


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """``--debug`` on ``parser`` and on every sub-command parser below it."""
    seen: set[int] = set()

    def walk(p: argparse.ArgumentParser, top: bool) -> None:
        if id(p) in seen:
            return
        seen.add(id(p))
        if not any("--debug" in a.option_strings for a in p._actions):
            p.add_argument("--debug", action="store_true",
                           default=False if top else argparse.SUPPRESS,
                           help="on an error, also print the Python traceback")
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    walk(sub, False)
    walk(parser, True)


def _warning_line(message: Warning | str, category: type[Warning], filename: str,
                  lineno: int, file: Any = None, line: str | None = None) -> None:
    """A Python warning as one ``uldp: warning: ...`` line (no source path, no code)."""
    text = " ".join(str(message).split())
    print(f"uldp: warning: {text}", file=file or sys.stderr)


def run_cli(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
            after: Callable[[argparse.Namespace, int], None] | None = None) -> int:
    """Parse ``argv``, run the chosen command, and turn every failure into one line (and
    every Python warning into one ``uldp: warning:`` line)."""
    args = parser.parse_args(argv)
    warnings.showwarning = _warning_line
    debug = bool(getattr(args, "debug", False) or os.environ.get("ULDP_DEBUG"))
    try:
        rc = int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("uldp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `uldp ... | head`
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
        return 0
    except Exception as exc:
        if debug:
            traceback.print_exc()
        msg, code = describe_error(exc)
        print(f"uldp: error: {msg}", file=sys.stderr)
        return code
    if after is not None:
        after(args, rc)
    return rc
