"""The registered names are a public contract (issues: TRIS/baselines, RAGSieve, attacks).

The name sets below are the contract (README "Defenses:" / "Attacks:"): every one must stay registered,
from sieve-rag itself. New built-ins may be added without editing this file; plugins are tested in
tests/test_plugins.py.
"""
from __future__ import annotations

import pytest

from sieve.registry import ATTACKS, BUILTIN_DISTRIBUTION, DEFENSES, RESOURCE_ROLES, Registry

DEFENSE_NAMES = {"none", "tris", "tris_l1", "tris_l2", "tris_l3", "tris_full", "trustrag", "robustrag",
                 "perplexity", "rsq", "rsq_rescore", "rsg", "rsg_rsq", "answer_consistency", "fusion", "ragdefender"}
ATTACK_NAMES = {"pr_b", "pr_w", "paraphrase", "diverse", "payload_only", "script", "forced_top",
                "single_trigger", "single_fluent", "near_duplicate", "judge_aware"}


def test_registries_discover_every_module_of_their_package():
    from pathlib import Path

    import sieve

    assert DEFENSES.package == "sieve.defenses" and ATTACKS.package == "sieve.attacks"
    assert DEFENSES.group == "sieve.defenses" and ATTACKS.group == "sieve.attacks"   # plugin entry points
    for registry, sub in ((DEFENSES, "defenses"), (ATTACKS, "attacks")):
        pkg = Path(sieve.__file__).parent / sub
        files = {f"sieve.{sub}.{p.stem}" for p in pkg.glob("*.py") if not p.stem.startswith("_")}
        files |= {f"sieve.{sub}.{p.parent.name}" for p in pkg.glob("*/__init__.py") if not p.parent.name.startswith("_")}
        assert set(registry.modules()) == files
    assert {"sieve.defenses.tris", "sieve.defenses.rsq", "sieve.defenses.none"} <= set(DEFENSES.modules())
    assert {"sieve.attacks.blackbox", "sieve.attacks.hotflip", "sieve.attacks.placement"} <= set(ATTACKS.modules())


@pytest.mark.parametrize(("registry", "contract"), [(DEFENSES, DEFENSE_NAMES), (ATTACKS, ATTACK_NAMES)],
                         ids=["defenses", "attacks"])
def test_public_names_are_registered_as_builtins(registry, contract):
    names = registry.names()
    missing = contract - set(names)
    assert not missing, f"public {registry.kind} names missing: {sorted(missing)}"
    assert len(names) == len(set(names))
    for name in contract:
        e = registry.entry(name)
        assert e.builtin and e.distribution == BUILTIN_DISTRIBUTION, (name, e.provider)
        assert e.factory.__module__.startswith(registry.package + "."), (name, e.factory.__module__)


def test_readme_lists_the_public_names_and_only_registered_ones():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    flat = " ".join(readme.split())
    defenses = flat.split("Defenses:", 1)[1].split("Attacks:", 1)[0]
    attacks = flat.split("Attacks:", 1)[1].split(". ", 1)[0]
    for documented, contract, registry in ((defenses, DEFENSE_NAMES, DEFENSES), (attacks, ATTACK_NAMES, ATTACKS)):
        names = set(re.findall(r"`([a-z0-9_]+)`", documented))
        assert contract <= names, sorted(contract - names)
        assert names <= set(registry.names()), sorted(names - set(registry.names()))


@pytest.mark.parametrize("registry", [DEFENSES, ATTACKS], ids=["defenses", "attacks"])
def test_entries_have_metadata_from_their_class(registry):
    for e in registry.entries():
        if not e.builtin:    # an installed third-party plugin: its own metadata rules
            continue
        assert e.summary and "\n" not in e.summary, e.name
        assert "docs/algorithms.md §" in e.paper, e.name
        assert set(e.needs) <= set(RESOURCE_ROLES), (e.name, e.needs)
        cls = e.factory
        spec = {} if e.name == cls.name else cls.presets[e.name]
        assert (e.summary, e.paper, e.needs, e.preset) == (
            spec.get("summary", cls.summary), spec.get("paper", cls.paper),
            tuple(spec.get("needs", cls.needs)), spec.get("params", {}))


def test_known_metadata_values():
    assert DEFENSES.entry("tris").needs == ("judge", "llm")
    assert DEFENSES.entry("tris_l2").needs == () and DEFENSES.entry("tris_l2").preset == {"use_l1": False,
                                                                                          "l3_mode": "off"}
    assert DEFENSES.entry("rsq_rescore").preset == {"refill": "rescore"}
    assert DEFENSES.entry("rsg_rsq").needs == ("retriever", "causal_lm", "token_encoder")
    assert DEFENSES.entry("perplexity").needs == ("causal_lm",)
    assert ATTACKS.entry("diverse").preset == {"trigger": "query", "join": ". "}
    assert ATTACKS.entry("pr_w").needs == ("retriever",) and ATTACKS.entry("paraphrase").needs == ("llm",)


def test_unknown_name_error_lists_known_names():
    with pytest.raises(KeyError) as ei:
        DEFENSES.create("no-such-defense")
    assert "tris" in str(ei.value)


def test_create_rejects_unknown_parameters_by_name():
    with pytest.raises(ValueError) as ei:
        DEFENSES.create("rsq", threshold=1.37)      # the calibration-YAML typo of issue 10
    assert str(ei.value) == "rsq: unknown parameter 'threshold'; valid parameters: eta_q, refill, max_rounds, trace_tokens, inline_traces"
    with pytest.raises(ValueError, match="pr_b: unknown parameter 'iterations'"):
        ATTACKS.create("pr_b", iterations=3)
    assert DEFENSES.create("rsq_rescore", max_rounds=2).get_params() == {
        "eta_q": 1.0, "refill": "rescore", "max_rounds": 2, "trace_tokens": True, "inline_traces": False}


def test_decorator_takes_metadata_from_the_class_and_checks_it():
    from sieve.params import Params

    reg = Registry("thing", "sieve.defenses")

    class Good(Params):
        name = "good"
        summary = "A good thing."
        paper = "nowhere (docs/algorithms.md §1)"
        needs = ("judge",)
        presets = {"good_fast": {"params": {"speed": 2}, "summary": "Fast."}}

        def __init__(self, speed: int = 1) -> None:
            super().__init__(speed=speed)

    assert reg.register(Good) is Good
    assert [e.name for e in reg._entries.values()] == ["good", "good_fast"]
    fast = reg._entries["good_fast"]
    assert fast.summary == "Fast." and fast.paper == Good.paper and fast.needs == ("judge",)
    assert fast.create().speed == 2 and fast.create().label == "good_fast"

    class BadNeeds(Good):
        name = "bad"
        needs = ("embedder",)
        presets = {}

    with pytest.raises(ValueError, match="unknown needs"):
        reg.register(BadNeeds)

    class BadPreset(Good):
        name = "bad2"
        presets = {"bad2_x": {"params": {"nope": 1}}}

    with pytest.raises(ValueError, match="unknown parameter 'nope'"):
        reg.register(BadPreset)
