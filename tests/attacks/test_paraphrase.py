"""Paraphrased trigger (TRIS round 1, docs/algorithms.md §7.3): validation, fallbacks, cache."""
from __future__ import annotations

import pytest

from sieve.attacks import generate_attack
from sieve.attacks.paraphrase import clean_reply, validate_paraphrase
from sieve.models.errors import LLMError
from sieve.models.tiny import ScriptedLLM
from sieve.resources import Resources


def _res(reply, tiny_embedder):
    return Resources(retriever=tiny_embedder, llm=ScriptedLLM(reply))


GOOD = {"who wrote the novel pride and prejudice": "Paraphrase: \"Which author penned Pride and Prejudice?\"",
        "what is the capital of australia": "Which city serves as Australia's seat of government?"}


def test_valid_paraphrases_are_used_and_cached(targets, tiny_embedder, tmp_path):
    res = _res(lambda prompt, system: next(v for k, v in GOOD.items() if k in prompt), tiny_embedder)
    out = generate_attack("paraphrase", targets, res, cache_path=str(tmp_path / "p.json"))
    d = out.records[0].documents[0]
    assert d.text == "Which author penned Pride and Prejudice?." + targets[0].payloads[0]
    assert d.metadata["paraphrase_failed"] is False and d.metadata["paraphrased_question"].startswith("Which author")
    assert out.stats["paraphrase_fallbacks"] == 0 and out.stats["paraphrase_llm_calls"] == 2
    assert "<<<QUESTION" in res.llm.calls[0][0]                     # the query is fenced as data
    # regenerate: served from the on-disk cache, no LLM call
    res2 = _res(lambda p, s: pytest.fail("LLM called despite cache"), tiny_embedder)
    again = generate_attack("paraphrase", targets, res2, cache_path=str(tmp_path / "p.json"))
    assert [x.text for x in again.documents] == [x.text for x in out.documents]
    assert again.stats["paraphrase_cached"] == 2 and again.stats["paraphrase_llm_calls"] == 0


def test_garbage_falls_back_to_the_verbatim_query_and_is_recorded(targets, tiny_embedder):
    replies = iter(["", "WHO WROTE the novel Pride and Prejudice?", "It was Jane Austen.", "Sydney",
                    "x " * 80, "   \n  "])
    res = _res(lambda p, s: next(replies), tiny_embedder)
    out = generate_attack("paraphrase", targets, res, cache_path="", retries=2)
    assert out.stats["paraphrase_fallbacks"] == 2 and out.stats["paraphrase_llm_calls"] == 6
    for rec, t in zip(out.records, targets):
        for d in rec.documents:
            assert d.metadata["paraphrase_failed"] is True
            assert d.text.startswith(t.query + ".")
    assert out.records[0].documents[0].metadata["paraphrase_failure"] == "contains an answer ('Jane Austen')"
    assert out.records[1].documents[0].metadata["paraphrase_failure"] == "empty paraphrase"


def test_llm_errors_and_missing_llm_fall_back(targets, tiny_embedder, tiny_resources):
    def boom(p, s):
        raise LLMError("timeout")

    out = generate_attack("paraphrase", targets[:1], _res(boom, tiny_embedder), cache_path="")
    assert out.records[0].documents[0].metadata["paraphrase_failure"] == "LLM error: timeout"
    out = generate_attack("paraphrase", targets[:1], tiny_resources, cache_path="")
    assert out.stats["paraphrase_fallbacks"] == 1 and "no LLM" in out.stats["paraphrase_unavailable"]


@pytest.mark.parametrize("cand,reason", [
    ("Which author penned Pride and Prejudice?", ""),
    ("who wrote the novel Pride and Prejudice?", "identical to the query"),
    ("Was it Charlotte Bronte who wrote it?", "contains an answer ('Charlotte Bronte')"),
    ("Who?", "implausible length (1 words for a 7-word question)"),
])
def test_validate_paraphrase(cand, reason, targets):
    assert validate_paraphrase(cand, targets[0]) == reason


def test_clean_reply():
    assert clean_reply('\n  Paraphrased question: "Which city is the capital?"\nextra') == "Which city is the capital?"
    assert clean_reply("") == ""
