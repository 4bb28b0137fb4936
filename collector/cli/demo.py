"""``uldp demo``: the whole system on loopback (``uldp.collector.simulation.demo``)."""

from __future__ import annotations

import argparse
from typing import Any

from uldp.collector.cli.util import port_number, positive_float, positive_int

__all__ = ["register"]


def _cmd_demo(a: argparse.Namespace) -> int:
    from uldp.collector.simulation.demo import run_demo
    return run_demo(devices=a.devices, epsilon=a.epsilon, samples=a.samples,
                    concurrency=a.concurrency, workdir=a.workdir, as_json=a.json,
                    seed=a.seed, gateways=a.gateways, shuffle=a.shuffle,
                    http_port=a.http_port)


def register(subparsers: Any) -> None:
    """Add ``demo`` to the ``uldp`` parser."""
    s = subparsers.add_parser(
        "demo", help="collector + one query per kind + a simulated fleet on loopback; "
                     "prints estimates next to the truth",
        description="Start a collector (TLS, SQLite, loopback), create one query per kind, "
                    "run a simulated fleet through gateway processes that batch the reports, "
                    "and print every estimate next to the truth with its interval.")
    s.add_argument("--devices", type=positive_int, default=20_000,
                   help="number of simulated devices, split over the 5 queries (default "
                        "20000)")
    s.add_argument("--epsilon", type=positive_float, default=2.0,
                   help="privacy budget of every query (default 2)")
    s.add_argument("--samples", type=positive_int, default=100,
                   help="samples per device (default 100)")
    s.add_argument("--gateways", type=positive_int, default=2,
                   help="gateway processes driving the devices (default 2)")
    s.add_argument("--concurrency", type=positive_int, default=500,
                   help="devices each gateway checks in at a time, in batch calls "
                        "(EnrollBatch, GetTasksBatch, SubmitReportBatch; default 500)")
    s.add_argument("--workdir", help="keep the collector database and certificates here")
    s.add_argument("--seed", type=int, default=None,
                   help="reproducible data and noise (simulation mode)")
    s.add_argument("--shuffle", action="store_true",
                   help="shuffle mode: a shuffler process between the gateways and the "
                        "collector; reports sealed to the collector's key, forwarded in "
                        "shuffled batches; prints each query's local and central epsilon")
    s.add_argument("--http-port", type=port_number, default=None,
                   help="also serve the collector's HTTP port here (Connect, gRPC-Web, the "
                        "console at /console/, /metrics with the admin token) and, with "
                        "--shuffle, the shuffler's on the next port (Connect, gRPC-Web: "
                        "browser devices); 0 = free ports (printed at start)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=_cmd_demo)
