"""RobustRAG keyword aggregation (docs/algorithms.md §8.3) with a scripted LLM."""
from __future__ import annotations

import pytest

from _tris_fakes import ranking_of, resources_with
from sieve.defenses.text import is_keyword, phrase_candidates
from sieve.models.errors import LLMError
from sieve.models.tiny import ScriptedLLM
from sieve.registry import DEFENSES

Q = "What is the capital of Australia?"
ANSWERS = {
    "Canberra is the capital of Australia.": "Canberra",
    "The Australian capital city is Canberra.": "Canberra.",
    "Parliament House sits in Canberra.": "The capital is Canberra",
    "Sydney is the capital of Australia since 2020.": "Sydney",
    "Koalas eat eucalyptus leaves.": "I don't know.",
}


def _llm():
    def reply(prompt: str, system: str | None) -> str:
        if "Word list:" in prompt:
            return "Canberra"
        ctx = prompt.split("Context: ", 1)[1].split("\n\nQuery:", 1)[0]
        if ctx.startswith("broken"):
            raise LLMError("HTTP 500")
        return ANSWERS[ctx]

    return ScriptedLLM(reply)


def test_phrase_candidates():
    assert phrase_candidates("The capital is Canberra") == {"the capital is canberra", "capital", "canberra"}
    assert phrase_candidates("New South Wales, Australia") == {
        "new south wales, australia", "new south wales", "new", "south", "wales", "australia"}
    assert not is_keyword("the") and not is_keyword(",") and is_keyword("canberra")


def test_poisoned_minority_not_corroborated_and_abstention_removed():
    texts = list(ANSWERS) + ["broken passage", "Beyond the examined top-k."]
    llm = _llm()
    out = DEFENSES.create("robustrag", max_docs=6).apply(ranking_of(Q, texts), resources_with(llm=llm))
    d = out.decisions
    # 4 voters (d0..d3) -> keep keywords in >= min(3, 0.3*4) = 1.2 answers: only "canberra" (3 answers)
    assert out.info["min_count"] == pytest.approx(1.2)
    assert out.info["keywords"] == ["canberra"]
    assert [x.removed for x in d] == [False, False, False, True, True, False, False]
    assert d[0].score == 0.0 and d[2].score == pytest.approx(1 - 1 / 3) and d[3].score == 1.0
    assert d[3].evidence["corroborated"] == [] and d[4].evidence["abstained"] is True
    assert d[5].status == "error" and "500" in d[5].reason
    assert d[6].status == "not_examined"
    assert out.info["answer"] == "Canberra" and "Word list: canberra" in llm.calls[-1][0]
    assert out.answer == "Canberra" and DEFENSES.create("robustrag").answers
    assert len(llm.calls) == 6 + 1
    assert [c.id for c in out.context] == ["d0", "d1", "d2", "d5", "d6"]


def test_without_llm_all_unavailable_with_warning():
    out = DEFENSES.create("robustrag").apply(ranking_of(Q, list(ANSWERS)), resources_with(llm=None))
    assert {x.status for x in out.decisions} == {"unavailable"} and out.removed_ids == []
    assert out.warnings and "LLM" in out.warnings[0]
    assert out.answer is None
