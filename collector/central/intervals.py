"""Exact noise quantiles for the intervals of the central releases.

See ``docs/central.md`` ("simple": the interval ``±((hi − lo)/(nK))·k₀.₉₅ + …``, where
``k₀.₉₅`` is the exact quantile of ``|DLap|``). The same quantile gives the noise part of
the PMWM mean step's interval (``docs/central-algorithms.md`` P§5 A14) and of WME's
Laplace stage 2 (H§3 there).
"""

from __future__ import annotations

import math

from uldp.client.noise import LaplaceScale

__all__ = ["dlap_abs_quantile", "laplace_sum_abs_quantile"]


def dlap_abs_quantile(scale: LaplaceScale, alpha: float) -> int:
    """Smallest integer k with ``P(|Z| > k) <= alpha`` for ``Z ~ DLap(t)``, ``t = scale``.

    ``P(|Z| > k) = 2 q^{k+1}/(1 + q)``, ``q = e^{−1/t}``.
    """
    t = scale.num / scale.den
    log_q = -1.0 / t
    q = math.exp(log_q)
    k = math.ceil(math.log(alpha * (1 + q) / 2) / log_q - 1)
    k = max(k, 0)
    while k > 0 and 2 * math.exp((k) * log_q) / (1 + q) <= alpha:  # k - 1 also works
        k -= 1
    while 2 * math.exp((k + 1) * log_q) / (1 + q) > alpha:
        k += 1
    return k


def _laplace_sum_tail(b1: float, b2: float, t: float) -> float:
    """``P(|X + Y| > t)`` for independent ``X ~ Lap(b1)``, ``Y ~ Lap(b2)``, ``t >= 0``:
    ``(b1² e^{−t/b1} − b2² e^{−t/b2}) / (b1² − b2²)``, and ``(1 + t/(2b)) e^{−t/b}`` in
    the limit ``b1 = b2 = b``."""
    hi, lo = max(b1, b2), min(b1, b2)
    if lo <= 0:
        return math.exp(-t / hi) if hi > 0 else 0.0
    r = lo / hi
    if 1 - r < 1e-6:
        b = (b1 + b2) / 2
        return (1 + t / (2 * b)) * math.exp(-t / b)
    # (hi² e^{−t/hi} − lo² e^{−t/lo}) / (hi² − lo²), written to avoid cancellation
    return (math.exp(-t / hi) - r * r * math.exp(-t / lo)) / (1 - r * r)


def laplace_sum_abs_quantile(b1: float, b2: float, alpha: float) -> float:
    """Smallest ``t`` with ``P(|X + Y| > t) <= alpha`` (to a relative 1e-12), ``X ~
    Lap(b1)``, ``Y ~ Lap(b2)`` independent. For discrete Laplace noises ``u_i·DLap(s_i)``
    (``b_i = u_i s_i``) add ``u_1 + u_2``: ``|DLap(s)|`` and ``|Lap(s)|`` couple within 1
    (``P(|Z| > k) <= e^{−k/s} <= P(|Z| >= k)`` at every integer ``k``)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    lo, hi = 0.0, max(b1, b2, 1e-300)
    while _laplace_sum_tail(b1, b2, hi) > alpha:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _laplace_sum_tail(b1, b2, mid) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi
