"""The loaded, validated dataset (:class:`Dataset`) and its lookups."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sieve.corpus.hashing import corpus_hash
from sieve.types import AttackRecord, Document, Query, Ranking, Target


@dataclass
class Dataset:
    """A loaded, validated dataset. ``contexts`` are saved rankings (``contexts.jsonl``)."""

    path: Path
    name: str
    documents: list[Document]
    queries: list[Query] = field(default_factory=list)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    attacks: list[AttackRecord] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    contexts: list[Ranking] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._docs = {d.id: d for d in self.documents}
        self._queries = {q.id: q for q in self.queries}

    def doc_by_id(self, doc_id: str) -> Document:
        try:
            return self._docs[doc_id]
        except KeyError:
            raise KeyError(f"unknown document id {doc_id!r} in dataset {self.name!r}") from None

    def query_by_id(self, query_id: str) -> Query:
        try:
            return self._queries[query_id]
        except KeyError:
            raise KeyError(f"unknown query id {query_id!r} in dataset {self.name!r}") from None

    def attack_families(self) -> list[str]:
        """Attack family names in order of first appearance in ``attacks.jsonl``."""
        return list(dict.fromkeys(a.attack for a in self.attacks))

    def attack_records(self, family: str) -> list[AttackRecord]:
        recs = [a for a in self.attacks if a.attack == family]
        if not recs:
            avail = ", ".join(self.attack_families()) or "none (no attacks.jsonl)"
            raise KeyError(f"unknown attack family {family!r} in dataset {self.name!r}; available: {avail}")
        return recs

    def attack_documents(self, family: str) -> list[Document]:
        """All poison documents of ``family`` (every target's), ``poison=True``, metadata
        {query_id, attack, target_answer}: the injection set of one attack condition (docs/design.md)."""
        return [d for rec in self.attack_records(family) for d in rec.documents]

    @property
    def targets_by_query(self) -> dict[str, Target]:
        return {t.query_id: t for t in self.targets}

    def content_hash(self) -> str:
        """Corpus version: :func:`corpus_hash` of the documents in order."""
        return corpus_hash(self.documents)

    def summary(self) -> str:
        parts = [f"{len(self.documents)} documents", f"{len(self.queries)} queries"]
        if self.qrels:
            parts.append(f"{sum(len(v) for v in self.qrels.values())} qrels")
        if self.attacks:
            parts.append(f"{len(self.attacks)} attack records ({', '.join(self.attack_families())})")
        if self.targets:
            parts.append(f"{len(self.targets)} targets")
        if self.contexts:
            parts.append(f"{len(self.contexts)} saved contexts")
        return ", ".join(parts)
