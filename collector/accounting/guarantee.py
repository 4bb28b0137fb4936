"""The central guarantee one shuffled cell states: n reports of one randomizer, shuffled.

See ``docs/privacy.md`` §7.1. :func:`shuffle_guarantee` is what the collector puts in the
``privacy`` section of a shuffled query's result (``uldp.collector.service.shuffled``) and
what ``uldp privacy shuffle`` prints: the variation-ratio bound of the report's own
mechanism (``uldp.collector.accounting.parameters``), never above the local ε0, and
whether shuffling gained anything at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from uldp.collector.accounting.variation_ratio import VariationRatio, central_epsilon

__all__ = ["BOUND", "Guarantee", "shuffle_guarantee"]

#: how every shuffled result names the bound it states
BOUND = ("variation-ratio (Wang et al., PVLDB 2024) with the mechanism's own (p, beta, q), "
         "the common part hidden among the other reports' clones of it (docs/privacy.md §7.1)")


@dataclass(frozen=True)
class Guarantee:
    """The central (ε, δ) of ``n`` shuffled reports of the randomizer ``parameters``."""

    n: int
    delta: float  # the δ asked for
    epsilon: float  # the central ε; the local ε0 when shuffling gains nothing
    amplified: bool  # False: the guarantee is (ε0, 0), the local one
    parameters: VariationRatio

    @property
    def epsilon0(self) -> float:
        return self.parameters.epsilon0

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "epsilon0": self.epsilon0, "epsilon": self.epsilon,
                "delta": self.delta if self.amplified else 0.0, "amplified": self.amplified,
                "mechanism": self.parameters.mechanism, "detail": self.parameters.detail,
                "variation_ratio": {"p": self.parameters.p, "beta": self.parameters.beta,
                                    "q": self.parameters.q}, "bound": BOUND}


def shuffle_guarantee(n: int, parameters: VariationRatio, delta: float) -> Guarantee:
    """The central guarantee of shuffling ``n`` reports (a gain below 0.1 % of ε0 counts
    as none: the guarantee is then the local one, (ε0, 0))."""
    eps0 = parameters.epsilon0
    eps = central_epsilon(int(n), parameters, float(delta)) if n >= 2 else eps0
    amplified = eps < eps0 * (1.0 - 1e-3)
    return Guarantee(int(n), float(delta), eps if amplified else eps0, amplified, parameters)
