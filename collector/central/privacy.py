"""The privacy record that accompanies every central user-level DP release.

See ``docs/central.md`` (what a ``CentralRelease`` carries) and
``docs/central-algorithms.md`` (parts H, P and C: each estimator fills in its own
accounting). A record
says what guarantee was spent, in which notion, how the budget was split between the
estimator's steps, and which inputs were treated as public (not protected).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PrivacyRecord:
    """What one release spent.

    mode: ``"pure"`` (ε-DP), ``"approx"`` ((ε, δ)-DP) or ``"zcdp"`` (ρ-zCDP).
    unit: the neighbouring relation, always user-level here (``"user"``: add/remove or
    replace *all* of one user's records, as the estimator's part of
    ``docs/central-algorithms.md`` states).
    split: named budget shares of the steps, e.g. ``{"quantile": 0.1, "mean": 0.9}``.
    public: inputs not protected by the guarantee (bounds, m, occupancy counts, ...).
    """

    mechanism: str
    mode: str
    epsilon: float | None = None
    delta: float | None = None
    rho: float | None = None
    unit: str = "user"
    neighbouring: str = "replace-one-user"
    split: dict[str, float] = field(default_factory=dict)
    public: dict[str, Any] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        if self.mode not in ("pure", "approx", "zcdp"):
            raise ValueError(f"mode must be pure, approx or zcdp, got {self.mode!r}")
        if self.mode in ("pure", "approx") and (self.epsilon is None or self.epsilon <= 0):
            raise ValueError("a pure or approximate DP record needs epsilon > 0")
        if self.mode == "approx" and (self.delta is None or not 0 < self.delta < 1):
            raise ValueError("an approximate DP record needs 0 < delta < 1")
        if self.mode == "zcdp" and (self.rho is None or self.rho <= 0):
            raise ValueError("a zCDP record needs rho > 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CentralRelease:
    """One released statistic: the noisy estimate, its privacy record and diagnostics.

    ``estimate`` is a float (d = 1) or a tuple of floats; ``details`` holds anything an
    analyst may want to see that is itself private to release (e.g. the noisy quantiles
    used) or purely public (sizes) — never unprotected functions of the data.
    ``interval`` is a ``(low, high)`` interval for the estimand (its coverage and what it
    accounts for are in ``details`` and the estimator's docstring); ``estimand`` says in
    words which quantity the estimate targets (e.g. the mean of user means).
    """

    estimate: Any
    privacy: PrivacyRecord
    details: dict[str, Any] = field(default_factory=dict)
    interval: tuple[float, float] | None = None
    estimand: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "interval": self.interval,
                "estimand": self.estimand, "privacy": self.privacy.to_dict(),
                "details": self.details}
