"""Algorithm 3: private SGD with one fresh group of users per step.

Sections of ``docs/algorithms.md``: §8.2 (parameters), §8.3 (protocol), §8.4 (privacy), §8.5
(Theorem 8), [D13] (``t0`` default and cap), [D14] (ℓ2/Kashin gradient mean, per-sample
clipping to norm ``D``, ``η = 1/G``, optional projection), §15 erratum 3.

The configuration and the math of the steps; the phases are run by
``uldp.collector.programs.sgd.SGDProgram`` (in simulation and in the service alike). The
collector draws a balanced random partition of the ``n`` users into ``t0`` groups from the
public seed (INV-3). Step ``t`` compiles a ``QuerySpec`` of kind ``sgd`` over group
``S_t`` with ``θ_t`` in ``extra`` (:func:`step_spec`), runs that MeanEst invocation, gets
``g_t = Uᵀ θ̂`` and updates ``θ_{t+1} = Π(θ_t − η g_t)``. Every user reports once, inside
one ε-LDP invocation; θ_t is post-processing of earlier groups (§8.4).

Defaults: ``η = 1/G``; ``t0 = ⌈ln(nm)/(ηγ)⌉`` reduced until every step's smallest stage-I
group has ``n_I ε_c² >= 200`` (the planner's warning threshold); a warning is issued when
even ``t0 = 1`` is too small. ``G``/``γ`` come from :data:`MODEL_CONSTANTS` unless given
(for features with ``‖x‖₂ <= 1``, which the estimators guarantee by public rescaling).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from uldp.client.kinds.learning import GRADIENTS
from uldp.client.regimes import group_components
from uldp.collector.methods import METHOD_PLANS
from uldp.collector.planner import QuerySpec

__all__ = [
    "MODEL_CONSTANTS",
    "SGDConfig",
    "SGDResult",
    "choose_steps",
    "model_constants",
    "partition",
    "step_spec",
    "steps_advisory",
    "theorem8_bound",
    "theta_std_error",
]

STAGE1_MIN = 200.0  # n_I·ε_c² below which stage I is unreliable (planner warning, §4.5)
#: the methods of the per-coordinate rounds, besides the MeanEst methods of Kashin steps
ROUND_METHODS = ("auto", "windowed", "baseline-b")
#: what an SGD query's method runs: ``auto`` (resolved at creation), per-coordinate rounds
#: of the users' means (``windowed``) or of one record each (``record``); every other
#: method runs Kashin steps
ROUND_KINDS = {"auto": "auto", "windowed": "windowed", "baseline-b": "record"}

#: (smoothness G, strong convexity γ) of the built-in losses for ‖x‖₂ <= 1; ``λ`` = l2.
#: γ of a data-dependent loss is unknown publicly: the default takes ``ηγ = 1``, i.e.
#: ``t0 = ⌈ln(nm)⌉`` — the ``t0 ≍ ln n`` of Theorem 8. (With a guessed small γ, e.g. λ,
#: ``t0`` explodes and each step gets too few users: measured on logistic regression,
#: d=1, n=3·10⁴, m=100, ε=4: accuracy 0.56–0.69 with t0=75 vs 0.71–0.72 with t0=15,
#: Bayes 0.719.) Pass ``strong_convexity`` to use a known γ.
MODEL_CONSTANTS: dict[str, Any] = {
    "quadratic": lambda lam: (1.0, 1.0),
    "least_squares": lambda lam: (1.0 + lam, 1.0 + lam),
    "ridge": lambda lam: (1.0 + lam, 1.0 + lam),
    "logistic": lambda lam: (0.25 + lam, 0.25 + lam),
}


def model_constants(model: str, l2: float = 0.0) -> tuple[float, float]:
    """Default ``(G, γ)`` (see :data:`MODEL_CONSTANTS`; custom models: ``(1, 1)``)."""
    fn = MODEL_CONSTANTS.get(model)
    return fn(l2) if fn is not None else (1.0, 1.0)


@dataclass
class SGDConfig:
    """Public parameters of an SGD query (all overridable; see module docstring)."""

    model: str
    epsilon: float
    clip: float = 1.0  # D: per-sample gradient norm bound
    t0: int | None = None
    eta: float | None = None
    smoothness: float | None = None  # G
    strong_convexity: float | None = None  # γ
    theta0: Sequence[float] | None = None
    radius: float | None = None  # projection onto {‖θ‖₂ <= radius}
    l2: float = 0.0
    #: ``auto`` (the rounds of least predicted risk), ``windowed`` (user-level rounds on
    #: per-coordinate windows), ``baseline-b`` (one-record rounds), or a MeanEst method
    #: for Kashin steps (``two-stage``, ``ssl``, …: §8.3 as the paper states it)
    method: str = "auto"
    frame_kind: str = "auto"  # [D9]: Gaussian frame, random partial Hadamard for large d
    #: the largest ``|x_j|`` of a feature after the public scaling (one number or one per
    #: feature; None: 1, the ``‖x‖₂ ≤ 1`` convention) and of a label: public design values
    #: the windows and supports of the per-coordinate rounds are sized from
    feature_bound: float | Sequence[float] | None = None
    label_bound: float = 1.0
    mode: str = "default"
    seed: int = 0
    query_id: str = "sgd"
    average: bool = False  # output the mean of θ_{⌈t0/2⌉..t0} (Polyak tail average)
    extra: dict[str, Any] = field(default_factory=dict)  # more public values for custom models

    def __post_init__(self) -> None:
        if self.model not in GRADIENTS:
            raise ValueError(f"model must be one of {sorted(GRADIENTS)} (or register_gradient "
                             f"it), got {self.model!r}")
        for name in ("epsilon", "clip"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite positive number, got {v!r}")
        for name in ("eta", "smoothness", "strong_convexity", "radius"):
            v = getattr(self, name)
            if v is not None and (not math.isfinite(v) or v <= 0):
                raise ValueError(f"{name} must be a finite positive number, got {v!r}")
        if self.frame_kind not in ("auto", "gaussian", "hadamard", "identity"):
            raise ValueError(f"frame_kind must be auto, gaussian, hadamard or identity, got "
                             f"{self.frame_kind!r}")
        if self.t0 is not None and (not isinstance(self.t0, int) or self.t0 < 1):
            raise ValueError(f"t0 must be a positive integer, got {self.t0!r}")
        if not math.isfinite(self.l2) or self.l2 < 0:
            raise ValueError(f"l2 must be a finite non-negative number, got {self.l2!r}")
        if not isinstance(self.label_bound, (int, float)) or isinstance(self.label_bound, bool) \
                or not math.isfinite(self.label_bound) or self.label_bound <= 0:
            raise ValueError(f"label_bound must be a finite positive number, got "
                             f"{self.label_bound!r}")
        if self.feature_bound is not None:
            fb = np.asarray(self.feature_bound, dtype=np.float64).reshape(-1)
            if fb.size == 0 or not np.isfinite(fb).all() or np.any(fb <= 0):
                raise ValueError(f"feature_bound must be finite positive numbers, got "
                                 f"{self.feature_bound!r}")
        if self.method not in ROUND_METHODS and self.method not in METHOD_PLANS:
            raise ValueError(f"method must be one of {[*ROUND_METHODS, *METHOD_PLANS]}, "
                             f"got {self.method!r}")

    def features(self, d: int) -> np.ndarray:
        """``b_j``: the public bound of every feature (``d`` entries)."""
        if self.feature_bound is None:
            return np.ones(d)
        fb = np.asarray(self.feature_bound, dtype=np.float64).reshape(-1)
        if fb.size == 1:
            return np.full(d, float(fb[0]))
        if fb.size != d:
            raise ValueError(f"feature_bound has {fb.size} entries, the model has {d}")
        return fb

    def curvature_bounds(self, d: int) -> tuple[float, float]:
        """Public bounds ``[γ, G]`` on the eigenvalues of the loss's Hessian for features
        within ``±b_j``: quadratic ``[1, 1]`` (exact); least squares ``[λ, Σ b_j² + λ]``;
        logistic ``[λ, Σ b_j²/4 + λ]``; a configured smoothness or strong convexity replaces
        its end; custom models ``[0, G]``. The windows of the per-coordinate rounds use
        them (``uldp.collector.models.windows.next_window``)."""
        b2 = float(np.sum(self.features(d) ** 2))
        lo, hi = {"quadratic": (1.0, 1.0), "least_squares": (self.l2, b2 + self.l2),
                  "ridge": (self.l2, b2 + self.l2),
                  "logistic": (self.l2, b2 / 4 + self.l2)}.get(
            self.model, (0.0, self.constants[0]))
        return (self.strong_convexity or lo, self.smoothness or hi)

    def coordinate_shares(self, d: int) -> np.ndarray | None:
        """``2 b_j/‖b‖`` per coordinate for a GLM whose curvature bounds are its own
        (least squares, ridge, logistic: ``H = λI + E[s zzᵀ]``, ``|z_j| ≤ b_j``), the share
        of the gradient's norm a coordinate of the windows' drift can carry
        (:func:`~uldp.collector.models.windows.next_window`); None otherwise."""
        if self.model not in ("least_squares", "ridge", "logistic") \
                or self.smoothness is not None or self.strong_convexity is not None:
            return None
        b = np.abs(self.features(d))
        nb = float(np.linalg.norm(b))
        return 2 * b / nb if nb > 0 else None

    def step_bounds(self, d: int) -> tuple[float, float]:
        """``(ηγ, ηG)`` of :meth:`curvature_bounds`."""
        lo, hi = self.curvature_bounds(d)
        return self.step_size * lo, self.step_size * hi

    @property
    def rounds_kind(self) -> str:
        """What the method runs (:data:`ROUND_KINDS`; every MeanEst method: Kashin steps)."""
        return ROUND_KINDS.get(self.method, "kashin")

    @property
    def per_coordinate(self) -> bool:
        """Whether the rounds report gradient coordinates (windowed or one-record rounds)
        rather than run a Kashin MeanEst per step."""
        return self.rounds_kind in ("windowed", "record")

    @property
    def constants(self) -> tuple[float, float]:
        G, gamma = model_constants(self.model, self.l2)
        return (self.smoothness or G, self.strong_convexity or gamma)

    @property
    def step_size(self) -> float:
        return self.eta if self.eta is not None else 1.0 / self.constants[0]


def _stage1_ok(n_t: int, N: int, epsilon: float, mode: str) -> bool:
    if n_t < 2:
        return False
    grouping = group_components(N, epsilon, n_t, mode)
    G = len(grouping.groups)
    smallest = n_t // G
    if smallest < 2:
        return False
    eps_min = min(g.eps_c for g in grouping.groups)
    return (smallest // 2) * eps_min**2 >= STAGE1_MIN


HADAMARD_FROM_DIM = 32  # "auto" frame: Hadamard from this d on (≈ 20x faster at d = 100)


def frame_for(frame_kind: str, d: int) -> str:
    """The Kashin frame of a step: ``auto`` → Gaussian below d = 32, Hadamard above ([D9])."""
    if frame_kind == "auto":
        return "hadamard" if d >= HADAMARD_FROM_DIM else "gaussian"
    return frame_kind


def _n_kashin(d: int, frame_kind: str) -> int:
    N = math.ceil(2.0 * d - 1e-9)
    return N if frame_for(frame_kind, d) == "gaussian" else 1 << (N - 1).bit_length()


def choose_steps(n: int, m: int, d: int, config: SGDConfig) -> int:
    """``t0`` of [D13]: the default ``⌈ln(nm)/(ηγ)⌉`` (or the configured one), reduced so
    every group passes the stage-I rule when it can (:func:`steps_advisory` says when not)."""
    _, gamma = config.constants
    wanted = config.t0 or max(1, math.ceil(math.log(max(n * m, 2)) /
                                           (config.step_size * gamma)))
    wanted = min(wanted, max(1, n // 2))
    if config.t0 is not None:
        return wanted
    N = _n_kashin(d, config.frame_kind)
    t0 = wanted
    while t0 > 1 and not _stage1_ok(n // t0, N, config.epsilon, config.mode):
        t0 -= 1
    return t0


def steps_advisory(n: int, d: int, config: SGDConfig, t0: int) -> str | None:
    """A note for the person running ``t0`` steps over ``n`` users when stage I of the
    gradient MeanEst is unreliable (None when it is fine)."""
    if _stage1_ok(n // t0, _n_kashin(d, config.frame_kind), config.epsilon, config.mode):
        return None
    if config.t0 is not None:
        return (f"t0={t0} leaves {n // t0} users per step: stage I of the gradient MeanEst "
                f"is unreliable (n_I·ε_c² < {STAGE1_MIN:g})")
    return (f"{n} users are too few for even one reliable SGD step at "
            f"epsilon={config.epsilon:g}, d={d} (n_I·ε_c² < {STAGE1_MIN:g})")


def partition(n: int, t0: int, seed: int) -> list[np.ndarray]:
    """Balanced random partition of users ``0..n-1`` into ``t0`` groups (§3.7, [D1])."""
    perm = np.random.default_rng([seed, 0x5ED]).permutation(n)
    return [np.sort(perm[t::t0]) for t in range(t0)]


def step_spec(config: SGDConfig, theta: np.ndarray, n_t: int, m_ref: int, d: int,
              t: int) -> QuerySpec:
    """The MeanEst query of step ``t``: kind ``sgd`` with ``θ_t`` in ``extra``."""
    extra = dict(config.extra)
    extra.update({"model": config.model, "theta": [float(v) for v in theta],
                  "l2": float(config.l2), "step": t})
    return QuerySpec(kind="sgd", epsilon=config.epsilon, users=n_t, samples=m_ref, dim=d,
                     bound=config.clip, method=config.method,
                     frame_kind=frame_for(config.frame_kind, d),
                     frame_seed=config.seed, mode=config.mode, seed=config.seed * 1009 + t + 1,
                     query_id=f"{config.query_id}/step-{t}", extra=extra)


def project(theta: np.ndarray, radius: float | None) -> np.ndarray:
    """``Π_Θ`` onto the ℓ2 ball of ``radius`` (identity if None); post-processing."""
    if radius is None:
        return theta
    nrm = float(np.linalg.norm(theta))
    return theta if nrm <= radius else theta * (radius / nrm)


@dataclass
class SGDResult:
    theta: np.ndarray
    trajectory: list[dict[str, Any]]
    t0: int
    eta: float
    config: SGDConfig
    users: int
    samples: int
    dim: int
    #: the rounds chosen (``rounds``), the method run and the ε accounting of the run
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The result dict format read by the estimators' ``from_result``."""
        cfg = asdict(self.config)
        cfg["theta0"] = None if cfg["theta0"] is None else [float(v) for v in cfg["theta0"]]
        return {"kind": "sgd", "model": self.config.model, "theta": self.theta.tolist(),
                "trajectory": self.trajectory, "t0": self.t0, "eta": self.eta,
                "users": self.users, "samples": self.samples, "dim": self.dim,
                "epsilon": self.config.epsilon, "config": cfg, **self.extra}


def theta_std_error(round_se: np.ndarray, eta: float, step: tuple[float, float]
                    ) -> np.ndarray:
    """Standard errors of ``θ̂`` from every round's gradient standard errors
    (``(T, p)``): the noise of round ``t`` enters ``θ_{t+1}`` as ``−η e_t`` and is carried
    through the later rounds by ``I − ηH`` — whose eigenvalues lie within ``±a``,
    ``a = max|1 − ηγ|, |1 − ηG|`` over the public curvature bounds ``step = (ηγ, ηG)``
    (``a = 1`` when they do not contract: logistic without ``l2``) — so
    ``se_j(θ̂)² ≤ η² Σ_t a^{2(T−1−t)} se_{t,j}²`` (linearized; the tail average of the
    iterates carries at most the same). The noise part only: the optimization error
    ``R₀ a^T`` is not in it. (Before: ``η·se`` of the last round alone, which understated
    the noise of θ̂ by ``√T`` when nothing contracts.)"""
    se = np.asarray(round_se, dtype=np.float64)
    if se.ndim != 2 or se.shape[0] == 0:
        raise ValueError("round_se must be (rounds, p) with at least one round")
    lo, hi = step
    a = min(max(abs(1.0 - lo), abs(1.0 - hi)), 1.0)
    T = se.shape[0]
    w = a ** (2.0 * np.arange(T - 1, -1, -1))
    return float(eta) * np.sqrt(w @ np.square(np.nan_to_num(se, nan=np.inf)))


def theorem8_bound(n: int, m: int, d: int, epsilon: float, D: float, gamma: float,
                   eta: float, t0: int, dist0: float, C: float = 1.0) -> float:
    """Theorem 8 (§8.5) with constant ``C``: ``(1−ηγ/2)^{t0}‖θ0−θ*‖ +
    (2D/γ)√(C t0/(nm) (1 + d ln n/(ε²∧ε)))``."""
    e2 = min(epsilon**2, epsilon)
    noise = (2 * D / gamma) * math.sqrt(C * t0 / (n * m) * (1 + d * math.log(n) / e2))
    return (1 - eta * gamma / 2) ** t0 * dist0 + noise
