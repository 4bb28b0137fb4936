"""The two families of report mechanisms, device half (``docs/device-protocol.md`` §17).

* A **frequency oracle** privatizes one categorical value ``v ∈ {0, …, k−1}`` (a sampled
  record's category, a stage-I bin) into a short integer report. It is pure ε-LDP for any
  two inputs, so a report over several components composes, and a report of a dataset's
  sampled record is ε-LDP for the whole dataset (a mixture of ε-LDP outputs).
* A **scalar randomizer** privatizes one clamped value, already mapped to the public grid
  ``g ∈ {0, …, 2^16}`` by unbiased randomized rounding (§6), into one integer. Any two
  grid values are inputs, so the clamped statistic of any two datasets is covered.

Every mechanism derives its probabilities itself from the public ``(k, ε)`` (invariant 1)
as dyadic numerators checked against a certified lower bound of ``e^ε``
(``uldp.client.mechanisms.exact``), and offers the exact probability of a report
(``probability``, a ``Fraction``) for the likelihood-ratio audit. The collector half
(debiasing, exact variance) of each is the module of the same name in
``uldp.collector.mechanisms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol

import numpy as np

from uldp.client.randomness import RandomSource

__all__ = ["FrequencyOracle", "OracleBase", "ScalarMechanism"]


class FrequencyOracle(Protocol):
    """A frequency oracle over ``k`` categories at ``ε_r = units / 2^24``."""

    name: str
    family: str  # "oracle"

    def length(self, k: int, eps: float) -> int:
        """Integers in one report."""

    def limit(self, k: int, eps: float) -> int:
        """Largest absolute report integer."""

    def privatize(self, items: np.ndarray, k: int, eps: float, rng: RandomSource
                  ) -> np.ndarray:
        """Reports ``(n, length)`` of the values ``items`` (``(n,)`` integers in
        ``[0, k)``); for one item the draws are the canonical ones of §17."""

    def probability(self, report: Sequence[int], item: int, k: int, eps: float
                    ) -> Fraction | float:
        """Exact ``P(report | item)`` (a ``Fraction``; discrete Laplace: a float)."""

    def privatize_many(self, items: np.ndarray, ks: Sequence[int], eps: float,
                       rng: RandomSource) -> np.ndarray:
        """Reports of several values per user (``items`` ``(n, c)``, value ``c`` over
        ``ks[c]`` categories), concatenated: ``(n, Σ_c length(ks[c]))``."""


class OracleBase:
    """The component-by-component report of several values (every oracle but discrete
    Laplace, which draws its noise for all entries in one call, §9.1)."""

    def privatize_many(self, items: np.ndarray, ks: Sequence[int], eps: float,
                       rng: RandomSource) -> np.ndarray:
        parts = [self.privatize(items[:, c], int(k), eps, rng)  # type: ignore[attr-defined]
                 for c, k in enumerate(ks)]
        return np.concatenate(parts, axis=1) if parts else np.zeros((len(items), 0),
                                                                    dtype=np.int64)


class ScalarMechanism(Protocol):
    """A scalar randomizer of grid values ``g ∈ {0, …, 2^16}`` at ``ε_r = units / 2^24``."""

    name: str
    family: str  # "scalar"

    def limit(self, eps: float) -> int:
        """Largest absolute report integer."""

    def privatize(self, g: np.ndarray, eps: float, rng: RandomSource) -> np.ndarray:
        """One report integer per entry of the ``(n, c)`` grid values ``g``."""

    def probability(self, z: int, g: int, eps: float) -> Fraction | float:
        """Exact ``P(z | g)`` (a ``Fraction``; discrete Laplace: a float)."""
