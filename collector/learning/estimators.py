"""scikit-learn-style estimators over the user-level LDP learning algorithms.

Sections of ``docs/algorithms.md``: §8 (Algorithm 3: :class:`LDPSGDRegressor`,
:class:`LDPLogisticRegression`), §9 (Algorithm 4: :class:`LDPHistogramClassifier`), §10
(Algorithm 5: :class:`LDPHistogramRegressor`). scikit-learn is *not* a dependency; the API
mimics it: ``fit``, ``predict``, ``score``, ``predict_proba`` (logistic),
``decision_function``, ``get_params``/``set_params``.

``fit(users, y=None)`` takes either arrays ``X (n, m, d)`` + ``y (n, m)`` (every user the
same ``m``), or a list of per-user datasets ``[(X_i, y_i), ...]`` (unequal ``m_i``, [D10]),
and runs the whole protocol in-process: every user's report is computed by the production
device function, the collector half aggregates. ``from_result(result)`` builds the same
fitted estimator from the result dict of a finished collector query (``result_`` after
``fit``):

* SGD: ``{"kind": "sgd", "model", "theta", "trajectory": [{"step", "users", "theta",
  "gradient", "std_error", "regime"}, ...], "t0", "eta", "users", "samples", "dim",
  "epsilon", "config", "estimator": {...params}}``;
* classify / regress: ``{"kind", "q", ("p", "label_bound", "tau"), "grid": {"M", "dim",
  "lo", "hi", "K_H"}, "Q", ("P"), "regime", "side", ..., "estimator": {...params}}``.

Feature scaling is public: SGD models map features to ``[-1, 1]`` with the declared
``feature_bounds`` (never with data statistics), append the intercept column and divide by
``√p`` so ``‖x‖₂ <= 1``; histogram models rescale the declared box to ``[0, 1]^d`` on the
device (``lo``/``hi`` in the task, [D16]). Labels are mapped on the device side as well
(classes → ±1 / 0-1, regression targets divided by ``label_bound``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from typing import Any, Self

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.learning.fit import run_classify, run_regress, run_sgd
from uldp.collector.learning.runner import Batch, UserSource, as_source
from uldp.collector.models.grid import GridModel
from uldp.collector.models.sgd import SGDConfig

__all__ = ["LDPHistogramClassifier", "LDPHistogramRegressor", "LDPLogisticRegression",
           "LDPSGDRegressor"]


class _MappedSource:
    """A user source whose features / labels are transformed batch by batch (public maps)."""

    def __init__(self, base: UserSource, fx: Callable[[np.ndarray], np.ndarray],
                 fy: Callable[[np.ndarray], np.ndarray] | None, dim: int) -> None:
        self.base, self.fx, self.fy = base, fx, fy
        self.n_users, self.dim = base.n_users, dim
        for attr in ("samples", "sizes"):
            if hasattr(base, attr):
                setattr(self, attr, getattr(base, attr))

    def batches(self, idx: np.ndarray, users_per_batch: Callable[[int], int]
                ) -> Iterator[Batch]:
        for sub, X, y in self.base.batches(idx, users_per_batch):
            Xv = X if X.ndim == 3 else X[..., None]
            yield sub, self.fx(Xv), None if (y is None or self.fy is None) else self.fy(y)


def _params_from(cls: type, result: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments recorded in a result dict (JSON turns tuples into lists)."""
    params = dict(result.get("estimator", {}))
    valid = set(cls._param_names())  # type: ignore[attr-defined]
    out = {k: v for k, v in params.items() if k in valid}
    for key in ("classes", "feature_bounds"):
        if isinstance(out.get(key), list):
            out[key] = tuple(out[key])
    return out


def _rng(random_state: Any) -> RandomSource:
    if random_state is None:
        return RandomSource.secure()
    if isinstance(random_state, RandomSource):
        return random_state
    return RandomSource.seeded(int(random_state))


def _seed(random_state: Any) -> int:
    return int(random_state) if isinstance(random_state, (int, np.integer)) else 0


class _Base:
    """get_params / set_params / repr from the ``__init__`` signature (sklearn convention)."""

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._param_names()}

    def set_params(self, **params: Any) -> _Base:
        valid = self._param_names()
        for k, v in params.items():
            if k not in valid:
                raise ValueError(f"invalid parameter {k!r} for {type(self).__name__}; "
                                 f"valid: {valid}")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def _check_fitted(self) -> None:
        if not hasattr(self, "result_"):
            raise ValueError(f"this {type(self).__name__} is not fitted yet: call fit or "
                             "from_result first")

    def _public_params(self) -> dict[str, Any]:
        out = {}
        for k, v in self.get_params().items():
            if isinstance(v, np.ndarray):
                v = v.tolist()
            out[k] = v if isinstance(v, (int, float, str, bool, list, tuple, type(None))) \
                else repr(v)
        return out


def _features_2d(X: Any, d: int) -> np.ndarray:
    Xa = np.asarray(X, dtype=np.float64)
    if Xa.ndim == 1:
        Xa = Xa[:, None] if d == 1 else Xa[None, :]
    if Xa.ndim != 2 or Xa.shape[1] != d:
        raise ValueError(f"X must have shape (samples, {d}), got {np.shape(X)}")
    if not np.isfinite(Xa).all():
        raise ValueError("X contains NaN or infinity")
    return Xa


def _bounds(feature_bounds: Any, d: int, default: tuple[float, float]
            ) -> tuple[np.ndarray, np.ndarray]:
    if feature_bounds is None:
        return np.full(d, default[0]), np.full(d, default[1])
    try:
        lo, hi = feature_bounds
    except (TypeError, ValueError):
        raise ValueError("feature_bounds must be (lo, hi)") from None
    lo_a = np.broadcast_to(np.asarray(lo, dtype=np.float64), (d,)).copy()
    hi_a = np.broadcast_to(np.asarray(hi, dtype=np.float64), (d,)).copy()
    if not (np.isfinite(lo_a).all() and np.isfinite(hi_a).all()) or np.any(hi_a <= lo_a):
        raise ValueError("feature_bounds needs finite lo < hi on every feature")
    return lo_a, hi_a


# ---- Algorithm 3 ----------------------------------------------------------------------
class _SGDBase(_Base):
    _model: str = "least_squares"
    _default_clip = 2.0
    # hyper-parameters, set by the subclasses' __init__ (sklearn convention)
    epsilon: float
    alpha: float
    fit_intercept: bool
    feature_bounds: Any
    clip: float | None
    t0: int | None
    eta: float | None
    strong_convexity: float | None
    radius: float | None
    average: bool
    method: str
    m_ref: int | None
    random_state: Any
    progress: bool | None

    def _scaler(self, d: int) -> Callable[[np.ndarray], np.ndarray]:
        lo, hi = _bounds(self.feature_bounds, d, (-1.0, 1.0))
        p = d + (1 if self.fit_intercept else 0)
        root = math.sqrt(p)

        def fx(X: np.ndarray) -> np.ndarray:
            Z = np.clip(2.0 * (X - lo) / (hi - lo) - 1.0, -1.0, 1.0)
            if self.fit_intercept:
                Z = np.concatenate([Z, np.ones(Z.shape[:-1] + (1,))], axis=-1)
            return Z / root
        return fx

    def _label_map(self) -> Callable[[np.ndarray], np.ndarray]:
        raise NotImplementedError

    def _config(self, model: str, d: int) -> SGDConfig:
        # the public scaling maps every feature into [-1, 1] / √p (the intercept is 1/√p)
        # and the labels into [-1, 1]: the per-coordinate rounds' supports and windows
        p = d + (1 if self.fit_intercept else 0)
        return SGDConfig(model=model, epsilon=float(self.epsilon),
                         clip=float(self.clip or self._default_clip), t0=self.t0,
                         eta=self.eta, radius=self.radius, l2=float(self.alpha),
                         method=self.method, seed=_seed(self.random_state),
                         strong_convexity=self.strong_convexity, average=bool(self.average),
                         feature_bound=1.0 / math.sqrt(p), label_bound=1.0)

    def fit(self, users: Any, y: Any = None) -> Self:
        source = as_source(users, y)
        d = source.dim
        fx = self._scaler(d)
        p = d + (1 if self.fit_intercept else 0)
        mapped = _MappedSource(source, fx, self._label_map(), p)
        res = run_sgd(self._config(self._model, d), mapped, rng=_rng(self.random_state),
                      m_ref=self.m_ref, progress=self.progress)
        out = res.to_dict()
        out["n_features"] = d
        out["estimator"] = self._public_params()
        self._set_result(out)
        return self

    def _set_result(self, result: dict[str, Any]) -> None:
        if result.get("kind") != "sgd":
            raise ValueError(f"not an SGD result (kind={result.get('kind')!r})")
        self.result_ = result
        self.theta_ = np.asarray(result["theta"], dtype=np.float64)
        self.n_features_in_ = int(result["n_features"])
        self.trajectory_ = result.get("trajectory", [])
        d = self.n_features_in_
        p = d + (1 if self.fit_intercept else 0)
        if self.theta_.shape != (p,):
            raise ValueError(f"theta has {self.theta_.size} entries, expected {p}")
        lo, hi = _bounds(self.feature_bounds, d, (-1.0, 1.0))
        root = math.sqrt(p)
        w = self.theta_[:d]
        k = self._output_scale()
        self.coef_ = k * 2.0 * w / ((hi - lo) * root)
        b = self.theta_[d] if self.fit_intercept else 0.0
        self.intercept_ = float(k * (b - np.sum(w * (2.0 * lo / (hi - lo) + 1.0))) / root)

    def _output_scale(self) -> float:
        return 1.0

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> _SGDBase:
        """The fitted estimator of a finished SGD query result (see module docstring)."""
        est = cls(**_params_from(cls, result))
        if "n_features" not in result:
            result = dict(result)
            result["n_features"] = len(result["theta"]) - (1 if est.fit_intercept else 0)
        est._set_result(result)
        return est

    def _linear(self, X: Any) -> np.ndarray:
        self._check_fitted()
        Xa = _features_2d(X, self.n_features_in_)
        return self._scaler(self.n_features_in_)(Xa) @ self.theta_


class LDPSGDRegressor(_SGDBase):
    """Linear regression by Algorithm 3 (``loss="least_squares"`` or ``"ridge"``)."""

    _default_clip = 2.0

    def __init__(self, epsilon: float = 1.0, *, loss: str = "least_squares",
                 alpha: float = 0.0, fit_intercept: bool = True, feature_bounds: Any = None,
                 label_bound: float = 1.0, clip: float | None = None, t0: int | None = None,
                 eta: float | None = None, strong_convexity: float | None = None,
                 radius: float | None = None, average: bool = False,
                 method: str = "auto", m_ref: int | None = None,
                 random_state: Any = None, progress: bool | None = None) -> None:
        self.epsilon, self.loss, self.alpha = epsilon, loss, alpha
        self.average = average
        self.fit_intercept, self.feature_bounds, self.label_bound = (
            fit_intercept, feature_bounds, label_bound)
        self.clip, self.t0, self.eta, self.strong_convexity, self.radius = (
            clip, t0, eta, strong_convexity, radius)
        self.method, self.m_ref, self.random_state, self.progress = (
            method, m_ref, random_state, progress)

    @property
    def _model(self) -> str:  # type: ignore[override]
        if self.loss not in ("least_squares", "ridge"):
            raise ValueError(f"loss must be 'least_squares' or 'ridge', got {self.loss!r}")
        return self.loss

    def _label_map(self) -> Callable[[np.ndarray], np.ndarray]:
        T = float(self.label_bound)
        if not math.isfinite(T) or T <= 0:
            raise ValueError(f"label_bound must be a finite positive number, got {T!r}")
        return lambda y: np.clip(y / T, -1.0, 1.0)

    def _output_scale(self) -> float:
        return float(self.label_bound)

    def predict(self, X: Any) -> np.ndarray:
        return self._linear(X) * float(self.label_bound)

    def score(self, X: Any, y: Any) -> float:
        """Coefficient of determination R²."""
        yt = np.asarray(y, dtype=np.float64).reshape(-1)
        resid = np.sum((yt - self.predict(X)) ** 2)
        total = np.sum((yt - yt.mean()) ** 2)
        return float(1.0 - resid / total) if total > 0 else 0.0


class LDPLogisticRegression(_SGDBase):
    """Binary ℓ2-regularised logistic regression by Algorithm 3 (``classes = (neg, pos)``)."""

    _model = "logistic"
    _default_clip = 1.0

    def __init__(self, epsilon: float = 1.0, *, alpha: float = 1e-3,
                 fit_intercept: bool = True, feature_bounds: Any = None,
                 classes: tuple[Any, Any] = (0, 1), clip: float | None = None,
                 t0: int | None = None, eta: float | None = None,
                 strong_convexity: float | None = None, radius: float | None = None,
                 average: bool = False, method: str = "auto", m_ref: int | None = None,
                 random_state: Any = None, progress: bool | None = None) -> None:
        self.epsilon, self.alpha, self.fit_intercept = epsilon, alpha, fit_intercept
        self.average = average
        self.feature_bounds, self.classes, self.clip = feature_bounds, classes, clip
        self.t0, self.eta, self.strong_convexity, self.radius = t0, eta, strong_convexity, radius
        self.method, self.m_ref, self.random_state, self.progress = (
            method, m_ref, random_state, progress)

    def _label_map(self) -> Callable[[np.ndarray], np.ndarray]:
        pos = self.classes[1]
        return lambda y: np.where(y == pos, 1.0, 0.0)

    def decision_function(self, X: Any) -> np.ndarray:
        return self._linear(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        z = np.clip(self._linear(X), -500, 500)
        p1 = 1.0 / (1.0 + np.exp(-z))
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X: Any) -> np.ndarray:
        neg, pos = self.classes
        return np.where(self._linear(X) >= 0, pos, neg)

    def score(self, X: Any, y: Any) -> float:
        """Accuracy."""
        return float(np.mean(self.predict(X) == np.asarray(y).reshape(-1)))


# ---- Algorithms 4 and 5 ---------------------------------------------------------------
class _GridBase(_Base):
    _kind: str
    feature_bounds: Any

    def _set_model(self, model: GridModel, extra: dict[str, Any] | None = None) -> None:
        self.model_ = model
        self.n_features_in_ = model.dim
        self.result_ = model.to_dict()
        self.result_["estimator"] = self._public_params()
        if extra:
            self.result_.update(extra)

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> _GridBase:
        """The fitted estimator of a finished classify/regress query result."""
        est = cls(**_params_from(cls, result))
        model = GridModel.from_dict(result)
        if model.kind != est._kind:
            raise ValueError(f"{cls.__name__} needs a {est._kind} result, got {model.kind}")
        est._set_model(model)
        return est

    def _box(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        return _bounds(self.feature_bounds, d, (0.0, 1.0))

    def _x(self, X: Any) -> np.ndarray:
        self._check_fitted()
        return _features_2d(X, self.n_features_in_)


class LDPHistogramClassifier(_GridBase):
    """Algorithm 4: ``ŷ(x) = sign(q̂_{bin(x)})`` on a grid of ``M^d`` cells."""

    _kind = "classify"

    def __init__(self, epsilon: float = 1.0, *, feature_bounds: Any = None,
                 M: int | None = None, beta: float = 1.0, classes: tuple[Any, Any] = (-1, 1),
                 method: str = "auto", m_ref: int | None = None,
                 random_state: Any = None, progress: bool | None = None) -> None:
        self.epsilon, self.feature_bounds, self.M, self.beta = epsilon, feature_bounds, M, beta
        self.classes, self.method, self.m_ref = classes, method, m_ref
        self.random_state, self.progress = random_state, progress

    def fit(self, users: Any, y: Any = None) -> LDPHistogramClassifier:
        source = as_source(users, y)
        lo, hi = self._box(source.dim)
        pos = self.classes[1]
        mapped = _MappedSource(source, lambda X: X, lambda yy: np.where(yy == pos, 1.0, -1.0),
                               source.dim)
        model = run_classify(mapped, epsilon=float(self.epsilon), rng=_rng(self.random_state),
                             lo=lo, hi=hi, M=self.M, beta=self.beta, method=self.method,
                             seed=_seed(self.random_state), m_ref=self.m_ref,
                             progress=self.progress)
        self._set_model(model)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        return self.model_.decision(self._x(X))

    def predict(self, X: Any) -> np.ndarray:
        neg, pos = self.classes
        return np.where(self.decision_function(X) >= 0, pos, neg)

    def score(self, X: Any, y: Any) -> float:
        """Accuracy."""
        return float(np.mean(self.predict(X) == np.asarray(y).reshape(-1)))


class LDPHistogramRegressor(_GridBase):
    """Algorithm 5: ``η̂(x) = clamp(q̂_k / max(p̂_k, τ), −T_y, T_y)`` on a grid."""

    _kind = "regress"

    def __init__(self, epsilon: float = 1.0, *, label_bound: float = 1.0,
                 feature_bounds: Any = None, M: int | None = None, beta: float = 1.0,
                 density_floor: float = 0.5, fix_p1: bool = False, method: str = "auto",
                 m_ref: int | None = None, random_state: Any = None,
                 progress: bool | None = None) -> None:
        self.epsilon, self.label_bound, self.feature_bounds = epsilon, label_bound, feature_bounds
        self.M, self.beta, self.density_floor, self.fix_p1 = M, beta, density_floor, fix_p1
        self.method, self.m_ref, self.random_state, self.progress = (
            method, m_ref, random_state, progress)

    def fit(self, users: Any, y: Any = None) -> LDPHistogramRegressor:
        source = as_source(users, y)
        lo, hi = self._box(source.dim)
        model = run_regress(source, epsilon=float(self.epsilon),
                            label_bound=float(self.label_bound), rng=_rng(self.random_state),
                            lo=lo, hi=hi, M=self.M, beta=self.beta,
                            density_floor=self.density_floor, fix_p1=self.fix_p1,
                            method=self.method, seed=_seed(self.random_state),
                            m_ref=self.m_ref, progress=self.progress)
        self._set_model(model)
        return self

    def predict(self, X: Any) -> np.ndarray:
        return self.model_.predict(self._x(X))

    def score(self, X: Any, y: Any) -> float:
        """Coefficient of determination R²."""
        yt = np.asarray(y, dtype=np.float64).reshape(-1)
        resid = np.sum((yt - self.predict(X)) ** 2)
        total = np.sum((yt - yt.mean()) ** 2)
        return float(1.0 - resid / total) if total > 0 else 0.0
