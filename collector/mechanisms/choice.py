"""Which mechanism to use, from public values (``docs/mechanisms.md``).

* :func:`oracle_total_variance` — ``n·E‖f̂ − f‖²`` of a frequency oracle over ``k``
  categories: ``[k q*(1−q*) + p*(1−p*) − q*(1−q*)] / (p* − q*)²`` (the per-category
  variances of ``uldp.collector.mechanisms.base`` summed with ``Σ f_v = 1``: the same for
  every distribution), and :func:`best_oracle` the smallest among the oracles whose
  report has at most :data:`SHORT_REPORTS` integers (OLH only when ``k`` is larger: it is
  never better than OUE, only shorter).
* :func:`scalar_variance` — ``Var`` of one report in the papers' units (``t ∈ [−1, 1]``),
  exactly affine in the second moment ``E t²`` for every randomizer, and
  :func:`best_scalar` the smallest at a given second moment, or at the worst case over
  ``t`` when none is known (then HM for ε ≥ 0.61, Duchi below).
"""

from __future__ import annotations

import functools

import numpy as np

from uldp.client.params import GRID_STEPS
from uldp.collector.mechanisms.base import OracleDecoder, ScalarDecoder

__all__ = ["ORACLE_CHOICES", "SCALAR_CHOICES", "SHORT_REPORTS", "best_oracle",
           "best_scalar", "oracle_total_variance", "scalar_variance"]

#: the oracles and randomizers ``auto`` chooses among
ORACLE_CHOICES = ("laplace", "grr", "oue", "ss", "olh")
SCALAR_CHOICES = ("laplace", "duchi", "pm", "hm")
#: above this many categories the two-integer OLH replaces OUE's k-bit reports
SHORT_REPORTS = 1024


def _oracles() -> dict[str, OracleDecoder]:
    from uldp.collector.mechanisms import ORACLE_DECODERS

    return ORACLE_DECODERS


def _scalars() -> dict[str, ScalarDecoder]:
    from uldp.collector.mechanisms import SCALAR_DECODERS

    return SCALAR_DECODERS


@functools.lru_cache(maxsize=4096)
def oracle_total_variance(name: str, k: int, eps: float) -> float:
    """``n · E‖f̂ − f‖²`` over the ``k`` categories (module docstring)."""
    dec = _oracles()[name]
    if name == "laplace":
        return float(k * dec.variance(np.zeros(1), k, eps)[0])
    p, q = dec.pq(k, eps)
    if p == q:
        return float("inf")
    return (k * q * (1 - q) + p * (1 - p) - q * (1 - q)) / (p - q) ** 2


@functools.lru_cache(maxsize=4096)
def best_oracle(k: int, eps: float) -> str:
    """The oracle of least :func:`oracle_total_variance`; reports longer than
    :data:`SHORT_REPORTS` integers are left out (OLH, two integers, takes their place)."""
    from uldp.client.mechanisms import ORACLES

    names = [n for n in ORACLE_CHOICES
             if ORACLES[n].length(k, eps) <= SHORT_REPORTS and (n != "olh" or
                                                                k > SHORT_REPORTS)]
    return min(names, key=lambda n: oracle_total_variance(n, k, eps))


@functools.lru_cache(maxsize=4096)
def _ends(name: str, eps: float) -> tuple[float, float]:
    """``Var`` in t-units at ``t = 0`` and at ``t = ±1``."""
    dec = _scalars()[name]
    v = dec.variance(np.array([GRID_STEPS / 2, 0.0]), eps) * (2.0 / GRID_STEPS) ** 2
    return float(v[0]), float(v[1])


def scalar_variance(name: str, eps: float, t2: float | None = None) -> float:
    """Variance of one report in t-units at ``E t² = t2`` (None: the worst case over t)."""
    v0, v1 = _ends(name, eps)
    if t2 is None:
        return max(v0, v1)
    return v0 + (v1 - v0) * float(t2)


def best_scalar(eps: float, t2: float | None = None) -> str:
    return min(SCALAR_CHOICES, key=lambda n: scalar_variance(n, eps, t2))
