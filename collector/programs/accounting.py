"""How a query spent its ε, round by round, counted the way every device counts it.

See ``docs/privacy.md`` (ε arithmetic) and ``docs/algorithms.md`` ("SGD": accounting).
For every phase (an SGD round is one phase, or two for a two-stage Kashin step) and every
(group, stage) in it, the ε a device of that cell spends is ``task_epsilon`` of the task it
is served — the device ledger's own count (exact units of 2^-24), so what is shown is what
was charged. A user is placed in exactly one cell of one phase (§3.7, INV-3), and the
tasks of a phase depend on the data only through what earlier phases published
(post-processing of other users' reports), so the query is user-level ε-LDP with ε the
*largest* per-cell spend (parallel composition over disjoint users) — never the sum over
rounds, which would be the bound for a user reporting in every round.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from uldp.client.tasks import task_epsilon
from uldp.collector.programs.base import Program, PublishedPhases

__all__ = ["accounting"]


def _cells(program: Program, phase: int, published: PublishedPhases
           ) -> list[tuple[int, int, int, float]]:
    """``(group, stage, devices, ε)`` of every cell of ``phase``."""
    place = program.placements()
    before = {p: v for p, v in published.items() if p < phase}
    in_phase = place[:, 2] == phase
    out = []
    for g, s in sorted({(int(a), int(b)) for a, b in place[in_phase, :2]}):
        slots = np.flatnonzero(in_phase & (place[:, 0] == g) & (place[:, 1] == s))
        per_device = program.offsets(phase, slots[:1]) is not None
        task = program.task(phase, g, s, before, int(slots[0]) if per_device else None)
        out.append((g, s, int(slots.size), float(task_epsilon(task))))
    return out


def accounting(program: Any, published: PublishedPhases) -> dict[str, Any]:
    """The ``accounting`` section of a result: rounds, the ε of every round (per device),
    and the user-level total (module docstring)."""
    step_of = getattr(program, "step_of", lambda phase: phase - 1)
    rounds: dict[int, dict[str, Any]] = {}
    for phase in range(1, program.num_phases + 1):
        cells = _cells(program, phase, published)
        r = rounds.setdefault(step_of(phase), {"round": step_of(phase), "phases": [],
                                               "users": 0, "epsilon": 0.0})
        r["phases"].append(phase)
        r["users"] += sum(c[2] for c in cells)
        r["epsilon"] = max(r["epsilon"], max((c[3] for c in cells), default=0.0))
    per_round = [rounds[k] for k in sorted(rounds)]
    total = max((r["epsilon"] for r in per_round), default=0.0)
    return {"rounds": len(per_round), "per_round": per_round, "epsilon_per_user": total,
            "sum_over_rounds": float(sum(r["epsilon"] for r in per_round)),
            "composition": "parallel: every user reports once, in one round; later rounds "
                           "use only what earlier rounds published, so the query is "
                           f"user-level {total:g}-LDP (the largest round's ε, not the sum "
                           "over rounds)"}
