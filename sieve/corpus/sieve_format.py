"""Readers of the files of a Sieve dataset directory (docs/design.md "Dataset directory format").

``corpus.{jsonl,csv,parquet}``, ``queries.jsonl``, ``qrels.jsonl``, ``attacks.jsonl``,
``targets.jsonl`` and ``contexts.jsonl``. Every reader reports problems to :class:`Issues`.
"""
from __future__ import annotations

from pathlib import Path

from sieve.corpus.errors import Issues
from sieve.corpus.readers import iter_jsonl, iter_rows
from sieve.corpus.validation import NestedRow, Row, doc_from_row
from sieve.types import AttackRecord, Document, Query, RankedDocument, Ranking, Target


def read_documents(path: Path, label: str, issues: Issues) -> list[Document]:
    unit = "row" if path.suffix.lower() == ".parquet" else "line"
    docs: list[Document] = []
    first_line: dict[str, int] = {}
    for line, row in iter_rows(path, label, issues):
        r = Row(row, label, line, issues, unit)
        doc = doc_from_row(r)
        if doc is None:
            continue
        if doc.id in first_line:
            r.bad("id" if "id" in row else "_id",
                  f"duplicate id {doc.id!r} (first on {unit} {first_line[doc.id]})")
            continue
        first_line[doc.id] = line
        docs.append(doc)
    return docs


def read_queries(path: Path, label: str, issues: Issues) -> list[Query]:
    queries: list[Query] = []
    first_line: dict[str, int] = {}
    for line, row in iter_jsonl(path, label, issues):
        r = Row(row, label, line, issues)
        qid = r.ident("id", "_id")
        text = r.text("text")
        answers = r.str_list("answers")
        if qid is None or text is None or answers is None:
            continue
        if qid in first_line:
            r.bad("id" if "id" in row else "_id", f"duplicate id {qid!r} (first on line {first_line[qid]})")
            continue
        first_line[qid] = line
        queries.append(Query(qid, text, answers))
    return queries


def add_qrel(r: Row, qrels: dict[str, dict[str, int]], qid: str | None, did: str | None, score: int | None,
             query_ids: set[str] | None, doc_ids: set[str], fields: tuple[str, str]) -> None:
    if qid is None or did is None or score is None:
        return
    if query_ids is not None and qid not in query_ids:
        r.bad(fields[0], f"unknown query id {qid!r} (not in queries.jsonl)")
        return
    if did not in doc_ids:
        r.bad(fields[1], f"unknown document id {did!r} (not in the corpus)")
        return
    qrels.setdefault(qid, {})[did] = score


def read_qrels_jsonl(path: Path, label: str, issues: Issues, query_ids: set[str] | None,
                     doc_ids: set[str]) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line, row in iter_jsonl(path, label, issues):
        r = Row(row, label, line, issues)
        add_qrel(r, qrels, r.ident("query_id"), r.ident("document_id"), r.integer("score"),
                  query_ids, doc_ids, ("query_id", "document_id"))
    return qrels


def parse_attack_row(r: Row, query_ids: set[str] | None) -> AttackRecord | None:
    qid = r.ident("query_id")
    query = r.text("query")
    correct = r.str_list("correct_answers")
    target = r.text("target_answer")
    family = r.text("attack")
    docs_raw = r.row.get("documents")
    if not isinstance(docs_raw, list) or not docs_raw:
        r.bad("documents", "must be a non-empty list of {id, text, title?} objects")
        return None
    if qid is not None and query_ids is not None and qid not in query_ids:
        r.bad("query_id", f"unknown query id {qid!r} (not in queries.jsonl)")
        return None
    if None in (qid, query, correct, target, family):
        return None
    docs: list[Document] = []
    for j, d in enumerate(docs_raw):
        if not isinstance(d, dict):
            r.bad(f"documents[{j}]", "must be a JSON object")
            continue
        doc = doc_from_row(NestedRow(r, d, f"documents[{j}]"), poison_default=True,
                           extra_meta={"query_id": qid, "attack": family, "target_answer": target},
                           id_names=("id",))
        if doc is not None:
            # the attack file is the ground truth of what is poison
            docs.append(Document(doc.id, doc.text, doc.title, True, doc.metadata))
    if len(docs) != len(docs_raw):
        return None
    meta = {k: v for k, v in r.row.items()
            if k not in {"query_id", "query", "correct_answers", "target_answer", "attack", "documents"}}
    return AttackRecord(qid, query, correct, target, family, tuple(docs), meta)  # type: ignore[arg-type]


def read_attacks(path: Path, label: str, issues: Issues, query_ids: set[str] | None,
                 corpus_ids: set[str]) -> list[AttackRecord]:
    records: list[AttackRecord] = []
    seen: dict[tuple[str, str], int] = {}  # (family, doc id) -> line
    for line, row in iter_jsonl(path, label, issues):
        r = Row(row, label, line, issues)
        rec = parse_attack_row(r, query_ids)
        if rec is None:
            continue
        ok = True
        for j, d in enumerate(rec.documents):
            if d.id in corpus_ids:
                r.bad(f"documents[{j}].id", f"id {d.id!r} collides with a corpus document id")
                ok = False
            elif (rec.attack, d.id) in seen:
                r.bad(f"documents[{j}].id", f"duplicate id {d.id!r} in attack family {rec.attack!r} "
                                            f"(first on line {seen[(rec.attack, d.id)]})")
                ok = False
            else:
                seen[(rec.attack, d.id)] = line
        if ok:
            records.append(rec)
    return records


def read_targets(path: Path, label: str, issues: Issues, query_ids: set[str] | None) -> list[Target]:
    targets: list[Target] = []
    first_line: dict[str, int] = {}
    for line, row in iter_jsonl(path, label, issues):
        r = Row(row, label, line, issues)
        qid = r.ident("query_id")
        query = r.text("query")
        correct = r.str_list("correct_answers")
        target = r.text("target_answer")
        payloads = r.str_list("payloads", required=True, nonempty=True)
        voices = r.str_list("voices")
        if None in (qid, query, correct, target, payloads, voices):
            continue
        if query_ids is not None and qid not in query_ids:
            r.bad("query_id", f"unknown query id {qid!r} (not in queries.jsonl)")
            continue
        if qid in first_line:
            r.bad("query_id", f"duplicate target for query {qid!r} (first on line {first_line[qid]})")
            continue
        first_line[qid] = line  # type: ignore[index]
        targets.append(Target(qid, query, correct, target, payloads, voices))  # type: ignore[arg-type]
    return targets


def read_contexts(path: Path, label: str, issues: Issues) -> list[Ranking]:
    rankings: list[Ranking] = []
    for line, row in iter_jsonl(path, label, issues):
        r = Row(row, label, line, issues)
        qid = r.ident("query_id")
        query = r.text("query")
        condition = r.text("condition", required=False) or "clean"
        correct = r.str_list("correct_answers")
        target = r.text("target_answer", required=False)
        docs_raw = row.get("documents")
        if not isinstance(docs_raw, list):
            r.bad("documents", "must be a list of {id, rank, text, poison, similarity} objects")
            continue
        docs: list[RankedDocument] = []
        for j, d in enumerate(docs_raw):
            if not isinstance(d, dict):
                r.bad(f"documents[{j}]", "must be a JSON object")
                continue
            n = NestedRow(r, d, f"documents[{j}]")
            did = n.ident("id", "document_id")
            rank = n.integer("rank")
            text = n.text("text", nonempty=False)
            poison = n.boolean("poison")
            sim = n.number("similarity") if "similarity" in d else (n.number("score") if "score" in d else 0.0)
            title = n.text("title", required=False)
            if None in (did, rank, text, poison, sim, title):
                continue
            if rank != len(docs) + 1:
                n.bad("rank", f"ranks must be 1, 2, 3, ... in order; expected {len(docs) + 1}, got {rank}")
                continue
            docs.append(RankedDocument(did, text, rank, sim, bool(poison), title or ""))  # type: ignore[arg-type]
        if not r.ok or None in (qid, query, correct):
            continue
        rankings.append(Ranking(query, docs, qid, condition, correct, target or ""))  # type: ignore[arg-type]
    return rankings
