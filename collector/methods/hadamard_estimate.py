"""Method ``hadamard``'s estimates from the phases' reports: the centre's coefficients
(:func:`close_centre`), the windows' estimate (:func:`window_estimate`, with the clamping
the window reports show, :func:`measured_spread_bias2`) and a ``mean-l1`` fallback's
(:func:`values_estimate`). A distribution's fallback is ``hadamard_pairs.fallback_estimate``.

See ``docs/algorithms.md`` ("Hadamard windows"); used by ``uldp.collector.methods.hadamard``
(the collector half), whose module docstring states the estimates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from uldp.client.kinds.means import hadamard_rows
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.mechanisms.choice import oracle_total_variance, scalar_variance
from uldp.collector.methods.base import Published
from uldp.collector.methods.common import (
    estimate_from_blocks,
    finite_population,
    report_noise_variance,
)
from uldp.collector.methods.hadamard_model import (
    combine_centre,
    measured_bias2,
    measured_inflation,
    window_variance,
)
from uldp.collector.methods.hadamard_pairs import pair_oracle, sums

__all__ = ["close_centre", "measured_spread_bias2", "values_estimate", "window_estimate"]


def close_centre(method: Any, plan: Any, accs: dict[int, Any]) -> dict[str, Any]:
    """What the centre phase measured: per coefficient ``θ̂¹`` and its variance, and
    the reports the fallback reuses (the oracle's frequencies, or per-group means)."""
    K = plan.n_components
    if method._categorical(plan):
        A = plan.kind.categories(plan.template)
        parts = {r: _merged({g: a for g, a in accs.items() if a.records == r})
                 for r in (1, 2)}
        got = {r: a for r, a in parts.items() if a is not None and a.count > 0}
        if not got:
            f, se, n = np.full(A, 1.0 / A), np.full(A, 0.5), 0
        else:  # one- and two-record users (hadamard_pairs), each unbiased
            n = sum(a.count for a in got.values())
            fs = {r: a.estimate() for r, a in got.items()}
            f = sum(got[r].count * fs[r][0] for r in got) / n
            se = np.sqrt(sum((got[r].count * fs[r][1]) ** 2 for r in got)) / n
        theta = hadamard_rows(f[None], K)[0]
        # per coefficient: the sampled record's variance 1/K − θ_c² (θ_c moved two
        # average standard errors toward 0) plus the oracle's noise (two records: half
        # the oracle's at ε/2) spread over the K coefficients — the empirical total,
        # Σ se², overall
        avg = float(np.sum(se * se)) / K
        low = np.maximum(np.abs(theta) - 2 * math.sqrt(avg), 0.0)
        names = {1: method.oracle_name(plan), 2: pair_oracle(method, plan)[0]}
        noise = sum(a.count * oracle_total_variance(names[r], A, a.eps) / r
                    for r, a in got.items()) / max(n, 1)
        var = np.maximum((1.0 / K - low * low + noise / K) / max(n, 1), avg)
        theta[0], var[0] = 1.0 / math.sqrt(K), 0.0
        return {"theta": theta.tolist(), "var": var.tolist(), "reports": int(n),
                "freq": f.tolist(), "se": se.tolist(),
                "sums": {str(r): sums(a) for r, a in got.items()}}
    theta, var = np.zeros(K), np.zeros(K)
    means: dict[str, list[float]] = {}
    n = 0
    for g in range(method.n_groups(plan)):
        c, acc = method._comp(plan, g), accs.get(g)
        D = method._bound(plan, c)
        if acc is None or acc.count < 2:
            theta[c], var[c] = 0.0, D * D
            means[str(g)] = [0.0, D * D, 0 if acc is None else int(acc.count)]
            n += 0 if acc is None else acc.count
            continue
        theta[c], var[c] = float(acc.means()[0]), float(acc.covariance()[0, 0])
        means[str(g)] = [theta[c], var[c], int(acc.count)]
        n += acc.count
    return {"theta": theta.tolist(), "var": var.tolist(), "reports": int(n),
            "groups": means}


def window_estimate(method: Any, plan: Any, accs: dict[int, Any], previous: Published,
                    before: int) -> Estimate:
    """The windows' estimate (module docstring of ``hadamard``): per served coefficient the
    mean of its window reports, finite-population, widened by the largest clamping
    estimate and combined with the centre's."""
    eps = float(plan.spec.epsilon)
    n3 = sum(a.count for a in accs.values())
    n = before + n3
    blocks: list[Any] = []
    if method._categorical(plan):
        blocks.append(((0,), np.array([1.0 / math.sqrt(plan.n_components)]),
                       np.zeros((1, 1))))
    extra = previous.get("model_bias2", {})
    priced = method._excess_bias2(plan, float(previous.get("spread", {})
                                            .get("priced_excess", 0.0)))
    theta1 = np.asarray(previous["centre"]["theta"], dtype=np.float64)
    var1 = np.asarray(previous["centre"]["var"], dtype=np.float64)
    r, measured = measured_spread_bias2(method, plan, accs, previous, theta1, var1)
    for g in range(method.n_groups(plan)):
        c, acc = method._comp(plan, g), accs.get(g)
        lo, hi = previous["intervals"][str(g)]
        if acc is None or acc.count < 2:  # no report: anywhere in the range
            D = method._bound(plan, c)
            blocks.append(((c,), np.array([0.0]), np.array([[D * D]])))
            continue
        hint = previous.get("model_t2", {}).get(str(g))
        nv = report_noise_variance(previous["mechanism"], hi - lo, eps,
                                   float(acc.mean_square_t()[0]), float(acc.mean_t()[0]),
                                   hint)
        cov = finite_population(acc.covariance(), np.array([nv]), acc.count, n)
        # three estimates of one clamping (the model's, the measured spread's, the
        # spread test's excess share at its farthest): the largest, not their sum
        bias2 = max(float(extra.get(str(g), 0.0)), float(measured[g]), float(priced[g]))
        mean, _ = combine_centre(float(acc.means()[0]), float(cov[0, 0]) + bias2,
                                 float(theta1[c]), float(var1[c]), bias2)
        var = window_variance(float(cov[0, 0]), bias2, float(var1[c]))
        blocks.append(((c,), np.array([mean]), np.array([[var]])))
    est = estimate_from_blocks(plan, blocks, n3)
    est.counts["reports"] = n
    est.extra["spread_inflation"] = r
    return est

def measured_spread_bias2(method: Any, plan: Any, accs: dict[int, Any], previous: Published,
                    theta1: np.ndarray, var1: np.ndarray) -> tuple[float, np.ndarray]:
    """The users' spread measured against the model's (``r``) and, per served
    coefficient, the squared clamping bias the spread the window reports
    show implies (:func:`measured_inflation`, :func:`measured_bias2`): the spread
    test certifies at most a tenth of the users outside, and a spread a few times the
    model's (users who differ a little: movielens) passes it while its windows clamp
    far more than the model says. ``E t²`` of a report is measured exactly where the
    randomizer's output variance grows with ``t²`` (not Duchi's, whose outputs are
    ``±C`` whatever ``t``, nor Laplace's): there the model's charge stands alone."""
    G = method.n_groups(plan)
    mech, eps = previous["mechanism"], float(plan.spec.epsilon)
    if mech == "laplace":
        return 1.0, np.zeros(G)
    a = scalar_variance(mech, eps, 0.0)
    slope = 1.0 + scalar_variance(mech, eps, 1.0) - a
    if slope <= 1e-6:
        return 1.0, np.zeros(G)
    comps = [method._comp(plan, g) for g in range(G)]
    D = np.array([method._bound(plan, c) for c in comps])
    t2 = np.full(G, np.nan)
    for g in range(G):
        acc = accs.get(g)
        if acc is not None and acc.count >= 2:
            t2[g] = (float(acc.mean_square_t()[0]) - a) / slope
    ivs = np.array([previous["intervals"][str(g)] for g in range(G)], dtype=np.float64)
    centre = np.clip(theta1[comps], -D, D)
    sd = np.sqrt(np.maximum(var1[comps], 0.0))
    users = np.sqrt(method.alike_var(plan, theta1, var1)[comps])
    r = measured_inflation(t2, centre, sd, users, ivs[:, 0], ivs[:, 1])
    if r <= 1.0:
        return r, np.zeros(G)
    return r, measured_bias2(r, centre, sd, users, ivs[:, 0], ivs[:, 1])

def values_estimate(method: Any, plan: Any, accs: dict[int, Any], centre: dict[str, Any]
                     ) -> Estimate:
    blocks: list[Any] = []
    n = 0
    for g in range(method.n_groups(plan)):
        c, acc = method._comp(plan, g), accs.get(g)
        m1, v1, n1 = centre["groups"][str(g)]
        if acc is None or acc.count < 2:
            mean, var, k = m1, v1, n1
        else:
            k = n1 + acc.count
            mean = (n1 * m1 + acc.count * float(acc.means()[0])) / k
            var = (n1 * n1 * v1 + acc.count ** 2 * float(acc.covariance()[0, 0])) / k**2
        n += k
        blocks.append(((c,), np.array([mean]), np.array([[var]])))
    return estimate_from_blocks(plan, blocks, n)



def _merged(accs: dict[int, Any]) -> Any:
    """The groups' oracle accumulators merged into one (None without any)."""
    merged = None
    for acc in accs.values():
        if merged is None:
            merged = acc
        else:
            merged.merge(acc)
    return merged
