"""Algorithm 4: nonparametric classification on a grid with Hadamard features.

Sections of ``docs/algorithms.md``: §9.2 (grid, ``K_H``, targets ``Q = H q``), §9.3 (protocol: a
``K_H``-dimensional MeanEst with bound 1, ``N_Δ = K_H n``; ``q̂ = H Q̂ / K_H`` by fast WHT;
``Ŷ(x) = sign(q̂_{bin(x)})``, ``sign(0) = +1``), §9.4 (bin side and the regime
circularity, resolved by :func:`choose_grid`), [D15], [D16], [D17], §12 (baselines: the
same kind run with ``method="baseline-a"|"baseline-b"``).

A query is one MeanEst invocation of kind ``classify`` (device side in
``uldp.client.kinds.learning``); everything here is post-processing (INV-5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uldp.client.hadamard import fwht, next_pow2
from uldp.client.kinds.learning import MAX_GRID_CELLS, grid_bins
from uldp.client.regimes import group_components
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.methods import METHOD_PLANS
from uldp.collector.planner import RESOLVERS, QuerySpec

__all__ = ["GridChoice", "GridModel", "choose_grid", "components_of", "effective_sizes",
           "feature_box", "grid_result", "hadamard_inverse", "noise_constant"]

STAGE1_MIN = 200.0  # n_I·ε_c² below which stage I is unreliable (planner warning, §4.5)


@dataclass(frozen=True)
class GridChoice:
    """Bin side ``l``, cells per axis ``M = ⌈1/l⌉``, ``K_H`` and the regime it implies."""

    side: float
    M: int
    K: int
    regime: str


def _grid_for(side: float, d: int) -> tuple[int, int]:
    M = max(1, math.ceil(1.0 / side - 1e-9))
    M = min(M, max(1, math.floor(MAX_GRID_CELLS ** (1.0 / d) + 1e-9)))
    return M, next_pow2(M**d)


def _method(name: str) -> Any:
    """The method whose rates size the grid; ``auto`` sizes it as two-stage (the spec's
    rule) and then resolves the query's method for that grid."""
    return METHOD_PLANS["two-stage" if name in RESOLVERS else name]


def effective_sizes(n: int, m: int, epsilon: float, method: str) -> tuple[int, int, float]:
    """``(n, m, ε)`` seen by the rate formulas (the method's ``effective_sizes``)."""
    return _method(method).effective_sizes(n, m, epsilon)


def noise_constant(method: str, n: int, K: int) -> float:
    """``c²`` with ``Var q̂_l ≈ c² / (n m (ε²∧ε))`` per cell (the method's constant)."""
    return _method(method).noise_constant(n, K)


def _stage1_ok(n: int, C: int, epsilon: float, mode: str) -> bool:
    grouping = group_components(C, epsilon, n, mode)
    G = len(grouping.groups)
    smallest = n // G
    eps_min = min(g.eps_c for g in grouping.groups)
    return smallest >= 2 and (smallest // 2) * eps_min**2 >= STAGE1_MIN


def choose_grid(n: int, m: int, d: int, epsilon: float, *, beta: float = 1.0,
                c_l: float | None = None, task: str = "classify", mode: str = "default",
                method: str = "two-stage") -> GridChoice:
    """§9.4 / §10.4 with the circularity resolved as in [D17].

    Compute the non-private side ``l_np = (nm/ln n)^{-1/(2β+d)}`` and its ``K_H^np``; if
    ``ε >= C^np ln n`` (``C = K_H`` for classify, ``2K_H`` for regress) use the low regime
    with ``l_np``. Otherwise ``l = c_l (mn(ε²∧ε))^{-1/(2(d+β))}`` (regression: ``mn(ε²∧ε)``
    divided by ``ln² n``), recompute ``K_H`` and take the regime from the grouping rule.

    ``c_l=None`` (default) calibrates the constant the paper leaves open:
    ``c_l = c^{1/(d+β)}`` with ``c²`` from :func:`noise_constant`, which balances the
    approximation error ``l^β`` against the cell noise ``c/(l^d √(mnε²))``; ``c_l = 1`` is
    the spec's literal default (far too fine a grid at practical ``n``: the Algorithm-1
    noise constant is ≈ 1300). Two-stage only: ``M`` is then reduced until the smallest
    group's stage I has ``n_I ε_c² >= 200`` (as the SGD ``t0`` cap of [D13]).
    """
    if task not in ("classify", "regress"):
        raise ValueError(f"task must be 'classify' or 'regress', got {task!r}")
    if beta <= 0 or (c_l is not None and c_l <= 0):
        raise ValueError("beta and c_l must be positive")
    n_e, m_e, eps_e = effective_sizes(n, m, epsilon, method)
    ln_n = math.log(max(n_e, 2))
    per_bin = 1 if task == "classify" else 2
    l_np = (n_e * m_e / ln_n) ** (-1.0 / (2 * beta + d))
    M, K = _grid_for(l_np, d)
    if eps_e >= per_bin * K * ln_n:
        return GridChoice(l_np, M, K, "low")
    e2 = min(eps_e**2, eps_e)
    base = n_e * m_e * e2 / (ln_n**2 if task == "regress" else 1.0)
    side = max(base, 1e-300) ** (-1.0 / (2 * (d + beta)))
    if c_l is None:
        c2 = noise_constant(method, n_e, K)
        side *= c2 ** (1.0 / (2 * (d + beta)))
    else:
        side *= c_l
    M, K = _grid_for(side, d)
    if len(_method(method).stages) == 2 and c_l is None:
        while M > 1 and not _stage1_ok(n, per_bin * K, epsilon, mode):
            M -= 1
            K = next_pow2(M**d)
    regime = group_components(per_bin * K, eps_e, n_e, mode).regime
    return GridChoice(side, M, K, regime)


def hadamard_inverse(Q: np.ndarray) -> np.ndarray:
    """``H Q / K_H`` by the fast WHT (``H⁻¹ = H/K_H``, §3.5)."""
    Q = np.asarray(Q, dtype=np.float64)
    return fwht(Q, axis=-1) / Q.shape[-1]


@dataclass
class GridModel:
    """A fitted grid predictor (classifier or regressor): the result dict of a query."""

    kind: str  # "classify" | "regress"
    M: int
    dim: int
    lo: np.ndarray
    hi: np.ndarray
    q: np.ndarray  # K_H entries (first M^d are the cells)
    p: np.ndarray | None = None  # regression: cell probabilities
    label_bound: float | None = None
    tau: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def K(self) -> int:
        return int(self.q.size)

    def cells(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X[:, None] if self.dim == 1 else X[None, :]
        if X.shape[-1] != self.dim:
            raise ValueError(f"X must have {self.dim} features, got shape {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinity")
        return grid_bins(X, self.M, self.lo, self.hi)

    def decision(self, X: np.ndarray) -> np.ndarray:
        """Classifier: ``q̂_{bin(x)}``; regressor: ``η̂(x)`` (§10.3, [D19])."""
        b = self.cells(X)
        if self.kind == "classify":
            return self.q[b]
        assert self.p is not None and self.label_bound is not None and self.tau is not None
        T = self.label_bound
        return np.clip(self.q[b] / np.maximum(self.p[b], self.tau), -T, T)

    def predict(self, X: np.ndarray) -> np.ndarray:
        v = self.decision(X)
        return np.where(v >= 0, 1.0, -1.0) if self.kind == "classify" else v

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "q": self.q.tolist(),
               "grid": {"M": self.M, "dim": self.dim, "lo": self.lo.tolist(),
                        "hi": self.hi.tolist(), "K_H": self.K}, **self.info}
        if self.kind == "regress":
            out.update({"p": None if self.p is None else self.p.tolist(),
                        "label_bound": self.label_bound, "tau": self.tau})
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GridModel:
        try:
            g = d["grid"]
            kind = d["kind"]
            q = np.asarray(d["q"], dtype=np.float64)
            M, dim = int(g["M"]), int(g["dim"])
            lo = np.asarray(g.get("lo", [0.0] * dim), dtype=np.float64)
            hi = np.asarray(g.get("hi", [1.0] * dim), dtype=np.float64)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"result dict is missing {exc}") from None
        if kind not in ("classify", "regress"):
            raise ValueError(f"result kind must be classify or regress, got {kind!r}")
        if q.size != next_pow2(M**dim):
            raise ValueError(f"q has {q.size} entries, the grid needs {next_pow2(M**dim)}")
        p = None if d.get("p") is None else np.asarray(d["p"], dtype=np.float64)
        if kind == "regress" and (p is None or p.size != q.size):
            raise ValueError("a regress result needs p with as many entries as q")
        info = {k: v for k, v in d.items()
                if k not in ("kind", "q", "grid", "p", "label_bound", "tau")}
        return cls(kind, M, dim, lo, hi, q, p,
                   None if d.get("label_bound") is None else float(d["label_bound"]),
                   None if d.get("tau") is None else float(d["tau"]), info)


def grid_extra(M: int, lo: np.ndarray, hi: np.ndarray) -> dict[str, Any]:
    return {"grid": int(M), "lo": [float(v) for v in lo], "hi": [float(v) for v in hi]}


def components_of(est: Estimate) -> np.ndarray:
    """``θ̂`` (the component estimates Q̂ or (Q̂, P̂)) of a finished query."""
    return np.asarray(est.extra["components"], dtype=np.float64)


def feature_box(d: int, lo: Any, hi: Any) -> tuple[np.ndarray, np.ndarray]:
    lo_a = np.zeros(d) if lo is None else np.asarray(lo, dtype=np.float64).reshape(-1)
    hi_a = np.ones(d) if hi is None else np.asarray(hi, dtype=np.float64).reshape(-1)
    if lo_a.shape != (d,) or hi_a.shape != (d,) or np.any(hi_a <= lo_a) \
            or not (np.isfinite(lo_a).all() and np.isfinite(hi_a).all()):
        raise ValueError(f"feature bounds lo/hi must be {d} finite values with lo < hi")
    return lo_a, hi_a


def grid_result(spec: QuerySpec, estimate: dict[str, Any] | Estimate) -> dict[str, Any]:
    """A finished classify/regress estimate → the GridModel result dict (§9.3, §10.3)."""
    est = estimate.to_dict() if isinstance(estimate, Estimate) else estimate
    theta = np.asarray(est["components"], dtype=np.float64)
    ex = spec.extra
    M, d = int(ex["grid"]), spec.dim
    lo = np.asarray(ex.get("lo", [0.0] * d), float)
    hi = np.asarray(ex.get("hi", [1.0] * d), float)
    info = {"regime": est.get("regime"), "users": spec.users, "samples": spec.samples,
            "epsilon": spec.epsilon, "method": spec.method}
    if spec.kind == "classify":
        mdl = GridModel("classify", M, d, lo, hi, hadamard_inverse(theta),
                        info={"Q": theta.tolist(), **info})
        return mdl.to_dict()
    K = theta.size // 2
    T = float(ex["label_bound"])
    tau = float(ex.get("density_floor", 0.5)) / (2 * M**d)
    mdl = GridModel("regress", M, d, lo, hi, hadamard_inverse(theta[:K]),
                    hadamard_inverse(theta[K:]), T, tau,
                    info={"Q": theta[:K].tolist(), "P": theta[K:].tolist(), **info})
    return mdl.to_dict()
