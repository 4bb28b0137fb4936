"""Closing a phase where the data are (issue 28 item 1): the close that reduces stored
reports window by window — sums in the database, sparse reports streamed in bounded bytes
and scatter-added — publishes exactly what accumulating every report in memory publishes
(the close before schema 4), bit for bit, on SQLite and PostgreSQL, with one window or
many; and a close that cannot succeed fails its query with one clear reason.

The reports are computed with the production device function by the simulation driver,
which accumulates them in memory as the reference; the same reports are stored through
the storage API, packed as the service packs them, and the service's closer closes each
phase from the database."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports, report_limit
from uldp.client.wire import MAX_ABS_REPORT_VALUE
from uldp.collector.planner import QuerySpec
from uldp.collector.programs import program_for
from uldp.collector.programs.driver import run_program
from uldp.collector.security.tokens import AdminAuth, TokenKey
from uldp.collector.service import reduce as R  # noqa: N812
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.storage import closing as C  # noqa: N812
from uldp.collector.storage import open_database
from uldp.collector.storage.db import Database, PendingReport
from uldp.collector.storage.records import pack_values, value_bytes

SPECS = {
    # method two-stage: Laplace bins (column sums) then Laplace values (sums + Gram)
    "mean-two-stage": dict(kind="mean", epsilon=1.0, users=700, samples=50,
                           method="two-stage"),
    "mean-l2": dict(kind="mean-l2", epsilon=2.0, users=600, samples=20, dim=3,
                    method="two-stage"),
    # the default distribution at k = 256: subset selection (streamed, scatter-add)
    "distribution-ss": dict(kind="distribution", epsilon=1.0, users=500, samples=5, dim=256),
    # GRR: value counts in the database
    "distribution-grr": dict(kind="distribution", epsilon=3.0, users=500, samples=5, dim=6,
                             method="oracle", oracle="grr"),
    # several records per device: sparse supports with multiplicities
    "distribution-records": dict(kind="distribution", epsilon=2.0, users=400, samples=8,
                                 dim=12, method="oracle", oracle="ss", records=3),
    # the default mean at ε = 1: HM values (per-piece moments in the database)
    "mean-auto-hm": dict(kind="mean", epsilon=1.0, users=500, samples=30),
    # ε = 0.5: Duchi's bits
    "mean-auto-duchi": dict(kind="mean", epsilon=0.5, users=500, samples=30),
    # per-device layouts: the close needs every report's slot
    "baseline-a": dict(kind="mean-linf", epsilon=1.0, users=400, samples=10, dim=3,
                       method="baseline-a"),
}


def _core(db: Database, spec: QuerySpec, threads: int = 2,
          engine: Any = None) -> CollectorCore:
    core = CollectorCore(db, TokenKey.generate(), AdminAuth("x" * 32), CoreConfig())
    core.closer.engine = engine or R.LocalEngine(threads)
    program = program_for(spec)
    db.create_query(dict(query_id=spec.query_id, kind=spec.kind, dataset="x",
                         epsilon=spec.epsilon, spec_json=json.dumps(spec.to_dict()),
                         seed="0", state="running", current_phase=1,
                         num_phases=program.num_phases, target_users=spec.users,
                         phase_timeout_s=3600.0, result_json=None),
                    program.quotas(), 2**62)
    return core


def run_and_compare(db: Database, spec: QuerySpec, threads: int = 2,
                    engine: Any = None) -> dict[str, Any]:
    """Run ``spec`` through the simulation driver (the in-memory reference), storing every
    report; close each phase from the database and compare what it publishes."""
    core = _core(db, spec, threads, engine)
    rt = core.runtime(spec.query_id)
    assert rt is not None
    rng = RandomSource.seeded(7)
    data = np.random.default_rng(3)
    published: dict[int, Any] = {}

    def privatize(slots: np.ndarray, task: Any, offsets: Any, acc: Any) -> None:
        g, s, phase = rt.program.place(int(slots[0]))
        m = spec.samples
        X = (data.integers(0, spec.dim, size=(slots.size, m)).astype(float)
             if spec.kind == "distribution" else
             data.uniform(-0.8, 0.9, size=(slots.size, m) if spec.dim == 1
                          else (slots.size, m, spec.dim)))
        reps = compute_reports(task, X, rng, offsets=offsets)
        acc.add(reps, slots)
        vb = value_bytes(min(report_limit(task), MAX_ABS_REPORT_VALUE))
        out = db.store_reports([PendingReport(spec.query_id, phase, f"d{int(k)}", g, s,
                                              int(k), pack_values(reps[i], vb), vb)
                                for i, k in enumerate(slots)])
        assert {o.code for o in out} == {"OK"}

    def on_close(phase: int, reference: dict[str, Any]) -> None:
        assert core.close_phase(spec.query_id, phase, force=True)
        got = db.published(spec.query_id, phase)
        assert json.dumps(got, sort_keys=True) == json.dumps(reference, sort_keys=True)
        published[phase] = got

    result = run_program(rt.program, privatize, on_close=on_close)
    stored = json.loads(db.get_query(spec.query_id)["result_json"])
    assert json.dumps(stored, sort_keys=True) == json.dumps(result, sort_keys=True)
    core.closer.stop()
    core.writer.close()  # (an engine passed in is the caller's to close)
    return published


@pytest.mark.parametrize("name", sorted(SPECS))
def test_close_from_the_database_is_bit_identical(db_url, name):
    db = open_database(db_url)
    try:
        run_and_compare(db, QuerySpec(**SPECS[name], query_id=f"q-{name}"))
    finally:
        db.dispose()


def test_many_windows_many_threads_same_bits(db_url, monkeypatch):
    """Windows of a few dozen rows (tens of windows per phase), reduced by one thread or
    by three: the same bits as one pass over every report in memory."""
    monkeypatch.setattr(C, "WINDOW_SLOTS", 37)
    monkeypatch.setattr(C, "WINDOW_BLOCKS", 1)
    db = open_database(db_url)
    try:
        for threads in (1, 3):
            for name in ("mean-two-stage", "distribution-ss"):
                spec = QuerySpec(**SPECS[name], query_id=f"w{threads}-{name}")
                run_and_compare(db, spec, threads)
                windows = db.close_windows(spec.query_id, 1, spec.users, 8)
                assert len(windows) > 5
    finally:
        db.dispose()


def test_float_decoder_close_matches_in_memory(db_url):
    """Vectors of a scalar randomizer's decoded values are float sums: the same windows
    give the same bits on every engine (test_dask_close); against one in-memory pass they
    agree to rounding."""
    spec = QuerySpec(kind="mean-linf", epsilon=2.0, users=500, samples=30, dim=2,
                     method="ssl", randomizer="pm", query_id="q-pm")
    db = open_database(db_url)
    try:
        core = _core(db, spec)
        rt = core.runtime(spec.query_id)
        rng = RandomSource.seeded(1)
        ref: dict[int, Any] = {}

        def privatize(slots, task, offsets, acc):
            reps = compute_reports(task, np.random.default_rng(2).uniform(
                -1, 1, (slots.size, spec.samples, spec.dim)), rng)
            acc.add(reps, slots)
            g, s, p = rt.program.place(int(slots[0]))
            vb = value_bytes(min(report_limit(task), MAX_ABS_REPORT_VALUE))
            db.store_reports([PendingReport(spec.query_id, p, f"d{k}", g, s, int(k),
                                            pack_values(reps[i], vb), vb)
                              for i, k in enumerate(slots)])

        def on_close(phase, reference):
            assert core.close_phase(spec.query_id, phase, force=True)
            ref[phase] = reference
            got = db.published(spec.query_id, phase)["estimate"]
            want = reference["estimate"]
            assert got["values"] == pytest.approx(want["values"], rel=1e-12)
            assert got["std_error"] == pytest.approx(want["std_error"], rel=1e-9)
        run_program(rt.program, privatize, on_close=on_close)
        core.stop()
    finally:
        db.dispose()


# ---- closes that cannot succeed ---------------------------------------------------------
def _limit_sqlite(db: Database, max_bytes: int) -> None:
    """Lower SQLite's string/blob length limit on every new connection (an engine limit
    the old close's concatenation of a whole window ran into at ~1 GB)."""
    event.listen(db.engine, "connect",
                 lambda c, _r: c.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_bytes))
    db.engine.dispose()


def _store_ss(db: Database, spec: QuerySpec) -> CollectorCore:
    core = _core(db, spec)
    rt = core.runtime(spec.query_id)
    task = rt.program.task(1, 0, 0, {})
    rng = RandomSource.seeded(5)
    reps = compute_reports(task, np.random.default_rng(0).integers(
        0, spec.dim, (spec.users, spec.samples)).astype(float), rng)
    vb = value_bytes(report_limit(task))
    db.store_reports([PendingReport(spec.query_id, 1, f"d{k}", 0, 0, k,
                                    pack_values(reps[k], vb), vb) for k in range(spec.users)])
    return core


def test_windows_stay_below_the_engine_limit(tmp_path):
    """SQLite, k = 2048, ε = 1 (subset selection of 551 values): the old close
    concatenated a window's payloads in SQLite and hit "string or blob too big" once they
    passed the engine's limit (~1 GB: > ~113 k reports). With the limit lowered to 1 MB,
    2 600 such reports (2.9 MB) now close, in windows far below it."""
    spec = QuerySpec(kind="distribution", epsilon=1.0, users=2600, samples=3, dim=2048,
                     query_id="q-big")
    db = open_database(str(tmp_path / "big.db"))
    try:
        core = _store_ss(db, spec)
        _limit_sqlite(db, 1 << 20)
        assert core.close_phase("q-big", 1, force=True)
        pub = db.published("q-big", 1)
        assert pub["reports"] == 2600
        assert db.get_query("q-big")["state"] == "done"
        core.stop()
    finally:
        db.dispose()


def test_a_close_that_cannot_succeed_fails_its_query_once(tmp_path):
    """The engine refuses to return a report at all (its limit lowered below one stored
    report): the close fails the query at once with the database's reason — no retry
    every lease, nothing published."""
    spec = QuerySpec(kind="distribution", epsilon=1.0, users=300, samples=3, dim=2048,
                     query_id="q-toobig")
    db = open_database(str(tmp_path / "toobig.db"))
    try:
        core = _store_ss(db, spec)
        _limit_sqlite(db, 1000)  # one report is 551 × 2 bytes
        assert not core.close_phase("q-toobig", 1, force=True)
        q = db.get_query("q-toobig")
        assert q["state"] == "failed"
        assert q["error"] == ("closing phase 1 failed: the database cannot read its reports "
                              "(string or blob too big)")
        assert [p["state"] for p in db.get_phases("q-toobig")] == ["cancelled"]
        assert db.phases_due() == []  # nothing left to retry
        core.stop()
    finally:
        db.dispose()


def test_a_close_that_keeps_failing_stops_after_its_attempts(tmp_path):
    """A failure of the moment (here: the database is locked by another writer for
    longer than the busy timeout) leaves the phase for a retry; once
    MAX_CLOSE_ATTEMPTS closes began and failed, the next claim fails the query, naming
    the last error."""
    from uldp.collector.service.closer import MAX_CLOSE_ATTEMPTS
    spec = QuerySpec(kind="distribution", epsilon=1.0, users=60, samples=3, dim=16,
                     query_id="q-flaky")
    db = open_database(str(tmp_path / "flaky.db"))
    try:
        core = _store_ss(db, spec)
        core.closer.engine = _Broken()
        for _ in range(MAX_CLOSE_ATTEMPTS):
            assert not core.close_phase("q-flaky", 1, force=True)
            assert db.get_query("q-flaky")["state"] == "running"
            db.expire_leases(lambda _c: True, keep="")  # the lease ran out
        assert not core.close_phase("q-flaky", 1, force=True)
        q = db.get_query("q-flaky")
        assert q["state"] == "failed"
        assert q["error"].startswith(f"closing phase 1 failed {MAX_CLOSE_ATTEMPTS} times; "
                                     "last error: database is locked")
        core.stop()
    finally:
        db.dispose()


class _Broken:
    """An engine whose database is always locked by another writer: a real ``database is
    locked`` from SQLite (busy timeout 0)."""

    def run(self, db, tasks, check):
        path = db.url.database
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            c = sqlite3.connect(path, timeout=0, isolation_level=None)
            c.execute("BEGIN IMMEDIATE")
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        yield R.Partial({})
