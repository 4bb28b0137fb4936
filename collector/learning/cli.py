"""``uldp simulate sgd|classify|regress``: a learning query in-process over a synthetic fleet.

Sections of ``docs/algorithms.md``: §8 (SGD), §9 (classification), §10 (regression), §13.3 S9/S10
(the synthetic problems). Dispatched from ``uldp.collector.cli`` with its ``simulate``
arguments; ``--dist`` selects the problem:

* ``sgd``: ``quadratic`` (default; ½‖θ−x‖², reports ‖θ̂ − θ*‖ and the Theorem 8 bound),
  ``logistic`` (accuracy vs the true model), ``least_squares`` / ``ridge`` (R²);
  ``--bound`` is the gradient clip norm D, ``--dim`` the dimension (default 2).
* ``classify`` / ``regress``: ``sine`` or ``sine:PHASE`` (η(x) = sin(2π(x₁+PHASE))/2, uniform
  x in [0,1]^d, default d = 1): excess risk / L2 risk, the grid and the regime.

``--method`` runs the same query through baseline A/B (§12) or SSL; ``--json`` prints one
JSON object; a progress bar goes to stderr (``--progress`` forces it on).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.learning.estimators import LDPLogisticRegression, LDPSGDRegressor
from uldp.collector.learning.fit import run_classify, run_regress, run_sgd
from uldp.collector.learning.runner import SyntheticUsers
from uldp.collector.learning.synthetic import (
    bayes_risk_sine,
    excess_risk,
    l2_risk,
    logistic_population,
    quadratic_population,
)
from uldp.collector.models.sgd import SGDConfig, theorem8_bound

__all__ = ["simulate_learning"]

SGD_PROBLEMS = ("quadratic", "logistic", "least_squares", "ridge")


def _phase(dist: str | None) -> float:
    name, _, arg = (dist or "sine").partition(":")
    if name != "sine":
        raise ValueError(f"--dist for classify/regress must be sine or sine:PHASE, got {dist!r}")
    try:
        return float(arg) if arg else 0.0
    except ValueError:
        raise ValueError(f"--dist sine:PHASE needs a number, got {dist!r}") from None


def _sine_users(n: int, m: int, d: int, rng: np.random.Generator, task: str,
                phase: float) -> SyntheticUsers:
    from uldp.collector.learning.synthetic import sine_population

    return sine_population(n, m, d, rng, task=task, phase=phase)


def _sgd_once(args: argparse.Namespace, problem: str, d: int, rep: int) -> dict[str, Any]:
    n, m, eps = args.users, args.samples, args.epsilon
    data_rng = np.random.default_rng([args.seed, rep])
    rng = RandomSource.seeded(args.seed * 7919 + rep)
    if problem == "quadratic":
        src, mu = quadratic_population(n, m, d, data_rng)
        cfg = SGDConfig(model="quadratic", epsilon=eps, clip=args.bound, method=args.method,
                        seed=args.seed + rep)
        res = run_sgd(cfg, src, rng=rng, progress=args.progress)
        err = float(np.linalg.norm(res.theta - mu))
        bound = theorem8_bound(n, m, d, eps, args.bound, 1.0, res.eta, res.t0,
                               float(np.linalg.norm(mu)))
        return {"error": err, "theorem8_bound_C1": bound, "theta": res.theta.tolist(),
                "theta_star": mu.tolist(), "t0": res.t0, "eta": res.eta,
                "result": res.to_dict()}
    w = 1.5 * np.cos(np.arange(d) + 1.0)
    test = np.random.default_rng([args.seed, rep, 1])
    Xt = test.uniform(-1, 1, size=(100_000, d))
    if problem == "logistic":
        src = logistic_population(n, m, w, 0.3, data_rng)
        est = LDPLogisticRegression(epsilon=eps, clip=args.bound, method=args.method,
                                    random_state=args.seed + rep, progress=args.progress)
        est.fit(src)
        pt = 1 / (1 + np.exp(-(Xt @ w + 0.3)))
        yt = (test.uniform(size=pt.size) < pt).astype(int)
        return {"accuracy": est.score(Xt, yt),
                "bayes_accuracy": float(np.mean((Xt @ w + 0.3 >= 0) == yt)),
                "coef": est.coef_.tolist(), "intercept": est.intercept_,
                "true_coef": w.tolist(), "t0": est.result_["t0"], "result": est.result_}

    def draw(k: int) -> tuple[np.ndarray, np.ndarray]:
        X = data_rng.uniform(-1, 1, size=(k, m, d))
        return X, np.clip(X @ w / (2 * d) + data_rng.normal(scale=0.1, size=(k, m)), -1, 1)
    reg = LDPSGDRegressor(epsilon=eps, loss=problem, clip=args.bound, method=args.method,
                          alpha=0.01 if problem == "ridge" else 0.0,
                          random_state=args.seed + rep, progress=args.progress)
    reg.fit(SyntheticUsers(n, m, d, draw))
    yt = Xt @ w / (2 * d) + test.normal(scale=0.1, size=Xt.shape[0])
    return {"r2": reg.score(Xt, yt), "coef": reg.coef_.tolist(),
            "true_coef": (w / (2 * d)).tolist(), "t0": reg.result_["t0"],
            "result": reg.result_}


def _grid_once(args: argparse.Namespace, kind: str, d: int, phase: float,
               rep: int) -> dict[str, Any]:
    src = _sine_users(args.users, args.samples, d, np.random.default_rng([args.seed, rep]),
                      kind, phase)
    rng = RandomSource.seeded(args.seed * 7919 + rep)
    if kind == "classify":
        mdl = run_classify(src, epsilon=args.epsilon, rng=rng, method=args.method,
                           seed=args.seed + rep, progress=args.progress)
        ex = excess_risk(mdl.predict, d, phase=phase)
        return {"excess_risk": ex, "risk": bayes_risk_sine() + ex, "bayes_risk":
                bayes_risk_sine(), "M": mdl.M, "K_H": mdl.K, "regime": mdl.info["regime"],
                "result": mdl.to_dict()}
    mdl = run_regress(src, epsilon=args.epsilon, label_bound=1.0, rng=rng, method=args.method,
                      seed=args.seed + rep, progress=args.progress)
    return {"l2_risk": l2_risk(mdl.predict, d, phase=phase), "M": mdl.M, "K_H": mdl.K,
            "regime": mdl.info["regime"], "result": mdl.to_dict()}


def simulate_learning(args: argparse.Namespace) -> int:
    """Entry point of ``uldp simulate sgd|classify|regress`` (returns the exit code)."""
    kind = args.kind
    if getattr(args, "moment", None):
        raise ValueError("--moment is not used by learning queries")
    d = args.dim or (2 if kind == "sgd" else 1)
    if kind == "sgd":
        problem = args.dist or "quadratic"
        if problem not in SGD_PROBLEMS:
            raise ValueError(f"--dist for sgd must be one of {', '.join(SGD_PROBLEMS)}, "
                             f"got {problem!r}")
    elif kind in ("classify", "regress"):
        phase = _phase(args.dist)
    else:
        raise ValueError(f"unknown learning kind {kind!r}")
    t_start = time.perf_counter()
    runs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rep in range(args.reps):
            runs.append(_sgd_once(args, problem, d, rep) if kind == "sgd"
                        else _grid_once(args, kind, d, phase, rep))
    seen = set()
    for w in caught:
        if str(w.message) not in seen:
            seen.add(str(w.message))
            print(f"warning: {w.message}", file=sys.stderr)
    seconds = time.perf_counter() - t_start
    metrics: list[str] = [k for k in ("error", "accuracy", "r2", "excess_risk", "l2_risk")
                          if k in runs[0]]
    out: dict[str, Any] = {
        "kind": kind, "problem": problem if kind == "sgd" else f"sine:{phase:g}",
        "method": args.method, "users": args.users, "samples": args.samples, "dim": d,
        "epsilon": args.epsilon, "reps": args.reps, "seconds": seconds,
        **{f"mean_{k}": float(np.mean([r[k] for r in runs])) for k in metrics},
        **{k: v for k, v in runs[-1].items() if k != "result"},
        "result": runs[-1]["result"],
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{kind} ({out['problem']}) via {args.method}: n={args.users} users x "
          f"m={args.samples} samples, d={d}, epsilon={args.epsilon:g}, {args.reps} rep(s) "
          f"in {seconds:.2f}s")
    for k in metrics:
        print(f"  mean {k}: {out[f'mean_{k}']:.5g}")
    for k in ("theorem8_bound_C1", "bayes_accuracy", "bayes_risk", "t0", "eta", "M", "K_H",
              "regime"):
        if k in out:
            v = out[k]
            print(f"  {k}: {v:.5g}" if isinstance(v, float) and not math.isnan(v)
                  else f"  {k}: {v}")
    for k in ("theta", "theta_star", "coef", "true_coef"):
        if k in out:
            print(f"  {k}: [{', '.join(f'{v:.4f}' for v in out[k][:8])}"
                  f"{', ...' if len(out[k]) > 8 else ''}]")
    for line in describe(out["result"]):
        print(f"  {line}")
    return 0


def describe(result: dict[str, Any]) -> list[str]:
    """Lines stating a learning result's choices: the rounds and their ε accounting (SGD),
    the grid's bias–variance choice (classify / regress)."""
    out = []
    rounds = result.get("rounds") or {}
    if rounds.get("chosen"):
        risks = ", ".join(f"{k} {v:.3g}" for k, v in
                          sorted(rounds["predicted_risk"].items(), key=lambda kv: kv[1]))
        out.append(f"rounds: {rounds['rounds']} {rounds['chosen']} (least predicted risk: "
                   f"{risks})")
    acct = result.get("accounting")
    if acct:
        eps = sorted({r["epsilon"] for r in acct["per_round"]})
        out.append(f"epsilon: {acct['rounds']} round(s) at {', '.join(f'{e:g}' for e in eps)} "
                   f"per device; user-level total {acct['epsilon_per_user']:g} (each user "
                   f"reports in one round; the sum over rounds, "
                   f"{acct['sum_over_rounds']:g}, is not spent by anyone)")
    grid = result.get("grid_choice")
    if grid:
        out.append(f"grid: M = {grid['M']} per axis ({grid['rule']}): predicted "
                   f"bias² {grid['bias2']:.3g} + variance {grid['variance']:.3g}")
    return out
