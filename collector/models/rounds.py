"""The rounds of an SGD run — how many, how large, which kind — from the public parameters.

See ``docs/algorithms.md`` ("SGD": rounds by predicted risk, §8.2, §8.5). Three kinds of
rounds, each round a fresh group of users reporting once at ``θ_t``:

* **windowed** (user level): every user reports the mean of its ``m`` clipped per-record
  gradients, coordinate by coordinate, on a window sized from the earlier rounds
  (``uldp.collector.models.windows``);
* **record** (baseline B, Proposition 1.2): one random record's gradient per user, on the
  coordinate's support;
* **kashin**: the paper's Algorithm 3 — a MeanEst of the Kashin coefficients per step.

The predicted risk of ``T`` rounds is Theorem 8's decomposition with its constants made
explicit, ``E‖θ_T − θ*‖² ≈ R₀² a^{2T} + η² Σ_t a^{2(T−1−t)} V_t(n/T)``, ``a = 1 − ηγ̂``:
the contraction of the starting distance ``R₀`` against the noise ``V_t`` of each round over
``n/T`` users (round 0 on the support, each later one on windows sized from the round
before's predicted error, until they settle: :meth:`RoundDesign.transient`; rounds too small
for their windows to settle — :data:`SETTLE_MAX` — all on the support)
(:func:`uldp.collector.models.windows.round_variance`, the planner's ``predicted_mse`` for
Kashin steps, times :data:`NOISE_CALIBRATION`), summed through the contraction. ``γ̂`` and
``R₀`` are public *design* values (like the smoothness guess β of the grids, §9.4): the curvature
and the distance of a model whose features spread over their public box and whose linear
predictor varies by about :data:`DESIGN_SPREAD` across it. They decide the number of
rounds only; privacy never depends on them. ``auto`` takes the kind of rounds, and their
number, of least predicted risk; a windowed round's variance never exceeds a record
round's (its window is never wider than the support and a user's mean varies less than
one record), so ``auto`` never predicts one-record rounds to win unless ``m = 1``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from uldp.client.regimes import Grouping
from uldp.collector.models.sgd import SGDConfig, choose_steps, step_spec, steps_advisory
from uldp.collector.models.windows import (
    choose_grouping,
    coordinate_variances,
    record_support,
    round_variance,
    settle_ratio,
    steady_widths,
)
from uldp.collector.planner import QuerySpec, compile_query

__all__ = ["DESIGN_CURVATURE", "DESIGN_SPREAD", "LEARN_LITTLE", "MIN_GROUP_USERS",
           "NOISE_CALIBRATION", "SETTLE_MAX", "RoundDesign",
           "best_rounds", "design_curvature", "design_distance", "predicted_risk",
           "resolve_rounds", "round_design", "round_spec", "rounds_advisory", "sgd_advisories",
           "sgd_query",
           "supports_at"]

#: the share of the public curvature bound a model's loss has along its flattest
#: direction when the features spread uniformly over their box (design values)
DESIGN_CURVATURE = {"logistic": 0.15, "least_squares": 1.0, "ridge": 1.0}
#: the standard deviation of the linear predictor ``xᵀθ*`` of the design model (logistic:
#: probabilities from about 0.2 to 0.8; least squares: half the label range)
DESIGN_SPREAD = {"logistic": 1.0, "least_squares": 0.5, "ridge": 0.5}
#: the noise of a round relative to its steady-state prediction: the early rounds' windows
#: are wider (the gradient is still large). Measured on logistic regression, d = 10,
#: n = 10⁵, m = 100, ε = 1, 94 rounds: the median round's Σ se² was 1.6× the prediction
NOISE_CALIBRATION = 1.6
#: a round keeps at least this many users in every group of coordinates
MIN_GROUP_USERS = 20
#: the largest :func:`~uldp.collector.models.windows.settle_ratio` at which the windows of a
#: run of windowed rounds are predicted to settle; above it they are predicted to stay on the
#: support (each round's noise ``V₀``). Measured on the learning bench (n = 10⁵, m = 100):
#: linear regression at d = 10, ε = 1 with 82 rounds (ratio 0.83) never left the support —
#: its round noise grew from 0.035 to 0.09 while the planner predicted 0.005, R² −0.14 — and
#: with 40 rounds (ratio 0.58) the windows settled (round noise 0.13 → 0.05, R² 0.415);
#: logistic at d = 2, ε = 0.5 (ratio 0.56) settles
SETTLE_MAX = 0.6
#: the predicted risk of the chosen rounds, as a share of the design risk ``R₀²`` of ``θ₀``,
#: from which a run is announced as recovering little of the model (linear regression on
#: the learning bench, n = 10⁵, m = 100: 0.86 at d = 50, ε = 1 measured R² −0.03 against
#: 0.48 non-private; 0.08 at d = 10, ε = 1 measured 0.38)
LEARN_LITTLE = 0.8


def supports_at(config: SGDConfig, theta: np.ndarray) -> np.ndarray:
    """The per-coordinate support of one record's gradient at ``θ`` (``(p, 2)``)."""
    d = int(np.size(theta))
    return record_support(config.model, np.asarray(theta, dtype=np.float64), config.clip,
                          config.l2, config.features(d), config.label_bound)


def design_curvature(config: SGDConfig, d: int) -> float:
    """``γ̂``: the configured strong convexity, else the design curvature (module
    docstring): ``c_model · min_j b_j²/3 + λ`` (quadratic loss: 1)."""
    if config.strong_convexity is not None:
        return float(config.strong_convexity)
    c = DESIGN_CURVATURE.get(config.model)
    if c is None:
        return config.constants[1]
    b = config.features(d)
    return c * float(np.min(b * b)) / 3.0 + config.l2


def design_distance(config: SGDConfig, d: int) -> float:
    """``R₀ = ‖θ₀ − θ*‖`` of the design model: ``√3·s/b_rms`` for a predictor of standard
    deviation ``s`` over features uniform in ``[−b_j, b_j]`` (quadratic loss: ``‖b‖/2``);
    ``radius`` when the analyst gave one."""
    b = config.features(d)
    if config.radius is not None:
        return float(config.radius)
    s = DESIGN_SPREAD.get(config.model)
    if s is None:
        return float(np.linalg.norm(b)) / 2
    return math.sqrt(3.0) * s / float(np.sqrt(np.mean(b * b)))


def predicted_risk(config: SGDConfig, d: int, T: int, V: float,
                   V0: float | None = None, transient: list[float] | None = None) -> float:
    """``R₀² a^{2T} + η² Σ_t a^{2(T−1−t)} V_t`` (module docstring): ``V_t`` the noise of
    round ``t`` — ``transient`` for the first rounds (round 0 on the support, each later
    window sized from the round before, :meth:`RoundDesign.transient`), else ``V₀`` for
    round 0 (default ``V``) — and ``V`` (the steady state) for the rest, each round's noise
    contracted by the rounds after it."""
    eta = config.step_size
    a = min(max(1.0 - eta * design_curvature(config, d), 0.0), 1.0 - 1e-12)
    R0 = design_distance(config, d)
    first = list(transient) if transient is not None else [V if V0 is None else V0]
    first = first[:T]
    k = len(first)
    total = sum(NOISE_CALIBRATION * v * a ** (2 * (T - 1 - t)) for t, v in enumerate(first))
    if k < T:  # the steady rounds k..T−1
        total += NOISE_CALIBRATION * V * (1 - a ** (2 * (T - k))) / (1 - a * a)
    return R0 * R0 * a ** (2 * T) + eta * eta * total


class RoundDesign:
    """The grouping and predicted noise of one per-coordinate round of ``n_t`` users."""

    def __init__(self, config: SGDConfig, n_t: int, m: int, d: int, record: bool) -> None:
        theta0 = np.zeros(d) if config.theta0 is None else np.asarray(config.theta0, float)
        support = supports_at(config, theta0)
        h = (support[:, 1] - support[:, 0]) / 2
        step = config.step_bounds(d)
        self.stat_var = h * h / (1 if record else max(m, 1))
        self.widths = steady_widths(support, m, record)
        for _ in range(3):  # the widths depend on the errors they cause: a fixed point
            self.grouping: Grouping = choose_grouping(d, config.epsilon, n_t, self.widths,
                                                      self.stat_var)
            v = coordinate_variances(self.grouping, n_t, self.widths, self.stat_var)
            self.widths = steady_widths(support, m, record, v, step)
        self.variance = round_variance(self.grouping, n_t, self.widths, self.stat_var)
        #: round 0 reports on the support (nothing seen yet)
        self.variance0 = round_variance(self.grouping, n_t, support[:, 1] - support[:, 0],
                                        self.stat_var)
        self._support, self._m, self._record, self._step = support, m, record, step
        self._n_t, self._config, self._theta0, self._d = n_t, config, theta0, d
        #: the windows' contraction factor from the support (``settle_ratio``)
        self.settle = 1.0 if record else settle_ratio(self.grouping, n_t, support,
                                                      self.stat_var, step)

    def transient(self, T: int) -> list[float]:
        """The predicted noise ``V_t`` of rounds ``0, 1, …`` until the windows settle (at
        most ``T``): round 0 on the support, round ``t + 1``'s windows from round ``t``'s
        predicted errors (:func:`steady_widths` at them). When a round's users are few
        against ``d`` (``n_t ε² ≲ d·m``), round 0's error dominates round 1's windows and
        the steady prediction alone was far too optimistic about few rounds. When the
        windows cannot settle (:attr:`settle` above :data:`SETTLE_MAX`: a round's noise
        gives back most of its window), every round is predicted on the support — the
        support at a ``θ`` carrying the noise of the rounds before (:meth:`unsettled`)."""
        full = self._support[:, 1] - self._support[:, 0]
        if self._record or self.settle > SETTLE_MAX:
            return self.unsettled(T)
        widths, out = full, []
        for _ in range(max(int(T), 1)):
            v = coordinate_variances(self.grouping, self._n_t, widths, self.stat_var)
            out.append(float(v.sum()))
            nxt = steady_widths(self._support, self._m, False, v, self._step)
            if np.allclose(nxt, widths, rtol=1e-3, atol=0.0):
                break
            widths = nxt
        return out


    def unsettled(self, T: int) -> list[float]:
        """``V_t`` of rounds on the support when the windows cannot settle: the noise each
        round leaves in ``θ`` (``η² V_t``, contracted by ``a = 1 − ηγ̂`` per later round)
        moves ``θ`` away from ``θ₀`` by about ``√(2/π)·√(E‖e‖²/p)`` per coordinate (the
        mean of a normal's absolute value), and the support at that ``θ`` is where the
        next round reports — for least squares ``(‖θ‖₁·b + L)·b`` grows with the noise,
        which feeds the next round's: the loop that took linear regression at d = 50,
        n = 10⁵, m = 100, ε = 1 to R² −64 with 63 rounds. Models whose support does not
        move with ``θ`` (logistic without ``l2``) get ``V₀`` every round. One-record rounds
        (baseline B) always report on the support: the same prediction."""
        cfg, p = self._config, self._d
        eta = cfg.step_size
        a = min(max(1.0 - eta * design_curvature(cfg, p), 0.0), 1.0)
        if np.array_equal(supports_at(cfg, self._theta0 + 1.0), self._support):
            return [self.variance0] * max(int(T), 1)  # the support does not move with θ
        # V depends on the round only through the noise's scale e: tabulate it once
        grid = np.concatenate([[0.0], np.geomspace(1e-4, 1e3, 57)])
        table = np.empty(grid.size)
        for i, e in enumerate(grid):
            sup = supports_at(cfg, self._theta0 + e)
            h = (sup[:, 1] - sup[:, 0]) / 2
            table[i] = round_variance(self.grouping, self._n_t, 2 * h,
                                      h * h / (1 if self._record else max(self._m, 1)))
        acc, out = 0.0, []
        for _ in range(max(int(T), 1)):
            e = math.sqrt(2 / math.pi) * math.sqrt(acc / p)
            v = float(np.interp(e, grid, table))
            out.append(v)
            acc = a * a * acc + eta * eta * NOISE_CALIBRATION * v
        return out


def round_design(config: SGDConfig, n_t: int, m: int, d: int, record: bool) -> RoundDesign:
    return RoundDesign(config, n_t, m, d, record)


def _max_rounds(n: int, d: int) -> int:
    return max(1, n // (2 * MIN_GROUP_USERS))


def best_rounds(config: SGDConfig, n: int, m: int, d: int, record: bool
                ) -> tuple[int, float]:
    """The number of per-coordinate rounds of least predicted risk (``config.t0`` when
    given) and that risk."""
    def risk(T: int) -> float:
        rd = round_design(config, n // T, m, d, record)
        if n // T // len(rd.grouping.groups) < MIN_GROUP_USERS and T > 1:
            return math.inf
        return predicted_risk(config, d, T, rd.variance, rd.variance0, rd.transient(T))

    if config.t0 is not None:
        return int(config.t0), risk(int(config.t0))
    best = (1, risk(1))
    T = 1
    while _max_rounds(n, d) > T:
        T = max(T + 1, int(T * 1.15))
        r = risk(T)
        if r < best[1]:
            best = (T, r)
    return best


def kashin_risk(config: SGDConfig, n: int, m: int, d: int) -> tuple[int, float]:
    """Kashin steps (§8.3 as stated): the [D13] number of steps and their predicted risk
    with the planner's predicted error of one step's MeanEst (users alike)."""
    cfg = replace(config, method="auto" if config.method in ("auto", "windowed",
                                                             "baseline-b") else config.method)
    T = choose_steps(n, m, d, cfg)
    try:
        plan = compile_query(step_spec(cfg, np.zeros(d), max(n // T, 2), m, d, 0))
    except ValueError:
        return T, math.inf
    D2 = np.square(plan.kind.component_bounds(plan.template))
    return T, predicted_risk(cfg, d, T, plan.predicted_mse(D2))


def resolve_rounds(config: SGDConfig, n: int, m: int, d: int
                   ) -> tuple[SGDConfig, dict[str, Any]]:
    """The configuration ``auto`` runs — the kind of rounds and their number of least
    predicted risk — and the record of the choice (stored with the query)."""
    cands: dict[str, tuple[int, float]] = {}
    if config.method in ("auto", "windowed"):
        cands["windowed"] = best_rounds(replace(config, method="windowed"), n, m, d, False)
    if config.method in ("auto", "baseline-b"):
        cands["baseline-b"] = best_rounds(replace(config, method="baseline-b"), n, m, d, True)
    if config.rounds_kind == "auto":
        cands["kashin"] = kashin_risk(config, n, m, d)
    if not cands:  # a MeanEst method: Kashin steps as configured
        return replace(config, t0=choose_steps(n, m, d, config)), {}
    chosen = min(cands, key=lambda k: cands[k][1])
    T = cands[chosen][0]
    method = "auto" if chosen == "kashin" else chosen
    record = {"chosen": chosen, "rounds": T,
              "risk_at_theta0": design_distance(config, d) ** 2,
              "predicted_risk": {k: v[1] for k, v in cands.items()},
              "predicted_rounds": {k: v[0] for k, v in cands.items()}}
    return replace(config, method=method, t0=T,
                   frame_kind=config.frame_kind if chosen == "kashin" else "identity"), record


def rounds_advisory(record: dict[str, Any]) -> str | None:
    """A note for the analyst when the chosen rounds are predicted to recover little of the
    model (predicted risk at least :data:`LEARN_LITTLE` of the design risk at ``θ₀``): the
    noise of what n users can say at this ε in this many dimensions is about as large as the
    model itself (docs/algorithms.md "SGD": where linear regression stops). None otherwise,
    and for records without the design risk (stored before it, or Kashin-only methods)."""
    if not record or "risk_at_theta0" not in record:
        return None
    r0, risk = float(record["risk_at_theta0"]), float(record["predicted_risk"][record["chosen"]])
    if not (r0 > 0 and math.isfinite(risk)) or risk < LEARN_LITTLE * r0:
        return None
    return (f"the {record['rounds']} {record['chosen']} rounds are predicted to recover little "
            f"of the model (predicted risk {risk:.3g} against {r0:.3g} at theta0, design "
            f"values): expect about the constant predictor's quality; more users, a larger "
            f"epsilon or fewer features help")


def sgd_advisories(spec: QuerySpec) -> list[str]:
    """The notes a stored SGD query carries for whoever reads its plan or its result — the
    same on every path (the scikit-style estimators warn them, the service's result and
    preview list them): per-coordinate rounds, :func:`rounds_advisory` of the rounds record;
    Kashin steps, :func:`steps_advisory` of their groups."""
    cfg = SGDConfig(**spec.extra["sgd"])
    note = (rounds_advisory(spec.extra.get("rounds") or {}) if cfg.per_coordinate
            else steps_advisory(spec.users, spec.dim, cfg, int(cfg.t0 or 1)))
    return [note] if note else []


def round_spec(config: SGDConfig, theta: np.ndarray, n_t: int, m_ref: int, d: int,
               t: int) -> QuerySpec:
    """The MeanEst spec of a per-coordinate round: kind ``sgd`` with the identity frame,
    every user reporting its mean gradient (``ssl``) or one record's (``baseline-b``)."""
    method = {"record": "baseline-b"}.get(config.rounds_kind, "ssl")
    spec = step_spec(replace(config, method=method, frame_kind="identity"), theta, n_t,
                     m_ref, d, t)
    return spec


def sgd_query(config: SGDConfig, users: int, samples: int, dim: int,
              query_id: str = "sgd") -> QuerySpec:
    """The stored query of an SGD run: the kind of rounds and their number are fixed *at
    creation*, from public values (:func:`resolve_rounds`, [D13]), and recorded in
    ``extra["rounds"]``."""
    resolved, record = resolve_rounds(config, users, samples, dim)
    cfg = asdict(resolved)
    cfg["query_id"] = query_id
    cfg["theta0"] = None if cfg["theta0"] is None else [float(v) for v in cfg["theta0"]]
    if cfg["feature_bound"] is not None:
        cfg["feature_bound"] = np.asarray(cfg["feature_bound"], float).reshape(-1).tolist()
    method = {"windowed": "ssl"}.get(resolved.method, resolved.method)
    return QuerySpec(kind="sgd", epsilon=config.epsilon, users=users, samples=samples,
                     dim=dim, bound=config.clip, method=method, seed=config.seed,
                     frame_kind="identity" if resolved.per_coordinate else "gaussian",
                     query_id=query_id,
                     extra={"sgd": cfg, "model": config.model, "rounds": record,
                            "theta": [0.0] * dim if config.theta0 is None else
                            cfg["theta0"]})
