"""The committed device conformance vectors (``conformance/v1``) are exactly what the Python
SDK computes today: regenerating them gives identical files, byte for byte.

The TypeScript SDK checks the same files (``client-ts``, node and headless Chromium), so a
change of the device computation on either side fails CI until the contract is versioned.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from uldp.client.randomness import RandomSource

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import gen_conformance  # noqa: E402

FRESH = gen_conformance.generate()


def test_the_generator_covers_every_committed_file_and_no_more():
    committed = sorted(p.name for p in gen_conformance.OUT_DIR.glob("*.json"))
    assert committed == sorted(FRESH)


@pytest.mark.parametrize("name", sorted(FRESH))
def test_committed_vectors_equal_a_fresh_generation(name):
    committed = (gen_conformance.OUT_DIR / name).read_text(encoding="utf-8")
    assert committed == FRESH[name], (
        f"conformance/v1/{name} differs from what uldp.client computes now: "
        "run python scripts/gen_conformance.py and version the contract")


def test_check_mode_passes_on_the_committed_tree():
    assert gen_conformance.main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(FRESH))
def test_every_file_is_well_formed(name):
    data = json.loads(FRESH[name])
    assert data["format"] == "uldp-conformance/1"
    assert data["name"] == Path(name).stem
    assert data["cases"], "a vector file without cases"


def test_check_mode_detects_a_changed_vector(tmp_path, monkeypatch):
    for name, text in FRESH.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    case = json.loads(FRESH["stage1.json"])["cases"][0]
    bumped = dict(case, report=[v + 1 for v in case["report"]])
    text = FRESH["stage1.json"].replace(
        json.dumps(case, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        json.dumps(bumped, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    assert text != FRESH["stage1.json"]
    (tmp_path / "stage1.json").write_text(text, encoding="utf-8")
    monkeypatch.setattr(gen_conformance, "OUT_DIR", tmp_path)
    assert gen_conformance.main(["--check"]) == 1


# ---- the JSON Schemas of proto/uldp/v1 hold for what the code produces ---------------------
SCHEMAS = ROOT / "proto" / "uldp" / "v1"
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is_type(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, _TYPES[t])


def _errors(v, s, root, path="$"):
    """Violations of JSON Schema (the 2020-12 subset used in proto/uldp/v1/*.schema.json)."""
    out = []
    if "$ref" in s:
        return _errors(v, json.loads((SCHEMAS / s["$ref"]).read_text()), root, path)
    if "const" in s and v != s["const"]:
        out.append(f"{path}: {v!r} != {s['const']!r}")
    if "enum" in s and v not in s["enum"]:
        out.append(f"{path}: {v!r} not in {s['enum']}")
    if "type" in s:
        ts = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_is_type(v, t) for t in ts):
            return out + [f"{path}: {v!r} is not {ts}"]
    if _is_type(v, "number"):
        for k, ok in (("minimum", lambda a, b: a >= b), ("maximum", lambda a, b: a <= b),
                      ("exclusiveMinimum", lambda a, b: a > b),
                      ("exclusiveMaximum", lambda a, b: a < b)):
            if k in s and not ok(v, s[k]):
                out.append(f"{path}: {v!r} violates {k} {s[k]}")
    if isinstance(v, dict):
        out += [f"{path}: missing {k}" for k in s.get("required", []) if k not in v]
        props = s.get("properties", {})
        for k, x in v.items():
            sub = props.get(k)
            if sub is None:
                sub = next((p for pat, p in s.get("patternProperties", {}).items()
                            if re.match(pat, k)), None)
            if sub is None:
                sub = s.get("additionalProperties", True)
                if sub is False:
                    out.append(f"{path}: unknown key {k}")
                    continue
                if sub is True:
                    continue
            out += _errors(x, sub, root, f"{path}.{k}")
    if isinstance(v, list):
        if "minItems" in s and len(v) < s["minItems"]:
            out.append(f"{path}: fewer than {s['minItems']} items")
        if "maxItems" in s and len(v) > s["maxItems"]:
            out.append(f"{path}: more than {s['maxItems']} items")
        if s.get("uniqueItems") and len({json.dumps(x) for x in v}) != len(v):
            out.append(f"{path}: items not unique")
        pre = s.get("prefixItems", [])
        for i, x in enumerate(v):
            sub = pre[i] if i < len(pre) else s.get("items")
            if sub is not None:
                out += _errors(x, sub, root, f"{path}[{i}]")
    for sub in s.get("allOf", []):
        out += _errors(v, sub, root, path)
    if "oneOf" in s and sum(not _errors(v, sub, root, path) for sub in s["oneOf"]) != 1:
        out.append(f"{path}: matches not exactly one of oneOf")
    if "if" in s:
        branch = s.get("then") if not _errors(v, s["if"], root, path) else s.get("else")
        if branch is not None:
            out += _errors(v, branch, root, path)
    return out


def _schema(name):
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def test_every_task_the_vectors_accept_matches_the_task_schema():
    schema = _schema("task")
    tasks = [c["task"] for c in json.loads(FRESH["tasks.json"])["cases"]]
    refusals = json.loads(FRESH["refusals.json"])["cases"]
    accepted = [r["task"]["task_json"] for r in refusals if r["code"] is None]
    assert len(tasks) > 500 and len(accepted) >= 4
    for text in tasks + accepted:
        assert _errors(json.loads(text), schema, schema) == [], text
    # and it rejects what the device refuses for type or shape reasons
    for r in refusals:
        if r["code"] in ("schema", "field", "kind", "method", "stage"):
            try:
                doc = json.loads(r["task"]["task_json"])
            except ValueError:
                continue
            assert _errors(doc, schema, schema), r["name"]


def test_published_json_and_results_match_their_schemas():
    from uldp.collector.datasets import make_fleet_data
    from uldp.collector.planner import QuerySpec
    from uldp.collector.programs.driver import run_program
    from uldp.collector.programs.meanest import MeanEstProgram
    from uldp.collector.simulation.simulate import synthetic_privatizer

    published, result = _schema("published"), _schema("result")
    for kind, dim, dist in (("mean", 1, "uniform"), ("distribution", 4, "zipf:1.1"),
                            ("mean-l2", 2, "sphere")):
        spec = QuerySpec(kind=kind, epsilon=2.0, users=400, samples=5, dim=dim, seed=1)
        data = make_fleet_data(kind, dist, 5, dim, spec.bound, np.random.default_rng(0))
        pubs = {}
        out = run_program(MeanEstProgram(spec), synthetic_privatizer(
            spec, data, RandomSource.seeded(1), None), on_close=pubs.__setitem__)
        for pub in pubs.values():
            doc = json.loads(json.dumps(pub))
            assert _errors(doc, published, published) == [], (kind, doc)
        assert _errors(json.loads(json.dumps(out)), result, result) == [], kind


# ---- task vectors: the report, and the pre-noise statistic and rounding draws behind it -------
def _decoded(v):
    if isinstance(v, list):
        return [_decoded(x) for x in v]
    return {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}.get(v, v)


def _recomputed(case):
    """One task vector computed again from its inputs: the fields a device must reproduce."""
    import struct

    from uldp.client.tasks import TaskSpec, compute_report
    from uldp.client.trace import tracing

    task = TaskSpec.from_json(case["task"])
    x = np.asarray(_decoded(case["samples"]), dtype=np.float64)
    if case["dim"] is not None and x.size == 0:
        x = np.zeros((0, case["dim"]))
    lab = None if case["labels"] is None else np.asarray(_decoded(case["labels"]), np.float64)
    rng = RandomSource.from_key(bytes.fromhex(case["key"]))
    with tracing() as tr:
        rep = compute_report(task, x, lab, rng=rng, dim=case["dim"])
    return {"report": [int(v) for v in rep], "next_word": str(int(rng.words(1)[0])),
            "statistic": [struct.pack(">d", v).hex() for v in tr.statistic],
            "rounding": tr.rounding, "items": tr.items or None}


def _mismatches(case, fields=("report", "next_word", "statistic", "rounding", "items")):
    got = _recomputed(case)
    return [f for f in fields if got[f] != case.get(f)]


TASK_VECTORS = [c for name in ("tasks.json", "mech_tasks.json")
                for c in json.loads(FRESH[name])["cases"] if c.get("op") != "refusal"]


def test_every_task_vector_carries_its_statistic_and_rounding_and_is_reproduced():
    assert all(c["statistic"] or c.get("items") for c in TASK_VECTORS)
    assert sum(bool(c["rounding"]) for c in TASK_VECTORS) > 300
    bad = [(c["name"], m) for c in TASK_VECTORS if (m := _mismatches(c))]
    assert bad == []


def test_a_statistic_off_by_a_ten_millionth_is_caught(monkeypatch):
    """Issue 17 item 12: a device whose every statistic is ×(1 + 10^-7) reproduces most
    report integers (randomized rounding hides the error), but not the statistic."""
    from uldp.client.mechanisms import two_stage

    honest = two_stage._check_stats
    monkeypatch.setattr(two_stage, "_check_stats", lambda Y, k: honest(Y, k) * (1 + 1e-7))
    cases = json.loads(FRESH["tasks.json"])["cases"]
    nonzero = [c for c in cases  # ×(1 + 10^-7) changes a normal double (not 0, 5e-324)
               if any(abs(struct_value(h)) > 1e-300 for h in c["statistic"])]
    report_only = sum(not _mismatches(c, ("report", "next_word")) for c in nonzero)
    caught = sum("statistic" in _mismatches(c) for c in nonzero)
    assert report_only >= 0.9 * len(nonzero)  # the integers alone let (all of) them pass
    assert caught == len(nonzero) > 300  # the statistic catches every one


def struct_value(h: str) -> float:
    import struct

    return float(struct.unpack(">d", bytes.fromhex(h))[0])


@pytest.mark.parametrize("method", ["two-stage", "two-stage-paper", "two-stage-sized", "ssl",
                                    "baseline-a", "baseline-b", "oracle", "hadamard", "auto"])
def test_published_json_of_every_method_matches_the_schema(method):
    """Issue 17 item 13: what every method's phases really publish (two-stage's stage I
    with its bias bounds and rule) validates against published.schema.json, and stage-I
    intervals follow the stated rule (protocol §7.3, §14.4)."""
    from uldp.collector.datasets import make_fleet_data
    from uldp.collector.planner import QuerySpec, compile_query
    from uldp.collector.programs.driver import run_program
    from uldp.collector.programs.meanest import MeanEstProgram
    from uldp.collector.simulation.simulate import synthetic_privatizer

    published, result = _schema("published"), _schema("result")
    cases = {"hadamard": (("distribution", 4, "zipf:1.1", 400), ("mean-l1", 2, "bernoulli", 5)),
             "oracle": (("distribution", 4, "zipf:1.1", 5),)}.get(method, (
        ("mean", 1, "uniform", 5), ("mean-linf", 2, "uniform", 400),
        ("distribution", 4, "zipf:1.1", 5)))
    modes: set[str] = set()  # hadamard: the windows and the fallback both published
    for kind, dim, dist, m in cases:
        if method == "two-stage-sized" and kind == "distribution":
            continue  # not offered for distributions (issue 26)
        spec = QuerySpec(kind=kind, epsilon=2.0, users=400 if method != "hadamard" else 3000,
                         samples=m, dim=dim, seed=1, method=method)
        plan = compile_query(spec)
        data = make_fleet_data(kind, dist, m, dim, spec.bound, np.random.default_rng(0))
        pubs: dict = {}
        out = run_program(MeanEstProgram(spec), synthetic_privatizer(
            spec, data, RandomSource.seeded(1), None), on_close=pubs.__setitem__)
        assert pubs, (method, kind)
        modes.update(str(p["mode"]) for p in pubs.values() if "mode" in p)
        for pub in pubs.values():
            doc = json.loads(json.dumps(pub))
            assert _errors(doc, published, published) == [], (method, kind, doc)
            if "khat" in doc:
                _check_stage_one_intervals(plan, doc)
        assert _errors(json.loads(json.dumps(out)), result, result) == [], (method, kind)
    assert modes == ({"window", "fallback"} if method == "hadamard" else set())


def _check_stage_one_intervals(plan, doc):
    """paper: exactly §7.3's interval; adaptive: §7.3's interval or a widening of it by
    whole bins, clipped to the support [-D, D] (k̂ = 0: the support); sized: two grid
    points of stage I (§9.6) in [-D, D], one estimator per component."""
    if doc["rule"] == "sized":
        from uldp.collector.methods.sized import TwoStageSized

        for g, rows in doc["intervals"].items():
            fine = TwoStageSized().fine(plan, int(g))
            comps = plan.grouping.groups[int(g)].components
            assert len(doc["estimator"][g]) == len(rows) == len(comps)
            for c, (lo, hi) in zip(comps, rows, strict=True):
                p = fine[c]
                assert -p.bound <= lo < hi <= p.bound
                for edge in (lo, hi):
                    k = (edge + p.bound) / (2 * p.bound / p.bins)
                    assert abs(k - round(k)) < 1e-9, (lo, hi)
        return
    for g, ks in doc["khat"].items():
        params = plan.group_params(int(g))
        comps = plan.grouping.groups[int(g)].components
        for c, k, (lo, hi) in zip(comps, ks, doc["intervals"][g], strict=True):
            p = params[c]
            lo0, hi0 = p.clamp_interval(k)
            if doc["rule"] == "paper" or k == 0:
                assert (lo, hi) == (lo0, hi0)
                continue
            assert -p.bound <= lo <= max(lo0, -p.bound) and min(hi0, p.bound) <= hi <= p.bound
            for edge, base in ((lo, lo0), (hi, hi0)):
                if abs(edge) != p.bound:  # not clipped: a whole number of bins from §7.3
                    steps = abs(edge - base) / p.bin_width
                    assert abs(steps - round(steps)) < 1e-9, (lo, hi, lo0, hi0)
