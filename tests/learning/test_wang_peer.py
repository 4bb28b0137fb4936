"""The item-level peer of the learning bench (``bench/wang_ldp_sgd.py``, Wang et al.,
ICDE 2019): its report's variance formula against the mechanism it sizes, and a fixed-seed
least-squares run that stays sane (it random-walked to R² −29 when it took uldp's
one-record rounds and a support that followed θ_t: issue 27)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import learning_frontier as lf
import wang_ldp_sgd as wang


@pytest.mark.parametrize("eps,mech", [(0.3, "hm"), (2.0, "hm"), (6.0, "hm"), (2.0, "pm")])
def test_report_variance_is_the_worst_case_of_algorithm_4(eps: float, mech: str) -> None:
    rng = np.random.default_rng([27, int(eps * 10)])
    d, N = 3, 200_000
    worst = wang.report_variance(eps, d, mech)
    seen = []
    for t in (0.0, 1.0, -0.5):
        out = wang.multidimensional(np.full((N, d), t), eps, rng, mech)
        assert abs(out.mean() - t) < 5 * np.sqrt(worst / (N * d))  # unbiased
        seen.append(out.var())
    assert max(seen) == pytest.approx(worst, rel=0.03)
    assert min(seen) <= worst * 1.03


def test_item_level_least_squares_stays_sane() -> None:
    src = lf.BlockUsers("linear", 20_000, 100, 2, 1000)
    cfg = lf.config_for("linear", 2, 2.0, "auto", 0)
    T = wang.peer_rounds(cfg, src.n_users, src.samples, src.dim)
    # far fewer iterations than uldp's one-record rounds (29 at n = 10⁵): the peer's
    # reports are ~m× noisier per user
    assert 1 <= T <= 8
    out = wang.ldp_sgd(cfg, src, src.samples, np.random.default_rng(3))
    r2 = lf.quality("linear", 2, lf.original("linear", out["theta"]))
    assert r2 > -0.5  # the noise floor at ε/m = 0.02 per record, not a blow-up
