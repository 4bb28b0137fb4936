"""What the analyst API returns: typed, immutable records of queries, results, previews.

See ``docs/analyst.md``. :class:`Query` and :class:`Phase` mirror ``uldp.v1.Query`` with
states as words (``running``, ``done``, ...) and JSON fields decoded; :class:`Result` is
a finished query's estimate with everything needed to quote it honestly — the estimand,
the interval and its level, the method ``auto`` chose, the ε each device spent and, for
a query run through a shuffler, the central (ε, δ); :meth:`Result.to_frame` gives one
row per estimated component (pandas, the ``analyst`` extra). :class:`Preview` is what a
query will likely give before it runs (``uldp.collector.analyst.preview``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from uldp.client.wire import analyst_pb2, common_pb2

__all__ = ["ESTIMANDS", "Phase", "Preview", "Query", "Result", "estimand"]

QUERY_STATE = {common_pb2.QUERY_STATE_RUNNING: "running", common_pb2.QUERY_STATE_DONE: "done",
               common_pb2.QUERY_STATE_CANCELLED: "cancelled",
               common_pb2.QUERY_STATE_FAILED: "failed"}
PHASE_STATE = {common_pb2.PHASE_STATE_PENDING: "pending", common_pb2.PHASE_STATE_OPEN: "open",
               common_pb2.PHASE_STATE_CLOSING: "closing",
               common_pb2.PHASE_STATE_CLOSED: "closed"}

#: what each kind's values estimate (invariant 7: every estimate names its estimand)
ESTIMANDS = {
    "mean": "mean over users of each user's mean",
    "mean-by": "per group: mean over the group's users of each user's mean, then each "
               "group's share of the users who reported",
    "mean-linf": "mean over users of each user's mean vector",
    "mean-l2": "mean over users of each user's mean vector",
    "mean-l1": "mean over users of each user's mean vector",
    "distribution": "mean over users of each user's category frequencies",
    "classify": "per grid cell: mean over users of each user's mean of label·1{x in cell} "
                "(its sign is the classifier)",
    "regress": "per grid cell: mean over users of each user's mean of label·1{x in cell}, "
               "then of 1{x in cell} (their ratio is the regression function)",
    "sgd": "model parameters after the private SGD steps (each step a mean over users of "
           "each user's clipped gradient)",
}


def estimand(kind: str) -> str:
    """The estimand of a query kind's values (``ESTIMANDS``; a kind added later without an
    entry reads as the mean over users of each user's statistic)."""
    return ESTIMANDS.get(kind, "mean over users of each user's statistic, through the "
                               "kind's output transform")


def _json(text: str) -> Any:
    return json.loads(text) if text else None


@dataclass(frozen=True)
class Phase:
    """One phase of a query: its state and how many answers it has of its quota (reports,
    and declines: slots whose device refused its task)."""

    index: int
    state: str
    quota: int
    received: int
    opened_at_ms: int = 0
    deadline_ms: int = 0
    closed_at_ms: int = 0
    published: dict[str, Any] | None = None
    declined: int = 0

    @property
    def fraction(self) -> float:
        """Share of the quota answered, reports and declines (0 to 1)."""
        return min((self.received + self.declined) / self.quota, 1.0) if self.quota else 0.0

    @classmethod
    def from_message(cls, p: analyst_pb2.PhaseStatus) -> Phase:
        return cls(int(p.index), PHASE_STATE.get(p.state, "unknown"), int(p.quota),
                   int(p.received), int(p.opened_at_ms), int(p.deadline_ms),
                   int(p.closed_at_ms), _json(p.published_json), int(p.declined))


@dataclass(frozen=True)
class Query:
    """A query as the collector reports it (``uldp.v1.Query``)."""

    query_id: str
    kind: str
    dataset: str
    epsilon: float
    state: str
    current_phase: int
    phases: tuple[Phase, ...]
    assigned: int
    target_users: int
    created_at_ms: int = 0
    finished_at_ms: int = 0
    spec: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    allow_simulated: bool = False

    @property
    def finished(self) -> bool:
        """The query left ``running`` (done, cancelled or failed)."""
        return self.state != "running"

    @property
    def method(self) -> str:
        """The method of the stored spec (what ``auto`` resolves to is in the result)."""
        return str(self.spec.get("method", ""))

    @classmethod
    def from_message(cls, q: analyst_pb2.Query) -> Query:
        return cls(q.query_id, q.kind, q.dataset, float(q.epsilon),
                   QUERY_STATE.get(q.state, "unknown"), int(q.current_phase),
                   tuple(Phase.from_message(p) for p in q.phases), int(q.assigned),
                   int(q.target_users), int(q.created_at_ms), int(q.finished_at_ms),
                   _json(q.spec_json) or {}, q.error, bool(q.allow_simulated))

    def to_dict(self) -> dict[str, Any]:
        """The query as JSON-ready data (``uldp query ... --json``)."""
        return {"query_id": self.query_id, "kind": self.kind, "dataset": self.dataset,
                "epsilon": self.epsilon, "state": self.state,
                "current_phase": self.current_phase, "assigned": self.assigned,
                "target_users": self.target_users,
                "phases": [{"index": p.index, "state": p.state, "quota": p.quota,
                            "received": p.received, "declined": p.declined,
                            "deadline_ms": p.deadline_ms,
                            "published": p.published} for p in self.phases],
                "created_at_ms": self.created_at_ms, "finished_at_ms": self.finished_at_ms,
                "spec": self.spec or None, "error": self.error,
                "allow_simulated": self.allow_simulated}


@dataclass(frozen=True)
class Central:
    """The central user-level guarantee of a query run through a shuffler."""

    epsilon: float
    delta: float
    local_epsilon: float
    amplified: bool
    note: str = ""


@dataclass(frozen=True)
class Result:
    """A finished query's estimate (see the module docstring)."""

    query_id: str
    kind: str
    dataset: str
    values: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]
    std_error: tuple[float, ...]
    confidence: float
    estimand: str
    method: str
    epsilon: float
    reports_per_phase: tuple[int, ...]
    auto: dict[str, Any] | None = None
    central: Central | None = None
    estimate: dict[str, Any] = field(default_factory=dict)

    @property
    def widths(self) -> tuple[float, ...]:
        """Interval widths, per component."""
        return tuple(h - lo for lo, h in zip(self.ci_low, self.ci_high, strict=True))

    @property
    def advisories(self) -> tuple[str, ...]:
        """Notes the result carries: the plan's (e.g. too few users for an informative
        interval) and the data's (many users at an end of the range; docs/analyst.md)."""
        return tuple(str(a) for a in self.estimate.get("advisories") or ())

    def groups(self) -> list[dict[str, Any]]:
        """A grouped mean (kind ``mean-by``): one record per group — ``group`` (its
        name), ``mean`` with ``mean_low``/``mean_high``, ``share`` of the users who
        reported with ``share_low``/``share_high``, and ``users`` (their number) with
        ``users_low``/``users_high``. Empty for every other kind."""
        names = self.estimate.get("groups")
        if self.kind != "mean-by" or not names:
            return []
        G, counts = len(names), self.estimate.get("counts_by_group") or {}
        n = lambda key, g: float((counts.get(key) or [math.nan] * G)[g])  # noqa: E731
        return [{"group": str(name), "mean": self.values[g], "mean_low": self.ci_low[g],
                 "mean_high": self.ci_high[g], "share": self.values[G + g],
                 "share_low": self.ci_low[G + g], "share_high": self.ci_high[G + g],
                 "users": n("values", g), "users_low": n("ci_low", g),
                 "users_high": n("ci_high", g)} for g, name in enumerate(names)]

    @property
    def edge_share(self) -> tuple[tuple[float, float] | None, ...] | None:
        """Two-stage methods: per component, the share of users stage I puts at the low
        and the high end of the public range (None where it cannot tell; None for the
        methods without a stage I)."""
        share = self.estimate.get("edge_share")
        if share is None:
            return None
        return tuple(None if r is None else (float(r[0]), float(r[1])) for r in share)

    @classmethod
    def from_messages(cls, r: analyst_pb2.QueryResult, q: Query) -> Result:
        est = json.loads(r.estimate_json) if r.estimate_json else {}
        privacy = est.get("privacy")
        central = None
        if isinstance(privacy, dict) and privacy.get("central_epsilon") is not None:
            central = Central(float(privacy["central_epsilon"]),
                              float(privacy.get("delta", 0.0)),
                              float(privacy.get("local_epsilon", q.epsilon)),
                              bool(privacy.get("amplified", False)),
                              str(privacy.get("note", "")))
        se = est.get("std_error") or [float("nan")] * len(r.values)
        auto = est.get("auto") or None
        method = str(est.get("method") or q.method)
        return cls(r.query_id, r.kind, q.dataset, tuple(r.values), tuple(r.ci_low),
                   tuple(r.ci_high), tuple(float(x) for x in se), float(r.confidence),
                   estimand(r.kind), method, q.epsilon, tuple(int(x) for x in
                                                              r.reports_per_phase),
                   auto, central, est)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data: the collector's estimate object with the
        query id, kind, estimand, ε and the central guarantee (``uldp query result
        --json``)."""
        out = {"query_id": self.query_id, "kind": self.kind, "dataset": self.dataset,
               "estimand": self.estimand, "epsilon": self.epsilon,
               "reports_per_phase": list(self.reports_per_phase), **self.estimate}
        if self.central is not None:
            out["central"] = {"epsilon": self.central.epsilon, "delta": self.central.delta,
                              "local_epsilon": self.central.local_epsilon,
                              "amplified": self.central.amplified}
        return out

    def to_frame(self) -> Any:
        """One row per component: estimate, interval, standard error, level, estimand,
        method (and what ``auto`` chose), ε spent per device, and the central ε and δ
        (NaN unless the query ran through a shuffler). Needs pandas (``pip install
        'uldp[analyst]'``)."""
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - the analyst extra installs it
            raise ImportError("Result.to_frame needs pandas: pip install 'uldp[analyst]'"
                              ) from None
        n = len(self.values)
        chosen = (self.auto or {}).get("chosen")
        return pd.DataFrame({
            "query_id": [self.query_id] * n, "component": list(range(n)),
            "estimate": list(self.values), "ci_low": list(self.ci_low),
            "ci_high": list(self.ci_high), "std_error": list(self.std_error),
            "confidence": [self.confidence] * n, "estimand": [self.estimand] * n,
            "method": [self.method] * n,
            "auto_chose": [chosen if chosen else None] * n,
            "epsilon": [self.epsilon] * n,
            "central_epsilon": [self.central.epsilon if self.central else float("nan")] * n,
            "central_delta": [self.central.delta if self.central else float("nan")] * n,
        }).set_index("component")


@dataclass(frozen=True)
class Preview:
    """What a query will likely give, from its public parameters alone, before any
    device spends anything (``uldp.collector.analyst.preview``).

    ``half_width``: the predicted half-width of each component's interval from the
    privacy noise (the users' own spread adds to it: ``worst_half_width`` is the bound
    with the largest spread the support allows; None without a support bound or for a
    two-stage plan, whose interval also depends on what stage I sees: see ``note``).
    """

    kind: str
    epsilon: float
    users: int
    samples: int
    method: str
    mode: str
    regime: str
    phases: tuple[int, ...]  # the quota of every phase
    confidence: float
    std_error: tuple[float, ...]
    half_width: tuple[float, ...]
    worst_half_width: tuple[float, ...] | None
    advisories: tuple[str, ...] = ()
    auto: dict[str, Any] | None = None
    note: str = ""
    #: two-stage plans: the plan run on users alike (stage I's bias bounds included), a
    #: check of ``predicted_half_width``
    simulated_half_width: tuple[float, ...] | None = None
    #: the half-width of each output's interval on users alike as the planner predicts it
    #: (``Plan.reference_prediction``: the noise, the users' spread, and for a two-stage
    #: plan what its stage I cannot rule out) — what ``auto`` compared and the console
    #: shows and plots
    predicted_half_width: tuple[float, ...] | None = None
    #: the predicted MSE (summed over outputs) on users alike
    predicted_mse: float | None = None
    #: ``auto``: the best candidate of the other family, and what it would likely give
    runner_up: dict[str, Any] | None = None

    @property
    def likely_half_width(self) -> tuple[float, ...]:
        """What the console shows as likely (and plots): the planner's prediction on
        users alike, else the noise prediction."""
        return self.predicted_half_width or self.half_width

    @property
    def width(self) -> float:
        """The likely interval width of the widest component."""
        hw = self.likely_half_width
        return 2 * max(hw) if hw else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "epsilon": self.epsilon, "users": self.users,
                "samples": self.samples, "method": self.method, "mode": self.mode,
                "regime": self.regime, "phases": list(self.phases),
                "confidence": self.confidence, "std_error": list(self.std_error),
                "half_width": list(self.half_width),
                "worst_half_width": (None if self.worst_half_width is None
                                     else list(self.worst_half_width)),
                "advisories": list(self.advisories), "auto": self.auto, "note": self.note,
                "simulated_half_width": (None if self.simulated_half_width is None
                                         else list(self.simulated_half_width)),
                "predicted_half_width": (None if self.predicted_half_width is None
                                         else list(self.predicted_half_width)),
                "predicted_mse": self.predicted_mse, "runner_up": self.runner_up,
                "likely_half_width": list(self.likely_half_width)}
