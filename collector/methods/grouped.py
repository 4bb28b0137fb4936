"""Grouped means (group-by with private membership), collector half: method ``grouped-ssl``.

See ``docs/analyst.md`` ("Group-by") and, for the device half, ``uldp.client.kinds.grouped``
(kind ``mean-by``). Devices report their ``2G`` components with the ordinary single-stage
value reports (device method ``ssl``, grouped by the ε regime as any vector mean); this
method reads, per group ``g``, the share ``p_g`` (the indicator's mean + 1/2) and
``V_g = p_g·(μ_g − c)`` (the value component's mean) and returns

* the group's mean ``μ_g = c + V_g / p_g`` with **Fieller's interval** for the ratio — the
  set of ``r`` with ``(V − r p)² ≤ z²(Var V − 2r Cov(V, p) + r² Var p)``, exact for a normal
  numerator and denominator, which stays honest where the delta method is not (a small
  group whose ``p̂`` is not clearly above 0 gets the whole range, not a spuriously narrow
  interval) — post-processed into ``[lo, hi]``;
* the group's share of the reporting users ``p_g`` (and, in ``counts``, their number
  ``n·p_g``) with its normal interval, post-processed into ``[0, 1]`` (``[0, n]``).

Outputs (``values``, ``ci_low``, ...) are the G means, then the G shares; ``groups`` names
them. The covariances are the blocks' (components a user reports together are correlated;
different users are independent), with the finite-population correction of SSL for the
mean over the users who reported (``std_error_superpopulation`` without it).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.kinds import centre
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.methods.base import Published
from uldp.collector.methods.common import Block, value_blocks
from uldp.collector.methods.two_stage import SSL

__all__ = ["GroupedSSL", "fieller", "grouped_estimate"]


def fieller(V: float, p: float, var_V: float, var_p: float, cov: float, z: float
            ) -> tuple[float, float] | None:
    """Fieller's interval for ``r = V/p``; None when it is unbounded (``p`` not clearly
    above 0 at this level: ``p² ≤ z² Var p``)."""
    a = p * p - z * z * var_p
    if not a > 0:
        return None
    b = V * p - z * z * cov
    c = V * V - z * z * var_V
    disc = b * b - a * c
    root = math.sqrt(max(disc, 0.0))
    return (b - root) / a, (b + root) / a


def _theta_cov(C: int, blocks: list[Block]) -> tuple[np.ndarray, np.ndarray]:
    theta, cov = np.zeros(C), np.zeros((C, C))
    for comps, means, cv in blocks:
        idx = list(comps)
        theta[idx] = means
        cov[np.ix_(idx, idx)] = cv
    return theta, cov


def _group_errors(theta: np.ndarray, cov: np.ndarray, G: int, D: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Delta-method standard errors of ``μ_g − c`` and of ``p_g``."""
    se_mu, se_p = np.zeros(G), np.zeros(G)
    for g in range(G):
        p, V = theta[2 * g] + 0.5, theta[2 * g + 1]
        vp, vV, cv = cov[2 * g, 2 * g], cov[2 * g + 1, 2 * g + 1], cov[2 * g, 2 * g + 1]
        se_p[g] = math.sqrt(max(vp, 0.0))
        if p > 0:
            r = min(max(V / p, -D), D)
            se_mu[g] = math.sqrt(max(vV - 2 * r * cv + r * r * vp, 0.0)) / p
        else:
            se_mu[g] = D
    return se_mu, se_p


def grouped_estimate(plan: Any, finite: list[Block], blocks: list[Block], reports: int
                     ) -> Estimate:
    """The grouped estimate from the blocks (see the module docstring)."""
    spec, task = plan.spec, plan.template
    G = plan.n_components // 2
    c, D = centre(task), float(spec.bound)
    lo, hi = c - D, c + D
    if spec.lo is not None and spec.hi is not None:
        lo, hi = float(spec.lo), float(spec.hi)
    z = NormalDist().inv_cdf(0.5 + spec.confidence / 2)
    theta, cov = _theta_cov(plan.n_components, finite)
    se_mu, se_p = _group_errors(theta, cov, G, D)
    mean, m_lo, m_hi = np.zeros(G), np.zeros(G), np.zeros(G)
    share, s_lo, s_hi = np.zeros(G), np.zeros(G), np.zeros(G)
    for g in range(G):
        p, V = theta[2 * g] + 0.5, theta[2 * g + 1]
        r = min(max(V / p, -D), D) if p > 0 else 0.0
        iv = fieller(V, p, cov[2 * g + 1, 2 * g + 1], cov[2 * g, 2 * g],
                     cov[2 * g, 2 * g + 1], z)
        r_lo, r_hi = (-D, D) if iv is None else (max(iv[0], -D), min(iv[1], D))
        mean[g] = min(max(c + r, lo), hi)
        m_lo[g] = min(max(c + min(r_lo, r), lo), hi)
        m_hi[g] = min(max(c + max(r_hi, r), lo), hi)
        share[g] = min(max(p, 0.0), 1.0)
        s_lo[g] = min(max(p - z * se_p[g], 0.0), 1.0)
        s_hi[g] = min(max(p + z * se_p[g], 0.0), 1.0)
    sup_theta, sup_cov = _theta_cov(plan.n_components, blocks)
    sup_mu, sup_p = _group_errors(sup_theta, sup_cov, G, D)
    names = list(spec.groups) or [str(g) for g in range(G)]
    extra: dict[str, Any] = {
        "components": theta, "groups": names, "layout": "the G group means, then the G "
        "groups' shares of the users who reported",
        "counts_by_group": {"values": (reports * share).tolist(),
                            "ci_low": (reports * s_lo).tolist(),
                            "ci_high": (reports * s_hi).tolist()},
        "std_error_superpopulation": np.concatenate([sup_mu, sup_p]).tolist(),
        "regime": plan.grouping.regime, "method": spec.method,
        "interval_rule": "fieller (means), normal (shares)"}
    if plan.auto:
        extra["auto"] = dict(plan.auto)
    if plan.advisories:
        extra["advisories"] = list(plan.advisories)
    small = [names[g] for g in range(G) if m_hi[g] - m_lo[g] >= 0.999 * (hi - lo)]
    if small:
        extra.setdefault("advisories", []).append(
            f"group(s) {', '.join(small)}: too few of the reporting users are in them for a "
            "bounded interval of their mean (it is the whole range)")
    return Estimate(np.concatenate([mean, share]), np.concatenate([se_mu, se_p]),
                    np.concatenate([m_lo, s_lo]), np.concatenate([m_hi, s_hi]),
                    spec.confidence, counts={"reports": reports}, extra=extra)


class GroupedSSL(SSL):
    """Single-stage reports of kind ``mean-by``, read as group means and shares."""

    name = "grouped-ssl"
    device_method = "ssl"

    def finalize(self, plan: Any, accs: dict[int, Any], previous: Published | None
                 ) -> Estimate:
        if not plan.kind.grouped:
            raise ValueError(f"method {self.name} reads grouped means (kind mean-by), not "
                             f"kind {plan.spec.kind}")
        blocks, n = value_blocks(plan, accs)
        return grouped_estimate(plan, self._finite(plan, accs, blocks, n), blocks, n)
