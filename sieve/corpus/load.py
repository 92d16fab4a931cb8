"""Public loading entry points: a dataset directory, a BEIR directory or a single corpus file.

Nothing half-loaded is ever returned; the user's files are only read, never written.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sieve.corpus.beir import find_qrels_tsv, read_qrels_tsv
from sieve.corpus.dataset import Dataset
from sieve.corpus.errors import DatasetError, Issues, TooManyErrors
from sieve.corpus.readers import CORPUS_SUFFIXES
from sieve.corpus.sieve_format import (
    read_attacks,
    read_contexts,
    read_documents,
    read_qrels_jsonl,
    read_queries,
    read_targets,
)
from sieve.types import AttackRecord, Document, Query, Ranking, Target


def _guard(fn: Any, *args: Any) -> Any:
    """Run a loader; stopping at MAX_ERRORS is not an error of its own."""
    try:
        return fn(*args)
    except TooManyErrors:
        return None


def load_corpus_file(path: str | os.PathLike[str]) -> list[Document]:
    """Read one corpus file (``.jsonl``, ``.csv`` with ``id,text[,title]``, or ``.parquet``)."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(p, None, None, "corpus file not found")
    if p.suffix.lower() not in CORPUS_SUFFIXES:
        raise DatasetError(p, None, None, f"unsupported corpus file type {p.suffix!r}; use one of "
                                          f"{', '.join(CORPUS_SUFFIXES)}")
    issues = Issues()
    docs = _guard(read_documents, p, p.name, issues) or []
    if not issues.items and not docs:
        issues.items.append(DatasetError(p.name, None, None, "the corpus is empty (no documents)"))
    issues.raise_if_any(str(p))
    return docs


def load_attacks(path: str | os.PathLike[str], query_ids: set[str] | None = None,
                 corpus_ids: set[str] | frozenset[str] = frozenset()) -> list[AttackRecord]:
    """Read an ``attacks.jsonl`` file. ``query_ids`` (if given) must contain every target query;
    attack document ids must not collide with ``corpus_ids`` nor repeat within a family."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(p, None, None, "attacks file not found")
    issues = Issues()
    recs = _guard(read_attacks, p, p.name, issues, query_ids, set(corpus_ids)) or []
    issues.raise_if_any(str(p))
    return recs


def _find_corpus(root: Path) -> Path | None:
    for suffix in CORPUS_SUFFIXES:
        p = root / f"corpus{suffix}"
        if p.is_file():
            return p
    return None


def load_dataset(path: str | os.PathLike[str]) -> Dataset:
    """Load and validate a dataset directory, a BEIR directory or a single corpus file.

    Raises :class:`DatasetError` listing every problem found (up to :data:`MAX_ERRORS`).
    """
    p = Path(path)
    if not p.exists():
        raise DatasetError(p, None, None, "no such file or directory")
    if p.is_file():
        return Dataset(path=p, name=p.stem, documents=load_corpus_file(p))

    corpus_path = _find_corpus(p)
    if corpus_path is None:
        raise DatasetError(p, None, None, "no corpus.jsonl (or corpus.csv / corpus.parquet) in this directory")

    issues = Issues()
    docs: list[Document] = []
    queries: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    attacks: list[AttackRecord] = []
    targets: list[Target] = []
    contexts: list[Ranking] = []
    try:
        docs = read_documents(corpus_path, corpus_path.name, issues)
        if not docs and not issues.items:
            issues.add(corpus_path.name, None, None, "the corpus is empty (no documents)")
        doc_ids = {d.id for d in docs}
        query_ids: set[str] | None = None
        if (p / "queries.jsonl").is_file():
            queries = read_queries(p / "queries.jsonl", "queries.jsonl", issues)
            query_ids = {q.id for q in queries}
        if (p / "qrels.jsonl").is_file():
            qrels = read_qrels_jsonl(p / "qrels.jsonl", "qrels.jsonl", issues, query_ids, doc_ids)
        elif (tsv := find_qrels_tsv(p)) is not None:  # BEIR layout
            qrels = read_qrels_tsv(tsv, f"qrels/{tsv.name}", issues, query_ids, doc_ids)
        if (p / "attacks.jsonl").is_file():
            attacks = read_attacks(p / "attacks.jsonl", "attacks.jsonl", issues, query_ids, doc_ids)
        if (p / "targets.jsonl").is_file():
            targets = read_targets(p / "targets.jsonl", "targets.jsonl", issues, query_ids)
        if (p / "contexts.jsonl").is_file():
            contexts = read_contexts(p / "contexts.jsonl", "contexts.jsonl", issues)
    except TooManyErrors:
        pass
    issues.raise_if_any(f"dataset {p}")
    return Dataset(path=p, name=p.resolve().name, documents=docs, queries=queries, qrels=qrels,
                   attacks=attacks, targets=targets, contexts=contexts)
