"""``uldp fleet run``: simulated devices against a running collector."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from uldp.collector.cli.common import (
    analyst,
    conn_flags,
    endpoint,
    env,
    preflight,
    readable_file,
    table,
)
from uldp.collector.cli.util import OperatorError, nonneg_int, positive_float, positive_int

__all__ = ["register"]


def _population(a: argparse.Namespace, ep: Any) -> tuple[str, Any]:
    """(dataset name, population) of the devices: from ``--query`` (its public
    parameters) or from the flags."""
    from uldp.collector.simulation.fleet import dataset_for_query

    kind, samples, dim, bound, dataset = a.kind, a.samples, a.dim, a.bound, a.dataset
    moment_p = None
    lo, hi = a.lo, a.hi
    if (lo is None) != (hi is None) or (lo is not None and not lo < hi):
        raise OperatorError("--lo and --hi go together, with --lo below --hi (the range of "
                            "the devices' values)")
    if a.query:
        if not a.admin_token_file:
            raise OperatorError("--query needs --admin-token-file to read the query")
        with analyst(a) as c:
            q = c.get(a.query)
        spec = q.spec
        kind, samples, dim, bound, dataset = (spec["kind"], spec["samples"], spec["dim"],
                                              spec["bound"], q.dataset)
        moment_p = spec.get("moment_p")
        lo, hi = spec.get("lo"), spec.get("hi")
    else:
        missing = [f for f, v in (("--kind", kind), ("--samples", samples),
                                  ("--dataset", dataset)) if not v]
        if missing:
            raise OperatorError(f"give --query, or {', '.join(missing)} (the devices' data)")
        preflight(ep, a.target)
    centre = 0.0
    if lo is not None and hi is not None:  # the population of [-D, D] moved into [lo, hi]
        bound, centre = hi / 2 - lo / 2, lo / 2 + hi / 2
    return dataset, dataset_for_query(kind, a.dist, samples, dim or 1, bound, a.seed,
                                      moment_p, centre)


def _problems(a: argparse.Namespace, res: Any) -> list[str]:
    """Why a finished fleet run is not a success (exit code 1)."""
    problems = []
    if res.unfinished:
        problems.append(f"{res.unfinished} device(s) unfinished after --timeout {a.timeout:g}s")
    if res.rejected:
        problems.append(f"{len(res.rejected)} report(s) rejected (first: "
                        f"{res.rejected[0][0]}: {res.rejected[0][1]})")
    if res.refused:
        problems.append(f"{len(res.refused)} task(s) refused by devices (first: "
                        f"{res.refused[0][0]}: {res.refused[0][1]})")
    if res.errors:
        problems.append(f"{len(res.errors)} device error(s) (first: {res.errors[0]})")
    return problems


def _cmd_fleet_run(a: argparse.Namespace) -> int:
    import tempfile

    from uldp.collector.simulation.fleet import FleetDataset, run_fleet, summarize
    from uldp.collector.simulation.gateway import run_gateway_fleet

    ep = endpoint(a)
    secret = ""
    if a.enrollment_secret_file:
        readable_file(Path(a.enrollment_secret_file), "--enrollment-secret-file")
        secret = Path(a.enrollment_secret_file).read_text().strip()
    dataset, data = _population(a, ep)
    root = a.state_dir or tempfile.mkdtemp(prefix="uldp-fleet-")
    common = dict(budget=a.budget, enrollment_secret=secret, seed=a.seed,
                  timeout_s=a.timeout, keep_state=a.state_dir is not None)
    if a.shuffler:
        from uldp.client.transport import Endpoint

        common["shuffler"] = Endpoint(a.shuffler, ep.ca_cert)
    if a.shuffler_attestation_key:
        from uldp.collector.security.attestation import HmacAttestation

        path = Path(a.shuffler_attestation_key)
        readable_file(path, "--shuffler-attestation-key")
        try:
            HmacAttestation.from_file(path)
        except ValueError as exc:
            raise OperatorError(f"--shuffler-attestation-key {exc}") from None
        common["shuffler_attestation_key"] = path.read_text().strip()
    if a.gateways:
        res = run_gateway_fleet(ep, root, a.devices, [FleetDataset(dataset, data)],
                                gateways=a.gateways, **common)
    else:
        res = run_fleet(ep, root, a.devices, [FleetDataset(dataset, data)],
                        concurrency=a.concurrency, progress=not a.json and None, **common)
    s = summarize(res)
    s["truth"] = [float(x) for x in data.truth.ravel()]
    if a.json:
        print(json.dumps(s, indent=2))
    else:
        print(table([[k, str(v)] for k, v in s.items() if k != "truth"], ["FLEET", ""]))
    problems = _problems(a, res)
    if problems:
        print("uldp: fleet incomplete: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


def register(subparsers: Any) -> None:
    """Add ``fleet`` to the ``uldp`` parser."""
    pf = subparsers.add_parser("fleet", help="simulated devices over gRPC")
    sf = pf.add_subparsers(dest="fleet_cmd", required=True)
    s = sf.add_parser("run", help="run N simulated devices against a collector",
                      description="Run N simulated devices (each a real uldp.client.Device "
                      "with its own state) against a collector until none has anything left "
                      "to do. Exit 0 when every device finished; 1 when any is unfinished "
                      "at --timeout, refused a task or had a report rejected; 2 when the "
                      "collector cannot be reached.")
    conn_flags(s, admin=False)
    s.add_argument("--admin-token-file", default=env("ULDP_ADMIN_TOKEN_FILE"),
                   help="needed with --query (reads the query's public parameters; env "
                        "ULDP_ADMIN_TOKEN_FILE)")
    s.add_argument("--devices", type=positive_int, required=True,
                   help="number of simulated devices")
    s.add_argument("--query", help="take kind/samples/dim/bound/dataset from this query")
    s.add_argument("--kind", help="kind of data to give the devices (without --query)")
    s.add_argument("--samples", type=positive_int,
                   help="samples per device (without --query)")
    s.add_argument("--dim", type=positive_int, default=1,
                   help="dimension of each sample (without --query; default 1)")
    s.add_argument("--bound", type=positive_float, default=1.0,
                   help="support bound of the data (without --query; default 1)")
    s.add_argument("--lo", type=float, default=None,
                   help="the devices' values lie in [--lo, --hi] (without --query; instead "
                        "of --bound)")
    s.add_argument("--hi", type=float, default=None, help="see --lo")
    s.add_argument("--dataset", help="dataset name the devices register (without --query)")
    s.add_argument("--dist", default="uniform", help="population, as in `uldp simulate`")
    s.add_argument("--concurrency", type=positive_int, default=32,
                   help="devices in flight at once (threads; default 32)")
    s.add_argument("--gateways", type=nonneg_int, default=0,
                   help="0 (default): every device sends its own report (SubmitReport), as "
                        "an app does; N >= 1: N gateway processes collect the devices' "
                        "reports and send them in batches (SubmitReportBatch)")
    s.add_argument("--budget", type=positive_float, default=10.0,
                   help="each device's total epsilon (default 10)")
    s.add_argument("--enrollment-secret-file",
                   help="file with the collector's enrollment secret, if it requires one")
    s.add_argument("--seed", type=int,
                   help="reproducible data and noise (simulation mode; reports are marked "
                        "simulated)")
    s.add_argument("--state-dir", help="keep device state here (default: a temp dir, removed)")
    s.add_argument("--shuffler", help="shuffle mode: host:port of the shuffler the devices "
                   "send their sealed reports to (TLS, verified with --ca)")
    s.add_argument("--shuffler-attestation-key",
                   help="shuffle mode: the shuffler's attestation key file (its "
                        "--attestation-key-file): the fleet stands in for the app's back end "
                        "and vouches for each simulated device towards the shuffler's "
                        "enrolment check (a subject per device)")
    s.add_argument("--timeout", type=positive_float, default=1800.0,
                   help="stop after this many seconds; unfinished devices make the exit "
                        "code 1 (default 1800)")
    s.add_argument("--json", action="store_true", help="machine-readable summary")
    s.set_defaults(func=_cmd_fleet_run)
