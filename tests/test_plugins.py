"""Third-party plugins: entry-point groups ``sieve.defenses`` / ``sieve.attacks`` (sieve/registry.py).

A plugin here is a directory put on ``sys.path`` holding a module and a ``<name>-<version>.dist-info``
(METADATA + entry_points.txt) — what ``pip install`` leaves behind, without a build. The end-to-end
test runs ``sieve list`` and ``sieve eval`` in a subprocess, so the global registries of this test
process never see the plugins; the unit tests use a fresh :class:`Registry` with its own group.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sieve.registry import NameClashError, Registry

ROOT = Path(__file__).resolve().parents[1]


def write_plugin(site: Path, dist: str, version: str, entry_points: dict[str, dict[str, str]],
                 modules: dict[str, str]) -> None:
    """A distribution ``dist`` installed (unpacked) into ``site``: its modules and its dist-info."""
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
                for group, eps in entry_points.items()), encoding="utf-8")


# ---- the plugin of the end-to-end test: the new defense protocol (score only) ------------------
MARKER = "zyzzyva"

MARKER_PLUGIN = f'''
    """A third-party defense: removes every document that contains a marker word."""
    from __future__ import annotations

    from typing import ClassVar

    from sieve.defenses.base import Defense
    from sieve.registry import DEFENSES
    from sieve.types import Score, Scores


    @DEFENSES.register
    class MarkerFilter(Defense):
        name = "marker_filter"
        summary = "Removes documents containing a marker word (test plugin)."
        paper = "none: a plugin example (docs/architecture.md, Plugins)"
        needs = ()
        threshold_param: ClassVar[str] = "threshold"

        def __init__(self, marker: str = "{MARKER}", threshold: float = 0.5) -> None:
            super().__init__(marker=marker, threshold=threshold)

        def score(self, ranking, resources, k_ctx=5):
            out = []
            for d in ranking.documents:
                hit = self.marker in d.text.lower()
                out.append(Score(d.id, 1.0 if hit else 0.0, "scored", "marker", {{"marker": hit}}, None, None, ""))
            return Scores(out)
'''

# An attack given as a class entry point, not decorated: the registry registers it.
ECHO_ATTACK = '''
    from sieve.attacks.blackbox import TemplateAttack


    class EchoAttack(TemplateAttack):
        name = "echo_attack"
        summary = "PoisonedRAG black-box under another name (test plugin)."
        paper = "none: a plugin example (docs/architecture.md, Plugins)"
        presets = {}
'''

BROKEN_PLUGIN = '''
    import sieve_no_such_dependency_xyz  # noqa: F401
'''

# A class entry point that takes a built-in name.
CLASH_PLUGIN = '''
    from sieve.defenses.none import NoDefense


    class NotNone(NoDefense):
        name = "none"
        summary = "Tries to replace the built-in none."
        paper = "none: a plugin example"
'''


def write_dataset(root: Path) -> Path:
    """Two questions, a dozen passages, and pr_b poisons that all carry the marker word."""
    root.mkdir(parents=True)
    queries = [("q1", "who painted the mona lisa", ["Leonardo da Vinci"]),
               ("q2", "what is the capital city of australia", ["Canberra"])]
    docs = ["The Mona Lisa is a portrait painted by Leonardo da Vinci.",
            "Leonardo da Vinci worked on the Mona Lisa in Florence.",
            "The Louvre in Paris displays the Mona Lisa.",
            "Canberra is the capital city of Australia.",
            "Parliament House in Canberra houses the Parliament of Australia.",
            "Sydney is the largest city in Australia.",
            "Bread is made from flour, water, salt and yeast.",
            "The river Nile flows north into the Mediterranean Sea.",
            "Chess is a board game for two players.",
            "Honey bees communicate with a waggle dance.",
            "The violin is a string instrument played with a bow.",
            "Mount Everest is the highest mountain above sea level."]
    (root / "corpus.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n"
                                               for i, t in enumerate(docs)), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps({"id": q, "text": t, "answers": a}) + "\n"
                                                for q, t, a in queries), encoding="utf-8")
    targets = {"q1": "Michelangelo", "q2": "Sydney"}
    lines = [{"query_id": q, "query": t, "correct_answers": a, "target_answer": targets[q], "attack": "pr_b",
              "documents": [{"id": f"attack:pr_b:{q}:{j}",
                             "text": f"{t}. {MARKER} records say the answer is {targets[q]} ({j})."}
                            for j in range(3)]}
             for q, t, a in queries]
    (root / "attacks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return root


def _sieve(args: list[str], site: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SIEVE_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), SIEVE_CACHE_DIR=str(tmp / "cache"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, "-c", "from sieve.cli import app; app(prog_name='sieve')", *args],
                          check=False, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


def test_plugin_defense_is_listed_and_evaluated(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    write_plugin(site, "sieve-marker-plugin", "0.1",
                 {"sieve.defenses": {"marker_filter": "sieve_marker_plugin"},
                  "sieve.attacks": {"echo_attack": "sieve_marker_plugin_attacks:EchoAttack"}},
                 {"sieve_marker_plugin": MARKER_PLUGIN, "sieve_marker_plugin_attacks": ECHO_ATTACK})
    write_plugin(site, "broken-plugin", "0.2", {"sieve.defenses": {"broken": "sieve_broken_plugin"}},
                 {"sieve_broken_plugin": BROKEN_PLUGIN})
    write_plugin(site, "clash-plugin", "0.3", {"sieve.defenses": {"not_none": "sieve_clash_plugin:NotNone"}},
                 {"sieve_clash_plugin": CLASH_PLUGIN})

    res = _sieve(["list"], site, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    print(res.stdout + res.stderr)        # shown with pytest -s
    lines = res.stdout.splitlines()
    plugin = [ln for ln in lines if ln.strip().startswith("marker_filter ")]
    assert len(plugin) == 1 and plugin[0].endswith("(from sieve-marker-plugin 0.1)"), plugin
    attack = [ln for ln in lines if ln.strip().startswith("echo_attack ")]
    assert len(attack) == 1 and attack[0].endswith("(from sieve-marker-plugin 0.1)"), attack
    builtin = [ln for ln in lines if ln.strip().startswith(("none ", "tris ", "pr_b "))]
    assert len(builtin) == 3 and not any("(from " in ln for ln in builtin), builtin
    assert "Vanilla RAG" in next(ln for ln in builtin if ln.strip().startswith("none "))   # not replaced
    assert "broken" not in res.stdout and "not_none" not in res.stdout
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(warnings) == 2, res.stderr
    broken = next(w for w in warnings if "broken-plugin 0.2" in w)
    assert "'broken = sieve_broken_plugin'" in broken and "No module named 'sieve_no_such_dependency_xyz'" in broken
    clash = next(w for w in warnings if "clash-plugin 0.3" in w)
    assert "'none'" in clash and "sieve-rag" in clash and "cannot be replaced" in clash

    ds = write_dataset(tmp_path / "ds")
    out = tmp_path / "run"
    res = _sieve(["eval", str(ds), "--out", str(out), "--defenses", "none,marker_filter", "--attacks", "pr_b",
                  "--depth", "10", "--retriever", "tiny-hashing", "--no-llm", "--no-progress"], site, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "broken-plugin 0.2" in res.stderr          # reported by the registry's log, not fatal
    rows = {(r["defense"], r["attack"]): r for r in json.loads((out / "summary.json").read_text())["results"]}
    assert {d for d, _ in rows} == {"none", "marker_filter"}
    assert rows[("none", "pr_b")]["poison_in_context_rate"] == 1.0
    mf = rows[("marker_filter", "pr_b")]
    assert (mf["queries"], mf["poison_in_context_rate"], mf["poison_removal_rate"]) == (2, 0.0, 1.0)
    assert rows[("marker_filter", "pr_b")]["clean_removal_rate"] == 0.0
    assert rows[("marker_filter", "clean")]["clean_removal_rate"] == 0.0


# ---- the registry's plugin loading, in process (a fresh registry and its own group) ------------
GOOD = '''
    from sieve.params import Params


    class Gadget(Params):
        name = "gadget"
        summary = "A gadget."
        paper = "nowhere"
        presets = {"gadget_fast": {"params": {"speed": 2}}}

        def __init__(self, speed: int = 1) -> None:
            super().__init__(speed=speed)
'''

HALF_BROKEN = '''
    from sieve.params import Params
    from {registry_module} import REG


    @REG.register
    class Widget(Params):
        name = "widget"
        summary = "Registered, then the module fails."
        paper = "nowhere"

    raise RuntimeError("half-way")
'''

SELF_REGISTERING = '''
    from sieve.params import Params
    from {registry_module} import REG


    @REG.register
    class Gizmo(Params):
        name = "{name}"
        summary = "A gizmo."
        paper = "nowhere"
'''


@pytest.fixture
def plugin_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sieve_test_builtins").mkdir()
    (site / "sieve_test_builtins" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    before = set(sys.modules)
    yield site
    for m in set(sys.modules) - before:
        if m.startswith("sieve_test_"):
            del sys.modules[m]


def _registry(site: Path, group: str) -> Registry:
    """A fresh registry importable as ``sieve_test_reg_<group>.REG`` (for self-registering plugins)."""
    mod = f"sieve_test_reg_{group}"
    (site / f"{mod}.py").write_text(f"from sieve.registry import Registry\n"
                                    f"REG = Registry('thing', 'sieve_test_builtins', group='sieve_test.{group}')\n",
                                    encoding="utf-8")
    import importlib

    importlib.invalidate_caches()
    return importlib.import_module(mod).REG


def test_class_entry_point_is_registered_with_its_distribution(plugin_site):
    write_plugin(plugin_site, "gadget-pkg", "1.2", {"sieve_test.a": {"gadget": "sieve_test_gadget:Gadget"}},
                 {"sieve_test_gadget": GOOD})
    reg = _registry(plugin_site, "a")
    assert reg.names() == ["gadget", "gadget_fast"] and reg.problems() == []
    e = reg.entry("gadget_fast")
    assert (e.distribution, e.version, e.provider, e.builtin) == ("gadget-pkg", "1.2", "gadget-pkg 1.2", False)
    assert e.create().speed == 2


def test_failing_plugin_is_skipped_whole_and_reported(plugin_site, caplog):
    write_plugin(plugin_site, "half-pkg", "0.1", {"sieve_test.b": {"widget": "sieve_test_half"}},
                 {"sieve_test_half": HALF_BROKEN.replace("{registry_module}", "sieve_test_reg_b")})
    write_plugin(plugin_site, "gizmo-pkg", "0.1", {"sieve_test.b": {"gizmo": "sieve_test_gizmo"}},
                 {"sieve_test_gizmo": SELF_REGISTERING.replace("{registry_module}", "sieve_test_reg_b")
                  .replace("{name}", "gizmo")})
    reg = _registry(plugin_site, "b")
    with caplog.at_level("WARNING", logger="sieve.registry"):
        assert reg.names() == ["gizmo"]                 # the other plugin still loads
    [p] = reg.problems()
    assert (p.entry_point, p.distribution, p.error) == ("widget = sieve_test_half", "half-pkg 0.1",
                                                        "RuntimeError: half-way")
    assert [r.getMessage() for r in caplog.records] == [f"warning: {p.message}"]
    assert reg.entry("gizmo").provider == "gizmo-pkg 0.1"
    with pytest.raises(KeyError, match="half-way"):     # the unknown-name error says why
        reg.entry("widget")


def test_clash_between_plugins_names_both_packages(plugin_site):
    for dist in ("first-pkg", "second-pkg"):
        mod = f"sieve_test_{dist.split('-')[0]}"
        write_plugin(plugin_site, dist, "0.1", {"sieve_test.c": {"gizmo": mod}},
                     {mod: SELF_REGISTERING.replace("{registry_module}", "sieve_test_reg_c").replace("{name}", "gizmo")})
    reg = _registry(plugin_site, "c")
    assert reg.names() == ["gizmo"] and reg.entry("gizmo").distribution == "first-pkg"
    [p] = reg.problems()
    assert p.distribution == "second-pkg 0.1"
    assert "NameClashError" in p.error and "second-pkg 0.1" in p.error and "first-pkg 0.1" in p.error


def test_builtin_names_cannot_be_replaced(plugin_site):
    from sieve.params import Params

    reg = Registry("thing", "sieve_test_builtins", group="sieve_test.none")

    class Builtin(Params):
        name = "thing"
        summary = "Built in."
        paper = "nowhere"

    Builtin.__module__ = "sieve.defenses.thing"        # what a built-in module's class looks like
    reg.register(Builtin)
    assert reg._entries["thing"].builtin

    class Plugin(Builtin):
        pass

    Plugin.__module__ = "my_plugin"
    with pytest.raises(NameClashError, match=r"of my_plugin .*already registered by sieve-rag.*cannot be replaced"):
        reg.register(Plugin)
    assert reg._entries["thing"].factory is Builtin and reg.problems() == []

    # a plugin imported by hand before the built-ins loaded: the built-in still wins, the plugin is reported
    reg2 = Registry("thing", "sieve_test_builtins", group="sieve_test.none")
    reg2.register(Plugin)
    reg2.register(Builtin)
    assert reg2._entries["thing"].factory is Builtin
    [p] = reg2.problems()
    assert p.distribution == "my_plugin" and "cannot be replaced" in p.error
