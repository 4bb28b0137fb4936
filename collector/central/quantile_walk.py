"""Private quantiles by a noisy walk up a geometric grid, from loose public bounds.

See ``docs/central.md`` ("pmwm, wme, hlm, sa, subset-stats": PMWM's quantile walks, and
WME's private median count). Reference: ``docs/central-algorithms.md``:

* P§2.2 private upper quantile, the Durfee-style AboveThreshold walk on the geometric grid
  ``x_i = beta**i + ell - 1`` (:func:`upper_quantile`), with the data-independent cap
  ``I_max`` of P§5 A6 and both quantile noise modes of P§5 A3 (:data:`WALK_NOISES`);
* P§2.3 private lower quantile by negation (:func:`lower_quantile`);
* P§5 A13 (right-continuous counts, strict ``>``) and A14 (the walk runs on the integer
  count scale with exact geometric (pure DP) or exact discrete Gaussian (paper-faithful
  zCDP) noise; every random draw comes from :class:`RandomSource`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from uldp.client.noise import discrete_gaussian, discrete_laplace, laplace_scale
from uldp.client.randomness import RandomSource
from uldp.collector.central.checks import finite_number

__all__ = [
    "WALK_NOISES",
    "QuantileNoise",
    "QuantileRelease",
    "WalkNoise",
    "default_i_max",
    "discrete_gaussian_vec",
    "geometric",
    "grid_point",
    "lower_quantile",
    "upper_quantile",
]

QuantileNoise = Literal["exponential", "gaussian"]

_COUNT_SIGMA_MIN = 16.0  # gaussian quantile mode: count-scale noise sd is made >= 16 grid units


# ---------------------------------------------------------------------------------------
# grid
# ---------------------------------------------------------------------------------------
def default_i_max(beta: float, ell_abs: float = 0.0) -> int:
    """Largest ``i`` with ``beta**i + |ell| + 1 <= DBL_MAX / 4`` (P§2.5, P§5 A6). Public.

    The spec's cap is "``beta**i + |ell|`` finite"; the extra factor 4 (about 1400 fewer
    steps for beta = 1.001, out of ~7e5) keeps ``b - a`` and the mean step finite even if
    both walks hit the cap. Data-independent, so privacy is unaffected.
    """
    limit = float(np.finfo(np.float64).max) / 4.0
    i = math.floor(math.log(limit) / math.log(beta))
    while i > 1 and not float(np.power(np.float64(beta), i)) + ell_abs + 1.0 <= limit:
        i -= 1
    return i


def grid_point(i: np.ndarray | int, ell: float, beta: float) -> np.ndarray:
    """``x_i = beta**i + ell - 1`` (float64, data-independent)."""
    return np.power(np.float64(beta), np.asarray(i, dtype=np.float64)) + (ell - 1.0)



# ---------------------------------------------------------------------------------------
# exact noise primitives (all randomness from RandomSource)
# ---------------------------------------------------------------------------------------
def geometric(epsilon: float, size: int, rng: RandomSource) -> np.ndarray:
    """``size`` iid ``Geom(1 - e^{-eps_r})`` on {0, 1, ...}: ``P(G = g) = (1-r) r^g``.

    ``eps_r = rational_epsilon(epsilon) <= epsilon``. Exact: a discrete Laplace variable
    ``Z`` with ``q = e^{-eps_r}`` conditioned on ``Z >= 0`` has pmf ``(1 - q) q^g``
    (``P(Z = g | Z >= 0) = c q^g / (c / (1 - q))``); we draw DLap and keep the non-negative
    draws (acceptance ``1/(1+q) > 1/2``).
    """
    scale = laplace_scale(1, epsilon)
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        z = discrete_laplace(scale, 2 * need + 16, rng)
        z = z[z >= 0][:need]
        out[filled : filled + z.size] = z
        filled += z.size
    return out


#: the exact vectorized discrete Gaussian lives with the other samplers in uldp.client.noise
discrete_gaussian_vec = discrete_gaussian



@dataclass(frozen=True)
class WalkNoise:
    """The noise of the walk's threshold ``N_0`` and queries ``N_i`` (P§5 A3).

    ``count_scale(budget)`` is the public power of two ``L`` the counts are multiplied by;
    ``draw(share, L, size, rng)`` draws ``size`` integers for one budget share.
    """

    name: str
    count_scale: Callable[[tuple[float, float]], int]
    draw: Callable[[float, int, int, RandomSource], np.ndarray]


def _gaussian_count_scale(budget: tuple[float, float]) -> int:
    """Counts are multiplied by a power of two ``L`` so that the count-scale noise sd
    ``L/sqrt(rho_j)`` is at least 16 (a finer lattice, closer to the continuous noise of
    Lemma D.1). ``L`` is public."""
    r = max(budget)
    need = _COUNT_SIGMA_MIN * math.sqrt(r)
    return 1 << max(0, math.ceil(math.log2(need))) if need > 1 else 1


#: the walk's noise modes by name: ``"exponential"`` (geometric, pure DP; ``L = 1``) and
#: ``"gaussian"`` (discrete Gaussian ``N_Z(0, L^2/rho_j)``, the paper's Lemma D.1)
WALK_NOISES: dict[str, WalkNoise] = {
    "exponential": WalkNoise("exponential", lambda _budget: 1,
                             lambda share, _L, size, rng: geometric(share, size, rng)),
    "gaussian": WalkNoise("gaussian", _gaussian_count_scale,
                          lambda share, L, size, rng: discrete_gaussian_vec(
                              Fraction(L * L) / Fraction(share), size, rng)),
}


# ---------------------------------------------------------------------------------------
# P§2.2 / P§2.3 private quantiles
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuantileRelease:
    """A private quantile: the grid value, its grid index ``i`` and whether the cap hit."""

    value: float
    index: int
    capped: bool


def _check_budget_pair(budget: tuple[float, float], name: str = "budget") -> tuple[float, float]:
    if len(budget) != 2:
        raise ValueError(f"{name} must be a pair, got {budget!r}")
    b1 = finite_number(name, budget[0])
    b2 = finite_number(name, budget[1])
    if b1 <= 0 or b2 <= 0:
        raise ValueError(f"{name} entries must be positive, got {budget!r}")
    return b1, b2



def _check_walk(q: float, ell: float, beta: float, noise: str, budget: tuple[float, float],
                i_max: int | None) -> tuple[float, float, float, tuple[float, float], int]:
    """Validated ``(q, ell, beta, budget, cap)`` of one walk; errors name the argument."""
    q = finite_number("q", q)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
    ell = finite_number("ell", ell)
    beta = finite_number("beta", beta)
    if not beta > 1.0:
        raise ValueError(f"beta must be > 1, got {beta}")
    if noise not in WALK_NOISES:
        raise ValueError(f"noise must be 'exponential' or 'gaussian', got {noise!r}")
    b1, b2 = _check_budget_pair(budget)
    cap = default_i_max(beta, abs(ell)) if i_max is None else int(i_max)
    if cap < 1:
        raise ValueError(f"i_max must be >= 1, got {i_max}")
    if cap > default_i_max(beta, abs(ell)):
        raise ValueError(f"i_max={cap} is too large: grid points would overflow float64")
    return q, ell, beta, (b1, b2), cap


def _first_crossing(ys: np.ndarray, ell: float, beta: float, cap: int, L: int, thr: float,
                    n0: int, draw: Callable[[int], np.ndarray]) -> QuantileRelease:
    """The first ``i`` in ``1..cap`` with ``L*c_i + N_i - N_0 > thr`` (``draw(size)`` gives
    the ``N_i``), or the cap. ``ys`` is sorted."""
    # first block: the public number of steps to cross a range of 100 + |ell| (P§2.7);
    # block sizes change how many draws are wasted, never the output distribution.
    start = 1
    block = min(cap, 64 + math.ceil(math.log1p(100.0 + abs(ell)) / math.log(beta)))
    while start <= cap:
        stop = min(start + block, cap + 1)
        idx = np.arange(start, stop, dtype=np.int64)
        counts = np.searchsorted(ys, grid_point(idx, ell, beta), side="right")
        ni = draw(idx.size)
        hit = (L * counts + ni - n0) > thr
        if hit.any():
            k = int(idx[int(np.argmax(hit))])
            return QuantileRelease(float(grid_point(k, ell, beta)), k, False)
        start = stop
        block = min(block * 2, 1 << 18)
    return QuantileRelease(float(grid_point(cap, ell, beta)), cap, True)


def upper_quantile(y: np.ndarray, q: float, ell: float, *, budget: tuple[float, float],
                   rng: RandomSource, beta: float = 1.001,
                   noise: QuantileNoise = "exponential", i_max: int | None = None,
                   presorted: bool = False) -> QuantileRelease:
    """Private upper quantile (P§2.2): first grid point where a noisy count beats a noisy
    threshold.

    ``budget`` is ``(eps1, eps2)`` for ``noise="exponential"`` and ``(rho1, rho2)`` for
    ``noise="gaussian"``. Counting form (P§5 A14): stop at the first ``i >= 1`` with
    ``L*c_i + N_i > L*n*q + N_0``, ``c_i = #{y_j <= x_i}`` (right-continuous, strict ``>``,
    P§5 A13).

    Privacy (exponential mode, pure ``(eps1 + eps2)``-DP). ``N_0 ~ Geom(1 - e^{-eps1})`` and
    ``N_i ~ Geom(1 - e^{-eps2})`` on {0, 1, ...}. Under replace-one, the count vector moves
    by ``c'_i - c_i`` all in {0, -1} or all in {0, +1} (one point moves from ``a`` to
    ``b``). Fix an outcome "stop at k" and couple the noises: if counts go down, use
    ``N'_k = N_k + 1`` (others equal); if they go up, use ``N'_0 = N_0 + 1`` and
    ``N'_k = N_k + 1``. In both cases every query ``i < k`` stays below and query ``k``
    stays above the threshold, the map is injective and only shifts *upward*, which a
    geometric pmf allows at cost ``r^{-1} = e^{eps}`` per shifted variable; so
    ``P(k | D) <= e^{eps1 + eps2} P(k | D')``. The "no stop before ``i_max``" event is
    covered by the same argument (shift only ``N_0``). The cap and the grid are
    data-independent; mapping the index to ``x_k`` is post-processing. Geometric draws are
    exact (see :func:`geometric`) with ``eps_r <= eps``.

    Gaussian mode (``noise="gaussian"``) uses ``N_j ~ N_Z(0, L^2/rho_j)``: the discrete
    analogue of the paper's Lemma D.1, which claims ``(rho1 + rho2)``-zCDP; P§5 A3 could not
    verify that lemma, so this mode is for paper reproduction.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or y.size == 0:
        raise ValueError("y must be a non-empty one-dimensional array")
    q, ell, beta, (b1, b2), cap = _check_walk(q, ell, beta, noise, budget, i_max)
    ys = y if presorted else np.sort(y)
    n = ys.size
    walk = WALK_NOISES[noise]
    L = walk.count_scale((b1, b2))
    thr = L * n * q  # public float; comparisons against integers are exact below 2^53
    n0 = int(walk.draw(b1, L, 1, rng)[0])
    return _first_crossing(ys, ell, beta, cap, L, thr, n0,
                           lambda size: walk.draw(b2, L, size, rng))


def lower_quantile(y: np.ndarray, q: float, u: float, *, budget: tuple[float, float],
                   rng: RandomSource, beta: float = 1.001,
                   noise: QuantileNoise = "exponential", i_max: int | None = None,
                   ) -> QuantileRelease:
    """Private lower quantile (P§2.3): ``-UPPER_QUANTILE(-y, 1 - q, -u)``; same privacy."""
    r = upper_quantile(-np.asarray(y, dtype=np.float64), 1.0 - q, -u, budget=budget,
                       rng=rng, beta=beta, noise=noise, i_max=i_max)
    return QuantileRelease(-r.value, r.index, r.capped)
