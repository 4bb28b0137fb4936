"""The validity rule of a task's reports (``uldp.collector.mechanisms.validity``) is exactly
the rule its accumulator applies when the phase closes (issue 28: a hostile device must
not be able to fail a query by a report that ingest took and the close refuses).

For every method and every mechanism, the production program's tasks (each phase, group
and stage, through the simulation driver) meet real device reports and hostile variants
of them — every integer moved by one, to the limit and past it, negative, swapped with
its neighbour, repeated. A report is valid under the rule exactly when a fresh copy of
the phase's accumulator takes it; every real report is valid."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports, report_limit
from uldp.collector.mechanisms import ReportError
from uldp.collector.mechanisms.validity import ProbeRule, ReportRule, report_rule
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import program_for
from uldp.collector.programs.driver import run_program

SPECS: dict[str, dict[str, Any]] = {
    "two-stage-laplace": dict(kind="mean", epsilon=1.0, users=60, samples=4,
                              method="two-stage"),
    "two-stage-vector-grr-pm": dict(kind="mean-linf", epsilon=4.0, users=60, samples=4,
                                    dim=3, method="two-stage", oracle="grr",
                                    randomizer="pm"),
    "two-stage-oue-duchi": dict(kind="mean", epsilon=1.0, users=60, samples=4,
                                method="two-stage", oracle="oue", randomizer="duchi"),
    "two-stage-ss-hm": dict(kind="mean-l2", epsilon=2.0, users=60, samples=4, dim=2,
                            method="two-stage", oracle="ss", randomizer="hm"),
    "two-stage-olh": dict(kind="mean", epsilon=2.0, users=60, samples=4,
                          method="two-stage", oracle="olh"),
    "ssl-hm": dict(kind="mean", epsilon=1.0, users=40, samples=4, method="ssl",
                   randomizer="hm"),
    "ssl-vector-pm": dict(kind="mean-linf", epsilon=2.0, users=40, samples=4, dim=2,
                          method="ssl", randomizer="pm"),
    "baseline-b": dict(kind="mean", epsilon=1.0, users=40, samples=4, method="baseline-b"),
    "baseline-a": dict(kind="mean-linf", epsilon=1.0, users=30, samples=3, dim=2,
                       method="baseline-a"),
    **{f"oracle-{o}": dict(kind="distribution", epsilon=1.0, users=40, samples=5, dim=16,
                           method="oracle", oracle=o)
       for o in ("laplace", "grr", "oue", "ss", "olh")},
    "oracle-ss-records": dict(kind="distribution", epsilon=2.0, users=40, samples=5, dim=12,
                              method="oracle", oracle="ss", records=3),
    "mean-by": dict(kind="mean-by", epsilon=4.0, users=60, samples=4, dim=3, lo=0.0,
                    hi=10.0, by="g", groups=("a", "b", "c")),
}


def _data(spec: QuerySpec, n: int, rng: np.random.Generator
          ) -> tuple[np.ndarray, np.ndarray | None]:
    m = spec.samples
    if spec.kind == "distribution":
        return rng.integers(0, spec.dim, (n, m)).astype(float), None
    if spec.kind == "mean-by":
        return rng.uniform(0, 10, (n, m)), rng.integers(0, spec.dim, (n, m)).astype(float)
    shape = (n, m) if spec.dim == 1 else (n, m, spec.dim)
    return rng.uniform(-0.9, 0.9, shape), None


def _hostile(row: np.ndarray, limit: int) -> list[np.ndarray]:
    """Variants of a valid report: each integer moved, pushed to and past the limit,
    negated, swapped with and copied from its neighbour."""
    out = []
    for i in range(row.size):
        for v in {row[i] + 1, row[i] - 1, -1, 0, 1, 2, limit, limit + 1, -limit, -row[i]}:
            r = row.copy()
            r[i] = v
            out.append(r)
        if i + 1 < row.size:
            r = row.copy()
            r[i], r[i + 1] = row[i + 1], row[i]
            out.append(r)
            r = row.copy()
            r[i + 1] = row[i]
            out.append(r)
    return out


def _takes(acc: Any, row: np.ndarray, slot: int) -> bool:
    try:
        copy.deepcopy(acc).add(row[None, :], np.array([slot]))
    except ReportError:
        return False
    return True


def _compare(name: str) -> int:
    plan = compile_query(QuerySpec(**SPECS[name], query_id=f"q-{name}"))
    spec = plan.spec
    program = program_for(spec)
    rng = RandomSource.seeded(f"rules:{name}")
    data = np.random.default_rng(5)
    seen = [0]

    def privatize(slots: np.ndarray, task: Any, offsets: Any, acc: Any) -> None:
        X, labels = _data(spec, slots.size, data)
        reps = compute_reports(task, X, rng, labels=labels, offsets=offsets)
        rule = report_rule(task)
        assert isinstance(rule, ReportRule), task.method
        assert not rule.invalid(reps, slots).any()  # every real report is valid
        for row in reps[:3]:
            rule.check(row.tolist())
        limit = report_limit(task)
        for row, slot in list(zip(reps, slots, strict=True))[:3]:
            for bad in _hostile(row, limit):
                want = _takes(acc, bad, int(slot))
                got = not bool(rule.invalid(bad[None, :], np.array([slot]))[0])
                assert got == want, (name, task.stage, bad.tolist())
                if not got:  # one report at a time (ingest, no numpy): the same rule
                    with pytest.raises(ReportError, match="break the rule"):
                        rule.check(bad.tolist())
                else:
                    rule.check(bad.tolist())
                seen[0] += 1
        acc.add(reps, slots)

    run_program(program, privatize)
    return seen[0]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_rule_is_the_accumulators(name):
    assert _compare(name) > 20


def test_an_unknown_method_asks_its_accumulator():
    """A method without a layout here (a new one) is judged by its own accumulator, and
    bisection finds exactly the refused rows of a batch."""
    spec = compile_query(QuerySpec(kind="distribution", epsilon=1.0, users=40, samples=5,
                                   dim=32, method="oracle", oracle="ss")).spec
    program = program_for(spec)
    task = program.task(1, 0, 0, {})
    rule = ProbeRule(program.accumulator(1, 0, 0, {}))
    reps = compute_reports(task, np.zeros((16, 5)), RandomSource.seeded(1))
    reps[[3, 11]] = reps[[3, 11]][:, ::-1]  # out of order
    assert np.flatnonzero(rule.invalid(reps)).tolist() == [3, 11]
    with pytest.raises(ReportError, match="its method's rule"):
        rule.check(reps[3].tolist())
    rule.check(reps[4].tolist())


# ---- each decoder's rule is the set of reports its device half can send ----------------
def _sendable_oracle(name: str, report: tuple[int, ...], k: int, eps: float) -> bool:
    from uldp.client.mechanisms import ORACLES
    return any(ORACLES[name].probability(report, item, k, eps) > 0 for item in range(k))


@pytest.mark.parametrize("name,k,eps", [("grr", 6, 1.0), ("ss", 6, 0.5), ("ss", 7, 1.5),
                                        ("oue", 4, 1.0), ("olh", 5, 1.0)])
def test_an_oracles_rule_is_what_its_device_can_send(name, k, eps):
    """Every report over a small domain around the valid one (every integer in
    [−1, k] at every position; OLH: seeds at and past their ends): valid under the
    decoder's rule exactly when the device's exact probability of it is positive for
    some value."""
    import itertools

    from uldp.client.mechanisms import ORACLES
    from uldp.client.mechanisms.olh import SEED_BITS
    from uldp.collector.mechanisms import ORACLE_DECODERS
    dec, L = ORACLE_DECODERS[name], ORACLES[name].length(k, eps)
    if name == "olh":
        top = 1 << SEED_BITS
        reports = list(itertools.product((-1, 0, 7, top - 1, top), range(-1, k + 2)))
    else:
        values = range(-1, k + 1) if name != "oue" else range(-1, 3)
        reports = list(itertools.product(values, repeat=L))
    got = ~dec.invalid(np.array(reports, dtype=np.int64), k, eps)
    want = np.array([_sendable_oracle(name, r, k, eps) for r in reports])
    assert (got == want).all()
    assert [not dec.bounds(k, eps).breaks(list(r)) for r in reports] == want.tolist()
    assert want.any() and not want.all()


@pytest.mark.parametrize("name,eps", [("pm", 1.0), ("hm", 1.0), ("hm", 3.0),
                                      ("duchi", 0.5)])
def test_a_randomizers_rule_is_what_its_device_can_send(name, eps):
    """Report integers around the valid range: valid exactly when the device can send
    them for some grid value (its exact probability at 0, the middle or the top)."""
    from uldp.client.mechanisms import SCALARS
    from uldp.client.params import GRID_STEPS
    from uldp.collector.mechanisms import SCALAR_DECODERS
    mech, dec = SCALARS[name], SCALAR_DECODERS[name]
    top = mech.limit(eps)
    z = np.array(sorted({-2, -1, 0, 1, 2, top - 1, top, top + 1, top + 2, -top}))
    want = np.array([any(mech.probability(int(v), g, eps) > 0
                         for g in (0, GRID_STEPS // 2, GRID_STEPS)) for v in z])
    assert (~dec.invalid(z, eps) == want).all()
    assert [not dec.bounds(eps).breaks([int(v)]) for v in z] == want.tolist()


def test_a_long_report_is_checked_as_a_short_one():
    """One report of many integers (OUE at k = 300) is checked in numpy, a short one in
    Python: the same verdicts and messages."""
    for k in (300, 12):
        spec = compile_query(QuerySpec(kind="distribution", epsilon=1.0, users=40,
                                       samples=5, dim=k, method="oracle",
                                       oracle="oue")).spec
        task = program_for(spec).task(1, 0, 0, {})
        rule = report_rule(task)
        assert rule is not None
        good = compute_reports(task, np.zeros((1, 5)), RandomSource.seeded(1))[0]
        rule.check(good.tolist())
        for v in (-1, 2):
            bad = good.copy()
            bad[k // 2] = v
            with pytest.raises(ReportError, match=f"is {k} bits .each 0 or 1."):
                rule.check(bad.tolist())
