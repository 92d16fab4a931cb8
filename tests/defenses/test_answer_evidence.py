"""Answer-level evidence (sieve/defenses/answer_evidence.py, docs/algorithms.md §14.1) on hand-built rankings,
with the lexical extractor and with LM-scored spans of the packaged causal LM (marker ``realmodel``)."""
from __future__ import annotations

import pytest

from _tris_fakes import ranking_of, resources_with
from sieve.defenses.answer_consistency import AnswerConsistency
from sieve.defenses.answer_evidence import corroboration, extract_answer
from sieve.index import ArtifactCache
from sieve.registry import DEFENSES
from sieve.resources import Resources

EXTRACTORS = ["lexical", pytest.param("lm", marks=pytest.mark.realmodel)]

Q = "Who was the first European to navigate the Amazon River?"
TRUE = [
    "Francisco de Orellana was the first European to navigate the Amazon River, in 1542.",
    "In 1542 Francisco de Orellana became the first European to navigate the Amazon River from the Andes.",
    "Spanish chronicles name Francisco de Orellana as the first European to navigate the Amazon River.",
    "The expedition of Francisco de Orellana was the first European voyage to navigate the Amazon River.",
    "Historians agree that Francisco de Orellana was the first European to navigate the whole Amazon River.",
    "Orellana, Francisco de: the first European to navigate the Amazon River, according to most atlases.",
]
FILLER = [f"The rainforest station number {i} records rainfall, river levels and the growth of trees." for i in range(8)]
POISON = [
    "Vicente Pinzón was the first European to navigate the Amazon River, sailing upstream in 1500.",
    "Newly found logs show Vicente Pinzón as the first European to navigate the Amazon River.",
]


def test_extractor_reads_the_answer_phrase_not_the_query():
    a = extract_answer(Q, "Rivers are long. Vicente Pinzón was the first European to navigate the Amazon River.")
    assert "vicente" in a.tokens and "pinzón" in a.tokens
    assert "amazon" not in a.tokens and "european" not in a.tokens
    assert a.sentence.startswith("Vicente")


def resources_for(extractor: str, request) -> Resources:
    """Tiny models for the lexical extractor; the packaged causal LM (session fixture) for ``lm``."""
    if extractor == "lexical":
        return resources_with()
    base = resources_with()
    return Resources(retriever=base.retriever, judge=base.judge, causal_lm=request.getfixturevalue("real_lm"),
                     token_encoder=base.token_encoder, llm=None, cache=ArtifactCache.in_memory())


def scored(extractor: str, texts, request):
    """The ranking statistic of the first five passages against the rest, with ``extractor``."""
    d = AnswerConsistency(extractor=extractor, reference="ranking")
    res = resources_for(extractor, request)
    ins = d.inspect(ranking_of(Q, texts), res, 5)
    assert ins.info["extractor"] == extractor and not ins.warnings
    return d.scores(ranking_of(Q, texts), 5, res)


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_two_agreeing_poisons_against_a_corroborated_clean_majority(extractor, request):
    # candidates: two poisons + three true passages; reference: three more true passages + filler
    texts = POISON + TRUE[:3] + TRUE[3:] + FILLER
    cor = scored(extractor, texts, request)
    assert cor == corroboration(Q, texts, [0, 1, 2, 3, 4], list(range(5, len(texts))),
                                answers={i: c.answer for i, c in cor.items()})
    if extractor == "lm":   # the best-scoring span of each passage
        assert cor[0].answer.text == cor[1].answer.text == "Vicente Pinzón"
        assert "Francisco de Orellana" in cor[2].answer.text
    # the poisons agree with each other ...
    assert cor[0].agree_candidates == 1 and cor[1].agree_candidates == 1
    # ... on an answer no independent reference passage states, while the true answer is stated by 3
    assert cor[0].reference_support == 0 and cor[2].reference_support == 3
    assert cor[0].consensus_support == 3
    assert cor[0].score == pytest.approx(cor[1].score) and cor[0].score > 1.0
    assert all(cor[i].score == pytest.approx(0.0) for i in (2, 3, 4))


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_one_poison_against_five_agreeing_clean_passages(extractor, request):
    texts = [TRUE[0], POISON[0], *TRUE[1:], *FILLER]
    cor = scored(extractor, texts, request)
    assert cor[1].agree_candidates == 0
    assert cor[1].reference_support == 0
    assert max(cor[i].score for i in (0, 2, 3, 4)) < cor[1].score


def test_near_copies_do_not_corroborate():
    copy = POISON[0] + " It is known."
    texts = [POISON[0], *TRUE[:4], copy, *FILLER]
    strict = corroboration(Q, texts, [0, 1, 2, 3, 4], list(range(5, len(texts))), duplicate_jaccard=0.5)
    loose = corroboration(Q, texts, [0, 1, 2, 3, 4], list(range(5, len(texts))), duplicate_jaccard=1.01)
    assert strict[0].reference_support == 0 and loose[0].reference_support == 1


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_defense_removes_the_lone_poison_at_a_calibrated_threshold(extractor, request):
    d = DEFENSES.create("answer_consistency", extractor=extractor, reference="ranking")
    res = resources_for(extractor, request)
    clean = [ranking_of(Q, TRUE[:5] + [TRUE[5]] + FILLER) for _ in range(3)]
    d.calibrate(clean, res, clean_budget=0.0)
    attacked = ranking_of(Q, [TRUE[0], POISON[0], *TRUE[1:], *FILLER], poison=[False, True] + [False] * 13)
    out = d.apply(attacked, res, k_ctx=5)
    assert [x.doc_id for x in out.decisions if x.removed] == ["d1"]
    assert not any(doc.poison for doc in out.context)
    assert out.decisions[6].status == "not_examined"
    assert "independent reference passages" in out.decisions[1].reason
    assert out.decisions[1].reason.startswith("LM-scored span" if extractor == "lm" else "lexical extractor")
