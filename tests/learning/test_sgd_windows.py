"""Windowed SGD rounds (docs/algorithms.md "SGD"): per-coordinate supports, the window rule,
the evidence of clamping, rounds by predicted risk, unbiased rounds, the ε accounting."""

from __future__ import annotations

import itertools
import json
import math
import warnings

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.collector.learning.fit import run_sgd
from uldp.collector.learning.runner import ArrayUsers
from uldp.collector.models.rounds import (
    best_rounds,
    resolve_rounds,
    round_design,
    sgd_query,
    supports_at,
)
from uldp.collector.models.sgd import SGDConfig, partition
from uldp.collector.models.windows import next_window, norm_bound, pinned, record_support
from uldp.collector.programs.sgd import SGDProgram


def test_record_supports_hold_every_record_gradient() -> None:
    """Every record's clipped gradient coordinate lies in its model's support, for records
    anywhere in the feature box (labels at their bounds)."""
    rng = np.random.default_rng(3)
    b = np.array([0.5, 0.25, 0.5])
    theta = np.array([1.5, -2.0, 0.4])
    X = rng.uniform(-1, 1, size=(4000, 3)) * b
    from uldp.client.kinds.learning import GRADIENTS, clip_rows

    for model, y in (("logistic", rng.choice([0.0, 1.0], 4000)),
                     ("least_squares", rng.uniform(-1, 1, 4000)),
                     ("quadratic", np.zeros(4000))):
        for clip in (0.3, 10.0):
            sup = record_support(model, theta, clip, 0.1, b, 1.0)
            G = clip_rows(GRADIENTS[model](theta, X, y, {"l2": 0.1}), clip)
            assert np.all(sup[:, 0] - 1e-12 <= G) and np.all(sup[:, 1] + 1e-12 >= G), model
            if clip == 10.0 and model == "logistic":  # tight: no clip, |w| up to ~1
                assert np.allclose(sup[:, 1] - sup[:, 0], 2 * b)
    assert record_support("custom", theta, 2.0, 0.0, b, 1.0).tolist() == [[-2.0, 2.0]] * 3


def test_next_window_contains_the_moved_gradient() -> None:
    """For a quadratic loss with 0 ≼ ηH ≼ I the next gradient lies in the window whatever
    H is (the ball of centre ĝ/2 and radius ‖ĝ‖/2), and a user's mean within the spread."""
    rng = np.random.default_rng(5)
    support = np.tile([-1.0, 1.0], (4, 1))
    for _ in range(200):
        A = rng.normal(size=(4, 4))
        H = A @ A.T
        H /= np.linalg.eigvalsh(H).max() * rng.uniform(1, 3)  # ηH ≼ I
        g = rng.uniform(-0.3, 0.3, size=4)
        win = next_window(support, g, np.zeros(4), (0.0, 1.0), 100, 1.0).bounds
        moved = (np.eye(4) - H) @ g
        assert np.all(win[:, 0] <= moved) and np.all(moved <= win[:, 1])
        half = (win[:, 1] - win[:, 0]) / 2
        assert np.all(half <= np.linalg.norm(g) / 2 + 2 * 1 / 10 + 1e-12)


def test_a_glm_window_holds_its_moved_gradient_with_per_coordinate_shares() -> None:
    """A GLM's Hessian ``λI + E[s zzᵀ]`` (``0 ≤ s ≤ S``, ``|z_j| ≤ b_j``): the moved
    gradient ``(I − ηH)∇L`` lies in the window cut to ``r(|∇L_j| + 2b_j/‖b‖ ‖∇L‖)`` per
    coordinate (``SGDConfig.coordinate_shares``), adversarial records included (every
    record at a corner, one heavy coordinate), and at d = 8, 50 the windows are narrower
    than with the spectral ``r‖∇L‖`` alone; at d = 2 with equal bounds (shares > 1) they
    are the same."""
    rng = np.random.default_rng(7)
    for d, model, S in ((50, "least_squares", 1.0), (50, "logistic", 0.25),
                        (8, "ridge", 1.0), (2, "least_squares", 1.0)):
        b = (rng.uniform(0.2, 1.0, size=d) if d > 2 else np.ones(d)) / math.sqrt(d)
        cfg = SGDConfig(model=model, epsilon=1.0, l2=0.5, feature_bound=b.tolist())
        shares = cfg.coordinate_shares(d)
        assert shares is not None
        step = cfg.step_bounds(d)
        support = np.tile([-5.0, 5.0], (d, 1))
        narrower = 0
        for trial in range(60):
            z = rng.choice([-1.0, 1.0], size=(40, d)) * b  # records at the box's corners
            if trial % 3 == 0:
                z[:, 1:] *= rng.uniform(0, 1, size=(40, d - 1))
            s = rng.uniform(0, S, size=40)
            H = cfg.l2 * np.eye(d) + (z * s[:, None]).T @ z / 40
            g = rng.normal(size=d) * rng.uniform(0.01, 0.3)
            if trial % 2:
                g = np.sign(z[0]) * np.abs(g)  # aligned with a record: the worst drift
            win = next_window(support, g, np.zeros(d), step, 100, 1.0, (), shares).bounds
            moved = (np.eye(d) - cfg.step_size * H) @ g
            assert np.all(win[:, 0] <= moved + 1e-12) and np.all(moved <= win[:, 1] + 1e-12)
            plain = next_window(support, g, np.zeros(d), step, 100, 1.0).bounds
            assert np.all(win[:, 1] - win[:, 0] <= plain[:, 1] - plain[:, 0] + 1e-12)
            narrower += int(np.any(win[:, 1] - win[:, 0] < plain[:, 1] - plain[:, 0] - 1e-9))
        assert (narrower > 50) == (d > 2) and (narrower == 0) == (d == 2)
    # a configured curvature bound is not the GLM's own: the spectral bound alone
    assert SGDConfig(model="logistic", epsilon=1.0, smoothness=2.0).coordinate_shares(3) \
        is None


def test_known_curvature_centres_the_window_and_the_noise_norm_stays_out() -> None:
    """Quadratic loss (γ = G = 1, η = 1): the next gradient is −e_t, so the window is centred
    at 0 whatever ĝ_t, its half-width the error and the spread only (independent: in
    quadrature); with an unknown
    curvature the gradient's norm enters through an upper confidence bound that, at a zero
    gradient, grows like d^{1/4}·se — not like ‖ĝ‖ ≈ √d·se."""
    support = np.tile([-1.0, 1.0], (3, 1))
    g, se = np.array([0.3, -0.2, 0.1]), np.full(3, 0.01)
    w = next_window(support, g, se, (1.0, 1.0), 100, 1.0).bounds
    assert np.allclose(w.mean(axis=1), 0.0)
    assert np.allclose((w[:, 1] - w[:, 0]) / 2, np.hypot(2 * 0.01, 2 * 1 / 10))
    rng = np.random.default_rng(2)
    for d in (4, 64, 1024):
        noise = rng.normal(scale=0.01, size=d)  # ĝ of a zero gradient
        bound = norm_bound(noise, np.full(d, 0.01))
        assert bound < 3 * d**0.25 * 0.01
    assert bound < 0.5 * np.linalg.norm(noise)  # d = 1024
    assert norm_bound(np.array([3.0, 4.0]), np.zeros(2)) == 5.0


def test_clamped_coordinates_reset_to_the_support_and_widen_the_rest() -> None:
    support = np.tile([-1.0, 1.0], (3, 1))
    windows = np.array([[0.1, 0.2], [-0.5, 0.5], [-0.2, -0.1]])
    est = np.array([0.199, 0.0, -0.15])  # the first sits at its upper end
    se = np.full(3, 1e-4)
    assert pinned(windows, est, se) == [0]
    assert pinned(windows, est, np.full(3, 0.05)) == []  # within the noise: no evidence
    w = next_window(support, est, se, (0.0, 1.0), 100, 1.0, [0])
    assert w.bounds[0].tolist() == [-1.0, 1.0] and w.factor == 2.0 and w.pinned == (0,)
    calm = next_window(support, est, se, (0.0, 1.0), 100, 1.0, [])
    assert np.all(w.bounds[1:, 1] - w.bounds[1:, 0] > calm.bounds[1:, 1] - calm.bounds[1:, 0])
    # the factor never makes a window wider than the support: κ ≤ √m
    assert next_window(support, est, se, (0.0, 1.0), 4, 64.0, [1]).factor == 2.0


def test_auto_prefers_user_level_rounds_and_chooses_their_number() -> None:
    """A windowed round never has more predicted noise than a one-record round (equal only
    where both windows are the support under Duchi's mechanism, whose variance ``C² − t²``
    does not see the spread), so auto never picks baseline B; the number of rounds grows
    with ε (less noise per round)."""
    rounds = []
    for eps in (0.5, 2.0, 8.0):
        cfg = SGDConfig(model="logistic", epsilon=eps, feature_bound=1 / math.sqrt(3))
        for n_t in (200, 5000):
            w = round_design(cfg, n_t, 100, 3, False).variance
            b = round_design(cfg, n_t, 100, 3, True).variance
            assert w <= b * (1 + 1e-12) and (w < b or eps < 1)
        resolved, rec = resolve_rounds(cfg, 100_000, 100, 3)
        assert resolved.method == "windowed" and rec["chosen"] == "windowed"
        assert rec["predicted_risk"]["windowed"] < rec["predicted_risk"]["baseline-b"]
        rounds.append(resolved.t0)
    assert rounds == sorted(rounds) and rounds[0] < rounds[-1]
    fixed = SGDConfig(model="logistic", epsilon=1.0, t0=7, method="windowed")
    assert best_rounds(fixed, 1000, 10, 3, False)[0] == 7
    spec = sgd_query(fixed, 1000, 10, 3)
    assert spec.extra["sgd"]["t0"] == 7 and spec.frame_kind == "identity"


def _quadratic_users(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    mu = np.array([0.3, -0.2])
    X = mu + np.random.default_rng(seed).uniform(-0.3, 0.3, size=(n, m, 2))
    return X, np.zeros((n, m))


@pytest.mark.parametrize("method", ["windowed", "baseline-b"])
def test_per_coordinate_rounds_are_unbiased_and_follow_their_windows(method: str) -> None:
    """Each round's gradient is an unbiased estimate of its group's exact mean clipped
    gradient at θ_t (no window binds here), every task carries the round's windows, and
    the update is θ_{t+1} = θ_t − η ĝ_t. 24 runs × 3 rounds at ε = 64; fails beyond 4.5
    standard errors of the pooled error."""
    N, M, T = 600, 30, 3
    errs = []
    for r in range(24):
        X, y = _quadratic_users(N, M, r)
        cfg = SGDConfig(model="quadratic", epsilon=64.0, t0=T, seed=r, method=method,
                        feature_bound=0.6)
        res = run_sgd(cfg, ArrayUsers(X, y), rng=RandomSource.seeded(f"win-{method}-{r}"))
        assert res.extra["method"] == method and len(res.trajectory) == T
        theta = np.zeros(2)
        for step, members in zip(res.trajectory, partition(N, T, r), strict=True):
            assert np.allclose(step["theta"], theta)
            win = np.asarray(step["windows_used"])
            assert np.all(win[:, 0] < win[:, 1])
            if method == "baseline-b" or step["step"] == 0:  # the support
                assert np.allclose(win, supports_at(cfg, theta))
            g = (theta - X[members].reshape(-1, 2)).mean(axis=0)
            errs.append(np.asarray(step["gradient"]) - g)
            theta = theta - np.asarray(step["gradient"])
        assert np.allclose(theta, res.theta)
    e = np.array(errs)
    se = e.std(axis=0, ddof=1) / math.sqrt(len(e))
    assert np.all(np.abs(e.mean(axis=0)) < 4.5 * se), (e.mean(axis=0), se)


def test_windowed_rounds_narrow_and_beat_one_record_rounds() -> None:
    """After round 0 the windows shrink to a fraction of the support (users alike), and the
    windowed run ends nearer θ* = E X than one-record rounds with the same users."""
    X, y = _quadratic_users(3000, 50, 11)
    mu = X.reshape(-1, 2).mean(axis=0)
    out = {}
    for method in ("windowed", "baseline-b"):
        errs = []
        for r in range(3):
            cfg = SGDConfig(model="quadratic", epsilon=1.0, t0=4, seed=r, method=method,
                            feature_bound=0.6)
            res = run_sgd(cfg, ArrayUsers(X, y), rng=RandomSource.seeded(f"b-{method}-{r}"))
            errs.append(float(np.linalg.norm(res.theta - mu)))
            if method == "windowed":
                w0 = np.diff(np.asarray(res.trajectory[0]["windows_used"]), axis=1)
                w3 = np.diff(np.asarray(res.trajectory[3]["windows_used"]), axis=1)
                assert np.all(w3 < 0.6 * w0)
        out[method] = float(np.mean(errs))
    assert out["windowed"] < 0.5 * out["baseline-b"], out


def test_accounting_shows_rounds_per_round_epsilon_and_the_user_level_total() -> None:
    X, y = _quadratic_users(400, 10, 2)
    cfg = SGDConfig(model="quadratic", epsilon=1.5, t0=4, seed=1, method="windowed",
                    feature_bound=0.6)
    res = run_sgd(cfg, ArrayUsers(X, y), rng=RandomSource.seeded("acct"))
    acct = res.extra["accounting"]
    assert acct["rounds"] == 4 and [r["round"] for r in acct["per_round"]] == [0, 1, 2, 3]
    assert [r["users"] for r in acct["per_round"]] == [100] * 4
    assert all(0 < r["epsilon"] <= 1.5 for r in acct["per_round"])
    assert acct["epsilon_per_user"] == max(r["epsilon"] for r in acct["per_round"]) <= 1.5
    assert acct["sum_over_rounds"] == pytest.approx(4 * acct["epsilon_per_user"])
    assert "parallel" in acct["composition"]
    # the same numbers from the program the service runs, and Kashin steps too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a weak stage I: irrelevant to the accounting
        kashin = run_sgd(SGDConfig(model="quadratic", epsilon=1.5, t0=2, method="two-stage"),
                         ArrayUsers(X, y), rng=RandomSource.seeded("a2")).extra["accounting"]
    assert kashin["rounds"] == 2 and [len(r["phases"]) for r in kashin["per_round"]] == [2, 2]
    assert kashin["epsilon_per_user"] <= 1.5


def test_a_restarted_program_serves_the_same_windows() -> None:
    """Round t's tasks are pure functions of the stored spec and the published JSON."""
    spec = sgd_query(SGDConfig(model="logistic", epsilon=2.0, t0=3, method="windowed",
                               feature_bound=0.5), 300, 20, 2)
    prog = SGDProgram(spec)
    pub = {1: {"theta": [0.5, -0.5], "windows": [[-0.1, 0.2], [-0.3, 0.05]],
               "spread_factor": 1.0}}
    t = prog.task(2, 0, 0, pub)
    again = SGDProgram(spec).task(2, 0, 0, pub)
    assert t == again and t.frame_kind == "identity"
    assert [list(iv) for iv in t.intervals] == [[-0.1, 0.2], [-0.3, 0.05]][
        t.components[0]:t.components[-1] + 1]


@pytest.mark.parametrize("method", ["windowed", "baseline-b"])
def test_published_json_of_the_rounds_matches_the_schema(method: str) -> None:
    from tests.test_conformance import _errors, _schema
    from uldp.collector.learning.runner import source_privatizer
    from uldp.collector.programs.driver import run_program

    X, y = _quadratic_users(300, 8, 4)
    spec = sgd_query(SGDConfig(model="quadratic", epsilon=2.0, t0=3, method=method,
                               feature_bound=0.6), 300, 8, 2)
    pubs: dict = {}
    run_program(SGDProgram(spec), source_privatizer(ArrayUsers(X, y), np.arange(300),
                                                    RandomSource.seeded(1), None),
                on_close=pubs.__setitem__)
    schema = _schema("published")
    assert len(pubs) == 3
    for pub in pubs.values():
        assert _errors(json.loads(json.dumps(pub)), schema, schema) == [], pub


def test_theta_standard_error_carries_every_rounds_noise() -> None:
    """θ̂'s standard error (models.sgd.theta_std_error): every round's noise carried
    through the public curvature bounds — the last round alone when they contract fully
    (quadratic, η = 1: a = 0), all rounds summed when nothing contracts (a = 1: it was
    η·se of the last round alone, √T too small), geometric in between."""
    from uldp.collector.models.sgd import theta_std_error

    se = np.array([[0.4, 0.2], [0.3, 0.1], [0.2, 0.1]])
    np.testing.assert_allclose(theta_std_error(se, 1.0, (1.0, 1.0)), se[-1])
    np.testing.assert_allclose(theta_std_error(se, 2.0, (0.0, 0.5)),
                               2.0 * np.sqrt((se**2).sum(axis=0)))
    a2 = 0.25  # a = 0.5
    np.testing.assert_allclose(theta_std_error(se, 1.0, (0.5, 0.5)),
                               np.sqrt(a2**2 * se[0]**2 + a2 * se[1]**2 + se[2]**2))
    with pytest.raises(ValueError, match="round_se"):
        theta_std_error(np.zeros((0, 2)), 1.0, (0.0, 1.0))


def test_predicted_noise_follows_the_windows_from_round_zero() -> None:
    """RoundDesign.transient: round 0 on the support, each later round on windows sized from
    the round before's predicted error, settling near the steady prediction; with few users
    against d (n_t ε² ≲ d m) round 1 is far noisier than the steady state — what the θ error
    at d = 50, n = 5000 showed (0.13 measured against 0.07 predicted before)."""
    d = 50
    cfg = SGDConfig(model="quadratic", epsilon=1.0, seed=0, feature_bound=0.8 / math.sqrt(d))
    rd = round_design(cfg, 2500, 100, d, False)
    v = rd.transient(50)
    assert v[0] == pytest.approx(rd.variance0)
    assert all(a >= b * (1 - 1e-9) for a, b in itertools.pairwise(v))
    assert v[1] > 2 * rd.variance  # round 1 carries round 0's error
    assert v[-1] == pytest.approx(rd.variance, rel=0.35)
    big = round_design(cfg, 10**7, 100, d, False).transient(50)
    assert big[1] < 1.5 * round_design(cfg, 10**7, 100, d, False).variance
