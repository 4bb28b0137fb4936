"""From an analyst's CreateQuery request to the stored query spec.

See ``docs/architecture.md`` ("Service") and ``proto/uldp/v1/analyst.proto``. Every public
seed a query needs (the slot permutation, the SGD step partition) is drawn here, at
creation, before any data exist (INV-3). Kinds with their own request format register a
builder in :data:`BUILDERS` (``sgd``: the SGD configuration travels in ``params.extra``).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from uldp.collector.models.rounds import sgd_query
from uldp.collector.models.sgd import SGDConfig
from uldp.collector.planner import QuerySpec, compile_query, with_best_mechanisms
from uldp.collector.programs import program_for
from uldp.collector.service.errors import ServiceError, echo

__all__ = ["BUILDERS", "DEFAULT_BOUND", "LIMITS", "RANGE_KINDS", "REQUEST_PARAMS", "SPEC_PARAMS",
           "CreateLimits",
           "CreateRequest", "build_spec", "check_limits", "check_shape", "range_bound",
           "same_query"]

#: CreateQuery params_json keys that become QuerySpec fields (public values)
SPEC_PARAMS = ("moment_p", "moment_m", "frame_kind", "frame_seed", "mode", "confidence",
               "extra", "objective", "oracle", "randomizer", "stage1_share", "records",
               "assume")
#: CreateQuery params_json keys of the request itself (a value's range, group-by), which
#: :func:`check_shape` turns into the spec's fields
REQUEST_PARAMS = ("lo", "hi", "by", "groups")


@dataclass(frozen=True)
class CreateRequest:
    """The statistical part of a CreateQuery request (validated by the builders).

    ``bound`` 0 and ``dim`` 0 mean "not given"; ``lo``/``hi`` None likewise (the wire's
    field presence); :func:`check_shape` turns them into the query's values."""

    kind: str
    epsilon: float
    bound: float
    samples: int
    users: int
    dim: int
    method: str
    params: dict[str, Any]
    query_id: str
    lo: Any = None  # params_json "lo", "hi", "by", "groups" (checked by check_limits)
    hi: Any = None
    by: Any = ""  # group-by: the categorical dataset of the groups
    groups: Any = ()  # group-by: the groups' public names, in code order


@dataclass(frozen=True)
class CreateLimits:
    """What CreateQuery accepts (``proto/uldp/v1/analyst.proto``), checked before any
    planning (invariant 9): the devices' own limits where they have one
    (``docs/device-protocol.md`` §14.5), and what keeps planning a query bounded."""

    min_epsilon: float = 2.0 ** -24  # the ε the devices can count (§4)
    max_epsilon: float = 2.0 ** 20
    min_bound: float = 2.0 ** -40
    max_bound: float = 2.0 ** 40
    max_samples: int = 1 << 20  # m_ref: the devices' limit
    #: dimension / categories: planning builds dense d × d transforms (Hadamard rows of a
    #: distribution, the output transform of the vector kinds): ~0.5 s and ~130 MB at 4096
    max_dim: int = 1 << 12
    min_phase_timeout_s: float = 1.0
    max_phase_timeout_s: float = 366 * 24 * 3600.0
    max_name_chars: int = 64  # kind, method
    max_moment_p: float = 64.0
    min_confidence: float = 0.5
    max_confidence: float = 1.0 - 1e-6
    max_frame_seed: int = (1 << 53) - 1  # exact in every JSON reader
    max_range_end: float = 2.0 ** 40  # |lo|, |hi|
    max_groups: int = 256  # group-by: 2·G components each device's report covers
    max_group_chars: int = 64


LIMITS = CreateLimits()


def _bad(field: str, rule: str, got: object) -> ServiceError:
    return ServiceError("INVALID_ARGUMENT", f"{field} must be {rule}, got {echo(got)}")


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_limits(req: CreateRequest, phase_timeout_s: float, max_users: int | None,
                 lim: CreateLimits = LIMITS) -> None:
    """Refuse (INVALID_ARGUMENT naming the field) a request with a field out of its
    bounds; nothing else is looked at before this. ``max_users`` None: a client's check
    before it sends (the collector's own limit on users is the collector's to say)."""
    for name in ("kind", "method"):
        if len(getattr(req, name)) > lim.max_name_chars:
            raise _bad(name, f"a name of at most {lim.max_name_chars} characters",
                       getattr(req, name))
    if not (_number(req.epsilon) and lim.min_epsilon <= req.epsilon <= lim.max_epsilon):
        raise _bad("epsilon", "between 2^-24 and 2^20", req.epsilon)
    if req.bound != 0 and not (_number(req.bound)
                               and lim.min_bound <= req.bound <= lim.max_bound):
        raise _bad("bound", "between 2^-40 and 2^40 (or 0 with moment_p and moment_m)",
                   req.bound)
    if not 1 <= req.samples <= lim.max_samples:
        raise _bad("samples", f"between 1 and {lim.max_samples} (the devices' limit on "
                   "m_ref)", req.samples)
    if max_users is not None and not 2 <= req.users <= max_users:
        raise _bad("users", f"between 2 and {max_users} (the collector's --max-users)",
                   req.users)
    if not 0 <= req.dim <= lim.max_dim:
        raise _bad("dim", f"between 1 and {lim.max_dim} (1 for scalar kinds; 0: not "
                   "given)", req.dim)
    for name in ("lo", "hi"):
        v = getattr(req, name)
        if v is not None and not (_number(v) and abs(v) <= lim.max_range_end):
            raise _bad(name, "a number between -2^40 and 2^40", v)
    if not isinstance(req.by, str) or len(req.by) > 256:
        raise _bad("by", "a dataset name of at most 256 characters", req.by)
    if not isinstance(req.groups, tuple) or len(req.groups) > lim.max_groups:
        raise _bad("groups", f"a list of at most {lim.max_groups} names",
                   f"{len(req.groups)} names" if isinstance(req.groups, tuple) else req.groups)
    for g in req.groups:
        if not isinstance(g, str) or not 1 <= len(g) <= lim.max_group_chars:
            raise _bad("groups", f"names of 1 to {lim.max_group_chars} characters", g)
    t = phase_timeout_s
    if t != 0 and not (_number(t) and lim.min_phase_timeout_s <= t
                       <= lim.max_phase_timeout_s):
        raise _bad("phase_timeout_seconds", "0 (the collector's default) or between 1 and "
                   f"{lim.max_phase_timeout_s:.0f} seconds", t)
    _check_params(req.params, lim)


def _check_params(params: dict[str, Any], lim: CreateLimits) -> None:
    """The numbers of ``params_json`` (its size and nesting are checked on parsing)."""
    p, m = params.get("moment_p"), params.get("moment_m")
    if p is not None and not (_number(p) and 2 <= p <= lim.max_moment_p):
        raise _bad("params_json moment_p", f"a number between 2 and {lim.max_moment_p:g}", p)
    if m is not None:
        root = float(p) if isinstance(p, (int, float)) and _number(p) else 2.0
        scale = math.log2(m) / root if _number(m) and m > 0 else None
        if scale is None or not -40 <= scale <= 40:
            raise _bad("params_json moment_m", "a positive number whose moment_p-th root "
                       "is between 2^-40 and 2^40", m)
    c = params.get("confidence")
    if c is not None and not (_number(c) and lim.min_confidence <= c <= lim.max_confidence):
        raise _bad("params_json confidence",
                   f"between {lim.min_confidence} and {lim.max_confidence}", c)
    seed = params.get("frame_seed")
    if seed is not None and not (isinstance(seed, int) and not isinstance(seed, bool)
                                 and 0 <= seed <= lim.max_frame_seed):
        raise _bad("params_json frame_seed", "an integer between 0 and 2^53 - 1", seed)
    _check_mechanisms(params)


def _check_mechanisms(params: dict[str, Any]) -> None:
    """The report mechanisms, the objective and the assumption a query may name (issue 24
    item 4; ``assume``: ``uldp.collector.methods.alike``)."""
    from uldp.client.mechanisms import ORACLES, SCALARS
    from uldp.client.tasks import MAX_RECORDS
    from uldp.collector.methods.alike import ASSUMPTIONS
    from uldp.collector.methods.sizing import OBJECTIVES

    choices = {"objective": OBJECTIVES, "assume": ASSUMPTIONS, "oracle": (*ORACLES, "best"),
               "randomizer": (*SCALARS, "best", "adaptive")}
    for key, allowed in choices.items():
        v = params.get(key)
        if v is not None and v not in allowed:
            raise _bad(f"params_json {key}", "one of " + ", ".join(allowed), v)
    share = params.get("stage1_share")
    if share is not None and not (_number(share) and 0 < share < 1):
        raise _bad("params_json stage1_share", "a number between 0 and 1 (exclusive)", share)
    r = params.get("records")
    if r is not None and not (isinstance(r, int) and not isinstance(r, bool)
                              and 1 <= r <= MAX_RECORDS):
        raise _bad("params_json records", f"an integer between 1 and {MAX_RECORDS}", r)


#: kinds whose values have a public range ``[lo, hi]`` (the others: see :func:`_range_rule`)
RANGE_KINDS = ("mean", "mean-linf")
#: the default support bound D of a query that states no range: [-1, 1]
DEFAULT_BOUND = 1.0


def _range_rule(kind: str) -> str:
    """Why ``lo``/``hi`` do not apply to ``kind`` (what to give instead)."""
    if kind == "distribution":
        return "a distribution's values are its categories 0 .. dim-1 (give dim)"
    if kind in ("mean-l2", "mean-l1"):
        return (f"kind {kind} bounds each vector's {kind[-2:]} norm by bound D (a range "
                f"[lo, hi] applies to kinds {' and '.join(RANGE_KINDS)})")
    if kind in ("classify", "regress"):
        return f"kind {kind} takes its feature box as extra lo and hi"
    return f"kind {kind} takes bound D (the gradient clip norm)"


def check_shape(req: CreateRequest) -> CreateRequest:
    """The one set of rules about which fields go together, shared by every way to make
    a query (CreateQuery, the console and its preview, ``Analyst.create``/``preview``,
    ``uldp query create``): each refusal is a ``ServiceError`` INVALID_ARGUMENT whose
    message names the field, the same on every surface. Returns the request with the
    not-given values filled in (``dim``, ``bound``)."""
    p = req.params
    heavy = p.get("moment_p") is not None or p.get("moment_m") is not None
    if heavy and (p.get("moment_p") is None or p.get("moment_m") is None):
        raise ServiceError("INVALID_ARGUMENT", "moment_p and moment_m go together "
                           "(heavy tails: E|X|^p <= M)")
    ranged = req.lo is not None or req.hi is not None
    if heavy and (req.bound or ranged):
        raise ServiceError("INVALID_ARGUMENT", "bound (or lo/hi) and moment_p/moment_m "
                           "are alternatives: a public range of the values, or a moment "
                           "bound for heavy tails; give one")
    dim = int(req.dim)
    if req.kind == "distribution" and dim < 2:
        raise ServiceError("INVALID_ARGUMENT", "dim: a distribution query needs the number "
                           f"of its categories, at least 2 (got {dim if dim else 'none'})")
    bound = float(req.bound)
    lo, hi = req.lo, req.hi
    if ranged:
        if lo is None or hi is None:
            raise ServiceError("INVALID_ARGUMENT", "lo and hi go together (the public "
                               "range [lo, hi] of one value)")
        if req.kind not in RANGE_KINDS and not req.by:
            raise ServiceError("INVALID_ARGUMENT", f"lo/hi: {_range_rule(req.kind)}")
        if not lo < hi:
            raise ServiceError("INVALID_ARGUMENT", f"lo must be below hi, got lo={echo(lo)}, "
                               f"hi={echo(hi)}")
        if bound:
            raise ServiceError("INVALID_ARGUMENT", "bound and lo/hi are alternatives (bound "
                               "D is the range [-D, D]); give one")
        bound = range_bound(float(lo), float(hi))
        if not LIMITS.min_bound <= bound:
            raise ServiceError("INVALID_ARGUMENT", f"hi - lo must be at least 2^-39, got "
                               f"lo={echo(lo)}, hi={echo(hi)}")
    elif not heavy and not bound and req.kind != "sgd":  # sgd: its clip may be in extra
        bound = DEFAULT_BOUND
    kind = req.kind
    if req.by or req.groups:
        dim, kind = _check_groups(req, dim, heavy), "mean-by"
    if not dim:
        dim = 1
    return replace(req, kind=kind, dim=dim, bound=bound,
                   lo=None if lo is None else float(lo), hi=None if hi is None else float(hi))


def _check_groups(req: CreateRequest, dim: int, heavy: bool) -> int:
    """The rules of a grouped mean (``by`` and ``groups``); returns G, its ``dim``."""
    def bad(message: str) -> ServiceError:
        return ServiceError("INVALID_ARGUMENT", message)
    if req.kind not in ("mean", "mean-by"):
        raise bad(f"by: group-by applies to kind mean (a mean per group), not {req.kind}")
    if not req.by:
        raise bad("groups go with by (the devices' categorical dataset of the groups)")
    if len(req.groups) < 2 or len(set(req.groups)) != len(req.groups):
        raise bad("groups: a grouped mean names its groups, at least 2 distinct names in "
                  "the code order of the by dataset (code 0 first)")
    if heavy:
        raise bad("by: a grouped mean needs the values' range (lo/hi or bound), not "
                  "moment_p/moment_m")
    if req.method not in ("", "auto", "ssl", "grouped-ssl"):
        raise bad(f"method: a grouped mean reports every group in one single-stage report "
                  f"(auto); {req.method} does not")
    G = len(req.groups)
    if dim not in (0, 1, G):  # 1: the values are scalars; the spec's dim is G
        raise bad(f"dim: a grouped mean has one dimension per group ({G}); leave it out")
    return G


def range_bound(lo: float, hi: float) -> float:
    """The support bound ``D`` of the range ``[lo, hi]``: ``hi/2 − lo/2`` (no overflow;
    the devices check a task's ``bound`` against the same expression)."""
    return hi / 2 - lo / 2


def _mean_spec(req: CreateRequest) -> tuple[QuerySpec, bool]:
    heavy = req.params.get("moment_p") is not None
    fields: dict[str, Any] = dict(
        kind=req.kind, epsilon=float(req.epsilon), users=int(req.users),
        samples=int(req.samples), dim=int(req.dim),
        bound=None if heavy and not req.bound else float(req.bound),
        method=req.method or "auto", query_id=req.query_id, **req.params)
    if req.lo is not None:
        fields.update(lo=req.lo, hi=req.hi)
    if req.kind == "mean-by":
        fields.update(by=req.by, groups=tuple(req.groups),
                      method="auto" if fields["method"] in ("auto", "ssl") else fields["method"])
    fields = with_best_mechanisms(fields)  # --method X: X with the best mechanisms
    probe = QuerySpec(**{**fields, "seed": 0})
    compile_query(probe)  # every configuration error surfaces now
    # the slot permutation's seed: public, drawn now, before any data exist (INV-3)
    return QuerySpec(**{**fields, "seed": secrets.randbits(63)}), True


def _sgd_spec(req: CreateRequest) -> tuple[QuerySpec, bool]:
    """The stored spec of an SGD query is ``sgd_query(config, ...)`` (t0 fixed now).

    ``params_json`` carries the public SGD configuration in ``extra``: ``model`` and an
    ``sgd`` object of ``SGDConfig`` fields; the request's epsilon, bound (the clip D) and
    method fill the fields not given there and must agree with those given. Without
    ``sgd.seed`` the seed of the step partition and slot permutation is drawn now."""
    bad = set(req.params) - {"extra", "frame_kind", "mode"}
    if bad:
        raise ValueError(f"params {sorted(bad)} do not apply to kind sgd")
    extra = req.params.get("extra") or {}
    cfg_in = extra.get("sgd") if isinstance(extra, dict) else None
    if not isinstance(extra, dict) or not isinstance(cfg_in or {}, dict):
        raise ValueError("params_json extra must be an object whose 'sgd' is an object")
    cfg = dict(cfg_in or {})
    given = {"epsilon": float(req.epsilon), "clip": float(req.bound) if req.bound else None,
             "method": req.method or None, "model": extra.get("model"),
             "frame_kind": req.params.get("frame_kind"), "mode": req.params.get("mode")}
    for k, v in given.items():
        if v is None:
            continue
        if k in cfg and cfg[k] is not None and cfg[k] != v:
            raise ValueError(f"sgd {k} = {echo(cfg[k])} disagrees with the request's "
                             f"{echo(v)}")
        cfg[k] = v
    drawn = "seed" not in cfg
    if drawn:
        cfg["seed"] = secrets.randbits(48)
    cfg["query_id"] = req.query_id
    d = int(req.dim)
    config = SGDConfig(**cfg)
    if config.theta0 is not None and len(config.theta0) != d:
        raise ValueError(f"theta0 has {len(config.theta0)} values, dim is {d}")
    if int(req.users) < 2 or int(req.samples) < 1:
        raise ValueError("sgd needs users >= 2 and samples >= 1")
    spec = sgd_query(config, int(req.users), int(req.samples), d, query_id=req.query_id)
    program = program_for(spec)
    (g, stage, _), *_ = program.cells(1)
    program.task(1, g, stage, {})  # step 0 compiles (θ_0, model, frame)
    return spec, drawn


#: kind -> builder of (spec, whether a seed was drawn); other kinds use the mean builder
BUILDERS: dict[str, Callable[[CreateRequest], tuple[QuerySpec, bool]]] = {"sgd": _sgd_spec}


def build_spec(req: CreateRequest) -> tuple[QuerySpec, bool]:
    """The spec to store for ``req`` (``ValueError``/``TypeError``: invalid request)."""
    for key in ("epsilon", "bound"):
        if not isinstance(getattr(req, key), (int, float)):
            raise ValueError(f"{key} must be a number")
    return BUILDERS.get(req.kind, _mean_spec)(req)


def _without_seeds(spec: dict[str, Any]) -> dict[str, Any]:
    out = dict(spec)
    out.pop("seed", None)
    sgd = out.get("extra", {}).get("sgd")
    if isinstance(sgd, dict):
        out["extra"] = {**out["extra"], "sgd": {k: v for k, v in sgd.items() if k != "seed"}}
    return out


def same_query(stored_spec: dict[str, Any], new: QuerySpec, drawn: bool) -> bool:
    """Is ``new`` the same query as the stored one (an idempotent create)? Seeds the
    collector drew are ignored; a seed the analyst gave must match."""
    old, cur = stored_spec, new.to_dict()
    if drawn:
        old, cur = _without_seeds(old), _without_seeds(cur)
    return old == cur
