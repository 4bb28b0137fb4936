"""Tests for user-level subsample-and-aggregate with the PMWM aggregator (spec §2.6, §5 A1,
A2, A7, A8; §7 checklist items 4 and 6). All randomness is seeded: deterministic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.collector.central.data import group_by_user
from uldp.collector.central.pmwm import PMWMParams
from uldp.collector.central.sa_statistics import (
    BUILTIN_STATISTICS,
    random_intercept_lmm,
    resolve_statistic,
)
from uldp.collector.central.subsample_aggregate import (
    SAParams,
    group_statistics,
    partition_users,
    subsample_and_aggregate,
)

# small synthetic cohorts trigger the §2.5 low-budget warning by design
pytestmark = pytest.mark.filterwarnings(
    "ignore::uldp.collector.central.pmwm.PMWMAccuracyWarning")


def _panel(n_users: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    visits = g.integers(1, 7, size=n_users)
    uid = np.repeat(np.arange(n_users) * 7 + 3, visits)  # non-contiguous ids
    vals = g.normal(size=uid.size) + 0.5
    return uid, vals


# ---------------------------------------------------------------------------------------
# partition (A7) and the one-group property (§7 item 6)
# ---------------------------------------------------------------------------------------
def test_partition_sizes_drop_and_spread() -> None:
    parts = partition_users(103, 10, RandomSource.seeded(0), "drop")
    assert len(parts) == 10 and all(p.size == 10 for p in parts)
    used = np.concatenate(parts)
    assert np.unique(used).size == 100  # disjoint; 3 users dropped
    parts = partition_users(103, 10, RandomSource.seeded(0), "spread")
    sizes = sorted(p.size for p in parts)
    assert sizes == [10] * 7 + [11] * 3
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(103))
    with pytest.raises(ValueError, match="group_size"):
        partition_users(5, 10, RandomSource.seeded(0))


def test_partition_is_data_independent() -> None:
    """The partition is a function of (n_users, k, seed) only: same for any values."""
    uid, vals = _panel(200, 1)
    calls: list[list[int]] = []

    def spy(v: np.ndarray, u: np.ndarray) -> float:
        calls.append(sorted(set(u.tolist())))
        return float(v.mean())

    for values in (vals, vals * 100 - 7):
        subsample_and_aggregate(uid, values, spy, epsilon=2.0,
                                params=SAParams(group_size=9), rng=RandomSource.seeded(5))
    half = len(calls) // 2
    assert calls[:half] == calls[half:]


def test_users_are_never_split_across_groups() -> None:
    uid, vals = _panel(120, 2)
    seen: list[np.ndarray] = []

    def spy(v: np.ndarray, u: np.ndarray) -> float:
        seen.append(u.copy())
        return float(v.mean())

    subsample_and_aggregate(uid, vals, spy, epsilon=2.0, params=SAParams(group_size=7),
                            rng=RandomSource.seeded(0))
    owner: dict[int, int] = {}
    counts = dict(zip(*np.unique(uid, return_counts=True), strict=True))
    for gi, u in enumerate(seen):
        for user, c in zip(*np.unique(u, return_counts=True), strict=True):
            assert owner.setdefault(int(user), gi) == gi
            assert c == counts[user]  # all of the user's rows are in the group
    assert len(seen) == 120 // 7


def test_changing_one_user_changes_at_most_one_group_statistic() -> None:
    uid, vals = _panel(90, 3)
    groups = group_by_user(uid, vals)
    part = partition_users(groups.n_users, 6, RandomSource.seeded(1))
    stat = resolve_statistic("mean")
    base, _ = group_statistics(groups, part, stat, 1, None)
    for victim in (0, 17, 89):
        v2 = vals.copy()
        v2[uid == groups.users[victim]] = 1e9  # unbounded change of all rows of one user
        t2, _ = group_statistics(group_by_user(uid, v2), part, stat, 1, None)
        changed = np.flatnonzero(np.any(t2 != base, axis=1))
        assert changed.size <= 1
        in_group = [i for i, p in enumerate(part) if victim in p]
        assert changed.tolist() == in_group  # empty when the victim was dropped


# ---------------------------------------------------------------------------------------
# budgets (§7 item 4, A2)
# ---------------------------------------------------------------------------------------
def test_per_coordinate_budgets_sum_to_total() -> None:
    g = np.random.default_rng(0)
    uid = np.arange(600)
    vals = g.normal(size=(600, 3))
    rel = subsample_and_aggregate(uid, vals, "mean", epsilon=None, rho=3.0,
                                  params=SAParams(group_size=3), rng=RandomSource.seeded(0))
    assert sum(rel.privacy.public["per_coordinate_budget"]) == pytest.approx(3.0)
    assert sum(rel.privacy.split.values()) == pytest.approx(1.0)
    assert rel.privacy.public["d"] == 3 and rel.privacy.public["groups"] == 200
    w = (0.5, 0.3, 0.2)
    rel = subsample_and_aggregate(uid, vals, "mean", epsilon=3.0,
                                  params=SAParams(group_size=3, weights=w),
                                  rng=RandomSource.seeded(0))
    assert rel.privacy.public["per_coordinate_budget"] == pytest.approx([1.5, 0.9, 0.6])
    assert sum(rel.privacy.split.values()) == pytest.approx(1.0)
    assert rel.privacy.mode == "pure" and rel.privacy.epsilon == 3.0


# ---------------------------------------------------------------------------------------
# failures (A8), built-ins, accuracy
# ---------------------------------------------------------------------------------------
def test_failed_statistic_replaced_by_public_midpoint() -> None:
    uid, vals = _panel(400, 4)
    calls = {"n": 0}

    def flaky(v: np.ndarray, _u: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] % 5 == 0:
            raise RuntimeError("did not converge")
        if calls["n"] % 7 == 0:
            return np.array([np.nan, 1.0])
        return np.array([v.mean(), 1.0])

    p = PMWMParams(lower=-10, upper=30)
    groups = group_by_user(uid, vals)
    part = partition_users(groups.n_users, 4, RandomSource.seeded(0))
    t, failed = group_statistics(groups, part, flaky, 2, np.array([10.0, 10.0]))
    assert failed[:, 0].sum() == len(part) // 5 + len(part) // 7 - len(part) // 35
    assert np.all(t[failed] == 10.0) and np.isfinite(t).all()
    calls["n"] = 0
    rel = subsample_and_aggregate(uid, vals, flaky, epsilon=4.0,
                                  params=SAParams(group_size=4, pmwm=p, dim=2),
                                  rng=RandomSource.seeded(0))
    assert all(math.isfinite(e) for e in rel.estimate)


def test_builtin_statistics() -> None:
    g = np.random.default_rng(0)
    x = g.normal(size=50)
    y = 2.0 - 0.5 * x + 0.1 * g.normal(size=50)
    u = np.arange(50)
    xy = np.column_stack([x, y])
    np.testing.assert_allclose(BUILTIN_STATISTICS["ols"](xy, u), np.polyfit(x, y, 1)[::-1])
    np.testing.assert_allclose(BUILTIN_STATISTICS["ols-slope"](xy, u), [np.polyfit(x, y, 1)[0]])
    np.testing.assert_allclose(BUILTIN_STATISTICS["mean"](x, u), [x.mean()])
    # "mean" averages user means (users weighted equally); "pooled-mean" averages rows
    uu = np.array([0, 0, 0, 1])
    vv = np.array([1.0, 1.0, 1.0, 3.0])
    np.testing.assert_allclose(BUILTIN_STATISTICS["mean"](vv, uu), [2.0])
    np.testing.assert_allclose(BUILTIN_STATISTICS["pooled-mean"](vv, uu), [1.5])
    np.testing.assert_allclose(BUILTIN_STATISTICS["median"](x, u), [np.median(x)])
    np.testing.assert_allclose(BUILTIN_STATISTICS["variance-mle"](x, u), [x.var()])
    with pytest.raises(ValueError, match="statistic"):
        resolve_statistic("mode")


def test_random_intercept_lmm_recovers_parameters() -> None:
    g = np.random.default_rng(1)
    n = 3000
    visits = g.integers(1, 7, size=n)
    uid = np.repeat(np.arange(n), visits)
    N = uid.size
    t = g.uniform(0, 3, N)
    w = g.binomial(1, 0.3, N).astype(float)
    ly = 3.0 + math.log(0.878) * t + 0.05 * w + g.normal(0, 0.3, n)[uid] + g.normal(0, 0.2, N)
    est = random_intercept_lmm(np.column_stack([ly, t, w]), uid)
    np.testing.assert_allclose(est, [3.0, math.log(0.878), 0.05, 0.09, 0.04], atol=0.012)


def test_sa_mean_accuracy() -> None:
    """SA of the mean over 20000 single-row users, k = 10 (m = 2000), rho = 1: error of
    the PMWM aggregator ~ 1e-2 at most (sd of group means 0.32/sqrt(2000) + noise)."""
    g = np.random.default_rng(6)
    vals = g.normal(1.0, 1.0, size=20000)
    for kw in ({"epsilon": None, "rho": 1.0}, {"epsilon": 1.0}):
        rel = subsample_and_aggregate(np.arange(20000), vals, "mean",
                                      params=SAParams(group_size=10),
                                      rng=RandomSource.seeded(2), **kw)
        assert abs(rel.estimate - 1.0) < 0.05


def test_sa_mean_estimates_the_mean_of_user_means() -> None:
    """Skewed counts: heavy users have low values. The mean of user means (0.75) and the
    pooled mean (~0.12) differ a lot; SA's "mean" targets the former (issue 11)."""
    g = np.random.default_rng(12)
    n = 4000
    heavy = np.arange(n) < n // 4
    counts = np.where(heavy, 40, 1)
    uid = np.repeat(np.arange(n), counts)
    vals = np.where(heavy[uid], 0.0, 1.0) + 0.01 * g.normal(size=uid.size)
    rel = subsample_and_aggregate(uid, vals, "mean", epsilon=2.0,
                                  params=SAParams(group_size=10), rng=RandomSource.seeded(3))
    assert abs(rel.estimate - 0.75) < 0.03 and "mean of user means" in rel.estimand


def test_sa_is_deterministic_given_seed() -> None:
    uid, vals = _panel(300, 8)
    a = subsample_and_aggregate(uid, vals, "median", epsilon=1.0, rng=RandomSource.seeded(9))
    b = subsample_and_aggregate(uid, vals, "median", epsilon=1.0, rng=RandomSource.seeded(9))
    assert a.estimate == b.estimate


# ---------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "name"), [
    ({"group_size": 0}, "group_size"), ({"group_size": 2.5}, "group_size"),
    ({"leftover": "keep"}, "leftover"), ({"pmwm": "x"}, "pmwm"), ({"dim": 0}, "dim"),
    ({"failure_value": float("nan")}, "failure_value"), ({"weights": (0.5, 0.6)}, "weights"),
])
def test_sa_params_validation(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        SAParams(**kwargs)  # type: ignore[arg-type]


def test_sa_bad_inputs() -> None:
    uid, vals = _panel(50, 0)
    with pytest.raises(ValueError, match="epsilon"):
        subsample_and_aggregate(uid, vals, "mean", epsilon=-1.0)
    with pytest.raises(ValueError, match="values"):
        subsample_and_aggregate(uid, np.where(vals > 2, np.nan, vals), "mean", epsilon=1.0)
    with pytest.raises(ValueError, match="statistic"):
        subsample_and_aggregate(uid, vals, 42, epsilon=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group_size"):
        subsample_and_aggregate(uid, vals, "mean", epsilon=1.0,
                                params=SAParams(group_size=100))
    with pytest.raises(ValueError, match="weights"):
        subsample_and_aggregate(uid, vals, "mean", epsilon=1.0,
                                params=SAParams(weights=(0.5, 0.5)))


def test_sa_spread_leftover_uses_every_user() -> None:
    uid, vals = _panel(105, 5)
    seen: list[int] = []

    def spy(v: np.ndarray, u: np.ndarray) -> float:
        seen.extend(np.unique(u).tolist())
        return float(v.mean())

    rel = subsample_and_aggregate(uid, vals, spy, epsilon=2.0,
                                  params=SAParams(group_size=10, leftover="spread"),
                                  rng=RandomSource.seeded(1))
    assert sorted(seen) == sorted(np.unique(uid).tolist())
    assert rel.privacy.public["users_dropped"] == 0 and rel.privacy.public["groups"] == 10
