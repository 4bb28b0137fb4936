"""``method=auto``: the method, grouping and report mechanisms chosen from public parameters
by the predicted error, with stage-I information deciding the rest.

See ``docs/algorithms.md`` ("Choosing a method") and ``docs/mechanisms.md``. At compile time
(public values only, so every replica and every restart resolves the same way) ``auto``
compares, on the *full* predicted error — the noise of the reports and the spread of the
users' statistics wherever only some users estimate a component (every grouping of the
components, two-stage's stage II), taken at its worst case ``Var Y_c = D_c²`` — the
candidates

* ``ssl`` with the worst-case best scalar randomizer for each grouping mode (HM for
  ``ε_c ≥ 0.61``, Duchi below; ``uldp.collector.mechanisms.choice``);
* ``oracle`` for categorical kinds: one sampled record per user through the frequency
  oracle of least variance for ``(A, ε)``, with the records' own variance at its worst
  case (the peers' rule, at least as good: SS is among the oracles) — and, weighed against
  it, ``hadamard`` (``uldp.collector.methods.auto_distribution``);
* for one-component kinds, ``two-stage-sized`` with the best oracle in stage I and the
  randomizer chosen from stage I (``randomizer="adaptive"``), when a stage I of at most
  :data:`MAX_SIZED_SHARE` of the users measures the histogram precisely enough
  (:data:`MAX_BIN_VARIANCE` per bin) and the gain it can bring on favourable users is at
  least :data:`SIZED_GAIN` — either from the window (the model window of
  ``uldp.collector.methods.sized`` against the support) or from the randomizer (the
  worst-case best against the best for values at the centre or at the ends). Its risk on
  spread-out users is the stage-I share, ``1/(1 − s) ≤ 1.09``;
* otherwise (other multi-component kinds, or a one-component query whose stage I would
  need more users), two-stage with the paper's window as before (its noise gain against
  ``KAPPA`` scaled by the stage-I share; minimax regret below), with the best oracle and
  randomizer.

Why the thresholds (minimax regret). No rule from public values can be within 1.2× of the
best method on every population: two populations with identical public parameters — every
user alike (two-stage wins by its noise gain ``G``) and users spread over the support (SSL
wins) — cannot both be served within a factor better than ``min(G, 1/(1 − s))``. ``auto``
takes the second risk only when it is small (``s`` at most 8 % for ``two-stage-sized``) or
when the first is much larger (``KAPPA``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from uldp.client.regimes import MODES
from uldp.collector.mechanisms.choice import (
    SCALAR_CHOICES,
    best_oracle,
    best_scalar,
    scalar_variance,
)
from uldp.collector.methods.alike import USERS_ALIKE
from uldp.collector.methods.common import plan_mechanisms

__all__ = ["ADAPTIVE_BY_DEFAULT", "ADAPTIVE_MARGIN", "KAPPA", "MAX_BIN_VARIANCE",
           "MAX_SIZED_SHARE", "MAX_STAGE1_SHARE",
           "MIN_SIZED_SHARE", "POPULATIONS", "SIZED_GAIN", "SIZED_SHARES",
           "SMALL_STAGE1_SHARE", "STAGE1_TARGET", "objective_value", "plan_mechanisms",
           "required_gain", "resolve_auto"]

KAPPA = 2.4  # two-stage must promise this factor less noise than SSL (small stage I)
STAGE1_TARGET = 400.0  # n_I ε_c² of the smallest group's stage I (spec §4.5: ≥ 99 %)
SMALL_STAGE1_SHARE = 1.0 / 6.0  # up to this share the spread-users loss is ≤ 1.2
MAX_STAGE1_SHARE = 0.5  # a stage I that needs more users than this is too weak
MIN_STAGE1_SHARE = 0.05
#: two-stage-sized: the largest stage-I share (its cost on spread-out users, 1/(1 − s))
MAX_SIZED_SHARE = 0.08
#: two-stage-sized: the largest variance of a stage-I bin's mass estimate (sd 0.045)
MAX_BIN_VARIANCE = 0.002
#: two-stage-sized: the least gain on favourable users worth the stage I
SIZED_GAIN = 1.5
#: two-stage-sized: the smallest stage-I share (its users are left out of stage II, whose
#: spread they would have averaged: at large ε that, not the noise, is the error)
MIN_SIZED_SHARE = 0.01


def required_gain(share: float) -> float:
    """The factor of less noise two-stage must promise when its stage I takes ``share``
    of the users: ``KAPPA`` up to :data:`SMALL_STAGE1_SHARE`, then growing with the loss
    ``1/(1 − share)`` it risks on spread-out users (module docstring)."""
    return KAPPA * (1 - SMALL_STAGE1_SHARE) / (1 - max(share, SMALL_STAGE1_SHARE))


def _noise_mse(spec: Any, compile_fn: Any) -> tuple[float, Any]:
    plan = compile_fn(spec)
    return plan.predicted_mse(np.zeros(plan.n_components)), plan


def _full_mse(spec: Any, compile_fn: Any, records: bool = False) -> tuple[float, Any]:
    """The predicted error with the users' spread at its worst case ``Var Y_c = D_c²``
    (``records``: sampled records, whose own variance is then at its worst)."""
    plan = compile_fn(spec)
    D2 = np.square(plan.kind.component_bounds(plan.template)) \
        if spec.moment_p is None else np.full(plan.n_components,
                                              plan.group_params(0)[0].bound ** 2)
    stat = None if records else D2
    return plan.predicted_mse(D2, stat), plan


def _stage1_share(plan: Any) -> float:
    """Share of each group's users that gives the smallest group ``n_I ε_c² >= target``
    (at least :data:`MIN_STAGE1_SHARE`; above :data:`MAX_STAGE1_SHARE` when even half of
    the users are too few)."""
    need = 0.0
    for g, grp in enumerate(plan.grouping.groups):
        size = max(plan.group_size(g), 1)
        need = max(need, STAGE1_TARGET / (size * grp.eps_c**2))
    return float(max(need, MIN_STAGE1_SHARE))


def _sized_share(plan: Any, bins: int) -> float:
    """The least stage-I share (≥ :data:`MIN_SIZED_SHARE`) whose histogram has per-bin
    variance at most :data:`MAX_BIN_VARIANCE` with the best oracle, or ``inf``."""
    from uldp.collector.mechanisms import ORACLE_DECODERS

    eps_c = plan.grouping.groups[0].eps_c
    dec = ORACLE_DECODERS[best_oracle(bins, eps_c)]
    v = float(dec.variance(np.zeros(1), bins, eps_c)[0])
    need = v / (MAX_BIN_VARIANCE * max(plan.spec.users, 1))
    return max(need, MIN_SIZED_SHARE) if need <= MAX_SIZED_SHARE else float("inf")


def _mechanism_gain(eps: float, share: float, m: int, n: int) -> float:
    """What the randomizer chosen from stage I gains over the worst-case best on the
    whole support when the values sit at its centre or at its ends — its noise on the
    stage-II users plus the spread of the users it leaves out (``Var Y = D²/m``, users
    alike), in units of ``D²/n``. The rule counts on the worse end of what a stage I of
    ``share·n`` users can bound of ``E t²`` over all users
    (``uldp.collector.methods.intervals.moment_bounds``: even a clean histogram leaves a
    share ``1 − e^{−c}`` unseen), so a small stage I gains little."""
    from uldp.collector.methods.intervals import ALPHA_BIAS

    worst = scalar_variance(best_scalar(eps), eps)
    spread = share / m
    c = math.log(2 / ALPHA_BIAS) / max(share * n, 1.0)
    unseen = -math.expm1(-c)
    out = 0.0
    for lo, hi in ((0.0, unseen), (1.0 - unseen, 1.0)):
        noise = min(max(scalar_variance(name, eps, lo), scalar_variance(name, eps, hi))
                    for name in SCALAR_CHOICES)
        out = max(out, worst / ((noise + spread) / (1 - share)))
    return out


def _single_stage(spec: Any, compile_fn: Any) -> tuple[float, Any, dict[str, Any]]:
    """The best single-stage candidate: ``ssl`` (each mode) or ``oracle``."""
    best: tuple[float, Any, dict[str, Any]] | None = None
    cands = [replace(spec, method="ssl", mode=m, randomizer="best")
             for m in MODES if m != "paper"]
    probe = compile_fn(replace(spec, method="ssl", randomizer="best"))
    sampled = probe.kind.categories is not None
    if sampled:
        cands.append(replace(spec, method="oracle", oracle="best", records=1))
    for i, c in enumerate(cands):
        mse, _ = _full_mse(c, compile_fn, records=sampled and i == len(cands) - 1)
        if best is None or mse < best[0]:
            best = (mse, c, {"method": c.method, "mode": c.mode})
    assert best is not None
    return best


def _sized(spec: Any, compile_fn: Any, single: float
           ) -> tuple[Any | None, dict[str, Any]] | None:
    """``two-stage-sized`` for a one-component kind, if reliable and worth it."""
    probe = replace(spec, method="two-stage-sized", oracle="best", randomizer="adaptive",
                    mode="default", stage1_share=MIN_SIZED_SHARE)
    try:
        plan = compile_fn(probe)
    except ValueError:
        return None
    from uldp.collector.methods.sized import TwoStageSized

    bins = TwoStageSized().fine(plan, 0)[0].bins
    share = _sized_share(plan, bins)
    if share == float("inf"):
        return None
    probe = replace(probe, stage1_share=share)
    sized_plan = compile_fn(probe)
    D2 = np.square(sized_plan.kind.component_bounds(sized_plan.template)) \
        if spec.moment_p is None else np.full(1, sized_plan.group_params(0)[0].bound ** 2)
    best_case = sized_plan.predicted_mse(D2, D2 / spec.samples)  # users alike (i.i.d.)
    eps_c = plan.grouping.groups[0].eps_c
    gain = max(single / max(best_case, 1e-300),
               _mechanism_gain(eps_c, share, spec.samples, spec.users))
    info = {"sized_share": share, "sized_gain": gain, "sized_mse": best_case}
    return (probe, info) if gain >= SIZED_GAIN else (None, info)


def _legacy_two_stage(spec: Any, compile_fn: Any) -> tuple[float, str, float] | None:
    """Two-stage (paper window) for multi-component kinds, as before (module docstring)."""
    best: tuple[float, str, float] | None = None
    for m in [m for m in MODES if m != "paper"]:
        probe = replace(spec, method="two-stage", mode=m, stage1_share=0.5, oracle="best",
                        randomizer="best")
        try:
            _, plan = _noise_mse(probe, compile_fn)
            share = _stage1_share(plan)
            if share > MAX_STAGE1_SHARE:
                continue
            mse, _ = _noise_mse(replace(probe, stage1_share=share), compile_fn)
        except ValueError:
            continue
        if best is None or mse * required_gain(share) < best[0] * required_gain(best[2]):
            best = (mse, m, share)
    return best


#: kinds whose ``auto`` compares ``ssl`` with ``two-stage-sized`` on reference populations
#: (:func:`_resolve_sized`)
SIZED_KINDS = ("mean", "mean-linf", "mean-l2", "mean-l1")
#: the stage-I shares ``two-stage-sized`` is tried with
SIZED_SHARES = (0.01, 0.03, 0.1, 0.3)
#: the reference populations (``uldp.collector.methods.sizing.reference_population``)
POPULATIONS = ("alike", "spread", "ends")
#: the reference population under ``assume="users-alike"``: users alike, each record's
#: variance at its largest ``D²`` (the least concentrated users the assumption allows)
ALIKE_POPULATIONS = ("alike",)
#: a two-stage candidate must be this much better (smaller regret) than single-stage
SIZED_MARGIN = 1.02
#: without an assumption (``two-stage-adaptive``: only the randomizer to gain) the margin is
#: larger: a stage I is taken only for ≥ 10 % in the objective. It was 20 % while a small
#: stage I's interval seemed to under-cover at ε ≈ 1 (0.91 at n = 10^5), which later proved
#: chance (:data:`ADAPTIVE_BY_DEFAULT`); at 20 % the m ≤ 10, ε = 2 cells kept ``ssl`` (HM),
#: 1.79 ± 0.61× Duchi's MSE at m = 1 over 160 repetitions where the values sit at the ends
#: (``bench/results/frontier.md``). The ε ≤ 1 cells still run ``ssl`` (gain ≤ 4.3 %)
ADAPTIVE_MARGIN = 1.1
#: whether ``auto`` weighs ``two-stage-adaptive`` without an assumption: on. Its interval
#: at n = 10^5 first covered 0.900 – 0.908 (users alike); measured part by part (issue 24,
#: third round: ``tests/test_adaptive_noise.py``, ``bench/adaptive_coverage.py
#: --production``) every part is calibrated, and over fresh seeds it covers 0.944 (ε = 1,
#: 3 % stage I, 700 repetitions) and 0.962 (ε = 8, 260): the shortfall was chance
#: (``bench/results/population_suite_adaptive.md``)
ADAPTIVE_BY_DEFAULT = True


#: noisy stage-I histograms ``auto``'s predictions average over (``sized.predict``): the
#: rule's outcome on the expected histogram alone is optimistic where stage I is small
AUTO_DRAWS = 6


def objective_value(plan: Any, population: str, draws: int | None = AUTO_DRAWS) -> float:
    """What ``plan`` would give on a reference population, in the query's ``objective``:
    the root-mean-square half-width of the outputs' intervals (``width``) or the summed
    MSE (``mse``)."""
    mse, half = plan.reference_prediction(population, draws=draws)
    if plan.spec.objective == "width":
        return float(np.sqrt(np.mean(np.square(half))))
    return float(np.sum(mse))


def _candidates(spec: Any, compile_fn: Any, alike: bool) -> list[tuple[str, Any]]:
    """``_resolve_sized``'s candidates, named: ``ssl`` in each grouping mode, then the
    two-stage method of the assumption (``two-stage-sized`` under ``users-alike``;
    without one ``two-stage-adaptive`` for the 1-d mean, none for the vector kinds) with
    each stage-I share of :data:`SIZED_SHARES`."""
    cands: list[tuple[str, Any]] = []
    for m in MODES:
        if m == "paper":
            continue
        c = replace(spec, method="ssl", mode=m, randomizer="best")
        try:
            cands.append((f"ssl/{m}", compile_fn(c)))
        except ValueError:
            continue
    modes = ["default"] if spec.kind == "mean" else [m for m in MODES if m != "paper"]
    # no assumption: no window risk (module docstring); ``two-stage-adaptive`` (only the
    # randomizer chosen from stage I, nothing clamped) is offered with ADAPTIVE_BY_DEFAULT
    sized = "two-stage-sized" if alike else "two-stage-adaptive"
    if not alike and (spec.kind != "mean" or not ADAPTIVE_BY_DEFAULT):
        modes = []
    for mode in modes:  # (a 1-d mean has one grouping)
        for share in SIZED_SHARES:
            c = replace(spec, method=sized, mode=mode, oracle="best",
                        randomizer="adaptive", stage1_share=share)
            try:
                plan = compile_fn(c)
            except ValueError:
                continue
            if min(min(plan.stage_size(g, 1), plan.stage_size(g, 2))
                   for g in range(plan.n_groups)) < 2:
                continue
            cands.append((f"{sized}/{mode}/{share:g}", plan))
    return cands


def _resolve_sized(spec: Any, compile_fn: Any) -> tuple[Any, dict[str, Any]]:
    """``ssl`` (each grouping mode, worst-case best randomizer) against ``two-stage-sized``
    (each stage-I share of :data:`SIZED_SHARES`, best oracle, randomizer chosen from stage
    I) by minimax regret over :data:`POPULATIONS`: every candidate's objective on each
    reference population against the best candidate's there; the least largest ratio wins
    (two-stage only by :data:`SIZED_MARGIN`). The reference populations are the cases a
    rule from public values cannot tell apart — users alike (a narrow window pays), spread
    over the support (stage I costs), at the ends (the randomizer chosen from stage I
    pays) — and each prediction counts what stage I cannot rule out for all users
    (``uldp.collector.methods.sized``). Without an assumption the 1-d mean's two-stage
    candidates are ``two-stage-adaptive`` (stage I chooses the randomizer only, stage II on
    the whole support: no clamping, an interval valid for every population; weighed with
    :data:`ADAPTIVE_BY_DEFAULT`); other kinds run ``ssl``."""
    alike = spec.assume == USERS_ALIKE
    cands = _candidates(spec, compile_fn, alike)
    pops = ALIKE_POPULATIONS if alike else POPULATIONS
    scores = {name: {p: objective_value(plan, p) for p in pops} for name, plan in cands}
    best = {p: min(sc[p] for sc in scores.values()) for p in pops}
    regret = {name: max(sc[p] / max(best[p], 1e-300) for p in pops)
              for name, sc in scores.items()}
    single = min((n for n, _ in cands if n.startswith("ssl")), key=lambda n: regret[n])
    order = sorted(regret, key=lambda n: regret[n])
    chosen = order[0]
    margin = SIZED_MARGIN if alike else ADAPTIVE_MARGIN
    if not chosen.startswith("ssl") and regret[chosen] * margin > regret[single]:
        chosen = single
    runner = next((n for n in order if n != chosen), None)
    # the runner-up worth naming is the best candidate of the other family
    other = [n for n in order if n.startswith("ssl") != chosen.startswith("ssl")]
    if other:
        runner = other[0]
    by = dict(cands)
    plan = by[chosen]
    record = {"objective": spec.objective, **_summary(plan, regret[chosen], scores[chosen]),
              "chosen": plan.spec.method,
              "runner_up": None if runner is None else
              _summary(by[runner], regret[runner], scores[runner]),
              "populations": list(pops), "assume": spec.assume, "single_stage": "ssl",
              "randomizers": list(SCALAR_CHOICES)}
    return plan.spec, record


def _summary(plan: Any, regret: float, scores: dict[str, float]) -> dict[str, Any]:
    """A candidate as the record names it: method, mode, stage-I share, mechanisms, its
    regret and objective on each reference population, and what it would likely give on
    users alike (the interval's half-widths and the MSE, as the preview shows them)."""
    mse, half = plan.reference_prediction("alike", draws=AUTO_DRAWS)
    return {"method": plan.spec.method, "mode": plan.spec.mode,
            "stage1_share": plan.spec.stage1_share if plan.two_stage else None,
            "mechanism": plan_mechanisms(plan), "regret": regret, "predicted": scores,
            "likely_half_width": [float(x) for x in half], "likely_mse": float(np.sum(mse))}


def resolve_auto(spec: Any, compile_fn: Any) -> tuple[Any, dict[str, Any]]:
    """The concrete spec ``auto`` runs, and a record of the choice (for the estimate)."""
    if spec.kind in SIZED_KINDS and spec.moment_p is None:
        return _resolve_sized(spec, compile_fn)
    single, chosen, info = _single_stage(spec, compile_fn)
    record: dict[str, Any] = {"single_stage_mse": single, "single_stage": info["method"],
                              "randomizers": list(SCALAR_CHOICES)}
    plan = compile_fn(replace(spec, method="ssl"))
    if plan.n_components == 1:
        sized = _sized(spec, compile_fn, single)
        if sized is not None:
            record.update(sized[1])
            if sized[0] is not None:
                record.update(chosen="two-stage-sized", mode="default",
                              stage1_share=sized[0].stage1_share)
                return sized[0], record
    if plan.kind.categories is None:
        legacy = _legacy_two_stage(spec, compile_fn)
        ssl_noise = min(_noise_mse(replace(spec, method="ssl", mode=m, randomizer="best"),
                                   compile_fn)[0] for m in MODES if m != "paper")
        record.update(ssl_noise_mse=ssl_noise,
                      two_stage_noise_mse=None if legacy is None else legacy[0])
        if legacy is not None and legacy[0] * required_gain(legacy[2]) <= ssl_noise:
            record.update(chosen="two-stage", mode=legacy[1], stage1_share=legacy[2])
            return replace(spec, method="two-stage", mode=legacy[1], stage1_share=legacy[2],
                           oracle="best", randomizer="best"), record
    if plan.kind.categories is not None:  # distributions: uldp.collector.methods.auto_distribution
        from uldp.collector.methods.auto_distribution import hadamard_choice, probe_choice

        windows, info = hadamard_choice(spec, compile_fn, single)
        record.update(info)
        if windows is not None:
            record.update(chosen="hadamard", mode="default", stage1_share=windows.stage1_share)
            return windows, record
        chosen = probe_choice(chosen, compile_fn)  # the oracle's paired-record probe
    record.update(chosen=chosen.method, mode=chosen.mode, stage1_share=None)
    return chosen, record
