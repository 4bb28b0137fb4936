"""From an analyst's CreateQuery request to the stored query spec.

See ``docs/architecture.md`` ("Service") and ``proto/uldp/v1/analyst.proto``. Every public
seed a query needs (the slot permutation, the SGD step partition) is drawn here, at
creation, before any data exist (INV-3). Kinds with their own request format register a
builder in :data:`BUILDERS` (``sgd``: the SGD configuration travels in ``params.extra``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uldp.collector.learning.sgd import SGDConfig, sgd_query
from uldp.collector.planner import QuerySpec, compile_query
from uldp.collector.programs import program_for

__all__ = ["BUILDERS", "SPEC_PARAMS", "CreateRequest", "build_spec", "same_query"]

#: CreateQuery params_json keys that become QuerySpec fields (public values)
SPEC_PARAMS = ("moment_p", "moment_m", "frame_kind", "frame_seed", "mode", "confidence",
               "extra")


@dataclass(frozen=True)
class CreateRequest:
    """The statistical part of a CreateQuery request (validated by the builders)."""

    kind: str
    epsilon: float
    bound: float
    samples: int
    users: int
    dim: int
    method: str
    params: dict[str, Any]
    query_id: str


def _mean_spec(req: CreateRequest) -> tuple[QuerySpec, bool]:
    heavy = req.params.get("moment_p") is not None
    fields: dict[str, Any] = dict(
        kind=req.kind, epsilon=float(req.epsilon), users=int(req.users),
        samples=int(req.samples), dim=int(req.dim) if req.dim else 1,
        bound=None if heavy and not req.bound else float(req.bound),
        method=req.method or "auto", query_id=req.query_id, **req.params)
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
            raise ValueError(f"sgd {k} = {cfg[k]!r} disagrees with the request's {v!r}")
        cfg[k] = v
    drawn = "seed" not in cfg
    if drawn:
        cfg["seed"] = secrets.randbits(48)
    cfg["query_id"] = req.query_id
    d = int(req.dim) if req.dim else 1
    config = SGDConfig(**cfg)
    if config.theta0 is not None and len(config.theta0) != d:
        raise ValueError(f"theta0 has {len(config.theta0)} values, dim is {d}")
    if int(req.users) < 2 or int(req.samples) < 1:
        raise ValueError("sgd needs users >= 2 and samples >= 1")
    spec = sgd_query(config, int(req.users), int(req.samples), d, query_id=req.query_id)
    program = program_for(spec)
    g, stage, _ = next(tuple(map(int, row)) for row in program.placements() if row[2] == 1)
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
