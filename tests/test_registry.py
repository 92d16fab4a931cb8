"""The registered names are a public contract (issues: TRIS/baselines, RAGSieve, attacks)."""
from __future__ import annotations

import importlib

import pytest

from sieve.registry import ATTACKS, DEFENSES

REQUIRED_DEFENSES = {"none", "tris", "tris_l1", "tris_l2", "tris_l3", "tris_full", "trustrag",
                     "robustrag", "perplexity", "rsq", "rsg", "rsg_rsq"}
REQUIRED_ATTACKS = {"pr_b", "pr_w", "paraphrase", "diverse", "payload_only", "script", "forced_top"}


@pytest.mark.parametrize("registry", [DEFENSES, ATTACKS], ids=["defenses", "attacks"])
def test_every_listed_module_exists(registry):
    for module in registry._modules:
        importlib.import_module(module)  # a missing module would silently drop recipes


def test_required_defense_names_registered():
    assert REQUIRED_DEFENSES <= set(DEFENSES.names())


def test_required_attack_names_registered():
    assert REQUIRED_ATTACKS <= set(ATTACKS.names())


@pytest.mark.parametrize("registry", [DEFENSES, ATTACKS], ids=["defenses", "attacks"])
def test_entries_have_metadata(registry):
    for e in registry.entries():
        assert e.summary, f"{e.name} has no summary"
        assert e.paper, f"{e.name} has no paper/provenance"
        for need in e.needs:
            assert need in {"retriever", "embedder", "lm", "token_encoder", "llm"}, (e.name, need)


def test_unknown_name_error_lists_known_names():
    with pytest.raises(KeyError) as ei:
        DEFENSES.create("no-such-defense")
    assert "tris" in str(ei.value)
