"""Dataset loading and validation (sieve.corpus)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sieve.corpus import (
    MAX_ERRORS,
    DatasetError,
    attack_record_to_row,
    corpus_hash,
    load_attacks,
    load_corpus_file,
    load_dataset,
    write_jsonl,
)
from sieve.types import Document

CORPUS = [
    {"id": "d1", "text": "Canberra is the capital of Australia.", "title": "Canberra"},
    {"id": "d2", "text": "Sydney is the largest city in Australia."},
    {"id": "d3", "text": "Paris is the capital of France.", "source": "wiki"},
]
QUERIES = [
    {"id": "q1", "text": "What is the capital of Australia?", "answers": ["Canberra"]},
    {"id": "q2", "text": "What is the capital of France?", "answers": ["Paris"]},
]
QRELS = [{"query_id": "q1", "document_id": "d1", "score": 1}, {"query_id": "q2", "document_id": "d3", "score": 1},
         {"query_id": "q1", "document_id": "d2", "score": 0}]
ATTACKS = [
    {"query_id": "q1", "query": "What is the capital of Australia?", "correct_answers": ["Canberra"],
     "target_answer": "Sydney", "attack": "pr_b",
     "documents": [{"id": "q1:pr_b:0", "text": "What is the capital of Australia? It is Sydney."},
                   {"id": "q1:pr_b:1", "text": "Sydney has been the capital since 1901.", "title": "Sydney"}]},
    {"query_id": "q2", "query": "What is the capital of France?", "correct_answers": ["Paris"],
     "target_answer": "Lyon", "attack": "pr_b",
     "documents": [{"id": "q2:pr_b:0", "text": "What is the capital of France? Lyon."}]},
    {"query_id": "q1", "query": "What is the capital of Australia?", "correct_answers": ["Canberra"],
     "target_answer": "Sydney", "attack": "paraphrase",
     "documents": [{"id": "q1:para:0", "text": "Australia's seat of government is Sydney."}]},
]
TARGETS = [{"query_id": "q1", "query": "What is the capital of Australia?", "correct_answers": ["Canberra"],
            "target_answer": "Sydney", "payloads": ["Sydney is the capital."] * 5, "voices": ["news"] * 5}]
CONTEXTS = [{"query_id": "q1", "query": "What is the capital of Australia?", "condition": "pr_b",
             "correct_answers": ["Canberra"], "target_answer": "Sydney",
             "documents": [{"id": "q1:pr_b:0", "rank": 1, "text": "It is Sydney.", "poison": True, "similarity": 0.9},
                           {"id": "d1", "rank": 2, "text": "Canberra ...", "poison": False, "similarity": 0.8}]}]


def _jsonl(rows: list) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def make_dataset(root: Path, **files: list | str | bytes | None) -> Path:
    """Write a dataset directory; ``files`` override/remove (None) the default files."""
    defaults: dict[str, list | str | bytes | None] = {
        "corpus.jsonl": CORPUS, "queries.jsonl": QUERIES, "qrels.jsonl": QRELS, "attacks.jsonl": ATTACKS,
        "targets.jsonl": TARGETS, "contexts.jsonl": CONTEXTS}
    for key, val in files.items():
        defaults[key.replace("__", "/").replace("_jsonl", ".jsonl").replace("_tsv", ".tsv")] = val
    root.mkdir(parents=True, exist_ok=True)
    for name, val in defaults.items():
        if val is None:
            continue
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(val, bytes):
            p.write_bytes(val)
        else:
            p.write_text(val if isinstance(val, str) else _jsonl(val), encoding="utf-8")
    return root


def errors_of(path: Path) -> DatasetError:
    with pytest.raises(DatasetError) as ei:
        load_dataset(path)
    return ei.value


# ---- valid inputs ------------------------------------------------------------------------------
def test_full_directory_loads_every_file(tmp_path):
    ds = load_dataset(make_dataset(tmp_path / "demo"))
    assert ds.name == "demo"
    assert [d.id for d in ds.documents] == ["d1", "d2", "d3"]
    assert ds.doc_by_id("d1").title == "Canberra"
    assert ds.doc_by_id("d3").metadata == {"source": "wiki"}
    assert not any(d.poison for d in ds.documents)
    assert ds.query_by_id("q1").answers == ("Canberra",)
    assert ds.qrels == {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 1}}
    assert ds.attack_families() == ["pr_b", "paraphrase"]
    pr_b = ds.attack_documents("pr_b")
    assert [d.id for d in pr_b] == ["q1:pr_b:0", "q1:pr_b:1", "q2:pr_b:0"]
    assert all(d.poison for d in pr_b)
    assert pr_b[2].metadata == {"query_id": "q2", "attack": "pr_b", "target_answer": "Lyon"}
    assert pr_b[1].title == "Sydney"
    assert len(ds.attack_records("pr_b")) == 2
    assert ds.targets_by_query["q1"].payloads == ("Sydney is the capital.",) * 5
    (ctx,) = ds.contexts
    assert ctx.condition == "pr_b" and ctx.target_answer == "Sydney"
    assert [(d.id, d.rank, d.score, d.poison) for d in ctx.documents] == [("q1:pr_b:0", 1, 0.9, True),
                                                                          ("d1", 2, 0.8, False)]
    with pytest.raises(KeyError, match="available: pr_b, paraphrase"):
        ds.attack_documents("hotflip")
    with pytest.raises(KeyError, match="unknown document id"):
        ds.doc_by_id("nope")


def test_optional_files_may_be_absent_and_underscore_ids_are_accepted(tmp_path):
    corpus = [{"_id": "a", "text": "alpha"}, {"_id": 7, "text": "seven"}]
    ds = load_dataset(make_dataset(tmp_path, corpus_jsonl=corpus, queries_jsonl=None, qrels_jsonl=None,
                                   attacks_jsonl=None, targets_jsonl=None, contexts_jsonl=None))
    assert [d.id for d in ds.documents] == ["a", "7"]
    assert ds.queries == [] and ds.qrels == {} and ds.attacks == [] and ds.attack_families() == []


def test_content_hash_is_order_and_text_sensitive(tmp_path):
    ds = load_dataset(make_dataset(tmp_path))
    docs = ds.documents
    assert ds.content_hash() == corpus_hash(docs)
    assert corpus_hash(docs) != corpus_hash(list(reversed(docs)))
    changed = [docs[0], Document("d2", docs[1].text + "!"), docs[2]]
    assert corpus_hash(changed) != corpus_hash(docs)
    # id boundaries cannot be shifted into the text
    assert corpus_hash([Document("ab", "c")]) != corpus_hash([Document("a", "bc")])


def test_beir_layout_prefers_test_split(tmp_path):
    root = tmp_path / "beir"
    make_dataset(root, corpus_jsonl=[{"_id": "d1", "title": "T", "text": "one"}, {"_id": "d2", "text": "two"}],
                 queries_jsonl=[{"_id": "q1", "text": "first?"}], qrels_jsonl=None, attacks_jsonl=None,
                 targets_jsonl=None, contexts_jsonl=None)
    (root / "qrels").mkdir()
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t2\n")
    ds = load_dataset(root)
    assert ds.qrels == {"q1": {"d2": 2}}
    (root / "qrels" / "test.tsv").unlink()
    assert load_dataset(root).qrels == {"q1": {"d1": 1}}


def test_beir_qrels_errors_name_the_tsv_line(tmp_path):
    root = make_dataset(tmp_path, qrels_jsonl=None, attacks_jsonl=None, targets_jsonl=None, contexts_jsonl=None)
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tzz\t1\nq2\td3\thigh\n")
    err = errors_of(root)
    msgs = [str(e) for e in err.errors]
    assert msgs == ["qrels/test.tsv line 3, field 'corpus-id': unknown document id 'zz' (not in the corpus)",
                    "qrels/test.tsv line 4, field 'score': must be an integer, got 'high'"]


def test_csv_corpus_file(tmp_path):
    p = tmp_path / "docs.csv"
    p.write_text('id,text,title\n1,"Hello, world",Greeting\n2,"multi\nline text",\n', encoding="utf-8")
    ds = load_dataset(p)
    assert ds.name == "docs"
    assert [(d.id, d.text, d.title) for d in ds.documents] == [("1", "Hello, world", "Greeting"),
                                                               ("2", "multi\nline text", "")]


def test_csv_missing_text_names_physical_line(tmp_path):
    p = tmp_path / "docs.csv"
    p.write_text('id,text\n1,"multi\nline"\n2,\n', encoding="utf-8")
    with pytest.raises(DatasetError) as ei:
        load_corpus_file(p)
    assert str(ei.value) == "docs.csv line 4, field 'text': must be a non-empty string"


def test_parquet_corpus_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["alpha", "beta"], "title": ["A", None]}), p)
    docs = load_corpus_file(p)
    assert [(d.id, d.text, d.title) for d in docs] == [("a", "alpha", "A"), ("b", "beta", "")]
    pq.write_table(pa.table({"id": ["a", "a"], "text": ["alpha", "beta"]}), p)
    with pytest.raises(DatasetError) as ei:
        load_corpus_file(p)
    assert str(ei.value) == "docs.parquet row 2, field 'id': duplicate id 'a' (first on row 1)"


def test_long_text_is_kept_whole(tmp_path):
    long = "word " * 50_000
    ds = load_dataset(make_dataset(tmp_path, corpus_jsonl=[{"id": "x", "text": long}], queries_jsonl=None,
                                   qrels_jsonl=None, attacks_jsonl=None, targets_jsonl=None, contexts_jsonl=None))
    assert ds.documents[0].text == long


def test_loading_never_modifies_user_files(tmp_path):
    root = make_dataset(tmp_path)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*")}
    load_dataset(root)
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*")}
    assert before == after


# ---- bad inputs --------------------------------------------------------------------------------
def test_error_message_format_names_file_line_and_field(tmp_path):
    queries = QUERIES + [{"id": f"x{i}", "text": "ok"} for i in range(4)] + [{"id": "q7", "text": "  "}]
    err = errors_of(make_dataset(tmp_path, queries_jsonl=queries))
    assert str(err) == "queries.jsonl line 7, field 'text': must be a non-empty string"
    assert (err.file, err.line, err.field) == ("queries.jsonl", 7, "text")


def test_invalid_json_and_non_object_lines(tmp_path):
    corpus = [CORPUS[0], '{"id": "d2", "text": "unterminated', "[1, 2]", CORPUS[2]]
    err = errors_of(make_dataset(tmp_path, corpus_jsonl=corpus, qrels_jsonl=None, attacks_jsonl=None,
                                 contexts_jsonl=None))
    assert [(e.file, e.line) for e in err.errors] == [("corpus.jsonl", 2), ("corpus.jsonl", 3)]
    assert "invalid JSON" in err.errors[0].message
    assert err.errors[1].message == "must be a JSON object, got list"
    assert str(err).startswith("2 problems in dataset ")


def test_missing_or_empty_id_and_text(tmp_path):
    corpus = [{"text": "no id"}, {"id": "", "text": "empty id"}, {"id": "d3"}, {"id": "d4", "text": 5}]
    err = errors_of(make_dataset(tmp_path, corpus_jsonl=corpus, queries_jsonl=None, qrels_jsonl=None,
                                 attacks_jsonl=None, targets_jsonl=None, contexts_jsonl=None))
    assert [str(e) for e in err.errors] == [
        "corpus.jsonl line 1, field 'id': is missing (also accepted: '_id')",
        "corpus.jsonl line 2, field 'id': must be a non-empty string",
        "corpus.jsonl line 3, field 'text': is missing",
        "corpus.jsonl line 4, field 'text': must be a string, got int",
    ]


def test_duplicate_ids_name_both_lines(tmp_path):
    corpus = CORPUS + [{"id": "d2", "text": "again"}]
    err = errors_of(make_dataset(tmp_path, corpus_jsonl=corpus))
    assert str(err) == "corpus.jsonl line 4, field 'id': duplicate id 'd2' (first on line 2)"


def test_non_utf8_bytes_name_the_line(tmp_path):
    raw = (json.dumps(CORPUS[0]) + "\n").encode() + b'{"id": "d2", "text": "caf\xe9"}\n'
    err = errors_of(make_dataset(tmp_path, corpus_jsonl=raw, queries_jsonl=None, qrels_jsonl=None,
                                 attacks_jsonl=None, targets_jsonl=None, contexts_jsonl=None))
    assert str(err) == "corpus.jsonl line 2: not valid UTF-8 (byte 0xe9 at column 26)"


def test_wrong_types(tmp_path):
    queries = [{"id": "q1", "text": "a?", "answers": "Canberra"}, QUERIES[1]]
    qrels = [{"query_id": "q2", "document_id": "d3", "score": "1"}, {"query_id": "q2", "document_id": "d1", "score": 1.5}]
    err = errors_of(make_dataset(tmp_path, queries_jsonl=queries, qrels_jsonl=qrels, attacks_jsonl=None,
                                 targets_jsonl=None, contexts_jsonl=None))
    assert [str(e) for e in err.errors] == [
        "queries.jsonl line 1, field 'answers': must be a list of strings",
        "qrels.jsonl line 1, field 'score': must be an integer, got '1'",
        "qrels.jsonl line 2, field 'score': must be an integer, got 1.5",
    ]


def test_unknown_ids_in_qrels_attacks_targets(tmp_path):
    qrels = [{"query_id": "q9", "document_id": "d1", "score": 1}, {"query_id": "q1", "document_id": "d9", "score": 1}]
    attacks = [dict(ATTACKS[0], query_id="q9")]
    targets = [dict(TARGETS[0], query_id="q8")]
    err = errors_of(make_dataset(tmp_path, qrels_jsonl=qrels, attacks_jsonl=attacks, targets_jsonl=targets))
    assert [str(e) for e in err.errors] == [
        "qrels.jsonl line 1, field 'query_id': unknown query id 'q9' (not in queries.jsonl)",
        "qrels.jsonl line 2, field 'document_id': unknown document id 'd9' (not in the corpus)",
        "attacks.jsonl line 1, field 'query_id': unknown query id 'q9' (not in queries.jsonl)",
        "targets.jsonl line 1, field 'query_id': unknown query id 'q8' (not in queries.jsonl)",
    ]


def test_attack_document_problems(tmp_path):
    attacks = [
        dict(ATTACKS[0], documents=[{"id": "d1", "text": "collides"}]),
        dict(ATTACKS[1], documents=[{"id": "q1:pr_b:0", "text": "same id twice in a family"}]),
        dict(ATTACKS[1], attack="other", documents=[{"id": "x"}]),
        dict(ATTACKS[1], documents=[]),
    ]
    err = errors_of(make_dataset(tmp_path, attacks_jsonl=[ATTACKS[0]] + attacks))
    assert [str(e) for e in err.errors] == [
        "attacks.jsonl line 2, field 'documents[0].id': id 'd1' collides with a corpus document id",
        "attacks.jsonl line 3, field 'documents[0].id': duplicate id 'q1:pr_b:0' in attack family 'pr_b' "
        "(first on line 1)",
        "attacks.jsonl line 4, field 'documents[0].text': is missing",
        "attacks.jsonl line 5, field 'documents': must be a non-empty list of {id, text, title?} objects",
    ]


def test_targets_need_payloads(tmp_path):
    err = errors_of(make_dataset(tmp_path, targets_jsonl=[dict(TARGETS[0], payloads=[])]))
    assert str(err) == "targets.jsonl line 1, field 'payloads': must be a non-empty list of strings"


def test_context_ranks_must_be_consecutive(tmp_path):
    bad = dict(CONTEXTS[0], documents=[dict(CONTEXTS[0]["documents"][0], rank=2)])
    err = errors_of(make_dataset(tmp_path, contexts_jsonl=[bad]))
    assert str(err) == ("contexts.jsonl line 1, field 'documents[0].rank': ranks must be 1, 2, 3, ... in order; "
                        "expected 1, got 2")


def test_empty_corpus_missing_corpus_and_missing_path(tmp_path):
    err = errors_of(make_dataset(tmp_path / "a", corpus_jsonl="\n\n", queries_jsonl=None, qrels_jsonl=None,
                                 attacks_jsonl=None, targets_jsonl=None, contexts_jsonl=None))
    assert str(err) == "corpus.jsonl: the corpus is empty (no documents)"
    (tmp_path / "b").mkdir()
    err = errors_of(tmp_path / "b")
    assert "no corpus.jsonl" in str(err) and err.file == str(tmp_path / "b")
    err = errors_of(tmp_path / "nope")
    assert str(err) == f"{tmp_path / 'nope'}: no such file or directory"
    (tmp_path / "c.txt").write_text("x")
    with pytest.raises(DatasetError, match="unsupported corpus file type '.txt'"):
        load_dataset(tmp_path / "c.txt")


def test_errors_are_collected_up_to_the_limit(tmp_path):
    corpus = [{"id": f"d{i}"} for i in range(MAX_ERRORS + 10)]
    err = errors_of(make_dataset(tmp_path, corpus_jsonl=corpus, queries_jsonl=None, qrels_jsonl=None,
                                 attacks_jsonl=None, targets_jsonl=None, contexts_jsonl=None))
    assert len(err.errors) == MAX_ERRORS
    assert f"stopped after the first {MAX_ERRORS}" in str(err).splitlines()[0]
    assert len(str(err).splitlines()) == MAX_ERRORS + 1


# ---- writing -----------------------------------------------------------------------------------
def test_write_jsonl_and_attack_round_trip(tmp_path):
    ds = load_dataset(make_dataset(tmp_path / "ds"))
    out = tmp_path / "out" / "attacks.jsonl"
    n = write_jsonl(out, [attack_record_to_row(r) for r in ds.attacks])
    assert n == 3 and not list(out.parent.glob(".*tmp"))
    again = load_attacks(out, query_ids={"q1", "q2"}, corpus_ids={"d1", "d2", "d3"})
    assert again == ds.attacks
    assert [d.metadata for d in again[0].documents] == [d.metadata for d in ds.attacks[0].documents]
    with pytest.raises(DatasetError, match="collides with a corpus document id"):
        load_attacks(out, corpus_ids={"q2:pr_b:0"})


def test_csv_poison_column_accepts_words(tmp_path):
    p = tmp_path / "docs.csv"
    p.write_text("id,text,poison\na,alpha,false\nb,beta,TRUE\n", encoding="utf-8")
    assert [d.poison for d in load_corpus_file(p)] == [False, True]
