"""Diagnosis of the SGD rounds on the learning bench's data (issue 27): uldp's rounds with
the number of rounds (and step) forced, printing per run the quality, the θ error against
scikit-learn, the error along the trajectory and the rounds' standard errors and windows.

    python bench/learning_rounds_diag.py linear 10 1 '[{"t0": 30}, {}]' --rep 1

Each variant is a JSON object of ``SGDConfig`` fields replaced in the bench's configuration
(``{}``: ``auto`` as the bench runs it). Data and seeds are those of
``bench/learning_frontier.py sgd``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning_frontier as lf

from uldp.client.randomness import RandomSource
from uldp.collector.learning.fit import run_sgd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=("linear", "logistic"))
    ap.add_argument("d", type=int)
    ap.add_argument("eps", type=float)
    ap.add_argument("variants", help="JSON list of SGDConfig overrides")
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--rep", type=int, default=0)
    a = ap.parse_args(argv)
    src = lf.BlockUsers(a.model, a.users, a.samples, a.d, 1000 + a.rep)
    Xr, yr = src.records(1_000_000)
    ref = lf.sklearn_fit(a.model, Xr, yr)
    print(f"non-private {lf.quality(a.model, a.d, ref):.4f}")
    for v in json.loads(a.variants):
        cfg = replace(lf.config_for(a.model, a.d, a.eps, "auto", a.rep), **v)
        t = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = run_sgd(cfg, src, m_ref=a.samples, progress=False,
                          rng=RandomSource.seeded(f"lf-{a.model}-{a.d}-{a.eps}-{a.rep}"))
        coef = lf.original(a.model, res.theta)
        tr = res.trajectory
        at = sorted({0, len(tr) // 4, len(tr) // 2, len(tr) - 1})
        err = [float(np.linalg.norm(lf.original(a.model, np.asarray(tr[i]["theta"])) - ref))
               for i in at]
        se = [float(np.linalg.norm(tr[i]["std_error"])) for i in at]
        W = np.asarray(tr[len(tr) // 2]["windows_used"])
        print(f"{v} rounds {res.t0} users/round {tr[0]['users']} eta {res.eta} "
              f"quality {lf.quality(a.model, a.d, coef):.4f} "
              f"err {np.linalg.norm(coef - ref):.3f} trajectory err {np.round(err, 3)} "
              f"round se {np.round(se, 3)} mid half-width "
              f"{float(np.mean(W[:, 1] - W[:, 0])) / 2:.3f} ({time.time() - t:.0f} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
