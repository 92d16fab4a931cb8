"""Placement: forced-top poisons and injection-volume helpers.

**Forced-top** (TRIS:pilot_cpu.py, exp_robustrag_pareto.py; docs/algorithms.md §7.3) is not live
retrieval: "Poison i (0-based) gets score top1_clean + 1.0 − 0.001·i, so all poisons sit above every
clean document in their given order. The list is truncated to k=50." The worst case for a
defense: the retriever is taken out of the loop.

The ``forced_top`` family's documents are "question." + payload (pilot ``prefix`` mode) with
metadata ``forced_rank`` = i and ``forced_score_offset`` = 1.0 − 0.001·i, and every record carries
``metadata["placement"] = "forced_top"``. **Whoever builds the attacked ranking (evaluation
runner, dashboard) must place these documents with** :func:`force_top` **instead of retrieving
them**: retrieval would rank them like ``pr_b``.
"""
from __future__ import annotations

from typing import Any, Sequence

from sieve.attacks.base import (
    MAX_VOLUME,
    MIN_VOLUME,
    Attack,
    validate_volume,
    volume_slots,
)
from sieve.registry import ATTACKS
from sieve.types import AttackRecord, Document, RankedDocument, Ranking, Target

__all__ = ["FORCED_STEP", "FORCED_OFFSET", "ForcedTopAttack", "force_top", "apply_placement", "is_forced_top",
           "with_volume", "validate_volume", "volume_slots", "MIN_VOLUME", "MAX_VOLUME"]

#: Score offset of the first forced poison above the best clean document (TRIS:pilot_cpu.py).
FORCED_OFFSET = 1.0
#: Decrement per poison so they keep their given order (TRIS:pilot_cpu.py).
FORCED_STEP = 0.001


@ATTACKS.register
class ForcedTopAttack(Attack):
    """Poisons "question." + payload, to be pinned above every clean document by :func:`force_top`."""

    name = "forced_top"
    summary = "Forced-top placement: 'question.' + payload pinned above every clean document"
    paper = "TRIS pilot_cpu.py forced-top placement, docs/algorithms.md §7.3"
    needs = ()

    def build(self, target: Target, payload_indices: list[int], resources: Any,
              seed: int) -> dict[int, tuple[str, dict[str, Any]]]:
        return {p: (target.query.strip() + "." + target.payloads[p].strip(),
                    {"trigger": target.query.strip(), "placement": "forced_top"}) for p in payload_indices}

    def generate(self, targets, resources, seed=0, volume=5, progress=True):
        out = super().generate(targets, resources, seed=seed, volume=volume, progress=progress)
        # forced_rank is the position among the target's own poisons (j), known only after slotting
        for r in out.records:
            for i, d in enumerate(r.documents):
                d.metadata["forced_rank"] = i
                d.metadata["forced_score_offset"] = round(FORCED_OFFSET - FORCED_STEP * i, 6)
        return out

    def record_metadata(self) -> dict[str, Any]:
        return {"placement": "forced_top"}


def is_forced_top(record_or_doc: AttackRecord | Document) -> bool:
    """True if a record/document must be placed with :func:`force_top` rather than retrieved."""
    return record_or_doc.metadata.get("placement") == "forced_top"


def force_top(ranking: Ranking, poisons: Sequence[Document], depth: int | None = None) -> Ranking:
    """Pin ``poisons`` above every clean document of ``ranking`` (TRIS forced-top, §7.3).

    Poison i gets score ``top1_clean + 1.0 − 0.001·i`` (ranks 1..len(poisons) in the given order);
    the clean documents follow in their order; the list is truncated to ``depth`` (default: the
    input ranking's length, i.e. the retrieval depth, k=50 in TRIS). Documents of the input with a
    poison's id are dropped first, so placing twice does not duplicate. ``top1_clean`` is 0 for an
    empty ranking.
    """
    poison_ids = {p.id for p in poisons}
    clean = [d for d in ranking.documents if d.id not in poison_ids]
    depth = len(ranking.documents) if depth is None else int(depth)
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    top1 = max((d.score for d in clean), default=0.0)
    placed = [RankedDocument(p.id, p.text, 0, float(top1 + FORCED_OFFSET - FORCED_STEP * i), True, p.title)
              for i, p in enumerate(poisons)]
    rest = [RankedDocument(d.id, d.text, 0, d.score, d.poison, d.title) for d in clean]
    docs = (placed + rest)[:depth]
    for r, d in enumerate(docs, 1):
        d.rank = r
    return Ranking(ranking.query, docs, ranking.query_id, ranking.condition,
                   ranking.correct_answers, ranking.target_answer)


def apply_placement(ranking: Ranking, dataset: Any, depth: int | None = None) -> Ranking:
    """The attacked ranking as the attack family prescribes. For a forced-top family (records with
    ``metadata["placement"] == "forced_top"``) the query's own poisons are pinned above every clean
    document with :func:`force_top`; any other condition is returned unchanged. One rule for the
    evaluation runner and the dashboard. ``dataset`` is a :class:`sieve.corpus.Dataset`."""
    if ranking.condition == "clean" or not ranking.query_id or ranking.condition not in dataset.attack_families():
        return ranking
    recs = [r for r in dataset.attack_records(ranking.condition) if r.query_id == ranking.query_id]
    if not any(is_forced_top(r) for r in recs):
        return ranking
    return force_top(ranking, [d for r in recs for d in r.documents], depth)


def with_volume(records: Sequence[AttackRecord], volume: int) -> list[AttackRecord]:
    """Records cut to injection volume ``volume`` (first ``volume`` documents, j = 0..volume-1).

    Since a poison depends only on (seed, query_id, payload index), cutting a volume-20 generation
    gives exactly what ``generate(volume=volume)`` would give (RAGSieve volumes 1/3/5/10, §7.4).
    Raises ValueError if a record has fewer documents than asked.
    """
    volume = validate_volume(volume)
    out = []
    for r in records:
        if len(r.documents) < volume:
            raise ValueError(f"record {r.attack}:{r.query_id} has {len(r.documents)} documents, "
                             f"fewer than volume {volume}; regenerate with --volume {volume}")
        out.append(AttackRecord(r.query_id, r.query, r.correct_answers, r.target_answer, r.attack,
                                tuple(r.documents[:volume]), dict(r.metadata)))
    return out
