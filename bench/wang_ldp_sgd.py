"""Item-level LDP-SGD with the piecewise / hybrid mechanisms, the peer of the learning bench.

Written from T. Wang, J. Zhao, X. Yang, X. Xiao et al. (Wang, Xiao, Yang, Zhao, Hui, Shin,
Shin, Yu), *Collecting and Analyzing Multidimensional Data with Local Differential
Privacy*, ICDE 2019:

* §III-B, Algorithm 2 — the piecewise mechanism (PM) on ``t ∈ [−1, 1]``:
  ``C = (e^{ε/2} + 1)/(e^{ε/2} − 1)``, ``ℓ(t) = (C + 1)t/2 − (C − 1)/2``, ``r(t) = ℓ(t) + C − 1``;
  with probability ``e^{ε/2}/(e^{ε/2} + 1)`` the output is uniform on ``[ℓ(t), r(t)]``,
  otherwise uniform on ``[−C, ℓ(t)) ∪ (r(t), C]``;
* §III-A, Algorithm 1 (Duchi et al.'s one-dimensional mechanism): ``±(e^ε + 1)/(e^ε − 1)``
  with ``P(+) = 1/2 + t(e^ε − 1)/(2e^ε + 2)``;
* §III-C — the hybrid mechanism (HM): PM with probability ``α = 1 − e^{−ε/2}`` if
  ``ε > ε* ≈ 0.61``, Duchi's otherwise;
* §IV, Algorithm 4 — a ``d``-dimensional tuple: ``k = max(1, min(d, ⌊ε/2.5⌋))`` coordinates
  sampled without replacement, each perturbed at ``ε/k`` and scaled by ``d/k``, the others 0;
* §V — LDP-SGD: users in disjoint groups, one group per iteration; each user's gradient,
  its coordinates clipped to ``[−1, 1]``, goes through Algorithm 4; the server averages
  and steps.

Item level with ``m`` records per user (the issue's peer): every record is a report at
``ε/m``, so a user's ``m`` reports compose to ``ε`` (basic composition — what item-level
LDP gives for a whole local dataset). Gradient coordinates are mapped to ``[−1, 1]`` on the
same public per-coordinate support the uldp rounds use, with the step size of uldp's rounds.
The number of iterations (hence the group size) is the paper's knob (§V sizes a group to the
mechanism's variance): it is chosen by the same predicted-risk rule the uldp rounds use
(:func:`uldp.collector.models.rounds.predicted_risk`), fed with *this* report's worst-case
variance (:func:`report_variance`). Taking uldp's one-record rounds instead (an earlier
version) gave the peer ~m× too many iterations for its noise: at ε/m = 0.01 a record's
report has variance ≈ 4·10⁴·d/k, and least-squares SGD on 26 groups random-walked to
R² −29 (d = 2) and −1630 (d = 10) while one group gives R² ≈ −0.1 (the noise floor).
Floating-point noise from numpy (a bench peer, not a device).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from uldp.client.kinds.learning import GRADIENTS, clip_rows
from uldp.collector.models.rounds import predicted_risk, supports_at
from uldp.collector.models.sgd import SGDConfig, partition, project

__all__ = ["duchi", "hm", "ldp_sgd", "multidimensional", "peer_rounds", "pm",
           "report_variance"]

EPS_STAR = 0.61


def duchi(t: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    e = math.exp(eps)
    p = 0.5 + t * (e - 1) / (2 * e + 2)
    c = (e + 1) / (e - 1)
    return np.where(rng.uniform(size=t.shape) < p, c, -c)


def pm(t: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    h = math.exp(eps / 2)
    C = (h + 1) / (h - 1)
    left = (C + 1) / 2 * t - (C - 1) / 2
    right = left + C - 1
    inside = rng.uniform(size=t.shape) < h / (h + 1)
    u = rng.uniform(size=t.shape)
    mid = left + u * (right - left)
    # outside: uniform on [−C, ℓ) ∪ (r, C], total length C + 1
    v = rng.uniform(size=t.shape) * (C + 1)
    low_len = left + C
    out = np.where(v < low_len, -C + v, right + (v - low_len))
    return np.where(inside, mid, out)


def hm(t: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    if eps <= EPS_STAR:
        return duchi(t, eps, rng)
    alpha = 1 - math.exp(-eps / 2)
    return np.where(rng.uniform(size=t.shape) < alpha, pm(t, eps, rng), duchi(t, eps, rng))


def multidimensional(T: np.ndarray, eps: float, rng: np.random.Generator,
                     mech: str = "hm") -> np.ndarray:
    """Algorithm 4 on the rows of ``T`` (``(N, d)``, entries in ``[−1, 1]``)."""
    N, d = T.shape
    k = max(1, min(d, int(eps // 2.5)))
    pick = np.argsort(rng.uniform(size=(N, d)), axis=1)[:, :k]
    out = np.zeros_like(T)
    rows = np.arange(N)[:, None]
    fn = {"hm": hm, "pm": pm, "duchi": duchi}[mech]
    out[rows, pick] = fn(T[rows, pick], eps / k, rng) * d / k
    return out


def report_variance(eps: float, d: int, mech: str = "hm") -> float:
    """The worst-case (over ``t ∈ [−1, 1]``) variance of one coordinate of Algorithm 4's
    output at total budget ``eps`` on ``d`` coordinates: the paper's §III variances —
    Duchi ``c² − t²``; PM ``t²/(e^{ε/2} − 1) + (e^{ε/2} + 3)/(3(e^{ε/2} − 1)²)``; HM the
    mixture — then ``(d/k)(Var M + t²) − t²`` for ``k`` sampled coordinates scaled by
    ``d/k``. Each is a quadratic in ``t²``, so the worst case is at ``t ∈ {0, 1}``."""
    k = max(1, min(d, int(eps // 2.5)))
    e = eps / k
    c = (math.exp(e) + 1) / (math.exp(e) - 1)
    h = math.exp(e / 2)

    def second_moment(t: float) -> float:  # E[M(t)²]
        duchi_m2 = c * c
        pm_m2 = t * t / (h - 1) + (h + 3) / (3 * (h - 1) ** 2) + t * t
        if mech == "duchi" or (mech == "hm" and e <= EPS_STAR):
            return duchi_m2
        if mech == "pm":
            return pm_m2
        alpha = 1 - math.exp(-e / 2)
        return alpha * pm_m2 + (1 - alpha) * duchi_m2

    return max((d / k) * second_moment(t) - t * t for t in (0.0, 1.0))


def peer_rounds(config: SGDConfig, n: int, m: int, p: int, mech: str = "hm") -> int:
    """The number of iterations of least predicted risk (module docstring): ``T`` groups
    of ``n/T`` users, each user ``m`` reports at ``ε/m``, on the support at ``θ₀``."""
    theta0 = np.zeros(p) if config.theta0 is None else np.asarray(config.theta0, float)
    sup = supports_at(config, theta0)
    h2 = float(np.sum(((sup[:, 1] - sup[:, 0]) / 2) ** 2))
    var = report_variance(config.epsilon / m, p, mech)
    best, best_risk = 1, math.inf
    for T in range(1, max(1, n // 2) + 1):
        risk = predicted_risk(config, p, T, h2 * var / ((n // T) * m))
        if risk < best_risk:
            best, best_risk = T, risk
        elif 4 * best + 16 < T:  # the risk is unimodal in T: stop well past the minimum
            break
    return best


def ldp_sgd(config: SGDConfig, source: Any, m: int, rng: np.random.Generator,
            mech: str = "hm", own_count: bool = False) -> dict[str, Any]:
    """Item-level LDP-SGD over the users of ``source`` (a uldp ``UserSource`` of scaled
    features with labels last): every record a report at ``ε/m`` (module docstring).
    ``own_count``: users of unequal sizes (real data) — each record at ``ε/m_i``, ``m_i``
    the user's own count (the source's batches hold users of one size), so every user's
    reports compose to ``ε``; ``m`` then only sizes the rounds."""
    n, p = source.n_users, source.dim
    T = int(config.t0) if config.t0 is not None else peer_rounds(config, n, m, p, mech)
    theta = np.zeros(p) if config.theta0 is None else np.asarray(config.theta0, float)
    eps_r = config.epsilon / m
    fn = GRADIENTS[config.model]
    # the paper's fixed clipping range: the support at θ₀, for every iteration (a support
    # following θ_t widens with the noise of θ_t for least squares — a feedback loop)
    sup = supports_at(config, theta)
    c, h = sup.mean(axis=1), (sup[:, 1] - sup[:, 0]) / 2
    for members in partition(n, T, config.seed):
        total, count = np.zeros(p), 0
        for _, X, y in source.batches(members, lambda mm: max(1, (1 << 21) // (mm * p))):
            Xf = X.reshape(-1, p)
            yf = np.zeros(len(Xf)) if y is None else y.reshape(-1)
            G = clip_rows(fn(theta, Xf, yf, {"l2": config.l2}), config.clip)
            Tn = np.clip((G - c) / h, -1.0, 1.0)
            e = config.epsilon / X.shape[1] if own_count else eps_r
            total += multidimensional(Tn, e, rng, mech).sum(axis=0)
            count += len(Xf)
        g = c + h * total / max(count, 1)
        theta = project(theta - config.step_size * g, config.radius)
    return {"theta": theta, "t0": T}
