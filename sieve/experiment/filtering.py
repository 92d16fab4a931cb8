"""Filtering a caller's retrieved documents: the library path shared by ``sieve serve`` and the
LangChain / LlamaIndex adapters (docs/service.md).

A caller (another RAG stack) has already retrieved documents for a query. :class:`DocumentFilter`
turns them into a :class:`~sieve.types.Ranking` (caller's order, caller's scores), drops the ones
the quarantine ledger excludes (same document id *and* content hash, ``Ledger.quarantined_ids``),
runs a defense prepared once per (spec, params) by :func:`~sieve.experiment.prepare_defense` on
the experiment's clean data, and returns per-document decisions plus the final context
(``Defense.apply``, sieve/defenses/base.py). Nothing here ranks a query against an index.
"""
from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sieve.constants import K_CTX
from sieve.types import RankedDocument, Ranking, content_hash

if TYPE_CHECKING:
    from sieve.defenses.base import Defense
    from sieve.experiment.snapshots import Experiment

#: Ledger exclusion policy applied to a caller's documents unless told otherwise.
DEFAULT_QUARANTINE = "open_and_confirmed"
#: Status / layer of a document the quarantine ledger keeps out (not a defense decision).
QUARANTINED = "quarantined"
_MAX_EVIDENCE_KEYS = 12
_MAX_EVIDENCE_STR = 80
_MAX_EVIDENCE_LIST = 8


@dataclass(frozen=True)
class InputDocument:
    """One retrieved document as a caller sends it; ``score`` is the caller's retriever score."""

    id: str
    text: str
    title: str = ""
    score: float | None = None


@dataclass
class FilterOutcome:
    """Per-document decisions (caller's order) and the final context (ids and texts, in order)."""

    defense: str
    k_ctx: int | None
    decisions: list[dict[str, Any]]
    context: list[dict[str, Any]]
    quarantined: list[str] = field(default_factory=list)
    fallback_used: bool = False
    warnings: list[str] = field(default_factory=list)
    latency_ms: float = 0.0

    @property
    def removed_ids(self) -> list[str]:
        return [d["id"] for d in self.decisions if d["removed"]]

    def to_dict(self) -> dict[str, Any]:
        return {"defense": self.defense, "k_ctx": self.k_ctx, "decisions": self.decisions,
                "context": self.context, "removed": self.removed_ids, "quarantined": list(self.quarantined),
                "fallback_used": self.fallback_used, "warnings": list(self.warnings),
                "latency_ms": round(self.latency_ms, 3)}


def compact_evidence(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """A small, JSON-safe summary of a decision's evidence: numbers rounded to 4 significant
    decimals, short strings, booleans, short numeric lists; traces, arrays and nested objects
    are left out (they are for plots, not for an API answer)."""
    out: dict[str, Any] = {}
    for key, v in evidence.items():
        if len(out) >= _MAX_EVIDENCE_KEYS:
            break
        if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
            v = v.item()
        if isinstance(v, bool) or v is None:
            out[str(key)] = v
        elif isinstance(v, (int, float)):
            out[str(key)] = _num(v)
        elif isinstance(v, str):
            out[str(key)] = v if len(v) <= _MAX_EVIDENCE_STR else v[: _MAX_EVIDENCE_STR - 1] + "…"
        elif isinstance(v, (list, tuple)) and len(v) <= _MAX_EVIDENCE_LIST and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            out[str(key)] = [_num(x) for x in v]
    return out


def _num(v: float | int) -> float | int | None:
    if isinstance(v, int):
        return v
    f = float(v)
    if not math.isfinite(f):
        return None
    return round(f, 4)


def _spec_key(spec: str, params: Mapping[str, Any] | None) -> tuple[str, str]:
    return spec, json.dumps(dict(params or {}), sort_keys=True, default=str)


class DocumentFilter:
    """Decisions on a caller's retrieved documents with the defenses of one experiment.

    Parameters
    ----------
    experiment : the :class:`~sieve.experiment.Experiment` whose clean queries calibrate unset
        thresholds and whose snapshot corpus-time detectors are fitted on
    ledger_path : quarantine ledger read on every call (another process, e.g. the dashboard, may
        change it); ``None`` = the experiment's ledger
    quarantine : exclusion policy (``open_and_confirmed``, ``confirmed_only`` or ``none``)
    clean_limit : clean queries used to calibrate an unset threshold (``None`` = all)
    """

    def __init__(self, experiment: "Experiment", *, ledger_path: str | Path | None = None,
                 quarantine: str = DEFAULT_QUARANTINE, clean_limit: int | None = None) -> None:
        from sieve.ledger import EXCLUSION_POLICIES

        if quarantine not in EXCLUSION_POLICIES:
            raise ValueError(f"quarantine policy must be one of {', '.join(EXCLUSION_POLICIES)}; got {quarantine!r}")
        self.experiment = experiment
        lp = ledger_path if ledger_path is not None else experiment.ledger_path
        self.ledger_path = Path(lp) if lp is not None else None
        self.quarantine = quarantine
        self.clean_limit = clean_limit
        self._defenses: dict[tuple[str, str], "Defense"] = {}
        self._prepare_lock = threading.Lock()
        self._apply_locks: dict[tuple[str, str], threading.Lock] = {}

    # -- defenses -----------------------------------------------------------------------------------
    def defense(self, spec: str, params: Mapping[str, Any] | None = None) -> "Defense":
        """The defense ``spec`` with ``params``, prepared once (build → fit → clean calibration)
        and cached. Unknown names or parameters raise :class:`~sieve.experiment.DefenseSpecError`."""
        key = _spec_key(spec, params)
        d = self._defenses.get(key)
        if d is not None:
            return d
        with self._prepare_lock:
            d = self._defenses.get(key)
            if d is None:
                from sieve.experiment.defenses import prepare_defense

                d = prepare_defense(self.experiment, spec, params=params, clean_limit=self.clean_limit)
                self._defenses[key] = d
                self._apply_locks[key] = threading.Lock()
        return d

    def prepared(self) -> list[str]:
        """Specs prepared so far (with their parameters as JSON)."""
        return [s if p == "{}" else f"{s} {p}" for s, p in self._defenses]

    # -- quarantine -----------------------------------------------------------------------------------
    def quarantined(self, documents: Sequence[InputDocument]) -> set[str]:
        """Ids of ``documents`` the ledger excludes (alert for the same id and content hash)."""
        if self.quarantine == "none" or self.ledger_path is None or not self.ledger_path.exists():
            return set()
        from sieve.ledger import Ledger

        with Ledger(self.ledger_path) as led:
            return led.quarantined_ids(documents, self.quarantine)

    # -- filtering -----------------------------------------------------------------------------------
    def filter(self, query: str, documents: Sequence[InputDocument], spec: str,
               params: Mapping[str, Any] | None = None, k_ctx: int | None = K_CTX) -> FilterOutcome:
        """Decide on every document of ``documents`` (the caller's ranking, best first)."""
        import time

        if not query.strip():
            raise ValueError("query: the query is empty")
        seen: set[str] = set()
        for i, d in enumerate(documents):
            if d.id in seen:
                raise ValueError(f"documents[{i}].id: duplicate document id {d.id!r}")
            seen.add(d.id)
        if k_ctx is not None and int(k_ctx) < 1:
            raise ValueError(f"k_ctx: must be >= 1 (or null for every survivor), got {k_ctx}")
        defense = self.defense(spec, params)
        t0 = time.perf_counter()
        quarantined = self.quarantined(documents)
        kept = [d for d in documents if d.id not in quarantined]
        ranking = Ranking(query, [RankedDocument(d.id, d.text, i + 1, float(d.score) if d.score is not None else 0.0,
                                                 False, d.title) for i, d in enumerate(kept)], condition="served")
        warnings: list[str] = []
        by_id: dict[str, dict[str, Any]] = {}
        context: list[dict[str, Any]] = []
        fallback = False
        if ranking.documents:
            with self._apply_locks[_spec_key(spec, params)]:
                result = defense.apply(ranking, self.experiment.resources, k_ctx)
            warnings.extend(result.warnings)
            fallback = bool(result.fallback_used)
            for dec in result.decisions:
                by_id[dec.doc_id] = {
                    "score": _num(dec.score) if dec.score is not None else None,
                    "threshold": _num(dec.threshold) if dec.threshold is not None else None,
                    "removed": bool(dec.removed), "status": dec.status, "reason": dec.reason,
                    "layer": dec.layer, "evidence": compact_evidence(dec.evidence)}
            context = [{"id": d.id, "rank": i + 1, "text": d.text, "title": d.title, "score": _num(d.score)}
                       for i, d in enumerate(result.context)]
        elif documents:
            warnings.append("every document is quarantined by the ledger; the context is empty")
        if quarantined:
            warnings.append(f"{len(quarantined)} document(s) excluded by the quarantine ledger ({self.quarantine})")
        in_context = {c["id"] for c in context}
        decisions = []
        for i, d in enumerate(documents):
            row: dict[str, Any] = {"id": d.id, "rank": i + 1, "content_hash": content_hash(d.text)}
            if d.id in quarantined:
                row.update(score=None, threshold=None, removed=True, status=QUARANTINED,
                           reason=f"quarantined by the ledger ({self.quarantine})", layer="ledger", evidence={})
            else:
                row.update(by_id.get(d.id) or {"score": None, "threshold": None, "removed": False,
                                                "status": "not_examined", "reason": "", "layer": "", "evidence": {}})
            row["in_context"] = d.id in in_context
            decisions.append(row)
        return FilterOutcome(defense.label, k_ctx, decisions, context, sorted(quarantined), fallback, warnings,
                             (time.perf_counter() - t0) * 1000.0)


__all__ = ["DocumentFilter", "InputDocument", "FilterOutcome", "compact_evidence", "DEFAULT_QUARANTINE", "QUARANTINED"]
