"""Privacy-adaptive grouping of scalar components (Algorithm 2's regimes).

Spec: ``user_level_ldp.md`` §5.2 (regimes), §5.4 (privacy), §9.3/§10.3 (same machinery
with ``K_H`` / ``2K_H`` components), decisions [D7] and [D11].

Given ``C`` components, a user-level budget ε and ``n`` users in the invocation:

* ``single``: ``C = 1`` — Algorithm 1 with the whole ε ([D7]);
* ``high`` (ε < 1): ``C`` groups, one component each, ``ε_c = ε``;
* ``medium`` (1 <= ε < C·ln n): groups of ``ε' = ⌊ε⌋`` consecutive components,
  ``ε_c = ε / k_g`` (default) or ``1`` (``mode="paper"``);
* ``low`` (ε >= C·ln n): one group with all components, ``ε_c = ε / C``.

Privacy (basic composition, §5.4): a user in group ``g`` spends ``k_g · ε_c <= ε``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Group", "Grouping", "group_components"]


@dataclass(frozen=True)
class Group:
    """The components one group of users serves, each at budget ``eps_c``."""

    components: tuple[int, ...]
    eps_c: float

    @property
    def epsilon(self) -> float:
        """What one user of this group spends (basic composition)."""
        return len(self.components) * self.eps_c


@dataclass(frozen=True)
class Grouping:
    regime: str
    groups: tuple[Group, ...]


def group_components(n_components: int, epsilon: float, n_users: int,
                     mode: str = "default") -> Grouping:
    """Split ``n_components`` into groups by the ε regime (§5.2, [D7], [D11])."""
    if n_components < 1:
        raise ValueError(f"n_components must be >= 1, got {n_components}")
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
    if n_users < 1:
        raise ValueError(f"n_users must be >= 1, got {n_users}")
    if mode not in ("default", "paper"):
        raise ValueError(f"mode must be 'default' or 'paper', got {mode!r}")
    C = n_components
    if C == 1:
        return Grouping("single", (Group((0,), epsilon),))
    if epsilon < 1:
        return Grouping("high", tuple(Group((c,), epsilon) for c in range(C)))
    if epsilon >= C * math.log(max(n_users, 2)):
        return Grouping("low", (Group(tuple(range(C)), epsilon / C),))
    per = math.floor(epsilon)
    groups = []
    for start in range(0, C, per):
        comps = tuple(range(start, min(start + per, C)))
        eps_c = 1.0 if mode == "paper" else epsilon / len(comps)
        groups.append(Group(comps, eps_c))
    return Grouping("medium", tuple(groups))
