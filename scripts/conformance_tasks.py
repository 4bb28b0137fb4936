"""Task-level conformance vectors (``conformance/v1``): the whole device computation.

Imported by ``scripts/gen_conformance.py``. Each file's cases are computed by the production
code of ``uldp.client`` (``compute_report`` on a ``RandomSource.from_key`` stream, the
``Device`` checks, the ``Ledger``, the dataset registration); tasks are built here from
explicit public parameters (no planner), so the vectors change only when the device
computation does.

Encoding (``conformance/README.md``): doubles in datasets are JSON numbers, except NaN and
±∞, which are the strings ``"nan"``, ``"inf"``, ``"-inf"``; task texts are the exact
``task_json`` strings a collector sends.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from conformance_contract import json_edge_texts, numeric_strings, transport
from conformance_seal import seal_refusals

from uldp.client.budget import split_epsilon
from uldp.client.dataset import DatasetSchema, align_labels, coerce_values
from uldp.client.kinds import KINDS
from uldp.client.params import bounded_params, heavy_tailed_params
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec, compute_report, report_length, task_epsilon_units
from uldp.client.trace import tracing

__all__ = ["TASK_FILES", "enc", "key_for"]


def key_for(name: str, i: int) -> bytes:
    return hashlib.sha256(f"uldp-conformance:{name}:{i}".encode()).digest()


def enc(x: Any) -> Any:
    """JSON form of a (nested) list of doubles: numbers, NaN/±∞ as strings."""
    if isinstance(x, (list, tuple, np.ndarray)):
        return [enc(v) for v in x]
    f = float(x)
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f


def next_word(rng: RandomSource) -> str:
    return str(int(rng.words(1)[0]))


# ---- tasks ---------------------------------------------------------------------------------
M_SAMPLES, N_USERS = 8, 1000  # the public m and n the bins are computed for
LEARNING_EXTRA: dict[str, dict[str, Any]] = {
    "sgd": {"model": "logistic", "theta": [2.5, -2.5], "l2": 0.125},
    "sgd-quadratic": {"model": "quadratic", "theta": [0.25, 0.75]},
    "sgd-ls": {"model": "least_squares", "theta": [1.5, -0.5]},
    "sgd-identity": {"model": "logistic", "theta": [1.5, -2.5, 0.5], "l2": 0.125},
    "classify": {"grid": 2, "lo": [0.0, 0.0], "hi": [1.0, 1.0]},
    "regress": {"grid": 2, "label_bound": 1.0},
}


class Config:
    """A kind with its public parameters (before method, stage and components)."""

    def __init__(self, name: str, kind: str, dim: int = 1, bound: float | None = 1.0,
                 heavy: bool = False, **fields: Any) -> None:
        self.name, self.kind, self.dim, self.bound, self.heavy = name, kind, dim, bound, heavy
        self.fields = fields
        self.template = TaskSpec(query_id=f"q-{name}", kind=kind, method="ssl", stage=0,
                                 epsilon=1.0, eps_c=1.0, components=(0,), dim=dim,
                                 bound=bound, **fields)
        self.C = KINDS[kind].n_components(self.template)

    def params(self, eps_c: float) -> list[Any]:
        """Algorithm-1 parameters of every component (bounded or heavy-tailed)."""
        if self.heavy:
            M = KINDS[self.kind].moment_scale(self.template, 3.0, 2.0)
            return [heavy_tailed_params(3.0, M, M_SAMPLES, N_USERS, eps_c)] * self.C
        Ds = KINDS[self.kind].component_bounds(self.template)
        nd = N_USERS * KINDS[self.kind].delta_users(self.template)
        return [bounded_params(float(D), M_SAMPLES, nd) for D in Ds]

    def task(self, method: str, stage: int, eps: float, comps: tuple[int, ...],
             khat: str = "mid", **extra: Any) -> TaskSpec:
        eps_c = split_epsilon(eps, len(comps))
        ps = self.params(eps_c)
        f: dict[str, Any] = dict(self.fields)
        f.update(method=method, stage=stage, epsilon=eps, eps_c=eps_c, components=comps)
        if self.heavy:
            f["stat_bound"] = ps[0].bound
        if stage == 1:
            f["bins"] = tuple((ps[c].bound, ps[c].bin_width, ps[c].bins) for c in comps)
        elif stage == 2:
            ks = {"mid": lambda p: p.bins // 2 + 1, "zero": lambda p: 0,
                  "last": lambda p: p.bins, "first": lambda p: 1}[khat]
            f["intervals"] = tuple(ps[c].clamp_interval(ks(ps[c])) for c in comps)
        else:
            f["intervals"] = tuple((-ps[c].bound, ps[c].bound) for c in comps)
        f.update(extra)
        return TaskSpec(query_id=f"q-{self.name}", kind=self.kind, dim=self.dim,
                        bound=self.bound, **f)

    def baseline_a(self, eps: float, m_ref: int = 3, offset: int = 1) -> TaskSpec:
        comps = tuple(range(self.C))
        groups = (tuple(comps[: (self.C + 1) // 2]), tuple(comps[(self.C + 1) // 2:])) \
            if self.C > 1 else (comps,)
        veps = tuple(split_epsilon(eps, m_ref * len(g)) for g in groups)
        return self.task("baseline-a", 0, eps, comps, virtual_groups=groups,
                         virtual_eps=veps, m_ref=m_ref, virtual_offset=offset,
                         eps_c=split_epsilon(eps, self.C))


#: ranged configs (protocol §11.2 ``range``): ``bound`` is ``hi/2 − lo/2``, as a collector
#: sends it; one range not dyadic (its centre and bound are rounded doubles)
MEAN_RANGE, LINF_RANGE = (0.1, 1.3), (-0.25, 1.75)
CONFIGS = [
    Config("mean", "mean"),
    Config("mean-heavy", "mean", bound=None, heavy=True),
    Config("linf", "mean-linf", dim=3),
    Config("linf-heavy", "mean-linf", dim=2, bound=None, heavy=True),
    Config("l2-gauss", "mean-l2", dim=3, frame_seed=7),
    Config("l2-hadamard", "mean-l2", dim=3, frame_kind="hadamard", frame_seed=11),
    Config("l2-heavy", "mean-l2", dim=2, bound=None, heavy=True, frame_seed=3),
    Config("l1", "mean-l1", dim=3, bound=2.0),
    Config("dist", "distribution", dim=5, bound=None),
    Config("sgd-logistic", "sgd", dim=2, extra=LEARNING_EXTRA["sgd"], frame_seed=5),
    Config("sgd-quadratic", "sgd", dim=2, extra=LEARNING_EXTRA["sgd-quadratic"],
           frame_kind="hadamard", frame_seed=6),
    Config("sgd-ls", "sgd", dim=2, extra=LEARNING_EXTRA["sgd-ls"], kashin_delta=0.25,
           kashin_level=3.0),
    Config("classify", "classify", dim=2, bound=None, extra=LEARNING_EXTRA["classify"]),
    Config("regress", "regress", dim=2, bound=None, extra=LEARNING_EXTRA["regress"]),
    # the per-coordinate gradient reports of the windowed SGD rounds (protocol §12.6)
    Config("sgd-identity", "sgd", dim=3, extra=LEARNING_EXTRA["sgd-identity"],
           frame_kind="identity", bound=0.75),
]
#: a grouped mean (kind mean-by, protocol §12.3): rows (value, group code), method ssl only
GROUPED = [Config("mean-by", "mean-by", dim=3, bound=60.0, range=(0.0, 120.0), by="country"),
           Config("mean-by-sym", "mean-by", dim=2, bound=2.0, by="g")]
#: kinds with a public range [lo, hi] (their cases come last: earlier keys stay)
RANGED = [
    Config("mean-range", "mean", bound=MEAN_RANGE[1] / 2 - MEAN_RANGE[0] / 2,
           range=MEAN_RANGE),
    Config("linf-range", "mean-linf", dim=3, bound=LINF_RANGE[1] / 2 - LINF_RANGE[0] / 2,
           range=LINF_RANGE),
]


# ---- datasets ------------------------------------------------------------------------------
SPECIAL = [0.5, math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0, 0.25]


def datasets(cfg: Config) -> dict[str, tuple[Any, Any]]:
    """(samples, labels) by name: a typical dataset and the degenerate ones (totality)."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(cfg.name.encode()).digest()[:8],
                                               "big"))
    k = KINDS[cfg.kind]
    lab = k.uses_labels
    d = cfg.dim
    out: dict[str, tuple[Any, Any]]
    if cfg.kind == "distribution":
        typical = rng.integers(0, d, 11).astype(float).tolist()
        out = {"typical": (typical, None),
               "off-alphabet": ([0.0, 1.5, -1.0, float(d), d + 3.0, 2.0, math.nan, 1e308,
                                 3.0, 4.0], None)}
    elif not k.vector:
        out = {"typical": (rng.uniform(-1.3, 1.3, 9).round(6).tolist(), None),
               "special": (SPECIAL, None)}
    else:
        X = rng.normal(0.4, 0.6, (7, d)).round(6)
        if cfg.kind in ("classify", "regress", "sgd"):
            X = rng.uniform(-0.1, 1.1, (7, d)).round(6)
        special = X.copy()
        special[0, 0], special[1, -1], special[2, 0] = math.nan, math.inf, -math.inf
        special[3] = 1e308
        special[4, 0], special[5] = -1e308, 5e-324
        out = {"typical": (X.tolist(), None), "special": (special.tolist(), None)}
    if lab:
        y = rng.choice([-1.0, 1.0], 7) if cfg.kind != "regress" else rng.normal(0, 1, 7)
        X = out["typical"][0]
        out = {"typical": (X, y.round(6).tolist()),
               "special": (out["special"][0], [1.0, math.nan, -1.0, 1e308, math.inf, -2.5,
                                               0.0]),
               "labels-missing": (X, None),
               "labels-short": (X, [1.0, -1.0, math.nan])}
    if cfg.kind == "mean-by":  # codes 0 .. G-1, some unusable (off the alphabet, NaN)
        G = d
        vals = rng.uniform(-20, 140, 9).round(4).tolist()
        codes = [float(g) for g in rng.integers(0, G, 9)]
        out = {"typical": (vals, codes),
               "one-group": (vals, [1.0] * 9),
               "special": (SPECIAL, [0.0, 1.0, 1.0, 0.0, 1.0, 0.5, float(G), math.nan, -1.0]),
               "tie": ([1.0, 2.0, 3.0, 4.0], [1.0, 0.0, 0.0, 1.0]),
               "no-group": (vals[:3], [math.nan, float(G), 2.5]),
               "labels-missing": (vals, None),
               "empty": ([], []),
               "one": ([75.0], [0.0]),
               "all-missing": ([math.nan, math.inf, -math.inf], [0.0, 1.0, 0.0])}
        return out
    out["empty"] = ([], [] if lab else None)
    if not k.vector:
        out["one"] = ([0.75 if cfg.kind != "distribution" else 2.0], None)
        out["all-missing"] = ([math.nan, math.inf, -math.inf], None)
    else:
        out["one"] = ([[0.3] * d], [1.0] if lab else None)
        out["all-missing"] = ([[math.nan] * d, [math.inf] * d], [1.0, 1.0] if lab else None)
    return out


# ---- the cases -----------------------------------------------------------------------------
def _task_shapes(cfg: Config) -> Iterator[tuple[str, TaskSpec, list[str]]]:
    """(label, task, dataset names) over methods, stages and ε regimes."""
    C = cfg.C
    regimes = [("high", 0.5, (C - 1,)), ("low", 60.0, tuple(range(C)))]
    if C >= 3:
        regimes.insert(1, ("medium", 2.5, (1, 2)))
    every = list(datasets(cfg))
    for reg, eps, comps in regimes:
        dsets = every if reg == "low" else ["typical"]
        yield f"two-stage-1-{reg}", cfg.task("two-stage", 1, eps, comps), dsets
        yield f"two-stage-2-{reg}", cfg.task("two-stage", 2, eps, comps), dsets
        yield f"ssl-{reg}", cfg.task("ssl", 0, eps, comps), ["typical"]
        yield f"baseline-b-{reg}", cfg.task("baseline-b", 0, eps, comps), \
            ["typical", "empty", "special" if "special" in every else "one"]
    yield "two-stage-2-khat0", cfg.task("two-stage", 2, 1.0, (0,), khat="zero"), ["typical"]
    yield "two-stage-2-khatB", cfg.task("two-stage", 2, 1.0, (0,), khat="last"), ["typical"]
    yield "baseline-a", cfg.baseline_a(2.0), every
    yield "baseline-a-mref1", cfg.baseline_a(2.0, m_ref=1, offset=0), ["typical", "one"]


def _sized_shapes(cfg: Config) -> Iterator[tuple[str, TaskSpec, list[str]]]:
    """``two-stage-sized`` stage I (grid points, §9.6) over the ε regimes, and on the
    ``mean`` configuration the extreme grids every rule accepts."""
    from dataclasses import replace

    C = cfg.C
    regimes = [("high", 0.5, (C - 1,)), ("low", 60.0, tuple(range(C)))]
    if C >= 3:
        regimes.insert(1, ("medium", 2.5, (1, 2)))
    every = list(datasets(cfg))
    for reg, eps, comps in regimes:
        yield f"two-stage-sized-1-{reg}", cfg.task("two-stage-sized", 1, eps, comps), \
            every if reg == "low" else ["typical"]
    if cfg.name == "mean":
        s1 = cfg.task("two-stage-sized", 1, 1.0, (0,))
        wide = 2.0 / 65535 * (1 + 1e-12)  # ceil(2D/h − 1e-9) = 65535
        for name, bins in (("one-bin", ((1.0, 3.0, 1),)), ("65535", ((1.0, wide, 65535),)),
                           ("subnormal", ((5e-324, 5e-324, 2),)),
                           ("huge", ((1e300, 1e300 * wide, 65535),))):
            yield f"two-stage-sized-1-grid-{name}", replace(s1, bins=bins), \
                ["typical", "special"]


def _extreme_tasks() -> Iterator[tuple[str, TaskSpec, str, list[str]]]:
    cfg = CONFIGS[0]
    for eps in (2.0**-24, 2.0**20):
        for stage, method in ((1, "two-stage"), (2, "two-stage"), (0, "ssl")):
            yield f"eps-{eps:g}-{method}-{stage}", cfg.task(method, stage, eps, (0,)), \
                cfg.name, ["typical"]


def _hostile_tasks() -> Iterator[tuple[str, TaskSpec, str, list[str]]]:
    """Extreme public parameters every rule accepts (issue 17): both SDKs must agree on
    their reports bit for bit, with no backstop (protocol §7.3, §13)."""
    from dataclasses import replace

    by = {c.name: c for c in CONFIGS}
    mean, big = by["mean"], 2**70
    s1 = mean.task("two-stage", 1, 1.0, (0,))
    ssl = mean.task("ssl", 0, 1.0, (0,))
    out: list[tuple[str, TaskSpec, str]] = [
        ("grid-subnormal", replace(s1, bound=5e-324, bins=((5e-324, 5e-324, 2),)), "mean"),
        ("grid-huge", replace(s1, bound=1e300, bins=((1e300, 1e300 / 2**15, 65536),)), "mean"),
        ("grid-one-wide-bin", replace(s1, bins=((1.0, 3.0, 1),)), "mean"),
        ("grid-65536", replace(s1, bins=((1.0, 2.0**-15, 65536),)), "mean"),
        ("interval-huge", replace(ssl, intervals=((-8.98e307, 8.98e307),)), "mean"),
        ("interval-subnormal", replace(ssl, intervals=((0.0, 5e-324),)), "mean"),
        ("interval-one-ulp", replace(ssl, intervals=((1e300, math.nextafter(1e300, 2e300)),)),
         "mean"),
        ("eps-one-unit", replace(ssl, eps_c=2.0**-24 * (1 + 2.0**-52)), "mean"),
        ("eps-max-two-stage-1", replace(s1, epsilon=2.0**20, eps_c=2.0**20), "mean"),
        ("heavy-stat-bound-huge", replace(by["mean-heavy"].task("ssl", 0, 1.0, (0,)),
                                          stat_bound=1e300, intervals=((-1e300, 1e300),)),
         "mean-heavy"),
        ("baseline-a-offset-2^70", by["linf"].baseline_a(2.0, offset=big), "linf"),
        ("l2-frame-seed-2^70", replace(by["l2-gauss"].task("ssl", 0, 60.0, (0, 5)),
                                       frame_seed=big, kashin_delta=5e-324,
                                       kashin_level=1e-300), "l2-gauss"),
        ("l2-hadamard-level-huge", replace(by["l2-hadamard"].task("ssl", 0, 60.0, (0, 7)),
                                           kashin_level=1e300, frame_seed=-1), "l2-hadamard"),
        ("sgd-theta-huge", replace(by["sgd-logistic"].task("ssl", 0, 60.0, (0, 1, 2, 3)),
                                   extra={"model": "logistic", "theta": [1e308, -1e308],
                                          "l2": 1e300}), "sgd-logistic"),
        ("sgd-identity-theta-huge", replace(by["sgd-identity"].task("ssl", 0, 60.0, (0, 1, 2)),
                                            extra={"model": "least_squares",
                                                   "theta": [1e308, -1e308, 5e-324]},
                                            bound=1e300), "sgd-identity"),
        ("classify-box-huge", replace(by["classify"].task("ssl", 0, 60.0, (0, 1, 2, 3)),
                                      extra={"grid": 2, "lo": [-1e300, 0.0],
                                             "hi": [1e300, 5e-324]}), "classify"),
    ]
    for name, task, cfg_name in out:
        report_length(task)  # accepted, or the generator is wrong
        yield f"hostile-{name}", task, cfg_name, ["typical", "special"]


def _range_tasks() -> Iterator[tuple[str, TaskSpec, str, list[str]]]:
    """Ranges every rule accepts (issue 29): at the edge of the largest width, far from 0,
    one ulp wide, subnormal, negative, symmetric."""
    from dataclasses import replace

    rng = RANGED[0]
    out: list[tuple[str, TaskSpec, str]] = []
    one_ulp = math.nextafter(1e300, 2e300)
    for name, (lo, hi) in (("range-widest", (-8.98e307, 8.98e307)),
                           ("range-far", (1e300, 1.5e300)), ("range-one-ulp", (1e300, one_ulp)),
                           ("range-subnormal", (5e-324, 1e-323)),
                           ("range-negative", (-3e5, -1e5)), ("range-symmetric", (-2.0, 2.0))):
        D = hi / 2 - lo / 2
        for method, stage in (("ssl", 0), ("two-stage", 1)):
            t = rng.task(method, stage, 1.0, (0,))
            fields = dict(range=(lo, hi), bound=D)
            if stage == 1:  # one bin over the whole support
                fields["bins"] = ((D, 2.0 * D, 1),)
            out.append((f"{name}-{method}", replace(t, **fields), "mean-range"))
    for name, task, cfg_name in out:
        report_length(task)  # accepted, or the generator is wrong
        yield f"hostile-{name}", task, cfg_name, ["typical", "special"]


def _dim(task: TaskSpec) -> int | None:
    return task.dim if KINDS[task.kind].vector else None


def _report_case(name: str, task: TaskSpec, samples: Any, labels: Any,
                 i: int) -> dict[str, Any]:
    key = key_for("task", i)
    rng = RandomSource.from_key(key)
    lab = None if labels is None else np.asarray(labels, dtype=np.float64)
    uses = KINDS[task.kind].uses_labels
    x = np.asarray(samples, dtype=np.float64)
    if _dim(task) is not None and x.size == 0:
        x = np.zeros((0, task.dim))
    with tracing() as tr:
        rep = compute_report(task, x, lab if uses else None, rng=rng, dim=_dim(task))
    out = {"name": name, "task": task.to_json(), "dim": _dim(task),
           "samples": enc(list(samples)), "labels": None if labels is None else enc(labels),
           "key": key.hex(), "report": [int(v) for v in rep], "next_word": next_word(rng),
           "units": str(task_epsilon_units(task)), "report_length": report_length(task),
           "statistic": _hexes(tr.statistic), "rounding": tr.rounding}
    if tr.items:
        out["items"] = tr.items
    return out


def tasks() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for cfg in CONFIGS:
        data = datasets(cfg)
        for label, task, names in _task_shapes(cfg):
            for dn in names:
                samples, labels = data[dn]
                cases.append(_report_case(f"{cfg.name}/{label}/{dn}", task, samples, labels,
                                          len(cases)))
    data = datasets(CONFIGS[0])
    for label, task, _cfg, names in _extreme_tasks():
        for dn in names:
            cases.append(_report_case(f"mean/{label}/{dn}", task, *data[dn], len(cases)))
    by = {c.name: c for c in CONFIGS + RANGED}
    for label, task, cfg_name, names in _hostile_tasks():
        data = datasets(by[cfg_name])
        for dn in names:
            cases.append(_report_case(f"{cfg_name}/{label}/{dn}", task, *data[dn],
                                      len(cases)))
    for cfg in RANGED:
        data = datasets(cfg)
        for label, task, names in _task_shapes(cfg):
            for dn in names:
                samples, labels = data[dn]
                cases.append(_report_case(f"{cfg.name}/{label}/{dn}", task, samples, labels,
                                          len(cases)))
    for label, task, cfg_name, names in _range_tasks():
        data = datasets(by[cfg_name])
        for dn in names:
            cases.append(_report_case(f"{cfg_name}/{label}/{dn}", task, *data[dn],
                                      len(cases)))
    for cfg in GROUPED:  # ssl only, over the ε regimes
        data = datasets(cfg)
        C = cfg.C
        for reg, eps, comps in (("high", 0.5, (C - 1,)), ("medium", 2.5, (0, 1)),
                                ("low", 60.0, tuple(range(C)))):
            task = cfg.task("ssl", 0, eps, comps)
            for dn in (list(data) if reg != "high" else ["typical"]):
                cases.append(_report_case(f"{cfg.name}/ssl-{reg}/{dn}", task, *data[dn],
                                          len(cases)))
    # two-stage-sized stage I (§9.6): every configuration, the ε regimes, every dataset at
    # the low regime; hostile grids (appended: earlier cases keep their keys)
    for cfg in CONFIGS + RANGED:
        data = datasets(cfg)
        for label, task, names in _sized_shapes(cfg):
            for dn in names:
                cases.append(_report_case(f"{cfg.name}/{label}/{dn}", task, *data[dn],
                                          len(cases)))
    return {"description": "the report of one device: (task JSON, sanitized dataset, labels, "
                           "32-byte key) -> report integers (compute_report on a fresh "
                           "keystream), the words it used (next_word), its ε units and length",
            "cases": cases}


TASK_FILES: dict[str, Callable[[], dict[str, Any]]] = {"tasks": tasks}


# ---- refusals ------------------------------------------------------------------------------
def _base(cfg_name: str = "mean", method: str = "ssl", stage: int = 0, eps: float = 1.0,
          comps: tuple[int, ...] = (0,)) -> dict[str, Any]:
    cfg = next(c for c in CONFIGS if c.name == cfg_name)
    return cfg.task(method, stage, eps, comps).to_dict()


def _text(d: dict[str, Any] | str) -> str:
    """A task text: the canonical JSON of a dict, or a given (possibly broken) string."""
    if isinstance(d, str):
        return d
    import json

    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def _with(base: dict[str, Any], **change: Any) -> dict[str, Any]:
    out = dict(base)
    for k, v in change.items():
        if v is _DROP:
            out.pop(k, None)
        else:
            out[k] = v
    return out


_DROP = object()
SCALAR = {"name": "data", "dim": None, "values": "any", "labelled": False, "alphabet": None}


def _refusal_tasks() -> list[tuple[str, Any, dict[str, Any]]]:
    """(name, task dict or text, overrides of the Task message / device) per case."""
    b = _base()
    rng = _with(b, range=list(MEAN_RANGE), bound=MEAN_RANGE[1] / 2 - MEAN_RANGE[0] / 2)
    grp = dict(GROUPED[0].task("ssl", 0, 2.0, (0, 1)).to_dict(), query_id="q-mean")
    by_ok = {"datasets": [SCALAR, dict(SCALAR, name="country", values="categorical",
                                       alphabet=3)]}
    l2 = _base("l2-gauss", "two-stage", 1, 60.0, (0, 1, 2, 3, 4, 5))
    sgd = _base("sgd-logistic", "ssl", 0, 1.0, (0,))
    cls = _base("classify", "ssl", 0, 1.0, (0,))
    ba = next(c for c in CONFIGS if c.name == "linf").baseline_a(2.0).to_dict()
    vec = {"datasets": [dict(SCALAR, dim=3)]}
    two = {"datasets": [dict(SCALAR, dim=2, labelled=True)]}
    return [
        ("accepted", b, {}),
        ("accepted-stage1-vector", l2, dict(vec, budget=100.0)),
        ("accepted-baseline-a", ba, vec),
        ("digest", b, {"task_digest": "00" * 32}),
        ("digest-before-json", "not json", {"task_digest": "11" * 32}),
        ("json-garbage", "not json", {}),
        ("json-array", "[]", {}),
        ("json-null", "null", {}),
        ("json-string", '"x"', {}),
        ("json-truncated", _text(b)[:-1], {}),
        ("json-nan-literal", _text(b).replace('"epsilon":1.0', '"epsilon":NaN'), {}),
        ("schema-missing", _with(b, schema=_DROP), {}),
        ("schema-v1", _with(b, schema="uldp.task/1"), {}),
        ("field-unknown", _with(b, khat=[1]), {}),
        ("field-missing", _with(b, method=_DROP), {}),
        ("field-components-string", _with(b, components="abc"), {}),
        ("field-components-bool", _with(b, components=[True]), {}),
        ("field-eps-string", _with(b, eps_c="1"), {}),
        ("field-stage-float", _with(b, stage=0.0), {}),
        ("field-dim-float", _with(b, dim=1.0), {}),
        ("field-bins-not-list", _with(b, bins=5), {}),
        ("field-bins-row-not-list", _with(b, bins=[5]), {}),
        ("field-interval-string", _with(b, intervals=[[-1.0, "1"]]), {}),
        ("field-extra-list", _with(b, extra=[]), {}),
        ("field-bound-string", _with(b, bound="1"), {}),
        ("field-kind-number", _with(b, kind=1), {}),
        ("field-before-kind", _with(b, kind="median", stage="0"), {}),
        ("query-other", _with(b, query_id="q-other"), {}),
        ("query-not-string", _with(b, query_id=5), {}),
        ("kind-unknown", _with(b, kind="median"), {}),
        ("method-unknown", _with(b, method="foo"), {}),
        ("stage-7", _with(b, stage=7), {}),
        ("stage-ssl-1", _with(b, stage=1), {}),
        ("epsilon-zero", _with(b, epsilon=0.0), {}),
        ("epsilon-negative", _with(b, epsilon=-1), {}),
        ("epsilon-above-2^20", _with(b, epsilon=1e300), {}),
        ("epsilon-below-2^-24", _with(b, eps_c=2.0**-30), {}),
        ("epsilon-huge-int", _text(b).replace('"epsilon":1.0', '"epsilon":' + "9" * 400), {}),
        ("epsilon-inf-literal", _text(b).replace('"eps_c":1.0', '"eps_c":1e400'), {}),
        ("epsilon-virtual", _with(ba, virtual_eps=[0.0, 0.5]), vec),
        ("dim-zero", _with(b, dim=0), {}),
        ("limit-dim", _with(b, dim=10**12), {}),
        ("limit-gaussian-frame", _with(l2, dim=2000), {"datasets": [dict(SCALAR, dim=2000)]}),
        ("limit-bins", _with(l2, bins=[[1.0, 0.5, 70000]] + l2["bins"][1:]), vec),
        ("limit-report-length", _with(l2, bins=[[1.0, 2.0**-15, 65536]] * 6), vec),
        # bins rows in order, the first failing check of the first failing row decides
        ("order-bins-limit-row-first", _with(l2, bins=[[1.0, 0.5, 70000], [1.0, 0.0, 4]]
                                             + l2["bins"][2:]), vec),
        ("order-bins-param-row-first", _with(l2, bins=[[1.0, 0.0, 4], [1.0, 0.5, 70000]]
                                             + l2["bins"][2:]), vec),
        ("order-bins-cover-row-first", _with(l2, bins=[[1.0, 2.0**-63, 4], [1.0, 0.5, 70000]]
                                             + l2["bins"][2:]), vec),
        ("order-bins-limit-before-cover", _with(l2, bins=[[1.0, 1e-9, 70000]]
                                                + l2["bins"][1:]), vec),
        ("order-bins-before-report-length", _with(l2, bins=[[1.0, 2.0**-15, 65536]] * 5
                                                  + [[1.0, 0.5, 65536]]), vec),
        ("limit-grid", _with(cls, extra={"grid": 2000}), two),
        ("limit-m_ref", _with(ba, m_ref=2**21), vec),
        ("param-bound-missing", _with(b, bound=None), {}),
        ("param-bound-negative", _with(b, bound=-1.0), {}),
        ("param-bound-huge-int", _text(b).replace('"bound":1.0', '"bound":' + "9" * 400), {}),
        ("param-stat-bound-nan", _text(b).replace('"stat_bound":null', '"stat_bound":NaN'),
         {}),
        ("param-no-heavy-form", _with(_base("dist"), stat_bound=1.0),
         {"datasets": [dict(SCALAR, values="categorical")]}),
        ("param-kashin-delta", _with(l2, kashin_delta=2.0), vec),
        ("param-frame-kind", _with(l2, frame_kind="dct"), vec),
        ("param-components-empty", _with(b, components=[], intervals=[]), {}),
        ("param-components-duplicate", _with(b, components=[0, 0],
                                             intervals=[[-1.0, 1.0]] * 2), {}),
        ("param-components-range", _with(b, components=[1]), {}),
        ("param-intervals-count", _with(b, intervals=[[-1.0, 1.0]] * 2), {}),
        ("param-interval-empty", _with(b, intervals=[[1.0, 1.0]]), {}),
        ("param-interval-overflow", _with(b, intervals=[[-1e308, 1.7e308]]), {}),
        ("param-bins-in-value-task", _with(b, bins=[[1.0, 0.5, 4]]), {}),
        ("param-intervals-in-stage1", _with(l2, intervals=[[-1.0, 1.0]]), vec),
        ("param-bins-count", _with(l2, bins=l2["bins"][:2]), vec),
        ("param-bin-width-zero", _with(l2, bins=[[1.0, 0.0, 4]] + l2["bins"][1:]), vec),
        ("param-bin-triple", _with(l2, bins=[[1.0, 0.5]] + l2["bins"][1:]), vec),
        ("param-bins-float-count", _with(l2, bins=[[1.0, 0.5, 4.0]] + l2["bins"][1:]), vec),
        ("param-bins-cover-tiny-width", _with(l2, bins=[[1.0, 2.0**-63, 4]] + l2["bins"][1:]),
         vec),
        ("param-bins-cover-too-many", _with(l2, bins=[[1.0, 0.5, 5]] + l2["bins"][1:]), vec),
        ("param-bins-cover-too-few", _with(l2, bins=[[1.0, 0.5, 3]] + l2["bins"][1:]), vec),
        ("param-bins-cover-overflow", _with(l2, bins=[[1e308, 1e-300, 1]] + l2["bins"][1:]),
         vec),
        ("param-bins-cover-2D-overflow", _with(l2, bins=[[1.7e308, 1.7e308, 2]]
                                               + l2["bins"][1:]), vec),
        ("accepted-bins-cover-tolerance", _with(l2, bins=[[2.5, 1.0, 5]] + l2["bins"][1:]),
         dict(vec, budget=100.0)),
        ("accepted-bins-subunit", _with(l2, bins=[[1.0, 3.0, 1]] + l2["bins"][1:]),
         dict(vec, budget=100.0)),
        ("param-sgd-theta-missing", _with(sgd, extra={"model": "logistic"}), two),
        ("param-sgd-theta-length", _with(sgd, extra={"model": "logistic", "theta": [1.0]}),
         two),
        ("param-sgd-theta-string", _with(sgd, extra={"model": "logistic",
                                                     "theta": ["1.5", 0.0]}), two),
        ("param-sgd-model", _with(sgd, extra={"model": "svm", "theta": [0.0, 0.0]}), two),
        ("param-sgd-frame-unknown", _with(sgd, frame_kind="coordinates"), two),
        ("param-l2-frame-identity", _with(_base("l2-gauss", "ssl", 0, 1.0, (0,)),
                                          frame_kind="identity"), vec),
        ("param-sgd-model-list", _with(sgd, extra={"model": [], "theta": [0.0, 0.0]}), two),
        ("param-sgd-l2-negative", _with(sgd, extra={"model": "ridge", "theta": [0.0, 0.0],
                                                    "l2": -1.0}), two),
        ("param-grid-zero", _with(cls, extra={"grid": 0}), two),
        ("param-grid-bool", _with(cls, extra={"grid": True}), two),
        ("param-box", _with(cls, extra={"grid": 2, "lo": [0.0, 1.0], "hi": [1.0, 1.0]}), two),
        ("param-label-bound", _with(_base("regress"), extra={"grid": 2}), two),
        ("param-virtual-groups", _with(ba, virtual_groups=[[0, 9], [2]]), vec),
        ("field-range-null", _with(rng, range=None), {}),
        ("field-range-not-list", _with(rng, range=5.0), {}),
        ("field-range-three", _with(rng, range=[0.1, 1.3, 2.0]), {}),
        ("field-range-one", _with(rng, range=[0.1]), {}),
        ("field-range-string", _with(rng, range=["0.1", 1.3]), {}),
        ("field-range-bool", _with(rng, range=[False, 1.3]), {}),
        ("param-range-distribution", _with(_base("dist"), range=[0.0, 4.0], bound=2.0),
         {"datasets": [dict(SCALAR, values="categorical")]}),
        ("param-range-l2", _with(l2, range=[0.0, 2.0]), vec),
        ("param-range-bound-null", _with(rng, bound=None), {}),
        ("param-range-lo-equals-hi", _with(rng, range=[1.3, 1.3]), {}),
        ("param-range-inverted", _with(rng, range=[1.3, 0.1]), {}),
        ("param-range-bound-other", _with(rng, bound=1.0), {}),
        ("param-range-bound-one-ulp", _with(rng, bound=math.nextafter(rng["bound"], 1.0)),
         {}),
        ("param-range-width-overflow", _with(rng, range=[-1.7e308, 1.7e308], bound=1.7e308),
         {}),
        ("param-range-tiny", _with(rng, range=[0.0, 5e-324], bound=0.0), {}),
        ("param-range-nan", _text(rng).replace('"range":[0.1,1.3]', '"range":[NaN,1.3]'), {}),
        ("param-range-inf", _text(rng).replace('"range":[0.1,1.3]', '"range":[0.1,1e400]'),
         {}),
        ("param-range-huge-int", _text(rng).replace('"range":[0.1,1.3]',
                                                    '"range":[0.1,' + "9" * 400 + "]"), {}),
        ("accepted-grouped", grp, by_ok),
        ("dataset-grouped-by-missing", grp, {"datasets": [SCALAR]}),
        ("declaration-grouped-by-real", grp, {"datasets": [SCALAR, dict(SCALAR, name="country",
                                                                          values="real")]}),
        ("declaration-grouped-by-alphabet", grp, {"datasets": [SCALAR, dict(
            SCALAR, name="country", values="categorical", alphabet=4)]}),
        ("declaration-grouped-by-vector", grp, {"datasets": [SCALAR, dict(SCALAR, name="country",
                                                                            dim=2)]}),
        ("declaration-grouped-values-categorical", grp, {"datasets": [
            dict(SCALAR, values="categorical"), dict(SCALAR, name="country")]}),
        ("field-by-number", _with(grp, by=5), by_ok),
        ("field-by-null", _with(grp, by=None), by_ok),
        ("param-by-missing", _with(grp, by=_DROP), by_ok),
        ("param-by-empty", _with(grp, by=""), by_ok),
        ("param-by-on-mean", _with(b, by="country"), by_ok),
        ("param-grouped-method", _with(grp, method="baseline-b"), by_ok),
        ("param-grouped-one-group", _with(grp, dim=1, components=[0], intervals=[[-0.5, 0.5]]),
         by_ok),
        ("limit-grouped-groups", _with(grp, dim=2000), by_ok),
        ("param-grouped-bound-null", _with(grp, bound=None, range=_DROP), by_ok),
        ("accepted-range-int", _text(rng).replace('"range":[0.1,1.3]', '"range":[0,1]')
         .replace('"bound":' + repr(rng["bound"]), '"bound":0.5'), {}),
        ("param-m_ref-zero", _with(b, m_ref=0), {}),
        ("param-offset-negative", _with(b, virtual_offset=-1), {}),
        ("over-budget", _with(l2, eps_c=60.0), vec),
        ("over-budget-by-one-unit", _with(l2, epsilon=6 * 1.0 - 2.0**-30, eps_c=1.0), vec),
        ("dataset", b, {"dataset": "other"}),
        ("declaration-vector-task-scalar-data", l2, {}),
        ("declaration-scalar-task-vector-data", b, vec),
        ("declaration-labels", sgd, {"datasets": [dict(SCALAR, dim=2)]}),
        ("declaration-real-distribution", _base("dist"),
         {"datasets": [dict(SCALAR, values="real")]}),
        ("declaration-alphabet", _base("dist"),
         {"datasets": [dict(SCALAR, values="categorical", alphabet=4)]}),
        ("declaration-categorical-mean", b, {"datasets": [dict(SCALAR, values="categorical")]}),
        ("accepted-categorical-distribution", _base("dist"),
         {"datasets": [dict(SCALAR, values="categorical", alphabet=5)]}),
        ("length", b, {"report_length": 2}),
        ("budget", b, {"budget": 0.5}),
        ("budget-after-spending", b, {"budget": 1.5, "ledger": [("q-a", "aa", 0.75)]}),
        ("budget-exact-fit", b, {"budget": 1.75, "ledger": [("q-a", "aa", 0.75)]}),
        ("participated", b, {"ledger": [("q-mean", "bb" * 32, 0.5)]}),
        ("resend-same-digest", b, {"ledger": [("q-mean", "same", 0.5)]}),
        *seal_refusals(b),
    ] + [(name, text, {}) for name, text in json_edge_texts(_text(b))]


def _refusal_case(name: str, task: Any, o: dict[str, Any], tmp: Path) -> dict[str, Any]:
    from uldp.client.budget import epsilon_units
    from uldp.client.device import Device
    from uldp.client.wire import device_pb2

    text = _text(task)
    digest = hashlib.sha256(text.encode()).hexdigest()
    try:
        length = report_length(TaskSpec.from_json(text))
    except Exception:
        length = 1
    msg = {"query_id": "q-mean" if isinstance(task, str) else o.get("query_id", "")
           or str(_base_query(task)), "phase": 1, "dataset": o.get("dataset", "data"),
           "task_json": text, "task_digest": o.get("task_digest", digest),
           "report_length": o.get("report_length", length)}
    if isinstance(task, dict) and "seal" in task and o.get("ticket", "t1.conformance"):
        msg["shuffle_ticket"] = o.get("ticket", "t1.conformance")  # §16: the slot's ticket
    decls = o.get("datasets", [SCALAR])
    ledger = [{"query_id": q, "task_digest": digest if d == "same" else d,
               "units": str(epsilon_units(e))} for q, d, e in o.get("ledger", [])]
    budget = float(o.get("budget", 10.0))
    dev = Device("unused:1", tmp / name, budget=budget, durable=False,
                 shuffler="unused:2" if o.get("shuffler") else None)
    try:
        for dd in decls:
            v = dd["dim"]
            dev.add_dataset(dd["name"], [] if v is None else np.zeros((0, v)),
                            [] if dd["labelled"] else None, dim=v, values=dd["values"],
                            alphabet=dd["alphabet"])
        for e in ledger:
            dev.ledger.record(e["query_id"], e["task_digest"], 1, int(e["units"]), b"\0" * 8)
        code, units = None, None
        try:
            _, _, u = dev.check_task(device_pb2.Task(**msg))
            units = str(u)
        except Exception as exc:
            code = getattr(exc, "code", "?")
    finally:
        dev.close()
    case = {"name": name, "task": msg, "datasets": decls, "budget": budget,
            "ledger": ledger, "code": code, "units": units}
    if o.get("shuffler"):
        case["shuffler"] = True  # the device has a shuffler configured (§16)
    return case


def _base_query(task: dict[str, Any]) -> str:
    q = task.get("query_id", "q-mean")
    return q if isinstance(q, str) and q != "q-other" else "q-mean"


def refusals() -> dict[str, Any]:
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, task, o in _refusal_tasks():
            cases.append(_refusal_case(name, task, o, Path(tmp)))
    return {"description": "the device's checks of a Task message, in order: the first "
                           "failing check's refusal code (null: accepted, with the ε units "
                           "the ledger charges), given the registered datasets' declarations "
                           "and the ledger's entries", "cases": cases}


TASK_FILES["refusals"] = refusals


# ---- ledger --------------------------------------------------------------------------------
_LEDGER_SCRIPTS: list[tuple[str, float, list[tuple[Any, ...]]]] = [
    ("charge-then-refuse", 1.0, [("reserve", "q1", "d1", 0.5), ("reserve", "q2", "d2", 0.5),
                                 ("reserve", "q3", "d3", 2.0**-24)]),
    ("one-report-per-query", 10.0, [("reserve", "q1", "d1", 1.0), ("check", "q1", "d2", 1.0),
                                    ("reserve", "q1", "d2", 0.25),
                                    ("reserve", "q1", "d1", 1.0)]),
    ("states", 4.0, [("reserve", "q1", "d1", 1.0), ("store", "q1"),
                     ("mark", "q1", "acknowledged"), ("reserve", "q2", "d2", 1.0),
                     ("mark", "q2", "rejected"), ("store", "q2"), ("mark", "q2", "rejected"),
                     ("reserve", "q3", "d3", 2.0), ("reserve", "q4", "d4", 2.0**-24)]),
    ("units-round-down", 1.0 - 2.0**-30, [("reserve", "q1", "d1", 0.5),
                                          ("reserve", "q2", "d2", 0.5),
                                          ("reserve", "q3", "d3", 0.5 - 2.0**-24)]),
    ("exact-fit", 0.1 + 0.2, [("reserve", "q1", "d1", 0.1), ("reserve", "q2", "d2", 0.2),
                              ("check", "q3", "d3", 2.0**-24)]),
    ("tiny-budget", 2.0**-24, [("check", "q1", "d1", 2.0**-24),
                               ("reserve", "q1", "d1", 2.0**-24),
                               ("reserve", "q2", "d2", 2.0**-24)]),
    ("max-budget", 2.0**20, [("reserve", "q1", "d1", 2.0**20), ("check", "q2", "d2", 1.0)]),
    ("budget-too-small", 2.0**-25, []),
    ("budget-too-large", 2.0**20 + 1.0, []),
    ("budget-not-finite", math.inf, []),
]


def _ledger_op(led: Any, op: tuple[Any, ...]) -> dict[str, Any]:
    from uldp.client.budget import epsilon_units
    from uldp.client.ledger import LedgerError

    kind, q = op[0], op[1]
    out: dict[str, Any] = {"op": kind, "query_id": q}
    try:
        if kind in ("reserve", "check"):
            units = epsilon_units(op[3])
            out.update(task_digest=op[2], units=str(units))
            before = led.get(q)
            fn = led.reserve if kind == "reserve" else led.check
            args = (q, op[2], 1, units) if kind == "reserve" else (q, op[2], units)
            fn(*args)
            out["result"] = "resend" if before is not None else "ok"
        elif kind == "store":
            led.store_report(q, b"\x01" * 8)
            out["result"] = "ok"
        else:
            out["state"] = op[2]
            led.mark(q, op[2])
            out["result"] = "ok"
    except LedgerError as exc:
        out["result"] = "participated" if type(exc).__name__ == "AlreadyParticipated" \
            else "budget"
    e = led.get(q)
    out["entry_state"] = None if e is None else e.state
    out["spent_units"] = str(led.spent_units())
    return out


def ledger() -> dict[str, Any]:
    from uldp.client.budget import EpsilonError
    from uldp.client.ledger import Ledger

    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, budget, ops) in enumerate(_LEDGER_SCRIPTS):
            case: dict[str, Any] = {"name": name, "budget": enc(budget)}
            try:
                led = Ledger(Path(tmp) / f"{i}.sqlite", budget, durable=False)
            except EpsilonError:
                case["error"] = True
                cases.append(case)
                continue
            case["budget_units"] = str(led.budget_units)
            case["ops"] = [_ledger_op(led, op) for op in ops]
            led.close()
            cases.append(case)
    return {"description": "ledger scripts: a device budget (ε units, rounded down; error: "
                           "refused), then reserve/check (ok, resend, budget, participated), "
                           "store (reserved -> pending) and mark (pending -> acknowledged or "
                           "rejected; a reserved entry is not marked), with the entry state "
                           "and the units spent after each step", "cases": cases}


TASK_FILES["ledger"] = ledger


# ---- dataset registration --------------------------------------------------------------------
_REGISTRATIONS: list[tuple[str, Any, Any, int | None]] = [
    ("numbers", [1, 2.5, -3, 0, -0.0, 1e308, 5e-324], None, None),
    ("non-numbers", [1.0, None, "x", "", True, False, [1, 2], {"a": 1}, 2.0], None, None),
    ("numeric-strings", ["1.5", " 2 ", "-3e2", "1_000", "inf", "-Infinity", "nan", "0x10",
                         "1e", ".5", "5.", "+7", "1__0", "_1", "--1"], None, None),
    ("labels-short", [0.1, 0.2, 0.3, 0.4], [1, "a", None], None),
    ("labels-long", [0.1, 0.2], [1, -1, 1, 1], None),
    ("labels-empty", [0.1, 0.2], [], None),
    ("vectors", [[1, 2], [3, "4"], [5], [6, 7, 8], "ab", None, 9, [None, True]], None, 2),
    ("vectors-one", [[1], [2], 3, [[4]]], None, 1),
    ("vectors-empty", [], None, 3),
    ("scalar-empty", [], [], None),
    ("no-data", None, None, None),
    ("no-data-vectors", None, [1.0], 2),
] + numeric_strings()


#: a device's group from its categorical dataset (kind mean-by, protocol §12.3)
_GROUP_OF = [("mode", [2.0, 2.0, 1.0], 3), ("tie-smallest", [1.0, 0.0, 0.0, 1.0], 3),
             ("unusable-skipped", [2.0, math.nan, 7.0, 1.5, -1.0, math.inf, 2.0, 0.0], 3),
             ("none", [math.nan, 3.0, -1.0], 3), ("empty", [], 2),
             ("negative-zero", [-0.0, 1.0, -0.0], 2), ("huge", [1e308, 4.0, 4.0], 5)]


def registrations() -> dict[str, Any]:
    from uldp.client.kinds.grouped import group_of

    cases: list[dict[str, Any]] = [
        {"name": f"group-of/{name}", "op": "group_of", "samples": enc(vals), "groups": G,
         "group": enc(group_of(vals, G))} for name, vals, G in _GROUP_OF]
    for name, samples, labels, dim in _REGISTRATIONS:
        x = coerce_values(samples, dim)
        y = align_labels(labels, x.shape[0]) if labels is not None else None
        cases.append({"name": name, "samples": samples, "labels": labels, "dim": dim,
                      "out_samples": enc(x.tolist()),
                      "out_labels": None if y is None else enc(y.tolist())})
    return {"description": "dataset registration (totality sanitizing): JSON values as an "
                           "app passes them -> the doubles the statistic sees (missing = "
                           "NaN); labels aligned to the samples", "cases": cases}


TASK_FILES["registration"] = registrations
TASK_FILES["transport"] = transport
_ = DatasetSchema


# ---- canonical numerics, Kashin frames and coefficients ----------------------------------------
def _hexes(a: Any) -> list[str]:
    import struct

    return [struct.pack(">d", float(v)).hex() for v in np.asarray(a, dtype=np.float64).ravel()]


def numerics_file() -> dict[str, Any]:
    from uldp.client import numerics as nm

    rng = np.random.default_rng(20240612)
    cases: list[dict[str, Any]] = []
    xs = np.concatenate([rng.random(40), 1.0 + rng.normal(0, 1e-3, 10), [5e-324, 2.0**-1022,
                         0.5, 1.0, 2.0, 0.7071067811865476, 0.7071067811865475, 1e308,
                         np.nextafter(1.0, 0), np.nextafter(1.0, 2)],
                         np.ldexp(rng.uniform(0.5, 1.0, 20), rng.integers(-1000, 1000, 20))])
    cases.append({"op": "ln", "x": _hexes(xs), "y": _hexes(nm.ln(xs))})
    es = np.concatenate([rng.uniform(-700, 700, 40), rng.uniform(-1, 1, 20),
                         [0.0, -0.0, 700.0, -700.0, 0.5 * math.log(2), 1e-300, -500.0, 500.0]])
    cases.append({"op": "exp", "x": _hexes(es), "y": _hexes(nm.exp(es))})
    sq = np.concatenate([rng.random(20) * 10, [2.0, 3.0, 1e-310, 1e308, 0.0]])
    cases.append({"op": "sqrt", "x": _hexes(sq), "y": _hexes(np.sqrt(sq))})
    words = rng.integers(0, 2**63, 12, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    words = np.concatenate([words, np.array([0, 2**64 - 1, 2**11 - 1, 2**11], np.uint64)])
    cases.append({"op": "uniform_pm1", "words": [str(int(w)) for w in words],
                  "y": _hexes(nm.uniform_pm1(words))})
    for i, arr in enumerate([np.ldexp(rng.normal(0, 1, 30), rng.integers(-57, 58, 30)),
                             np.array([1e16, 1.0, -1e16, 1.0]), np.array([-0.0, -0.0]),
                             np.array([1e308, 1e308, -1e308]), np.zeros(0)]):
        cases.append({"op": "seq_sum", "x": _hexes(arr), "y": _hexes(nm.seq_sum(arr))})
        if arr.size:
            for o in (1, 2):
                cases.append({"op": "norm", "ord": o, "x": _hexes(arr),
                              "y": _hexes(nm.norms(arr[None], o))})
                for r in (0.5, 1e-310, 1e308):
                    cases.append({"op": "radial", "ord": o, "radius": _hexes([r])[0],
                                  "x": _hexes(arr), "y": _hexes(nm.radial(arr[None], r, o))})
        _ = i
    return {"description": "canonical float64 operations of the device: ln and exp from basic "
                           "operations, sqrt, uniform doubles from words, sequential sums, "
                           "norms and radial projections (all doubles as hex)",
            "cases": cases}


def frames_file() -> dict[str, Any]:
    from uldp.client.kashin import KashinFrame

    cases: list[dict[str, Any]] = []
    for kind in ("hadamard", "gaussian"):
        for d, seed in ((1, 0), (2, 2024), (3, 7), (5, -3), (8, 12345678901234567890),
                        (17, 1), (40, 99)):
            F = KashinFrame.from_seed(d, seed, kind)
            U = np.ascontiguousarray(F.matrix(), dtype="<f8")
            case: dict[str, Any] = {"kind": kind, "d": d, "seed": str(seed), "N": F.N,
                                    "frame_id": F.frame_id,
                                    "u_sha256": hashlib.sha256(U.tobytes()).hexdigest()}
            if kind == "hadamard":
                assert F._signs is not None and F._cols is not None
                case["signs"] = [int(s) for s in F._signs]
                case["cols"] = [int(c) for c in F._cols]
            elif d <= 3:
                case["u"] = _hexes(U)
            cases.append(case)
    return {"description": "Kashin frames from a public seed (derivation v2, ChaCha20 keyed "
                           "with the frame digest): N, frame_id, Hadamard signs and columns, "
                           "and U (N x d, row-major little-endian doubles) by SHA-256 (and "
                           "in full for d <= 3)", "cases": cases}


def kashin_file() -> dict[str, Any]:
    from uldp.client.kashin import KashinFrame, kashin_coefficients_info

    rng = np.random.default_rng(20240613)
    cases: list[dict[str, Any]] = []
    for kind in ("gaussian", "hadamard"):
        for d, seed, delta, tol, max_iter in ((1, 0, 0.5, 1e-3, 100), (3, 7, 0.5, 1e-3, 100),
                                              (6, 2, 0.25, 1e-6, 100), (16, 4, 0.5, 1e-3, 3),
                                              (16, 4, 0.9, 0.0, 100), (5, 1, 0.5, 1e-3, 0)):
            F = KashinFrame.from_seed(d, seed, kind)
            X = rng.normal(0, 1, (4, d)) * np.array([[1.0], [1e-200], [1e300], [3.0]])
            X[3, 0] = 0.0
            X = np.vstack([X, np.zeros((1, d))])
            info = kashin_coefficients_info(F, X, delta=delta, tol=tol, max_iter=max_iter,
                                            exact=True)
            for x, a, it in zip(X, info.coefficients, info.iterations, strict=True):
                cases.append({"kind": kind, "d": d, "seed": str(seed), "delta": _hexes([delta])[0],
                              "tol": _hexes([tol])[0], "max_iter": max_iter, "x": _hexes(x),
                              "a": _hexes(a), "iterations": int(it)})
    return {"description": "Kashin coefficients of one vector (the canonical LV iteration): "
                           "frame (kind, d, seed), δ, tol, max_iter, x -> a and the number of "
                           "iterations", "cases": cases}


TASK_FILES["numerics"] = numerics_file
TASK_FILES["frames"] = frames_file
TASK_FILES["kashin"] = kashin_file
