"""The collector half of the report mechanisms: decoding reports without bias and their exact
variance (``docs/mechanisms.md``). The device half is ``uldp.client.mechanisms``.

* A **frequency-oracle decoder** turns each report into its *support*, the 0/1 vector of
  the categories it counts for (Wang et al., USENIX Security 2017, §3: a "pure" protocol).
  With ``p* = P(v ∈ support | v)`` and ``q* = P(v ∈ support | u ≠ v)`` (exact, from the
  design), ``f̂_v = (C_v/n − q*)/(p* − q*)`` is unbiased for the share of reports whose
  value is ``v``, with variance per report
  ``[q*(1−q*) + f_v(p*(1−p*) − q*(1−q*))] / (p* − q*)²``. Discrete Laplace's one-hot
  report is its own (noisy) support: ``p* = 1``, ``q* = 0`` plus the noise variance.
* A **scalar decoder** maps each report integer to an unbiased estimate ``ĝ`` of the grid
  value ``g ∈ [0, 2^16]`` the device privatized, and gives ``Var(ĝ | g)`` exactly.

Every decoder validates its reports first (``ReportError``): a report a device could not
have sent never counts.

Closing a phase only needs the *sum* of the supports (:func:`support_sum`). A decoder
whose supports are a few categories per report (GRR: one; subset selection: ω) gives them
as ``support_pairs`` — (report, category) index pairs — and the sum is a scatter-add
(``np.bincount``) instead of an ``(n, k)`` array; the others (OUE's k bits, OLH's hash
tables, Laplace's noisy bins are dense by nature) are summed in row chunks of at most
:data:`SCRATCH_BYTES`, so memory does not grow with the reports nor (beyond one chunk
row) with ``k``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Protocol

import numpy as np

__all__ = ["SCRATCH_BYTES", "OracleDecoder", "Piece", "ReportError", "ScalarDecoder",
           "independent_functional_variance", "independent_mean_variance", "moments",
           "pure_variance", "support_sum"]

#: bytes of dense (rows × k) support a decoder materializes at once, at most
SCRATCH_BYTES = 16 << 20


class ReportError(ValueError):
    """A report does not fit its task (shape, dtype, range or layout)."""


class OracleDecoder(Protocol):
    name: str

    def support(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        """``(n, k)`` integer supports of ``(n, length)`` reports (validated)."""

    def pq(self, k: int, eps: float) -> tuple[float, float]:
        """``(p*, q*)``."""

    def variance(self, f: np.ndarray, k: int, eps: float) -> np.ndarray:
        """Variance per report of ``f̂_v`` given the share ``f_v`` of values ``v``."""

    def functional_variance(self, F: np.ndarray, k: int, eps: float) -> np.ndarray:
        """``Var(Σ_j F_rj f̂_j | the report's value is v)`` of one report, ``(R, k)`` for the
        ``R`` rows of ``F`` (linear functionals of the decoded indicator vector) and every
        value ``v`` — the noise of an estimate ``Σ_j F_j p̂_j`` (e.g. a mean over grid
        points) per report, covariances between categories included."""

    def mean_functional_variance(self, F: np.ndarray, pi: np.ndarray, k: int, eps: float
                                 ) -> np.ndarray:
        """``Σ_v π_v functional_variance(F)[:, v]`` in closed form (``(R,)``): the noise of
        one report of a population whose values have shares ``π``."""


#: ``(lo, hi, scale, offset, divisor)``: for a report integer ``z`` in ``[lo, hi]`` the
#: decoded value is ``(scale·z − offset)/divisor`` — exactly the float constants the
#: decoder evaluates, as fractions (``ScalarDecoder.pieces``)
Piece = tuple[int, int, Fraction, Fraction, Fraction]


class ScalarDecoder(Protocol):
    name: str

    def decode(self, z: np.ndarray, eps: float) -> np.ndarray:
        """Unbiased ``ĝ`` of every report integer (validated; Laplace: the integers)."""

    def variance(self, g: np.ndarray, eps: float) -> np.ndarray:
        """``Var(ĝ | g)`` of one report of grid value ``g`` (not counting the rounding)."""

    def pieces(self, eps: float) -> list[Piece]:
        """The decode as affine pieces over the valid report integers (their union is the
        valid range): sums of decoded values follow exactly from per-piece counts, sums and
        sums of squares of the integers (``uldp.collector.estimators.accumulators``)."""


def support_rows(k: int) -> int:
    """Rows of a dense ``(rows, k)`` int64 support that fit in :data:`SCRATCH_BYTES`."""
    return max(1, SCRATCH_BYTES // (8 * max(k, 1)))


def support_sum(decoder: OracleDecoder, reports: np.ndarray, k: int, eps: float
                ) -> np.ndarray:
    """``Σ_i support_i`` (length ``k``, int64) of validated reports: a scatter-add of the
    decoder's ``support_pairs`` when it has them, else dense supports in row chunks."""
    counts = getattr(decoder, "support_counts", None)
    if counts is not None:
        return np.asarray(counts(reports, k, eps), dtype=np.int64)
    pairs = getattr(decoder, "support_pairs", None)
    if pairs is not None:
        _, cols = pairs(reports, k, eps)
        return np.bincount(cols, minlength=k).astype(np.int64)
    r = np.asarray(reports)
    out = np.zeros(k, dtype=np.int64)
    step = support_rows(k)
    for lo in range(0, r.shape[0] if r.ndim == 2 else 1, step):
        out += decoder.support(r[lo:lo + step] if r.ndim == 2 else r, k, eps).sum(axis=0)
    return out


def pure_variance(f: np.ndarray, p: float, q: float) -> np.ndarray:
    """Per-report variance of a pure protocol's estimate (module docstring)."""
    f = np.asarray(f, dtype=np.float64)
    return (q * (1 - q) + f * (p * (1 - p) - q * (1 - q))) / (p - q) ** 2


def independent_functional_variance(F: np.ndarray, p: float, q: float) -> np.ndarray:
    """``functional_variance`` of a support whose entries are independent given the value
    (OUE exactly): ``[q(1−q) Σ_{j≠v} F_j² + p(1−p) F_v²] / (p − q)²``."""
    F = np.atleast_2d(np.asarray(F, dtype=np.float64))
    S2 = (F * F).sum(axis=1, keepdims=True)
    return (q * (1 - q) * (S2 - F * F) + p * (1 - p) * F * F) / (p - q) ** 2


def moments(F: np.ndarray, pi: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(Σ_v π_v F_v, Σ_v π_v F_v², Σ_j F_j, Σ_j F_j²)`` per row of ``F``."""
    F = np.atleast_2d(np.asarray(F, dtype=np.float64))
    F2 = F * F
    return F @ pi, F2 @ pi, F.sum(axis=1), F2.sum(axis=1)


def independent_mean_variance(F: np.ndarray, pi: np.ndarray, p: float, q: float
                              ) -> np.ndarray:
    """:func:`independent_functional_variance` averaged over ``π``."""
    _, m2, _, S2 = moments(F, pi)
    return (q * (1 - q) * S2 + (p * (1 - p) - q * (1 - q)) * m2) / (p - q) ** 2


def check_shape(reports: np.ndarray, width: int) -> np.ndarray:
    r = np.asarray(reports)
    if r.ndim == 1:
        r = r[None, :]
    if r.ndim != 2 or r.shape[1] != width:
        raise ReportError(f"report must have {width} integers, got shape {tuple(r.shape)}")
    if not np.issubdtype(r.dtype, np.integer):
        raise ReportError(f"report entries must be integers, got dtype {r.dtype}")
    return r.astype(np.int64, copy=False)


def check_layout(reports: np.ndarray, width: int) -> np.ndarray:
    """:func:`check_shape` without widening: the reports in their own integer type."""
    r = np.asarray(reports)
    if r.ndim == 1:
        r = r[None, :]
    if r.ndim != 2 or r.shape[1] != width:
        raise ReportError(f"report must have {width} integers, got shape {tuple(r.shape)}")
    if not np.issubdtype(r.dtype, np.integer):
        raise ReportError(f"report entries must be integers, got dtype {r.dtype}")
    return r


def check_range(r: np.ndarray, lo: int, hi: int, what: str) -> None:
    if r.size and (r.min() < lo or r.max() > hi):
        bad = int(r.max()) if r.max() > hi else int(r.min())
        raise ReportError(f"{what} {bad} is out of range [{lo}, {hi}]")
