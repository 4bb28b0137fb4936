"""Conformance vectors of the report mechanisms (``docs/device-protocol.md`` §17).

Imported by ``scripts/gen_conformance.py``; two files of ``conformance/v1``:

* ``mechanisms.json`` — the primitives: the certified bound ``S(N)`` of ``e^ε``; every
  design (numerators, ω, g, W, …) over a grid of ``(k, N)``; each frequency oracle on one
  value and each scalar randomizer on a list of grid values, on a fresh keystream (the
  report and ``next_word``); the OLH hash tables; the sampling of records.
* ``mech_tasks.json`` — whole tasks with a mechanism other than ``laplace`` (the same case
  format as ``tasks.json``: task text, dataset, key → report), and refusals of hostile
  mechanism parameters (the format of ``refusals.json``).

Cases are computed by the production code of ``uldp.client`` on ``RandomSource.from_key``
streams.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from conformance_tasks import (  # type: ignore[import-not-found]
    CONFIGS,
    _refusal_case,
    _report_case,
    datasets,
    key_for,
    next_word,
)

from uldp.client.budget import EPS_DENOMINATOR, epsilon_units
from uldp.client.mechanisms import ORACLES, SCALARS
from uldp.client.mechanisms.duchi import duchi_design
from uldp.client.mechanisms.exact import EXP_CAP_UNITS, exp_lower
from uldp.client.mechanisms.grr import grr_design
from uldp.client.mechanisms.hm import HM_THRESHOLD_UNITS, hm_alpha
from uldp.client.mechanisms.olh import hash_table, olh_design
from uldp.client.mechanisms.oue import oue_q
from uldp.client.mechanisms.pm import pm_design
from uldp.client.mechanisms.ss import ss_design
from uldp.client.methods.oracle import sample_records
from uldp.client.params import GRID_STEPS
from uldp.client.randomness import RandomSource
from uldp.client.taskspec import TaskSpec

__all__ = ["MECHANISM_FILES"]

U = EPS_DENOMINATOR
UNITS = [1, 2, 1000, U // 2, HM_THRESHOLD_UNITS - 1, HM_THRESHOLD_UNITS, U, 3 * U, 8 * U,
         EXP_CAP_UNITS - 1, EXP_CAP_UNITS, (1 << 20) * U]
KS = [1, 2, 3, 5, 16, 255, 256, 1 << 16]
EPS = [2.0**-24, 0.5, 1.0, 4.0, 2.0**20]


def f64(x: float) -> str:
    return np.float64(x).tobytes()[::-1].hex()


def _designs() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"op": "exp_lower", "N": str(N), "S": str(exp_lower(N))}
                                 for N in UNITS]
    for N in UNITS:
        for k in KS:
            g = grr_design(k, N)
            s = ss_design(k, N)
            out.append({"op": "design", "mechanism": "grr", "k": k, "N": str(N),
                        "P": str(g.P), "Q": str(g.Q)})
            out.append({"op": "design", "mechanism": "ss", "k": k, "N": str(N),
                        "omega": s.omega, "P_in": str(s.P_in)})
        o = olh_design(N)
        P_min, D = duchi_design(N)
        p = pm_design(N)
        out += [{"op": "design", "mechanism": "oue", "N": str(N), "Q": str(oue_q(N))},
                {"op": "design", "mechanism": "olh", "N": str(N), "g": o.k, "P": str(o.P),
                 "Q": str(o.Q)},
                {"op": "design", "mechanism": "duchi", "N": str(N), "P_min": str(P_min),
                 "D": str(D)},
                {"op": "design", "mechanism": "pm", "N": str(N), "W": p.W, "P_w": str(p.P_w)},
                {"op": "design", "mechanism": "hm", "N": str(N), "A": str(hm_alpha(N))}]
    return out


def _oracles(start: int) -> list[dict[str, Any]]:
    out = []
    for name in ("grr", "oue", "ss", "olh"):
        o = ORACLES[name]
        for k in (1, 2, 5, 16, 300):
            if name == "oue" and k > 16:
                continue
            for eps in EPS:
                for item in sorted({0, k - 1}):
                    key = key_for("mechanisms", start + len(out))
                    rng = RandomSource.from_key(key)
                    rep = o.privatize(np.array([item]), k, eps, rng)[0]
                    out.append({"op": "oracle", "mechanism": name, "k": k, "eps_c": f64(eps),
                                "item": item, "key": key.hex(),
                                "report": [int(v) for v in rep], "next_word": next_word(rng)})
    return out


def _scalars(start: int) -> list[dict[str, Any]]:
    out = []
    lists = [[0], [GRID_STEPS], [32768], [0, 30000, GRID_STEPS, 12345, 1, 65535, 777, 40000]]
    for name in ("duchi", "pm", "hm"):
        s = SCALARS[name]
        for eps in EPS + [0.6, 0.7]:
            for gs in lists:
                key = key_for("mechanisms", start + len(out))
                rng = RandomSource.from_key(key)
                rep = s.privatize(np.array([gs]), eps, rng)[0]
                out.append({"op": "scalar", "mechanism": name, "eps_c": f64(eps), "g": gs,
                            "key": key.hex(), "report": [int(v) for v in rep],
                            "next_word": next_word(rng)})
    return out


def _hashes() -> list[dict[str, Any]]:
    out = []
    for seed, g, k in ((0, 2, 9), (1, 4, 17), (4294967295, 55, 33), (123456789, 65536, 8)):
        out.append({"op": "olh_hash", "seed": seed, "g": g,
                    "values": hash_table(seed, k, g).tolist()})
    big = hash_table(98765, 1 << 16, 3)
    out.append({"op": "olh_hash", "seed": 98765, "g": 3, "first": 65530,
                "values": big[65530:].tolist()})
    return out


def _records(start: int) -> list[dict[str, Any]]:
    """Sampled categories of one device's usable samples (§17.10)."""
    out = []
    for usable, r, A in (([3, 1, 4, 1, 5, 2, 6], 1, 7), ([3, 1, 4, 1, 5, 2, 6], 3, 7),
                         ([2], 4, 3), ([0, 1], 2, 2), ([], 3, 5), ([], 1, 1),
                         (list(range(20)), 20, 20), ([4, 4, 0], 5, 5)):
        key = key_for("mechanisms", start + len(out))
        rng = RandomSource.from_key(key)
        X = np.array([usable], dtype=np.float64).reshape(1, -1)
        items = sample_records(X, np.ones(X.shape, dtype=bool), r, A, rng)[0]
        out.append({"op": "records", "usable": usable, "records": r, "categories": A,
                    "key": key.hex(), "items": items.tolist(), "next_word": next_word(rng)})
    return out


def mechanisms() -> dict[str, Any]:
    cases = _designs()
    cases += _oracles(len(cases))
    cases += _scalars(len(cases))
    cases += _hashes()
    cases += _records(len(cases))
    return {"description": "report mechanisms (§17): exp_lower S(N); every design over "
                           "(k, N); oracles on one value and scalar randomizers on a list "
                           "of grid values (report, next_word); OLH hash tables; sampled "
                           "records", "cases": cases}


def _mech_task_list() -> list[tuple[str, TaskSpec, list[str], str]]:
    out = []
    for cfg in CONFIGS:
        if (cfg.kind in ("sgd", "regress") and cfg.name != "sgd-identity") \
                or cfg.name in ("l2-gauss", "linf-heavy"):
            continue
        C = cfg.C
        comps = tuple(range(min(C, 3)))
        for eps in (0.5, 4.0):
            for m in ("grr", "oue", "ss", "olh"):
                t = replace(cfg.task("two-stage", 1, eps, comps), mechanism=m)
                out.append((f"{cfg.name}/two-stage-1-{m}-e{eps:g}", t, ["typical"], cfg.name))
            for m in ("duchi", "pm", "hm"):
                for method, stage in (("two-stage", 2), ("ssl", 0), ("baseline-b", 0)):
                    t = replace(cfg.task(method, stage, eps, comps), mechanism=m)
                    out.append((f"{cfg.name}/{method}-{stage}-{m}-e{eps:g}", t, ["typical"],
                                cfg.name))
    mean = CONFIGS[0]
    every = list(datasets(mean))
    for m, stage in (("ss", 1), ("hm", 2), ("pm", 2), ("duchi", 0)):
        method = "ssl" if stage == 0 else "two-stage"
        t = replace(mean.task(method, stage, 2.0**20, (0,)), mechanism=m)
        out.append((f"mean/{method}-{stage}-{m}-eps-max", t, every, "mean"))
        t = replace(mean.task(method, stage, 2.0**-24, (0,)), mechanism=m)
        out.append((f"mean/{method}-{stage}-{m}-eps-min", t, ["typical"], "mean"))
    sized = []
    for cfg in CONFIGS:  # two-stage-sized stage I (§9.6) with every oracle
        if cfg.kind in ("sgd", "regress") or cfg.name in ("l2-gauss", "linf-heavy"):
            continue
        comps = tuple(range(min(cfg.C, 3)))
        for eps in (0.5, 4.0):
            for m in ("grr", "oue", "ss", "olh"):
                t = replace(cfg.task("two-stage-sized", 1, eps, comps), mechanism=m)
                sized.append((f"{cfg.name}/two-stage-sized-1-{m}-e{eps:g}", t, ["typical"],
                              cfg.name))
    for m in ("ss", "grr"):
        t = replace(mean.task("two-stage-sized", 1, 2.0**20, (0,)), mechanism=m)
        sized.append((f"mean/two-stage-sized-1-{m}-eps-max", t, every, "mean"))
    for m in ("laplace", "grr", "oue", "ss", "olh"):
        for eps, r in ((0.5, 1), (4.0, 1), (6.0, 3)):
            t = TaskSpec(query_id="q-dist", kind="distribution", method="oracle", stage=0,
                         epsilon=eps, eps_c=eps / r, components=tuple(range(8)), dim=5,
                         mechanism=m, records=r)
            out.append((f"dist/oracle-{m}-e{eps:g}-r{r}", t, list(datasets(CONFIGS[8])),
                        "dist"))
    return out + sized + _hadamard_tasks()  # appended: earlier cases keep their keys


def _hadamard_tasks() -> list[tuple[str, Any, list[str], str]]:
    """Method hadamard (§17.13): every stage of both kinds over the degenerate datasets
    (a distribution user without usable records takes the uniform distribution's
    coefficients), windows wide and narrow, ε at the ends."""
    out: list[tuple[str, Any, list[str], str]] = []
    by = {c.name: c for c in CONFIGS}
    for name, comps, ivs in (("dist", (3,), ((-0.1, 0.05),)),
                             ("l1", (0, 2), ((-0.2, 0.9), (-1e-3, 1e-3)))):
        cfg = by[name]
        every = list(datasets(cfg))
        base = cfg.task("ssl", 0, 1.0, comps)
        for eps in (0.5, 4.0, 2.0**19):
            for m in ("laplace", "grr", "oue", "ss"):
                t = replace(base, method="hadamard", stage=2, epsilon=eps * len(comps),
                            eps_c=eps, intervals=ivs, mechanism=m)
                out.append((f"{name}/hadamard-2-{m}-e{eps:g}", t, every, name))
            for m in ("laplace", "duchi", "pm", "hm"):
                t = replace(base, method="hadamard", stage=3, epsilon=eps * len(comps),
                            eps_c=eps, intervals=ivs, mechanism=m)
                out.append((f"{name}/hadamard-3-{m}-e{eps:g}", t, every, name))
        if name == "l1":
            t = replace(base, method="hadamard", stage=1, epsilon=1.0, eps_c=0.5,
                        intervals=((-1.0, 1.0), (-1.0, 1.0)), mechanism="hm")
            out.append(("l1/hadamard-1-hm", t, every, name))
    for m in ("grr", "ss", "oue"):
        t = TaskSpec(query_id="q-dist", kind="distribution", method="hadamard", stage=1,
                     epsilon=1.0, eps_c=1.0, components=tuple(range(8)), dim=5, mechanism=m)
        out.append((f"dist/hadamard-1-{m}", t, list(datasets(by["dist"])), "dist"))
    for m in ("grr", "oue"):  # the fallback's probe: two records at ε/2 (hadamard_pairs)
        t = TaskSpec(query_id="q-dist", kind="distribution", method="hadamard", stage=1,
                     epsilon=1.0, eps_c=0.5, components=tuple(range(8)), dim=5, mechanism=m,
                     records=2)
        out.append((f"dist/hadamard-1-pairs-{m}", t, list(datasets(by["dist"])), "dist"))
    return out


def _refusal_tasks() -> list[tuple[str, Any, dict[str, Any]]]:
    ssl = CONFIGS[0].task("ssl", 0, 1.0, (0,)).to_dict()
    st1 = CONFIGS[0].task("two-stage", 1, 1.0, (0,)).to_dict()
    sized = {**st1, "method": "two-stage-sized", "mechanism": "grr"}
    dist = TaskSpec(query_id="q-mean", kind="distribution", method="oracle", stage=0,
                    epsilon=1.0, eps_c=1.0, components=tuple(range(8)), dim=5,
                    mechanism="oue").to_dict()
    cat = {"datasets": [{"name": "data", "dim": None, "labelled": False,
                         "values": "categorical", "alphabet": 5}]}
    rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("mechanism-unknown", {**st1, "mechanism": "bogus"}, {}),
        ("mechanism-not-a-string", {**st1, "mechanism": 3}, {}),
        ("mechanism-null", {**ssl, "mechanism": None}, {}),
        ("mechanism-scalar-on-bins", {**st1, "mechanism": "duchi"}, {}),
        ("mechanism-oracle-on-values", {**ssl, "mechanism": "oue"}, {}),
        ("mechanism-baseline-a", {**CONFIGS[0].baseline_a(2.0).to_dict(), "mechanism": "pm"},
         {}),
        ("records-on-ssl", {**ssl, "records": 2}, {}),
        ("records-float", {**ssl, "records": 1.0}, {}),
        ("records-zero", {**dist, "records": 0}, cat),
        ("records-limit", {**dist, "records": 2**11}, cat),
        ("oracle-scalar", {**dist, "mechanism": "hm"}, cat),
        ("oracle-components", {**dist, "components": [0]}, cat),
        ("oracle-not-categorical", {**ssl, "method": "oracle", "mechanism": "grr"}, {}),
        ("oracle-over-budget", {**dist, "records": 2, "eps_c": 0.75}, cat),
        ("oracle-intervals", {**dist, "intervals": [[0.0, 1.0]]}, cat),
        ("oracle-accepted", {**dist, "records": 2, "eps_c": 0.5}, cat),
        ("mechanism-explicit-laplace", {**ssl, "mechanism": "laplace"}, {}),
        ("sized-scalar-on-grid", {**sized, "mechanism": "pm"}, {}),
        ("sized-bins-limit", {**sized, "bins": [[1.0, 2.0**-15, 65536]]}, {}),
        ("sized-bins-65535", {**sized, "bins": [[1.0, 2.0 / 65535 * (1 + 1e-12), 65535]]}, {}),
        ("sized-stage-0", {**sized, "stage": 0}, {}),
    ]
    window = {**dist, "method": "hadamard", "stage": 3, "components": [3],
              "intervals": [[-0.1, 0.1]], "mechanism": "pm"}
    spread = {**window, "stage": 2, "mechanism": "grr"}
    l1 = {**CONFIGS[7].task("ssl", 0, 1.0, (0,)).to_dict(), "method": "hadamard", "stage": 3,
          "mechanism": "duchi"}
    vec = {"datasets": [{"name": "data", "dim": 3, "labelled": False, "values": "real",
                         "alphabet": None}]}
    rows += [
        ("hadamard-kind", {**ssl, "method": "hadamard", "stage": 3}, {}),
        ("hadamard-stage", {**window, "stage": 0}, cat),
        ("hadamard-stage-4", {**window, "stage": 4}, cat),
        ("hadamard-window-oracle", {**window, "mechanism": "grr"}, cat),
        ("hadamard-spread-scalar", {**spread, "mechanism": "duchi"}, cat),
        ("hadamard-spread-no-interval", {**spread, "intervals": []}, cat),
        ("hadamard-spread-bins", {**spread, "bins": [[1.0, 0.5, 4]]}, cat),
        ("hadamard-spread-records", {**spread, "records": 2}, cat),
        ("hadamard-window-reversed", {**window, "intervals": [[0.1, -0.1]]}, cat),
        ("hadamard-window-inf", {**window, "intervals": [[-0.1, 1e309]]}, cat),
        ("hadamard-centre-components", {**dist, "method": "hadamard", "stage": 1,
                                        "components": [1]}, cat),
        ("hadamard-centre-scalar", {**dist, "method": "hadamard", "stage": 1,
                                    "mechanism": "pm"}, cat),
        ("hadamard-over-budget", {**spread, "components": [1, 2],
                                  "intervals": [[-1.0, 1.0], [-1.0, 1.0]]}, cat),
        ("hadamard-accepted", spread, cat),
        ("hadamard-l1-accepted", l1, vec),
        ("hadamard-l1-centre-oracle", {**l1, "stage": 1, "mechanism": "grr"}, vec),
    ]
    return rows


def mech_tasks() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    data = {c.name: datasets(c) for c in CONFIGS}
    for label, task, names, cfg in _mech_task_list():
        for dn in names:
            samples, labels = data[cfg][dn]
            case = _report_case(f"{label}/{dn}", task, samples, labels,
                                1_000_000 + len(cases))
            cases.append(case)
    with tempfile.TemporaryDirectory() as tmp:
        for name, task, o in _refusal_tasks():
            case = _refusal_case(name, task, o, Path(tmp))
            case["op"] = "refusal"
            cases.append(case)
    return {"description": "whole tasks with a frequency oracle or a scalar randomizer "
                           "(the format of tasks.json), and refusals of hostile mechanism "
                           "parameters (op=refusal: the format of refusals.json)",
            "cases": cases}


MECHANISM_FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "mechanisms": mechanisms, "mech_tasks": mech_tasks}

# the eps values vectors use are all countable
assert all(epsilon_units(e) >= 1 for e in EPS)
