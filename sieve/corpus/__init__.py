"""Dataset readers and validation (docs/design.md "Dataset directory format", docs/algorithms.md §11).

Accepted inputs of :func:`load_dataset`:

* a Sieve dataset directory: ``corpus.jsonl`` (required), ``queries.jsonl``, and optionally
  ``qrels.jsonl``, ``attacks.jsonl``, ``targets.jsonl`` (Sieve extension) and ``contexts.jsonl``
  (saved rankings, RAGSieve "prepared contexts");
* a BEIR directory: ``corpus.jsonl`` / ``queries.jsonl`` with ``_id`` and ``qrels/{test,dev,train}.tsv``
  (the first that exists, in that order);
* a single corpus file: ``.jsonl``, ``.csv`` (columns ``id,text[,title]``) or ``.parquet``.

Every problem is reported with its file, line and field; up to :data:`MAX_ERRORS` problems are
collected and raised together as one :class:`DatasetError`, so a user can fix everything in one
go. Nothing half-loaded is ever returned. The user's files are only read, never written.

Modules (one job each):

* :mod:`sieve.corpus.dataset` — the :class:`Dataset` model and its lookups;
* :mod:`sieve.corpus.load` — the entry points :func:`load_dataset`, :func:`load_corpus_file`,
  :func:`load_attacks`;
* :mod:`sieve.corpus.readers` — row readers per file format (JSON lines, CSV/TSV, Parquet);
* :mod:`sieve.corpus.sieve_format` — the files of a Sieve dataset directory;
* :mod:`sieve.corpus.beir` — BEIR ``qrels/<split>.tsv``;
* :mod:`sieve.corpus.validation` — typed field access that reports file, line and field;
* :mod:`sieve.corpus.errors` — :class:`DatasetError` and the error collector;
* :mod:`sieve.corpus.hashing` — :func:`corpus_hash`, the corpus version;
* :mod:`sieve.corpus.writing` — atomic JSON-lines writing and ``attacks.jsonl`` rows.
"""
from __future__ import annotations

from sieve.corpus.beir import BEIR_SPLITS
from sieve.corpus.dataset import Dataset
from sieve.corpus.errors import MAX_ERRORS, DatasetError
from sieve.corpus.hashing import corpus_hash
from sieve.corpus.load import load_attacks, load_corpus_file, load_dataset
from sieve.corpus.readers import CORPUS_SUFFIXES
from sieve.corpus.writing import attack_record_to_row, write_jsonl

__all__ = [
    "BEIR_SPLITS", "CORPUS_SUFFIXES", "MAX_ERRORS", "Dataset", "DatasetError", "attack_record_to_row",
    "corpus_hash", "load_attacks", "load_corpus_file", "load_dataset", "write_jsonl",
]
