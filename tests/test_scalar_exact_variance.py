"""The scalar randomizers' decoded variance (what ``ssl``'s interval and every stage-II
interval state) is the exact variance of the decoded report under the device's exact pmf
(``probability``), not only close to a Monte Carlo estimate (``test_mechanisms_collector``:
6 %). Issue 24: ``ssl`` at n = 10⁵ on users alike covered 0.927 over 400 repetitions; the
interval's variance is exact (this test) and the 95 % interval of a mean of 10⁵ bounded
reports is normal to far below 1 %, so that reading was chance (0.940 over 600,
``bench/results/population_suite_collapsed.md``)."""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise

import numpy as np
import pytest

from uldp.client.mechanisms import SCALARS
from uldp.client.mechanisms.exact import units_of
from uldp.client.mechanisms.pm import pm_design
from uldp.client.params import GRID_STEPS
from uldp.collector.mechanisms import SCALAR_DECODERS


def _segments(name: str, g: int, eps: float) -> list[int]:
    """Breakpoints between which the device's pmf is constant in the report integer
    (PM: its window ``[g, g + W)``; HM: PM's cells, then Duchi's two; Duchi: each integer)."""
    N = pm_design(units_of(eps)).cells
    top = SCALARS[name].limit(eps) + 1
    cuts = {0, top}
    if name in ("pm", "hm"):
        cuts |= {g, g + pm_design(units_of(eps)).W, N}
    if name in ("duchi", "hm"):
        base = N if name == "hm" else 0
        cuts |= {base, base + 1, base + 2}
    return sorted(c for c in cuts if 0 <= c <= top)


@pytest.mark.parametrize("name", ["pm", "hm", "duchi"])
def test_decoded_variance_is_the_exact_variance_under_the_devices_pmf(name):
    dec, dev = SCALAR_DECODERS[name], SCALARS[name]
    for eps in (0.5, 1.0, 4.0):
        z = np.arange(dev.limit(eps) + 1)
        val = dec.decode(z[:, None], eps)[:, 0]
        for g in (0, 19661, GRID_STEPS // 2, GRID_STEPS):
            cuts = _segments(name, g, eps)
            total, mean, second = Fraction(0), 0.0, 0.0
            for lo, hi in pairwise(cuts):
                if hi <= lo:
                    continue
                p = dev.probability(lo, g, eps)
                # the pmf is constant on the segment (checked at its ends and middle)
                assert dev.probability(hi - 1, g, eps) == p
                assert dev.probability((lo + hi) // 2, g, eps) == p
                total += p * (hi - lo)
                seg = val[lo:hi] - g
                mean += float(p) * float(seg.sum())
                second += float(p) * float((seg * seg).sum())
            assert total == 1, (name, eps, g)
            want = float(dec.variance(np.array([float(g)]), eps)[0])
            assert abs(mean) <= 1e-9 * np.sqrt(want), (name, eps, g, mean)
            assert second - mean * mean == pytest.approx(want, rel=1e-9), (name, eps, g)
