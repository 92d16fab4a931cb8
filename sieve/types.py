"""Core data types shared by every part of Sieve.

Everything that crosses a module boundary is one of these dataclasses: documents and queries
(loaded by :mod:`sieve.corpus`), rankings (produced by :mod:`sieve.index` or read from a
``contexts.jsonl``), per-document :class:`Decision` objects and the :class:`DefenseResult` that
every defense in :mod:`sieve.defenses` returns.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal


def content_hash(text: str) -> str:
    """sha256 (hex, first 32 chars) of a document text; the key of per-document caches."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class Document:
    """One corpus passage. ``text`` is kept whole; models truncate on their own side."""

    id: str
    text: str
    title: str = ""
    poison: bool = False
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def hash(self) -> str:
        return content_hash(self.text)

    def model_text(self) -> str:
        """Text handed to embedding models: title + blank line + text (RAGSieve §6.1 rule)."""
        if self.title and not self.text.startswith(self.title):
            return f"{self.title}\n\n{self.text}"
        return self.text


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    answers: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttackRecord:
    """One line of ``attacks.jsonl``: the poison documents of one attack family for one target."""

    query_id: str
    query: str
    correct_answers: tuple[str, ...]
    target_answer: str
    attack: str
    documents: tuple[Document, ...]
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Target:
    """One line of ``targets.jsonl`` (Sieve extension of the dataset format): an attack target with
    its wrong ``target_answer`` and the fluent poison ``payloads`` that assert it (PoisonedRAG §7.1)."""

    query_id: str
    query: str
    correct_answers: tuple[str, ...]
    target_answer: str
    payloads: tuple[str, ...]
    voices: tuple[str, ...] = ()


@dataclass
class RankedDocument:
    """A document at a 1-based ``rank`` with its retriever ``score`` (cosine similarity)."""

    id: str
    text: str
    rank: int
    score: float
    poison: bool = False
    title: str = ""

    @property
    def hash(self) -> str:
        return content_hash(self.text)


@dataclass
class Ranking:
    """A query and its retrieved documents, best first (ranks 1..n, unique, ascending)."""

    query: str
    documents: list[RankedDocument]
    query_id: str = ""
    condition: str = "clean"
    correct_answers: tuple[str, ...] = ()
    target_answer: str = ""

    def top(self, k: int) -> list[RankedDocument]:
        return self.documents[:k]

    def without(self, ids: set[str]) -> "Ranking":
        """Survivors of a quarantine, re-numbered 1.. in their original order (RAGSieve §5)."""
        kept = [d for d in self.documents if d.id not in ids]
        docs = [RankedDocument(d.id, d.text, i + 1, d.score, d.poison, d.title) for i, d in enumerate(kept)]
        return Ranking(self.query, docs, self.query_id, self.condition, self.correct_answers, self.target_answer)


DecisionStatus = Literal["scored", "ran", "abstained", "error", "skipped", "unavailable", "not_examined"]
"""
* ``scored``       – the detector computed a score for the document (flagged or not).
* ``ran``          – an LLM layer judged the document (TRIS L3).
* ``abstained``    – the layer declined to judge (e.g. the LLM does not know the answer); kept.
* ``error``        – the layer failed for this document (timeout, malformed reply); kept (fail-open).
* ``skipped``      – the layer did not run on this document by design (mode, gating).
* ``unavailable``  – the detector cannot run on this input (e.g. RSQ with < 20 documents).
* ``not_examined`` – the document was outside the detector's scope (e.g. RSQ ranks 6+).
"""

VALID_STATUSES: frozenset[str] = frozenset(
    ["scored", "ran", "abstained", "error", "skipped", "unavailable", "not_examined"]
)


@dataclass
class Decision:
    """One defense's verdict on one document.

    ``score`` is the raw detector score (higher = more suspicious) or ``None`` if the detector
    produced none; ``threshold`` is the value it was compared with; ``removed`` is the decision.
    ``evidence`` holds named components (numbers, lists, traces) for plots and audits.
    """

    doc_id: str
    removed: bool
    status: str
    score: float | None = None
    threshold: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    layer: str = ""

    def margin(self) -> float | None:
        """Signed distance to the threshold (positive = on the removal side)."""
        if self.score is None or self.threshold is None:
            return None
        return float(self.score) - float(self.threshold)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Decision":
        """Inverse of :meth:`to_dict` (e.g. a decision read back from ``records.jsonl``); unknown keys
        are ignored, ``evidence`` is copied."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["evidence"] = dict(kw.get("evidence") or {})
        kw["removed"] = bool(kw.get("removed", False))
        return cls(**kw)


@dataclass
class Score:
    """One defense's score of one document, before any decision (``Defense.score``).

    ``value`` is the detector's score (higher = more suspicious; ``None`` = none); ``evidence`` its
    named components. ``flag`` is the method's own verdict where no threshold decides (a cluster
    rule, an LLM verdict; ``None`` = decided by a threshold) and ``threshold`` the fixed value that
    verdict corresponds to; ``note`` the reason when no threshold decides (unscored, rule verdict).
    """

    doc_id: str
    value: float | None = None
    status: str = "scored"
    layer: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    flag: bool | None = None
    threshold: float | None = None
    note: str = ""


@dataclass
class Scores:
    """What ``Defense.score`` returns for one ranking: one :class:`Score` per document (same order),
    plus what scoring learned on the way (info, warnings, layers run, latencies, the defense's own
    answer). No threshold and no removal."""

    items: list[Score]
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    layers_run: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)
    answer: str | None = None

    def by_id(self) -> dict[str, Score]:
        return {s.doc_id: s for s in self.items}


@dataclass
class Inspection:
    """What :meth:`sieve.defenses.base.Defense.inspect` returns for one ranking: one decision per
    document (same order), plus what the defense learned on the way. ``answer`` is set by defenses
    that produce their own answer (RobustRAG, TrustRAG; ``Defense.answers``). ``info["context_k"]``,
    when present, records the context size ``Defense.apply`` uses (``Defense.context_size``)."""

    decisions: list[Decision]
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    layers_run: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)
    answer: str | None = None
    #: The scores the decisions were taken from (``decide(scores, thresholds) == decisions``).
    scores: Scores | None = None

    @property
    def removed_ids(self) -> list[str]:
        return [d.doc_id for d in self.decisions if d.removed]


@dataclass
class DefenseResult:
    """What a defense returns for one ranking.

    ``decisions`` holds one entry per input document (same order as the ranking); ``context``
    is the final generation context after refill to ``k_ctx``; ``fallback_used`` is set when every
    document was filtered and the unfiltered list was used instead (with a warning); ``answer`` is
    the defense's own answer (defenses with ``answers = True``), else ``None``.
    """

    defense: str
    decisions: list[Decision]
    context: list[RankedDocument]
    fallback_used: bool = False
    layers_run: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None

    @property
    def removed_ids(self) -> list[str]:
        return [d.doc_id for d in self.decisions if d.removed]

    def decision_for(self, doc_id: str) -> Decision | None:
        for d in self.decisions:
            if d.doc_id == doc_id:
                return d
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "defense": self.defense,
            "decisions": [d.to_dict() for d in self.decisions],
            "context": [asdict(d) for d in self.context],
            "fallback_used": self.fallback_used,
            "layers_run": list(self.layers_run),
            "latency_ms": dict(self.latency_ms),
            "warnings": list(self.warnings),
            "info": self.info,
            "answer": self.answer,
        }
