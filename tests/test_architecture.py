"""The shape of the code base (docs/architecture.md), checked rather than hoped for.

* The import graph of ``uldp.client`` and ``uldp.collector`` — every ``import`` statement,
  also the ones inside functions — has no cycle, and no module imports a layer above its
  own (the layers are listed below; the device SDK never imports the collector).
* Neither do the collector's top-level packages, taken whole (one listed exception,
  issue 27).
* No dispatch on method strings (``method ==``): methods are objects.
* No source file over 600 lines, no function over 60 lines (generated code excluded).
* The public API imports from short paths; the doctests that exist pass.
* The repository stands alone: no source file cites a specification file outside it,
  every ``docs/<name>.md`` a source file names exists, and every ``H§``/``P§``/``C§``
  reference in ``collector/central`` is a heading of ``docs/central-algorithms.md``.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"uldp.client": ROOT / "client", "uldp.collector": ROOT / "collector"}
GENERATED = re.compile(r"_pb2(_grpc)?\.pyi?$")

#: layers from the bottom; a module may import its own layer or lower ones (longest
#: matching prefix decides a module's layer)
LAYERS: list[tuple[str, ...]] = [
    ("uldp.client.wire",),
    ("uldp.client",),
    ("uldp.collector.estimators", "uldp.collector.mechanisms", "uldp.collector.progress",
     "uldp.collector.datasets", "uldp.collector.csvdata", "uldp.collector.central",
     "uldp.collector.accounting", "uldp.collector.errors", "uldp.collector.placement",
     "uldp.collector.lazy"),
    ("uldp.collector.methods", "uldp.collector.plan_advice"),
    ("uldp.collector.planner",),
    ("uldp.collector.models", "uldp.collector.simulation",
     "uldp.collector.simulation.realdata"),
    ("uldp.collector.programs",),
    ("uldp.collector.simulation.simulate", "uldp.collector.learning",
     "uldp.collector.simulation.own_data"),
    ("uldp.collector.storage", "uldp.collector.security"),
    ("uldp.collector.service", "uldp.collector.shuffler", "uldp.collector.observe",
     "uldp.collector.analyst"),
    ("uldp.collector.http",),
    ("uldp.collector.simulation.fleet", "uldp.collector.simulation.gateway",
     "uldp.collector.simulation.demo", "uldp.collector.simulation.sandbox",
     "uldp.collector.learning.cli", "uldp.collector.central.cli", "uldp.collector.cli",
     "uldp.collector"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            if GENERATED.search(path.name):
                continue
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str, top_level: bool = False) -> set[str]:
    """The uldp modules a module imports (absolute and relative; at any depth, or only
    the statements run when the module is imported)."""
    tree = ast.parse(MODULES[name].read_text())
    base = name if _is_package(name) else name.rpartition(".")[0]
    found: set[str] = set()
    nodes = tree.body if top_level else list(ast.walk(tree))
    for node in nodes:
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                parent = base.split(".")[: len(base.split(".")) - node.level + 1]
                mod = ".".join(parent + ([mod] if mod else []))
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in MODULES]


def _runtime_graph() -> dict[str, set[str]]:
    """What importing a module runs: its top-level imports, and importing a module first
    imports each package above it (except the importer's own packages, already loading)."""
    out: dict[str, set[str]] = {}
    for m in MODULES:
        edges = set()
        for t in _imports(m, top_level=True):
            edges.add(t)
            edges.update(p for p in _parents(t) if p not in _parents(m) and p != m)
        out[m] = {t for t in edges if not (_is_package(m) and t.startswith(m + "."))}
    return out


def layer(name: str) -> int:
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank >= 0, f"{name} is in no layer of tests/test_architecture.py"
    return rank


def test_no_upward_imports():
    bad = [(m, t) for m, ts in GRAPH.items() for t in ts
           if layer(t) > layer(m) and not t.startswith(m + ".")]
    assert not bad, "upward imports:\n" + "\n".join(f"{m} -> {t}" for m, t in sorted(bad))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    # a package's __init__ importing its own submodules is not a cycle of the code
    graph = {m: {t for t in ts if not (_is_package(m) and t.startswith(m + "."))}
             for m, ts in GRAPH.items()}
    assert _cycles(graph) == []


def test_importing_never_runs_in_a_cycle():
    assert _cycles(_runtime_graph()) == []


#: package-level edges between the collector's top-level packages that still close a cycle,
#: each with the issue that removes it (a new entry needs the same justification)
KNOWN_PACKAGE_CYCLES: set[tuple[str, str]] = set()


def _top(name: str) -> str | None:
    """The collector's top-level package (or module) ``name`` belongs to; None outside
    the collector and for its root ``__init__`` (the public facade imports everything)."""
    parts = name.split(".")
    return parts[2] if parts[:2] == ["uldp", "collector"] and len(parts) > 2 else None


def _package_graph() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, ts in GRAPH.items():
        a = _top(m)
        if a is None:
            continue
        out.setdefault(a, set()).update(b for t in ts if (b := _top(t)) not in (None, a))
    return out


def test_no_package_level_cycles():
    """The collector's top-level packages import each other in one direction only: a
    module may sit in a low layer inside a package whose other modules sit high
    (``simulation.simulate`` and ``simulation.demo``), but no package imports back a
    package that imports it (``simulation`` → ``cli`` → ``simulation`` is a cycle even
    when every single module edge points down)."""
    graph = {a: {b for b in bs if (a, b) not in KNOWN_PACKAGE_CYCLES}
             for a, bs in _package_graph().items()}
    cycles = _cycles(graph)
    detail = [f"{a} -> {b}: " + ", ".join(sorted(f"{m} -> {t}" for m, ts in GRAPH.items()
                                                  if _top(m) == a for t in ts if _top(t) == b))
              for comp in cycles for a in comp for b in comp if b in graph.get(a, ())]
    assert cycles == [], "package-level import cycles:\n" + "\n".join(detail)


def test_known_package_cycles_still_exist():
    """An exception that no longer applies is removed from the list, so it cannot hide a
    new cycle later."""
    graph = _package_graph()
    stale = [e for e in sorted(KNOWN_PACKAGE_CYCLES) if e[1] not in graph.get(e[0], ())]
    assert stale == [], f"no longer imported, remove from KNOWN_PACKAGE_CYCLES: {stale}"


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_dispatch_on_method_strings():
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in MODULES.values()
            for i, line in enumerate(p.read_text().splitlines(), 1) if "method ==" in line]
    assert hits == []


def test_files_and_functions_are_short():
    long_files = [str(p.relative_to(ROOT)) for p in MODULES.values()
                  if len(p.read_text().splitlines()) > 600]
    long_funcs = []
    for p in MODULES.values():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > 60:
                    long_funcs.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({n})")
    assert long_files == [] and long_funcs == []


def test_public_api():
    from uldp.client import Device, RandomSource, TaskSpec, compute_report  # noqa: F401
    from uldp.collector import QuerySpec, compile_query, program_for, run_query  # noqa: F401
    from uldp.collector.central import hlm_mean, pmwm_mean, wme_mean  # noqa: F401
    from uldp.collector.learning import LDPLogisticRegression, LDPSGDRegressor  # noqa: F401


@pytest.mark.parametrize("name", sorted(m for m, p in MODULES.items()
                                        if ">>>" in p.read_text()))
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


#: the design specifications the code was built from; they live outside the repository,
#: so source files cite their restatement in docs/ instead
EXTERNAL_SPECS = ("huber_user_level_dp.md", "private_modified_winsorized_mean.md",
                  "composition_suppression.md", "user_level_ldp.md")
CENTRAL_DOC = ROOT / "docs" / "central-algorithms.md"
DOC_REF = re.compile(r"docs/([\w.-]+\.md)")
#: ``H§2.5``, ``P§2.4.1``, ``C§5 B13``: a part, a section number and an optional decision
PART_REF = re.compile(r"([HPC])§(\d+(?:\.\d+)*)(?:\s+([AB]\d+))?")


def _sources() -> list[Path]:
    return sorted(p for folder in PACKAGES.values() for p in folder.rglob("*.py"))


def _unresolved(text: str, headings: list[str]) -> list[str]:
    """The ``H§n.m`` (``H§n A7``) references of ``text`` that no heading starts with."""
    def resolves(label: str) -> bool:
        return any(h.startswith(label) and not h[len(label):][:1].isalnum()
                   and not h[len(label):].startswith(".") for h in headings)

    bad = []
    for m in PART_REF.finditer(text):
        section = f"{m[1]}§{m[2]}"
        if not resolves(section) or (m[3] and not resolves(f"{section} {m[3]}")):
            bad.append(m[0])
    return bad


def _headings(path: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in path.read_text().splitlines()
            if line.startswith("#")]


def test_references_stay_inside_the_repository():
    specs = [f"{p.relative_to(ROOT)}: {name}" for p in _sources()
             for name in EXTERNAL_SPECS if name in p.read_text()]
    docs = [f"{p.relative_to(ROOT)}: docs/{name}" for p in _sources()
            for name in DOC_REF.findall(p.read_text()) if not (ROOT / "docs" / name).is_file()]
    headings = _headings(CENTRAL_DOC)
    central = sorted((ROOT / "collector" / "central").glob("*.py"))
    sections = [f"{p.relative_to(ROOT)}: {ref}" for p in central
                for ref in _unresolved(p.read_text(), headings)]
    # inside collector/central every § names its part (the numbering of docs/algorithms.md
    # is unprefixed, so a bare § there would be ambiguous)
    bare = [f"{p.relative_to(ROOT)}:{i}" for p in central
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"(?<![HPC])§", line)]
    assert specs == [] and docs == [] and sections == [] and bare == [], (
        f"external specs: {specs}\nmissing docs: {docs}\nunresolved sections: {sections}"
        f"\nunprefixed §: {bare}")


def test_the_reference_resolver_resolves():
    headings = ["H§2 HLM", "H§2.1 Parameters", "H§6 Decisions", "H§6 A8 Repaired h"]
    assert _unresolved("H§2, H§2.1 and H§6 A8 (H§2.1/H§6)", headings) == []
    assert _unresolved("H§2.10, H§2.1.3, P§2, H§6 A1, H§6 A80", headings) == [
        "H§2.10", "H§2.1.3", "P§2", "H§6 A1", "H§6 A80"]
