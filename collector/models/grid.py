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
from uldp.client.kinds.learning import DENSE_LIMIT, MAX_GRID_CELLS, grid_bins
from uldp.client.regimes import group_components
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.methods import METHOD_PLANS
from uldp.collector.models.shrinkage import Shrinkage, classify_shrinkage, regress_shrinkage
from uldp.collector.planner import RESOLVERS, QuerySpec, compile_query

__all__ = ["DESIGN_RANGE", "PILOT_SHARE", "PILOT_WIGGLE", "PILOT_Z", "SIGN_Z", "GridChoice",
           "GridModel", "choose_grid", "components_of", "dense_cells", "design_bias_scale",
           "effective_sizes", "feature_box", "grid_result", "grid_risk", "hadamard_inverse",
           "max_cells_per_axis", "measured_bias_scale", "misclassification_risk",
           "noise_constant", "pilot_grid", "pilot_users", "sign_scale"]

STAGE1_MIN = 200.0  # n_I·ε_c² below which stage I is unreliable (planner warning, §4.5)


@dataclass(frozen=True)
class GridChoice:
    """Bin side ``l``, cells per axis ``M = ⌈1/l⌉``, ``K_H`` and the regime it implies;
    with the risk rule also the predicted squared bias and variance of the choice and of
    the other grids it was weighed against (``candidates``: ``[M, bias², variance]``);
    ``pilot``: what a pilot phase measured (users, grid, signal, bias scale), if one ran."""

    side: float
    M: int
    K: int
    regime: str
    rule: str = "given"
    bias2: float = math.nan
    variance: float = math.nan
    candidates: tuple[tuple[int, float, float], ...] = ()
    pilot: dict[str, Any] | None = None
    #: the risk weighed: ``"squared error"`` of ``η̂`` (``bias2``, ``variance``), or a
    #: classifier's excess ``"misclassification"`` (``bias2``: the part a noiseless grid
    #: of that side keeps, ``variance``: what the cells' noise adds; both in probability)
    loss: str = "squared error"

    def to_json(self) -> dict[str, Any]:
        out = {"M": self.M, "K_H": self.K, "rule": self.rule, "loss": self.loss,
               "bias2": self.bias2, "variance": self.variance,
               "risk": self.bias2 + self.variance,
               "candidates": [list(c) for c in self.candidates]}
        if self.pilot is not None:
            out["pilot"] = self.pilot
        return out


def _grid_for(side: float, d: int) -> tuple[int, int]:
    M = max(1, math.ceil(1.0 / side - 1e-9))
    M = min(M, max_cells_per_axis(d))
    return M, next_pow2(M**d)


def max_cells_per_axis(d: int) -> int:
    """The largest ``M`` a device accepts (``M^d ≤ 2^20``)."""
    return max(1, math.floor(MAX_GRID_CELLS ** (1.0 / d) + 1e-9))


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


#: the design smoothness of the risk rule: ``η`` changes by at most its whole range
#: (2 for a classifier's ``E[Y|x] ∈ [−1, 1]``, ``2 T_y`` for a regressor) across the
#: normalized feature box, per axis — ``|η(x) − η(x')| ≤ L ‖x − x'‖^β`` with ``L`` that range
DESIGN_RANGE = 1.0


def design_bias_scale(d: int, task: str = "classify", label_bound: float = 1.0) -> float:
    """``C`` of the design guess ``bias²(M) = C·M^{−2β}``: ``d L²/12`` with ``L`` the whole
    range of ``η`` (:data:`DESIGN_RANGE`)."""
    T = 1.0 if task == "classify" else float(label_bound)
    L = DESIGN_RANGE * 2 * T
    return d * L * L / 12


def grid_risk(n: int, m: int, d: int, epsilon: float, M: int, *, task: str = "classify",
              beta: float = 1.0, method: str = "auto", mode: str = "default",
              label_bound: float = 1.0, bias_scale: float | None = None
              ) -> tuple[float, float, str]:
    """Predicted ``(bias², variance, regime)`` of the plug-in estimate ``η̂`` on the grid
    of ``M`` cells per axis (docs/algorithms.md §9.4): the bias of averaging a
    β-Hölder ``η`` of constant ``L = DESIGN_RANGE × range(η)`` over a cell of side
    ``1/M``, ``d L² M^{−2β}/12`` (exact for a linear ``η`` along every axis), and the
    variance ``Σ_l p_l Var(q̂_l / p_l)`` with ``p_l = 1/B`` (features spread over the box):
    the planner's per-component variance of the query's method at its worst-case sample
    variance, through ``q̂ = H Q̂ / K_H`` (``Var q̂_l = Σ_c Var Q̂_c / K_H²``); a regressor adds
    ``(T_y²/3) Var p̂_l`` for its denominator. ``bias_scale``: ``C`` in
    ``bias² = C·M^{−2β}`` measured by a pilot phase (:func:`measured_bias_scale`) instead
    of the design guess (:func:`design_bias_scale`)."""
    T = 1.0 if task == "classify" else float(label_bound)
    extra: dict[str, Any] = {"grid": int(M)}
    if task == "regress":
        extra["label_bound"] = T
    spec = QuerySpec(kind=task, epsilon=epsilon, users=n, samples=m, dim=d, bound=1.0,
                     method=method, mode=mode, extra=extra)
    plan = compile_query(spec)
    D2 = np.square(plan.kind.component_bounds(plan.template))
    v = plan.method.component_variance(plan, D2)
    K = next_pow2(M**d)
    B = M**d
    var_q = float(np.sum(v[:K])) / K**2
    var = B * B * var_q  # Σ over B cells of Var(q̂_l)/p_l, p_l = 1/B
    if task == "regress":
        var += B * B * (T * T / 3) * float(np.sum(v[K:])) / K**2
    C = design_bias_scale(d, task, T) if bias_scale is None else float(bias_scale)
    bias2 = C * M ** (-2 * beta)
    return bias2, var, plan.grouping.regime


#: how much finer structure ``η`` may hide than a pilot's coarse cells show: the pilot's
#: bias scale is multiplied by this before it caps the design's. A linear ``η`` has
#: within-cell variance ``Var(η)/M²`` (factor 1); ``sin(2πx)/2`` has ``π²/24 / (1/8) ≈ 3.3``
#: times that, which the design guess covers; 8 keeps such a wave on the design's grid
#: even when the pilot's noisy ``s²`` (its standard error carries the signal too) reads it
#: at half its size (sin(2πx)/2, d = 1, n = 10⁵, ε = 1: a pilot of 10⁴ users read 0.03
#: for 0.10 with 4 and chose 5 cells where the design's 7 had two thirds of the risk).
PILOT_WIGGLE = 8.0
#: standard errors subtracted from the pilot's measured signal (a lower confidence bound:
#: under no signal, a finer grid is chosen from noise about 16 % of the time, not half)
PILOT_Z = 1.0
#: standard errors a classify pilot's cell must sit across zero from the centre before it
#: counts as a minority region (one-sided; with 4 pilot cells and none truly across, some
#: cell reads across by noise in about 9 % of pilots, against 50 % at 1 SE — and near-empty
#: cells, whose ``ζ`` is near zero, are the ones that do)
SIGN_Z = 2.0
#: the share of users a pilot may take, at least and at most
PILOT_SHARE = (0.05, 0.25)


def pilot_grid(d: int) -> int:
    """Cells per axis of the pilot phase: about 4 cells, at least 2 per axis."""
    return max(2, round(4 ** (1.0 / d)))


def measured_bias_scale(signal: float, signal_se: float, M0: int, d: int, *,
                        task: str = "classify", label_bound: float = 1.0,
                        beta: float = 1.0) -> float:
    """``C`` of ``bias²(M) = C·M^{−2β}`` from a pilot's between-cell signal variance
    ``s²`` (in ``η`` units) on ``M0`` cells per axis (docs/algorithms.md, Grids): for an
    ``η`` linear along every axis the cells of side ``1/M0`` keep ``1 − M0^{−2}`` of its
    variance and a cell of side ``1/M`` hides ``M^{−2}`` of it, so
    ``C = s²/(1 − M0^{−2β})``; from the lower bound ``s² − z·se``, times
    :data:`PILOT_WIGGLE`, never above the design's ``C``."""
    lcb = max(0.0, float(signal) - PILOT_Z * float(signal_se))
    C = PILOT_WIGGLE * lcb / (1.0 - float(M0) ** (-2 * beta))
    return min(design_bias_scale(d, task, label_bound), C)


def pilot_users(n: int, m: int, d: int, epsilon: float, *, task: str = "classify",
                method: str = "auto", mode: str = "default",
                label_bound: float = 1.0, beta: float = 1.0) -> int:
    """Users of the pilot phase: the fewest (between :data:`PILOT_SHARE` of ``n``) whose
    predicted standard error of the signal ``s²`` on the pilot grid is a quarter of the
    signal the design guess implies there over :data:`PILOT_WIGGLE` — the smallest signal
    that keeps the design's grid. 0 when even the largest share cannot run the pilot grid."""
    M0 = pilot_grid(d)
    B0 = M0**d
    target = design_bias_scale(d, task, label_bound) * (1 - M0 ** (-2 * beta)) \
        / PILOT_WIGGLE / 4
    lo, hi = (max(2, math.ceil(s * n)) for s in PILOT_SHARE)
    best = 0
    for k in sorted({lo, *(math.ceil(f * n) for f in (0.1, 0.15, 0.2)), hi}):
        if not lo <= k <= hi:
            continue
        try:
            _, var, _ = grid_risk(k, m, d, epsilon, M0, task=task, beta=beta,
                                  method=method, mode=mode, label_bound=label_bound)
        except ValueError:
            continue
        best = k
        if math.sqrt(2.0 / B0) * var <= target:
            break
    return best


def _pos_mean(mu: np.ndarray | float, tau: np.ndarray | float) -> np.ndarray:
    """``E[X⁺]`` for ``X ~ N(μ, τ²)`` (``μ⁺`` at ``τ = 0``)."""
    mu, tau = np.asarray(mu, dtype=np.float64), np.asarray(tau, dtype=np.float64)
    safe = np.where(tau > 0, tau, 1.0)
    a = mu / safe
    val = mu * _ndtr(a) + safe * np.exp(-0.5 * a * a) / math.sqrt(2 * math.pi)
    return np.where(tau > 0, val, np.maximum(mu, 0.0))


def _ndtr(a: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return np.asarray(ndtr(a), dtype=np.float64)


_GH = np.polynomial.hermite_e.hermegauss(96)


def misclassification_risk(centre: float, sign_scale: float, spread_scale: float,
                           variance: float, M: int, *, beta: float = 1.0
                           ) -> tuple[float, float]:
    """Predicted excess misclassification ``(noiseless part, noise part)`` of the grid
    classifier on ``M`` cells per axis (docs/algorithms.md, Grids, "A classifier's risk").

    Model, in the units the cells estimate (``ζ(x) = η(x) p(x)/p̄``: a cell's ``B q_l``;
    the excess error of a rule ``g`` is ``E_x[|ζ(x)| 1{g(x) ≠ sign ζ(x)}]`` over the box):
    ``ζ ~ N(c, S²)`` with ``c`` the mean label and ``S²`` (``sign_scale``) sized by how much
    of ``ζ`` lies across zero from ``c``; a cell of side ``1/M`` keeps ``S²(1 − M^{−2β})``
    between cells and hides ``S² M^{−2β}``; its estimate adds noise of ``variance`` (the
    grid's per-cell variance, :func:`grid_risk`); the cell's label is the sign of the shrunk
    value ``c + w(ζ̂_l − c)`` with ``w = s²/(s² + variance)``, ``s² = spread_scale
    (1 − M^{−2β})`` the between-cell spread the shrinkage will read (``M = 1``: the sign of
    the one cell). Gauss–Hermite quadrature over the cell estimate."""
    c, S2 = float(centre), max(0.0, float(sign_scale))
    between = S2 * (1.0 - M ** (-2.0 * beta))
    spread = max(0.0, float(spread_scale)) * (1.0 - M ** (-2.0 * beta))

    def risk(v: float, w: float) -> float:
        Vu = between + v
        nodes, weights = _GH
        u = c + math.sqrt(Vu) * nodes
        k = between / Vu if Vu > 0 else 0.0
        mu = c + k * (u - c)
        tau = math.sqrt(max(0.0, S2 - k * between))
        if M == 1 or w >= 1.0:
            plus = u >= 0
        elif w <= 0.0:
            plus = np.full(u.shape, c >= 0)
        else:
            plus = u >= c * (1.0 - 1.0 / w)
        loss = np.where(plus, _pos_mean(-mu, tau), _pos_mean(mu, tau))
        return float(np.sum(weights * loss) / np.sum(weights))

    bias = risk(0.0, 1.0)
    v = max(0.0, float(variance))
    w = spread / (spread + v) if spread + v > 0 else 1.0
    return bias, max(0.0, risk(v, w) - bias)


def sign_scale(zeta: np.ndarray, se: np.ndarray, M0: int, d: int, *,
               beta: float = 1.0) -> tuple[float, float, float]:
    """``(c, A, S²)`` from a classify pilot's cells ``ζ̂_j = B0 q̂_j`` (standard errors
    ``se``): the centre ``c`` (their mean: the mean label), the mass across zero from ``c``
    the cells show beyond their noise, ``A = mean_j (−sgn(c) ζ̂_j − z se_j)⁺``
    (:data:`SIGN_Z`), and the ``S²`` of :func:`misclassification_risk` whose between-cell
    normal ``N(c, σ_b²)``, ``σ_b² = S²(1 − M0^{−2β})``, has that mass,
    ``E[(−sgn(c) ζ̄)⁺] = A``; times :data:`PILOT_WIGGLE`, never above the design's ``C``.
    A pilot whose cells all sit on the centre's side (``A = 0``) gives ``S² = 0``: no grid
    can beat the majority label, and every finer grid only adds flips."""
    z = np.asarray(zeta, dtype=np.float64)
    s = np.where(np.isfinite(se), np.asarray(se, dtype=np.float64), np.inf)
    c = float(z.mean())
    sgn = 1.0 if c >= 0 else -1.0
    A = float(np.mean(np.maximum(0.0, -sgn * z - SIGN_Z * s)))
    if A <= 0.0:
        return c, 0.0, 0.0
    lo, hi = 0.0, 1.0
    while float(_pos_mean(-abs(c), hi)) < A:
        hi *= 2.0
    for _ in range(60):  # E[N(−|c|, σ²)⁺] increases with σ
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(_pos_mean(-abs(c), mid)) < A else (lo, mid)
    S2 = PILOT_WIGGLE * hi * hi / (1.0 - float(M0) ** (-2 * beta))
    return c, A, min(design_bias_scale(d, "classify"), S2)


def _risk_rule(n: int, m: int, d: int, epsilon: float, task: str, beta: float,
               method: str, mode: str, label_bound: float,
               bias_scale: float | None = None, centre: float | None = None,
               spread_scale: float | None = None) -> GridChoice:
    """The grid of least predicted risk (:func:`grid_risk`; a classifier with a pilot's
    ``centre``: :func:`misclassification_risk`): ``M = 1, 2, …`` until the variance alone
    exceeds the best risk (it grows with ``M``) or the device limit."""
    cands: list[tuple[int, float, float]] = []
    best: tuple[float, int, str] | None = None
    signs = task == "classify" and centre is not None
    for M in range(1, max_cells_per_axis(d) + 1):
        try:
            b2, var, regime = grid_risk(n, m, d, epsilon, M, task=task, beta=beta,
                                        method=method, mode=mode, label_bound=label_bound,
                                        bias_scale=bias_scale)
        except ValueError:  # too few users for this grid's groups
            break
        if signs:
            assert centre is not None
            S2 = design_bias_scale(d, task) if bias_scale is None else float(bias_scale)
            b2, var = misclassification_risk(
                centre, S2, S2 if spread_scale is None else spread_scale, var, M, beta=beta)
        cands.append((M, b2, var))
        if best is None or b2 + var < best[0]:
            best = (b2 + var, M, regime)
        if var > best[0] or (signs and var >= best[0]):  # (a flip-free grid: 0 ≥ 0)
            break
    name = "least predicted risk" + ("" if bias_scale is None else
                                     ", bias measured by a pilot")
    loss = "misclassification" if signs else "squared error"
    if best is None:
        return GridChoice(1.0, 1, 1, "single", name, loss=loss)
    _, M, regime = best
    row = next(c for c in cands if c[0] == M)
    return GridChoice(1.0 / M, M, next_pow2(M**d), regime, name, row[1], row[2],
                      tuple(cands), loss=loss)


def choose_grid(n: int, m: int, d: int, epsilon: float, *, beta: float = 1.0,
                c_l: float | None = None, task: str = "classify", mode: str = "default",
                method: str = "auto", label_bound: float = 1.0,
                rule: str = "risk", bias_scale: float | None = None,
                centre: float | None = None, spread_scale: float | None = None
                ) -> GridChoice:
    """The grid of a classify/regress query.

    ``rule="risk"`` (default): the number of cells per axis of least predicted risk,
    squared bias against variance (:func:`grid_risk`), from ``n, m, ε``, the dimension of
    the feature box and the method's own noise; the choice states both terms. A
    classifier given a pilot's ``centre`` (its mean label), ``bias_scale`` (the ``S²`` of
    :func:`sign_scale`) and ``spread_scale`` weighs its excess misclassification instead
    (:func:`misclassification_risk`): what a finer grid's noisy cells cost in flipped
    labels against the minority regions it can find.

    ``rule="rate"``: §9.4 / §10.4 with the circularity resolved as in [D17]. Compute the
    non-private side ``l_np = (nm/ln n)^{-1/(2β+d)}`` and its ``K_H^np``; if
    ``ε >= C^np ln n`` (``C = K_H`` for classify, ``2K_H`` for regress) use the low regime
    with ``l_np``. Otherwise ``l = c_l (mn(ε²∧ε))^{-1/(2(d+β))}`` (regression: ``mn(ε²∧ε)``
    divided by ``ln² n``), recompute ``K_H`` and take the regime from the grouping rule.
    ``c_l=None`` calibrates the constant the paper leaves open: ``c_l = c^{1/(d+β)}`` with
    ``c²`` from :func:`noise_constant`; ``c_l = 1`` is the spec's literal default. Two-stage
    only: ``M`` is then reduced until the smallest group's stage I has
    ``n_I ε_c² >= 200`` (as the SGD ``t0`` cap of [D13]). A given ``c_l`` implies this rule.
    """
    if task not in ("classify", "regress"):
        raise ValueError(f"task must be 'classify' or 'regress', got {task!r}")
    if beta <= 0 or (c_l is not None and c_l <= 0):
        raise ValueError("beta and c_l must be positive")
    if rule not in ("risk", "rate"):
        raise ValueError(f"rule must be 'risk' or 'rate', got {rule!r}")
    if rule == "risk" and c_l is None:
        return _risk_rule(n, m, d, epsilon, task, beta, method, mode, label_bound,
                          bias_scale, centre, spread_scale)
    return _rate_rule(n, m, d, epsilon, beta, c_l, task, mode, method)


def _rate_rule(n: int, m: int, d: int, epsilon: float, beta: float, c_l: float | None,
               task: str, mode: str, method: str) -> GridChoice:
    n_e, m_e, eps_e = effective_sizes(n, m, epsilon, method)
    ln_n = math.log(max(n_e, 2))
    per_bin = 1 if task == "classify" else 2
    l_np = (n_e * m_e / ln_n) ** (-1.0 / (2 * beta + d))
    M, K = _grid_for(l_np, d)
    if eps_e >= per_bin * K * ln_n:
        return GridChoice(l_np, M, K, "low", "rate")
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
    return GridChoice(side, M, K, regime, "rate")


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
    #: empirical-Bayes pull of the cells toward their common value (``models.shrinkage``)
    shrinkage: Shrinkage | None = None

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
            v = self.q[b]
        else:
            assert self.p is not None and self.label_bound is not None \
                and self.tau is not None
            T = self.label_bound
            v = np.clip(self.q[b] / np.maximum(self.p[b], self.tau), -T, T)
        return v if self.shrinkage is None else self.shrinkage.apply(v, b)

    def predict(self, X: np.ndarray) -> np.ndarray:
        v = self.decision(X)
        return np.where(v >= 0, 1.0, -1.0) if self.kind == "classify" else v

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "q": self.q.tolist(),
               "grid": {"M": self.M, "dim": self.dim, "lo": self.lo.tolist(),
                        "hi": self.hi.tolist(), "K_H": self.K}, **self.info}
        if self.shrinkage is not None:
            out["shrinkage"] = self.shrinkage.to_json()
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
                if k not in ("kind", "q", "grid", "p", "label_bound", "tau", "shrinkage")}
        try:
            shrink = None if d.get("shrinkage") is None else \
                Shrinkage.from_json(d["shrinkage"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"result shrinkage is malformed: {exc}") from None
        if shrink is not None and shrink.weights.size != M**dim:
            raise ValueError(f"shrinkage has {shrink.weights.size} weights, the grid "
                             f"{M**dim} cells")
        return cls(kind, M, dim, lo, hi, q, p,
                   None if d.get("label_bound") is None else float(d["label_bound"]),
                   None if d.get("tau") is None else float(d["tau"]), info, shrink)


def grid_extra(M: int, lo: np.ndarray, hi: np.ndarray) -> dict[str, Any]:
    return {"grid": int(M), "lo": [float(v) for v in lo], "hi": [float(v) for v in hi]}


def dense_cells(n_components: int) -> bool:
    """Whether a grid query of ``n_components`` outputs (and states the standard errors
    of) the cells ``q̂ = H Q̂ / K_H`` through the dense transform, rather than ``Q̂``
    itself (:data:`uldp.client.kinds.learning.DENSE_LIMIT`)."""
    return n_components <= DENSE_LIMIT


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
            "epsilon": spec.epsilon, "method": spec.method,
            "grid_choice": _stated_choice(spec, M)}
    se = np.asarray(est.get("std_error", np.full(theta.size, np.nan)), dtype=np.float64)
    if spec.kind == "classify":
        q = hadamard_inverse(theta)
        mdl = GridModel("classify", M, d, lo, hi, q, info={"Q": theta.tolist(), **info},
                        shrinkage=classify_shrinkage(q, se, M**d, dense_cells(theta.size)))
        return mdl.to_dict()
    K = theta.size // 2
    T = float(ex["label_bound"])
    tau = float(ex.get("density_floor", 0.5)) / (2 * M**d)
    q, p = hadamard_inverse(theta[:K]), hadamard_inverse(theta[K:])
    mdl = GridModel("regress", M, d, lo, hi, q, p, T, tau,
                    info={"Q": theta[:K].tolist(), "P": theta[K:].tolist(), **info},
                    shrinkage=regress_shrinkage(q, p, se[:K], se[K:], M**d, tau, T,
                                                      dense_cells(theta.size)))
    return mdl.to_dict()


def _stated_choice(spec: QuerySpec, M: int) -> dict[str, Any]:
    """The predicted bias–variance split of a query's grid, and whether it is the grid of
    least predicted risk (a service query names its grid; the in-process fits choose it)."""
    T = float(spec.extra.get("label_bound", 1.0))
    try:
        b2, var, _ = grid_risk(spec.users, spec.samples, spec.dim, spec.epsilon, M,
                               task=spec.kind, method=spec.method, mode=spec.mode,
                               label_bound=T)
        best = choose_grid(spec.users, spec.samples, spec.dim, spec.epsilon, task=spec.kind,
                           method=spec.method, mode=spec.mode, label_bound=T)
    except ValueError:
        return {"M": M, "rule": "given"}
    return {**GridChoice(1.0 / M, M, next_pow2(M**spec.dim), "", "given", b2, var).to_json(),
            "least_risk_M": best.M}
