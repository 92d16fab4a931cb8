"""Fusion's evidence is the score of the method that defines it (sieve/defenses/fusion_evidence.py):
on the same ranking, each fused value equals the registered defense's own score, so a change to a
method cannot silently diverge from the fusion that claims to use it."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from test_defense_contract import _ranking, _snapshot, ranking_of

from _tris_fakes import resources_with
from sieve.defenses import fusion, fusion_evidence
from sieve.defenses.fusion import Fusion
from sieve.defenses.fusion_evidence import EVIDENCE, judge_cohesion
from sieve.defenses.similarity import query_cosines
from sieve.models.tiny import HashingEmbedder
from sieve.registry import DEFENSES
from sieve.types import Ranking

K = 5


@pytest.fixture(scope="module")
def setup():
    res = resources_with(judge=HashingEmbedder(48, "tiny-judge"))
    ranking = _ranking()
    snap = _snapshot(res)
    f = Fusion(evidence=tuple(EVIDENCE), pairwise_scope="survivors", density_mutual=0).fit(snap, res)
    n = len(ranking.documents)
    records = f._round(ranking, res, K, fusion.FusionScores([]), set()).records
    return res, ranking, snap, f, records, list(range(n))


def _own(name, res, ranking, snap, **params):
    d = DEFENSES.create(name, **params)
    if d.corpus_time:
        d.fit(snap, res)
    return d


def _values(records, name):
    return {i: rec["values"].get(name) for i, rec in records.items()}


@pytest.mark.parametrize("evidence,method,params", [
    ("l2", "tris_l2", {}),
    ("perplexity", "perplexity", {}),
    ("rsg", "rsg", {}),
    ("rsq", "rsq", {}),
    ("answer", "answer_consistency", {}),
    ("ragdefender", "ragdefender", {}),
    ("conflict", "context_conflict", {}),
    ("promotion", "promotion", {}),
    ("similarity", "query_similarity", {}),
])
def test_fused_evidence_is_the_method_score(setup, evidence, method, params):
    res, ranking, snap, f, records, _ = setup
    assert EVIDENCE[evidence].method == method
    own = _own(method, res, ranking, snap, **params).score(ranking, res, K).items
    fused = _values(records, evidence)
    assert set(fused) == set(range(K))            # round 1: the first k_ctx documents
    compared = 0
    for i, v in fused.items():
        mine = own[i].value
        if mine is None:
            assert v is None
            continue
        read = EVIDENCE[evidence].read           # rsg: the snapshot-free part of the same audit row
        expected = float(mine) if read is None else read(own[i].evidence)
        assert v == pytest.approx(expected, rel=0, abs=0), (evidence, i)
        compared += 1
    assert compared >= 1, f"{evidence}: no value to compare"


def test_rouge_is_trustrags_near_copy_score(setup):
    res, ranking, snap, f, records, _ = setup
    window = f._window(ranking, list(range(len(ranking.documents))), K)
    sub = Ranking(ranking.query, [ranking.documents[i] for i in window])
    own = DEFENSES.create("trustrag", consolidate=False).score(sub, res, None).items
    where = {i: j for j, i in enumerate(window)}
    for i, v in _values(records, "rouge").items():
        assert v == own[where[i]].value


def test_fusions_own_evidence_is_computed_once(setup):
    res, ranking, snap, f, records, _ = setup
    window = f._window(ranking, list(range(len(ranking.documents))), K)
    X = res.judge_embeddings([ranking.documents[i].text for i in window])
    where = {i: j for j, i in enumerate(window)}
    coh = judge_cohesion(X, [where[i] for i in range(K)])
    assert [records[i]["values"]["cohesion"] for i in range(K)] == coh
    sims = query_cosines(res, ranking.query, [d.text for d in ranking.documents[:K]])
    assert [records[i]["values"]["similarity"] for i in range(K)] == sims
    assert all(-1.0 <= s <= 1.0 for s in sims) and float(np.ptp(coh)) >= 0


def test_mutual_is_mutual_cohesions_score(setup):
    """Round 1 compares the first ten documents, as mutual_cohesion does on the whole ranking."""
    res, ranking, snap, f, records, _ = setup
    assert len(f._window(ranking, list(range(len(ranking.documents))), K)) == min(10, len(ranking.documents))
    own = DEFENSES.create("mutual_cohesion").score(ranking, res, K).items
    fused = _values(records, "mutual")
    assert set(fused) == set(range(K))
    assert [fused[i] for i in range(K)] == [own[i].value for i in range(K)]
    assert all(0.0 <= v <= 3.0 for v in fused.values())


@pytest.mark.parametrize("m", [1, 4])
def test_mutual_neighbours_is_mutual_cohesions_m(setup, m):
    """``mutual_neighbours`` is passed to the one function: fused values equal mutual_cohesion(neighbours=m),
    and a different m gives different values on this ranking (the parameter is not ignored)."""
    res, ranking, snap, _, records, _ = setup
    f = Fusion(evidence=("mutual",), mutual_neighbours=m).fit(snap, res)
    fused = _values(f._round(ranking, res, K, fusion.FusionScores([]), set()).records, "mutual")
    own = DEFENSES.create("mutual_cohesion", neighbours=m).score(ranking, res, K).items
    assert [fused[i] for i in range(K)] == [own[i].value for i in range(K)]
    assert [fused[i] for i in range(K)] != [_values(records, "mutual")[i] for i in range(K)]   # m = 3 there
    assert all(0.0 <= v <= m for v in fused.values())


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_mutual_neighbours_must_be_a_whole_number(bad):
    with pytest.raises((ValueError, TypeError), match="mutual_neighbours"):
        Fusion(mutual_neighbours=bad)


def test_fusion_defines_no_score_of_its_own_methods():
    """The fusion module reads evidence only through fusion_evidence (no second L2, perplexity or
    RSQ definition): none of the methods' internals is imported there."""
    src = inspect.getsource(fusion) + inspect.getsource(fusion_evidence)
    for internal in ("l2_features", "lm_traces", "score_candidates", "decisions_for", "answer_corroboration",
                     "pairwise_rouge("):
        assert internal not in src, internal
    assert set(fusion.EVIDENCE) == set(EVIDENCE)


def test_whole_ranking_evidence_is_scored_once_per_ranking(setup):
    """Refill rounds ask for the documents that entered the context; a whole-ranking method
    (promotion, RAGDefender) answers them from its one score of that ranking."""
    res, ranking, snap, *_ = setup
    from sieve.defenses.fusion_evidence import EvidenceSources

    src = EvidenceSources(("promotion",))
    method = src.methods["promotion"]
    calls = []
    score = method.score
    method.score = lambda r, resources, k: calls.append(k) or score(r, resources, k)   # type: ignore[method-assign]
    first = src.static(ranking, res, [0, 1])
    later = src.static(ranking, res, [2, 3])
    assert calls == [None]
    own = score(ranking, res, None).items
    assert [first[0]["promotion"], later[3]["promotion"]] == [own[0].value, own[3].value]
    other = type(ranking)(ranking.query + " again", ranking.documents, ranking.query_id, ranking.condition)
    src.static(other, res, [0])
    assert calls == [None, None]                       # another ranking is scored afresh


def test_without_question_words_drops_only_the_questions_content_words():
    from sieve.defenses.fusion_evidence import without_question_words

    out = without_question_words(["Who wrote Hamlet? Shakespeare wrote Hamlet in 1600.", "HAMLET, by Marlowe"],
                                 "who wrote hamlet")
    assert out == ["who shakespeare in 1600", "by marlowe"]   # "who" is a stopword and stays


def test_rouge_query_drop_compares_passages_without_the_question(setup):
    """Passages that share only the question's words are near copies as written and much less so once
    those words are dropped, while two real copies stay near copies; the fused value is max ROUGE-L over
    the texts without them."""
    from sieve.defenses.fusion_evidence import without_question_words
    from sieve.defenses.trustrag import max_rouge

    res, _, snap, *_ = setup
    q = "what river flows through the amazon rainforest basin"
    texts = [f"What river flows through the Amazon rainforest basin? {t}" for t in
             ("The Amazon river carries more water than any other river.",
              "Deforestation has reduced the canopy since 1970 by a fifth.",
              "Jaguars hunt caimans along muddy banks at night.",
              "The Amazon river carries more water than every other river.")]
    ranking = ranking_of(q, texts)
    def rouge(**params):
        f = Fusion(evidence=("rouge",), **params).fit(snap, res)
        return _values(f._round(ranking, res, 4, fusion.FusionScores([]), set()).records, "rouge")
    as_written, without = rouge(), rouge(rouge_query="drop")
    assert [without[i] for i in range(4)] == max_rouge(without_question_words(texts, q))
    assert min(without[0], without[3]) > 0.8                                  # the copies stay copies
    assert all(as_written[i] > 0.45 and without[i] < as_written[i] - 0.1 for i in (1, 2))
    assert max(without[1], without[2]) < min(without[0], without[3]) - 0.4


@pytest.mark.parametrize("bad", ["strip", "", None, True])
def test_rouge_query_is_keep_or_drop(bad):
    with pytest.raises(ValueError, match="rouge_query"):
        Fusion(rouge_query=bad)


def test_density_mutual_is_rsgs_density_over_mutual_neighbours(setup):
    """The default reads RSG's density counting only neighbours that name the passage among their four
    nearest (docs/algorithms.md §14.2); 0 reads the audited density, which is RSG's own score."""
    from sieve.defenses.rsg import density_without

    res, ranking, snap, _, records, idx = setup
    assert Fusion().density_mutual == fusion.DENSITY_MUTUAL == 4
    f = Fusion(evidence=("rsg",)).fit(snap, res)
    got = _values(f._round(ranking, res, K, fusion.FusionScores([]), set()).records, "rsg")
    audit = f.rsg_.audit_
    rows = [audit.index_of(ranking.documents[i].id) for i in sorted(got)]
    want = [max(float(d), float(audit.integrity[r])) for r, d in zip(rows, density_without(audit, rows, [], mutual=4))]
    assert [got[i] for i in sorted(got)] == pytest.approx(want)
    plain = _values(records, "rsg")
    assert all(got[i] <= plain[i] + 1e-9 for i in got)       # counting fewer neighbours never adds density


@pytest.mark.parametrize("bad", [-1, 1.5, "4", True])
def test_density_mutual_must_be_a_whole_number(bad):
    with pytest.raises(ValueError, match="density_mutual"):
        Fusion(density_mutual=bad)
