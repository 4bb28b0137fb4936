"""The advisories a compiled plan carries for whoever shows it to a person.

See ``docs/architecture.md``; used by ``uldp.collector.planner``. A plan whose interval will
likely cover most of its public range gets a note saying so, with the number of users that
would give an informative estimate (never a refusal).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = ["WIDE_SHARE", "too_few_users"]

#: a plan whose likely interval (noise alone, users alike) spans more than this share of the
#: public range gets the "too few users" advisory
WIDE_SHARE = 0.5


def too_few_users(plan: Any) -> str | None:
    """The advisory of a plan whose interval will likely cover most of its public range
    (e.g. 3 users: ``+20.0 [-20, 20]``), with the number of users that would give an
    interval of a tenth of the range; None otherwise."""
    spec = plan.spec
    rng = plan.kind.output_range(plan.template)
    if not plan.kind.ranged or rng is None:  # the value kinds (no output transform)
        return None
    try:
        sd = np.sqrt(np.maximum(plan.predicted_variance(np.zeros(plan.n_components)), 0.0))
    except OverflowError:  # a range near the largest double (width² overflows): no advice
        return None
    z = NormalDist().inv_cdf(0.5 + spec.confidence / 2)
    width, span = 2 * z * float(sd.max(initial=0.0)), float(rng[1] - rng[0])
    if not span > 0 or width < WIDE_SHARE * span:
        return None
    if not math.isfinite(width / span):  # a range near the largest double
        return (f"with {spec.users} users at epsilon {spec.epsilon:g} the likely interval "
                f"spans the whole range [{rng[0]:g}, {rng[1]:g}]")
    need = math.ceil(spec.users * (width / (0.1 * span)) ** 2)
    return (f"with {spec.users} users at epsilon {spec.epsilon:g} the likely interval is "
            f"{width:.3g} wide, {100 * min(width / span, 1):.0f}% of the range "
            f"[{rng[0]:g}, {rng[1]:g}]: too few users for an informative estimate (about "
            f"{need} users would give a tenth of the range)")
