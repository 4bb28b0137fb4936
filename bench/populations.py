"""Synthetic user populations of the population suite (issue 24): users who are alike, users
who differ, point masses at the range's edges, a skewed minority tail (5 % and 10 %, the
reproduction of ``/work/shared/repros/skewed_minority.py``), very concentrated users and
heavy-tailed users — each at any number of users. Every population is per-user arrays of
values on a public range ``[lo, hi]`` (``uldp.collector.simulation.own_data.UserData``).

    from populations import POPULATIONS, make
    pop = make("tail10", 1600, seed=11)   # {"values": [...], "lo": 0, "hi": 100, "note": ...}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["POPULATIONS", "make"]


def _alike(n: int, g: np.random.Generator) -> dict[str, Any]:
    vals = [(g.random(100) < 0.3).astype(float) for _ in range(n)]
    return {"values": vals, "lo": 0.0, "hi": 1.0,
            "note": "users alike: 100 Bernoulli(0.3) samples each"}


def _differ(n: int, g: np.random.Generator) -> dict[str, Any]:
    vals = [(g.random(100) < p).astype(float) for p in g.beta(2, 5, n)]
    return {"values": vals, "lo": 0.0, "hi": 1.0,
            "note": "users who differ: rate Beta(2, 5), 100 Bernoulli samples each"}


def _edges(n: int, g: np.random.Generator) -> dict[str, Any]:
    side = g.random(n)
    vals = []
    for s in side:
        k = int(g.integers(1, 21))
        if s < 0.55:
            vals.append(np.zeros(k))
        elif s < 0.9:
            vals.append(np.ones(k))
        else:
            vals.append((g.random(k) < 0.5).astype(float))
    return {"values": vals, "lo": 0.0, "hi": 1.0,
            "note": "point masses at the range edges: 55 % of the users all 0, 35 % all 1, "
                    "10 % fair coins; 1..20 samples each"}


def _tail(share: float) -> Callable[[int, np.random.Generator], dict[str, Any]]:
    def make_tail(n: int, g: np.random.Generator) -> dict[str, Any]:
        vals = []
        for _ in range(n):
            mu = g.uniform(70, 88) if g.random() < share else min(100, g.normal(95, 3))
            k = int(min(60, max(1, g.geometric(1 / 12))))
            vals.append(np.clip(np.round(mu + g.normal(0, 4, k)), 60, 100))
        return {"values": vals, "lo": 0.0, "hi": 100.0,
                "note": f"a {share:.0%} minority tail: scores on 0..100, {1 - share:.0%} of "
                        f"the users near 95 (sd 3), {share:.0%} anywhere in 70..88, 1..60 "
                        "records each (the reproduction)"}
    return make_tail


def _concentrated(n: int, g: np.random.Generator) -> dict[str, Any]:
    vals = [(g.random(1000) < 0.3).astype(float) for _ in range(n)]
    return {"values": vals, "lo": 0.0, "hi": 1.0,
            "note": "very concentrated: 1000 Bernoulli(0.3) samples each"}


def _heavy(n: int, g: np.random.Generator) -> dict[str, Any]:
    counts = np.floor(10 ** g.uniform(0, 3, n)).astype(int)
    scale = 5.0 * (1 + g.pareto(1.5, n))
    vals = [np.minimum(g.exponential(s, c), 100.0) for s, c in zip(scale, counts, strict=True)]
    return {"values": vals, "lo": 0.0, "hi": 100.0,
            "note": "heavy-tailed: user scales 5·(1 + Pareto(1.5)), exponential values "
                    "capped at 100, counts log-uniform 1..1000"}


POPULATIONS: dict[str, Callable[[int, np.random.Generator], dict[str, Any]]] = {
    "alike": _alike, "differ": _differ, "edges": _edges, "tail5": _tail(0.05),
    "tail10": _tail(0.10), "concentrated": _concentrated, "heavy": _heavy}


def make(name: str, n: int, seed: int = 11) -> dict[str, Any]:
    """Population ``name`` with ``n`` users (fixed seed)."""
    pop = POPULATIONS[name](n, np.random.default_rng([seed, n]))
    pop["name"] = name
    return pop
