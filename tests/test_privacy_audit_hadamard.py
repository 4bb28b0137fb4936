"""Exact likelihood-ratio audit of method ``hadamard`` (``uldp.client.methods.hadamard``),
in the style of ``tests/test_privacy_audit_mechanisms.py``.

Every stage of both kinds, with every mechanism the stage takes: for pairs of whole local
datasets (random, far apart — one inside the window and one outside it — and the degenerate
datasets of the totality invariant: empty, one sample, NaN/±∞, off-alphabet categories)
reports are drawn from the real device function ``compute_report`` and ``P(report | D)`` is
computed in exact rationals from the statistic (a distribution user without usable records
takes the uniform distribution's coefficients): the sampled-records mixture of stage 1, the
outside bit of stage 2 through the oracle over two categories, the grid mixture of the
window values of stage 3. The ratio never exceeds the exact bound of what the ledger
charged, and the extreme pair comes close to it.
"""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import numpy as np
import pytest

from tests.test_privacy_audit import _datasets, degenerate_datasets
from tests.test_privacy_audit_mechanisms import (
    _oracle_probability,
    _value_probability,
    worst_ratio,
)
from uldp.client.budget import split_epsilon
from uldp.client.mechanisms import ORACLES
from uldp.client.mechanisms.exact import ONE, exp_lower
from uldp.client.methods.hadamard import HadamardWindows
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec, compute_report, task_epsilon_units, validate_task

_METHOD = HadamardWindows()


def _stats(task: TaskSpec, samples: np.ndarray) -> np.ndarray:
    kind = validate_task(task)
    X = np.asarray(samples, dtype=float)[None]
    return _METHOD.statistics(task, kind, X, kind.valid_samples(task, X))[0]


def probability(task: TaskSpec, samples: np.ndarray, report: np.ndarray) -> Fraction:
    if task.stage == 1 and task.kind == "distribution":
        return _oracle_probability(task, samples, report)
    y = _stats(task, samples)
    if task.stage != 2:
        return _value_probability(task, y, report)
    oracle = ORACLES[task.mechanism]
    L = oracle.length(2, task.eps_c)
    out = Fraction(1)
    for c, (lo, hi) in enumerate(task.intervals):
        bit = int(y[c] < lo or y[c] > hi)
        out *= oracle.probability(report[c * L:(c + 1) * L].tolist(), bit, 2, task.eps_c)
    return out


def _cases() -> list[tuple[str, TaskSpec]]:
    dist = TaskSpec(query_id="q", kind="distribution", method="hadamard", stage=3,
                    epsilon=1.5, eps_c=1.5, components=(3,), dim=5,
                    intervals=((-0.05, 0.12),))
    l1 = TaskSpec(query_id="q", kind="mean-l1", method="hadamard", stage=3, epsilon=2.0,
                  eps_c=1.0, components=(0, 2), dim=3, bound=2.0,
                  intervals=((-0.2, 0.4), (-0.01, 0.01)))
    cases = []
    for name, base in (("dist", dist), ("l1", l1)):
        for m in ("laplace", "duchi", "pm", "hm"):
            cases.append((f"{name}-window-{m}", TaskSpec(**{**base.__dict__, "mechanism": m})))
        for m in ("laplace", "grr", "oue", "ss", "olh"):
            cases.append((f"{name}-spread-{m}", TaskSpec(**{**base.__dict__, "stage": 2,
                                                             "mechanism": m})))
    cases.append(("l1-centre-hm", TaskSpec(**{**l1.__dict__, "stage": 1, "mechanism": "hm",
                                              "intervals": ((-1.2, 1.2), (-1.2, 1.2))})))
    for m in ("grr", "oue", "ss", "olh"):
        cases.append((f"dist-centre-{m}", TaskSpec(**{
            **dist.__dict__, "stage": 1, "components": tuple(range(8)), "intervals": (),
            "mechanism": m})))
    for m in ("grr", "oue"):  # the probe's centre users: two records at ε/2 (hadamard_pairs)
        cases.append((f"dist-centre-pairs-{m}", TaskSpec(**{
            **dist.__dict__, "stage": 1, "components": tuple(range(8)), "intervals": (),
            "mechanism": m, "records": 2, "eps_c": split_epsilon(1.5, 2)})))
    return cases


CASES = _cases()


def _far_pair(task: TaskSpec, m: int) -> tuple[np.ndarray, np.ndarray]:
    """One dataset whose statistic sits inside the first window, one far outside it."""
    if task.kind == "distribution":
        # coefficient 3 of category 0 is +1/√8 (outside [−0.05, 0.12]); of category 3, −1/√8
        return np.full(m, 0.0), np.array([0.0, 3.0, 1.0, 2.0][:m] + [4.0] * max(m - 4, 0))
    inside = np.zeros((m, task.dim))
    outside = np.zeros((m, task.dim))
    outside[:, 0] = 2.0
    return inside, outside


@pytest.mark.parametrize("name,task", CASES, ids=[c[0] for c in CASES])
def test_exact_likelihood_ratio_never_exceeds_the_charged_epsilon(name, task):
    units = task_epsilon_units(task)
    assert units <= task.epsilon * (1 << 24)
    n = task.records if task.stage == 1 and task.kind == "distribution" \
        else len(task.components)
    bound: Fraction | float = Fraction(exp_lower(units // n), ONE) ** n
    if task.mechanism == "laplace":  # float likelihoods (discrete Laplace: exactly e^ε)
        bound = math.exp(units / (1 << 24)) * (1 + 1e-9)
    gen = np.random.default_rng(zlib.crc32(name.encode()))
    rng = RandomSource.seeded(name)
    m = 4
    degenerate = degenerate_datasets(task.kind, m, task.dim)
    pairs = [_far_pair(task, m)]
    pairs += [(_datasets(task.kind, m, task.dim, gen), _datasets(task.kind, m, task.dim, gen))
              for _ in range(4)]
    pairs += [(degenerate[i], degenerate[(i + 3) % len(degenerate)])
              for i in range(len(degenerate))]
    worst = worst_ratio(name, task, pairs, probability, rng, bound)
    # the extreme pair (inside against outside the window) comes close to the bound
    if task.stage == 2 and task.mechanism not in ("laplace", "olh"):
        assert math.log(worst) >= 0.3 * math.log(bound) / n, name
    if task.stage == 3 and task.kind == "distribution":
        assert math.log(worst) >= 0.3 * math.log(bound), name


def test_empty_distribution_user_takes_the_uniform_coefficients():
    """Stage 3 of an empty dataset reports the uniform distribution's coefficient, and a
    dataset whose records are all off the alphabet is the same user."""
    from uldp.client.kinds.means import hadamard_rows

    task = TaskSpec(query_id="q", kind="distribution", method="hadamard", stage=3,
                    epsilon=2.0, eps_c=1.0, components=(1, 2), dim=5,
                    intervals=((-0.3, 0.3), (-0.3, 0.3)), mechanism="pm")
    want = hadamard_rows(np.full((1, 5), 0.2), 8)[0][[1, 2]]
    assert np.array_equal(_stats(task, np.array([])), want)
    assert np.array_equal(_stats(task, np.array([7.0, -1.0, 0.5, np.nan])), want)
    a = compute_report(task, np.array([]), rng=RandomSource.seeded(3))
    b = compute_report(task, np.array([9.0, np.inf]), rng=RandomSource.seeded(3))
    assert np.array_equal(a, b)
