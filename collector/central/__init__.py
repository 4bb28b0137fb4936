"""Central user-level DP estimators for a trusted collector that holds per-user rows.

See ``docs/central.md``: which estimator to use, its estimand, guarantee and
interval, and how each did on real data. The ``H§``/``P§``/``C§`` references below and
in every module are sections of ``docs/central-algorithms.md``. Every estimator takes
numpy arrays (user id, value[, subset]) and returns a :class:`CentralRelease` (estimate,
interval, estimand and a :class:`PrivacyRecord`)::

    from uldp.collector.central import adaptive_user_mean
    rel = adaptive_user_mean(user_ids, ratings, epsilon=1.0, lo=0.5, hi=5.0)
    rel.estimate, rel.interval, rel.estimand, rel.privacy.epsilon

The modules, one idea each:

* releases and rows: ``privacy`` (:class:`CentralRelease`, :class:`PrivacyRecord`),
  ``data`` (rows grouped by user), ``checks`` (argument checks), ``intervals`` (exact
  ``|DLap|`` quantiles);
* mean of user means: ``mean_of_means`` (simple and adaptive, pure ε);
* PMWM: ``quantile_walk`` (private quantiles, P§2.2–P§2.3), ``pmwm`` (the winsorized
  mean); subsample-and-aggregate: ``sa_statistics`` (group statistics),
  ``subsample_aggregate``;
* HLM: ``huber_solver`` (H§2.2/H§2.4), ``smooth_sensitivity`` (H§2.6–H§2.7, H§2.9
  constants), ``outlier_counts`` (H§2.8), ``huber`` (the estimator); WME: ``wme`` (H§3);
* per-subset statistics: ``occupancy`` (the public array A), ``subset_bounds``
  (sensitivities, biases), ``subset_params`` (parameters, error metric),
  ``subset_noise`` (grid noise), ``clip_user`` (the planner), ``subset_release``
  (the release) — part C;
* ``cli``: ``uldp central`` (one registry entry per ``--method``).

The names below are loaded on first access (PEP 562): ``uldp.collector.central.cli`` is
imported by every ``uldp`` command, and HLM's smooth sensitivity needs scipy.stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from uldp.collector.lazy import lazy_exports

#: public name -> the module of this package that defines it
_EXPORTS: dict[str, str] = {
    "CentralRelease": "privacy",
    "PrivacyRecord": "privacy",
    "UserGroups": "data",
    "group_by_user": "data",
    "AdaptiveParams": "mean_of_means",
    "adaptive_user_mean": "mean_of_means",
    "adaptive_user_mean_of_means": "mean_of_means",
    "user_mean": "mean_of_means",
    "user_mean_of_means": "mean_of_means",
    "PMWMAccuracyWarning": "pmwm",
    "PMWMParams": "pmwm",
    "pmwm_mean": "pmwm",
    "pmwm_practical": "pmwm",
    "BUILTIN_STATISTICS": "sa_statistics",
    "SAParams": "subsample_aggregate",
    "subsample_and_aggregate": "subsample_aggregate",
    "HLMParams": "huber",
    "HLMRegimeWarning": "huber",
    "hlm_from_groups": "huber",
    "hlm_mean": "huber",
    "WMEParams": "wme",
    "wme_from_groups": "wme",
    "wme_mean": "wme",
    "Occupancy": "occupancy",
    "occupancy_from_rows": "occupancy",
    "SubsetStatsParams": "subset_params",
    "ClipUserOptions": "clip_user",
    "ClipUserPlan": "clip_user",
    "plan_clip_user": "clip_user",
    "plan_from_occupancy": "clip_user",
    "subset_stats": "subset_release",
}

__all__ = [
    "BUILTIN_STATISTICS",
    "AdaptiveParams",
    "CentralRelease",
    "ClipUserOptions",
    "ClipUserPlan",
    "HLMParams",
    "HLMRegimeWarning",
    "Occupancy",
    "PMWMAccuracyWarning",
    "PMWMParams",
    "PrivacyRecord",
    "SAParams",
    "SubsetStatsParams",
    "UserGroups",
    "WMEParams",
    "adaptive_user_mean",
    "adaptive_user_mean_of_means",
    "group_by_user",
    "hlm_from_groups",
    "hlm_mean",
    "occupancy_from_rows",
    "plan_clip_user",
    "plan_from_occupancy",
    "pmwm_mean",
    "pmwm_practical",
    "subsample_and_aggregate",
    "subset_stats",
    "user_mean",
    "user_mean_of_means",
    "wme_from_groups",
    "wme_mean",
]

if TYPE_CHECKING:  # what a type checker and an IDE see; at run time, __getattr__ below
    from uldp.collector.central.clip_user import (
        ClipUserOptions,
        ClipUserPlan,
        plan_clip_user,
        plan_from_occupancy,
    )
    from uldp.collector.central.data import UserGroups, group_by_user
    from uldp.collector.central.huber import (
        HLMParams,
        HLMRegimeWarning,
        hlm_from_groups,
        hlm_mean,
    )
    from uldp.collector.central.mean_of_means import (
        AdaptiveParams,
        adaptive_user_mean,
        adaptive_user_mean_of_means,
        user_mean,
        user_mean_of_means,
    )
    from uldp.collector.central.occupancy import Occupancy, occupancy_from_rows
    from uldp.collector.central.pmwm import (
        PMWMAccuracyWarning,
        PMWMParams,
        pmwm_mean,
        pmwm_practical,
    )
    from uldp.collector.central.privacy import CentralRelease, PrivacyRecord
    from uldp.collector.central.sa_statistics import BUILTIN_STATISTICS
    from uldp.collector.central.subsample_aggregate import SAParams, subsample_and_aggregate
    from uldp.collector.central.subset_params import SubsetStatsParams
    from uldp.collector.central.subset_release import subset_stats
    from uldp.collector.central.wme import WMEParams, wme_from_groups, wme_mean


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
