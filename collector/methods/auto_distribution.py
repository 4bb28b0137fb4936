"""``method=auto`` for categorical kinds: the Hadamard windows or the one-record oracle.

See ``docs/algorithms.md`` ("Choosing a method", "Hadamard windows"). ``auto`` first finds
the best single-stage candidate (``uldp.collector.methods.auto``: the one-record oracle with
the best frequency oracle for ``(A, ε)``); for a ``distribution`` it then weighs method
``hadamard`` (``uldp.collector.methods.hadamard``) against it, from public values only:

* the Hadamard windows' predicted error on users alike — every record of every user from
  one law, at the worst per-record variance ``D²`` of every coefficient — at each centre
  share of :data:`CENTRE_SHARES`, the best of them;
* chosen when it promises at least :data:`HADAMARD_GAIN` times less error than the oracle.

Its risk where users differ is bounded by construction: the spread phase sees them and the
method falls back to the same oracle on every user but the spread phase's (at most 7 %,
``spread_share``), i.e. at most ``1/(1 − s₂) ≤ 1.076`` times the oracle's error; the centre
phase's reports are the oracle's own. So the rule needs no minimax regret: it takes the
windows wherever users alike would gain.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

__all__ = ["CENTRE_SHARES", "HADAMARD_GAIN", "hadamard_choice"]

#: the centre phase's shares ``auto`` tries (the rest, less the spread phase, windows)
CENTRE_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
#: the least gain on users alike worth the spread phase's users
HADAMARD_GAIN = 1.25


def hadamard_choice(spec: Any, compile_fn: Any, single: float
                    ) -> tuple[Any | None, dict[str, Any]]:
    """``(spec of method hadamard or None, record)``: the windows when they promise
    :data:`HADAMARD_GAIN` over the one-record oracle's predicted error ``single`` on users
    alike (module docstring)."""
    best: tuple[float, Any] | None = None
    for share in CENTRE_SHARES:
        probe = replace(spec, method="hadamard", stage1_share=share, oracle="best",
                        randomizer="best", mode="default")
        try:
            plan = compile_fn(probe)
        except ValueError:
            return None, {}
        D2 = np.square(plan.kind.component_bounds(plan.template))
        mse = plan.predicted_mse(D2)  # users alike: i.i.d. records, per-record var ≤ D²
        if best is None or mse < best[0]:
            best = (mse, probe)
    if best is None:
        return None, {}
    gain = single / max(best[0], 1e-300)
    info = {"hadamard_mse": best[0], "hadamard_gain": gain,
            "hadamard_share": best[1].stage1_share}
    return (best[1] if gain >= HADAMARD_GAIN else None), info
