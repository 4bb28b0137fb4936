"""Tests for uldp.collector.central.clip_user (docs/central-algorithms.md C§2.5–C§2.7).

Checklist §7 items 4-6: the §2.9 end-to-end example, the planner invariants, privacy
accounting; plus a literal re-implementation of the pseudocode (dense, slow) that the fast
planner must match exactly, and a §4.4 regression on the §4.3 generator.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.collector.central.clip_user import (
    ClipUserOptions,
    ClipUserPlan,
    clip_user,
    plan_clip_user,
    plan_from_occupancy,
    pseudo_user_cap,
)
from uldp.collector.central.occupancy import Occupancy, kept_summary, occupancy_from_rows
from uldp.collector.central.subset_params import SubsetStatsParams, grid_error
from uldp.collector.central.subset_release import subset_stats

PAPER = SubsetStatsParams(epsilon=1.0, upper=10.0, error_model="paper")


def example_29() -> np.ndarray:
    a = np.zeros((12, 3), np.int64)
    a[0] = 1
    a[1, 0] = 10
    a[2:7, 1] = 2
    a[7:12, 2] = 2
    return a


def rows_from_dense(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, g = np.nonzero(a)
    reps = a[u, g]
    return np.repeat(u, reps), np.repeat(g, reps)


# ---- a literal transcription of the spec pseudocode (dense, slow) -----------------------
def ref_grid_error(gamma: np.ndarray, m: np.ndarray, p: SubsetStatsParams) -> float:
    if gamma.sum() == 0:
        return math.inf
    sel = m > 0
    return grid_error(gamma[sel], m[sel], upper=p.width, epsilon=p.epsilon,
                      statistic=p.statistic, mean_share=p.mean_share, weights=p.weights,
                      error_model=p.error_model, grid_bits=p.grid_bits)


def ref_clip_user(a: np.ndarray, p: SubsetStatsParams, e_target: float | None = None,
                  protect: bool = False) -> np.ndarray:
    gam = a.copy()
    e0 = [ref_grid_error(gam[:, g], a[:, g], p) for g in range(a.shape[1])]
    e = max(e0) if e_target is None else e_target
    prot = {int(np.argmin(e0))} if protect else set()
    while True:
        gl = (gam > 0).sum(axis=1)
        k = gl.max()
        if k <= 1:
            return gam
        for ell in np.flatnonzero(gl == k):
            cands = []
            for g in np.flatnonzero(gam[ell] > 0):
                if g in prot:
                    continue
                save = gam[ell, g]
                gam[ell, g] = 0
                cands.append((ref_grid_error(gam[:, g], a[:, g], p), g))
                gam[ell, g] = save
            if not cands:
                return gam
            e_star, g_star = min(cands)
            if e_star > e:
                return gam
            gam[ell, g_star] = 0


def random_occupancy(seed: int, n_users: int = 25, n_grids: int = 5) -> np.ndarray:
    gen = RandomSource.seeded(seed).numpy_generator()
    a = gen.geometric(0.3, (n_users, n_grids)) * (gen.random((n_users, n_grids)) < 0.6)
    heavy = gen.integers(0, n_users, n_grids)
    a[heavy, np.arange(n_grids)] *= 1 + gen.integers(0, 8, n_grids)
    a[a.sum(axis=1) == 0, 0] = 1
    return a.astype(np.int64)


# ---- §7 item 4: the §2.9 example --------------------------------------------------------
def test_example_29_end_to_end() -> None:
    occ = Occupancy.from_dense(example_29())
    plan = plan_from_occupancy(occ, PAPER)
    np.testing.assert_allclose(plan.error_initial, [8200 / 121, 4040 / 121, 4040 / 121],
                               rtol=1e-13)
    assert plan.error_bound == pytest.approx(8200 / 121, rel=1e-13)
    assert plan.k_initial == 3 and plan.k_final == 1
    np.testing.assert_allclose(plan.error_clip, [8200 / 121, 36 + 1110 / 121,
                                                 36 + 1110 / 121], rtol=1e-13)
    assert [round(x, 3) for x in plan.error_final] == [67.769, 45.174, 45.174]
    assert plan.max_error == pytest.approx(67.769, abs=5e-4)  # the cap does not help here
    dense = np.zeros((12, 3), np.int64)
    dense[occ.pair_user, occ.pair_grid] = plan.kept_clip
    assert dense[0].tolist() == [1, 0, 0]  # user 0 stays in g0 only
    np.testing.assert_array_equal(dense[1:], example_29()[1:])
    assert plan.stages == 2 and plan.suppressions == 2 and plan.halted == "K <= 1"


def test_example_29_stage1_candidates_and_tie_break() -> None:
    a = example_29()
    g = a.copy()
    g[0, 0] = 0
    assert ref_grid_error(g[:, 0], a[:, 0], PAPER) == pytest.approx(79.174, abs=5e-4)
    for col in (1, 2):
        g = a.copy()
        g[0, col] = 0
        assert ref_grid_error(g[:, col], a[:, col], PAPER) == pytest.approx(
            36 + 1110 / 121, rel=1e-13)
    # with the stage stopped after one commit (K = 2 target), g1 (smallest id) was chosen
    res = clip_user(Occupancy.from_dense(a), PAPER)
    assert res.suppressions == 2


# ---- the fast planner equals the literal pseudocode ------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_planner_matches_reference_pseudocode(seed: int) -> None:
    a = random_occupancy(seed)
    occ = Occupancy.from_dense(a)
    eps = [0.2, 1.0, 5.0][seed % 3]
    p = SubsetStatsParams(epsilon=eps, upper=3.0, error_model="paper" if seed % 2 else
                          "release", weights=(1.0, 1.0 / 3.0) if seed % 4 == 1 else (1.0, 1.0))
    protect = seed % 3 == 0
    ref = ref_clip_user(a, p, protect=protect)
    res = clip_user(occ, p, protect_min_grid=protect)
    np.testing.assert_array_equal(res.kept, ref[occ.pair_user, occ.pair_grid])


@pytest.mark.parametrize("seed", range(4))
def test_pseudo_user_cap_matches_direct_search(seed: int) -> None:
    a = random_occupancy(100 + seed, n_users=15, n_grids=4)
    occ = Occupancy.from_dense(a)
    p = SubsetStatsParams(epsilon=0.3, upper=2.0, error_model="paper")
    res = clip_user(occ, p)
    capped, caps, errs = pseudo_user_cap(occ, res.kept, p)
    gam = np.zeros_like(a)
    gam[occ.pair_user, occ.pair_grid] = res.kept
    for g in range(a.shape[1]):
        act = gam[:, g][gam[:, g] > 0]
        best_m, best_e = None, math.inf
        for m in range(int(act.min()), int(act.max()) + 1):
            e = ref_grid_error(np.minimum(gam[:, g], m), a[:, g], p)
            if e <= best_e:  # ties -> the largest m
                best_m, best_e = m, e
        assert caps[g] == best_m
        assert errs[g] == pytest.approx(best_e, rel=1e-12)
    assert (capped <= res.kept).all()
    assert ((res.kept == 0) <= (capped == 0)).all()  # suppressed users stay out


# ---- §7 item 5: invariants ----------------------------------------------------------
@pytest.mark.parametrize("seed", range(10))
def test_planner_invariants(seed: int) -> None:
    a = random_occupancy(200 + seed, n_users=60, n_grids=8)
    occ = Occupancy.from_dense(a)
    p = SubsetStatsParams(epsilon=[0.1, 0.5, 2.0][seed % 3], upper=65.0)
    plan = plan_from_occupancy(occ, p, protect_min_grid=bool(seed % 2))
    s_clip, _ = kept_summary(occ, plan.kept_clip)
    s_fin, _ = kept_summary(occ, plan.kept)
    assert (plan.error_clip <= plan.error_bound).all()
    assert (plan.error_final <= plan.error_clip).all()
    assert plan.error_bound == plan.initial_max_error
    assert (s_clip > 0).all() and (s_fin > 0).all()  # no empty subset (B5)
    assert plan.k_final <= plan.k_initial
    assert (plan.kept <= plan.kept_clip).all() and (plan.kept_clip <= occ.counts).all()
    assert ((plan.kept_clip == 0) | (plan.kept_clip == occ.counts)).all()  # suppression only
    if plan.protected_grid is not None:
        sel = occ.pair_grid == plan.protected_grid
        np.testing.assert_array_equal(plan.kept_clip[sel], occ.counts[sel])


def test_error_target_below_initial_max() -> None:
    a = random_occupancy(300, n_users=60, n_grids=8)
    occ = Occupancy.from_dense(a)
    p = SubsetStatsParams(epsilon=0.5, upper=65.0)
    free = plan_from_occupancy(occ, p)
    target = float(np.median(free.error_initial))
    plan = plan_from_occupancy(occ, p, error_target=target)
    assert plan.error_target == target and plan.error_bound == target
    assert (plan.error_clip <= np.maximum(target, plan.error_initial)).all()
    assert plan.k_final >= free.k_final  # a tighter bound cannot suppress more
    with pytest.raises(ValueError, match="error_target"):
        plan_from_occupancy(occ, p, error_target=-1.0)


def test_plan_reads_occupancy_only() -> None:
    """The plan is a function of A: same counts in any row order give the same plan, and
    releases with different values use the same kept counts and noise scales."""
    a = random_occupancy(400, n_users=40, n_grids=6)
    u, g = rows_from_dense(a)
    kw = {"epsilon": 0.5, "upper": 1.0, "public_occupancy": True}
    plan = plan_clip_user(u, g, **kw)
    perm = RandomSource.seeded(5).numpy_generator().permutation(u.size)
    plan2 = plan_clip_user(u[perm], g[perm], **kw)
    dense = Occupancy.from_dense(a)
    plan3 = plan_from_occupancy(dense, plan.params)
    np.testing.assert_array_equal(plan.kept, plan2.kept)
    np.testing.assert_array_equal(plan.kept, plan3.kept)
    gen = RandomSource.seeded(6).numpy_generator()
    outs = [subset_stats(u, vals, g, plan=plan, rng=RandomSource.seeded(7), **kw)
            for vals in (gen.random(u.size), gen.random(u.size) ** 3)]
    for key in ("kept_records", "max_kept", "mean_sensitivity", "variance_sensitivity"):
        np.testing.assert_array_equal(outs[0].details[key], outs[1].details[key])
    assert "values" not in plan_clip_user.__code__.co_varnames


# ---- §7 item 6: privacy accounting ---------------------------------------------------
def test_privacy_accounting() -> None:
    a = random_occupancy(500, n_users=50, n_grids=7)
    u, g = rows_from_dense(a)
    plan = plan_clip_user(u, g, epsilon=0.3, upper=1.0, public_occupancy=True)
    occ = plan.occupancy
    post = np.zeros(occ.n_users, np.int64)
    np.add.at(post, occ.pair_user, plan.kept > 0)
    np.testing.assert_allclose(plan.user_loss_after, 0.3 * post)
    np.testing.assert_allclose(plan.user_loss_before, 0.3 * (a > 0).sum(axis=1))
    assert plan.user_loss_after.max() == pytest.approx(plan.k_final * 0.3)
    assert plan.epsilon_total == pytest.approx(plan.k_final * 0.3)
    vals = RandomSource.seeded(8).numpy_generator().random(u.size)
    rel = subset_stats(u, vals, g, epsilon=0.3, upper=1.0, plan=plan, public_occupancy=True,
                       rng=RandomSource.seeded(9))
    assert rel.privacy.mode == "pure"
    assert rel.privacy.epsilon == pytest.approx(plan.epsilon_total)
    np.testing.assert_allclose(rel.details["user_loss"], plan.user_loss_after)
    np.testing.assert_allclose(rel.details["worst_case_error"], plan.error_final)


def test_stage_semantics_cumulative() -> None:
    """B10: two max-occupancy users suppressed in the same stage see each other's commits."""
    a = np.array([[1, 1], [1, 1], [1, 0], [1, 0], [0, 1], [0, 1], [0, 1]], np.int64)
    occ = Occupancy.from_dense(a)
    p = SubsetStatsParams(epsilon=1.0, upper=1.0, error_model="paper")
    res = clip_user(occ, p, error_target=100.0)
    ref = ref_clip_user(a, p, e_target=100.0)
    np.testing.assert_array_equal(res.kept, ref[occ.pair_user, occ.pair_grid])
    dense = np.zeros_like(a)
    dense[occ.pair_user, occ.pair_grid] = res.kept
    assert (dense > 0).sum(axis=1).max() == 1
    assert (dense.sum(axis=0) > 0).all()


def test_last_user_never_suppressed_and_halt() -> None:
    a = np.array([[3, 3]], np.int64)  # one user in two subsets: suppressing empties one
    plan = plan_from_occupancy(Occupancy.from_dense(a), PAPER, error_target=1e9)
    assert plan.k_final == 2 and "cannot be suppressed" in plan.halted
    b = np.array([[1, 1], [1, 0]], np.int64)
    plan = plan_from_occupancy(Occupancy.from_dense(b), PAPER, protect_min_grid=True,
                               error_target=1e9)
    assert plan.protected_grid == 1  # initial errors (60, 20): grid 1 is protected
    assert plan.k_final == 1 and plan.kept_clip.tolist() == [0, 1, 1]  # (g0,u0),(g0,u1),(g1,u0)


def test_describe_and_tables() -> None:
    plan = plan_from_occupancy(Occupancy.from_dense(example_29()), PAPER)
    text = plan.describe()
    assert "3 -> 1" in text and "67.7686" in text and "45.1736" in text
    subs = plan.to_table("subsets")
    assert [r["users_after"] for r in subs] == [2, 5, 5]
    users = plan.to_table("users")
    assert users[0] == {"user": 0, "subsets_before": 3, "subsets_after": 1,
                        "loss_before": 3.0, "loss_after": 1.0}
    with pytest.raises(ValueError, match="kind"):
        plan.to_table("grids")
    assert isinstance(plan, ClipUserPlan)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"error_target": 0.0}, "error_target"), ({"protect_min_grid": 1}, "protect_min_grid"),
    ({"cap_from_one": "yes"}, "cap_from_one"), ({"pseudo_user_cap": None}, "pseudo_user_cap"),
])
def test_options_validation(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        ClipUserOptions(**kwargs)
    occ = Occupancy.from_dense(example_29())
    with pytest.raises(ValueError, match="either"):
        plan_from_occupancy(occ, PAPER, ClipUserOptions(), protect_min_grid=True)


def test_cap_from_one_never_worse() -> None:
    occ = Occupancy.from_dense(random_occupancy(700, n_users=40, n_grids=6))
    p = SubsetStatsParams(epsilon=0.2, upper=1.0)
    a = plan_from_occupancy(occ, p)
    b = plan_from_occupancy(occ, p, ClipUserOptions(cap_from_one=True))
    assert (b.error_final <= a.error_final).all() and b.k_final == a.k_final
    assert b.options.cap_from_one and not a.options.cap_from_one


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"public_occupancy": False}, "public_occupancy"), ({"epsilon": 0.0}, "epsilon"),
    ({"upper": float("inf")}, "upper"), ({"error_target": float("nan")}, "error_target"),
    ({"subsets": "short"}, "subsets")])
def test_planner_bad_inputs(kwargs: dict, name: str) -> None:
    u, g = rows_from_dense(example_29())
    kw: dict = {"epsilon": 1.0, "upper": 10.0, "public_occupancy": True}
    if kwargs.get("subsets") == "short":
        g = g[:-1]
    else:
        kw.update(kwargs)
    with pytest.raises(ValueError, match=name):
        plan_clip_user(u, g, **kw)


def test_occupancy_from_rows_counts() -> None:
    occ = occupancy_from_rows(np.array(["b", "a", "b", "b"]), np.array([2, 2, 1, 2]))
    assert occ.users.tolist() == ["a", "b"] and occ.subsets.tolist() == [1, 2]
    np.testing.assert_array_equal(occ.to_dense(), [[0, 1], [1, 2]])


# ---- §4.4 regression (prototype numbers, ±1 in K and ±10% in E) ----------------------
def synthetic_occupancy(gamma: int, seed: int, n_grids: int = 12, q: float = 0.01,
                        ) -> np.ndarray:
    """§4.3 generator (the bench has the same one)."""
    gen = RandomSource.seeded(seed).numpy_generator()
    a = np.zeros((2**n_grids - 1, n_grids), np.int64)
    for j in range(n_grids):
        lo, n = 2**j - 1, 2**j
        pick = gen.random((n, n_grids)).argsort(axis=1)[:, : n_grids - j]
        rows = np.repeat(np.arange(lo, lo + n), n_grids - j)
        a[rows, pick.ravel()] = gen.geometric(q, n * (n_grids - j))
    for g in range(n_grids):
        a[int(np.argmax(a[:, g])), g] *= 1 + gamma
    return a


@pytest.mark.parametrize(("gamma", "eps", "k_ref", "e_ref", "ebar_ref"), [
    (3, 0.1, 2.2, 4289, 1367), (9, 1.0, 4.0, 905.2, 857.7)])
def test_regression_against_reference_numbers(gamma: int, eps: float, k_ref: float,
                                              e_ref: float, ebar_ref: float) -> None:
    ks, es, ebars = [], [], []
    for d in range(10):
        occ = Occupancy.from_dense(synthetic_occupancy(gamma, 1000 * gamma + d))
        plan = plan_from_occupancy(occ, SubsetStatsParams(epsilon=eps, upper=65.0,
                                                          error_model="paper"))
        ks.append(plan.k_final)
        es.append(plan.initial_max_error)
        ebars.append(plan.max_error)
    assert abs(np.mean(ks) - k_ref) <= 1
    assert np.mean(es) == pytest.approx(e_ref, rel=0.10)
    assert np.mean(ebars) == pytest.approx(ebar_ref, rel=0.10)
