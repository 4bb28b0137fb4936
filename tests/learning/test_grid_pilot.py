"""The grid's pilot phase (docs/algorithms.md, Grids): a share of the users measures the
signal the cells show beyond their noise, and that sizes the bias term of the main phase's
grid choice. Each user reports once (disjoint phases); no signal → one cell (the overall
mean); a strong signal keeps the design's grid."""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.learning.fit import run_classify, run_regress
from uldp.collector.learning.runner import ArrayUsers
from uldp.collector.models.grid import (
    PILOT_SHARE,
    choose_grid,
    design_bias_scale,
    measured_bias_scale,
    pilot_users,
)


class _Counting(ArrayUsers):
    """Records every user whose data a phase reads (each must be read exactly once)."""

    def __init__(self, X: np.ndarray, y: np.ndarray) -> None:
        super().__init__(X, y)
        self.seen: Counter[int] = Counter()

    def batches(self, idx: np.ndarray, users_per_batch: Callable[[int], int]
                ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        self.seen.update(int(i) for i in idx)
        yield from super().batches(idx, users_per_batch)


def test_measured_bias_scale_and_the_grid_it_chooses() -> None:
    design = design_bias_scale(2, "regress", 3.0)
    assert design == 2 * 36 / 12
    # noise alone (the lower bound is ≤ 0): no bias to buy down, one cell
    assert measured_bias_scale(0.01, 0.02, 2, 2, task="regress", label_bound=3.0) == 0.0
    assert choose_grid(3000, 20, 2, 1.0, task="regress", label_bound=3.0,
                       bias_scale=0.0).M == 1
    # a strong, well-measured signal: capped at the design guess
    assert measured_bias_scale(50.0, 0.1, 2, 2, task="regress", label_bound=3.0) == design
    # in between: 8 × lower bound / (1 − M0⁻²)
    assert np.isclose(measured_bias_scale(0.05, 0.01, 2, 2), 8 * 0.04 / 0.75)
    g = choose_grid(10**5, 100, 2, 1.0, bias_scale=0.05)
    assert 1 < g.M <= choose_grid(10**5, 100, 2, 1.0).M
    assert g.rule.endswith("measured by a pilot")
    for n in (400, 3000, 10**5):
        k = pilot_users(n, 50, 2, 1.0)
        assert PILOT_SHARE[0] * n <= k <= PILOT_SHARE[1] * n + 1


def test_pilot_reads_each_user_once_and_finds_no_signal_in_noise() -> None:
    g = np.random.default_rng(11)
    X = g.uniform(size=(3000, 20, 2))
    y = g.uniform(-1, 1, size=(3000, 20))  # η ≡ 0
    src = _Counting(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mdl = run_regress(src, epsilon=1.0, label_bound=1.0, rng=RandomSource.seeded(3),
                          seed=3)
    pilot = mdl.info["grid_choice"]["pilot"]
    assert set(src.seen) == set(range(3000)) and set(src.seen.values()) == {1}
    assert pilot["users"] + mdl.info["users"] == 3000 and pilot["M"] == 2
    assert mdl.M == 1 and pilot["bias_scale"] < pilot["design_bias_scale"]
    # given M: no pilot, every user in the one query
    src2 = _Counting(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fixed = run_regress(src2, epsilon=1.0, label_bound=1.0, rng=RandomSource.seeded(3),
                            seed=3, M=3)
    assert len(src2.seen) == 3000 and "pilot" not in fixed.info["grid_choice"]


def test_pilot_keeps_a_strong_signal() -> None:
    g = np.random.default_rng(12)
    X = g.uniform(size=(6000, 20, 1))
    eta = np.where(X[..., 0] < 0.5, 0.8, -0.8)
    y = np.where(g.uniform(size=(6000, 20)) < (1 + eta) / 2, 1.0, -1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mdl = run_classify(X, y, epsilon=2.0, rng=RandomSource.seeded(4), seed=4)
    pilot = mdl.info["grid_choice"]["pilot"]
    assert pilot["signal"] > 5 * pilot["signal_se"]
    assert mdl.M >= 2
    x = np.array([[0.1], [0.9]])
    assert list(mdl.predict(x)) == [1.0, -1.0]


def test_a_classifier_weighs_its_flipped_labels_against_the_majority() -> None:
    """The classify pilot's decision rule (docs/algorithms.md, Grids, "A classifier's
    risk"): a pilot whose cells all sit on the majority's side gives no minority region to
    find (``S² = 0``), so every finer grid only adds noisy flips and the majority (one
    cell) wins; a pilot with a cell well across zero keeps a finer grid. The predicted
    excess matches a Monte Carlo of the same model (fixed seed)."""
    from uldp.collector.models.grid import misclassification_risk, sign_scale

    # majority everywhere (nycflights13-like: mean label −0.5, cells all negative)
    c, A, S2 = sign_scale(np.array([-0.7, -0.6, -0.1, -0.02]),
                          np.array([0.02, 0.02, 0.03, 0.03]), 2, 2)
    assert np.isclose(c, -0.355) and A == 0.0 and S2 == 0.0
    g = choose_grid(4000, 50, 2, 1.0, centre=c, bias_scale=S2, spread_scale=0.4)
    assert g.M == 1 and g.to_json()["loss"] == "misclassification"
    # a near-empty cell 1.5 SE across zero is noise (SIGN_Z = 2), not a region
    assert sign_scale(np.array([-0.9, -0.5, 0.045, -0.05]), np.full(4, 0.03), 2, 2)[1] == 0
    # the noise part grows with the grid and the noiseless part falls
    parts = [misclassification_risk(-0.3, 0.2, 0.2, 0.002 * 4.0**M, M) for M in (1, 2, 3, 4)]
    assert parts[0][1] < 1e-3 and all(a[1] < b[1] for a, b in itertools.pairwise(parts))
    assert all(a[0] > b[0] for a, b in itertools.pairwise(parts))
    # a cell clearly across zero: the regions are worth finding, a finer grid wins
    c2, A2, S2b = sign_scale(np.array([0.6, -0.8, -0.7, -0.5]), np.full(4, 0.02), 2, 2)
    assert A2 > 0.1 and S2b > 0
    assert choose_grid(10**5, 100, 2, 2.0, centre=c2, bias_scale=S2b,
                       spread_scale=S2b).M >= 2
    # the quadrature against a Monte Carlo of the model: ζ ~ N(c, S²), cells keep
    # S²(1 − M⁻²), noise v, the label the sign of c + w(ζ̂ − c)
    rng = np.random.default_rng(5)
    c3, S, v, M = -0.2, 0.3, 0.05, 3
    between = S * (1 - M**-2.0)
    w = between / (between + v)
    zbar = c3 + np.sqrt(between) * rng.standard_normal(400_000)
    zeta = zbar + np.sqrt(S - between) * rng.standard_normal(zbar.size)
    score = c3 + w * (zbar + np.sqrt(v) * rng.standard_normal(zbar.size) - c3)
    mc = np.mean(np.abs(zeta) * ((score >= 0) != (zeta >= 0)))
    mc0 = np.mean(np.abs(zeta) * ((zbar >= 0) != (zeta >= 0)))
    bias, noise = misclassification_risk(c3, S, S, v, M)
    assert abs(bias - mc0) < 0.003 and abs(bias + noise - mc) < 0.003
