"""The shape of the code: no import cycle inside ``sieve/``, faces never import each other, the
library never imports a face, and no module grows past the size limit without saying why.

Every import statement counts as an edge — module level, inside functions and under
``if TYPE_CHECKING:`` — because each one is a dependency a reader must follow
(docs/architecture.md, "Layers").
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "sieve"

#: Faces: the ways people use Sieve. Each calls the library and never another face.
FACES = {
    "cli": ("sieve.cli",),
    "dashboard": ("sieve.dashboard", "pages", "app"),
    "service": ("sieve.service",),
    "adapters": ("sieve.adapters",),
    "bench": ("sieve.bench",),
}
#: Faces that may import other faces: the benchmarks measure them (the dashboard's explorer, the CLI's
#: experiment set-up). Nothing imports a bench, face or library.
MEASURES_OTHER_FACES = {"bench"}
MAX_LINES = 500
#: A module over MAX_LINES must say why in its first lines, with this marker.
SIZE_REASON_MARKER = "Size:"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    files = list(PKG.rglob("*.py")) + list((ROOT / "pages").glob("*.py")) + [ROOT / "app.py"]
    return {_module_name(p): p for p in files if "__pycache__" not in p.parts}


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest known module prefix of a dotted name (``sieve.x.y`` may be a class in ``sieve.x``)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in modules:
            return cand
    return None


def import_graph() -> dict[str, set[str]]:
    """module → modules it imports (inside the project), from every import statement."""
    sources = _sources()
    modules = set(sources)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in sources.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                r = _resolve(t, modules)
                if r and r != mod:
                    graph[mod].add(r)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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

    import sys

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_cycle_between_packages():
    """Grouped by top-level package (sieve.evaluation, sieve.experiment, ...), the layers still form
    no cycle: a lower layer never reaches back up (docs/architecture.md, "Layers")."""
    g = import_graph()
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    grouped: dict[str, set[str]] = {}
    for m, ts in g.items():
        if m.startswith("sieve"):
            grouped.setdefault(top(m), set()).update(top(t) for t in ts if t.startswith("sieve") and top(t) != top(m))
    grouped.pop("sieve", None)
    grouped = {m: ts - {"sieve"} for m, ts in grouped.items()}
    cycles = find_cycles(grouped)
    assert cycles == [], "package cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _face_of(mod: str) -> str | None:
    for face, prefixes in FACES.items():
        if any(mod == p or mod.startswith(p + ".") for p in prefixes):
            return face
    return None


def test_the_graph_sees_real_edges():
    g = import_graph()
    assert "sieve.experiment.snapshots" in g["sieve.experiment"]
    assert "sieve.experiment" in g["sieve.evaluation.runner"]
    assert "sieve.defenses.base" in g["sieve.defenses.tris"]


def test_cycle_detector_finds_a_planted_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_sieve():
    g = import_graph()
    cycles = find_cycles({m: {t for t in ts if t.startswith("sieve")} for m, ts in g.items() if m.startswith("sieve")})
    assert cycles == [], "import cycles (every import statement counts):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_faces_never_import_each_other_and_the_library_never_imports_a_face():
    bad = []
    for mod, targets in import_graph().items():
        mine = _face_of(mod)
        for t in targets:
            theirs = _face_of(t)
            if theirs is not None and theirs != mine and mine not in MEASURES_OTHER_FACES:
                bad.append(f"{mod} ({mine or 'library'}) imports {t} ({theirs})")
    assert bad == [], "\n".join(bad)


def test_modules_stay_small_or_say_why():
    big = []
    for path in _sources().values():
        text = path.read_text(encoding="utf-8")
        n = text.count("\n")
        if n > MAX_LINES and SIZE_REASON_MARKER not in "\n".join(text.splitlines()[:30]):
            big.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert big == [], f"modules over {MAX_LINES} lines without a '{SIZE_REASON_MARKER}' note at the top:\n" + "\n".join(big)


def test_only_the_experiment_core_ranks_and_prepares():
    """No module outside sieve/experiment calls the retriever's ``rank`` on an index or fits a defense
    directly; they go through Experiment.rank / prepare_defense (one path for every face)."""
    offenders = []
    allowed = ("sieve.experiment", "sieve.index", "sieve.defenses", "sieve.attacks")
    for mod, path in _sources().items():
        if mod.startswith(allowed):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if node.func.attr == "rank" and owner_name in ("index", "view", "base", "sandbox", "base_index"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {owner_name}.rank(...)")
                if node.func.attr in ("force_top", "apply_placement"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.attr}(...)")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("force_top",
                                                                                                  "apply_placement"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}(...)")
    assert offenders == [], "\n".join(offenders)


#: Where defenses may be constructed from the registry directly: the experiment core (build_defense)
#: and the defense modules themselves (serial stages, fusion's evidence). Benchmarks (sieve/bench/)
#: are left out of the check for now.
MAY_BUILD_DEFENSES = ("sieve.experiment", "sieve.defenses")
NOT_CHECKED_YET = ("sieve.bench", "bench")


def defense_construction_offenders(sources: dict[str, Path]) -> list[str]:
    """Calls of ``DEFENSES.create(...)`` and uses of ``sieve.defenses.pipeline.build_defense`` (imported,
    or reached as an attribute of the ``pipeline`` module) in ``sources`` (module name → file)."""
    out: list[str] = []
    for mod, path in sources.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "create":
                owner = node.func.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name == "DEFENSES":
                    out.append(f"{where}:{node.lineno} DEFENSES.create(...)")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                names = {a.name for a in node.names}
                if (base == "sieve.defenses.pipeline" and "build_defense" in names) or (
                        base == "sieve.defenses" and "pipeline" in names and _uses_pipeline_build(tree)):
                    out.append(f"{where}:{node.lineno} imports sieve.defenses.pipeline.build_defense")
            elif isinstance(node, ast.Import) and any(a.name == "sieve.defenses.pipeline" for a in node.names):
                if _uses_pipeline_build(tree):
                    out.append(f"{where}:{node.lineno} uses sieve.defenses.pipeline.build_defense")
    return out


def _uses_pipeline_build(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "build_defense" and isinstance(n.value, (ast.Name, ast.Attribute))
               and (getattr(n.value, "id", None) or getattr(n.value, "attr", None)) == "pipeline" for n in ast.walk(tree))


def test_only_the_experiment_core_builds_defenses():
    """Faces and the evaluation layer get a defense from ``sieve.experiment`` (build_defense /
    prepare_defense), never from the registry (``DEFENSES.create``) or ``sieve.defenses.pipeline``
    directly: one path applies calibration mappings, fits and calibrates (docs/architecture.md)."""
    sources = {m: p for m, p in _sources().items()
               if not m.startswith(MAY_BUILD_DEFENSES) and not m.startswith(NOT_CHECKED_YET)}
    offenders = defense_construction_offenders(sources)
    assert offenders == [], ("build defenses through sieve.experiment (build_defense / prepare_defense):\n"
                             + "\n".join(offenders))


def test_the_defense_construction_check_sees_offenders(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from sieve.registry import DEFENSES\n"
                   "from sieve.defenses.pipeline import build_defense\n"
                   "import sieve.defenses.pipeline\n"
                   "d = DEFENSES.create('rsq')\n"
                   "e = sieve.defenses.pipeline.build_defense('rsq')\n", encoding="utf-8")
    good = tmp_path / "good.py"
    good.write_text("from sieve.experiment import build_defense\nfrom sieve.registry import DEFENSES\n"
                    "d = build_defense('rsq'); names = DEFENSES.names()\n", encoding="utf-8")
    found = defense_construction_offenders({"bad": bad, "good": good})
    assert sorted(f.split(" ", 1)[1] for f in found) == ["DEFENSES.create(...)",
                                                         "imports sieve.defenses.pipeline.build_defense",
                                                         "uses sieve.defenses.pipeline.build_defense"]
    assert all(f.startswith(f"{bad}:") for f in found)


PROTOCOL_METHODS = ("inspect", "apply", "run", "redecide", "calibrate")


def _protocol_offenders(files) -> list[str]:
    """``file:line method`` for every defense module (other than base.py) that defines a protocol
    method itself instead of score/decide (docs/architecture.md, "Defense protocol")."""
    import ast

    out = []
    for path in files:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in PROTOCOL_METHODS:
                    out.append(f"{Path(path).name}:{fn.lineno} {cls.name}.{fn.name}")
    return out


def test_no_defense_defines_the_protocol_methods():
    """inspect, apply, run, redecide and calibrate are built from score and decide in
    sieve/defenses/base.py only; every other defense module implements score/decide (and refine)."""
    files = [p for p in (ROOT / "sieve" / "defenses").glob("*.py") if p.name != "base.py"]
    assert files
    assert _protocol_offenders(files) == []


def test_the_protocol_check_sees_an_offender(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("class Mine:\n    def score(self):\n        pass\n\n    def inspect(self, r):\n        return r\n")
    assert _protocol_offenders([bad]) == ["bad.py:5 Mine.inspect"]
