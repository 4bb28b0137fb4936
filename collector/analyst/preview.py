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
  queries (no support bound) and for two-stage plans (below);
* ``predicted_half_width`` and ``predicted_mse``: the planner's prediction on users alike
  (:meth:`uldp.collector.planner.Plan.reference_prediction`: the noise, the users' spread
  and, for a two-stage plan, what its stage I cannot rule out for all users — bias
  bounds, the clamping of users it missed), the same numbers ``auto`` compared. This is
  ``likely_half_width``: what the console shows *and* plots against ε and the number of
  users, so its curves and its figure agree;
* ``runner_up`` (``auto``): the best candidate of the other family (single-stage against
  two-stage) and what it would likely give;
* ``simulated_half_width`` (two-stage plans, a check): the plan itself run — the
  production program, devices' computation included — on a reference population of
  users alike (every sample at the centre of the support) with seeded noise, the median
  of :data:`SIM_RUNS` runs, on at most :data:`SIM_MAX_USERS` users (widths scaled by
  ``√(n_sim/n)`` beyond).

A preview runs the collector's own checks of a CreateQuery request
(:func:`uldp.collector.service.catalogue.check_create`: the same function CreateQuery
runs), so a preview is refused exactly when creating the query would be, with the same
message; it stores nothing and spends nothing. The analyst console calls it over HTTP
(``uldp.collector.http.console``); :meth:`uldp.collector.analyst.Analyst.preview` runs it
in-process.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.wire import analyst_pb2
from uldp.collector.analyst.types import Preview
from uldp.collector.datasets import FleetData
from uldp.collector.methods.alike import assumption_note, relies_on
from uldp.collector.methods.auto import AUTO_DRAWS
from uldp.collector.models.rounds import sgd_advisories
from uldp.collector.planner import Plan, compile_query
from uldp.collector.programs import program_for
from uldp.collector.programs.synthetic import run_query
from uldp.collector.service.catalogue import check_message
from uldp.collector.service.core import CoreConfig
from uldp.collector.service.errors import ServiceError

__all__ = ["DEFAULT_MAX_USERS", "SIM_MAX_USERS", "SIM_RUNS", "preview_message"]

DEFAULT_MAX_USERS = CoreConfig().max_users  # the collector's default
SIM_RUNS = 3
SIM_MAX_USERS = 20_000


def _alike(plan: Plan) -> FleetData | None:
    """The reference population: users alike, every sample at the support's centre (a
    distribution: every user with the same, even, frequencies); None for kinds whose
    samples carry labels."""
    kind, m, d = plan.spec.kind, plan.spec.samples, plan.spec.dim
    c = plan.kind.offset(plan.template)  # the centre of a ranged query's values
    truth = np.full(plan.n_components, c)
    if kind == "mean":
        return FleetData(lambda k: np.full((k, m), c), truth)
    if kind in ("mean-linf", "mean-l2", "mean-l1"):
        return FleetData(lambda k: np.full((k, m, d), c), truth)
    if kind == "distribution":
        row = (np.arange(m) % d).astype(np.float64)
        return FleetData(lambda k: np.tile(row, (k, 1)), truth)
    return None


def simulated_half_width(plan: Plan, runs: int = SIM_RUNS,
                         max_users: int = SIM_MAX_USERS) -> tuple[float, ...] | None:
    """Median half-widths of the plan's intervals over ``runs`` runs on users alike (see
    the module docstring); None when the kind has no reference population or the plan
    cannot run on fewer users."""
    data = _alike(plan)
    if data is None:
        return None
    n = plan.spec.users
    k = min(n, max_users)
    try:
        spec = replace(plan.spec, users=k)
        widths = [run_query(spec, data, RandomSource.seeded(f"uldp-preview:{r}"))
                  for r in range(runs)]
    except ValueError:  # too few users for the plan's groups at k
        return None
    w = np.median(np.array([e.ci_high - e.ci_low for e in widths]), axis=0)
    return tuple(float(x) / 2 * math.sqrt(k / n) for x in w)


def _note(plan: Plan, shuffled: bool) -> str:
    parts = []
    if shuffled:
        parts.append("shuffle mode: the central (ε, δ) is computed when the query ends, "
                     "from the reports that went through the shuffler")
    if plan.two_stage:
        parts.append("two-stage: the interval also carries what stage I cannot rule out "
                     "for all users (bias bounds, the clamping of the users it missed); "
                     "the likely width is the planner's prediction on users alike, which "
                     "counts them (the noise prediction alone leaves them out)")
    if relies_on(plan):
        parts.append(assumption_note(plan.spec.assume) + ": the two-stage window's bias "
                     "bounds count on it (docs/mechanisms.md)")
    elif plan.spec.assume != "none":
        parts.append(f"assume={plan.spec.assume} stated, not needed: "
                     + assumption_note("none"))
    return " ".join(parts)


def preview_message(msg: analyst_pb2.CreateQueryRequest,
                    max_users: int = DEFAULT_MAX_USERS, simulate: bool = True) -> Preview:
    """The preview of a CreateQuery request (``ServiceError`` INVALID_ARGUMENT when the
    collector would refuse to create it); ``simulate=False`` skips the simulated width of
    a two-stage plan (the planner's prediction only: fast, for curves)."""
    checked = check_message(msg, max_users, program=False)
    assert checked is not None
    spec = checked.spec
    if spec.kind == "sgd":
        quotas = tuple(int(q) for q in program_for(spec).quotas())
        return Preview(spec.kind, float(spec.epsilon), spec.users, spec.samples,
                       spec.method, spec.mode, "", quotas, spec.confidence, (), (), None,
                       advisories=tuple(sgd_advisories(spec)),
                       note="sgd: no width prediction (each step's interval depends on the "
                       "gradients); the result carries every step's standard errors")
    try:
        plan = compile_query(spec)
    except (ValueError, TypeError, KeyError) as exc:  # pragma: no cover - build_spec compiled
        raise ServiceError("INVALID_ARGUMENT", f"invalid query: {exc}") from None
    return _preview(plan, simulate, bool(checked.shuffle))


def _preview(plan: Plan, simulate: bool, shuffled: bool) -> Preview:
    spec = plan.spec
    # the quota of each phase: its stage's users over every group (what the program's
    # placement gives, without drawing the placement of every slot)
    quotas = tuple(sum(plan.stage_size(g, stage) for g in range(plan.n_groups))
                   for stage in plan.phases)
    C = plan.n_components
    z = NormalDist().inv_cdf(0.5 + spec.confidence / 2)
    sd = np.sqrt(np.maximum(plan.predicted_variance(np.zeros(C)), 0.0))
    worst, sim = None, None
    if plan.two_stage:
        sim = simulated_half_width(plan) if simulate else None
    elif spec.moment_p is None:
        b2 = np.square(plan.kind.component_bounds(plan.template))
        worst = tuple(float(z * math.sqrt(max(v, 0.0)))
                      for v in plan.predicted_variance(b2, b2))
    auto: dict[str, Any] | None = dict(plan.auto) or None
    likely, mse = None, None
    if spec.moment_p is None:
        mse_c, half = plan.reference_prediction("alike", draws=AUTO_DRAWS)
        likely, mse = tuple(float(x) for x in half), float(np.sum(mse_c))
    runner = (auto or {}).get("runner_up")
    return Preview(spec.kind, float(spec.epsilon), spec.users, spec.samples, spec.method,
                   spec.mode, plan.grouping.regime, quotas, spec.confidence,
                   tuple(float(x) for x in sd), tuple(float(z * x) for x in sd), worst,
                   tuple(plan.advisories), auto, _note(plan, shuffled), sim, likely, mse,
                   dict(runner) if runner else None)
