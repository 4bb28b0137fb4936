"""The methods a query can use (collector half), registered by name.

The device half of each is in ``uldp.client.methods`` under the same name:

* ``two-stage`` (:class:`~uldp.collector.methods.two_stage.TwoStage`) — Algorithm 1 with
  the adaptive stage-II interval; ``two-stage-paper`` — with the paper's interval;
  ``two-stage-sized`` (:mod:`~uldp.collector.methods.sized`) — interval and randomizer
  sized from stage I; ``two-stage-adaptive`` — the randomizer chosen from stage I, the
  window the support (nothing clamped);
* ``ssl`` / ``baseline-b`` (:mod:`~uldp.collector.methods.two_stage`) — single stage;
* ``baseline-a`` (:mod:`~uldp.collector.methods.baselines`) — item-level reports;
* ``oracle`` (:mod:`~uldp.collector.methods.oracle`) — sampled records through a frequency
  oracle (categorical kinds); ``oracle-probe`` (:mod:`~uldp.collector.methods.oracle_probe`)
  — the same with a paired-record probe that takes the users' spread out of the interval;
* ``hadamard`` (:mod:`~uldp.collector.methods.hadamard`) — one Hadamard coefficient per user
  in a window sized from the users' measured spread, or the oracle where users differ.
* ``grouped-ssl`` (:mod:`~uldp.collector.methods.grouped`) — the group means and shares of
  a grouped mean (kind ``mean-by``; devices report with ``ssl``).
"""

from uldp.collector.methods.base import MethodPlan, Published
from uldp.collector.methods.baselines import BaselineA
from uldp.collector.methods.grouped import GroupedSSL
from uldp.collector.methods.hadamard import HadamardWindows
from uldp.collector.methods.oracle import SampledRecords
from uldp.collector.methods.oracle_probe import ProbedRecords
from uldp.collector.methods.sized import TwoStageAdaptive, TwoStageSized
from uldp.collector.methods.two_stage import SSL, BaselineB, TwoStage, TwoStagePaper

__all__ = ["METHOD_PLANS", "MethodPlan", "Published"]

_PLANS: tuple[MethodPlan, ...] = (TwoStage(), TwoStagePaper(), TwoStageSized(),
                                  TwoStageAdaptive(), SSL(),
                                  BaselineA(), BaselineB(), SampledRecords(), GroupedSSL(),
                                  HadamardWindows(), ProbedRecords())
METHOD_PLANS: dict[str, MethodPlan] = {m.name: m for m in _PLANS}
