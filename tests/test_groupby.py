"""Group-by with private membership (issue 29, item 2): kind ``mean-by`` on the device,
method ``grouped-ssl`` on the collector.

* Coverage: a grouped mean over 4 groups of unequal size with simulated users (the
  production device function through the simulation driver): every group's mean interval
  and share interval holds its truth.
* Privacy: the report of a device in group A and the same device in group B (and with other
  values, and with no group at all) are within ε — an exact likelihood-ratio audit of the
  real device function, probes far in the tails included.
* The device's group is the most frequent usable code of its categorical dataset
  (``group_of``); the report has the same length and spends the same ε whatever the group.
Fixed seeds, in-process.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from uldp.client.kinds.grouped import group_of
from uldp.client.mechanisms.two_stage import stage2_log_likelihood
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskRefused, TaskSpec, compute_report, task_epsilon, validate_task
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import MeanEstProgram
from uldp.collector.programs.driver import run_program

GROUPS = ("de", "fr", "it", "es")
SHARES = np.array([0.4, 0.3, 0.2, 0.1])
MEANS = np.array([30.0, 60.0, 90.0, 45.0])


def _fleet(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (value, group code) of n users and the truth: each group's mean of user means
    (values clipped to [0, 120]) and its share."""
    rng = np.random.default_rng(seed)
    g = rng.choice(len(GROUPS), size=n, p=SHARES)
    mu = MEANS[g] + rng.normal(0, 10, n)
    X = np.clip(mu[:, None] + rng.normal(0, 15, (n, m)), -10, 140)
    rows = np.stack([X, np.repeat(g[:, None].astype(float), m, axis=1)], axis=2)
    user = np.clip(X, 0, 120).mean(axis=1)
    truth = np.array([user[g == k].mean() for k in range(len(GROUPS))])
    share = np.array([(g == k).mean() for k in range(len(GROUPS))])
    return rows, truth, share


def _run(spec: QuerySpec, rows: np.ndarray, seed: int) -> Estimate:
    """The query over the users of ``rows`` through the production program and device
    function (labels = the rows' group codes)."""
    from uldp.client.tasks import compute_reports

    program = MeanEstProgram(spec)
    rng = RandomSource.seeded(f"groupby:{seed}")

    def privatize(slots, task, offsets, acc):
        X = rows[slots]
        acc.add(compute_reports(task, X[..., 0], rng, labels=X[..., 1]))

    return Estimate.from_dict(run_program(program, privatize))


def test_every_group_interval_covers_its_truth():
    n, m = 20_000, 8
    rows, truth, share = _fleet(n, m, 1)
    spec = QuerySpec(kind="mean-by", epsilon=4.0, users=n, samples=m, dim=len(GROUPS),
                     lo=0.0, hi=120.0, by="country", groups=GROUPS, seed=3)
    plan = compile_query(spec)
    assert plan.spec.method == "grouped-ssl" and plan.auto["chosen"] == "grouped-ssl"
    est = _run(plan.spec, rows, 1)
    G = len(GROUPS)
    mean, share_hat = est.values[:G], est.values[G:]
    lo, hi = est.ci_low, est.ci_high
    assert est.extra["groups"] == list(GROUPS)
    for g in range(G):
        assert lo[g] <= truth[g] <= hi[g], (GROUPS[g], lo[g], truth[g], hi[g])
        assert lo[G + g] <= share[g] <= hi[G + g], (GROUPS[g], share_hat[g], share[g])
        assert 0 <= lo[g] <= mean[g] <= hi[g] <= 120
    # informative: the largest group's interval is a small part of the range
    assert hi[0] - lo[0] < 0.2 * 120
    counts = est.extra["counts_by_group"]
    assert sum(counts["values"]) == pytest.approx(n * share_hat.sum())


def test_coverage_over_seeds_is_near_nominal():
    """Fieller's intervals over 12 seeds × 4 groups (a cheap check; the study is larger)."""
    n, m, hits, total = 6000, 4, 0, 0
    for seed in range(12):
        rows, truth, _ = _fleet(n, m, 100 + seed)
        spec = QuerySpec(kind="mean-by", epsilon=2.0, users=n, samples=m, dim=len(GROUPS),
                         lo=0.0, hi=120.0, by="country", groups=GROUPS, seed=seed)
        est = _run(compile_query(spec).spec, rows, seed)
        G = len(GROUPS)
        hits += int(np.sum((est.ci_low[:G] <= truth) & (truth <= est.ci_high[:G])))
        total += G
    assert hits / total >= 0.85, hits / total


def _task(eps: float = 1.0, G: int = 3) -> TaskSpec:
    plan = compile_query(QuerySpec(kind="mean-by", epsilon=eps, users=3000, samples=6,
                                   dim=G, lo=0.0, hi=120.0, by="country", seed=1))
    return plan.task_for(0, 0)


def _loglik(task: TaskSpec, rows: np.ndarray, z: np.ndarray) -> float:
    kind = validate_task(task)
    X = np.asarray(rows, dtype=float)[None]
    Y = kind.statistics(task, X)[0][list(task.components)]
    return stage2_log_likelihood(Y, z, [tuple(iv) for iv in task.intervals], task.eps_c)


@pytest.mark.parametrize("eps", [0.5, 3.0, 60.0])  # one, three, all 2G components
def test_the_report_of_a_device_in_group_a_and_in_group_b_is_within_epsilon(eps):
    """Exact log-likelihood ratios of the real report under neighbouring datasets that
    differ in the group (and in the values, and in having a group at all)."""
    task = _task(eps)
    spent = task_epsilon(task)
    assert spent <= eps * (1 + 1e-12)
    G = task.dim
    vals = np.array([10.0, 115.0, 60.0, 60.0])
    datasets = [np.stack([vals, np.full(4, g)], axis=1) for g in range(G)]
    datasets += [np.stack([np.full(4, 200.0), np.full(4, 0.0)], axis=1),  # clamped, group A
                 np.stack([np.full(4, -50.0), np.full(4, G - 1.0)], axis=1),
                 np.stack([vals, np.full(4, np.nan)], axis=1),  # no group
                 np.zeros((0, 2))]  # no data
    rng = RandomSource.seeded(f"groupby-audit-{eps}")
    gen = np.random.default_rng(zlib.crc32(b"groupby"))
    far = 3 * (1 << 18)
    worst = 0.0
    for i, D in enumerate(datasets):
        for D2 in datasets[i + 1:]:
            for src in (D, D2):
                rows = src if src.size else np.zeros((0, 2))
                z = compute_report(task, rows[:, 0], rows[:, 1], rng=rng)
                for probe in (z, z + far, z - far, z + gen.integers(-3, 4, z.size)):
                    r = _loglik(task, D, probe) - _loglik(task, D2, probe)
                    worst = max(worst, abs(r))
                    assert abs(r) <= spent + 1e-9, (i, r, spent)
    assert worst >= 0.3 * spent  # the audit gets near the bound (group A vs group B)


def test_the_report_does_not_depend_on_the_group_in_shape_or_spend():
    task = _task()
    lengths = {compute_report(task, [5.0, 7.0], [g, g], rng=RandomSource.seeded(i)).size
               for i, g in enumerate((0.0, 1.0, 2.0, np.nan))}
    assert lengths == {len(task.components)}


def test_group_of_the_categorical_dataset():
    assert group_of([2, 2, 1, np.nan, 7, 1.5], 3) == 2.0  # usable codes only
    assert group_of([1, 0, 0, 1], 3) == 0.0  # ties: the smallest
    assert np.isnan(group_of([], 3)) and np.isnan(group_of([3, -1, np.inf], 3))


def test_grouped_tasks_refuse_what_they_cannot_be():
    base = _task().to_dict()
    for change in ({"by": None}, {"method": "baseline-b"}, {"dim": 1, "components": [0, 1]},
                   {"kind": "mean", "dim": 1}, {"by": 5}):
        with pytest.raises(TaskRefused):
            validate_task(TaskSpec.from_dict({**base, **change}))


def test_a_device_reads_its_group_from_its_categorical_dataset(tmp_path):
    """On a real Device: the report of a grouped task is the statistic of (values, the
    group of the ``by`` dataset on every row); a device without that dataset declines
    (code ``dataset``, nothing charged); a groups' dataset declared real-valued is refused
    (``declaration``)."""
    from tests.device_recorder import serve_recorder, wire_task
    from uldp.client.device import Device

    task = _task()
    with serve_recorder() as (svc, chan):
        def device(name: str) -> Device:
            return Device("unused:1", tmp_path / name, budget=10.0, channel=chan,
                          rng=RandomSource.seeded(3), simulation=True, durable=False)
        d = device("a")
        d.add_dataset("data", [150.0, 30.0, 60.0])
        d.add_dataset("country", [2, 2, 0], values="categorical")
        svc.tasks, svc.reports = [wire_task(task, "q", "data")], []
        assert d.poll().submitted == ["q"] and len(svc.reports[0].values) == len(
            task.components)
        assert d.clamped["q"] == 1
        kind = validate_task(task)
        rows = np.array([[150.0, 2.0], [30.0, 2.0], [60.0, 2.0]])[None]
        Y = kind.statistics(task, rows)[0]
        assert Y.tolist() == [-0.5, 0.0, -0.5, 0.0, 0.5, (60.0 - 30.0 + 0.0) / 3]
        d.close()
        for name, extra, code in (("b", None, "dataset"), ("c", "real", "declaration")):
            d = device(name)
            d.add_dataset("data", [10.0])
            if extra:
                d.add_dataset("country", [1.0], values=extra)
            with pytest.raises(TaskRefused) as why:
                d.check_task(wire_task(task, "q", "data"))
            assert why.value.code == code
            svc.tasks, svc.reports = [wire_task(task, "q", "data")], []
            r = d.poll()
            assert [q for q, _ in r.refused] == ["q"] and not svc.reports
            assert d.ledger.spent_units() == 0
            d.close()


SPECIAL = [0.5, np.nan, np.inf, -np.inf, 1e308, -1e308, 5e-324, -0.0, 2.0, 7.0, -1.0, 1.5]


def test_grouped_reports_are_total_over_hostile_data_and_parameters():
    """Every dataset (NaN/±inf/huge values, off-alphabet, fractional and missing codes,
    empty) under hostile but valid grouped tasks (ε at the limits, the widest and a
    subnormal range, 2 and 2^10 groups): one report of the announced length, within the
    collector's limit, no fallback."""
    import uldp.client.tasks as tasks_mod
    from uldp.client.tasks import report_length, report_limit

    gen = np.random.default_rng(5)
    base = _task().to_dict()
    tasks = [TaskSpec.from_dict({**base, **change}) for change in (
        {}, {"eps_c": 2.0**-24, "epsilon": 2.0**-24 * 6, "components": list(range(6)),
             "intervals": [[-0.5, 0.5], [-60.0, 60.0]] * 3},
        {"range": [-8.98e307, 8.98e307], "bound": 8.98e307},
        {"range": [5e-324, 1e-323], "bound": 5e-324},
        {"dim": 1024, "components": [2047, 0], "epsilon": 2.0,
         "intervals": [[-60.0, 60.0], [-0.5, 0.5]]})]
    before = tasks_mod.FALLBACKS
    for task in tasks:
        n, lim = report_length(task), report_limit(task)
        for k in range(12):
            m = int(gen.integers(0, 6))
            vals = gen.choice(SPECIAL, m)
            codes = gen.choice(SPECIAL + [0.0, 1.0, 2.0], m)
            z = compute_report(task, vals, codes, rng=RandomSource.seeded(k))
            assert z.shape == (n,) and np.abs(z).max(initial=0) <= lim
    assert before == tasks_mod.FALLBACKS
