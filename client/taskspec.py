"""The public task a device runs: schema ``uldp.task/2`` (see ``docs/device-protocol.md``).

A task holds only public values: the kind (which statistic) and method (which report),
the ε it may spend, the components it serves, and the public parameters of its mechanism
— for a stage-I report the bins ``(D_c, h_c, B_c)`` of every served component, for a value
report the clamp interval ``[lo_c, hi_c]`` of every served component — plus what the kind's
statistic needs (support bound, dimension, Kashin frame, learning parameters). Nothing in
a task is a noise scale: the device derives every scale from ``eps_c`` and the grid
(invariant 1, docs/architecture.md).

The collector computes the bins and intervals (Algorithm-1 parameters, the stage-II
interval from stage I) and sends them explicitly. The privacy of a report does not depend
on them — the sensitivity is 2 for bins and ``2^16`` grid units for values whatever they
are — so a device need not recompute them, which keeps the device computation free of
logarithms and powers (exact across languages, ``docs/device-protocol.md``).

This module has no dependency on the rest of the SDK (numpy only): kinds, methods and the
device all import it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

__all__ = ["DEFAULT_MECHANISM", "MAX_INT_DIGITS", "MAX_JSON_DEPTH", "OMITTED_DEFAULTS",
           "REFUSAL_CODES", "SCHEMA", "TaskRefused", "TaskSpec"]

#: The mechanism of a task without a ``mechanism`` field (``uldp.client.mechanisms``).
DEFAULT_MECHANISM = "laplace"

#: Fields left out of a task's JSON when they hold their default (added after the first
#: tasks of the schema were deployed: their bytes, and digests, stay as they were).
OMITTED_DEFAULTS: dict[str, Any] = {"mechanism": DEFAULT_MECHANISM, "records": 1,
                                    "range": None, "by": None}

#: The schema tag every task JSON carries (``"schema"``); a device refuses other versions.
SCHEMA = "uldp.task/2"


#: Stable refusal reason codes (``docs/device-protocol.md`` §14.1), in the order the checks
#: run. Every SDK refuses a task with the same code; the message is for people.
REFUSAL_CODES = (
    "digest",  # task_digest is not the SHA-256 of task_json
    "json",  # task_json is not JSON, or not a JSON object
    "schema",  # the "schema" tag is missing or not uldp.task/2
    "field",  # unknown or missing field, or a field of the wrong JSON type
    "query",  # the task text names another query than the Task message
    "kind",  # unknown kind
    "unregistered",  # a kind or method this app build does not answer (TS SDK; §14.1; never Python)
    "method",  # unknown method
    "stage",  # the stage is not one of the method's stages
    "epsilon",  # an ε that cannot be counted (non-finite, <= 0, < 2^-24, > 2^20)
    "limit",  # above a device limit (dimension, frame, report length, grid, bins, m_ref)
    "param",  # a kind or method parameter missing, inconsistent or unusable
    "over-budget",  # the task would spend more than its own query budget
    "seal",  # the task's seal object is unusable, or the device has no shuffler (§16)
    "dataset",  # the named dataset is not registered on the device
    "declaration",  # the task contradicts the dataset's public declaration
    "length",  # Task.report_length differs from the length the device computes
    "budget",  # the device's remaining budget is too small (ledger)
    "participated",  # the device already accepted another task of this query (ledger)
)


class TaskRefused(ValueError):
    """The device will not run this task (inconsistent, unsupported or over-budget public
    parameters, or a task that contradicts the dataset's declaration or the ledger).

    ``code`` is one of :data:`REFUSAL_CODES` (stable across SDKs and versions)."""

    def __init__(self, message: str, code: str = "param") -> None:
        super().__init__(message)
        if code not in REFUSAL_CODES:
            raise ValueError(f"unknown refusal code {code!r}")
        self.code = code


@dataclass(frozen=True)
class TaskSpec:
    """Public parameters of one report (see the module docstring and the protocol doc)."""

    query_id: str
    kind: str
    method: str
    stage: int  # 1: stage-I bins; 2: stage-II values; 0: single-stage values
    epsilon: float  # the query's user-level budget: what this task may spend at most
    eps_c: float  # budget of each served component (baseline A: see virtual_eps)
    components: tuple[int, ...]  # served components, in report order
    dim: int = 1  # d, or the alphabet size A for "distribution"
    bound: float | None = None  # support D of the samples (None: heavy tails)
    stat_bound: float | None = None  # heavy tails: user statistics clamped to [-D, D]
    bins: tuple[tuple[float, float, int], ...] = ()  # stage I: (D_c, h_c, B_c) per component
    intervals: tuple[tuple[float, float], ...] = ()  # values: (lo_c, hi_c) per component
    frame_kind: str = "gaussian"  # ℓ2 / sgd: the public Kashin frame
    frame_seed: int = 0
    kashin_level: float = 4.0  # K_LV [D9]
    kashin_delta: float = 0.5
    m_ref: int = 1  # baseline A: report slots per device
    virtual_groups: tuple[tuple[int, ...], ...] = ()  # baseline A
    virtual_eps: tuple[float, ...] = ()  # baseline A: ε of one slot of each virtual group
    virtual_offset: int = 0  # baseline A: virtual group of slot 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # learning kinds
    #: shuffle mode: the collector's HPKE key the report is sealed to (absent: a report
    #: in the clear to the collector); ``uldp.client.sealing``, protocol §16
    seal: dict[str, Any] | None = field(default=None, compare=False)
    #: the report mechanism (``uldp.client.mechanisms``); omitted from the JSON when it is
    #: the default, so tasks of the discrete Laplace mechanism keep their bytes
    mechanism: str = DEFAULT_MECHANISM
    records: int = 1  # method ``oracle``: records sampled (omitted from the JSON when 1)
    #: the public range ``[lo, hi]`` of one value (kinds ``mean``, ``mean-linf``): samples
    #: are centred on ``lo/2 + hi/2`` and clamped to ``±bound``, ``bound = hi/2 − lo/2``
    #: (protocol §12.3); None (omitted from the JSON): the range ``[-bound, bound]``
    range: tuple[float, float] | None = None
    #: kind ``mean-by``: the name of the device's categorical dataset whose code is the
    #: device's group (protocol §12.3); None (omitted from the JSON) for every other kind
    by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.seal is None:
            del d["seal"]  # absent, not null: tasks without a seal keep their bytes
        d["schema"] = SCHEMA
        d["components"] = list(self.components)
        d["bins"] = [[float(D), float(h), int(B)] for D, h, B in self.bins]
        d["intervals"] = [[float(lo), float(hi)] for lo, hi in self.intervals]
        d["virtual_groups"] = [list(g) for g in self.virtual_groups]
        d["virtual_eps"] = list(self.virtual_eps)
        if self.range is not None:
            d["range"] = [float(self.range[0]), float(self.range[1])]
        for name, default in OMITTED_DEFAULTS.items():
            if d[name] == default and type(d[name]) is type(default):
                del d[name]
        return d

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no spaces (the digest is over these bytes)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any) -> TaskSpec:
        if not isinstance(d, dict):
            raise TaskRefused("a task is a JSON object", code="json")
        d = dict(d)
        schema = d.pop("schema", None)
        if schema != SCHEMA:
            raise TaskRefused(f"task schema {schema!r} is not supported (this device "
                              f"speaks {SCHEMA!r})", code="schema")
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise TaskRefused(f"task has unknown fields: {sorted(unknown)}", code="field")
        if "seal" in d and not isinstance(d["seal"], dict):
            raise TaskRefused("seal must be an object", code="field")
        if "by" in d and not isinstance(d["by"], str):
            raise TaskRefused("by must be a string", code="field")
        for key in ("components", "virtual_eps"):
            if key in d:
                d[key] = tuple(_list(d[key], key))
        if "range" in d:
            d["range"] = tuple(_list(d["range"], "range"))
        for key in ("bins", "intervals", "virtual_groups"):
            if key in d:
                d[key] = tuple(tuple(_list(row, key)) for row in _list(d[key], key))
        try:
            return cls(**d)
        except TypeError as exc:
            raise TaskRefused(f"malformed task: {exc}", code="field") from None

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        """Parse a task text with the value model of protocol §11.1 (code ``json`` for
        anything that is not one JSON value, for containers nested deeper than
        :data:`MAX_JSON_DEPTH` and for integer literals of more than
        :data:`MAX_INT_DIGITS` digits)."""
        try:
            if _depth(text) > MAX_JSON_DEPTH:
                raise ValueError(f"containers nested deeper than {MAX_JSON_DEPTH}")
            value = json.loads(text, parse_int=_parse_int)
        except (ValueError, RecursionError, TypeError) as exc:  # JSONDecodeError too
            raise TaskRefused(f"task is not valid JSON: {exc}", code="json") from None
        return cls.from_dict(value)


#: Containers (objects, arrays) may nest this deep in a task text; the task object is level 1.
MAX_JSON_DEPTH = 64
#: The most digits an integer literal of a task text may have (CPython's default limit of
#: int('...'), stated here so that it does not depend on the process's setting).
MAX_INT_DIGITS = 4300

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')


def _depth(text: str) -> int:
    """The deepest container nesting of a JSON text (strings removed; exact for valid
    JSON, and any text it miscounts is not valid JSON anyway)."""
    b = np.frombuffer(_STRINGS.sub("", text).encode(), dtype=np.uint8)
    if b.size == 0:
        return 0
    step = (np.isin(b, (0x5B, 0x7B)).astype(np.int64) - np.isin(b, (0x5D, 0x7D)))
    return int(np.cumsum(step).max(initial=0))


def _parse_int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer literal has more than {MAX_INT_DIGITS} digits")
    return int(s)


def _list(v: Any, name: str) -> list[Any]:
    if not isinstance(v, list):
        raise TaskRefused(f"{name} must be a list", code="field")
    return v
