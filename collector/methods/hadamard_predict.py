"""Method ``hadamard``'s predicted error: its rule run on the normal model of the users'
statistics.

See ``docs/algorithms.md`` ("Hadamard windows"); used by
``uldp.collector.methods.hadamard`` (``component_variance``, the predicted MSE, and
``predict``, the preview's likely interval: the same per-coefficient computation as the
estimate, :func:`uldp.collector.methods.hadamard_model.window_variance`).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.collector.mechanisms.choice import oracle_total_variance
from uldp.collector.methods.common import value_mechanism, value_noise_variance
from uldp.collector.methods.hadamard_model import (
    EXACT_SAMPLES,
    binomial_bias2,
    combine_centre,
    excess_limit,
    measured_bias2,
    model_bias2,
    model_t2,
    normal_cdf,
    pass_limit,
    priced2,
    share_se,
    share_variance,
    test_windows,
    window_variance,
)
from uldp.collector.methods.hadamard_pairs import (
    pair_oracle,
    predicted_fallback,
    probe_groups,
)

__all__ = ["centre_variance", "fallback_variance", "outcomes"]

_NORMAL = NormalDist()


def outcomes(method: Any, plan: Any, sample_var: np.ndarray,
             stat_var: np.ndarray | None = None, stat_mean: np.ndarray | None = None,
             interval: bool = False) -> tuple[np.ndarray | None, np.ndarray, float]:
    """``(window, fallback, P(window))``: the rule run on the normal model — users'
    statistics ``N(θ_c, S_c²)`` (``stat_var``, or ``σ_c²/m``), the centre's error at its
    predicted variance, the window the centre phase picks, the outside share the spread
    phase would measure and its standard error. ``window``: per component the windows'
    error as ``hadamard_estimate.window_estimate`` combines it (None where they never
    run; ``interval``: the variance their interval carries — model bias and the charged
    excess share expected when the test passes); ``fallback``: the oracle's error."""
    eps, K, G = float(plan.spec.epsilon), plan.n_components, method.n_groups(plan)
    comps = [method._comp(plan, g) for g in range(G)]
    sv = np.asarray(sample_var, dtype=np.float64)
    S2 = sv / plan.spec.samples if stat_var is None \
        else np.maximum(np.asarray(stat_var, np.float64), 0)
    mean = np.zeros(K) if stat_mean is None else np.asarray(stat_mean, dtype=np.float64)
    sizes = np.array([plan.stage_sizes(g) for g in range(G)], dtype=np.float64)
    n2 = int(sizes[:, 1].sum())
    n3 = np.maximum(sizes[:, 2], 1.0)
    D = np.array([method._bound(plan, c) for c in range(K)])
    fallback_v, fallback_total = fallback_variance(method, plan, sv, stat_var, n2)
    var = centre_variance(method, plan, sv, S2, sizes[:, 0])
    # the centre phase's window (its own model: users alike), then the spread's view
    alike = method.alike_var(plan, mean, var)
    q, mech, lo, hi, mb2_model, mse_model = method.window(plan, mean, var, alike)
    Dc, v, S2c, th = D[comps], var[comps], S2[comps], mean[comps]
    tau = np.sqrt(alike[comps] + v)
    _, _, qt = test_windows(np.clip(th, -Dc, Dc), tau, q, Dc)
    outside = float(np.mean(2 * normal_cdf(-qt * tau / np.sqrt(S2c + v + 1e-300))))
    alike_out = float(np.mean(2 * normal_cdf(-qt)))
    sd = share_se(outside, 0.0, n2, eps)
    prev = {"centre": {"var": var.tolist()}, "window_mse": mse_model, "q_window": q,
            "outside_alike": alike_out,
            "intervals": {str(g): [float(lo[g]), float(hi[g])] for g in range(G)},
            "model_bias2": {str(g): float(mb2_model[g]) for g in range(G)}}
    window, _ = method.decide(plan, prev, outside, 0.0, n2, fallback_total)
    if not mse_model < fallback_total or pass_limit(sd) <= 0:
        return None, fallback_v, 0.0
    # P(windows) = P(M̂ ≤ limit): the test's and the price's limits at the rule's
    # (floored) se, M̂ around M by its own noise — the mixture of the outcomes' errors
    unit = float(np.sum(method._excess_bias2(plan, 1.0)))
    limit = alike_out + excess_limit(sd, mse_model, fallback_total, unit)
    noise = math.sqrt(share_variance(outside, eps) / n2) if n2 > 0 else 0.0
    p_window = _NORMAL.cdf((limit - outside) / noise) if noise > 0 else float(window)
    if p_window < 1e-6:
        return None, fallback_v, 0.0
    half = q * tau
    # the charged excess share's expected square given that the test passes
    charge2 = priced2(outside - alike_out, noise, sd, limit - alike_out) if interval else 0.0
    # the clamping the window reports would show (users spreading r× the model's)
    r = float(np.sum(S2c) / max(float(np.sum(alike[comps])), 1e-300))
    measured = measured_bias2(r, np.clip(th, -Dc, Dc), np.sqrt(v), np.sqrt(alike[comps]),
                              lo, hi) if interval and r > 1 else np.zeros(G)
    model = {"mech": mech, "width": hi - lo, "S2": S2c, "centre_var": v, "n3": n3,
             "measured": measured, "bias2": _truth_bias2(method, plan, S2c, v, half, th, Dc),
             "model_bias2": mb2_model, "D": Dc, "charge2": charge2,
             "t2": float(np.mean(model_t2(np.sqrt(S2c), np.sqrt(v), half)))}
    out = np.zeros(K)
    out[comps] = _window_errors(plan, model, stat_var is not None, interval)
    return out, fallback_v, p_window


def _truth_bias2(method: Any, plan: Any, S2c: np.ndarray, v: np.ndarray, half: np.ndarray,
                 th: np.ndarray, Dc: np.ndarray) -> np.ndarray:
    """The clamping bias the users' actual spread ``S2c`` gives the windows: the normal
    model's, and for a distribution at ``m`` ≤ ``EXACT_SAMPLES`` at least users alike's exact
    (binomial) one (:func:`binomial_bias2`) — the users' statistics are averages of ``m``
    records, as discrete as users alike's or more."""
    b2 = model_bias2(np.sqrt(S2c), np.sqrt(v), half, th, Dc)
    m = int(plan.spec.samples)
    if method._categorical(plan) and m <= EXACT_SAMPLES:
        b2 = np.maximum(b2, binomial_bias2(m, np.sqrt(v), half, th, Dc))
    return np.asarray(b2)


def _window_errors(plan: Any, w: dict[str, Any], finite: bool, interval: bool
                   ) -> np.ndarray:
    """Per served coefficient, the windows' error (``interval``: the variance their
    interval carries) on the model ``w`` (:func:`outcomes`)."""
    eps, users = float(plan.spec.epsilon), plan.spec.users
    out = np.zeros(len(w["n3"]))
    for g, n3 in enumerate(w["n3"]):
        fpc = max(1.0 - n3 / users, 0.0) if finite else 1.0
        nv = value_noise_variance(w["mech"], float(w["width"][g]), eps, w["t2"])
        report = (fpc * float(w["S2"][g]) + nv) / n3
        v, mb2_model = float(w["centre_var"][g]), float(w["model_bias2"][g])
        if interval:  # what the interval carries: the largest clamping estimate
            bias2 = max(mb2_model, float(w["measured"][g]),
                        w["charge2"] * float(w["D"][g]) ** 2)
            out[g] = window_variance(report, bias2, v)
        else:  # the error: the population's bias (combined as the estimate is)
            out[g] = combine_centre(0.0, report + float(w["bias2"][g]), 0.0, v, mb2_model)[1]
    return out


def centre_variance(method: Any, plan: Any, sv: np.ndarray, S2: np.ndarray, n1: np.ndarray
                    ) -> np.ndarray:
    """The predicted ``Var θ̂¹_c``: one sampled record's variance of coefficient c
    (``sample_var_c``) plus the oracle's noise spread over the ``K`` coefficients
    (distribution), or full-range values (``mean-l1``)."""
    eps, K = float(plan.spec.epsilon), plan.n_components
    var = np.zeros(K)
    if method._categorical(plan):
        A = plan.kind.categories(plan.template)
        noise = oracle_total_variance(method.oracle_name(plan), A, eps)
        probes = list(probe_groups(method, plan))
        if probes:  # the probe's users: two records at ε/2 (hadamard_pairs)
            name2, eps2 = pair_oracle(method, plan)
            share = float(n1[probes].sum()) / max(float(n1.sum()), 1.0)
            noise = (1 - share) * noise + share * oracle_total_variance(name2, A, eps2) / 2
        var[:] = (np.maximum(sv, 0.0) + noise / K) / max(float(n1.sum()), 1.0)
        var[0] = 0.0
        return var
    mech1 = value_mechanism(plan.spec, eps)
    for g in range(method.n_groups(plan)):
        c = method._comp(plan, g)
        D = method._bound(plan, c)
        var[c] = (value_noise_variance(mech1, 2 * D, eps) + S2[c]) / max(n1[g], 1.0)
    return var


def fallback_variance(method: Any, plan: Any, sv: np.ndarray, stat_var: np.ndarray | None,
                      n2: int) -> tuple[np.ndarray, float]:
    """The predicted variance of every component when the spread test fails: the
    one-record oracle (distribution) or full-range values (``mean-l1``) over the users
    the spread phase left, and its total."""
    spec, eps = plan.spec, float(plan.spec.epsilon)
    K = plan.n_components
    n_left = max(spec.users - n2, 1)
    if method._categorical(plan):
        A = plan.kind.categories(plan.template)
        total_sample = float(np.sum(sv))
        between = float(np.sum(stat_var)) if stat_var is not None \
            else total_sample / spec.samples
        within = max(total_sample - between, 0.0)
        # the estimand counts the spread phase's users too (finite population); the
        # probe's two-record users (hadamard_pairs)
        total = predicted_fallback(method, plan, within, max(between, 0.0), n_left)
        return np.full(K, total / A), total
    G = method.n_groups(plan)
    mech = value_mechanism(spec, eps)
    out = np.zeros(K)
    for g in range(G):
        c = method._comp(plan, g)
        k = max(plan.stage_size(g, 1) + plan.stage_size(g, 3), 1)
        S2 = sv[c] / spec.samples if stat_var is None else stat_var[c]
        out[c] = (value_noise_variance(mech, 2 * method._bound(plan, c), eps) + S2) / k
    return out, float(out.sum())
