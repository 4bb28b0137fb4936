"""Benchmark: CPU of the collector vs the simulated devices for the demo's workload.

    python bench/demo_split.py [DEVICES] [IN_FLIGHT] [STATE_DIR]

Starts ``uldp collector serve`` (SQLite, TLS, loopback), creates the five demo queries
over DEVICES devices and runs them through one in-process gateway
(``uldp.collector.simulation.gateway.run_gateway_fleet``, IN_FLIGHT devices per batch
call, device state under STATE_DIR, e.g. /dev/shm). Prints the collector's CPU seconds
(from /proc) and this process's (the devices: SDK + gRPC client). Numbers:
``bench/results/demo.md``.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

from uldp.client.transport import Endpoint
from uldp.collector.security.certs import make_dev_pki
from uldp.collector.security.tokens import new_admin_token
from uldp.collector.service.client import AnalystClient, QueryRequest
from uldp.collector.simulation.demo import DEMO_QUERIES, start_collector_process
from uldp.collector.simulation.fleet import FleetDataset, dataset_for_query, summarize
from uldp.collector.simulation.gateway import run_gateway_fleet


def cpu_of(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    conc = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    work = Path(tempfile.mkdtemp(prefix="demo-split-",
                                 dir=sys.argv[3] if len(sys.argv) > 3 else None))
    tls = work / "pki"
    make_dev_pki(tls, ["localhost", "127.0.0.1"])
    (tls / "admin.token").write_text(new_admin_token())
    proc, port = start_collector_process(work, f"sqlite:///{work / 'c.db'}", tls)
    c0 = cpu_of(proc.pid)
    ep = Endpoint(f"127.0.0.1:{port}", tls / "ca.pem")
    an = AnalystClient(ep, (tls / "admin.token").read_text())
    k, ds = len(DEMO_QUERIES), []
    for i, (kind, dim, dist) in enumerate(DEMO_QUERIES):
        an.create(QueryRequest(kind=kind, epsilon=2.0, dataset=f"d-{kind}",
                               users=len(range(i, n, k)), samples=100, dim=dim, bound=1.0,
                               phase_timeout_s=600, query_id=f"q-{kind}"))
        ds.append(FleetDataset(f"d-{kind}", dataset_for_query(kind, dist, 100, dim, 1.0, i),
                               modulo=k, residue=i))
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.time()
    res = run_gateway_fleet(ep, work / "dev", n, ds, gateways=1, batch=conc, budget=4,
                            seed=1, keep_state=False)
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.time() - t0
    c1 = cpu_of(proc.pid)
    print(summarize(res))
    fleet = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    print(f"devices={n} wall {wall:.1f}s; devices' CPU {fleet:.1f}s "
          f"({1000 * fleet / n:.1f} ms each); collector CPU {c1 - c0:.1f}s "
          f"({1000 * (c1 - c0) / n:.1f} ms each)")
    an.close()
    proc.send_signal(signal.SIGTERM)
    proc.wait()


if __name__ == "__main__":
    main()
