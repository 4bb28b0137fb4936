"""The methods a device can run (device half), registered by name.

* ``two-stage`` — Algorithm 1 (stage-I bins, stage-II values);
* ``two-stage-sized`` — Algorithm 1 with stage-I statistics rounded to the bins' edges
  (the collector sizes the window from them and counts them in the estimate);
* ``ssl`` — the user statistic with single-stage Laplace noise (§12);
* ``baseline-a`` — item-level reports of ``m_ref`` samples at ε/m (§12);
* ``baseline-b`` — one sample per user (§12);
* ``oracle`` — sampled records of a categorical kind through a frequency oracle;
* ``hadamard`` — one Hadamard coefficient of the whole dataset in a window sized from the
  users' measured spread (centre, spread, window stages).

Each method's collector half has the same name in ``uldp.collector.methods``.
"""

from uldp.client.methods.base import Method
from uldp.client.methods.baselines import BaselineA, BaselineB
from uldp.client.methods.hadamard import HadamardWindows
from uldp.client.methods.oracle import SampledRecords
from uldp.client.methods.two_stage import TwoStage, TwoStageSized, UserValues

__all__ = ["METHODS", "Method", "method_named"]

METHODS: dict[str, Method] = {m.name: m for m in (TwoStage(), TwoStageSized(), UserValues(),
                                                  BaselineA(), BaselineB(), SampledRecords(),
                                                  HadamardWindows())}


def method_named(name: str) -> Method:
    """The method registered as ``name`` (``KeyError`` if none)."""
    return METHODS[name]
