"""In-process fits of the learning queries over users' local datasets (Algorithms 3–5).

See ``docs/algorithms.md`` ("Learning"). Sections of ``docs/algorithms.md``: §8.3 (SGD), §9.3
(classification), §10.3 (regression, [D19], erratum 8). Each fit builds the query the
collector would run, and runs its program (``uldp.collector.programs``) with the one
simulation driver over a :class:`~uldp.collector.learning.runner.UserSource`: the
production tasks, device function, accumulators and closing rules, in one process.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from uldp.client.hadamard import next_pow2
from uldp.client.randomness import RandomSource
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.learning.runner import (
    UserSource,
    as_source,
    run_source,
    source_privatizer,
)
from uldp.collector.models.grid import (
    GridChoice,
    GridModel,
    choose_grid,
    components_of,
    dense_cells,
    design_bias_scale,
    feature_box,
    grid_extra,
    grid_risk,
    hadamard_inverse,
    measured_bias_scale,
    pilot_grid,
    pilot_users,
    sign_scale,
)
from uldp.collector.models.rounds import sgd_advisories, sgd_query
from uldp.collector.models.sgd import SGDConfig, SGDResult
from uldp.collector.models.shrinkage import (
    cell_noise,
    classify_shrinkage,
    grid_signal,
    regress_shrinkage,
)
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import MeanEstProgram
from uldp.collector.programs.driver import run_program
from uldp.collector.progress import Progress

__all__ = ["run_classify", "run_grid_query", "run_regress", "run_sgd"]


def _m_ref(source: UserSource, m_ref: int | None) -> int:
    return int(m_ref or getattr(source, "samples", 0) or
               np.median(getattr(source, "sizes", [1])))


def run_sgd(config: SGDConfig, users: Any, labels: Any = None, *,
            rng: RandomSource, m_ref: int | None = None,
            progress: bool | None = None) -> SGDResult:
    """Algorithm 3 over the users of ``users`` (see :func:`runner.as_source`)."""
    source = as_source(users, labels)
    n, d = source.n_users, source.dim
    if config.theta0 is not None and np.shape(config.theta0) != (d,):
        raise ValueError(f"theta0 must have {d} entries, got shape {np.shape(config.theta0)}")
    spec = sgd_query(config, n, _m_ref(source, m_ref), d, query_id=config.query_id)
    for note in sgd_advisories(spec):  # the scikit-style estimators' way to tell the user
        warnings.warn(note, UserWarning, stacklevel=2)
    bar = Progress(n, f"sgd {config.model}", progress)
    res = run_source(spec, source, None, rng, bar)
    cfg = SGDConfig(**res["config"])
    extra: dict[str, Any] = {k: res[k] for k in ("method", "rounds", "accounting",
                                                  "std_error") if k in res}
    return SGDResult(np.asarray(res["theta"]), res["trajectory"], int(res["t0"]),
                     float(res["eta"]), cfg, n, spec.samples, d, extra)


def run_grid_query(kind: str, source: UserSource, *, epsilon: float, lo: np.ndarray,
                   hi: np.ndarray, M: int | None, beta: float, method: str, seed: int,
                   rng: RandomSource, m_ref: int | None, extra: dict[str, Any],
                   progress: bool | None, query_id: str, pilot: bool = True,
                   density_floor: float = 0.5) -> tuple[GridChoice, Estimate, int, int]:
    """Shared driver of Algorithms 4 and 5: choose the grid, run one MeanEst query.

    ``M=None`` with ``pilot``: a pilot phase first — a share of the users (a public
    random split, :func:`~uldp.collector.models.grid.pilot_users`) runs the query on a
    coarse grid; the signal its cells show beyond their noise sizes the bias term of the
    main phase's grid choice, which the other users run. Each user reports once, at
    ``ε``, in one of the two phases (disjoint users: the query's ε is ``ε``). The returned
    user count is the main phase's."""
    n, d = source.n_users, source.dim
    m = _m_ref(source, m_ref)
    T = float(extra.get("label_bound", 1.0))
    members = np.arange(n)
    pilot_info: dict[str, Any] | None = None
    bias_scale: float | None = None
    centre: float | None = None
    spread_scale: float | None = None
    if M is None and pilot:
        n_p = pilot_users(n, m, d, epsilon, task=kind, method=method, label_bound=T,
                          beta=beta)
        if n_p >= 2 and n - n_p >= 2:
            perm = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x511075]).permutation(n)
            M0 = pilot_grid(d)
            est0, _ = _grid_query(kind, source, np.sort(perm[:n_p]), epsilon, lo, hi, M0,
                                  method, seed, rng, m, extra, progress, query_id + "/pilot")
            s2, s2_se = _signal(kind, est0, M0 ** d, T, density_floor)
            bias_scale = measured_bias_scale(s2, s2_se, M0, d, task=kind, label_bound=T,
                                             beta=beta)
            members = np.sort(perm[n_p:])
            pilot_info = {"users": int(n_p), "M": M0, "signal": s2, "signal_se": s2_se,
                          "bias_scale": bias_scale,
                          "design_bias_scale": design_bias_scale(d, kind, T)}
            if kind == "classify":  # the risk of a classifier is its flipped labels
                centre, mass, bias_scale = _signs(est0, M0 ** d, M0, d, beta)
                spread_scale = s2 / (1.0 - M0 ** (-2 * beta))
                pilot_info.update({"centre": centre, "cross_mass": mass,
                                   "bias_scale": bias_scale, "spread_scale": spread_scale})
    n_main = int(members.size)
    if M is None:
        choice = choose_grid(n_main, m, d, epsilon, beta=beta, task=kind, method=method,
                             label_bound=T, bias_scale=bias_scale, centre=centre,
                             spread_scale=spread_scale)
        choice = replace(choice, pilot=pilot_info)
    else:
        if not isinstance(M, (int, np.integer)) or M < 1:
            raise ValueError(f"M (cells per axis) must be a positive integer, got {M!r}")
        b2, var, _ = grid_risk(n, m, d, epsilon, int(M), task=kind, beta=beta,
                               method=method, label_bound=T)
        choice = GridChoice(1.0 / M, int(M), next_pow2(int(M) ** d), "given", "given",
                            b2, var)
    est, regime = _grid_query(kind, source, members, epsilon, lo, hi, choice.M, method,
                              seed, rng, m, extra, progress, query_id)
    return replace(choice, regime=regime), est, n_main, m


def _grid_query(kind: str, source: UserSource, members: np.ndarray, epsilon: float,
                lo: np.ndarray, hi: np.ndarray, M: int, method: str, seed: int,
                rng: RandomSource, m: int, extra: dict[str, Any], progress: bool | None,
                query_id: str) -> tuple[Estimate, str]:
    """One classify/regress MeanEst query on ``M`` cells per axis over ``members``."""
    ex = grid_extra(M, lo, hi)
    ex.update(extra)
    spec = QuerySpec(kind=kind, epsilon=epsilon, users=int(members.size), samples=m,
                     dim=source.dim, bound=1.0, method=method, seed=seed,
                     query_id=query_id, extra=ex)
    plan = compile_query(spec)
    for note in plan.advisories:  # the scikit-style estimators' way to tell the user
        warnings.warn(note, UserWarning, stacklevel=4)
    bar = Progress(int(members.size), f"{kind}", progress)
    program = MeanEstProgram(spec)  # the estimate itself (θ̂), not the kind's model
    result = run_program(program, source_privatizer(source, members, rng, bar))
    return Estimate.from_dict(result), plan.grouping.regime


def _signs(est: Estimate, B: int, M0: int, d: int, beta: float
           ) -> tuple[float, float, float]:
    """A classify pilot's centre, cross-zero mass and sign scale (:func:`sign_scale`)."""
    theta = components_of(est)
    q = hadamard_inverse(theta)
    v = cell_noise(np.asarray(est.std_error, dtype=np.float64), q.size,
                   dense_cells(theta.size))[:B]
    return sign_scale(B * q[:B], B * np.sqrt(v), M0, d, beta=beta)


def _signal(kind: str, est: Estimate, B: int, T: float, density_floor: float
            ) -> tuple[float, float]:
    """The pilot's measured between-cell signal ``(s², se)`` (``models.shrinkage``)."""
    theta = components_of(est)
    se = np.asarray(est.std_error, dtype=np.float64)
    if kind == "classify":
        return grid_signal(kind, hadamard_inverse(theta), se, B, dense_cells(theta.size))
    K = theta.size // 2
    return grid_signal(kind, hadamard_inverse(theta[:K]), se[:K], B,
                       dense_cells(theta.size), p=hadamard_inverse(theta[K:]), se_p=se[K:],
                       tau=density_floor / (2 * B), label_bound=T)


def run_classify(users: Any, labels: Any = None, *, epsilon: float, rng: RandomSource,
                 lo: Any = None, hi: Any = None, M: int | None = None, beta: float = 1.0,
                 method: str = "auto", seed: int = 0, m_ref: int | None = None,
                 progress: bool | None = None, query_id: str = "classify",
                 shrink: bool = True, pilot: bool = True) -> GridModel:
    """Algorithm 4 over ``users`` (arrays or list of ``(X_i, y_i)``, labels ±1 or 0/1);
    ``shrink``: the cells pulled toward their common value (``models.shrinkage``);
    ``pilot`` (``M=None``): a pilot phase of some users measures the signal that sizes
    the grid (:func:`run_grid_query`; ``False``: the design guess alone)."""
    source = as_source(users, labels)
    lo_a, hi_a = feature_box(source.dim, lo, hi)
    choice, est, n, m = run_grid_query(
        "classify", source, epsilon=epsilon, lo=lo_a, hi=hi_a, M=M, beta=beta,
        method=method, seed=seed, rng=rng, m_ref=m_ref, extra={}, progress=progress,
        query_id=query_id, pilot=pilot)
    Q = components_of(est)
    info = {"Q": Q.tolist(), "regime": choice.regime, "side": choice.side, "users": n,
            "samples": m, "epsilon": epsilon, "method": method,
            "grid_choice": choice.to_json()}
    q = hadamard_inverse(Q)
    se = np.asarray(est.std_error, dtype=np.float64)
    return GridModel("classify", choice.M, source.dim, lo_a, hi_a, q, info=info,
                     shrinkage=classify_shrinkage(q, se, choice.M ** source.dim,
                                                  dense_cells(q.size))
                     if shrink else None)


def run_regress(users: Any, labels: Any = None, *, epsilon: float, label_bound: float,
                rng: RandomSource, lo: Any = None, hi: Any = None, M: int | None = None,
                beta: float = 1.0, density_floor: float = 0.5, fix_p1: bool = False,
                method: str = "auto", seed: int = 0, m_ref: int | None = None,
                progress: bool | None = None, query_id: str = "regress",
                shrink: bool = True, pilot: bool = True) -> GridModel:
    """Algorithm 5 over ``users``; ``label_bound`` is ``T_y`` (labels clamped on device).

    Components ``Q_k`` (bound ``T_y``) and ``P_k`` (bound 1); ``q̂ = H Q̂/K_H``,
    ``p̂ = H P̂/K_H`` (erratum 8); predictor ``η̂(x) = clamp(q̂_k / max(p̂_k, τ), ±T_y)``
    with ``τ = f_L/(2B)`` ([D19]). ``fix_p1`` sets ``P̂_1 = 1`` (known: Σ p_l = 1;
    optional, privacy-neutral, §10.3). ``shrink``: the cells pulled toward the overall
    mean (``models.shrinkage``, §9.6). ``pilot``: as :func:`run_classify`.
    """
    if not isinstance(label_bound, (int, float)) or not math.isfinite(label_bound) \
            or label_bound <= 0:
        raise ValueError(f"label_bound must be a finite positive number, got {label_bound!r}")
    if not math.isfinite(density_floor) or density_floor <= 0:
        raise ValueError(f"density_floor must be positive, got {density_floor!r}")
    source = as_source(users, labels)
    lo_a, hi_a = feature_box(source.dim, lo, hi)
    choice, est, n, m = run_grid_query(
        "regress", source, epsilon=epsilon, lo=lo_a, hi=hi_a, M=M, beta=beta,
        method=method, seed=seed, rng=rng, m_ref=m_ref,
        extra={"label_bound": float(label_bound)}, progress=progress, query_id=query_id,
        pilot=pilot, density_floor=density_floor)
    theta = components_of(est)
    K = theta.size // 2
    Q, P = theta[:K].copy(), theta[K:].copy()
    if fix_p1:
        P[0] = 1.0
    tau = density_floor / (2 * choice.M ** source.dim)
    info = {"Q": Q.tolist(), "P": P.tolist(), "regime": choice.regime, "side": choice.side,
            "users": n, "samples": m, "epsilon": epsilon, "method": method,
            "density_floor": density_floor, "grid_choice": choice.to_json()}
    q, p = hadamard_inverse(Q), hadamard_inverse(P)
    se = np.asarray(est.std_error, dtype=np.float64)
    shrinkage = regress_shrinkage(q, p, se[:K], se[K:], choice.M ** source.dim, tau,
                                  float(label_bound), dense_cells(2 * K)) if shrink else None
    return GridModel("regress", choice.M, source.dim, lo_a, hi_a, q, p, float(label_bound),
                     tau, info, shrinkage)
