"""The connection flags of ``uldp collector serve`` and ``uldp shuffler serve``.

``--max-connections``, ``--header-timeout``, ``--body-timeout``, ``--max-header-bytes``
and ``--trusted-proxy`` (``docs/operations.md``, "Connections and descriptors";
``docs/privacy.md`` §8 for the proxies). Every value is checked before anything starts:
a bad one is one line naming the flag, exit 2. The caps are planned here, after the
descriptor limit is raised to its hard limit (``uldp.collector.service.connections``).
"""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any

from uldp.collector.cli.common import env
from uldp.collector.cli.util import OperatorError, positive_float

__all__ = ["add_connection_flags", "connection_limits", "trusted_proxies"]

#: bounds of --max-header-bytes: a browser's head with cookies fits in 1 KiB .. 1 MiB
HEADER_BYTES = (1024, 1 << 20)


def _connections(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") \
            from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number or auto, got {text!r}")
    return v


def _header_bytes(text: str) -> int:
    lo, hi = HEADER_BYTES
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"expected a number of bytes from {lo} to {hi}, "
                                         f"got {text!r}")
    return v


def _timeout(text: str) -> float:
    v = positive_float(text)
    if v > 3600:
        raise argparse.ArgumentTypeError(f"expected seconds up to 3600, got {text!r}")
    return v


def add_connection_flags(s: argparse.ArgumentParser, what: str = "collector") -> None:
    """The connection flags (``what``: the server named in the help)."""
    s.add_argument("--max-connections", type=_connections,
                   default=_connections(env("ULDP_MAX_CONNECTIONS", "auto") or "auto"),
                   metavar="N|auto",
                   help="client connections the ports hold at once, shared evenly by the "
                        "gRPC and HTTP ports (env ULDP_MAX_CONNECTIONS; default auto: the "
                        "file-descriptor limit less a reserve for the database and the "
                        f"{what} itself, at most 4096 per port)")
    s.add_argument("--header-timeout", type=_timeout, default=10.0, metavar="S",
                   help="seconds a new connection (TLS handshake included) or a kept-alive "
                        "one has to send a complete request head (HTTP port) or finish "
                        "its TLS and HTTP/2 handshake (gRPC port); default 10")
    s.add_argument("--body-timeout", type=_timeout, default=60.0, metavar="S",
                   help="seconds a request body may take after its head (HTTP port); "
                        "default 60")
    s.add_argument("--max-header-bytes", type=_header_bytes, default=16384, metavar="N",
                   help="largest request head (request line and headers; gRPC metadata), "
                        "bytes; default 16384")
    s.add_argument("--trusted-proxy", action="append",
                   default=[x for x in (env("ULDP_TRUSTED_PROXIES") or "").split(",") if x],
                   metavar="ADDR[/BITS]",
                   help="a reverse proxy whose X-Forwarded-For header names the client on "
                        "the HTTP port (an address or a network); repeat for more (env "
                        "ULDP_TRUSTED_PROXIES, comma-separated; default none: the header "
                        "is ignored and the peer is the address that connected)")


def trusted_proxies(a: argparse.Namespace) -> tuple[str, ...]:
    """``--trusted-proxy`` values as networks (they need ``--http-port``)."""
    out = []
    for text in a.trusted_proxy or ():
        try:
            out.append(str(ipaddress.ip_network(text.strip(), strict=False)))
        except ValueError:
            raise OperatorError(f"--trusted-proxy {text!r}: give the proxy's address or "
                                "network, e.g. 10.0.0.7 or 10.0.0.0/24") from None
    if out and a.http_port is None:
        raise OperatorError("--trusted-proxy needs --http-port (X-Forwarded-For is an HTTP "
                            "header; the gRPC port never reads it)")
    return tuple(out)


def connection_limits(a: argparse.Namespace, http: bool) -> tuple[Any, Any]:
    """(``ConnectionLimits`` of the process, ``HttpLimits`` of its HTTP port) from the
    flags and the descriptor limit (raised to the hard limit here)."""
    from uldp.collector.http.guard import HttpLimits
    from uldp.collector.service.connections import plan_connections, raise_descriptor_limit

    try:
        plan = plan_connections(raise_descriptor_limit(), http=http, total=a.max_connections,
                                header_timeout_s=a.header_timeout,
                                body_timeout_s=a.body_timeout,
                                max_header_bytes=a.max_header_bytes)
    except ValueError as exc:
        raise OperatorError(f"--max-connections {a.max_connections or 'auto'}: {exc}") \
            from None
    return plan, HttpLimits(max_connections=plan.http_connections,
                            header_timeout_s=plan.header_timeout_s,
                            body_timeout_s=plan.body_timeout_s,
                            max_header_bytes=plan.max_header_bytes)
