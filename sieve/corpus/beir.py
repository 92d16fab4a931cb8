"""BEIR directories: ``corpus.jsonl`` / ``queries.jsonl`` with ``_id`` (read by the Sieve readers,
which accept ``_id``) and ``qrels/{test,dev,train}.tsv`` (the first that exists, in that order)."""
from __future__ import annotations

from pathlib import Path

from sieve.corpus.errors import Issues
from sieve.corpus.readers import iter_csv
from sieve.corpus.sieve_format import add_qrel
from sieve.corpus.validation import Row

BEIR_SPLITS = ("test", "dev", "train")
"""Qrels splits looked for under ``qrels/``, in this order; the first that exists is read."""


def find_qrels_tsv(root: Path) -> Path | None:
    """``root/qrels/<split>.tsv`` of the first split in :data:`BEIR_SPLITS` that exists."""
    for split in BEIR_SPLITS:
        tsv = root / "qrels" / f"{split}.tsv"
        if tsv.is_file():
            return tsv
    return None


def read_qrels_tsv(path: Path, label: str, issues: Issues, query_ids: set[str] | None,
                   doc_ids: set[str]) -> dict[str, dict[str, int]]:
    """BEIR ``qrels/<split>.tsv``: header ``query-id  corpus-id  score``."""
    qrels: dict[str, dict[str, int]] = {}
    rows = iter_csv(path, label, issues, delimiter="\t")
    for line, row in rows:
        r = Row(row, label, line, issues)
        missing = [c for c in ("query-id", "corpus-id", "score") if c not in row]
        if missing:
            r.bad(missing[0], "column is missing (BEIR header: query-id, corpus-id, score)")
            return qrels
        raw = str(row["score"]).strip()
        try:
            score: int | None = int(raw)
        except ValueError:
            r.bad("score", f"must be an integer, got {raw!r}")
            score = None
        add_qrel(r, qrels, r.ident("query-id"), r.ident("corpus-id"), score, query_ids, doc_ids,
                 ("query-id", "corpus-id"))
    return qrels
