"""Exact privacy audits of the learning device functions (spec §4.4, §8.4, §9.3, §10.3,
§13.3 P3, INV-6): for pairs of whole local datasets the log-likelihood ratio of the report
never exceeds the task's ε, including adversarial custom gradients (huge, NaN, inf)."""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest

from tests.learning.audit import budget, pairwise_max_log_ratio, user_statistic
from uldp.client.kinds.learning import GRADIENTS, register_gradient
from uldp.client.randomness import RandomSource
from uldp.client.tasks import compute_report, report_limit
from uldp.collector.planner import QuerySpec, compile_query


def _tasks(kind: str, epsilon: float, extra: dict, dim: int = 2, users: int = 4000,
           method: str = "two-stage", m: int = 50):
    spec = QuerySpec(kind=kind, epsilon=epsilon, users=users, samples=m, dim=dim,
                     bound=1.0, method=method, extra=extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small-group stage-I warnings are irrelevant here
        plan = compile_query(spec)
    out = []
    for g in range(min(plan.n_groups, 3)):
        if method == "two-stage":
            t1 = plan.task_for(g, 1)
            bins = [B for _, _, B in t1.bins]
            khat = tuple(1 + (c % bins[i]) for i, c in enumerate(t1.components))
            out += [t1, plan.task_for(g, 2, khat),
                    plan.task_for(g, 2, tuple(0 for _ in t1.components))]
        else:
            out.append(plan.task_for(g, 0))
    return out


def _huge(theta, X, y, extra):
    return np.full_like(X, 1e300) * np.sign(X[:, :1] + 0.5)


def _nan(theta, X, y, extra):
    G = X.copy()
    G[::2] = np.nan
    G[1::3] = np.inf
    return G * 1e200


def _wild(theta, X, y, extra):
    return np.exp(50 * X) * (y[:, None] - 0.5) * 1e250


register_gradient("test-huge", _huge)
register_gradient("test-nan", _nan)
register_gradient("test-wild", _wild)


def _datasets(rng: np.random.Generator, d: int, m: int, kind: str) -> list:
    """Local datasets from benign to adversarial (labels included)."""
    out = []
    for scale in (0.1, 1.0, 50.0, 1e9):
        X = rng.normal(scale=scale, size=(m, d))
        y = rng.choice([-1.0, 1.0], size=m) * (1e8 if scale > 1e3 else 1.0)
        out.append((X, y))
    out.append((np.zeros((m, d)), np.ones(m)))
    out.append((np.full((m, d), 1e12), -np.ones(m) * 1e12))
    out.append((rng.uniform(size=(m, d)), rng.uniform(size=m) > 0.5))
    # the totality invariant's degenerate datasets: empty, one sample, NaN labels,
    # non-finite and ±1e308 features, missing labels
    out.append((np.zeros((0, d)), np.zeros(0)))
    out.append((np.ones((1, d)), np.ones(1)))
    out.append((rng.uniform(size=(m, d)), np.full(m, np.nan)))
    bad = rng.uniform(size=(m, d))
    bad[::2] = np.inf
    out.append((bad, np.ones(m)))
    out.append((np.full((m, d), -1e308), np.full(m, 1e308)))
    out.append((rng.uniform(size=(m, d)), None))
    return out


@pytest.mark.parametrize("model", ["quadratic", "least_squares", "logistic", "test-huge",
                                   "test-nan", "test-wild"])
@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_sgd_report_llr_bounded(model: str, epsilon: float) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{model}/{epsilon}".encode()))
    extra = {"model": model, "theta": [0.3, -0.2], "l2": 0.01}
    data = _datasets(rng, 2, 20, "sgd")
    worst = 0.0
    for task in _tasks("sgd", epsilon, extra):
        eps = budget(task)
        assert eps <= epsilon * (1 + 1e-9)
        R = pairwise_max_log_ratio(task, data, rng)
        assert R.max() <= eps + 1e-9, (task.stage, R.max(), eps)
        worst = max(worst, R.max() / eps)
    if model != "test-nan":  # NaN/inf rows are zeroed: those datasets look alike
        assert worst > 0.3  # the audit sees real differences (it can fail)


@pytest.mark.parametrize("model", ["test-huge", "test-nan", "test-wild"])
def test_adversarial_gradient_statistic_is_clamped(model: str) -> None:
    """Whatever a registered gradient returns, the user statistic stays in [-D', D']."""
    rng = np.random.default_rng(7)
    task = _tasks("sgd", 2.0, {"model": model, "theta": [0.0, 1.0]})[0]
    from uldp.client.kinds import KINDS

    Dp = KINDS["sgd"].component_bounds(task)[0]
    for X, y in _datasets(rng, 2, 30, "sgd"):
        Y = user_statistic(task, X, y)
        assert np.isfinite(Y).all() and np.abs(Y).max() <= Dp + 1e-12
        for t in _tasks("sgd", 2.0, {"model": model, "theta": [0.0, 1.0]}):
            rep = compute_report(t, X, y, rng=RandomSource.seeded(3))
            assert rep.dtype == np.int64 and np.abs(rep).max() <= report_limit(t)


def _worst_llr_share(kind: str, epsilon: float, extra: dict, seed: int) -> float:
    """Every task's exact pairwise log-likelihood ratio is within its budget; returns the
    largest ratio/budget seen (the bound must be nearly attained, not vacuous)."""
    rng = np.random.default_rng(seed)
    data = _datasets(rng, 2, 25, kind)
    worst = 0.0
    for task in _tasks(kind, epsilon, extra):
        eps = budget(task)
        R = pairwise_max_log_ratio(task, data, rng)
        assert R.max() <= eps + 1e-9
        worst = max(worst, R.max() / eps)
    return worst


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 40.0])
def test_classify_report_llr_bounded(epsilon: float) -> None:
    extra = {"grid": 3, "lo": [-1.0, 0.0], "hi": [1.0, 5.0]}
    assert _worst_llr_share("classify", epsilon, extra, 11) > 0.3


@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_regress_report_llr_bounded(epsilon: float) -> None:
    assert _worst_llr_share("regress", epsilon, {"grid": 2, "label_bound": 3.0}, 12) > 0.3


@pytest.mark.parametrize("kind,extra", [
    ("sgd", {"model": "test-nan", "theta": [1.0, 2.0]}),
    ("classify", {"grid": 4}),
    ("regress", {"grid": 2, "label_bound": 1.0}),
])
@pytest.mark.parametrize("method", ["baseline-b", "ssl"])
def test_single_stage_methods_llr_bounded(kind: str, extra: dict, method: str) -> None:
    rng = np.random.default_rng(13)
    data = _datasets(rng, 2, 10, kind)
    for task in _tasks(kind, 1.0, extra, method=method):
        # baseline B picks one sample on the device: audit single-sample datasets
        sets = ([(X[:1], None if y is None else y[:1]) for X, y in data]
                if method == "baseline-b" else data)
        assert pairwise_max_log_ratio(task, sets, rng).max() <= budget(task) + 1e-9


def test_builtin_gradients_registered() -> None:
    assert {"quadratic", "least_squares", "ridge", "logistic"} <= set(GRADIENTS)


def _identity_tasks(epsilon: float, extra: dict, mech: str, method: str = "ssl"):
    """The value tasks of the windowed SGD rounds: per-coordinate gradient reports
    (``frame_kind = identity``) on narrow windows anywhere in ``[-D, D]``, with a scalar
    randomizer."""
    from dataclasses import replace

    spec = QuerySpec(kind="sgd", epsilon=epsilon, users=600, samples=20, dim=2, bound=1.0,
                     method=method, frame_kind="identity", extra=extra, randomizer=mech)
    plan = compile_query(spec)
    out = []
    for g in range(min(plan.n_groups, 2)):
        t = plan.task_for(g, 0)
        k = len(t.components)
        for window in ((-1.0, 1.0), (0.02, 0.05), (0.97, 1.0), (-3.0, -2.0)):
            out.append(replace(t, intervals=tuple(window for _ in range(k))))
    return out


@pytest.mark.parametrize("mech", ["laplace", "duchi", "pm", "hm"])
@pytest.mark.parametrize("epsilon,model", [(0.5, "logistic"), (3.0, "test-wild")])
def test_identity_sgd_report_llr_bounded(mech: str, epsilon: float, model: str) -> None:
    """Per-coordinate gradient reports through every scalar randomizer, on windows inside,
    at the edge of and outside the support: the exact pairwise log-likelihood ratio over
    whole local datasets (adversarial and degenerate ones included) stays within the ε the
    task charges — and comes close to it (the audit can fail)."""
    rng = np.random.default_rng(zlib.crc32(f"id/{mech}/{epsilon}/{model}".encode()))
    extra = {"model": model, "theta": [0.3, -0.2], "l2": 0.01}
    data = _datasets(rng, 2, 12, "sgd")
    worst = 0.0
    for task in _identity_tasks(epsilon, extra, mech):
        eps = budget(task)
        assert eps <= epsilon * (1 + 1e-9)
        R = pairwise_max_log_ratio(task, data, rng, k=120)
        assert R.max() <= eps + 1e-9, (task.intervals, R.max(), eps)
        worst = max(worst, R.max() / eps)
    assert worst > 0.3


@pytest.mark.parametrize("model", ["test-huge", "test-nan", "test-wild", "logistic"])
def test_identity_statistic_is_clamped(model: str) -> None:
    """Whatever a gradient returns, a per-coordinate statistic lies in ``[-D, D]^d`` and
    every report is one well-formed integer vector within the task's limit."""
    rng = np.random.default_rng(8)
    from uldp.client.kinds import KINDS

    for task in _identity_tasks(2.0, {"model": model, "theta": [0.0, 1.0]}, "hm"):
        assert KINDS["sgd"].component_bounds(task).tolist() == [1.0, 1.0]
        for X, y in _datasets(rng, 2, 9, "sgd"):
            Y = user_statistic(task, X, y)
            assert np.isfinite(Y).all() and np.abs(Y).max() <= 1.0
            rep = compute_report(task, X, y, rng=RandomSource.seeded(5))
            assert rep.shape == (len(task.components),) and rep.dtype == np.int64
            assert np.abs(rep).max() <= report_limit(task)
