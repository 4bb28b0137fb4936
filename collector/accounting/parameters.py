"""Each report mechanism's variation-ratio parameters (p, β, q), from its exact design.

See ``docs/privacy.md`` §7.1 (the table) and ``uldp.collector.accounting.variation_ratio``
(what the parameters mean). ``p`` and ``q`` are e^ε of the ε a report charges (every
design's likelihood ratios are at most that, checked in integers on the device), so they
hold for any two inputs and any third one. ``β`` is the largest total variation between
the report distributions of two inputs, computed from the same integers the device uses
(``uldp.client.mechanisms``) and rounded up:

* GRR over k: (P − Q)/2^64 (two inputs differ in the two report values they favour);
* OUE: 1/2 − Q/2^64 (the two inputs' bits form the pattern (1, 0) with that much more
  probability under the first input);
* subset selection (ω of k): C(k−2, ω−1)·(P_in/C(k−1, ω−1) − (1 − P_in)/C(k−1, ω));
* OLH: GRR's over its hash range g (a pair of inputs whose hashes collide is identical,
  which only lowers the variation; none is credited);
* discrete Laplace bins (one-hot + DLap(2/ε) per entry): P(Z ≥ 0)² − P(Z ≥ 1)² =
  (1 − ρ)/(1 + ρ), ρ = e^(−1/t);
* discrete Laplace values (grid value + DLap(2^16/ε)): P(|Z| < 2^15) = 1 − ρ^(2^15);
* Duchi: (2^64 − 2·P_min)/2^64 (inputs 0 and 2^16);
* PM: W·(π_in − π_out) (windows that no longer overlap);
* HM: α·β_PM + (1 − α)·β_Duchi (the branch is visible in the report).

Scalar randomizers see a randomized rounding of the clamped statistic to the grid: a
mixture over grid values, whose variation is at most the grid's largest. A report of
several pieces (components, records) composes: p = q = e^(Σε), β = 1 − Π(1 − β_i),
capped at (p − 1)/(p + 1). A task whose pieces this module cannot account for exactly
(their ε does not add up to what the method charges) gets the generic ε0 parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from uldp.client.budget import units_to_epsilon
from uldp.client.mechanisms import ORACLES, SCALARS
from uldp.client.mechanisms.duchi import duchi_design
from uldp.client.mechanisms.exact import ONE, units_of
from uldp.client.mechanisms.grr import grr_design
from uldp.client.mechanisms.hm import hm_alpha
from uldp.client.mechanisms.olh import olh_design
from uldp.client.mechanisms.oue import HALF, oue_q
from uldp.client.mechanisms.pm import pm_design
from uldp.client.mechanisms.ss import ss_design
from uldp.client.noise import laplace_scale
from uldp.client.params import GRID_STEPS
from uldp.client.tasks import task_epsilon_units
from uldp.client.taskspec import TaskSpec
from uldp.collector.accounting.variation_ratio import VariationRatio, generic

__all__ = ["MECHANISMS", "NEEDS_K", "Piece", "mechanism_parameters", "task_parameters",
           "total_variation"]

#: the mechanisms ``uldp privacy shuffle --mechanism`` knows (``any``: the generic bound)
MECHANISMS = ("any", "grr", "oue", "ss", "olh", "duchi", "pm", "hm", "laplace")
#: mechanisms whose variation depends on the number of categories k
NEEDS_K = ("grr", "oue", "ss")


def _up(x: Fraction | float) -> float:
    """A float at or above x."""
    f = float(x)
    return f if Fraction(f) >= Fraction(x) else math.nextafter(f, math.inf)


def _oracle_tv(name: str, k: int, units: int) -> float:
    if name == "grr":
        if k < 2:
            return 0.0
        d = grr_design(k, units)
        return _up(Fraction(d.P - d.Q, ONE))
    if name == "oue":
        return 0.0 if k < 2 else _up(Fraction(HALF - oue_q(units), ONE))
    if name == "ss":
        if k < 2:
            return 0.0
        s = ss_design(k, units)
        p_in = Fraction(s.P_in, ONE)
        a = p_in / math.comb(k - 1, s.omega - 1)
        b = (1 - p_in) / math.comb(k - 1, s.omega)
        return _up(math.comb(k - 2, s.omega - 1) * (a - b))
    if name == "olh":
        d = olh_design(units)
        return _up(Fraction(d.P - d.Q, ONE))
    if name == "laplace":
        if k < 2:
            return 0.0
        t = laplace_scale(2, units_to_epsilon(units))
        rho = math.exp(-t.den / t.num)
        return _up((1.0 - rho) / (1.0 + rho) * (1 + 1e-12))
    raise KeyError(name)


def _scalar_tv(name: str, units: int) -> float:
    if name == "duchi":
        p_min, _ = duchi_design(units)
        return _up(Fraction(ONE - 2 * p_min, ONE))
    if name == "pm":
        d = pm_design(units)
        pi_in, pi_out = Fraction(d.P_w, ONE * d.W), Fraction(ONE - d.P_w, ONE * GRID_STEPS)
        return _up(d.W * (pi_in - pi_out))
    if name == "hm":
        a = Fraction(hm_alpha(units), ONE)
        return _up(a * Fraction(_scalar_tv("pm", units)) + (1 - a) * Fraction(
            _scalar_tv("duchi", units)))
    if name == "laplace":
        t = laplace_scale(GRID_STEPS, units_to_epsilon(units))
        # 1 − ρ^(2^15) with ρ = e^(−1/t): −expm1(−2^15/t)
        return _up(-math.expm1(-(GRID_STEPS // 2) * t.den / t.num) * (1 + 1e-12))
    raise KeyError(name)


def total_variation(family: str, name: str, k: int, epsilon: float) -> float:
    """β of one report of mechanism ``name`` (``family`` ``oracle`` or ``scalar``) over
    ``k`` categories (oracles) at ``epsilon`` (module docstring)."""
    units = units_of(epsilon)
    return _oracle_tv(name, int(k), units) if family == "oracle" else _scalar_tv(name, units)


class Piece(tuple[str, str, int, float]):
    """(family, mechanism, k, ε) of one randomizer call inside a report."""

    __slots__ = ()

    def __new__(cls, family: str, name: str, k: int, eps: float) -> Piece:
        return super().__new__(cls, (family, name, int(k), float(eps)))


def _compose(pieces: Sequence[Piece], label: str, detail: str) -> VariationRatio:
    units = sum(units_of(e) for _, _, _, e in pieces)
    eps0 = units_to_epsilon(units)
    p = math.exp(eps0)
    keep = Fraction(1)
    for fam, name, k, e in pieces:
        keep *= 1 - Fraction(total_variation(fam, name, k, e))
    beta = min(_up(1 - keep), (p - 1.0) / (p + 1.0))
    return VariationRatio(label, eps0, p, beta, p, detail)


def mechanism_parameters(mechanism: str, epsilon0: float, k: int | None = None
                         ) -> VariationRatio:
    """The parameters of one report of ``mechanism`` at ``epsilon0`` (``k`` categories
    for grr/oue/ss; ``laplace`` with ``k``: one-hot bins, without: a value): what
    ``uldp privacy shuffle`` uses."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
    if mechanism == "any":
        return generic(units_to_epsilon(units_of(epsilon0)))
    if mechanism in NEEDS_K and (k is None or k < 2):
        raise ValueError(f"mechanism {mechanism} needs k >= 2 categories")
    if mechanism in ("duchi", "pm", "hm") or (mechanism == "laplace" and k is None):
        piece, detail = Piece("scalar", mechanism, 0, epsilon0), "value"
    else:
        piece = Piece("oracle", mechanism, k or 0, epsilon0)
        detail = f"k={k}" if k is not None else ""
    return _compose([piece], mechanism, detail)


def _pieces(task: TaskSpec) -> list[Piece]:
    """The randomizer calls of one report of ``task`` (docs/device-protocol.md §9, §17):
    stage-I bins, one oracle call per component; values, one scalar call per component;
    sampled records (no bins, no intervals), ``records`` oracle calls over ``dim``."""
    name = task.mechanism
    if task.bins:
        return [Piece("oracle", name, int(B), task.eps_c) for _, _, B in task.bins]
    if task.virtual_groups:
        return []
    if task.intervals:
        return [Piece("scalar", name, 0, task.eps_c) for _ in task.components]
    return [Piece("oracle", name, int(task.dim), task.eps_c)] * int(task.records)


def task_parameters(task: TaskSpec) -> VariationRatio:
    """The parameters of one report of ``task``: its mechanism's (composed over the
    report's pieces), or the generic ones of its ε0 when the pieces do not account for
    exactly the ε the method charges."""
    units = task_epsilon_units(task)
    try:
        pieces = _pieces(task)
        known = all((fam == "oracle" and name in ORACLES) or (fam == "scalar" and name in SCALARS)
                    for fam, name, _, _ in pieces)
        if pieces and known and sum(units_of(p[3]) for p in pieces) == units:
            kinds = sorted({p[1] for p in pieces})
            detail = ", ".join(f"k={p[2]}" if p[0] == "oracle" else "value"
                               for p in pieces[:4]) + (", …" if len(pieces) > 4 else "")
            return _compose(pieces, "+".join(kinds), detail)
    except (KeyError, ValueError, ArithmeticError):
        pass
    return generic(units_to_epsilon(units))
