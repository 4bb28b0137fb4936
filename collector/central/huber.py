"""Huber-loss mean (HLM) under central user-level (ε, δ)-DP.

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats": HLM). Reference:
``docs/central-algorithms.md`` — H§1 (setting: replace-one-user neighbours, public ``m_i``),
H§2.3 (weights / connecting points, balanced and imbalanced, theory defaults), H§2.5
(release ``Clip(μ̂₀, R_c) + N(0, (S/α)² I)``), H§2.10 (end-to-end algorithm, input
validation), decisions H§6 A1–A19 and A26. Its pieces: the H§2.2 objective and H§2.4 solver in
:mod:`~uldp.collector.central.huber_solver`; H§2.6–H§2.7 smooth sensitivity and H§2.9
constants in :mod:`~uldp.collector.central.smooth_sensitivity`; H§2.8 outlier surrogates
in :mod:`~uldp.collector.central.outlier_counts`.

Privacy argument (OpenDP style).

1. *Public inputs*: ``n``, the sample sizes ``m_i`` (hence ``w_i``, ``T_i``, ``γ``,
   ``k0``), ``R_c``, ``T``/``A``, ``(α, β)`` and the noise grid step ``h`` are fixed
   without looking at the values (H§2.1). The neighbouring relation replaces one user's
   whole local dataset, keeping every ``m_i`` (H§1).
2. *Smooth bound*: ``f(D) = Clip(μ̂₀(D), R_c)`` has a β-smooth upper bound ``S(D)`` on its
   local sensitivity (H§2.6/H§2.7 with the repairs H§6 A3–A8; Δ̃ 1-Lipschitz with witness H§2.8).
3. *Grid*: we release on the public grid ``h Z^d``. ``f_h(D) = h·round(f(D)/h)`` differs
   from ``f`` by at most ``h/2`` per coordinate, so ``LS(f_h) <= LS(f) + h√d`` and
   ``S_h = S + h√d`` is still β-smooth: (S1) is immediate and
   ``S(D) + h√d <= e^β S(D') + h√d <= e^β (S(D') + h√d)`` gives (S2).
4. *Noise*: ``f_h(D) + h·Z`` with ``Z`` iid discrete Gaussian ``N_Z(0, s²)`` in grid units,
   ``s = S_h(D)/(α h)`` (σ rounded *up*), exact sampler from ``uldp.client.noise``
   (CKS 2020). The (α, β) pair is calibrated (H§2.9) so that the *continuous* Gaussian
   ``N(f, (S_h/α)² I)`` is (ε, δ)-DP against every neighbour (shift ≤ min(S_h, S_h'),
   scale ratio in ``[e^{-β}, e^{β}]``). **Flag (H§2.10):** this accounting is done for
   the continuous Gaussian. The discrete law evaluated on ``hZ^d`` has the same
   log-density ratio as the continuous one at every output point up to the normaliser
   ratio, which differs from the continuous one by a factor ``1 ± 2e^{-2π²s²}`` (Poisson
   summation; ``s >= 2^grid_bits`` here, so ≈ ``e^{-2·10^7}``); the hockey-stick sum over
   the lattice approximates the integral with a grid ``2^{-grid_bits}`` times finer than
   σ. We treat that discretisation error as negligible, as the specification allows
   (H§6 A26), and record it in the privacy record's notes.
5. *Solver*: the analysis assumes the exact minimiser; the common case (all users in the
   quadratic zone) and d = 1 are solved exactly, d ≥ 2 otherwise by IRLS to relative
   ``1e-12`` (H§2.4, decision H§6 A16).

Only the noisy estimate is released; ``S``, ``Z``, Δ̃ stay internal.

Example::

    >>> import numpy as np
    >>> from uldp.client.randomness import RandomSource
    >>> from uldp.collector.central.huber import HLMParams, hlm_mean
    >>> g = np.random.default_rng(0)
    >>> ids = np.repeat(np.arange(5000), 10)          # 5000 users, 10 records each
    >>> x = g.normal(0.2, 1.0, ids.size)
    >>> r = hlm_mean(ids, x, epsilon=1.0, delta=1e-5, rng=RandomSource.seeded(1),
    ...              params=HLMParams(radius=1.0, T=5 / np.sqrt(10)))
    >>> abs(r.estimate - 0.2) < 0.05, r.privacy.mode
    (True, 'approx')
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import cast

import numpy as np

from uldp.client.noise import discrete_gaussian
from uldp.client.randomness import RandomSource, as_source
from uldp.collector.central.checks import is_finite_number, require_positive, validate_budget
from uldp.collector.central.data import UserGroups, group_by_user
from uldp.collector.central.huber_solver import as_2d, huber_minimize
from uldp.collector.central.outlier_counts import (
    OUTLIER_METHODS,
    OUTLIER_SURROGATES,
    imbalanced_radii,
)
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord
from uldp.collector.central.smooth_sensitivity import (
    CONSTANT_MODES,
    g_balanced,
    g_imbalanced,
    hlm_constants,
    smooth_max,
    smooth_sensitivity_balanced,
    smooth_sensitivity_imbalanced,
)

__all__ = [
    "HLMParams",
    "HLMRegimeWarning",
    "assumption3_gamma",
    "grid_gaussian",
    "grid_step_for",
    "hlm_from_groups",
    "hlm_mean",
    "hlm_regime",
    "imbalanced_weights",
    "theory_A",
    "theory_T",
]

class HLMRegimeWarning(UserWarning):
    """n is below the sample size HLM's accuracy theorem needs (privacy still holds)."""


C_T_MIN = 16 * math.sqrt(2 / 3)  # ≈ 13.06, Thm 2 / Thm 5


@dataclass(frozen=True)
class HLMParams:
    """Public parameters of HLM (H§2.1). All must be fixed without looking at values.

    radius: ``R_c`` — prior ball ``‖μ‖ <= R_c`` the non-private estimate is clipped into.
    T: balanced Huber connecting point; None → ``A/√m`` if ``A`` is given, else the
      theory rule of Thm 2 with ``R = R_c``.
    A: imbalanced scale (``T_i = A/√(m_i ∧ m_c)``); None → theory rule Thm 5.
    gamma: imbalance degree γ >= 1; None → smallest γ satisfying Assumption 3 (H§6 A19).
    k0: outlier budget (imbalanced); None → ``⌊n/(8γ)⌋`` clamped to ``[0, n−1]``.
    balanced: force the balanced (True) / imbalanced (False) path; None → balanced iff
      all ``m_i`` are equal.
    constants: ``"calibrated"`` (default), ``"nrs"`` or ``"paper"`` (H§2.9).
    beta: β for calibrated mode; None → minimise the data-free proxy ``S_proxy/α``.
    outlier: Δ̃ method — ``"auto"`` (exact 1-D / lattice quarter ball / per-user radii),
      ``"exact"`` (balanced d = 1 only), ``"quarter_ball"``, ``"none"`` (Δ̃ ≡ n).
    c_t: the constant ``C_T`` of the theory rules (must exceed 16√(2/3) for the theorems).
    grid_bits: the noise grid step is ``2^{-grid_bits}`` times a public lower bound on σ.
    clip_output: project the *noisy* release onto ``B(0, R_c)`` (post-processing, so the
      guarantee is unchanged; not in the paper). On by default since issue 11 (every
      release lies in its public range); bounds the error by ``2R_c`` when the
      ``2R_c e^{-βk}`` term of ``S`` dominates (small n, H§5.4).
    regime: what to do when n is below the sample size the accuracy theorem needs
      (:func:`hlm_regime`): ``"warn"`` (default, :class:`HLMRegimeWarning`), ``"refuse"``
      (ValueError) or ``"off"``. Privacy holds for every n; accuracy does not.
    """

    radius: float = 1.0
    T: float | None = None
    A: float | None = None
    gamma: float | None = None
    k0: int | None = None
    balanced: bool | None = None
    constants: str = "calibrated"
    beta: float | None = None
    outlier: str = "auto"
    c_t: float = 13.07
    grid_bits: int = 12
    clip_output: bool = True
    regime: str = "warn"

    def __post_init__(self) -> None:
        require_positive("radius", self.radius)
        if self.T is not None:
            require_positive("T", self.T)
        if self.A is not None:
            require_positive("A", self.A)
        if self.gamma is not None and not (is_finite_number(self.gamma) and self.gamma >= 1):
            raise ValueError(f"gamma must be a finite number >= 1, got {self.gamma!r}")
        if self.k0 is not None and (not isinstance(self.k0, (int, np.integer))
                                    or isinstance(self.k0, bool) or self.k0 < 0):
            raise ValueError(f"k0 must be a non-negative integer, got {self.k0!r}")
        if self.balanced is not None and not isinstance(self.balanced, bool):
            raise ValueError(f"balanced must be None, True or False, got {self.balanced!r}")
        if self.constants not in CONSTANT_MODES:
            raise ValueError(f"constants must be one of {CONSTANT_MODES}, "
                             f"got {self.constants!r}")
        if self.beta is not None:
            require_positive("beta", self.beta)
        if self.outlier not in OUTLIER_METHODS:
            raise ValueError(f"outlier must be one of {OUTLIER_METHODS}, got {self.outlier!r}")
        require_positive("c_t", self.c_t)
        if self.regime not in ("warn", "refuse", "off"):
            raise ValueError(f"regime must be 'warn', 'refuse' or 'off', got {self.regime!r}")
        if not isinstance(self.clip_output, bool):
            raise ValueError(f"clip_output must be True or False, got {self.clip_output!r}")
        if not isinstance(self.grid_bits, int) or not 4 <= self.grid_bits <= 30:
            raise ValueError(f"grid_bits must be an integer in [4, 30], got {self.grid_bits!r}")


# =====================================================================================
# H§2.3 weights, connecting points, γ
# =====================================================================================
def theory_T(m: int, n: int, d: int, R: float, c_t: float = 13.07) -> float:
    """Thm 2 rule ``T = C_T R ln(m n³ (d+1)) / √m`` (bounded support ``‖X‖ <= R``)."""
    return c_t * R * math.log(m * n**3 * (d + 1)) / math.sqrt(m)


def theory_A(N: int, n: int, d: int, R: float, c_t: float = 13.07) -> float:
    """Thm 5 rule ``A = C_T R √ln(N n² (d+1))``."""
    return c_t * R * math.sqrt(math.log(N * n**2 * (d + 1)))


def assumption3_gamma(m: np.ndarray) -> float:
    """Smallest γ >= 1 with Assumption 3: ``Σ_{m_i > γN/n} m_i <= N/2`` (decision H§6 A19)."""
    m = np.asarray(m, dtype=float)
    n, N = m.size, float(m.sum())
    ms = np.sort(m)
    v = np.unique(ms)
    prefix = np.r_[0.0, np.cumsum(ms)]
    above = N - prefix[np.searchsorted(ms, v, side="right")]  # Σ_{m_i > v} m_i
    ok = np.flatnonzero(above <= N / 2)
    t = float(v[ok[0]])
    return max(1.0, t * n / N)


def imbalanced_weights(m: np.ndarray, gamma: float, A: float) -> tuple[np.ndarray, np.ndarray]:
    """``w_i = (m_i ∧ m_c)/Σ_j(m_j ∧ m_c)``, ``T_i = A/√(m_i ∧ m_c)``, ``m_c = γN/n`` (H§2.3)."""
    m = np.asarray(m, dtype=float)
    mc = gamma * m.sum() / m.size
    capped = np.minimum(m, mc)
    return capped / capped.sum(), A / np.sqrt(capped)


# =====================================================================================
# noise on the public grid
# =====================================================================================
def grid_step_for(sigma_min: float, grid_bits: int) -> float:
    """Public grid step: the power of two at most ``σ_min / 2^grid_bits``."""
    return 2.0 ** math.floor(math.log2(sigma_min) - grid_bits)


def grid_gaussian(center: np.ndarray, sigma: float, step: float, rng: RandomSource,
                  ) -> np.ndarray:
    """``step·round(center/step) + step·N_Z(0, s²)``, ``s >= σ/step`` (σ rounded up).

    The discrete Gaussian is the exact CKS sampler; see the module docstring, point 4.
    """
    center = np.atleast_1d(np.asarray(center, dtype=float))
    s = sigma / step * (1 + 1e-12)
    s2 = Fraction(s) ** 2
    z = discrete_gaussian(s2, center.size, rng)
    return step * (np.round(center / step) + z.astype(float))


# =====================================================================================
# the estimator
# =====================================================================================
@dataclass(frozen=True)
class _Setup:
    balanced: bool
    w: np.ndarray
    T: np.ndarray
    T_scalar: float | None
    A: float | None
    gamma: float | None
    k0: int | None
    radii: np.ndarray | None

    @property
    def t(self) -> float:
        """T of the balanced path (set whenever ``balanced``)."""
        return cast(float, self.T_scalar)

    @property
    def k(self) -> int:
        """k0 of the imbalanced path (set whenever not ``balanced``)."""
        return cast(int, self.k0)


def _setup(m: np.ndarray, d: int, p: HLMParams) -> _Setup:
    n = m.size
    balanced = bool(np.all(m == m[0])) if p.balanced is None else p.balanced
    if balanced:
        if p.T is not None:
            t_bal = p.T
        elif p.A is not None:  # equal sizes: the imbalanced rule reduces to T = A/√m
            t_bal = p.A / math.sqrt(float(m[0]))
        else:
            t_bal = theory_T(int(m.max()), n, d, p.radius, p.c_t)
        return _Setup(True, np.full(n, 1.0 / n), np.full(n, float(t_bal)), float(t_bal),
                      None, None, None, None)
    gamma = p.gamma if p.gamma is not None else assumption3_gamma(m)
    A = p.A if p.A is not None else theory_A(int(m.sum()), n, d, p.radius, p.c_t)
    k0 = p.k0 if p.k0 is not None else math.floor(n / (8 * gamma))
    k0 = int(min(max(k0, 0), n - 1))
    w, T = imbalanced_weights(m, gamma, A)
    radii = imbalanced_radii(w, T, k0) if OUTLIER_SURROGATES[p.outlier].needs_radii else None
    return _Setup(False, w, T, None, float(A), float(gamma), k0, radii)


def _sigma_lower(st: _Setup, n: int, radius: float, alpha: float) -> float:
    """Public lower bound on ``S(D)/α``: ``S >= G(D, 0)`` and every case of ``G(D,0)``
    is at least ``min(2R_c, T/(n−1))`` (balanced) or ``min(2R_c, max_i w_i T_i)``."""
    if st.balanced:
        return min(2 * radius, st.t / (n - 1)) / alpha
    return min(2 * radius, float(np.max(st.w * st.T))) / alpha


def _outlier_count(y: np.ndarray, st: _Setup, p: HLMParams) -> int:
    """Δ̃(D) by the surrogate ``p.outlier`` (H§2.8), capped at ``n // 4`` (balanced) or k0."""
    n = y.shape[0]
    surrogate = OUTLIER_SURROGATES[p.outlier]
    if st.balanced:
        return surrogate.balanced(y, st.t, n // 4)
    if st.radii is None or st.k0 == 0:
        return st.k0 if st.k0 is not None else n
    return surrogate.imbalanced(y, st.radii, st.k)


def _proxy(st: _Setup, n: int, radius: float):
    """Data-independent ``S_proxy(β)`` (H§2.9): Δ̃ = 0 and ``Z = T/2`` (``Z_i = T_i/2``)."""
    if st.balanced:
        g = g_balanced(st.t / 2, n, st.t, radius, 0)
        return lambda b: smooth_max(g, b)
    g = g_imbalanced(st.w, st.T, st.T / 2, radius, 0, st.k)
    return lambda b: smooth_max(g, b)


def hlm_regime(n: int, N: int, st_balanced: bool, beta: float, radius: float,
               T: float | None, gamma: float | None) -> dict[str, object]:
    """The sample-size condition of HLM's accuracy theorem (H§4), from public values.

    Balanced users (Thm 2): ``n > (4/β) ln(n R_c/T)``. Imbalanced users (Thm 5):
    ``n > 8γ(1 + ln(N n)/(2β))``. Below it the ``2R_c e^{-βk}`` term dominates the smooth
    sensitivity (H§5.4) and the noise is of the order of the whole radius: the
    release is private but not accurate (issue 11 measured RMSE 12 on a [0.5, 5] scale
    at a few hundred users). Returns ``{"ok", "needed", "n", "theorem", "condition"}``.
    """
    if st_balanced:
        needed = (4 / beta) * math.log(max(n * radius / float(cast(float, T)), 1.0))
        cond = f"n > (4/beta) ln(n R_c/T) = {needed:.0f} (Thm 2, beta={beta:.3g}, T={T:.3g})"
        thm = "Thm 2 (balanced users)"
    else:
        needed = 8 * float(cast(float, gamma)) * (1 + math.log(N * n) / (2 * beta))
        cond = (f"n > 8 gamma (1 + ln(N n)/(2 beta)) = {needed:.0f} (Thm 5, gamma="
                f"{gamma:.3g}, beta={beta:.3g}, N={N})")
        thm = "Thm 5 (imbalanced users)"
    return {"ok": n > needed, "needed": float(needed), "n": int(n), "theorem": thm,
            "condition": cond}


def hlm_mean(user_ids: np.ndarray, values: np.ndarray, *, epsilon: float, delta: float,
             params: HLMParams | None = None, rng: RandomSource | None = None,
             radius: float | None = None, T: float | None = None) -> CentralRelease:
    """User-level (ε, δ)-DP Huber-loss mean of ``values`` (H§2.10).

    ``user_ids`` (N,), ``values`` (N,) or (N, d). ``radius``/``T`` override the same
    fields of ``params`` for convenience. Requires at least two users.
    """
    epsilon, delta = validate_budget(epsilon, delta)
    p = params if params is not None else HLMParams()
    if not isinstance(p, HLMParams):
        raise ValueError(f"params must be an HLMParams, got {type(p).__name__}")
    if radius is not None:
        p = replace(p, radius=radius)
    if T is not None:
        p = replace(p, T=T)
    return hlm_from_groups(group_by_user(user_ids, values), epsilon=epsilon, delta=delta,
                           params=p, rng=rng)


def _check_regime(regime: dict[str, object], n: int, p: HLMParams) -> None:
    """Warn or refuse (``p.regime``) when n is below the accuracy theorem's sample size."""
    if regime["ok"] or p.regime == "off":
        return
    msg = (f"HLM is outside the regime of its accuracy theorem: {regime['condition']}, "
           f"but n = {n} users (docs/central-algorithms.md H§4, H§5.4); the release is "
           "private but its noise is of the order of the whole radius R_c")
    if p.regime == "refuse":
        raise ValueError(msg)
    warnings.warn(msg, HLMRegimeWarning, stacklevel=3)  # the caller of hlm_from_groups


def _noisy_release(y: np.ndarray, st: _Setup, p: HLMParams, alpha: float, beta: float,
                   src: RandomSource) -> tuple[np.ndarray, float]:
    """``Clip(μ̂₀, R_c)`` on the public grid plus discrete Gaussian noise of sd
    ``S_h/α`` (H§2.5, module docstring points 2–4), optionally projected back onto the
    ball; returns the release and the grid step."""
    n, d = y.shape
    mu0 = np.atleast_1d(huber_minimize(y, st.w, st.T))
    nrm = float(np.linalg.norm(mu0))
    f = mu0 * min(1.0, p.radius / nrm) if nrm > 0 else mu0
    dt = _outlier_count(y, st, p)
    ybar = (st.w[:, None] * y).sum(axis=0)
    Z = np.linalg.norm(y - ybar, axis=1)
    if st.balanced:
        S = smooth_sensitivity_balanced(float(Z.max()), n, st.t, p.radius, beta, dt)
    else:
        S = smooth_sensitivity_imbalanced(st.w, st.T, Z, p.radius, beta, dt, st.k)
    step = grid_step_for(_sigma_lower(st, n, p.radius, alpha), p.grid_bits)
    sigma = (S + step * math.sqrt(d)) / alpha
    est = grid_gaussian(f, sigma, step, src)
    if p.clip_output:  # post-processing of the DP release
        nrm_est = float(np.linalg.norm(est))
        if nrm_est > p.radius:
            est = est * (p.radius / nrm_est)
    return est, step


def _record(st: _Setup, p: HLMParams, n: int, d: int, epsilon: float, delta: float,
            alpha: float, beta: float, step: float) -> PrivacyRecord:
    public = {"n": n, "d": d,
              "m_i": "per-user sample sizes (public, docs/central-algorithms.md H§1)",
              "radius": p.radius, "alpha": alpha, "beta": beta, "constants": p.constants,
              "grid_step": step, "path": "balanced" if st.balanced else "imbalanced",
              "outlier_method": p.outlier, "clip_output": p.clip_output}
    if st.balanced:
        public["T"] = st.T_scalar
    else:
        public.update(A=st.A, gamma=st.gamma, k0=st.k0)
    return PrivacyRecord(
        mechanism="hlm-smooth-sensitivity-gaussian", mode="approx", epsilon=epsilon,
        delta=delta, split={"huber_smooth_sensitivity_gaussian": 1.0}, public=public,
        notes=("single Gaussian release with beta-smooth sensitivity (NRS); discrete "
               "Gaussian on a public grid 2^-grid_bits finer than sigma, accounting done "
               "for the continuous Gaussian (docs/central-algorithms.md H§2.10)"
               + ("; constants='paper' does not meet the nominal delta for d=1"
                  if p.constants == "paper" and d == 1 else "")),
    )


def _interval(estimate: float, sigma_max: float, p: HLMParams) -> tuple[float, float]:
    """±1.96 times the public bound on the noise sd, clamped to the ball if the release is."""
    lo_i, hi_i = estimate - 1.96 * sigma_max, estimate + 1.96 * sigma_max
    if p.clip_output:
        lo_i, hi_i = max(lo_i, -p.radius), min(hi_i, p.radius)
    return float(lo_i), float(hi_i)


def hlm_from_groups(groups: UserGroups, *, epsilon: float, delta: float,
                    params: HLMParams | None = None, rng: RandomSource | None = None,
                    ) -> CentralRelease:
    """:func:`hlm_mean` on rows already grouped by user (repeated releases, benches)."""
    epsilon, delta = validate_budget(epsilon, delta)
    p = params if params is not None else HLMParams()
    if not isinstance(p, HLMParams):
        raise ValueError(f"params must be an HLMParams, got {type(p).__name__}")
    src = as_source(rng)
    n = groups.n_users
    if n < 2:
        raise ValueError(f"user_ids: HLM needs at least 2 users, got {n}")
    one_d = groups.values.ndim == 1
    y = as_2d(groups.user_means())
    d = y.shape[1]
    m = groups.counts.astype(np.int64)

    st = _setup(m, d, p)
    alpha, beta = hlm_constants(epsilon, delta, d, p.constants, p.beta,
                                proxy=_proxy(st, n, p.radius))
    regime = hlm_regime(n, int(m.sum()), st.balanced, beta, p.radius, st.T_scalar,
                        st.gamma)
    _check_regime(regime, n, p)
    est, step = _noisy_release(y, st, p, alpha, beta, src)
    estimate: float | tuple[float, ...] = float(est[0]) if one_d else tuple(map(float, est))
    # A public error bar: S(D) <= 2 R_c (every G is capped there), so the Gaussian's sd is
    # at most (2 R_c + h sqrt(d))/alpha whatever the data; the actual sd is private.
    sigma_max = (2 * p.radius + step * math.sqrt(d)) / alpha
    weights = "equal weights" if st.balanced else "weights min(m_i, gamma N/n)"
    estimand = (f"Huber location of the user means ({weights}): the weighted mean of user "
                "means when every user mean lies within T_i of it; the interval is a public "
                "bound on the noise only (S <= 2 R_c), not on the Huber bias")
    return CentralRelease(estimate=estimate,
                          privacy=_record(st, p, n, d, epsilon, delta, alpha, beta, step),
                          details={"n_users": n, "n_records": int(m.sum()), "regime": regime,
                                   "noise_sd_public_bound": sigma_max},
                          interval=_interval(float(est[0]), sigma_max, p) if one_d else None,
                          estimand=estimand)
