"""Public ranges ``[lo, hi]`` in the query, the plan and the result (issue 29, item 1).

* A query with the range ``[lo, hi]`` is, report for report, the query of ``[-D, D]``
  (``D = hi/2 − lo/2``) over the values moved by the centre ``c = lo/2 + hi/2``: devices
  centre on the task's range, the collector adds ``c`` back (docs/device-protocol.md §12.3).
* Clamping made visible without leaking: a two-stage result carries the share of users its
  stage I puts at each end of the range, with an advisory when it is large (raw step counts
  under ``--bound 20`` used to give ``+17.49 [13.39, 20.00]`` and no word), and a plan whose
  interval spans most of the range says there are too few users (3 users gave ``+20.0
  [-20, 20]`` with no advisory) — in the preview and in the result.
Fixed seeds, in-process (the production device and collector code through the simulation
driver).
"""

from __future__ import annotations

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.collector.analyst.preview import preview_message
from uldp.collector.datasets import FleetData
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.service.client import QueryRequest
from uldp.collector.simulation.simulate import run_query


def _population(lo: float, hi: float, m: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mu = rng.uniform(lo + 0.2 * (hi - lo), lo + 0.7 * (hi - lo), (600, 1))
    return np.clip(mu + rng.normal(0, 0.15 * (hi - lo), (600, m)), lo - 5, hi + 5)


@pytest.mark.parametrize("method", ["ssl", "two-stage", "baseline-b"])
def test_a_ranged_query_is_the_centred_query_report_for_report(method):
    lo, hi, m = 0.0, 120.0, 16
    X = _population(lo, hi, m, 1)
    c, D = lo / 2 + hi / 2, hi / 2 - lo / 2
    ranged = QuerySpec(kind="mean", epsilon=1.0, users=600, samples=m, lo=lo, hi=hi,
                       method=method, seed=4)
    centred = QuerySpec(kind="mean", epsilon=1.0, users=600, samples=m, bound=D,
                        method=method, seed=4)
    assert ranged.bound == D and ranged.value_range == (lo, hi)
    a = run_query(ranged, FleetData(lambda k: X[:k], np.zeros(1)), RandomSource.seeded(9))
    b = run_query(centred, FleetData(lambda k: X[:k] - c, np.zeros(1)), RandomSource.seeded(9))
    # the same reports: the estimate is the centred one moved by c, the same standard error
    assert a.std_error.tolist() == b.std_error.tolist()
    assert np.allclose(a.values, b.values + c, rtol=0, atol=1e-12)
    assert np.allclose(a.ci_low, np.maximum(b.ci_low + c, lo), rtol=0, atol=1e-12)
    assert np.allclose(a.ci_high, np.minimum(b.ci_high + c, hi), rtol=0, atol=1e-12)
    truth = float(np.mean(np.clip(X, lo, hi).mean(axis=1)))
    assert a.ci_low[0] <= truth <= a.ci_high[0] and lo <= a.ci_low[0] <= a.ci_high[0] <= hi


def test_the_task_states_the_range_and_a_symmetric_range_keeps_the_old_bytes():
    ranged = compile_query(QuerySpec(kind="mean-linf", dim=2, epsilon=1.0, users=200,
                                     samples=4, lo=-0.25, hi=1.75, method="ssl"))
    t = ranged.task_for(0, 0)
    assert t.range == (-0.25, 1.75) and t.bound == 1.0 and '"range":[-0.25,1.75]' in t.to_json()
    sym = compile_query(QuerySpec(kind="mean", epsilon=1.0, users=200, samples=4, lo=-2.0,
                                  hi=2.0, method="ssl")).task_for(0, 0)
    old = compile_query(QuerySpec(kind="mean", epsilon=1.0, users=200, samples=4, bound=2.0,
                                  method="ssl")).task_for(0, 0)
    assert sym.to_json() == old.to_json() and '"range"' not in old.to_json()


def test_values_on_the_wrong_scale_are_flagged_in_the_result():
    """Raw step counts (4 000–10 000) under the range [-20, 20]: every user at the top end."""
    rng = np.random.default_rng(3)
    steps = rng.uniform(4000, 10000, (2000, 100))
    spec = QuerySpec(kind="mean", epsilon=2.0, users=2000, samples=100, bound=20.0,
                     method="two-stage", seed=1)
    est = run_query(spec, FleetData(lambda k: steps[:k], np.zeros(1)), RandomSource.seeded(2))
    low, high = est.extra["edge_share"][0]
    assert high > 0.8 and low < 0.1, est.extra["edge_share"]
    assert any("end of the range [-20, 20]" in a for a in est.extra["advisories"])
    # users inside the range: no such advisory
    inside = rng.uniform(-5, 5, (2000, 100))
    ok = run_query(spec, FleetData(lambda k: inside[:k], np.zeros(1)), RandomSource.seeded(2))
    assert max(ok.extra["edge_share"][0]) < 0.2 and not ok.extra.get("advisories")


def test_too_few_users_are_said_before_and_after_the_run():
    req = QueryRequest(kind="mean", epsilon=1.0, dataset="x", users=3, samples=10, bound=20.0)
    p = preview_message(req.message())
    assert any("too few users" in a for a in p.advisories), p.advisories
    spec = QuerySpec(kind="mean", epsilon=1.0, users=3, samples=10, bound=20.0, method="ssl")
    est = run_query(spec, FleetData(lambda k: np.full((k, 10), 5.0), np.full(1, 5.0)),
                    RandomSource.seeded(1))
    assert any("too few users" in a for a in est.extra["advisories"])
    many = preview_message(QueryRequest(kind="mean", epsilon=1.0, dataset="x", users=20_000,
                                        samples=10, bound=20.0).message())
    assert not any("too few users" in a for a in many.advisories)


def test_the_preview_runs_its_reference_population_at_the_centre_of_the_range():
    """The simulated width of a two-stage preview: users alike at the range's centre (at 0,
    an end of [0, 120], stage I would see every user at the edge)."""
    at = preview_message(QueryRequest(kind="mean", epsilon=1.0, dataset="x", users=4000,
                                      samples=400, bound=0.0, lo=0.0, hi=120.0,
                                      method="two-stage").message())
    sym = preview_message(QueryRequest(kind="mean", epsilon=1.0, dataset="x", users=4000,
                                       samples=400, bound=60.0, method="two-stage").message())
    assert at.simulated_half_width is not None and sym.simulated_half_width is not None
    assert abs(at.simulated_half_width[0] / sym.simulated_half_width[0] - 1) < 1e-9
