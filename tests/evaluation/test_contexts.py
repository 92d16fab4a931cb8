"""Datasets with contexts.jsonl: defenses run on the saved rankings as given, without retrieval."""
from __future__ import annotations

import json

import pytest

from evaldata import FILLER, QUERIES, TARGETS, TOPIC_DOCS, write_dataset
from sieve.defenses.base import Defense, unscored
from sieve.evaluation.runner import RunError, read_records, run_eval
from sieve.types import Scores


def _corpus_rows():
    rows = [(f"{q}-d{i}", t) for q, ts in TOPIC_DOCS.items() for i, t in enumerate(ts)]
    return rows + [(f"filler-{i}", t) for i, t in enumerate(FILLER)]


def _context(qid, condition, poisons, n=20):
    qtext = dict((q, t) for q, t, _ in QUERIES)[qid]
    answers = {q: a for q, _, a in QUERIES}[qid]
    docs = [(i, t, True) for i, t in poisons] + [(i, t, False) for i, t in _corpus_rows()]
    docs = docs[:n]
    return {"query_id": qid, "query": qtext, "condition": condition, "correct_answers": answers,
            "target_answer": TARGETS.get(qid, ("", []))[0] if condition != "clean" else "",
            "documents": [{"id": i, "rank": r, "text": t, "poison": p, "similarity": round(1.0 - r / 100, 4)}
                          for r, (i, t, p) in enumerate(docs, 1)]}


def _contexts():
    q1 = dict((q, t) for q, t, _ in QUERIES)["q1"]
    own = [(f"attack:pr_b:q1:{j}", f"{q1}. {p}") for j, p in enumerate(TARGETS["q1"][1])]
    extra = [("ctx:q2:0", "Sydney is the capital city of Australia."), ("ctx:q2:1", "Australia's capital is Sydney.")]
    return [_context("q1", "clean", []), _context("q2", "clean", []), _context("q1", "pr_b", own),
            _context("q2", "ctx_only", extra)]


class _NoModel:
    model_id = "must-not-be-used"
    dim = 8
    max_tokens = 8

    def encode(self, *a, **k):
        raise AssertionError("contexts mode must not retrieve")


@pytest.fixture
def ctx_dataset(tmp_path):
    return write_dataset(tmp_path / "ctxds", contexts=_contexts())


def test_rankings_used_as_given(ctx_dataset, eval_resources, tmp_path):
    eval_resources._retriever = _NoModel()
    summary = run_eval(ctx_dataset, tmp_path / "run", eval_resources, defenses=["none", "tris_l2"], progress=False)
    recs = read_records(tmp_path / "run")
    given = {(c["query_id"], c["condition"]): c for c in _contexts()}
    assert {(r["query_id"], r["condition"]) for r in recs} == set(given)
    for r in recs:
        c = given[(r["query_id"], r["condition"])]
        assert [d["id"] for d in r["ranking"]] == [d["id"] for d in c["documents"]]
        assert [d["score"] for d in r["ranking"]] == [d["similarity"] for d in c["documents"]]
    pr_b = next(r for r in recs if r["condition"] == "pr_b")
    assert pr_b["own_poison_ids"] == sorted(f"attack:pr_b:q1:{j}" for j in range(5))   # from attacks.jsonl
    ctx_only = next(r for r in recs if r["condition"] == "ctx_only")
    assert ctx_only["own_poison_ids"] == ["ctx:q2:0", "ctx:q2:1"]                      # from poison labels
    rows = {(r["defense"], r["attack"]): r for r in summary["results"]}
    assert [a for d, a in rows if d == "none"] == ["clean", "pr_b", "ctx_only"]
    assert rows[("none", "pr_b")]["poison_in_context_rate"] == 1.0
    assert rows[("tris_l2", "pr_b")]["poison_in_context_rate"] == 0.0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["mode"] == "contexts"


class _Probe(Defense):
    name = "probe"
    paper = "test"
    corpus_time = True
    sizes: list = []

    def fit(self, snapshot, resources):
        type(self).sizes.append((len(snapshot.ids), sum(d.poison for d in snapshot.documents)))
        return self

    def score(self, ranking, resources, k_ctx=5):
        return Scores(unscored(ranking))


def test_corpus_time_defense_audits_corpus_plus_attack_documents(ctx_dataset, eval_resources, tmp_path, monkeypatch):
    import sieve.experiment as X

    real = X.build_defense
    monkeypatch.setattr(X, "build_defense", lambda s, p=None, calibration=None:
                        _Probe() if s == "probe" else real(s, p, calibration))
    _Probe.sizes = []
    run_eval(ctx_dataset, tmp_path / "run", eval_resources, defenses=["probe", "rsg"], progress=False)
    # clean: 30 corpus docs; pr_b: + 10 attack documents of the family; ctx_only: + its 2 poison-labelled docs
    assert _Probe.sizes == [(30, 0), (40, 10), (32, 2)]
    assert not [r for r in read_records(tmp_path / "run") if r["error"]]


def test_attack_filter_and_unknown_family(ctx_dataset, eval_resources, tmp_path):
    s = run_eval(ctx_dataset, tmp_path / "run", eval_resources, defenses=["none"], attacks=["ctx_only"], progress=False)
    assert [r["attack"] for r in s["results"]] == ["clean", "ctx_only"]
    with pytest.raises(RunError, match="available: pr_b, ctx_only"):
        run_eval(ctx_dataset, tmp_path / "run2", eval_resources, defenses=["none"], attacks=["nope"], progress=False)
