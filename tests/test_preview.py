"""The console's "before you run" preview (``uldp.collector.analyst.preview``) against the
interval widths the demo's queries realise: within 15 % (median of the runs, widths averaged
over a query's components), as ``bench/preview_width.py`` measures with 20 runs
(``bench/results/preview_width.md``); here 5 runs per query, through the same code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from uldp.client.wire import analyst_pb2
from uldp.collector.analyst.preview import preview_message
from uldp.collector.simulation.demo import DEMO_QUERIES

BENCH = Path(__file__).resolve().parent.parent / "bench" / "preview_width.py"


def _bench():
    spec = importlib.util.spec_from_file_location("preview_width", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(DEMO_QUERIES)),
                         ids=[q[0] for q in DEMO_QUERIES])
def test_preview_is_within_15_percent_of_the_demo_queries(i):
    kind, dim, dist = DEMO_QUERIES[i]
    row = _bench().one_query(i, kind, dim, dist, runs=5)
    assert abs(row["ratio"] - 1) <= 0.15, row


def test_preview_of_a_two_stage_plan_runs_the_plan():
    msg = analyst_pb2.CreateQueryRequest(kind="mean", epsilon=2.0, dataset="d", users=3000,
                                         samples=100, dim=1, bound=1.0, method="two-stage")
    p = preview_message(msg)
    assert p.simulated_half_width is not None and p.worst_half_width is None
    assert p.likely_half_width == p.simulated_half_width and "two-stage" in p.note
    fast = preview_message(msg, simulate=False)
    assert fast.simulated_half_width is None and fast.half_width == p.half_width
    assert sum(p.phases) == 3000 and len(p.phases) == 2
