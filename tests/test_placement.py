"""Placements as a keyed permutation computed on demand (issue 28 item 2): a bijection of
the slots, the same from the seed alone, balanced exactly as the plan's sizes say, one
slot placed in microseconds with no per-user array — and a query stored before it keeps
the numpy permutation its assignments were made with."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from uldp.collector.models.rounds import sgd_query
from uldp.collector.models.sgd import SGDConfig
from uldp.collector.placement import KeyedPermutation
from uldp.collector.planner import QuerySpec
from uldp.collector.programs import program_for


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 255, 256, 257, 1000, 65_537])
def test_keyed_permutation_is_a_bijection_with_its_inverse(n):
    p = KeyedPermutation(n, seed=12345)
    r = p.rank(np.arange(n))
    assert sorted(r.tolist()) == list(range(n))
    assert (p.slot(r) == np.arange(n)).all()
    some = range(0, n, max(1, n // 50))
    assert [p.rank_of(s) for s in some] == [int(r[s]) for s in some]
    assert [p.slot_of(int(r[s])) for s in some] == list(some)
    # the same permutation in every process: a function of (n, seed) only
    assert (KeyedPermutation(n, seed=12345).rank(np.arange(n)) == r).all()
    with pytest.raises(ValueError):
        p.rank_of(n)


def test_different_seeds_differ_and_look_uniform():
    n = 20_000
    a = KeyedPermutation(n, 1).rank(np.arange(n))
    b = KeyedPermutation(n, 2).rank(np.arange(n))
    assert (a != b).mean() > 0.99
    # the first half of the slots spread evenly over 8 residues (a chi-square at 1e-4)
    counts = np.bincount(a[: n // 2] % 8, minlength=8)
    chi2 = ((counts - n / 16) ** 2 / (n / 16)).sum()
    assert chi2 < 29.9  # 7 degrees of freedom


SPECS = [
    dict(kind="mean", epsilon=1.0, users=10_007, samples=50, method="two-stage"),
    dict(kind="mean-l2", epsilon=0.5, users=4_001, samples=10, dim=40),
    dict(kind="mean-linf", epsilon=1.0, users=999, samples=10, dim=3, method="baseline-a"),
    dict(kind="distribution", epsilon=1.0, users=3_001, samples=4, dim=32),
]


@pytest.mark.parametrize("kw", SPECS)
def test_program_places_slots_on_demand_as_the_simulation_does(kw):
    prog = program_for(QuerySpec(**kw, seed=99))
    place = prog.placements()  # the simulation's array (computed, not kept)
    n = kw["users"]
    for s in [0, 1, n // 3, n // 2, n - 1]:
        assert prog.place(s) == tuple(int(x) for x in place[s])
    for phase in range(1, prog.num_phases + 1):
        rows = place[place[:, 2] == phase]
        cells, sizes = np.unique(rows[:, :2], axis=0, return_counts=True)
        assert prog.cells(phase) == [(int(g), int(s), int(c))
                                     for (g, s), c in zip(cells, sizes, strict=True)]
        for g, s, _ in prog.cells(phase):
            slot = prog.slot_in(phase, g, s)
            assert slot is not None and prog.place(slot) == (g, s, phase)
        assert prog.slot_in(phase, 10**6, 0) is None
    assert prog.quotas() == np.bincount(place[:, 2], minlength=prog.num_phases + 1)[1:].tolist()


def test_sgd_program_places_slots_on_demand():
    cfg = SGDConfig(model="quadratic", t0=5, epsilon=4.0, eta=0.5, clip=1.0, seed=3,
                    method="two-stage", query_id="s")
    prog = program_for(sgd_query(cfg, 3_003, 10, 3, query_id="s"))
    place = prog.placements()
    assert [prog.place(s) for s in range(0, 3_003, 97)] == [
        tuple(int(x) for x in place[s]) for s in range(0, 3_003, 97)]
    for phase in range(1, prog.num_phases + 1):
        for g, s, size in prog.cells(phase):
            slot = prog.slot_in(phase, g, s)
            assert slot is not None and prog.place(slot) == (g, s, phase)
            assert size == int(((place[:, 0] == g) & (place[:, 1] == s)
                                & (place[:, 2] == phase)).sum())


def test_a_stored_query_keeps_its_numpy_permutation():
    """A spec stored before ``placement`` existed (no such key) places slots exactly as
    the numpy permutation it was created with did."""
    spec = QuerySpec(kind="mean", epsilon=1.0, users=1_000, samples=50, method="two-stage",
                     seed=7)
    stored = spec.to_dict()
    del stored["placement"]
    old = program_for(QuerySpec.from_dict(json.loads(json.dumps(stored))))
    assert old.spec.placement == "permutation"
    perm = np.random.default_rng(7).permutation(1_000)
    ranks = np.empty_like(perm)
    ranks[perm] = np.arange(perm.size)
    plan = old.plan
    G = plan.n_groups
    first = np.array([plan.stage1_size(g) for g in range(G)])
    want_g = ranks % G
    want_s = np.where(ranks // G < first[want_g], 1, 2)
    assert [old.place(s)[:2] for s in range(1_000)] == list(zip(want_g.tolist(),
                                                               want_s.tolist(), strict=True))
    assert QuerySpec.from_dict(spec.to_dict()).placement == "feistel"


def test_ten_to_the_eight_users_hold_no_placement_state():
    """A query of 10^8 users: its program, its quotas and cells, a representative slot
    per cell and 10^3 placements take a few MB of Python memory at most (an array of
    ranks would take 800 MB; the placements array 2.4 GB)."""
    tracemalloc.start()
    prog = program_for(QuerySpec(kind="mean", epsilon=1.0, users=100_000_000, samples=100,
                                 method="two-stage", seed=5))
    assert sum(prog.quotas()) == 100_000_000
    for phase in (1, 2):
        for g, s, _ in prog.cells(phase):
            assert prog.place(prog.slot_in(phase, g, s)) == (g, s, phase)
    placed = [prog.place(s) for s in range(0, 100_000_000, 100_003)]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(placed) == 1_000 and {p[2] for p in placed} == {1, 2}
    assert peak < 16 * 2**20, peak
