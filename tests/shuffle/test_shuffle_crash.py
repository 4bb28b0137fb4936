"""kill -9 of the shuffler mid-batch loses no acknowledged report and forwards none twice.

Real processes on loopback. The shuffler is started with the test hook that stalls its
forwarder between the collector's acknowledgement of a batch and recording it; 300
devices report through a gateway (every report acknowledged means durably stored); once
the collector holds the first batch the shuffler is killed with SIGKILL — the batches the
collector acknowledged (the forwarder sends two at once) are still ``forwarding`` at the
shuffler, the other reports wait. A new shuffler on the same database re-sends those
batches (the collector answers duplicate: the batch id) and forwards the rest. The
collector ends with exactly the acknowledged reports, each once, and the query completes.
The killed shuffler's checking processes (``--checkers``) end with it, and so do the
collector's opening processes when it is killed in turn.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from uldp.collector.service.client import QueryRequest
from uldp.collector.shuffler.service import TEST_PAUSE_ENV
from uldp.collector.simulation.fleet import FleetDataset, dataset_for_query
from uldp.collector.simulation.gateway import run_gateway_fleet

from .conftest import Deployment

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

USERS = 300


def _collector(d: Deployment, sql: str, *args: object) -> list[tuple]:
    db = sqlite3.connect(f"file:{d.db_path}?mode=ro", uri=True)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def _shuffler(d: Deployment, sql: str) -> list[tuple]:
    db = sqlite3.connect(d.work / "shuffler.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait(cond, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def test_kill9_mid_batch_loses_nothing_and_forwards_nothing_twice(deployment: Deployment):
    d = deployment
    assert d.shuffler is not None
    early = _children(d.shuffler.pid)  # checking processes maybe still starting up
    d.kill_shuffler()
    d.shuffler_args = ["--min-batch", "20", "--max-batch", "60", "--linger", "0.3"]
    d.start_shuffler(env={TEST_PAUSE_ENV: "600"})
    an = d.analyst()
    q = an.create(QueryRequest(kind="mean", epsilon=1.0, dataset="crash", users=USERS,
                               samples=10, bound=1.0, method="ssl", phase_timeout_s=300,
                               query_id="crash", params={"shuffle": {"min_batch": 20}},
                               allow_simulated=True))
    data = dataset_for_query("mean", "uniform", 10, 1, 1.0, 5)
    res = run_gateway_fleet(d.endpoint, d.work / "devices-crash", USERS,
                            [FleetDataset("crash", data, modulo=1, residue=0)], gateways=1,
                            batch=100, budget=2.0, seed=5, timeout_s=120,
                            shuffler=d.shuffler_endpoint,
                            shuffler_attestation_key=d.sp.attestation_hex())
    assert res.submitted == USERS and not res.errors, res  # all acknowledged: durable

    batches = "SELECT batch_id, stored FROM uldp_shuffle_batches WHERE query_id = ?"
    _wait(lambda: len(_collector(d, batches, q.query_id)) >= 1)
    assert d.shuffler is not None
    kids = _children(d.shuffler.pid)  # its checking processes (and their helper)
    assert kids, "the shuffler starts its checking processes"
    d.kill_shuffler()  # SIGKILL while the first batches are stored but not recorded
    acked = dict(_collector(d, batches, q.query_id))  # (the forwarder sends two at once)
    assert 1 <= len(acked) <= 2 and all(20 <= n <= 60 for n in acked.values())
    assert _shuffler(d, "SELECT count(*) FROM submissions") == [(USERS,)]
    assert _shuffler(d, "SELECT count(*) FROM pending") == [(USERS,)]
    shuffler_side = dict(_shuffler(d, "SELECT batch_id, state FROM batches"))
    assert set(shuffler_side.values()) == {"forwarding"} and set(acked) <= set(shuffler_side)

    # no orphan left behind, also of the shuffler killed while they started
    _wait(lambda: not any(_alive(p) for p in kids + early), 15.0)
    d.start_shuffler()  # the same database, no stall
    final = an.wait(q.query_id, timeout_s=120)
    an.close()
    assert final.state == 2, final.error
    rows = _collector(d, batches, q.query_id)
    assert sum(s for _, s in rows) == USERS  # every acknowledged report, once
    assert len({b for b, _ in rows}) == len(rows) and set(acked) <= {b for b, _ in rows}
    assert _collector(d, "SELECT count(*) FROM uldp_reports WHERE query_id = ?",
                      q.query_id) == [(USERS,)]
    # received: the phase row plus every writer's counter row (merged on read)
    assert _collector(d, "SELECT p.received + coalesce((SELECT sum(c.received) FROM "
                      "uldp_phase_counts c WHERE c.query_id = p.query_id AND c.phase = "
                      "p.phase), 0) FROM uldp_phases p WHERE p.query_id = ?",
                      q.query_id) == [(USERS,)]
    _wait(lambda: _shuffler(d, "SELECT count(*) FROM pending") == [(0,)])
    states = dict(_shuffler(d, "SELECT batch_id, state FROM batches"))
    assert set(states.values()) == {"forwarded"} and set(acked) <= set(states)

    # the collector killed too (last: nothing runs after it in this module): its opening
    # processes end with it
    openers = _children(d.collector.pid)
    assert openers, "the collector's shuffler port starts its opening processes"
    d.collector.send_signal(signal.SIGKILL)
    d.collector.wait()
    _wait(lambda: not any(_alive(p) for p in openers), 15.0)
