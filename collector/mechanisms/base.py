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
have sent never counts. The rule is stated once per decoder, as :class:`Bounds` (each
entry's range, and whether the entries strictly increase) from ``bounds``, applied to a
batch by ``invalid`` and to one report by :meth:`Bounds.breaks`, with its words in
``rule``; the decoder's own decoding applies it, and so do
the collector's ingest (a report is refused before it is stored) and the close (a bad
report stored before that check is skipped and counted), through
``uldp.collector.mechanisms.validity``.

Closing a phase only needs the *sum* of the supports (:func:`support_sum`). A decoder
whose supports are a few categories per report (GRR: one; subset selection: ω) gives them
as ``support_pairs`` — (report, category) index pairs — and the sum is a scatter-add
(``np.bincount``) instead of an ``(n, k)`` array; the others (OUE's k bits, OLH's hash
tables, Laplace's noisy bins are dense by nature) are summed in row chunks of at most
:data:`SCRATCH_BYTES`, so memory does not grow with the reports nor (beyond one chunk
row) with ``k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise
from typing import Protocol

import numpy as np

__all__ = ["SCRATCH_BYTES", "Bounds", "OracleDecoder", "Piece", "ReportError", "ScalarDecoder",
           "bounds", "independent_functional_variance", "independent_mean_variance",
           "moments", "outside", "pure_variance", "require", "support_sum"]

#: bytes of dense (rows × k) support a decoder materializes at once, at most
SCRATCH_BYTES = 16 << 20


class ReportError(ValueError):
    """A report does not fit its task (shape, dtype, range or layout)."""


@dataclass(frozen=True)
class Bounds:
    """A decoder's report rule: entry ``j`` of a report lies in ``[lo[j], hi[j]]`` (one
    pair: every entry in the same range) and, with ``increasing``, the entries strictly
    increase (so are distinct)."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]
    increasing: bool = False

    def invalid(self, r: np.ndarray) -> np.ndarray:
        """Per report (row) of a 2-d ``r``: whether it breaks the rule."""
        r = np.asarray(r)
        if len(self.lo) == 1:
            bad = outside(r, self.lo[0], self.hi[0])
        else:
            bad = np.zeros(r.shape[0], dtype=bool)
            for j, (lo, hi) in enumerate(zip(self.lo, self.hi, strict=True)):
                bad |= outside(r[:, j], lo, hi)
        if self.increasing and r.shape[1] > 1:
            bad |= (r[:, 1:] <= r[:, :-1]).any(axis=1)
        return bad

    def invalid_entries(self, z: np.ndarray) -> np.ndarray:
        """Per entry of ``z`` (any shape; one range): whether it is outside the range."""
        z = np.asarray(z)
        return outside(z.reshape(-1), self.lo[0], self.hi[0]).reshape(z.shape)

    def breaks(self, values: Sequence[int]) -> bool:
        """Whether one report (a list of Python integers) breaks the rule: the same rule
        as :meth:`invalid`, without numpy (the ingest of one report)."""
        if not values:
            return False
        if len(self.lo) == 1:
            if min(values) < self.lo[0] or max(values) > self.hi[0]:
                return True
        elif any(not lo <= v <= hi for v, lo, hi in zip(values, self.lo, self.hi,
                                                        strict=True)):
            return True
        return self.increasing and any(b <= a for a, b in pairwise(values))


def bounds(lo: int, hi: int, increasing: bool = False) -> Bounds:
    """:class:`Bounds` of one range for every entry."""
    return Bounds((int(lo),), (int(hi),), increasing)


class OracleDecoder(Protocol):
    name: str

    def bounds(self, k: int, eps: float) -> Bounds:
        """The oracle's report rule (its one statement, :class:`Bounds`)."""

    def invalid(self, reports: np.ndarray, k: int, eps: float) -> np.ndarray:
        """Per report of ``(n, length)`` integers: whether it breaks the oracle's rule
        (:meth:`rule`) — the one validity rule of the decoder."""

    def rule(self, k: int, eps: float) -> str:
        """The rule a report obeys, in words ("… in [0, k − 1]")."""

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

    def bounds(self, eps: float) -> Bounds:
        """The range of a report integer (its one statement, :class:`Bounds`)."""

    def invalid(self, z: np.ndarray, eps: float) -> np.ndarray:
        """Per report integer of ``z`` (any shape): whether it breaks the randomizer's
        rule (:meth:`rule`) — the one validity rule of the decoder."""

    def rule(self, eps: float) -> str:
        """The rule a report integer obeys, in words."""

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
    """``(Σ_v π_v F_v, Σ_v π_v F_v², Σ_j F_j, Σ_j F_j²)`` per row of ``F`` (``pi``: one
    share vector, or one per row of ``F``)."""
    F = np.atleast_2d(np.asarray(F, dtype=np.float64))
    F2 = F * F
    if np.ndim(pi) == 2:
        return (F * pi).sum(axis=1), (F2 * pi).sum(axis=1), F.sum(axis=1), F2.sum(axis=1)
    return F @ pi, F2 @ pi, F.sum(axis=1), F2.sum(axis=1)


def independent_mean_variance(F: np.ndarray, pi: np.ndarray, p: float, q: float
                              ) -> np.ndarray:
    """:func:`independent_functional_variance` averaged over ``π``."""
    _, m2, _, S2 = moments(F, pi)
    return (q * (1 - q) * S2 + (p * (1 - p) - q * (1 - q)) * m2) / (p - q) ** 2


def check_shape(reports: np.ndarray, width: int) -> np.ndarray:
    """:func:`check_layout`, widened to ``int64``."""
    return check_layout(reports, width).astype(np.int64, copy=False)


def check_layout(reports: np.ndarray, width: int) -> np.ndarray:
    """The reports as a 2-d integer array of ``width`` columns, in their own integer type;
    a :class:`ReportError` naming what is wrong otherwise."""
    r = np.asarray(reports)
    if r.ndim == 1:
        r = r[None, :]
    if r.ndim != 2 or r.shape[1] != width:
        raise ReportError(f"report must have {width} integers, got shape {tuple(r.shape)}")
    if not np.issubdtype(r.dtype, np.integer):
        raise ReportError(f"report entries must be integers, got dtype {r.dtype}")
    return r


def outside(r: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Per row of a 2-d ``r`` (per entry of any other): whether an entry lies outside
    ``[lo, hi]``. A signed array checked against ``[0, hi]`` is compared once, as its
    unsigned view (a negative entry is a huge unsigned one)."""
    r = np.asarray(r)
    if lo == 0 and r.dtype.kind == "i" and hi < 1 << (8 * r.dtype.itemsize - 1):
        bad = r.view(r.dtype.str.replace("i", "u")) > hi
    else:
        bad = (r < lo) | (r > hi)
    return np.asarray(bad.any(axis=1) if bad.ndim == 2 else bad, dtype=bool)


def require(bad: np.ndarray, reports: np.ndarray, rule: str) -> None:
    """Refuse (``ReportError``) when any report is ``bad``, naming the first and ``rule``."""
    if bad.size and bool(bad.any()):
        i = int(np.argmax(bad.reshape(-1)))
        raise ReportError(f"report {_show(np.asarray(reports).reshape(bad.size, -1)[i])} "
                          f"breaks the rule: {rule}")


def _show(row: np.ndarray) -> str:
    vals = [int(v) for v in row[:8]]
    return "[" + ", ".join(map(str, vals)) + (", …]" if row.size > 8 else "]")
