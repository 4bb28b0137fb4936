"""Hostile public parameters and failing computations on a real Device (issue 17, items 1
and 3): whether a device reports depends on public facts only, a failed task never blocks
the others, and no data is an empty dataset.

The device polls a collector stand-in on loopback (``tests/device_recorder.py``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import uldp.client.tasks as tasks_mod
from uldp.client.device import Device
from uldp.client.kinds.base import Kind
from uldp.client.mechanisms.two_stage import stage1_reports
from uldp.client.params import Alg1Params, bin_index
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskRefused, TaskSpec, report_length

from .device_recorder import raw_task, serve_recorder, wire_task

MEAN_1 = TaskSpec(query_id="q", kind="mean", method="two-stage", stage=1, epsilon=1.0,
                  eps_c=1.0, components=(0,), bound=1.0, bins=((1.0, 0.5, 4),))
LINF_0 = TaskSpec(query_id="q", kind="mean-linf", method="ssl", stage=0, epsilon=2.0,
                  eps_c=1.0, components=(0, 1), dim=2, bound=1.0,
                  intervals=((-1.0, 1.0), (-1.0, 1.0)))
HOSTILE_GRID = json.loads(MEAN_1.to_json()) | {"bins": [[1.0, 2.0**-63, 4]]}


@pytest.fixture(scope="module")
def recorder():
    with serve_recorder() as rec:
        yield rec


def _device(chan, tmp, name, budget=100.0) -> Device:
    return Device("unused:1", tmp / name, budget=budget, channel=chan,
                  rng=RandomSource.seeded(7), simulation=True, durable=False)


def _hostile_msg(query_id: str):
    return raw_task(json.dumps(HOSTILE_GRID, sort_keys=True), query_id, 4)


def test_a_grid_whose_bins_do_not_cover_the_support_is_refused():
    """[[1, 2^-63, 4]]: 2D/h = 2^64 bins of width h, not 4 (protocol §14.1 step 10)."""
    with pytest.raises(TaskRefused) as err:
        report_length(TaskSpec.from_dict(HOSTILE_GRID))
    assert err.value.code == "param"
    for bins in ([[1.0, 0.5, 5]], [[1.0, 0.5, 3]], [[1.0, 1e-300, 1]], [[1e308, 1e-9, 4]]):
        with pytest.raises(TaskRefused) as err:
            report_length(TaskSpec.from_dict(HOSTILE_GRID | {"bins": bins}))
        assert err.value.code == "param", bins
    ok = HOSTILE_GRID | {"bins": [[1.0, 2.0**-15, 65536]]}
    assert report_length(TaskSpec.from_dict(ok)) == 65536


def test_the_bin_index_is_capped_before_any_integer_conversion():
    p = Alg1Params(1.0, 2.0**-63, 0.0, 4)  # a grid no device accepts, for the mechanism
    y = np.array([0.5, 1.0, 1e308, -1.0, 0.0, -0.75])
    assert bin_index(y, p).tolist() == [4, 4, 4, 1, 4, 4]
    rep = stage1_reports(np.array([[0.5]]), [p], 1.0, RandomSource.seeded(1))
    assert rep.shape == (1, 4)


@pytest.mark.parametrize("values", [[-0.5, -0.25], [0.5, 0.25], [], None])
def test_whether_the_device_reports_does_not_depend_on_its_data(recorder, tmp_path, values):
    """The hostile grid is refused before any charge whatever the data (it used to make a
    device with mean >= 0 raise and wedge, while mean < 0 reported); the benign task behind
    it is answered, and the next poll works."""
    svc, chan = recorder
    svc.tasks, svc.reports, svc.calls = [_hostile_msg("qh"), wire_task(LINF_0, "qb")], [], []
    dev = _device(chan, tmp_path, "d")
    dev.add_dataset("data", None if values is None else [[v, v] for v in values], dim=2)
    r = dev.poll()
    assert [q for q, _ in r.refused] == ["qh"] and r.submitted == ["qb"] and not r.failed
    assert [rep.query_id for rep in svc.reports] == ["qb"]
    assert dev.ledger.get("qh") is None
    svc.tasks = [_hostile_msg("qh")]
    assert dev.poll().refused and len(svc.reports) == 1
    dev.close()


def _failing_statistics(monkeypatch, when) -> None:
    orig = Kind.statistics

    def statistics(self, task, X, valid):
        if task.kind == "mean" and when(X):
            raise RuntimeError("a bug in the statistic")
        return orig(self, task, X, valid)

    monkeypatch.setattr(Kind, "statistics", statistics)


def test_a_failed_computation_sends_the_precomputed_backstop(recorder, tmp_path, monkeypatch):
    svc, chan = recorder
    _failing_statistics(monkeypatch, lambda X: X.shape[1] > 0)  # fails on data only
    svc.tasks, svc.reports = [wire_task(MEAN_1, "qm"), wire_task(MEAN_1, "qm2")], []
    dev = _device(chan, tmp_path, "d")
    dev.add_dataset("data", [0.5, 0.25])
    before = tasks_mod.FALLBACKS
    r = dev.poll()
    assert r.submitted == ["qm", "qm2"] and before + 2 == tasks_mod.FALLBACKS
    assert [len(x.values) for x in svc.reports] == [4, 4]
    assert dev.ledger.get("qm").state == "acknowledged"
    dev.close()


def test_a_task_whose_backstop_fails_is_refused_before_the_charge(recorder, tmp_path,
                                                                 monkeypatch):
    """The backstop is computed from public facts before the charge: if it cannot be, the
    task is refused (code param) for every dataset alike, and the others go on."""
    svc, chan = recorder
    _failing_statistics(monkeypatch, lambda X: True)
    outcomes = []
    for values in ([0.5], [-0.5], []):
        svc.tasks, svc.reports = [wire_task(MEAN_1, "qm"), wire_task(MEAN_1, "qm2")], []
        dev = _device(chan, tmp_path, f"d{len(outcomes)}")
        dev.add_dataset("data", values)
        r = dev.poll()
        outcomes.append(([q for q, _ in r.refused], r.submitted, len(svc.reports)))
        assert dev.ledger.spent_units() == 0
        dev.close()
    assert outcomes == [(["qm", "qm2"], [], 0)] * 3


def test_an_entry_that_cannot_be_recomputed_does_not_wedge_the_device(recorder, tmp_path):
    """A charged task left reserved (a crash before its report was stored) that this SDK
    can no longer compute: every poll notes it in ``failed`` and answers the other tasks."""
    svc, chan = recorder
    dev = _device(chan, tmp_path, "d")
    dev.add_dataset("data", [0.5])
    hostile = _hostile_msg("qh")
    dev.ledger.reserve("qh", hostile.task_digest, 1, 1 << 24, hostile.SerializeToString())
    for q in ("q1", "q2"):
        svc.tasks, svc.reports = [wire_task(MEAN_1, q)], []
        r = dev.poll()
        assert r.submitted == [q] and [f for f, _ in r.failed] == ["qh"]
        assert [rep.query_id for rep in svc.reports] == [q]
    assert dev.ledger.get("qh").state == "reserved"
    dev.close()


@pytest.mark.parametrize("kind_task,dim", [(MEAN_1, None), (LINF_0, 2)])
def test_no_data_registers_an_empty_dataset(recorder, tmp_path, kind_task, dim):
    """``add_dataset(name, None)`` is the empty dataset (issue 17, item 3)."""
    svc, chan = recorder
    sent = []
    for samples in (None, [] if dim is None else np.zeros((0, dim))):
        svc.tasks, svc.reports, svc.calls = [wire_task(kind_task, "q")], [], []
        dev = _device(chan, tmp_path, f"d{len(sent)}")
        schema = dev.add_dataset("data", samples, dim=dim)
        assert schema.name == "data" and dev.datasets == ["data"]
        r = dev.poll()
        sent.append((r.submitted, list(svc.calls), [list(x.values) for x in svc.reports]))
        dev.close()
    assert sent[0] == sent[1] and sent[0][0] == ["q"]


# ---- public ranges [lo, hi] (issue 29) ---------------------------------------------------
RANGED = TaskSpec(query_id="q", kind="mean", method="ssl", stage=0, epsilon=1.0, eps_c=1.0,
                  components=(0,), bound=60.0, range=(0.0, 120.0), intervals=((-60.0, 60.0),))
HOSTILE_RANGES = [  # (range, bound): each breaks one rule of protocol §14.1 step 8
    ([5.0, 5.0], 0.0), ([5.0, 5.0], 1.0),  # lo = hi
    ([120.0, 0.0], 60.0),  # inverted
    ([-1.7e308, 1.7e308], 1.7e308),  # wider than the largest double
    ([0.0, 5e-324], 5e-324),  # tiny: hi/2 - lo/2 is 0, no positive bound fits it
    ([0.0, 120.0], 60.000000000000014),  # bound off by a few ulps
    ([0.0, 120.0], None),  # no bound
]


@pytest.mark.parametrize("values", [[30.0, 150.0], [-1e308, np.nan], []])
def test_hostile_ranges_are_refused_before_any_charge_whatever_the_data(recorder, tmp_path,
                                                                       values):
    """lo = hi, inverted, huge, tiny, a bound that is not hi/2 - lo/2: refused (code param)
    before the ledger is touched, for every dataset alike; the ranged task behind them is
    reported, and its clamping is counted locally (never sent)."""
    svc, chan = recorder
    base = json.loads(RANGED.to_json())
    msgs = [raw_task(json.dumps(base | {"range": r, "bound": b}, sort_keys=True), f"h{i}", 1)
            for i, (r, b) in enumerate(HOSTILE_RANGES)]
    svc.tasks, svc.reports = [*msgs, wire_task(RANGED, "ok")], []
    dev = _device(chan, tmp_path, "d")
    dev.add_dataset("data", values)
    r = dev.poll()
    assert sorted(q for q, _ in r.refused) == sorted(m.query_id for m in msgs)
    assert r.submitted == ["ok"] and [x.query_id for x in svc.reports] == ["ok"]
    assert all(dev.ledger.get(m.query_id) is None for m in msgs)
    assert dev.ledger.spent_units() == 2**24  # the accepted task only
    finite = [v for v in values if np.isfinite(v)]
    assert dev.clamped["ok"] == sum(not 0 <= v <= 120 for v in finite)
    assert "clamped" not in repr(svc.reports[0])  # the count stays on the device
    dev.close()
