"""The close's per-window reduction on a Dask cluster (issue 28 item 4): a LocalCluster of
worker processes reduces the windows (each worker opens the database itself), the closer
merges the partials in window order, and the result is the in-process close's bit for
bit — exact sums and float sums alike — on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports, report_limit
from uldp.client.wire import MAX_ABS_REPORT_VALUE
from uldp.collector.errors import OperatorError
from uldp.collector.planner import QuerySpec
from uldp.collector.service.reduce import LocalEngine, PhaseWork, close_phase_accumulators
from uldp.collector.storage import closing as C  # noqa: N812
from uldp.collector.storage import open_database
from uldp.collector.storage.db import PendingReport
from uldp.collector.storage.records import pack_values, value_bytes

from .test_close_reduce import SPECS, _core, run_and_compare

distributed = pytest.importorskip("dask.distributed")


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes, one thread each (torn down with the module)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        yield client


def _store_phase1(db, spec, bad_every=0):
    """Store phase 1's reports (``bad_every``: every such report's first integer set to
    −1, which no device of these specs sends) through the storage API."""
    core = _core(db, spec)
    rt = core.runtime(spec.query_id)
    rng = RandomSource.seeded(11)
    data = np.random.default_rng(4)
    for g, s, _ in rt.program.cells(1):
        task = rt.program.task(1, g, s, {})
        slots = [k for k in range(spec.users) if rt.program.place(k)[:2] == (g, s)]
        shape = (len(slots), spec.samples) if spec.dim == 1 else (len(slots), spec.samples,
                                                                   spec.dim)
        reps = compute_reports(task, data.uniform(-1, 1, shape), rng)
        if bad_every:
            reps[::bad_every, 0] = -1
        vb = value_bytes(min(report_limit(task), MAX_ABS_REPORT_VALUE))
        db.store_reports([PendingReport(spec.query_id, 1, f"d{k}", g, s, k,
                                        pack_values(reps[i], vb), vb)
                          for i, k in enumerate(slots)])
    return core, rt


@pytest.mark.parametrize("spec", [
    # float sums of a vector of PM values: the same bits only with the same windows
    dict(kind="mean-l2", epsilon=4.0, users=600, samples=20, dim=3, method="ssl",
         randomizer="pm"),
    # Laplace bins (exact sums in the database) of a two-stage mean's phase 1
    dict(kind="mean", epsilon=1.0, users=700, samples=50, method="two-stage"),
])
def test_dask_close_equals_in_process_close(cluster, db_url, monkeypatch, spec):
    monkeypatch.setattr(C, "WINDOW_SLOTS", 50)  # many windows (computed by the closer)
    monkeypatch.setattr(C, "WINDOW_BLOCKS", 1)
    from uldp.collector.service.dask_close import DaskEngine

    db = open_database(db_url)
    try:
        q = QuerySpec(**spec, query_id="q-dask")
        core, rt = _store_phase1(db, q)
        work = PhaseWork(db_url, q.query_id, 1, json.dumps(q.to_dict(), sort_keys=True),
                         "{}")
        local = close_phase_accumulators(db, work, q.users, LocalEngine(2), lambda: None)
        dist = close_phase_accumulators(db, work, q.users, DaskEngine(cluster), lambda: None)
        assert local.reports == dist.reports == sum(n for *_, n in rt.program.cells(1))
        assert local.skipped == dist.skipped == 0
        a = rt.program.close(1, local.accs, {})
        b = rt.program.close(1, dist.accs, {})
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        core.stop()
    finally:
        db.dispose()


def test_dask_close_leaves_out_the_same_bad_reports(cluster, tmp_path, monkeypatch):
    """Reports stored without ingest's check (a PM cell of −1): the Dask close leaves out
    and counts exactly what the in-process close does, and the rest gives the same bits."""
    monkeypatch.setattr(C, "WINDOW_SLOTS", 50)
    monkeypatch.setattr(C, "WINDOW_BLOCKS", 1)
    from uldp.collector.service.dask_close import DaskEngine

    url = f"sqlite:///{tmp_path / 'bad.db'}"
    db = open_database(url)
    try:
        q = QuerySpec(kind="mean-l2", epsilon=4.0, users=300, samples=20, dim=3,
                      method="ssl", randomizer="pm", query_id="q-bad")
        core, rt = _store_phase1(db, q, bad_every=9)
        work = PhaseWork(url, q.query_id, 1, json.dumps(q.to_dict(), sort_keys=True), "{}")
        local = close_phase_accumulators(db, work, q.users, LocalEngine(2), lambda: None)
        dist = close_phase_accumulators(db, work, q.users, DaskEngine(cluster), lambda: None)
        assert local.skipped == dist.skipped > 0
        assert local.reports == dist.reports == q.users - local.skipped
        a = rt.program.close(1, local.accs, {})
        b = rt.program.close(1, dist.accs, {})
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        core.stop()
    finally:
        db.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("name", ["distribution-ss", "mean-auto-hm", "baseline-a"])
def test_service_closes_on_dask_bit_identical(cluster, postgres, name):
    """The service's closer with the Dask engine, phase after phase: what it publishes is
    what accumulating every report in memory publishes."""
    from uldp.collector.service.dask_close import DaskEngine

    db = open_database(postgres.new_database())
    try:
        run_and_compare(db, QuerySpec(**SPECS[name], query_id=f"d-{name}"),
                        engine=DaskEngine(cluster))
    finally:
        db.dispose()


def test_unreachable_scheduler_is_one_clear_line():
    from uldp.collector.service.dask_close import dask_client

    with pytest.raises(OperatorError, match=r"--dask-scheduler tcp://127\.0\.0\.1:9: cannot"):
        dask_client("tcp://127.0.0.1:9", timeout_s=1.0)
