"""Issue 12 §2: exit codes mean something. ``fleet run`` exits non-zero when a device is
unfinished (and stops at ``--timeout``), ``query result``/``status --watch`` say when a
query was cancelled, and scripts wait for readiness with ``--ready-file`` or
``uldp collector wait`` instead of racing ``serve &``."""

from __future__ import annotations

import json
import time

import pytest
from opcli import free_port, one_line_error, uldp


@pytest.mark.parametrize("gateways", ["0", "1"])
def test_fleet_run_stops_at_its_timeout_and_exits_1(collector, gateways):
    """9 devices for a 20-user two-stage query (10 stage-I slots): phase 1 never fills, so
    the devices placed in phase 2 are still waiting at --timeout. (Placements are a keyed
    permutation: with 6 devices all of them landed in stage I once in CI, p = 0.5 %; with 9
    that takes p = C(10,9)/C(20,9) = 6e-5.)"""
    qid = f"starve{gateways}"
    r = uldp("query", "create", *collector.conn(), "--kind", "mean", "--epsilon", "1",
             "--dataset", qid, "--users", "20", "--samples", "5", "--id", qid,
             "--method", "two-stage")
    assert r.returncode == 0, r.stderr
    t0 = time.monotonic()
    r = uldp("fleet", "run", *collector.conn(), "--query", qid, "--devices", "9",
             "--timeout", "4", "--gateways", gateways, "--seed", "1", "--json")
    took = time.monotonic() - t0
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert json.loads(r.stdout)["unfinished"] >= 1
    assert "unfinished after --timeout 4s" in r.stderr and "Traceback" not in r.stderr
    assert took < 4 + 25  # interpreter start, data, pre-flight, and 1 s of grace


def test_fleet_run_against_no_collector_fails_fast(pki_dir):
    t0 = time.monotonic()
    r = uldp("fleet", "run", "--target", f"127.0.0.1:{free_port()}", "--ca",
             str(pki_dir / "ca.pem"), "--devices", "10", "--kind", "mean", "--samples", "5",
             "--dataset", "d", "--timeout", "600")
    one_line_error(r, "--target", "connection refused")
    assert time.monotonic() - t0 < 60


def test_fleet_run_exits_0_when_every_device_reported(collector):
    r = uldp("query", "create", *collector.conn(), "--kind", "mean", "--epsilon", "2",
             "--dataset", "ok", "--users", "40", "--samples", "5", "--id", "ok1")
    assert r.returncode == 0, r.stderr
    r = uldp("fleet", "run", *collector.conn(), "--query", "ok1", "--devices", "40",
             "--gateways", "1", "--seed", "2", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["reports_acknowledged"] == 40 and s["unfinished"] == 0
    r = uldp("query", "status", *collector.conn(), "ok1", "--watch")
    assert r.returncode == 0 and "done" in r.stdout
    r = uldp("query", "result", *collector.conn(), "ok1", "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["values"]) == 1


def test_result_of_a_cancelled_query_says_so(collector):
    r = uldp("query", "create", *collector.conn(), "--kind", "mean", "--epsilon", "1",
             "--dataset", "gone", "--users", "10", "--samples", "5", "--id", "gone1")
    assert r.returncode == 0, r.stderr
    assert uldp("query", "cancel", *collector.conn(), "gone1").returncode == 0
    one_line_error(uldp("query", "result", *collector.conn(), "gone1"), "gone1",
                   "was cancelled", "no result")
    r = uldp("query", "status", *collector.conn(), "gone1", "--watch")
    assert r.returncode == 1 and "ended cancelled" in r.stderr
    r = uldp("query", "create", *collector.conn(), "--kind", "mean", "--epsilon", "1",
             "--dataset", "slow", "--users", "10", "--samples", "5", "--id", "slow1")
    one_line_error(uldp("query", "result", *collector.conn(), "slow1"), "still running",
                   "--watch")


def test_collector_wait(collector, pki_dir, tmp_path):
    r = uldp("collector", "wait", *collector.conn(admin=False), "--timeout", "30")
    assert r.returncode == 0 and "serving" in r.stdout
    t0 = time.monotonic()
    r = uldp("collector", "wait", "--target", f"127.0.0.1:{free_port()}", "--ca",
             str(pki_dir / "ca.pem"), "--timeout", "1")
    assert r.returncode == 1 and "not serving after --timeout 1s" in r.stderr
    assert time.monotonic() - t0 < 30
    other = tmp_path / "other"
    assert uldp("collector", "certs", "--out", str(other)).returncode == 0
    one_line_error(uldp("collector", "wait", "--target", collector.target, "--ca",
                        str(other / "ca.pem"), "--timeout", "30"), "--ca")


def test_ready_file_is_written_when_serving_and_removed_on_stop(pki_dir, tmp_path):
    from opcli import start_serve, stop_serve

    c = start_serve(pki_dir, tmp_path)
    ready = tmp_path / "collector.ready"
    host, port = c.target.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    r = uldp("collector", "health", *c.conn(admin=False))
    assert r.returncode == 0 and r.stdout.strip() == "SERVING"  # no retry needed
    assert stop_serve(c) == 0
    assert not ready.exists()
