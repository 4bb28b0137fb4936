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

Where the windows are not taken, the one-record oracle runs as method ``oracle-probe``
(``uldp.collector.methods.oracle_probe``) wherever its paired-record probe runs
(:func:`probe_choice`): the same reports but for a sixteenth of the users, who report two
records so that the interval leaves out the spread between users.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from uldp.client.kinds.means import hadamard_rows

__all__ = ["CENTRE_SHARES", "HADAMARD_GAIN", "SKEWED_ZIPF", "hadamard_choice", "probe_choice",
           "skewed_gain"]

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
    skewed = skewed_gain(compile_fn(best[1]))
    info = {"hadamard_mse": best[0], "hadamard_gain": gain,
            "hadamard_share": best[1].stage1_share, "hadamard_gain_skewed": skewed}
    return (best[1] if min(gain, skewed) >= HADAMARD_GAIN else None), info


#: the law of the skewed users alike the windows must also gain on: Zipf with this exponent
SKEWED_ZIPF = 1.1


def skewed_gain(plan: Any) -> float:
    """The windows' gain over their own fallback (the one-record oracle on the users left)
    on users alike whose records follow Zipf(:data:`SKEWED_ZIPF`) over the categories, as
    the normal model predicts it (``plan.method.outcomes``). Category data is skewed; the
    oracle's sampling error shrinks with the law's concentration faster than the windows'
    at few records per user, and where the spread rule then prefers the fallback (k = 8,
    m = 10, ε = 8: every run fell back, 0.90× the best peer) the windows only cost the
    spread phase's users. 0 where the model predicts the fallback more often than not."""
    A = plan.kind.categories(plan.template)
    K, m = plan.n_components, plan.spec.samples
    f = 1.0 / np.arange(1, A + 1) ** SKEWED_ZIPF
    mean = hadamard_rows((f / f.sum())[None], K)[0]
    sample_var = np.maximum(1.0 / K - mean**2, 0.0)
    sample_var[0] = 0.0
    window, fallback, p_window = plan.method.outcomes(plan, sample_var, sample_var / m, mean)
    if window is None or p_window < 0.5:
        return 0.0
    mixed = p_window * float(window.sum()) + (1 - p_window) * float(fallback.sum())
    n2 = plan.spec.users * plan.method.stage_shares(plan.spec)[1]
    oracle = float(fallback.sum()) * (1 - n2 / plan.spec.users)
    return oracle / max(mixed, 1e-300)


def probe_choice(oracle: Any, compile_fn: Any) -> Any:
    """The spec ``auto`` runs instead of its single-stage choice ``oracle``: where that is
    the one-record oracle (``SampledRecords``), method ``oracle-probe`` where its probe runs
    (``oracle_probe.probe_worth``: the oracle's noise small enough that the users' spread
    matters); else ``oracle`` itself."""
    from uldp.collector.methods.oracle import SampledRecords
    from uldp.collector.methods.oracle_probe import probe_worth

    if not isinstance(compile_fn(oracle).method, SampledRecords):
        return oracle
    probed = replace(oracle, method="oracle-probe")
    try:
        plan = compile_fn(probed)
    except ValueError:
        return oracle
    return probed if probe_worth(plan) else oracle
