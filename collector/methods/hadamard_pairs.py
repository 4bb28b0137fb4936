"""Method ``hadamard``'s paired records: the fallback's interval without the users' spread.

See ``docs/algorithms.md`` ("Hadamard windows", "The fallback's paired records"). Used by
``uldp.collector.methods.hadamard`` (the centre's tasks, the fallback's estimate) and
``hadamard_predict`` (its predicted error).

The fallback is the one-record frequency oracle. The estimand is the mean over *these*
users of their frequencies ``f_iv``, so the spread between users, ``B_v = Var_i f_iv``, is no
error of it; yet one record per user cannot tell it from the record's own variance, and the
empirical standard error counts it (an interval too wide where the oracle's noise is small:
coverage 0.98–1.00 at ε = 8). A user who reports **two** of its records, sampled without
replacement, through the oracle at ``ε/2`` each — the ``oracle`` report with ``records = 2``
(§17.10; ``hadamard`` stage 1 of a ``distribution`` already carries ``records``: no new
device computation) — shows it. With 0/1 supports ``s₁, s₂`` of category ``v`` and the
oracle's ``(p*, q*)``:

* ``E[(s₁ − s₂)²/4 | i]/(p* − q*)² = Var(report_i | i) + f_iv(1 − f_iv)/(m_i − 1)``: the
  paired difference measures a two-record user's own error, never less;
* ``Cov_i(s₁, s₂)/(p* − q*)² = B_v − E_i f_iv(1 − f_iv)/(m_i − 1) ≤ B_v``: the users'
  spread, never more. Per category a user's supports are one of three counts ``S ∈ {0, 1, 2}``
  and the oracle accumulator's two sums (``Σ S``, ``Σ S²``) give their shares ``a₁, a₂``
  exactly: ``B̂ = (a₂ − μ²)/(p* − q*)²`` with ``μ = a₁/2 + a₂``, its standard error by the delta
  method on the trinomial.

The **probe**: where the oracle's noise at ``ε`` is small enough that the spread can matter
(:data:`PROBE_NOISE`), the centre users of one group (:func:`probe_group`) report two
records. Closing the spread phase after a fallback, the window phase's users report two
records too when the probe measured that a two-record report is the more precise
(:func:`fallback_records`). The estimate (:func:`fallback_estimate`) weighs the one- and
two-record users by their measured precision (a one-record user's variance its empirical one
less ``B̂⁺``, a two-record user's the paired one). Its variance around the mean over *all*
``n`` users (the spread phase's included), with users placed in the parts at random and
``S_k`` a part's empirical variance of a user's estimate (spread included), is exactly
``Σ_k w_k² S_k/n_k − B/n`` in expectation: the spread is left out once, for the population,
at ``B̂`` (:func:`_weighted_variance`). That variance is itself an estimate, noisy where the
probe is small against a category (``B̂`` of a rare category from a few of its users): the
interval holds the error with the stated probability averaged over what the variance can be
given its estimate, that estimate's noise and the bounds it holds (:func:`stated_variance`;
``Var V̂`` by the delta method on the parts' sums). What stays over-stated is ``C/n``, ``C = E_i Σ_v
f_iv(1 − f_iv)/(m_i − 1)``: no moment of the reports tells ``B`` from ``B − C`` without each
``m_i`` (users of few records: skewed's 1–9 963).
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.budget import split_epsilon
from uldp.client.kinds.means import hadamard_rows
from uldp.collector.estimators.estimate import Estimate
from uldp.collector.estimators.transforms import project_simplex
from uldp.collector.mechanisms import ORACLE_DECODERS
from uldp.collector.mechanisms.choice import best_oracle, oracle_total_variance

__all__ = ["PROBE_NOISE", "SPREAD_SIGNIFICANT", "fallback_estimate", "fallback_mse",
           "fallback_records", "pair_oracle", "pair_stats", "predicted_fallback",
           "probe_group", "probe_groups", "spread_measured", "stated_variance", "sums"]

#: the probe runs where the one-record oracle's total noise variance at ε is at most this:
#: a record's sampling variance is at most 1, so the spread can make the interval's
#: variance at least (noise + 1)/noise = 1.5× too large; above it, at most 1.5×
PROBE_NOISE = 2.0
#: :func:`fallback_estimate` with ``spread_gate``: the users' spread is left out of the
#: interval only where the paired records measured it, summed over the categories, above
#: this many of its standard errors (:func:`spread_measured`); else the interval keeps it
#: (the ceiling ``Σ w²S/n``)
SPREAD_SIGNIFICANT = 2.0
#: one group in this many probes (rounded up)
PROBE_SHARE = 8


def _eps(plan: Any) -> float:
    return float(plan.spec.epsilon)


def pair_oracle(method: Any, plan: Any) -> tuple[str, float]:
    """The oracle and ``ε_c`` of a two-record report: ``ε/2`` on the budget's grid."""
    eps2 = split_epsilon(_eps(plan), 2)
    A = plan.kind.categories(plan.template)
    name = best_oracle(A, eps2) if plan.spec.oracle in ("best", "laplace") \
        else plan.spec.oracle
    return name, eps2


def probe_group(method: Any, plan: Any) -> int | None:
    """The group whose centre users report two records, or None (module docstring): a
    distribution, two groups or more, 0/1 supports, the oracle's noise at most
    :data:`PROBE_NOISE`."""
    if not method._categorical(plan) or method.n_groups(plan) < 2:
        return None
    A = plan.kind.categories(plan.template)
    one, (two, _) = method.oracle_name(plan), pair_oracle(method, plan)
    if not (getattr(ORACLE_DECODERS[one], "binary", False)
            and getattr(ORACLE_DECODERS[two], "binary", False)):
        return None
    return 0 if oracle_total_variance(one, A, _eps(plan)) <= PROBE_NOISE else None


def probe_groups(method: Any, plan: Any) -> tuple[int, ...]:
    """The groups whose centre users report two records: the first ``⌈G/8⌉`` (about an
    eighth of the centre's users), none where :func:`probe_group` says no probe."""
    if probe_group(method, plan) is None:
        return ()
    return tuple(range(-(-method.n_groups(plan) // PROBE_SHARE)))


def sums(acc: Any) -> dict[str, Any]:
    """An oracle accumulator's sufficient sums, published (JSON)."""
    return {"records": int(acc.records), "eps": float(acc.eps), "count": int(acc.count),
            "counts": acc.counts.tolist(), "sq": acc.sq.tolist()}


def _pq(name: str, A: int, eps: float) -> tuple[float, float]:
    p, q = ORACLE_DECODERS[name].pq(A, eps)
    return float(p), float(q)


def _shares(s: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, int]:
    """``(a₁, a₂, n)`` from two-record sums: per category the shares of users whose two
    supports sum to 1 and to 2 (exact: ``S ∈ {0, 1, 2}``), and the users."""
    n = max(int(s["count"]), 1)
    counts, sq = np.asarray(s["counts"], np.float64), np.asarray(s["sq"], np.float64)
    a2 = (sq - counts) / 2 / n
    return counts / n - 2 * a2, a2, n


def pair_stats(s: dict[str, Any], name: str, A: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(f̂, V, B̂, se(B̂))`` per category from two-record sums ``s`` (module docstring):
    the frequencies, a user's paired variance, the users' spread and its standard error."""
    p, q = _pq(name, A, float(s["eps"]))
    a1, a2, n = _shares(s)
    mu = a1 / 2 + a2
    d2 = (p - q) ** 2
    g1, g2 = -mu, 1 - 2 * mu
    var_b = (g1 * g1 * a1 * (1 - a1) + g2 * g2 * a2 * (1 - a2) - 2 * g1 * g2 * a1 * a2) / n
    return ((mu - q) / (p - q), a1 / 4 / d2, (a2 - mu * mu) / d2,
            np.sqrt(np.maximum(var_b, 0.0)) / d2)


def _one_stats(s: dict[str, Any], name: str, A: int) -> tuple[np.ndarray, np.ndarray]:
    """``(f̂, S²)`` per category from one-record sums: frequencies, a user's empirical
    variance (users' spread included)."""
    p, q = _pq(name, A, float(s["eps"]))
    n = int(s["count"])
    counts, sq = np.asarray(s["counts"], np.float64), np.asarray(s["sq"], np.float64)
    mean = counts / max(n, 1)
    S2 = (sq - n * mean**2) / max(n - 1, 1) / (p - q) ** 2
    return (mean - q) / (p - q), np.maximum(S2, 0.0)


def _two_empirical(s: dict[str, Any], name: str, A: int) -> np.ndarray:
    """Per category the empirical variance of a two-record user's estimate
    ``(S/2 − q*)/(p* − q*)`` (users' spread included), from its sums ``Σ S``, ``Σ S²``."""
    p, q = _pq(name, A, float(s["eps"]))
    n = int(s["count"])
    counts, sq = np.asarray(s["counts"], np.float64), np.asarray(s["sq"], np.float64)
    var_S = (sq - counts * counts / max(n, 1)) / max(n - 1, 1)
    return np.maximum(var_S, 0.0) / 4 / (p - q) ** 2


def _floor(name: str, A: int, eps: float) -> float:
    """The least variance of a one-record report given the user: the oracle's own."""
    p, q = _pq(name, A, eps)
    return min(p * (1 - p), q * (1 - q)) / (p - q) ** 2


def _add(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    if a is None:
        return dict(b)
    return a | {"count": a["count"] + b["count"],
                "counts": (np.add(a["counts"], b["counts"])).tolist(),
                "sq": (np.add(a["sq"], b["sq"])).tolist()}


def _variances(method: Any, plan: Any, one: dict[str, Any] | None,
               two: dict[str, Any] | None) -> dict[str, Any]:
    """Per category: each part's frequencies and a user's variance, the spread, and what
    the noise of the interval's variance needs (:func:`_weighted_variance`): the one-record
    part's ``Var Ŝ²`` and the two-record part's trinomial shares."""
    A = plan.kind.categories(plan.template)
    one_name, (two_name, eps2) = method.oracle_name(plan), pair_oracle(method, plan)
    out: dict[str, Any] = {}
    if two is not None and two["count"] >= 2:
        fb, Vb, B, seB = pair_stats(two, two_name, A)
        out["b"] = (fb, np.maximum(Vb, _floor(two_name, A, eps2) / 2), int(two["count"]))
        out["B"], out["seB"] = B, seB
        out["T"] = _two_empirical(two, two_name, A)
        p2, q2 = _pq(two_name, A, float(two["eps"]))
        out["shares"] = (*_shares(two), (p2 - q2) ** 2)
    if one is not None and one["count"] >= 2:
        fa, S2 = _one_stats(one, one_name, A)
        p1, q1 = _pq(one_name, A, float(one["eps"]))
        mu = np.asarray(one["counts"], np.float64) / int(one["count"])
        # a Bernoulli sample variance: Var s² = (μ₄ − σ⁴)/n = μ(1 − μ)(1 − 2μ)²/n
        out["varS2"] = mu * (1 - mu) * (1 - 2 * mu) ** 2 / int(one["count"]) \
            / (p1 - q1) ** 4
        # the weights: a one-record user's variance less the spread at its estimate
        Va = np.maximum(S2 - np.maximum(out.get("B", 0.0), 0.0),
                        _floor(one_name, A, _eps(plan)))
        out["a"], out["S2"] = (fa, Va, int(one["count"])), S2
    return out


def _weighted_variance(method: Any, plan: Any, v: dict[str, Any], w: np.ndarray,
                       n_all: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per category the variance of the weighted estimate ``Σ_k w_k Ȳ_k`` (parts ``k``: one-
    and two-record users) around the mean over all ``n`` users (module docstring), and the
    degrees of freedom of that variance's estimate. With ``S_k`` a part's empirical
    variance of a user's estimate (its users' spread included) and the users placed in the
    parts at random, ``Σ_k w_k² S_k/n_k − B/n`` exactly in expectation — the users' spread
    ``B`` left out once for the whole population, so the spread phase's users (in the
    estimand, not the estimate) need no bound of it. ``B`` enters at the paired records'
    ``B̂`` (``E B̂ = B − E_i f_iv(1 − f_iv)/(m_i − 1)`` is at most ``B``: the interval
    over-states by that much over ``n``, never under).

    Returns ``(V̂, Var V̂, floor, ceiling)``: ``V̂ = Σ_k w_k² S_k/n_k − B̂/n`` uncut; its
    noise by the delta method — the one-record ``Ŝ²`` a Bernoulli sample variance, the
    two-record ``T̂`` and ``B̂`` jointly on their trinomial — large where the probe is small
    against a category (``B̂`` of a rare category from a few of its users); and the bounds
    the variance is known to hold: at least the oracle's noise of each part, at most
    ``Σ_k w_k² S_k/n_k`` (``B ≥ 0``). :func:`stated_variance` makes the interval's."""
    A = plan.kind.categories(plan.template)
    one_name, (two_name, eps2) = method.oracle_name(plan), pair_oracle(method, plan)
    keys = [k for k in ("a", "b") if k in v]
    parts = [(v["S2"], v["a"][2], _floor(one_name, A, _eps(plan))) if k == "a"
             else (v["T"], v["b"][2], _floor(two_name, A, eps2) / 2) for k in keys]
    total = sum(wk * wk * Sk / nk for wk, (Sk, nk, _) in zip(w, parts, strict=True))
    floor = sum(wk * wk * fl / nk for wk, (_, nk, fl) in zip(w, parts, strict=True))
    raw = total - v.get("B", 0.0) / max(n_all, 1)
    noise = np.zeros(A)
    for wk, k, (_, nk, _) in zip(w, keys, parts, strict=True):
        c = wk * wk / nk
        if k == "a":
            noise = noise + c * c * v["varS2"]
            continue
        a1, a2, n2, d2 = v["shares"]
        mu = a1 / 2 + a2
        # ∂(c T̂ − B̂/n)/∂(a₁, a₂): T̂ = Var(S)/(4 d²), Var(S) = a₁ + 4a₂ − (a₁ + 2a₂)²;
        # B̂ = (a₂ − μ²)/d², μ = a₁/2 + a₂
        g1 = (c * (1 - 4 * mu) / 4 + mu / max(n_all, 1)) / d2
        g2 = (c * (1 - 2 * mu) - (1 - 2 * mu) / max(n_all, 1)) / d2
        noise = noise + np.maximum(g1 * g1 * a1 * (1 - a1) + g2 * g2 * a2 * (1 - a2)
                                   - 2 * g1 * g2 * a1 * a2, 0.0) / n2
    floor = np.broadcast_to(floor, raw.shape)
    return raw, noise, floor, np.maximum(total, floor)


def stated_variance(raw: np.ndarray, noise: np.ndarray, floor: np.ndarray,
                    ceiling: np.ndarray, level: float) -> np.ndarray:
    """The variance ``V*`` whose interval ``±z√V*`` holds the estimate's error with
    probability ``level`` averaged over what its variance can be given its estimate
    (docs/algorithms.md, "The interval of a noisy variance"): ``V ~ N(V̂, Var V̂)`` cut to
    the bounds it is known to hold, ``floor ≤ V ≤ ceiling``, and
    ``E_V[2Φ(z√(V*/V)) − 1] = level`` (32-point Gauss–Legendre over the cut normal,
    bisection on ``√V*``). ``V̂`` cut to the bounds where it is exact. (Student's ``t`` is
    the same construction for a ``χ²`` noise of ``V̂`` — the posterior of ``V`` under
    Jeffreys' prior; here the noise is near-normal with a known standard error, and ``t``
    at ``ν = 2V̂²/Var V̂`` covered 0.98: bench/fallback_variance.py.)"""
    z = NormalDist().inv_cdf(0.5 + level / 2)
    raw = np.asarray(raw, np.float64)
    sd = np.sqrt(np.maximum(np.asarray(noise, np.float64), 0.0))
    lo_b = np.broadcast_to(np.asarray(floor, np.float64), raw.shape)
    hi_b = np.maximum(np.broadcast_to(np.asarray(ceiling, np.float64), raw.shape), lo_b)
    point = np.clip(raw, lo_b, hi_b)
    a = np.maximum(lo_b, raw - 8 * sd)
    b = np.minimum(hi_b, raw + 8 * sd)
    spread = (sd > 0) & (b > a)  # else the bounds hold V̂ to a point: that point
    x, wq = np.polynomial.legendre.leggauss(32)
    V = (a + b)[..., None] / 2 + (b - a)[..., None] / 2 * x
    w = wq * np.exp(-0.5 * ((V - raw[..., None]) / np.where(sd > 0, sd, 1.0)[..., None]) ** 2)
    w = w / np.maximum(w.sum(axis=-1, keepdims=True), 1e-300)
    sV = np.sqrt(np.maximum(V, 1e-300))
    lo, hi = np.zeros_like(raw), 4 * z * np.sqrt(np.maximum(b, point))
    for _ in range(60):
        mid = (lo + hi) / 2
        short = np.sum(w * _cover(mid[..., None] / sV), axis=-1) < level
        lo, hi = np.where(short, mid, lo), np.where(short, hi, mid)
    return np.where(spread & (np.sum(w, axis=-1) > 0), (hi / z) ** 2, point)


def _cover(h: np.ndarray) -> np.ndarray:
    """``2Φ(h) − 1``: a normal error's chance to fall within ``±h`` standard deviations."""
    from scipy.special import erf

    return np.asarray(erf(h / np.sqrt(2.0)))


def fallback_records(method: Any, plan: Any, centre: dict[str, Any]) -> int:
    """The window phase's records after a fallback: 2 where the probe measured a two-record
    report (paired variance) more precise than a one-record one (its variance less the
    spread), else 1."""
    parts = centre.get("sums", {})
    if "2" not in parts or "1" not in parts:
        return 1
    v = _variances(method, plan, parts["1"], parts["2"])
    if "a" not in v or "b" not in v:
        return 1
    one = float(np.sum(np.maximum(v["S2"] - v["B"], 0.0)))
    return 2 if float(np.sum(v["b"][1])) < one else 1


def spread_measured(B: np.ndarray, seB: np.ndarray) -> bool:
    """Whether the probe measured that users differ at all: the spread summed over the
    categories above :data:`SPREAD_SIGNIFICANT` of its standard error (the categories'
    ``B̂`` taken as independent). One test for the whole population, as the Hadamard
    method's spread phase makes one before its fallback."""
    B, seB = np.asarray(B, np.float64), np.asarray(seB, np.float64)
    return bool(np.sum(B) > SPREAD_SIGNIFICANT * np.sqrt(np.sum(seB * seB)))


def fallback_estimate(method: Any, plan: Any, accs: dict[int, Any], centre: dict[str, Any],
                      spread_gate: bool = False) -> Estimate:
    """The fallback's estimate: the centre's and the window phase's oracle reports, one-
    and two-record users weighed by their measured precision (module docstring).

    ``spread_gate`` (method ``oracle-probe``, which runs on public values alone, with no
    measurement that its users differ): the interval leaves the users' spread out only
    where the probe measured that they differ (:func:`spread_measured`), else every
    category states the ceiling ``Σ w²S/n``. Users alike have ``B = 0``, where the
    variance sits at that ceiling and any cut below it under-covers (k = 256, m = 100,
    ε = 8: 0.903; a 1 200-user shuffled query: 5 of 7 runs missed). The Hadamard
    fallback runs only after its spread phase measured that users differ, and keeps the
    calibrated cut everywhere."""
    A = plan.kind.categories(plan.template)
    parts: dict[str, dict[str, Any] | None] = {
        k: dict(v) for k, v in centre.get("sums", {}).items()}
    for acc in accs.values():
        key = str(int(acc.records))
        parts[key] = _add(parts.get(key), sums(acc))
    v = _variances(method, plan, parts.get("1"), parts.get("2"))
    n_all = max(plan.spec.users, 1)
    present = [v[k] for k in ("a", "b") if k in v]
    if not present:
        f, var, n = np.full(A, 1.0 / A), np.full(A, 0.25), 0
    else:
        prec = np.array([n_ / max(float(np.sum(V)), 1e-300) for _, V, n_ in present])
        w = prec / prec.sum()
        f = sum(wk * fk for wk, (fk, _, _) in zip(w, present, strict=True))
        n = sum(nk for _, _, nk in present)
        raw, noise, floor, ceiling = _weighted_variance(method, plan, v, w, n_all)
        var = stated_variance(raw, noise, floor, ceiling, plan.spec.confidence)
        if spread_gate and "B" in v and not spread_measured(v["B"], v["seB"]):
            var = np.maximum(var, ceiling)
    se = np.sqrt(np.maximum(var, 0.0))
    z = NormalDist().inv_cdf(0.5 + plan.spec.confidence / 2)
    K = plan.n_components
    extra: dict[str, Any] = {
        "components": hadamard_rows(np.asarray(f)[None], K)[0],
        "projected": project_simplex(np.asarray(f)), "reports": int(n),
        "regime": plan.grouping.regime, "mechanism": method.oracle_name(plan),
        "paired": {"users": int(v["b"][2]) if "b" in v else 0,
                   "spread": float(np.sum(v["B"])) if "B" in v else None}}
    return Estimate(np.clip(f, 0, 1), se, np.clip(f - z * se, 0, 1),
                    np.clip(f + z * se, 0, 1), plan.spec.confidence,
                    counts={"reports": int(n)}, extra=extra)


def predicted_fallback(method: Any, plan: Any, within: float, between: float,
                       n_left: int) -> float:
    """The fallback's predicted total error (module docstring) on users whose records
    spread ``within`` (``Σ_v E_i f_iv(1 − f_iv)``) and who spread ``between``
    (``Σ_v Var_i f_iv``), over the ``n_left`` users the spread phase left: the
    one-record oracle, or with the probe the precision-weighted mix of one- and two-record
    users (the window phase's users on two records where that predicts less)."""
    A, eps, n = plan.kind.categories(plan.template), _eps(plan), plan.spec.users
    N1 = oracle_total_variance(method.oracle_name(plan), A, eps)
    V1 = N1 + within
    probes = probe_groups(method, plan)
    if not probes:
        return (V1 + (1.0 - n_left / n) * between) / n_left
    name2, eps2 = pair_oracle(method, plan)
    m = int(plan.spec.samples)
    V2 = oracle_total_variance(name2, A, eps2) / 2 \
        + (within * (m - 2) / (2 * (m - 1)) if m >= 2 else 0.0)
    nb = sum(plan.stage_size(g, 1) for g in probes)
    n3 = n_left - sum(plan.stage_size(k, 1) for k in range(method.n_groups(plan)))
    if V2 < V1:
        nb += max(n3, 0)
    na = max(n_left - nb, 0)
    prec = np.array([na / V1, nb / V2])
    if prec.sum() <= 0:
        return (V1 + between) / max(n_left, 1)
    w = prec / prec.sum()
    sizes = np.maximum([na, nb], 1)
    var = float(np.sum(w * w * np.array([V1, V2]) / sizes))
    return var + between * max(float(np.sum(w * w / sizes)) - 1.0 / n, 0.0)


def fallback_mse(method: Any, plan: Any, centre: dict[str, Any], n_left: int) -> float | None:
    """The fallback's error the spread rule weighs against the windows', from what the
    centre measured, where the probe ran: :func:`predicted_fallback` at the centre's
    frequencies and its measured spread ``Σ_v B̂_v`` (cut to ``[0, Σ_v f_v(1 − f_v)]``) —
    the fallback the query would run, not the one-record oracle's (which counts the spread
    and so made the windows look better than they are). None without the probe's sums."""
    parts = centre.get("sums", {})
    if "2" not in parts or not probe_groups(method, plan):
        return None
    v = _variances(method, plan, parts.get("1"), parts["2"])
    if "B" not in v:
        return None
    f = np.clip(np.asarray(centre["freq"], dtype=np.float64), 0, 1)
    total = max(1.0 - float(f @ f), 0.0)
    between = min(max(float(np.sum(v["B"])), 0.0), total)
    return predicted_fallback(method, plan, total - between, between, n_left)
