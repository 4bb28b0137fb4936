"""``method=auto``: the method and grouping chosen from public parameters by the explicit
error bound, with stage-I information deciding the rest.

See ``docs/algorithms.md`` ("Choosing a method"). Sections of ``docs/algorithms.md``: §4.5 (the
two-stage variance formula), §5.2–5.3 (grouping), §12 (SSL).

At compile time (public values only, so every replica and every restart resolves the
same way) ``auto`` compares the *noise part* of the predicted error of

* single-stage Laplace (SSL) on all users, for each grouping mode, and
* two-stage with its narrowest stage-II interval (the paper's ``3h + 2Δ``) on the users
  left after a small stage I, for each grouping mode.

Two-stage is chosen only if even this best case promises :data:`KAPPA` times less noise
and stage I can be small yet strong (at most :data:`MAX_STAGE1_SHARE` of the users give
``n_I ε_c² ≥`` :data:`STAGE1_TARGET`, the spec's rule for locating the mode reliably).

No rule from public values can be within 1.2× of the best method on every population:
two populations with the same public parameters — every user alike (two-stage wins by its
noise gain ``G``) and users spread over the support (SSL wins) — force either the first
loss (choose SSL: ``G``) or a stage I whose users are lost to the second (``1/(1 − s)``).
``auto`` bounds the second loss by 1.2 and takes two-stage only when stage I is strong
enough to be small; ``bench/results/realdata.md`` shows both kinds of population.

The chosen two-stage then uses the adaptive stage-II rule
(``uldp.collector.methods.intervals``), which falls back to the whole support when the
stage-I histogram shows spread-out users — so the price of a wrong guess is at most the
stage-I share of the users (≤ 1/(1 − 1/6) = 1.2× in MSE), and the price of choosing SSL
when two-stage would have won is at most ``KAPPA/2`` (two-stage needs half of the users
for its stage I).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from uldp.client.regimes import MODES

__all__ = ["KAPPA", "MAX_STAGE1_SHARE", "STAGE1_TARGET", "resolve_auto"]

KAPPA = 2.4  # two-stage must promise this factor less noise than SSL
STAGE1_TARGET = 400.0  # n_I ε_c² of the smallest group's stage I (spec §4.5: ≥ 99 %)
MAX_STAGE1_SHARE = 1.0 / 6.0
MIN_STAGE1_SHARE = 0.05


def _noise_mse(spec: Any, compile_fn: Any) -> tuple[float, Any]:
    plan = compile_fn(spec)
    return plan.predicted_mse(np.zeros(plan.n_components)), plan


def _stage1_share(plan: Any) -> float:
    """Share of each group's users that gives the smallest group ``n_I ε_c² >= target``."""
    need = 0.0
    for g, grp in enumerate(plan.grouping.groups):
        size = max(plan.group_size(g), 1)
        need = max(need, STAGE1_TARGET / (size * grp.eps_c**2))
    return float(min(max(need, MIN_STAGE1_SHARE), 0.5))


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
            mse, _ = _noise_mse(replace(probe, stage1_share=share), compile_fn)
        except ValueError:  # too few users for this grouping's runs
            continue
        if share <= MAX_STAGE1_SHARE and (best is None or mse < best[0]):
            best = (mse, m, share)
    record: dict[str, Any] = {"ssl_noise_mse": ssl[0],
                              "two_stage_noise_mse": None if best is None else best[0]}
    if best is not None and best[0] * KAPPA <= ssl[0]:
        record["chosen"] = "two-stage"
        return replace(spec, method="two-stage", mode=best[1], stage1_share=best[2]), record
    record["chosen"] = "ssl"
    return replace(spec, method="ssl", mode=ssl[1]), record
