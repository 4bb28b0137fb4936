"""Exact noise quantiles for the intervals of the central releases.

See ``docs/central.md`` ("simple": the interval ``±((hi − lo)/(nK))·k₀.₉₅ + …``, where
``k₀.₉₅`` is the exact quantile of ``|DLap|``). The same quantile gives the noise part of
the PMWM mean step's interval (``docs/central-algorithms.md`` P§5 A14) and of WME's
Laplace stage 2 (H§3 there).
"""

from __future__ import annotations

import math

from uldp.client.noise import LaplaceScale

__all__ = ["dlap_abs_quantile"]


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
