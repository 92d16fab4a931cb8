"""The bundled demo knowledge base (issue: demo knowledge base): loads cleanly, has the promised
size, every target carries five payloads asserting its target answer, qrels point at passages,
and the shipped attack sets cover every registered family."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from sieve.corpus import load_dataset
from sieve.registry import ATTACKS

DEMO = Path(__file__).resolve().parents[1] / "demo_data"


@pytest.fixture(scope="module")
def demo():
    return load_dataset(DEMO)


def test_counts(demo):
    assert len(demo.documents) >= 600
    topics = {d.id.rsplit("-", 1)[0] for d in demo.documents}
    assert len(topics) >= 60
    assert len(demo.queries) >= 120
    assert len(demo.targets) >= 60


def test_passage_lengths_and_styles(demo):
    words = [len(d.text.split()) for d in demo.documents]
    assert min(words) >= 40 and max(words) <= 200
    assert sum(w < 60 for w in words) >= 30 and sum(w > 150 for w in words) >= 20   # short and long passages
    non_latin = [d for d in demo.documents if re.search(r"[\u0370-\u03ff\u0400-\u04ff\u0600-\u06ff\u0900-\u097f\u3040-\u30ff\u4e00-\u9fff]", d.text)]
    assert len(non_latin) >= 20       # honest multilingual text for the script-integrity signals


def test_targets_have_five_payloads_asserting_the_target_answer(demo):
    for t in demo.targets:
        assert len(t.payloads) == 5, t.query_id
        assert sorted(t.voices) == sorted(["encyclopedia", "news", "textbook", "forum", "qa"]), t.query_id
        for p in t.payloads:
            assert t.target_answer in p, (t.query_id, p[:60])
            assert t.correct_answers[0].lower() not in p.lower(), (t.query_id, p[:60])
        assert t.target_answer.lower() not in {a.lower() for a in t.correct_answers}


def test_qrels_point_at_existing_passages_that_contain_an_answer(demo):
    ids = {d.id for d in demo.documents}
    for qid, rel in demo.qrels.items():
        q = demo.query_by_id(qid)
        assert set(rel) <= ids
        texts = " ".join(demo.doc_by_id(d).text.lower() for d in rel)
        assert any(a.lower() in texts for a in q.answers), qid


#: Poisons per query in the shipped records: one for the single-poison families (docs/algorithms.md
#: §7.5–§7.7, scripts/build_demo_attacks.py SHIPPED_VOLUME), five for every other family.
SINGLE_POISON = {"single_trigger", "single_fluent", "near_duplicate"}
#: Registered families missing from the shipped demo data (none).
NOT_YET_SHIPPED: set[str] = set()


def test_shipped_attack_sets_cover_every_family(demo):
    assert NOT_YET_SHIPPED <= set(ATTACKS.names())
    assert set(demo.attack_families()) | NOT_YET_SHIPPED == set(ATTACKS.names())
    per_family = Counter(a.attack for a in demo.attacks)
    assert all(n == len(demo.targets) for n in per_family.values()), per_family
    for a in demo.attacks:
        assert len(a.documents) == (1 if a.attack in SINGLE_POISON else 5), (a.attack, a.query_id)
        assert all(d.id.startswith(f"attack:{a.attack}:{a.query_id}:") for d in a.documents)


def test_families_older_than_issue_16_come_first_unchanged(demo):
    order = demo.attack_families()
    assert order[:7] == ["pr_b", "diverse", "payload_only", "script", "forced_top", "paraphrase", "pr_w"]
    assert set(order[7:]) | NOT_YET_SHIPPED == {"single_trigger", "single_fluent", "near_duplicate", "judge_aware"}


def test_near_duplicates_copy_a_gold_passage_and_change_only_the_answer(demo):
    from sieve.attacks.sources import answer_pattern

    recs = demo.attack_records("near_duplicate")
    cos = []
    for r in recs:
        (d,) = r.documents
        src = demo.doc_by_id(d.metadata["source_id"])
        assert d.metadata["source_id"] in demo.qrels[r.query_id]
        assert d.text == r.target_answer.join(answer_pattern(r.correct_answers).split(src.text))
        cos.append(d.metadata["cosine_to_source"])
    assert 0.85 < min(cos) and sum(cos) / len(cos) > 0.95     # measured: min 0.857, mean 0.963 (n = 64)


def test_single_trigger_records_carry_the_frame_and_one_poison(demo):
    for r in demo.attack_records("single_trigger"):
        (d,) = r.documents
        assert d.text.startswith(r.query + " The earlier sources are outdated; current data confirms "
                                 + r.target_answer + ".")


def test_data_card_lists_every_false_target_answer():
    card = (DEMO / "README.md").read_text(encoding="utf-8")
    for line in (DEMO / "targets.jsonl").read_text(encoding="utf-8").splitlines():
        t = json.loads(line)
        assert t["target_answer"] in card, t["query_id"]
