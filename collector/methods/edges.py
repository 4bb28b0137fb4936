"""Clamping made visible: the share of users at the ends of the public range, where a method
measures it (its stage-I histogram), and the advisories a result carries.

See ``docs/analyst.md`` ("Ranges and clamping"). A device clamps every value into the query's
public range ``[lo, hi]`` and never says how many it clamped (the count stays in its local
log: whether and what a device sends depends on public facts only). What the collector can
say is what the privatized reports say: a two-stage method's stage I is a histogram of the
users' statistics over bins covering the range, so its outermost bins estimate the share of
users whose statistic lies at (or within one bin of) each end. A large share means many
users' values are beyond the range — values on another scale than the query assumed, or a
range cut too narrow — and the estimate is biased toward the inside of the range.

:func:`edge_shares` reads them from the stage-I accumulators (published with stage I);
:func:`note_edges` turns them into the result's ``edge_share`` and an advisory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["EDGE_ADVISORY_SHARE", "MIN_EDGE_BINS", "edge_shares", "note_edges"]

#: a stage I with fewer bins than this cannot tell an end of the range from its middle
MIN_EDGE_BINS = 4
#: the share of users in an end bin above which the result carries an advisory
EDGE_ADVISORY_SHARE = 0.2


def edge_shares(plan: Any, accs: dict[int, Any]) -> dict[str, list[list[float] | None]]:
    """Per group, per served component: ``[share at the low end, share at the high end]``
    (the stage-I histogram's outermost bins, clipped to [0, 1]), or None where the grid has
    fewer than :data:`MIN_EDGE_BINS` bins or the group had no stage-I reports."""
    out: dict[str, list[list[float] | None]] = {}
    for g, grp in enumerate(plan.grouping.groups):
        acc = accs.get(g)
        rows: list[list[float] | None] = []
        for i, _ in enumerate(grp.components):
            masses = acc.masses(i) if acc is not None and acc.count else None
            if masses is None or masses.size < MIN_EDGE_BINS:
                rows.append(None)
                continue
            m = np.clip(masses, 0.0, 1.0)
            total = float(m.sum()) or 1.0
            rows.append([float(m[0]) / total, float(m[-1]) / total])
        out[str(g)] = rows
    return out


def note_edges(plan: Any, est: Any, previous: dict[str, Any] | None) -> None:
    """Put stage I's ``edges`` (if it published them) into the estimate as
    ``edge_share`` (per component: ``[low, high]`` or None) and add an advisory when an
    end holds more than :data:`EDGE_ADVISORY_SHARE` of the users."""
    edges = (previous or {}).get("edges")
    if not edges:
        return
    share: list[list[float] | None] = [None] * plan.n_components
    for g, rows in edges.items():
        for c, row in zip(plan.grouping.groups[int(g)].components, rows, strict=True):
            share[c] = row
    est.extra["edge_share"] = share
    worst = max((max(r) for r in share if r is not None), default=0.0)
    if worst > EDGE_ADVISORY_SHARE:
        rng = plan.kind.output_range(plan.template)
        where = f" [{rng[0]:g}, {rng[1]:g}]" if rng is not None else ""
        est.extra.setdefault("advisories", []).append(
            f"stage I puts about {100 * worst:.0f}% of the users at an end of the range{where}: "
            "their values are clamped into it, and the estimate leans toward the inside of "
            "the range; check that the range (--lo/--hi) and the values' scale agree")
