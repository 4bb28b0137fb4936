"""A hostile device cannot fail a query (issue 28): every report is checked at ingest with
exactly the rule its phase's close applies (``uldp.collector.mechanisms.validity``), and a
close never fails for a stored report that breaks it.

* ingest, on a real collector on loopback (SQLite and PostgreSQL): for every mechanism a
  report its device could not have sent — a subset out of order or repeated, a GRR value,
  an OUE bit or a PM/HM/Duchi cell of −1, an OLH hash value past its buckets, a grouped
  mean's component of −1 — within the task's ``max_abs_value``, so the length and range
  checks let it through: INVALID_ARGUMENT naming the rule, nothing changed; in a batch
  the item alone is refused; then the device's real report is taken;
* shuffle mode: a sealed report that opens to such a report is dropped and counted with
  the ones that do not open; the batch is stored;
* close: reports stored before the check existed (through the storage API) are left out
  and counted (``invalid_reports`` in the phase and the result), and what the phase
  publishes is, bit for bit, what the valid reports alone give in memory — whatever the
  route (sums, value counts and per-piece moments in the database, streamed reports) and
  however many windows.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
import numpy as np
import pytest

from tests.service.test_close_reduce import _core
from uldp.client.randomness import RandomSource
from uldp.client.sealing import parse_seal, plaintext, seal, seal_info
from uldp.client.tasks import TaskSpec, compute_report, compute_reports, report_limit
from uldp.client.wire import MAX_ABS_REPORT_VALUE, bearer, device_pb2, device_pb2_grpc
from uldp.collector.mechanisms.validity import report_rule
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import program_for
from uldp.collector.programs.driver import run_program
from uldp.collector.service.closer import INVALID_REPORTS
from uldp.collector.service.shuffled import ForwardedBatch
from uldp.collector.storage import closing as C  # noqa: N812
from uldp.collector.storage import open_database
from uldp.collector.storage.db import PendingReport, now_ms
from uldp.collector.storage.records import pack_values, value_bytes

IA = grpc.StatusCode.INVALID_ARGUMENT

#: (query id, QuerySpec fields): one query per mechanism, all on dataset "x" (the
#: service's CreateQuery lets ``auto`` pick the mechanism, so they are stored as specs)
QUERIES: dict[str, dict[str, Any]] = {
    "ss": dict(kind="distribution", dim=32, method="oracle", oracle="ss"),
    "grr": dict(kind="distribution", dim=6, method="oracle", oracle="grr"),
    "oue": dict(kind="distribution", dim=6, method="oracle", oracle="oue"),
    "olh": dict(kind="distribution", dim=6, method="oracle", oracle="olh"),
    "lap-bins": dict(kind="distribution", dim=6, method="oracle", oracle="laplace"),
    "pm": dict(kind="mean", method="ssl", randomizer="pm"),
    "hm": dict(kind="mean", method="ssl", randomizer="hm"),
    "duchi": dict(kind="mean", method="ssl", randomizer="duchi"),
    "lap-values": dict(kind="mean", method="ssl", randomizer="laplace"),
    "by": dict(kind="mean-by", epsilon=4.0, dim=3, lo=0.0, hi=10.0, by="g", randomizer="hm",
               groups=("a", "b", "c")),
}


def store_query(db: Any, spec: QuerySpec, dataset: str = "x",
                shuffle: dict[str, Any] | None = None) -> None:
    """Store a compiled ``spec`` as CreateQuery stores one (its own mechanism, which the
    service's request leaves to ``auto``); ``shuffle``: its shuffle-mode row."""
    program = program_for(spec)
    row = dict(query_id=spec.query_id, kind=spec.kind, dataset=dataset,
               epsilon=float(spec.epsilon), spec_json=json.dumps(spec.to_dict(), sort_keys=True),
               seed=str(spec.seed), state="running", current_phase=1,
               num_phases=program.num_phases, target_users=int(spec.users),
               phase_timeout_s=600.0, result_json=None, allow_simulated=True)
    also = None if shuffle is None else (lambda conn: db.add_shuffle_query_in(
        conn, spec.query_id, shuffle["min_batch"], shuffle["delta"], shuffle["key_id"]))
    db.create_query(row, program.quotas(), now_ms() + 600_000, also)


def _hostile(task: TaskSpec, good: list[int]) -> list[list[int]]:
    """Reports its device could not have sent, each within the task's range (so only the
    mechanism's rule refuses them)."""
    limit = min(report_limit(task), MAX_ABS_REPORT_VALUE)
    out = []
    for i in range(len(good)):
        for v in (good[i] + 1, good[i] - 1, -1, limit):
            r = list(good)
            r[i] = v
            out.append(r)
        if i + 1 < len(good):
            out.append(good[:i] + [good[i + 1], good[i]] + good[i + 2:])
    rule = report_rule(task)
    assert rule is not None
    bad = [r for r in out if abs(max(r, key=abs)) <= limit and rule.invalid(np.array([r]))[0]]
    return bad[:4]


def _sample(task: TaskSpec) -> tuple[np.ndarray, np.ndarray | None]:
    if task.kind == "distribution":
        return np.arange(8, dtype=float) % task.dim, None
    if task.kind == "mean-by":
        return np.full(8, 4.0), np.arange(8, dtype=float) % 3
    return np.full(8, 0.25), None


def _report(task_msg: Any, values: list[int], token: str = "") -> device_pb2.Report:
    return device_pb2.Report(query_id=task_msg.query_id, phase=task_msg.phase,
                             values=values, task_digest=task_msg.task_digest,
                             device_token=token)


def test_ingest_refuses_what_no_device_sends(start_collector, db_url):
    c = start_collector(db_url=db_url)
    a = c.analyst()
    for qid, kw in QUERIES.items():
        kw = {"epsilon": 1.0, **({"bound": 1.0} if "lo" not in kw else {}), **kw}
        store_query(c.server.db, compile_query(QuerySpec(users=40, samples=8, query_id=qid,
                                                         **kw)).spec)
    ch = c.channel()
    stub = device_pb2_grpc.DeviceServiceStub(ch)
    devices = []
    for _ in range(2):
        tok = stub.Enroll(device_pb2.EnrollRequest(label="t")).token
        got = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x", "g"]),
                            metadata=bearer(tok)).tasks
        devices.append((tok, {t.query_id: t for t in got}))
    assert all(sorted(tasks) == sorted(QUERIES) for _, tasks in devices)
    tok, tasks = devices[0]
    goods: dict[str, list[int]] = {}
    refusals = 0
    for qid, t in sorted(tasks.items()):
        spec = TaskSpec.from_json(t.task_json)
        X, labels = _sample(spec)
        good = compute_report(spec, X, rng=RandomSource.seeded(1), labels=labels).tolist()
        goods[qid] = good
        bad = _hostile(spec, good)
        if qid.startswith("lap-"):
            assert bad == []  # discrete Laplace: every integer within the range is sendable
            continue
        assert bad, qid
        for values in bad:
            before = c.server.db.snapshot()
            with pytest.raises(grpc.RpcError) as ei:
                stub.SubmitReport(device_pb2.SubmitReportRequest(report=_report(t, values)),
                                  metadata=bearer(tok))
            assert ei.value.code() == IA, (qid, ei.value.details())
            assert "not a report of this task" in ei.value.details()
            assert "break the rule" in ei.value.details()
            assert c.server.db.snapshot() == before
            refusals += 1
    assert refusals >= 8
    # the messages name the mechanism's rule
    with pytest.raises(grpc.RpcError) as ei:
        swapped = list(goods["ss"])
        swapped[0], swapped[1] = swapped[1], swapped[0]
        stub.SubmitReport(device_pb2.SubmitReportRequest(report=_report(tasks["ss"], swapped)),
                          metadata=bearer(tok))
    assert "distinct values in increasing order, each in [0, 31]" in ei.value.details()
    # in a batch, the hostile item alone is refused; the device's real reports are taken
    tok2, tasks2 = devices[1]
    items = [_report(tasks2["grr"], [-1], tok2)]
    items += [_report(t, goods[q], tok) for q, t in sorted(tasks.items())]
    r = stub.SubmitReportBatch(device_pb2.SubmitReportBatchRequest(reports=items))
    assert [x.code for x in r.results] == [IA.value[0]] + [0] * len(tasks)
    assert "one value in [0, 5]" in r.results[0].message
    counts = {q.query_id: q.phases[0].received for q in a.list()}
    assert counts == {q: 1 for q in QUERIES}
    ch.close()
    a.close()


def test_a_shuffled_batch_drops_what_no_device_sends(tmp_path):
    """A sealed report that opens to a report its device could not have sent is dropped
    and counted as refused; the batch's other reports are stored."""
    from uldp.collector.security.tokens import AdminAuth, TokenKey
    from uldp.collector.service.core import CollectorCore, CoreConfig

    db = open_database(f"sqlite:///{tmp_path / 'c.db'}")
    core = CollectorCore(db, TokenKey.generate(), AdminAuth("x" * 32), CoreConfig())
    try:
        spec = compile_query(QuerySpec(kind="distribution", epsilon=1.0, bound=1.0,
                                       samples=5, users=400, dim=32, method="oracle",
                                       oracle="ss", query_id="sh")).spec
        store_query(db, spec, shuffle=dict(min_batch=10, delta=1e-9,
                                           key_id=core.seal_keys.current().key_id))
        rt = core.runtime("sh")
        assert rt is not None
        info = core.tasks.task_info(rt, {"grp": 0, "stage": 0, "phase": 1, "slot": 0})
        task = TaskSpec.from_json(info.task_json)
        assert task.seal is not None
        key = parse_seal(task.seal)
        reps = compute_reports(task, np.zeros((12, 5)), RandomSource.seeded(2))
        reps[[2, 7]] = reps[[2, 7]][:, ::-1]  # out of order: no device sends these
        hinfo = seal_info("sh", 1, 0, 0, info.digest)
        sealed = [seal(key, hinfo, plaintext(r, False)) for r in reps]
        out = core.shuffled.forward(ForwardedBatch("0" * 32, "sh", 1, 0, 0, info.digest,
                                                   sealed))
        assert (out.stored, out.refused) == (10, 2)
        assert db.table_counts()["uldp_reports"] == 10
    finally:
        core.stop()
        db.dispose()


# ---- the close of reports stored before the check -------------------------------------
CLOSE_SPECS = {
    "grr": dict(kind="distribution", epsilon=2.0, users=300, samples=5, dim=6,
                method="oracle", oracle="grr"),  # value counts in the database
    "ss": dict(kind="distribution", epsilon=1.0, users=300, samples=5, dim=32,
               method="oracle", oracle="ss"),  # streamed, scatter-added
    "oue": dict(kind="distribution", epsilon=1.0, users=200, samples=5, dim=6,
                method="oracle", oracle="oue"),  # streamed, dense supports
    "olh": dict(kind="distribution", epsilon=1.0, users=200, samples=5, dim=6,
                method="oracle", oracle="olh"),
    "hm": dict(kind="mean", epsilon=1.0, users=300, samples=10, method="ssl",
               randomizer="hm"),  # per-piece moments in the database
    "pm-vector": dict(kind="mean-linf", epsilon=2.0, users=300, samples=10, dim=2,
                      method="ssl", randomizer="pm"),  # streamed, decoded
    "two-stage-grr-duchi": dict(kind="mean", epsilon=1.0, users=400, samples=10,
                                method="two-stage", oracle="grr", randomizer="duchi"),
}


def _close_with_bad_reports(db_url: str, name: str) -> None:
    spec = compile_query(QuerySpec(**CLOSE_SPECS[name], query_id=f"q-{name}")).spec
    db = open_database(db_url)
    core = _core(db, spec)
    rt = core.runtime(spec.query_id)
    assert rt is not None
    rng, data = RandomSource.seeded(3), np.random.default_rng(4)
    bad_total = 0

    def privatize(slots: np.ndarray, task: Any, offsets: Any, acc: Any) -> None:
        nonlocal bad_total
        g, s, phase = rt.program.place(int(slots[0]))
        shape = (slots.size, spec.samples) + ((spec.dim,) if spec.dim > 1
                                              and spec.kind != "distribution" else ())
        X = (data.integers(0, spec.dim, shape).astype(float) if spec.kind == "distribution"
             else data.uniform(-0.9, 0.9, shape))
        reps = compute_reports(task, X, rng, offsets=offsets)
        bad = np.zeros(slots.size, dtype=bool)
        bad[::7] = True  # every 7th report is replaced by one no device sends
        for i in np.flatnonzero(bad):
            reps_i = _hostile(task, reps[i].tolist())
            reps[i] = reps_i[i % len(reps_i)]
        acc.add(reps[~bad], slots[~bad])  # the reference: the valid reports alone
        bad_total += int(bad.sum())
        vb = value_bytes(min(report_limit(task), MAX_ABS_REPORT_VALUE))
        out = db.store_reports([PendingReport(spec.query_id, phase, f"d{int(k)}", g, s,
                                              int(k), pack_values(reps[i], vb), vb)
                                for i, k in enumerate(slots)])
        assert {o.code for o in out} == {"OK"}

    skipped = 0

    def on_close(phase: int, reference: dict[str, Any]) -> None:
        nonlocal skipped
        assert core.close_phase(spec.query_id, phase, force=True)
        got = dict(db.published(spec.query_id, phase))
        skipped += got.pop(INVALID_REPORTS)
        assert json.dumps(got, sort_keys=True) == json.dumps(reference, sort_keys=True)

    try:
        result = run_program(rt.program, privatize, on_close=on_close)
        q = db.get_query(spec.query_id)
        assert q["state"] == "done"
        stored = json.loads(q["result_json"])
        assert stored.pop(INVALID_REPORTS) == skipped == bad_total > 0
        assert json.dumps(stored, sort_keys=True) == json.dumps(result, sort_keys=True)
    finally:
        core.stop()
        db.dispose()


@pytest.mark.parametrize("name", sorted(CLOSE_SPECS))
def test_a_stored_bad_report_is_left_out_not_fatal(db_url, name):
    _close_with_bad_reports(db_url, name)


def test_bad_reports_in_some_windows_only(db_url, monkeypatch):
    """Windows of a few dozen rows: the windows with a bad report are streamed and
    filtered, the others summed in the database; the same bits as the valid reports."""
    monkeypatch.setattr(C, "WINDOW_SLOTS", 37)
    monkeypatch.setattr(C, "WINDOW_BLOCKS", 1)
    for name in ("grr", "hm", "ss"):
        _close_with_bad_reports(db_url, name)
