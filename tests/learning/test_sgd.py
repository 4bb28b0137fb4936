"""Algorithm 3 (spec §8, [D13], [D14], S9): partition, t0 rule, updates, rate in n."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.collector.learning.fit import run_sgd
from uldp.collector.learning.runner import ArrayUsers
from uldp.collector.learning.synthetic import quadratic_population
from uldp.collector.models.sgd import (
    SGDConfig,
    choose_steps,
    partition,
    project,
    step_spec,
    steps_advisory,
    theorem8_bound,
)


def test_partition_is_balanced_disjoint_and_seeded() -> None:
    parts = partition(1003, 7, seed=3)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003
    allu = np.concatenate(parts)
    assert np.unique(allu).size == 1003
    again = partition(1003, 7, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    assert not np.array_equal(partition(1003, 7, seed=4)[0], parts[0])


def test_default_t0_and_eta_follow_d13_d14() -> None:
    cfg = SGDConfig(model="quadratic", epsilon=8.0)
    assert cfg.step_size == 1.0  # η = 1/G with G = 1
    n, m = 10**6, 100
    assert choose_steps(n, m, 2, cfg) == math.ceil(math.log(n * m))  # ηγ = 1
    # too few users: t0 is reduced until stage I of every step is reliable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small = choose_steps(1000, 100, 2, cfg)
    assert 1 <= small < math.ceil(math.log(1000 * 100))
    # ε=8, N=4 components: one group, ε_c = 2; the cap is tight (t0+1 would fail)
    assert ((1000 // small) // 2) * 2.0**2 >= 200
    assert ((1000 // (small + 1)) // 2) * 2.0**2 < 200
    assert steps_advisory(1000, 2, cfg, small) is None
    weak = SGDConfig(model="quadratic", epsilon=0.5)
    assert choose_steps(50, 100, 2, weak) == 1
    assert "too few for even one" in (steps_advisory(50, 2, weak, 1) or "")
    fixed = SGDConfig(model="quadratic", epsilon=1.0, t0=50)
    assert choose_steps(1000, 100, 2, fixed) == 50
    assert "unreliable" in (steps_advisory(1000, 2, fixed, 50) or "")


@pytest.mark.parametrize("bad", [dict(model="nope"), dict(epsilon=0.0), dict(clip=-1.0),
                                 dict(t0=0), dict(eta=float("nan")), dict(l2=-1.0)])
def test_config_rejects_bad_values(bad: dict) -> None:
    args = dict(model="quadratic", epsilon=1.0)
    args.update(bad)
    with pytest.raises(ValueError, match=next(iter(bad))):
        SGDConfig(**args)


def test_step_spec_carries_theta_and_step() -> None:
    cfg = SGDConfig(model="logistic", epsilon=2.0, clip=0.5, l2=0.1, seed=4)
    spec = step_spec(cfg, np.array([0.5, -1.0]), 100, 30, 2, 3)
    assert spec.kind == "sgd" and spec.bound == 0.5 and spec.users == 100
    assert spec.extra["theta"] == [0.5, -1.0] and spec.extra["step"] == 3
    assert spec.extra["model"] == "logistic" and spec.extra["l2"] == 0.1
    assert spec.query_id.endswith("step-3")


def test_projection() -> None:
    assert np.allclose(project(np.array([3.0, 4.0]), 1.0), [0.6, 0.8])
    assert np.allclose(project(np.array([0.3, 0.4]), 1.0), [0.3, 0.4])
    assert np.allclose(project(np.array([3.0, 4.0]), None), [3.0, 4.0])


def test_trajectory_and_update_rule() -> None:
    """θ_{t+1} = Π(θ_t − η g_t) with the recorded g_t; each user reports in one step."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-0.3, 0.5, size=(600, 40, 2))
    cfg = SGDConfig(model="quadratic", epsilon=16.0, t0=3, eta=0.5, radius=0.45, seed=2,
                    method="two-stage")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_sgd(cfg, ArrayUsers(X), rng=RandomSource.seeded(5))
    assert res.t0 == 3 and len(res.trajectory) == 3
    assert sum(s["users"] for s in res.trajectory) == 600
    theta = np.zeros(2)
    for step in res.trajectory:
        assert np.allclose(step["theta"], theta)
        theta = project(theta - 0.5 * np.asarray(step["gradient"]), 0.45)
    assert np.allclose(theta, res.theta)
    d = res.to_dict()
    assert d["kind"] == "sgd" and d["theta"] == res.theta.tolist() and d["t0"] == 3


def test_step_gradients_are_unbiased() -> None:
    """Every step's g_t is an unbiased estimate of the exact mean clipped gradient of its
    group S_t at θ_t (§8.3 d: g_t = Uᵀ θ̂, θ̂ the two-stage Kashin MeanEst), pooled over
    fresh frames, partitions and noise.

    Configuration of test_service_sgd_grpc (n = 900, m = 40, d = 2, t0 = 3, quadratic loss,
    X = (0.3, −0.2) + U(−0.3, 0.3)) at ε = 320, where the Laplace noise is 10× smaller than
    at ε = 32 (per-step sd ≈ 0.0075 per coordinate) so a small bias shows in few runs: 60
    runs × 3 steps, standard error ≈ 0.0006; fails on a mean error beyond 4.5 standard
    errors (≈ 0.003). False-alarm rate for the unbiased estimator: 2·P(|z| > 4.5) ≈ 1.4e-5
    (the step errors are sums of 150 independent Laplace terms: close to normal). No clamp
    binds here (user-mean coefficients lie in [−0.33, 0.09], the stage-II interval is
    [−2.76, 2.55]; gradient norms stay below D = 1), so the estimator is exactly unbiased;
    measured at ε = 32 over 7000 runs: mean θ̂ − data mean = (0.002, 0.001) ± 0.0009.
    """
    N, M, D = 900, 40, 2
    mu = np.array([0.3, -0.2])
    errs = []
    for r in range(60):
        X = mu + np.random.default_rng([r, 31]).uniform(-0.3, 0.3, size=(N, M, D))
        cfg = SGDConfig(model="quadratic", epsilon=320.0, clip=1.0, t0=3, seed=r,
                        method="two-stage")
        res = run_sgd(cfg, ArrayUsers(X), rng=RandomSource.seeded(f"sgd-bias-{r}"))
        assert res.trajectory[0]["regime"] == "low"
        for step, members in zip(res.trajectory, partition(N, 3, r), strict=True):
            g = np.asarray(step["theta"]) - X[members].reshape(-1, D)  # norms < 1: no clip
            errs.append(np.asarray(step["gradient"]) - g.mean(axis=0))
    e = np.array(errs)
    se = e.std(axis=0, ddof=1) / math.sqrt(len(e))
    assert np.all(se < 0.001), se
    assert np.all(np.abs(e.mean(axis=0)) < 4.5 * se), (e.mean(axis=0), se)


def test_s9_quadratic_rate_and_theorem8() -> None:
    """S9: E‖θ̂ − θ*‖ falls like √(ln n/(nm)) in n (t0 = ⌈ln n⌉, Theorem 8's t0 ≍ ln n),
    and stays within a factor 8 of the Theorem 8 bound with C = 1.

    Low regime (ε = 32 ≥ N ln n_t): one group per step, ε_c = 8. 12 repetitions per n
    (fixed seeds); measured: slope −0.49, error / bound(C=1) = 3.8–4.5.
    """
    d, m, eps, reps = 2, 16, 32.0, 12
    ns = (500, 2000, 8000)
    mean_err = []
    for n in ns:
        errs = []
        for r in range(reps):
            src, mu = quadratic_population(n, m, d, np.random.default_rng([n, r]))
            cfg = SGDConfig(model="quadratic", epsilon=eps, clip=1.0,
                            t0=math.ceil(math.log(n)), seed=r, method="two-stage")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = run_sgd(cfg, src, rng=RandomSource.seeded(n * 100 + r))
            errs.append(float(np.linalg.norm(out.theta - mu)))
        e = float(np.mean(errs))
        bound = theorem8_bound(n, m, d, eps, 1.0, 1.0, 1.0, out.t0, float(np.linalg.norm(mu)))
        assert 0.5 * bound <= e <= 8.0 * bound, (n, e, bound)
        mean_err.append(e)
    slope = np.polyfit(np.log(ns), np.log(mean_err), 1)[0]
    assert -0.65 <= slope <= -0.35, slope
