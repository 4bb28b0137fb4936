"""The estimate a query returns: values with standard errors and confidence intervals.

Sections of ``docs/algorithms.md``: §4.5 (variance of the two-stage mean), §5.5 / §6.1 (sums of
per-component variances through the output transform). Component estimates ``θ̂`` come
with per-group covariance blocks; an output ``μ̂ = T θ̂`` gets
``Var μ̂_j = Σ_g T[j, g] Cov_g T[j, g]ᵀ`` (groups are disjoint users, hence independent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = ["Estimate", "combine", "output_std_error"]


@dataclass(frozen=True)
class Estimate:
    values: np.ndarray
    std_error: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    level: float
    counts: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "values": self.values.tolist(),
            "std_error": self.std_error.tolist(),
            "ci_low": self.ci_low.tolist(),
            "ci_high": self.ci_high.tolist(),
            "level": self.level,
            "counts": dict(self.counts),
            **{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.extra.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Estimate:
        """The inverse of :meth:`to_dict` (extras come back as lists, not arrays)."""
        core = ("values", "std_error", "ci_low", "ci_high", "level", "counts")
        extra = {k: v for k, v in d.items() if k not in core}
        for key in ("components", "projected"):
            if key in extra:
                extra[key] = np.asarray(extra[key], dtype=np.float64)
        arrays = [np.asarray(d[k], dtype=np.float64) for k in core[:4]]
        return cls(arrays[0], arrays[1], arrays[2], arrays[3], float(d["level"]),
                   counts=dict(d.get("counts", {})), extra=extra)

    def covers(self, truth: np.ndarray) -> np.ndarray:
        t = np.asarray(truth, dtype=np.float64)
        return (self.ci_low <= t) & (t <= self.ci_high)


def output_std_error(T: np.ndarray, blocks: Sequence[tuple[Sequence[int], np.ndarray]]
                     ) -> np.ndarray:
    """Standard errors of ``T θ̂`` from independent ``(components, covariance)`` blocks:
    ``Var_j = Σ_g T[j, g] Cov_g T[j, g]ᵀ``."""
    var = np.zeros(T.shape[0])
    for comps, cov in blocks:
        Tg = T[:, list(comps)]
        var += np.einsum("ji,ik,jk->j", Tg, cov, Tg)
    return np.sqrt(np.maximum(var, 0.0))


def combine(n_components: int, blocks: Sequence[tuple[Sequence[int], np.ndarray, np.ndarray]],
            transform: np.ndarray | None, level: float = 0.95,
            counts: dict[str, int] | None = None,
            bias: tuple[np.ndarray, np.ndarray] | None = None,
            output_range: tuple[float, float] | None = None,
            offset: float = 0.0) -> Estimate:
    """Assemble ``θ̂`` from per-group ``(components, means, covariance)`` and map it by ``T``.

    ``bias = (b_lo, b_hi)``: per component, the true ``θ_c`` may lie up to ``b_lo`` below
    or ``b_hi`` above ``θ̂_c`` beyond the noise (stage-II clamping); the interval of every
    output widens by the bounds carried through ``T``. ``output_range``: the public range
    of the outputs; values and interval ends are post-processed into it. ``offset``: added
    to every output (the centre of a ranged query's values, which devices subtract).
    """
    theta = np.zeros(n_components)
    T = np.eye(n_components) if transform is None else np.asarray(transform, dtype=np.float64)
    for comps, means, _ in blocks:
        theta[list(comps)] = means
    values = T @ theta
    se = output_std_error(T, [(comps, cov) for comps, _, cov in blocks])
    z = NormalDist().inv_cdf(0.5 + level / 2)
    low, high = values - z * se, values + z * se
    extra: dict[str, Any] = {"components": theta}
    if bias is not None:
        Tp, Tn = np.maximum(T, 0.0), np.maximum(-T, 0.0)
        down = Tp @ bias[0] + Tn @ bias[1]
        up = Tp @ bias[1] + Tn @ bias[0]
        low, high = low - down, high + up
        extra["bias_bound"] = [down.tolist(), up.tolist()]
    if offset:
        values, low, high = values + offset, low + offset, high + offset
    if output_range is not None:
        lo, hi = output_range
        values, low, high = (np.clip(x, lo, hi) for x in (values, low, high))
    return Estimate(values, se, low, high, level, counts=dict(counts or {}), extra=extra)
