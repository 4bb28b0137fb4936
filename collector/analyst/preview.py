""""Before you run": the interval a query will likely get, from its public parameters.

See ``docs/analyst.md`` ("Preview"). A query's interval comes from the privacy noise of
its reports and from the spread of the users' own statistics. The noise part is a public
fact of the plan: the planner predicts every output's variance from the parameters alone
(:meth:`uldp.collector.planner.Plan.predicted_variance`, spec §4.5 / §5.5 / §12), and
``auto`` resolves its method the same way the collector will. The preview reports

* ``half_width``: ``z · sd`` of that noise, per output — the likely half-width when the
  users' spread is small against the noise (the usual case under local DP);
* ``worst_half_width``: the same with the largest spread the public support allows
  (every per-sample value and user statistic of component ``c`` with variance ``D_c²``)
  — an upper bound before any data exist for a single-stage plan; None for heavy-tailed
  queries (no support bound) and for two-stage plans, whose stage-II interval carries
  bias bounds that depend on what stage I sees (the preview says so in its note).

A preview runs the collector's own checks of a CreateQuery request
(:func:`uldp.collector.service.catalogue.check_create`: the same function CreateQuery
runs), so a preview is refused exactly when creating the query would be, with the same
message; it stores nothing and spends nothing. The analyst console calls it over HTTP
(``uldp.collector.http.console``); :meth:`uldp.collector.analyst.Analyst.preview` runs it
in-process.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from uldp.client.wire import analyst_pb2
from uldp.collector.analyst.types import Preview
from uldp.collector.planner import compile_query
from uldp.collector.programs import program_for
from uldp.collector.service.catalogue import check_create
from uldp.collector.service.core import CoreConfig
from uldp.collector.service.errors import ServiceError

__all__ = ["DEFAULT_MAX_USERS", "preview_message"]

DEFAULT_MAX_USERS = CoreConfig().max_users  # the collector's default


def preview_message(msg: analyst_pb2.CreateQueryRequest,
                    max_users: int = DEFAULT_MAX_USERS) -> Preview:
    """The preview of a CreateQuery request (``ServiceError`` INVALID_ARGUMENT when the
    collector would refuse to create it)."""
    checked = check_create(kind=msg.kind, epsilon=msg.epsilon, dataset=msg.dataset,
                           bound=msg.bound, samples=msg.samples, users=msg.users, dim=msg.dim,
                           method=msg.method, params_json=msg.params_json,
                           phase_timeout_s=msg.phase_timeout_seconds,
                           query_id=msg.query_id, max_users=max_users, program=False)
    spec = checked.spec
    note = ("shuffle mode: the central (ε, δ) is computed when the query ends, from the "
            "reports that went through the shuffler" if checked.shuffle else "")
    if spec.kind == "sgd":
        quotas = tuple(int(q) for q in program_for(spec).quotas())
        return Preview(spec.kind, float(spec.epsilon), spec.users, spec.samples,
                       spec.method, spec.mode, "", quotas, spec.confidence, (), (), None,
                       note="sgd: no width prediction (each step's interval depends on the "
                       "gradients); the result carries every step's standard errors")
    try:
        plan = compile_query(spec)
    except (ValueError, TypeError, KeyError) as exc:  # pragma: no cover - build_spec compiled
        raise ServiceError("INVALID_ARGUMENT", f"invalid query: {exc}") from None
    # the quota of each phase: its stage's users over every group (what the program's
    # placement gives, without drawing the placement of every slot)
    quotas = tuple(sum(plan.stage_size(g, stage) for g in range(plan.n_groups))
                   for stage in plan.phases)
    C = plan.n_components
    z = NormalDist().inv_cdf(0.5 + spec.confidence / 2)
    sd = np.sqrt(np.maximum(plan.predicted_variance(np.zeros(C)), 0.0))
    worst = None
    if plan.two_stage:  # stage II's interval and its bias bounds come from stage I's data
        note = " ".join(x for x in (note, (
            "two-stage: the interval also carries the bias bounds of the clamp stage I "
            "chooses from the data, which this prediction of the noise leaves out; the "
            "realised interval can be wider")) if x)
    elif spec.moment_p is None:
        b2 = np.square(plan.kind.component_bounds(plan.template))
        worst = tuple(float(z * math.sqrt(max(v, 0.0)))
                      for v in plan.predicted_variance(b2, b2))
    return Preview(spec.kind, float(spec.epsilon), spec.users, spec.samples,
                   plan.spec.method, plan.spec.mode, plan.grouping.regime, quotas,
                   spec.confidence, tuple(float(x) for x in sd),
                   tuple(float(z * x) for x in sd), worst, tuple(plan.advisories),
                   dict(plan.auto) or None, note)
