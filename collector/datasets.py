"""Synthetic local datasets with a known truth, for simulations, fleets and tests.

Sections of ``docs/algorithms.md``: §13.2–13.3 (test distributions: Bernoulli ±D, uniform, heavy
tails with finite p-th moment, hard instances of §5.5/§6.4, Zipf for distributions).

``make_fleet_data(kind, dist, ...)`` returns a :class:`FleetData` with a ``draw(users)``
method producing ``(users, m[, d])`` arrays chunk by chunk (a million users never need to
sit in memory at once) and ``truth``: the population quantity the query estimates — the
mean of the support-enforced samples for bounded queries (what the estimator targets), the
plain mean for heavy-tailed queries, the category probabilities for distributions.

Data randomness is *not* privacy noise: it comes from a numpy Generator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["DISTS", "FleetData", "make_fleet_data", "parse_dist"]

DISTS = ("uniform", "bernoulli", "gaussian", "student-t:DF", "sphere", "zipf:S")


def parse_dist(text: str) -> tuple[str, float | None]:
    """``"student-t:3"`` → ``("student-t", 3.0)``; validates the name and parameter."""
    name, _, arg = text.partition(":")
    if name not in ("uniform", "bernoulli", "gaussian", "student-t", "sphere", "zipf"):
        raise ValueError(f"unknown --dist {text!r}; choose from {', '.join(DISTS)}")
    if name in ("student-t", "zipf"):
        try:
            val = float(arg)
        except ValueError:
            raise ValueError(f"--dist {name} needs a number, e.g. {name}:3") from None
        if not math.isfinite(val) or val <= (2.0 if name == "student-t" else 0.0):
            raise ValueError(f"--dist {text!r}: the parameter must be "
                             f"{'> 2 (finite variance)' if name == 'student-t' else '> 0'}")
        return name, val
    if arg:
        raise ValueError(f"--dist {name} takes no parameter")
    return name, None


@dataclass
class FleetData:
    """A population: ``draw(users)`` gives fresh local datasets, ``truth`` their target."""

    draw: Callable[[int], np.ndarray]
    truth: np.ndarray
    moment: tuple[float, float] | None = None  # (p, E|X|^p) when meaningful


def _locations(dim: int, scale: float) -> np.ndarray:
    return 0.3 * scale * np.cos(np.arange(dim) + 1.0) if dim > 1 else np.array([0.3 * scale])


def _clamp_mean_normal(mu: np.ndarray, sd: float, D: float) -> np.ndarray:
    """E[clamp(X, -D, D)] for X ~ N(mu, sd²), elementwise (closed form)."""
    from scipy.stats import norm

    a, b = (-D - mu) / sd, (D - mu) / sd
    inner = mu * (norm.cdf(b) - norm.cdf(a)) + sd * (norm.pdf(a) - norm.pdf(b))
    return inner - D * norm.cdf(a) + D * norm.sf(b)


def _clamp_mean_t(mu: np.ndarray, scale: float, df: float, D: float) -> np.ndarray:
    from scipy import integrate
    from scipy.stats import t as student

    out = []
    for m0 in np.atleast_1d(mu):
        lo, hi = (-D - m0) / scale, (D - m0) / scale
        mid = integrate.quad(lambda z, m0=m0: (m0 + scale * z) * student.pdf(z, df), lo, hi)[0]
        out.append(mid - D * student.cdf(lo, df) + D * student.sf(hi, df))
    return np.array(out)


def _abs_moment_t(mu: float, scale: float, df: float, p: float) -> float:
    from scipy import integrate
    from scipy.stats import t as student

    f = lambda z: abs(mu + scale * z) ** p * student.pdf(z, df)  # noqa: E731
    return float(integrate.quad(f, -np.inf, np.inf, limit=200)[0])


def make_fleet_data(kind: str, dist: str, samples: int, dim: int = 1, bound: float | None = 1.0,
                    rng: np.random.Generator | None = None,
                    moment_p: float | None = None) -> FleetData:
    """Population for ``kind`` drawn from ``dist`` (see module docstring)."""
    rng = rng or np.random.default_rng()
    name, arg = parse_dist(dist)
    spec = _Pop(name, float(arg or 0.0), dist, samples, dim if kind != "mean" else 1,
                1.0 if bound is None else float(bound), bound is None, moment_p, rng)
    builder = _BUILDERS.get(kind)
    if builder is None:
        raise ValueError(f"unknown kind {kind!r}")
    return builder(spec, kind)


@dataclass(frozen=True)
class _Pop:
    name: str
    arg: float
    dist: str
    m: int
    d: int
    D: float
    heavy: bool
    moment_p: float | None
    rng: np.random.Generator

    def shape(self, n: int, vector: bool) -> tuple[int, ...]:
        return (n, self.m, self.d) if vector else (n, self.m)


def _distribution(p: _Pop, kind: str) -> FleetData:
    if p.name == "zipf":
        w = (np.arange(p.d) + 1.0) ** (-p.arg)
    elif p.name == "uniform":
        w = np.ones(p.d)
    else:
        raise ValueError(f"--dist {p.dist!r} is not available for distribution queries; "
                         "use zipf:S or uniform")
    probs = w / w.sum()
    return FleetData(lambda n: p.rng.choice(p.d, size=(n, p.m), p=probs).astype(np.float64),
                     probs)


def _coordinates(p: _Pop, kind: str) -> FleetData:
    """mean and mean-linf: each coordinate around its own location."""
    vec, rng, D = kind != "mean", p.rng, p.D
    loc = _locations(p.d, D)
    if p.name == "uniform":
        return FleetData(lambda n: loc + rng.uniform(-0.7 * D, 0.7 * D, size=p.shape(n, vec)),
                         loc.copy())
    if p.name == "bernoulli":
        thr = np.floor((1 + loc / D) / 2 * 2.0**32).astype(np.uint64)
        return FleetData(lambda n: np.where(rng.integers(0, 2**32, size=p.shape(n, vec),
                                                         dtype=np.uint32) < thr, D, -D),
                         loc.copy())
    if p.name == "gaussian":
        sd = 0.5 * D
        truth = loc.copy() if p.heavy else _clamp_mean_normal(loc, sd, D)
        mom = None
        if p.moment_p is not None:
            from scipy.stats import norm
            q = p.moment_p
            mom = (q, max(float(norm.expect(lambda x: abs(x) ** q, loc=mu, scale=sd))
                          for mu in loc))
        return FleetData(lambda n: loc + sd * rng.standard_normal(p.shape(n, vec)), truth, mom)
    if p.name == "student-t":
        sc, df = 0.5 * D, p.arg
        truth = loc.copy() if p.heavy else _clamp_mean_t(loc, sc, df, D)
        mom = None
        if p.moment_p is not None:
            if p.moment_p >= df:
                raise ValueError(f"student-t:{df:g} has no finite moment of order "
                                 f"{p.moment_p:g}")
            mom = (p.moment_p, max(_abs_moment_t(mu, sc, df, p.moment_p) for mu in loc))
        return FleetData(lambda n: loc + sc * rng.standard_t(df, size=p.shape(n, vec)),
                         truth, mom)
    raise ValueError(f"--dist {p.dist!r} is not available for {kind} queries")


def _l2(p: _Pop, kind: str) -> FleetData:
    d, m, D, rng = p.d, p.m, p.D, p.rng
    v = np.ones(d) / math.sqrt(d)
    if p.name == "sphere":
        def draw(n: int) -> np.ndarray:
            g = rng.standard_normal((n, m, d))
            g /= np.linalg.norm(g, axis=-1, keepdims=True)
            return D * np.where(rng.random((n, m, 1)) < 0.3, v, g)
        return FleetData(draw, 0.3 * D * v)
    if p.name == "bernoulli":
        return _hard_instance(rng, n_dim=d, m=m, D=D)
    if p.name == "student-t" and p.heavy:
        sc, mu = 0.5 / math.sqrt(d), 0.3 * v
        mom = None
        if p.moment_p is not None:  # E||X||^p by Monte Carlo (public in a simulation)
            z = mu + sc * rng.standard_t(p.arg, size=(200_000, d))
            mom = (p.moment_p, float(np.mean(np.linalg.norm(z, axis=1) ** p.moment_p)))
        return FleetData(lambda n: mu + sc * rng.standard_t(p.arg, size=(n, m, d)), mu, mom)
    raise ValueError(f"--dist {p.dist!r} is not available for mean-l2; use sphere or "
                     "bernoulli (or student-t:DF with --moment)")


def _l1(p: _Pop, kind: str) -> FleetData:
    if p.name == "bernoulli":
        return _hard_instance(p.rng, n_dim=p.d, m=p.m, D=p.D)
    raise ValueError(f"--dist {p.dist!r} is not available for mean-l1; use bernoulli")


_BUILDERS = {"distribution": _distribution, "mean": _coordinates, "mean-linf": _coordinates,
             "mean-l2": _l2, "mean-l1": _l1}


def _hard_instance(rng: np.random.Generator, n_dim: int, m: int, D: float) -> FleetData:
    """``P(X = ±D e_k) = (1 ± s v_k)/(2d)`` (§6.4), ``s = 1/2``, alternating ``v``."""
    s = 0.5
    v = np.where(np.arange(n_dim) % 2 == 0, 1.0, -1.0)

    def draw(n: int) -> np.ndarray:
        k = rng.integers(0, n_dim, size=(n, m))
        plus = rng.random((n, m)) < (1 + s * v[k]) / 2
        x = np.zeros((n, m, n_dim))
        np.put_along_axis(x, k[..., None], np.where(plus, D, -D)[..., None], axis=2)
        return x

    return FleetData(draw, D * s * v / n_dim)
