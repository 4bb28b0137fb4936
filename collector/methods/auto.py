"""``method=auto``: the method and grouping chosen from public parameters by the explicit
error bound, with stage-I information deciding the rest.

See ``docs/algorithms.md`` ("Choosing a method"). Sections of ``docs/algorithms.md``: §4.5 (the
two-stage variance formula), §5.2–5.3 (grouping), §12 (SSL).

At compile time (public values only, so every replica and every restart resolves the
same way) ``auto`` compares the *noise part* of the predicted error of

* single-stage Laplace (SSL) on all users, for each grouping mode, and
* two-stage with its narrowest stage-II interval (the paper's ``3h + 2Δ``) on the users
  left after a small stage I, for each grouping mode.

Two-stage is chosen only if stage I can be strong (``n_I ε_c² ≥`` :data:`STAGE1_TARGET`,
the spec's rule for locating the mode reliably) with at most half of each group's users,
and the noise it promises beats SSL's by :func:`required_gain` of that share: :data:`KAPPA`
at a stage I of 1/6 of the users or less, rising as ``1/(1 − s)`` beyond.

Why (minimax regret). No rule from public values can be within 1.2× of the best method on
every population: two populations with the same public parameters — every user alike
(two-stage wins by its noise gain ``G``) and users spread over the support (SSL wins) —
force either the first loss (choose SSL: ``G``) or a stage I whose users are lost to the
second (choose two-stage: the adaptive stage II falls back to the whole support, which is
SSL on the ``1 − s`` users left, ``1/(1 − s)`` in MSE). ``auto`` takes the second risk
only when the first is at least ``KAPPA · 5/6 = 2`` times larger: at ``s ≤ 1/6`` it costs
at most 1.2× on spread users; at the largest share ``s = 1/2`` (few users or small ε) at
most 2×, taken only when SSL would lose ``G ≥ 4``. ``bench/results/realdata.md`` shows
both kinds of population.

The chosen two-stage then uses the adaptive stage-II rule
(``uldp.collector.methods.intervals``), which falls back to the whole support when the
stage-I histogram shows spread-out users.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from uldp.client.regimes import MODES

__all__ = ["KAPPA", "MAX_STAGE1_SHARE", "SMALL_STAGE1_SHARE", "STAGE1_TARGET",
           "required_gain", "resolve_auto"]

KAPPA = 2.4  # two-stage must promise this factor less noise than SSL (small stage I)
STAGE1_TARGET = 400.0  # n_I ε_c² of the smallest group's stage I (spec §4.5: ≥ 99 %)
SMALL_STAGE1_SHARE = 1.0 / 6.0  # up to this share the spread-users loss is ≤ 1.2
MAX_STAGE1_SHARE = 0.5  # a stage I that needs more users than this is too weak
MIN_STAGE1_SHARE = 0.05


def required_gain(share: float) -> float:
    """The factor of less noise two-stage must promise when its stage I takes ``share``
    of the users: ``KAPPA`` up to :data:`SMALL_STAGE1_SHARE`, then growing with the loss
    ``1/(1 − share)`` it risks on spread-out users (module docstring)."""
    return KAPPA * (1 - SMALL_STAGE1_SHARE) / (1 - max(share, SMALL_STAGE1_SHARE))


def _noise_mse(spec: Any, compile_fn: Any) -> tuple[float, Any]:
    plan = compile_fn(spec)
    return plan.predicted_mse(np.zeros(plan.n_components)), plan


def _stage1_share(plan: Any) -> float:
    """Share of each group's users that gives the smallest group ``n_I ε_c² >= target``
    (at least :data:`MIN_STAGE1_SHARE`; above :data:`MAX_STAGE1_SHARE` when even half of
    the users are too few)."""
    need = 0.0
    for g, grp in enumerate(plan.grouping.groups):
        size = max(plan.group_size(g), 1)
        need = max(need, STAGE1_TARGET / (size * grp.eps_c**2))
    return float(max(need, MIN_STAGE1_SHARE))


def resolve_auto(spec: Any, compile_fn: Any) -> tuple[Any, dict[str, Any]]:
    """The concrete spec ``auto`` runs, and a record of the choice (for the estimate)."""
    modes = [m for m in MODES if m != "paper"]
    ssl = min((_noise_mse(replace(spec, method="ssl", mode=m), compile_fn)[0], m)
              for m in modes)
    best: tuple[float, str, float] | None = None
    for m in modes:
        probe = replace(spec, method="two-stage", mode=m, stage1_share=0.5)
        try:
            _, plan = _noise_mse(probe, compile_fn)
            share = _stage1_share(plan)
            if share > MAX_STAGE1_SHARE:  # stage I too weak even with half of the users
                continue
            mse, _ = _noise_mse(replace(probe, stage1_share=share), compile_fn)
        except ValueError:  # too few users for this grouping's runs
            continue
        if best is None or mse * required_gain(share) < best[0] * required_gain(best[2]):
            best = (mse, m, share)
    record: dict[str, Any] = {"ssl_noise_mse": ssl[0],
                              "two_stage_noise_mse": None if best is None else best[0]}
    if best is not None and best[0] * required_gain(best[2]) <= ssl[0]:
        record.update(chosen="two-stage", mode=best[1], stage1_share=best[2])
        return replace(spec, method="two-stage", mode=best[1], stage1_share=best[2]), record
    record.update(chosen="ssl", mode=ssl[1], stage1_share=None)
    return replace(spec, method="ssl", mode=ssl[1]), record
