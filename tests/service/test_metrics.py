"""``/metrics`` on the HTTP port (``uldp.collector.observe``, ``uldp.collector.http.metrics``)
against a real collector on loopback: scraped while a fleet of real devices reports, the
counters equal what the database holds (reports accepted) and what the callers were told
(refusals by status code, duplicates), on both ports; the database gauges are the
database's numbers; the endpoint needs a token, and only the admin token sees per-query
series."""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service.conftest import ADMIN_TOKEN
from tests.service.connect_channel import ConnectChannel
from tests.service.wire import enroll_with_task, report_for, send
from uldp.client.wire import bearer, device_pb2, device_pb2_grpc
from uldp.collector.datasets import make_fleet_data
from uldp.collector.service.client import QueryRequest
from uldp.collector.simulation.fleet import FleetDataset, run_fleet
from uldp.collector.storage.schema import reports

N = 160
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "uldp-collector.json"
METRICS_TOKEN = "metrics-scraper-token-0123456789"


def scrape(c, token: str | None = ADMIN_TOKEN) -> dict[str, dict[tuple, float]]:
    """``{sample name: {sorted label items: value}}`` of one scrape."""
    ctx = ssl.create_default_context(cafile=str(c.pki.ca_cert))
    req = urllib.request.Request(c.http_url + "/metrics", headers=(
        {"authorization": f"Bearer {token}"} if token else {}))
    with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
        text = r.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def total(m: dict, name: str, **match: str) -> float:
    return sum(v for labels, v in m.get(name, {}).items()
               if all(dict(labels).get(k) == want for k, want in match.items()))


def stored(c) -> int:
    return c.server.db.table_counts()[reports.name]


def _refusals(c, stub, front_tally: Counter) -> None:
    """Reports refused for known reasons; each status the caller saw is tallied."""
    tok, task = enroll_with_task(stub)
    rep = report_for(task, seed=7)
    assert not send(stub, tok, rep).duplicate
    assert send(stub, tok, rep).duplicate  # an identical re-send: OK, duplicate
    front_tally["duplicate"] += 1
    bad = [(tok, report_for(task, seed=8)),  # a different report: ALREADY_EXISTS
           ("not-a-token", rep),  # UNAUTHENTICATED
           (tok, device_pb2.Report(query_id="nope", phase=1, values=[1],
                                   task_digest=task.task_digest))]
    for t, r in bad:
        try:
            send(stub, t, r)
            raise AssertionError("accepted")
        except grpc.RpcError as exc:
            front_tally[exc.code().name] += 1


def test_metrics_equal_the_database_during_a_fleet(start_collector, tmp_path):
    c = start_collector(http=True)
    c.front.app._find("/metrics").gauges.cache_s = 0.0  # read the database at every scrape
    a = c.analyst()
    for qid, ds in (("mean", "steps"), ("extra", "x")):
        a.create(QueryRequest(kind="mean", method="ssl", epsilon=1.0, dataset=ds,
                              users=N if qid == "mean" else 4, samples=16, query_id=qid,
                              phase_timeout_s=600, allow_simulated=True))
    data = make_fleet_data("mean", "uniform", 16, 1, 1.0, np.random.default_rng(1))
    done = threading.Event()
    got: dict = {}

    def fleet() -> None:
        got["res"] = run_fleet(c.endpoint, tmp_path / "fleet", N, [FleetDataset("steps", data)],
                               concurrency=8, seed=3, progress=False, timeout_s=300)
        done.set()
    threading.Thread(target=fleet, daemon=True).start()
    during = []
    while not done.is_set():  # scrape while the fleet reports: never ahead of the database
        m = scrape(c)
        during.append((total(m, "uldp_reports_accepted_total"), stored(c)))
        time.sleep(0.1)
    assert got["res"].submitted == N and not got["res"].errors
    assert all(seen <= db for seen, db in during), during
    assert any(0 < seen < N for seen, _ in during), during  # scraped mid-run

    grpc_tally: Counter = Counter()
    http_tally: Counter = Counter()
    with c.channel() as ch:
        _refusals(c, device_pb2_grpc.DeviceServiceStub(ch), grpc_tally)
    with ConnectChannel(c.http_url, c.pki.ca_cert, "connect") as hch:
        _refusals(c, device_pb2_grpc.DeviceServiceStub(hch), http_tally)
        # a batch: each item counts on its own (one OK, one duplicate, one refused)
        stub = device_pb2_grpc.DeviceServiceStub(hch)
        tok, task = enroll_with_task(stub)
        rep = report_for(task, seed=11)
        items = [device_pb2.Report(**{**_fields(rep), "device_token": tok}),
                 device_pb2.Report(**{**_fields(rep), "device_token": tok}),
                 device_pb2.Report(**{**_fields(rep), "device_token": "forged"})]
        r = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(reports=items))
        assert [x.code for x in r.results] == [0, 0, 16] and r.results[1].duplicate
        http_tally["duplicate"] += 1
        http_tally["UNAUTHENTICATED"] += 1

    assert a.wait("mean", 120).state == 2  # its phase closes (the closer's next tick)
    m = scrape(c)
    db = c.server.db.table_counts()
    assert total(m, "uldp_reports_accepted_total") == db[reports.name] == N + 3
    assert total(m, "uldp_reports_accepted_total", front="http") == 2
    assert total(m, "uldp_reports_stored") == db[reports.name]
    for front, tally in (("grpc", grpc_tally), ("http", http_tally)):
        assert total(m, "uldp_reports_duplicate_total", front=front) == tally.pop("duplicate")
        refused = {dict(k)["code"]: v for k, v in m["uldp_reports_refused_total"].items()
                   if dict(k)["front"] == front}
        assert refused == dict(tally), (front, refused, tally)
    # the database gauges are the database's numbers
    assert total(m, "uldp_devices", state="enrolled") == db["uldp_devices"]
    assert total(m, "uldp_queries", state="running") == 1  # "extra" still waits
    assert total(m, "uldp_queries", state="done") == 1
    assert total(m, "uldp_dataset_epsilon_requested", dataset="steps") == 1.0
    # the calls themselves, by method and code, on both ports
    assert total(m, "uldp_rpc_requests_total", method="SubmitReport", code="OK") >= N + 2
    assert total(m, "uldp_rpc_requests_total", method="SubmitReportBatch", front="http") == 1
    assert total(m, "uldp_batch_items_count", method="SubmitReportBatch") == 1
    assert total(m, "uldp_enrolments_total", kind="new", code="OK") == db["uldp_devices"]
    assert total(m, "uldp_storage_commit_seconds_count") >= 1
    assert total(m, "uldp_phase_close_seconds_count") == 1
    assert total(m, "uldp_query_epsilon", query_id="mean") == 1.0  # admin scope
    # the device gauges come from the phases' counters and the slots taken, not from
    # scans of the reports and assignments: the same numbers those scans give
    with c.server.db.read() as conn:
        running = "FROM {} t JOIN uldp_queries q USING (query_id) WHERE q.state = 'running'"
        n_assigned, n_reported = (conn.exec_driver_sql(f"SELECT count(*) {running.format(t)}")
                                  .scalar_one() for t in ("uldp_assignments", "uldp_reports"))
    assert n_assigned >= n_reported > 0
    assert total(m, "uldp_devices", state="reported") == n_reported
    assert total(m, "uldp_devices", state="assigned") == n_assigned - n_reported
    check_dashboard(m)


def check_dashboard(m: dict) -> None:
    """Every expression of the Grafana dashboard names metrics this scrape holds, and
    aggregates by labels they have (deploy/grafana/uldp-collector.json)."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert len(exprs) >= 20
    labels = {k for fam in m.values() for key in fam for k, _ in key}
    for e in exprs:
        names = re.findall(r"\buldp_\w+", e)
        assert names and all(n in m for n in names), (e, [n for n in names if n not in m])
        for group in re.findall(r"by \(([^)]*)\)", e):
            assert {x.strip() for x in group.split(",")} <= labels, (e, group)


def _fields(rep: device_pb2.Report) -> dict:
    return {"query_id": rep.query_id, "phase": rep.phase, "values": list(rep.values),
            "task_digest": rep.task_digest}


def test_metrics_need_a_token_and_only_admins_see_queries(start_collector, pki, tmp_path):
    token_file = tmp_path / "metrics.token"
    token_file.write_text(METRICS_TOKEN + "\n")
    c = start_collector(http=True, subprocess_=True,
                        extra_args=["--metrics-token-file", str(token_file)])
    a = c.analyst()
    a.create(QueryRequest(kind="mean", method="ssl", epsilon=0.5, dataset="secret-ds",
                          users=4, samples=4, query_id="q-private", phase_timeout_s=600))
    for token in (None, "wrong-token-0123456789abcdef"):
        try:
            scrape(c, token)
            raise AssertionError("served")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
            assert exc.headers["www-authenticate"].startswith("Bearer")
    ops = scrape(c, METRICS_TOKEN)
    assert total(ops, "uldp_dataset_epsilon_requested", dataset="secret-ds") == 0.5
    assert "uldp_query_epsilon" not in ops and "uldp_query_phase_reports" not in ops
    admin = scrape(c, ADMIN_TOKEN)
    assert total(admin, "uldp_query_epsilon", query_id="q-private") == 0.5
    # no label of any counter carries a caller-supplied string
    labels = {k for fam in ops.values() for key in fam for k, _ in key}
    assert labels <= {"front", "service", "method", "code", "kind", "state", "dataset",
                      "replica", "le", "reason"}, labels  # reason: the HTTP guard's, fixed
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        try:
            stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]),
                          metadata=bearer("forged-device-token"))
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
    m = scrape(c, METRICS_TOKEN)
    assert total(m, "uldp_rpc_requests_total", method="GetTasks", code="UNAUTHENTICATED",
                 front="grpc") == 1
    assert not any("forged" in v for fam in m.values() for key in fam for _, v in key)


@pytest.mark.postgres
def test_each_replica_counts_its_own_and_reads_the_shared_gauges(start_collector, postgres,
                                                               tmp_path):
    """Two replicas on one PostgreSQL database, a fleet split over both: each exports its
    own counters (their sum is the database's count), and both read the same database
    gauges."""
    url = postgres.new_database()
    reps = [start_collector(url, subprocess_=True, http=True, name=n) for n in ("ra", "rb")]
    a = reps[0].analyst()
    a.create(QueryRequest(kind="mean", method="ssl", epsilon=1.0, dataset="steps", users=60,
                          samples=16, query_id="q", phase_timeout_s=600, allow_simulated=True))
    data = make_fleet_data("mean", "uniform", 16, 1, 1.0, np.random.default_rng(4))
    res = run_fleet([r.endpoint for r in reps], tmp_path / "fleet", 60,
                    [FleetDataset("steps", data)], concurrency=6, seed=1, progress=False,
                    timeout_s=300)
    assert res.submitted == 60 and not res.errors
    a.wait("q", 120)
    time.sleep(5.5)  # the database gauges are read at most every 5 s
    scrapes = [scrape(r) for r in reps]
    mine = [total(m, "uldp_reports_accepted_total") for m in scrapes]
    assert sum(mine) == 60 and all(n > 0 for n in mine), mine
    assert [total(m, "uldp_reports_stored") for m in scrapes] == [60, 60]
    assert [total(m, "uldp_queries", state="done") for m in scrapes] == [1, 1]
    assert [dict(next(iter(m["uldp_replica_info"])))["replica"] for m in scrapes] == \
        ["ra", "rb"]
