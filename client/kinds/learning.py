"""Learning kinds, device half: per-sample gradients (sgd), grid/Hadamard features
(classify, regress). See ``docs/algorithms.md`` ("Learning").

Sections of ``docs/algorithms.md``: §8 (Algorithm 3, SGD: per-sample gradients at the broadcast
θ_t, clipped to norm D, Kashin coefficients per sample, [D8], [D14]), §9 (Algorithm 4,
classification: ``K_H`` components ``Y·H_{k,bin(X)}``, [D15], [D16]), §10 (Algorithm 5,
regression: ``2K_H`` components, ``Q`` with bound ``T_y`` and ``P`` with bound 1, [D18]),
§1.3 INV-6 (all clamps mandatory on the device), [D5] (``N_Δ = K_H·n`` for §9/§10).

Three kinds are registered in :data:`uldp.client.kinds.KINDS`; all have
``uses_labels=True``, so ``compute_report(task, samples, labels)`` receives the labels as
the last column of every sample (label-free gradient models such as the quadratic test
loss ignore it; pass zeros).

* ``sgd`` — public ``task.extra``: ``model`` (a name in :data:`GRADIENTS`), ``theta``
  (θ_t, ``task.dim`` floats), optional ``l2`` (ridge/logistic penalty λ >= 0); the clip
  norm is ``task.bound``. Each per-sample gradient is sanitised (a row with NaN/inf is
  replaced by the zero vector), clipped to ``‖g‖₂ <= D`` without overflow, mapped to its
  Kashin coefficients and clamped to ``[-D', D']``, ``D' = K_LV·D/√N`` — or, with
  ``frame_kind = "identity"``, kept as its ``d`` coordinates and clamped to ``[-D, D]``
  (the per-coordinate reports of the windowed SGD rounds, §8.3). Whatever a custom
  gradient returns, the user statistic therefore lies in ``[-D', D']^N`` and the
  mechanism clamps it again: huge or NaN outputs never reach a report.
* ``classify`` — public ``task.extra``: ``grid`` (M cells per axis), optional ``lo``/``hi``
  (declared feature box, default ``[0, 1]^d``). Features are affinely rescaled to
  ``[0, 1]^d`` and clamped; labels are mapped to ±1 (``y > 0 → +1``, else −1, so both
  {0, 1} and {−1, +1} encodings work, [D16]); component ``k`` of a sample is
  ``y·H[k, bin(x)]`` with ``K_H = next_pow2(M^d)``.
* ``regress`` — as ``classify`` plus ``label_bound`` ``T_y``: labels are clamped to
  ``[-T_y, T_y]``; components ``0..K_H-1`` are ``y·H[k, bin(x)]`` (bound ``T_y``) and
  ``K_H..2K_H-1`` are ``H[k, bin(x)]`` (bound 1).

Every public value in ``extra`` is validated when the device validates the task
(``validate_task`` calls ``n_components``), so a malformed task is refused with
:class:`~uldp.client.taskspec.TaskRefused` naming the field. The noise scales are the core
Algorithm-1 ones, computed on the device from ``eps_c`` and the public bounds (INV-7).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from uldp.client.hadamard import fwht, hadamard_matrix, next_pow2
from uldp.client.kashin import kashin_coefficients
from uldp.client.kinds.base import (
    Kind,
    finite_number,
    kashin_frame,
    kashin_size,
    radial,
    register_kind,
)
from uldp.client.kinds.means import check_frame, kashin_transform
from uldp.client.numerics import exp, seq_sum
from uldp.client.taskspec import TaskRefused, TaskSpec

__all__ = [
    "DENSE_LIMIT",
    "GRADIENTS",
    "MAX_GRID_CELLS",
    "SGD_FRAMES",
    "GradientFn",
    "classify_transform",
    "clip_rows",
    "grid_bins",
    "grid_spec",
    "label_signs",
    "per_sample_gradients",
    "register_gradient",
    "regress_transform",
]

#: ``fn(theta (p,), X (S, p), y (S,), extra) -> (S, p)`` per-sample gradients.
GradientFn = Callable[[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]], np.ndarray]
GRADIENTS: dict[str, GradientFn] = {}
MAX_GRID_CELLS = 1 << 20  # largest M^d a device accepts (K_H <= 2^20)


def register_gradient(name: str, fn: GradientFn) -> GradientFn:
    """Register a per-sample gradient under ``name`` (usable as ``extra["model"]``).

    The device never trusts its output: non-finite rows become zero, rows are clipped to
    the task's norm ``D`` and the Kashin coefficients are clamped (INV-6).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"gradient name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise ValueError(f"gradient {name!r} must be callable")
    GRADIENTS[name] = fn
    return fn


def label_signs(y: np.ndarray) -> np.ndarray:
    """Labels mapped to ±1: ``y > 0 → +1`` and everything else ``→ −1`` ([D16])."""
    return np.where(np.asarray(y, dtype=np.float64) > 0, 1.0, -1.0)


def _l2(extra: dict[str, Any]) -> float:
    return float(extra.get("l2", 0.0))


def _quadratic(theta: np.ndarray, X: np.ndarray, y: np.ndarray,
               extra: dict[str, Any]) -> np.ndarray:
    """§8.5 test loss ½‖θ − x‖² (labels ignored): gradient θ − x."""
    return theta[None, :] - X


def _dot(X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``xᵀθ`` per row, canonical: ``seq_sum_j(x_j · θ_j)``."""
    return seq_sum(X * theta[None, :], axis=1)


def _least_squares(theta: np.ndarray, X: np.ndarray, y: np.ndarray,
                   extra: dict[str, Any]) -> np.ndarray:
    """½(xᵀθ − y)² (+ ½λ‖θ‖²): gradient ``r·x_j + λ·θ_j`` with ``r = xᵀθ − y``."""
    r = _dot(X, theta) - y
    return r[:, None] * X + _l2(extra) * theta[None, :]


def _logistic(theta: np.ndarray, X: np.ndarray, y: np.ndarray,
              extra: dict[str, Any]) -> np.ndarray:
    """log(1 + exp(−s xᵀθ)) (+ ½λ‖θ‖²), s = ±1: gradient ``w·x_j + λ·θ_j`` with
    ``z = clip(−s·xᵀθ, −500, 500)`` (an overflowing ``xᵀθ = ∞ − ∞`` is ``z = 0``),
    ``w = −s / (1 + exp(−z))`` (``exp`` of
    ``uldp.client.numerics``: the same bits in every SDK)."""
    s = label_signs(y)
    z = np.clip(np.nan_to_num(-s * _dot(X, theta), nan=0.0), -500.0, 500.0)
    w = -s / (1.0 + exp(-z))  # -s * sigmoid(z)
    return w[:, None] * X + _l2(extra) * theta[None, :]


register_gradient("quadratic", _quadratic)
register_gradient("least_squares", _least_squares)
register_gradient("ridge", _least_squares)
register_gradient("logistic", _logistic)


def clip_rows(G: np.ndarray, D: float) -> np.ndarray:
    """Rows with NaN/inf → 0, then each row projected onto the ℓ2 ball of radius ``D``
    (``uldp.client.numerics.radial``: canonical, no overflow). The Kashin coefficients are
    clamped to ``[-D', D']`` afterwards whatever the norm turned out to be (INV-6)."""
    G = np.array(G, dtype=np.float64, copy=True)
    bad = ~np.isfinite(G).all(axis=1)
    if bad.any():
        G[bad] = 0.0
    return radial(G, float(D), 2)


# ---- public-parameter validation (runs inside validate_task via n_components) ----------
def _numbers(task: TaskSpec, key: str, default: list[float] | None = None) -> np.ndarray:
    """``extra[key]``: a JSON list of exactly ``dim`` finite numbers (not booleans, not
    strings), else refused."""
    raw = task.extra.get(key, default)
    if raw is None:
        raise TaskRefused(f"the task needs extra[{key!r}]")
    if not isinstance(raw, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
        raise TaskRefused(f"extra[{key!r}] must be a list of numbers")
    if len(raw) != task.dim:
        raise TaskRefused(f"extra[{key!r}] must have {task.dim} entries, got {len(raw)}")
    try:
        arr = np.array([float(v) for v in raw], dtype=np.float64)
    except OverflowError:
        raise TaskRefused(f"extra[{key!r}] contains a number too large for a double") from None
    if not np.isfinite(arr).all():
        raise TaskRefused(f"extra[{key!r}] contains NaN or infinity")
    return arr


def _theta(task: TaskSpec) -> np.ndarray:
    return _numbers(task, "theta")


def _check_sgd(task: TaskSpec) -> None:
    model = task.extra.get("model")
    if model not in GRADIENTS:
        raise TaskRefused(f"extra['model'] must be one of {sorted(GRADIENTS)}, got {model!r}")
    if task.bound is None:
        raise TaskRefused("an sgd task needs bound (the gradient clip norm D)")
    finite_number("bound (gradient clip norm)", task.bound, positive=True)
    if "l2" in task.extra:
        finite_number("extra['l2']", task.extra["l2"], nonneg=True)
    _theta(task)


#: the frames of an ``sgd`` task: the Kashin frames of §3.6 and ``identity`` (the
#: gradient's own coordinates, ``N = d``, each in ``[-D, D]``)
SGD_FRAMES = ("gaussian", "hadamard", "identity")


def _identity(task: TaskSpec) -> bool:
    return task.frame_kind == "identity"


def _sgd_components(task: TaskSpec) -> int:
    _check_sgd(task)
    check_frame(task, SGD_FRAMES)
    return int(task.dim) if _identity(task) else kashin_size(task)


def per_sample_gradients(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    """Clipped per-sample gradients ``(S, d)`` of samples ``(S, d + 1)`` (label last)."""
    _check_sgd(task)
    d = task.dim
    X, y = x[:, :d], x[:, d]
    fn = GRADIENTS[task.extra["model"]]
    with np.errstate(all="ignore"):
        try:
            G = np.asarray(fn(_theta(task), X, y, dict(task.extra)), dtype=np.float64)
        except Exception:  # totality: a failing gradient is the zero gradient
            G = np.zeros((x.shape[0], d))
    if G.shape != (x.shape[0], d):  # totality: a malformed gradient is the zero gradient
        G = np.zeros((x.shape[0], d))
    return clip_rows(G, float(task.bound or 0.0))  # _check_sgd: bound is set


def _sgd_map(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    g = per_sample_gradients(task, x)
    if _identity(task):  # the coordinates themselves
        a = g
    else:
        a = kashin_coefficients(kashin_frame(task), g, delta=task.kashin_delta)
    Dp = _sgd_bound(task)
    return np.clip(a, -Dp, Dp)  # mandatory (INV-6), whatever the Kashin level turned out


def _sgd_bound(task: TaskSpec) -> float:
    """``D' = K_LV·D/√N`` per Kashin coefficient; ``D`` per coordinate (``identity``)."""
    if _identity(task):
        return float(task.bound or 0.0)
    return task.kashin_level * float(task.bound or 0.0) / math.sqrt(kashin_size(task))


def _sgd_transform(task: TaskSpec, n_components: int) -> np.ndarray | None:
    """``g_t = Uᵀ θ̂`` (§8.3 step 2d); the coordinates themselves for ``identity``."""
    return None if _identity(task) else kashin_transform(task, n_components)


register_kind(Kind(
    name="sgd", vector=True,
    n_components=_sgd_components,
    sample_map=_sgd_map,
    bounds=lambda t: np.full(_sgd_components(t), _sgd_bound(t)),
    uses_labels=True,
    transform=_sgd_transform,
))


# ---- grid + Hadamard features (§9.2, §10.2) -------------------------------------------
def grid_spec(task: TaskSpec) -> tuple[int, tuple[np.ndarray, np.ndarray], int]:
    """``(M, (lo, hi), K_H)`` of a classify/regress task, validated (TaskRefused if bad)."""
    M = task.extra.get("grid")
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < 1:
        raise TaskRefused(f"extra['grid'] (cells per axis M) must be a positive integer, "
                          f"got {M!r}")
    d = int(task.dim)
    cells = 1
    for _ in range(d):  # M^d without building a huge integer for a hostile task
        cells *= int(M)
        if cells > MAX_GRID_CELLS:
            raise TaskRefused(f"grid M^d = {M}^{d} exceeds the device limit {MAX_GRID_CELLS}",
                              code="limit")
    lo = _numbers(task, "lo", [0.0] * d)
    hi = _numbers(task, "hi", [1.0] * d)
    if np.any(hi <= lo) or not np.isfinite(hi - lo).all():
        raise TaskRefused("feature box needs finite lo < hi on every axis")
    return int(M), (lo, hi), next_pow2(cells)


def grid_bins(X: np.ndarray, M: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """0-based cell of each row of ``X`` (``(..., d)``): rescale to ``[0,1]^d``, clamp,
    ``j_s = min(⌊M u_s⌋, M−1)``, ``bin = Σ_s j_s M^s`` (§9.2, [D16])."""
    X = np.asarray(X, dtype=np.float64)
    u = np.clip((X - lo) / (hi - lo), 0.0, 1.0)
    j = np.minimum(np.floor(u * M).astype(np.int64), M - 1)
    weights = M ** np.arange(X.shape[-1], dtype=np.int64)
    return (j * weights).sum(axis=-1)


def _label_bound(task: TaskSpec) -> float:
    if "label_bound" not in task.extra:
        raise TaskRefused("a regress task needs extra['label_bound'] (T_y)")
    return finite_number("extra['label_bound']", task.extra["label_bound"], positive=True)


def _hadamard_features(task: TaskSpec, X: np.ndarray, valid: np.ndarray,
                       weights: list[np.ndarray]) -> np.ndarray:
    """``(n, len(weights)·K_H)``: for each weight array ``w`` (n, m), ``H · hist_w / m_i``
    over the valid samples (``m_i`` of them; a user with none reports 0, [D10])."""
    M, (lo, hi), K = grid_spec(task)
    n, m = X.shape[:2]
    out = np.zeros((n, K * len(weights)))
    if m == 0:  # [D10]: a user without samples reports the zero statistic
        return out
    count = np.maximum(valid.sum(axis=1, keepdims=True), 1).astype(np.float64)  # m_i
    bins = grid_bins(X[..., : task.dim], M, lo, hi)  # (n, m)
    flat = (np.arange(n)[:, None] * K + bins).ravel()
    for i, w in enumerate(weights):
        # sequential sum of the weights of each cell in sample order (bincount adds in
        # index order), then one division by m_i
        sums = np.bincount(flat, weights=np.where(valid, w, 0.0).ravel(),
                           minlength=n * K).reshape(n, K)
        out[:, i * K:(i + 1) * K] = fwht(sums / count, axis=-1)
    return out


def _all_valid(x: np.ndarray) -> np.ndarray:
    return np.ones(x.shape[:2], dtype=bool)


def _classify_stats(task: TaskSpec, X: np.ndarray, valid: np.ndarray) -> np.ndarray:
    grid_spec(task)
    return _hadamard_features(task, X, valid, [label_signs(X[..., task.dim])])


def _regress_stats(task: TaskSpec, X: np.ndarray, valid: np.ndarray) -> np.ndarray:
    T = _label_bound(task)
    y = np.clip(X[..., task.dim], -T, T)  # mandatory label clamp (INV-6)
    return _hadamard_features(task, X, valid, [y, np.ones_like(y)])


def _regress_components(task: TaskSpec) -> int:
    _label_bound(task)
    return 2 * grid_spec(task)[2]


register_kind(Kind(
    name="classify", vector=True,
    n_components=lambda t: grid_spec(t)[2],
    sample_map=lambda t, x: _classify_stats(t, x[:, None, :], _all_valid(x[:, None, :])),
    user_stats=_classify_stats,
    bounds=lambda t: np.ones(grid_spec(t)[2]),
    uses_labels=True,
    transform=lambda t, C: classify_transform(C),
    delta_users=lambda t: grid_spec(t)[2],  # N_Δ = K_H·n ([D5])
))
register_kind(Kind(
    name="regress", vector=True,
    n_components=_regress_components,
    sample_map=lambda t, x: _regress_stats(t, x[:, None, :], _all_valid(x[:, None, :])),
    user_stats=_regress_stats,
    bounds=lambda t: np.concatenate([np.full(grid_spec(t)[2], _label_bound(t)),
                                     np.ones(grid_spec(t)[2])]),
    uses_labels=True,
    transform=lambda t, C: regress_transform(C),
    delta_users=lambda t: grid_spec(t)[2],  # N_Δ = K_H·n ([D5])
))


# ---- output transforms (§8.3 step 2d, §9.3, §10.3; post-processing, INV-5) --------------
#: Up to this many components the dense Hadamard transform is used (it also carries the
#: standard errors of q̂, p̂); above it the output is Q̂, P̂ themselves and the collector
#: computes q̂, p̂ with the fast WHT.
DENSE_LIMIT = 2048


def classify_transform(C: int) -> np.ndarray | None:
    """``H / K_H`` (``C = K_H``), or None above :data:`DENSE_LIMIT`."""
    if C > DENSE_LIMIT:
        return None
    return hadamard_matrix(C).astype(np.float64) / C


def regress_transform(C: int) -> np.ndarray | None:
    """Block diagonal ``diag(H/K_H, H/K_H)`` (``C = 2K_H``), or None above the limit."""
    if C > DENSE_LIMIT:
        return None
    K = C // 2
    H = hadamard_matrix(K).astype(np.float64) / K
    T = np.zeros((C, C))
    T[:K, :K] = H
    T[K:, K:] = H
    return T
