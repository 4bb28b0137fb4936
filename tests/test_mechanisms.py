"""The report mechanisms' device halves (``uldp.client.mechanisms``): exact designs, exact
privacy of every output, and every sampler against its exact pmf (invariant 8).

* ``exp_lower`` is a certified lower bound of ``e^ε`` (checked against 60-digit decimals)
  and tight to ~1e-16 relative below the cap;
* every design passes its integer check over a grid of ``(k, ε)`` from one unit of 2^-24 to
  2^20 and from one to 2^16 categories;
* the largest likelihood ratio between any two inputs over every output, computed in exact
  rationals, is at most ``exp_lower(ε)/2^64 <= e^ε`` and, for the oracles' and Duchi's
  extreme inputs, close to it (a mechanism with too little noise would fail);
* the samplers' empirical frequencies match the exact probabilities (chi-square, fixed
  seeds, p > 1e-4), and a batch of many users has the same distribution as single devices.
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from uldp.client.budget import EPS_DENOMINATOR, epsilon_units
from uldp.client.mechanisms import ORACLES, SCALARS
from uldp.client.mechanisms.duchi import duchi_design
from uldp.client.mechanisms.exact import EXP_CAP_UNITS, ONE, exp_lower
from uldp.client.mechanisms.grr import grr_design
from uldp.client.mechanisms.hm import HM_THRESHOLD_UNITS, hm_alpha
from uldp.client.mechanisms.olh import hash_of, hash_table, olh_design
from uldp.client.mechanisms.oue import oue_q
from uldp.client.mechanisms.pm import pm_design
from uldp.client.mechanisms.ss import ss_design
from uldp.client.params import GRID_STEPS
from uldp.client.randomness import RandomSource

NEW_ORACLES = ["grr", "oue", "ss", "olh"]
NEW_SCALARS = ["duchi", "pm", "hm"]
UNITS = [1, 2, 1000, EPS_DENOMINATOR // 2, HM_THRESHOLD_UNITS - 1, HM_THRESHOLD_UNITS,
         EPS_DENOMINATOR, 3 * EPS_DENOMINATOR, 8 * EPS_DENOMINATOR, EXP_CAP_UNITS - 1,
         EXP_CAP_UNITS, 1000 * EPS_DENOMINATOR, (1 << 20) * EPS_DENOMINATOR]


def _exp(units: int) -> Decimal:
    getcontext().prec = 60
    return (Decimal(units) / Decimal(EPS_DENOMINATOR)).exp()


@pytest.mark.parametrize("units", UNITS)
def test_exp_lower_is_a_tight_certified_lower_bound(units):
    S = exp_lower(units)
    exact = _exp(min(units, EXP_CAP_UNITS))
    assert Decimal(S) / Decimal(ONE) <= exact
    assert Decimal(S) / Decimal(ONE) >= exact * (1 - Decimal(2) ** -50)
    assert Decimal(S) / Decimal(ONE) <= _exp(units)


@pytest.mark.parametrize("units", UNITS)
@pytest.mark.parametrize("k", [1, 2, 3, 5, 16, 255, 256, 1 << 16])
def test_every_design_passes_its_exact_check(units, k):
    # the design functions raise AssertionError when the integer check fails
    grr_design(k, units)
    ss_design(k, units)
    assert 0 < oue_q(units) <= ONE // 2
    d = olh_design(units)
    assert 2 <= d.k <= 1 << 16
    P_min, D = duchi_design(units)
    assert P_min + D * GRID_STEPS == ONE - P_min
    p = pm_design(units)
    assert 1 <= p.W <= GRID_STEPS
    A = hm_alpha(units)
    assert (A == 0) == (units < HM_THRESHOLD_UNITS) and 0 <= A < ONE


def _oracle_outputs(name: str, k: int, eps: float, seed: int = 7) -> list[tuple[int, ...]]:
    """Every report of a small oracle (OLH: every hash value under a few seeds)."""
    if name == "grr":
        return [(y,) for y in range(k)]
    if name == "oue":
        return list(itertools.product((0, 1), repeat=k))
    if name == "ss":
        w = ss_design(k, epsilon_units(eps)).omega
        return list(itertools.combinations(range(k), w))
    g = olh_design(epsilon_units(eps)).k
    out = []
    for s in range(seed, seed + 3):  # every value's hash, and one value no input hashes to
        hashes = {hash_of(s, v, g) for v in range(k)}
        out += [(s, y) for y in sorted(hashes)]
        out += [(s, y) for y in range(g) if y not in hashes][:1]
    return out


@pytest.mark.parametrize("eps", [2.0**-24, 0.3, 1.0, 2.5, 8.0, 45.0])
@pytest.mark.parametrize("name", NEW_ORACLES)
def test_oracle_likelihood_ratios_never_exceed_epsilon(name, eps):
    o = ORACLES[name]
    units = epsilon_units(eps)
    bound = Fraction(exp_lower(units), ONE)
    k = 5
    worst = Fraction(1)
    total = {v: Fraction(0) for v in range(k)}
    for rep in _oracle_outputs(name, k, eps):
        probs = [o.probability(rep, v, k, eps) for v in range(k)]
        for v, p in enumerate(probs):
            total[v] += p
        assert min(probs) > 0
        worst = max(worst, max(probs) / min(probs))
    assert worst <= bound
    if name != "olh":  # a pmf (OLH: three seeds out of 2^32)
        assert all(t == 1 for t in total.values())
    if eps <= 8:  # the ratio is attained (up to the dyadic rounding) for extreme inputs
        assert worst >= bound * Fraction(999, 1000)


@pytest.mark.parametrize("eps", [2.0**-24, 0.3, 0.7, 2.5, 8.0, 45.0])
@pytest.mark.parametrize("name", NEW_SCALARS)
def test_scalar_likelihood_ratios_never_exceed_epsilon(name, eps):
    s = SCALARS[name]
    units = epsilon_units(eps)
    bound = Fraction(exp_lower(units), ONE)
    N = pm_design(units).cells
    gs = [0, 1, 2, 4000, 32768, GRID_STEPS - 1, GRID_STEPS]
    zs = sorted({0, 1, 2, 3, 4000, 4001, 32768, 32769, GRID_STEPS - 1, GRID_STEPS,
                 GRID_STEPS + 1, N - 1, N, N + 1} | {g + d for g in gs for d in (-1, 0, 1)}
                | {g + pm_design(units).W + d for g in gs for d in (-1, 0, 1)})
    worst = Fraction(1)
    for z in zs:
        probs = [s.probability(z, g, eps) for g in gs]
        if max(probs) == 0:
            continue
        assert min(probs) > 0, (z, probs)
        worst = max(worst, max(probs) / min(probs))
    assert worst <= bound
    if eps <= 8 and (name == "duchi" or (name == "pm" and eps >= 0.3)):
        assert worst >= bound * Fraction(99, 100)


@pytest.mark.parametrize("eps", [0.2, 1.0, 3.0])
@pytest.mark.parametrize("name", NEW_SCALARS)
def test_scalar_pmfs_sum_to_one(name, eps):
    """Summed piece by piece: the pmf is constant on [0, g), the window, the rest of the
    PM range, and each Duchi / HM-branch value."""
    s = SCALARS[name]
    d = pm_design(epsilon_units(eps))
    for g in (0, 777, GRID_STEPS):
        cuts = [0, 1, 2] if name == "duchi" else \
            sorted({0, g, g + d.W, d.cells, d.cells + 1, d.cells + 2})
        total = sum((s.probability(a, g, eps) * (b - a) for a, b in itertools.pairwise(cuts)),
                    Fraction(0))
        assert total == 1
        assert all(s.probability(z, g, eps) == s.probability(a, g, eps)
                   for a, b in itertools.pairwise(cuts) for z in (a, (a + b) // 2, b - 1))


def _chi2(counts: dict, probs: dict, n: int) -> float:
    """p-value of a chi-square test of counts against exact probabilities (tiny cells
    pooled)."""
    keys = sorted(probs, key=lambda r: probs[r])
    obs, exp, acc_o, acc_e = [], [], 0, 0.0
    for r in keys:
        acc_o += counts.get(r, 0)
        acc_e += float(probs[r]) * n
        if acc_e >= 20:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o, acc_e = 0, 0.0
    if acc_e:
        obs[-1] += acc_o
        exp[-1] += acc_e
    assert sum(counts.values()) == sum(obs)
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("eps", [0.5, 2.0])
@pytest.mark.parametrize("name", ["grr", "oue", "ss"])
def test_oracle_samplers_match_their_exact_pmf(name, eps):
    o, k, n = ORACLES[name], 5, 40000
    rng = RandomSource.seeded(f"pmf-{name}-{eps}")
    reps = o.privatize(np.full(n, 3), k, eps, rng)
    counts: dict = {}
    for r in map(tuple, reps.tolist()):
        counts[r] = counts.get(r, 0) + 1
    probs = {r: o.probability(r, 3, k, eps) for r in _oracle_outputs(name, k, eps)}
    assert _chi2(counts, probs, n) > 1e-4


@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_olh_sampler_matches_its_exact_pmf(eps):
    """Seeds are uniform below 2^32, and given the seed the value is GRR of the hash."""
    o, k, n = ORACLES["olh"], 7, 30000
    d = olh_design(epsilon_units(eps))
    reps = o.privatize(np.full(n, 4), k, eps, RandomSource.seeded(f"olh-{eps}"))
    assert reps[:, 0].min() >= 0 and reps[:, 0].max() < 1 << 32
    assert stats.kstest(reps[:, 0] / 2.0**32, "uniform").pvalue > 1e-4
    hit = np.array([y == hash_of(s, 4, d.k) for s, y in reps.tolist()])
    p = d.P / ONE
    assert abs(hit.mean() - p) < 5 * math.sqrt(p * (1 - p) / n)
    table = hash_table(12345, k, d.k)
    assert [hash_of(12345, v, d.k) for v in range(k)] == table.tolist()


@pytest.mark.parametrize("eps", [0.4, 1.5, 6.0])
@pytest.mark.parametrize("name", NEW_SCALARS)
def test_scalar_samplers_match_their_exact_pmf(name, eps):
    """Outputs pooled into the windows the pmf is constant on, for three inputs."""
    s, n = SCALARS[name], 30000
    units = epsilon_units(eps)
    d = pm_design(units)
    for g in (0, 40000, GRID_STEPS):
        z = s.privatize(np.full((n, 1), g), eps, RandomSource.seeded(f"{name}-{eps}-{g}"))
        z = z.ravel()
        cuts = {"duchi": [0, 1, 2], "pm": [0, g, g + d.W, d.cells],
                "hm": [0, g, g + d.W, d.cells, d.cells + 1, d.cells + 2]}[name]
        cells = {c: int(((z >= a) & (z < b)).sum()) for c, (a, b) in
                 enumerate(itertools.pairwise(cuts)) if b > a}
        probs = {c: sum(s.probability(x, g, eps) for x in range(cuts[c], cuts[c + 1]))
                 if cuts[c + 1] - cuts[c] < 5 else
                 _block(s, g, eps, cuts[c], cuts[c + 1]) for c in cells}
        probs = {c: p for c, p in probs.items() if p > 0}
        assert sum(cells[c] for c in probs) == n
        assert sum(probs.values()) == 1
        assert _chi2(cells, probs, n) > 1e-4


def _block(s, g: int, eps: float, a: int, b: int) -> Fraction:
    """Mass of ``[a, b)`` for a pmf constant on it (the PM windows)."""
    return s.probability(a, g, eps) * (b - a)


def test_a_batch_draws_like_single_devices():
    """The vectorized path over many users has the same output law as one device at a
    time (the orders of draws differ, §12.7): two-sample chi-square per mechanism."""
    for name in NEW_ORACLES:
        o = ORACLES[name]
        batch = o.privatize(np.full(3000, 2), 6, 1.5, RandomSource.seeded("b" + name))
        one = np.concatenate([o.privatize(np.array([2]), 6, 1.5, RandomSource.seeded(i))
                              for i in range(3000)])
        col = -1  # the value column (OLH: GRR of the hash, not comparable by value)
        if name == "olh":
            g = olh_design(epsilon_units(1.5)).k
            a = [int(r[1] == hash_of(int(r[0]), 2, g)) for r in batch]
            b = [int(r[1] == hash_of(int(r[0]), 2, g)) for r in one]
        else:
            a, b = batch[:, col].tolist(), one[:, col].tolist()
        table = np.array([[a.count(v) for v in sorted(set(a) | set(b))],
                          [b.count(v) for v in sorted(set(a) | set(b))]])
        assert stats.chi2_contingency(table).pvalue > 1e-4, name


def test_mechanism_tasks_of_the_vectors_match_the_task_schema():
    """Every task of ``mech_tasks.json`` the device accepts matches
    ``proto/uldp/v1/task.schema.json``; the ones refused for their type or an unknown
    mechanism do not."""
    import json
    from pathlib import Path

    from tests.test_conformance import _errors, _schema

    schema = _schema("task")
    root = Path(__file__).resolve().parent.parent
    cases = json.loads((root / "conformance/v1/mech_tasks.json").read_text())["cases"]
    tasks = [c["task"] for c in cases if "report" in c]
    accepted = [c["task"]["task_json"] for c in cases if c.get("op") == "refusal"
                and c["code"] is None]
    assert len(tasks) > 200 and len(accepted) == 5  # main's 3, hadamard x2
    for text in tasks + accepted:
        assert _errors(json.loads(text), schema, schema) == [], text
    for c in cases:
        if c.get("op") == "refusal" and c["code"] in ("field", "method"):
            assert _errors(json.loads(c["task"]["task_json"]), schema, schema), c["name"]
