"""``two-stage-adaptive``'s stage II, part by part (issue 24: its interval under-covered at
n = 10⁵, ε = 1, stage I 3 %; suspected: HM's reports through ``ValueAccumulator``).

The stage-II task the method publishes, the device's ``compute_reports``, the collector's
``ValueAccumulator`` (HM and PM as exact per-piece moments) and the method's stated noise
(``sized._stage_two_noise``) against the randomizer's exact variance at the users' own
values. The repetition-level check is ``bench/adaptive_coverage.py --production``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from uldp.client.params import GRID_STEPS
from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_reports
from uldp.collector.mechanisms import SCALAR_DECODERS
from uldp.collector.mechanisms.choice import scalar_variance
from uldp.collector.methods.common import value_accumulator
from uldp.collector.methods.sized import _stage_two_noise
from uldp.collector.planner import QuerySpec, compile_query

N = 20_000


@pytest.mark.parametrize("mech", ["hm", "pm", "duchi"])
def test_stage_two_noise_is_the_exact_noise_of_the_users(mech: str) -> None:
    plan = compile_query(QuerySpec(kind="mean", epsilon=1.0, users=100_000, samples=1,
                                   lo=0.0, hi=1.0, method="two-stage-adaptive",
                                   stage1_share=0.03, oracle="best", randomizer="adaptive",
                                   query_id="adaptive-noise"))
    D = plan.group_params(0)[0].bound
    task = plan.method.task(plan, 0, 2, {"intervals": {"0": [[-D, D]]},
                                         "mechanism": {"0": mech}})
    task = replace(task, mechanism=mech)
    assert task.intervals == ((-D, D),) and task.mechanism == mech
    # users alike: 100 Bernoulli(0.3) records each (the suite's population), their means
    y = np.random.default_rng(24).binomial(100, 0.3, N) / 100
    acc = value_accumulator(task)
    src = RandomSource.seeded("adaptive-noise")
    reports = [compute_reports(task, y[s:s + 5000, None], src) for s in range(0, N, 5000)]
    for r in reports:
        acc.add(r)
    assert acc.moments is not None  # HM / PM / Duchi: the exact per-piece moments
    # the accumulator's sums are the decoder's, value by value
    direct = SCALAR_DECODERS[mech].decode(np.concatenate(reports)[:, 0], task.eps_c)
    assert float(acc.sums[0]) == pytest.approx(float(direct.sum()), rel=1e-12)
    assert acc.count == N
    # the stated noise of one report against the exact one at the users' grid values
    stated = _stage_two_noise(acc, 0, task.eps_c, None)
    # (the users' statistic y on [0, 1] is the grid value y·G of the window [−D, D])
    var_g = SCALAR_DECODERS[mech].variance(y * GRID_STEPS, task.eps_c)
    exact = float(np.mean(var_g)) * (2 * D / GRID_STEPS) ** 2 + 0.25 * (2 * D / GRID_STEPS) ** 2
    a, one = scalar_variance(mech, task.eps_c, 0.0), scalar_variance(mech, task.eps_c, 1.0)
    b = one - a
    if 1 + b <= 1e-6:  # Duchi: E t² from below by (E t̂)², so the noise from above
        assert stated >= exact * (1 - 1e-9)
        assert stated <= (a + 1.0) * D * D  # at most the worst case
        return
    # it reads E t² from the mean of t̂² over N reports (sd ≤ max t̂² / √N): five sd
    C2 = float(np.max((2 * direct / GRID_STEPS - 1) ** 2))
    tol = 5 * abs(b) / (1 + b) * C2 / math.sqrt(N) * D * D + 1e-12
    assert abs(stated - exact) <= tol
