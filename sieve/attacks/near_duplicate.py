"""``near_duplicate``: a gold passage with only its answer span replaced by the target answer
(docs/algorithms.md §7.7).

The passage is a relevant passage of the query (the dataset's qrels, score > 0) that contains one of
its correct answers; every occurrence of a correct answer (case-insensitive, whole words, longest
alias first) is replaced by ``target_answer`` and nothing else changes. The poison therefore sits
next to its source in every embedding space (the measured retriever cosine is recorded in each
poison's ``cosine_to_source``: on the demo mean 0.963, minimum 0.857 — long or repeated answers move
it further than the ≈ 0.99 of a one-word swap), carries no trigger and no cluster of siblings.

Poison j copies the gold passage of cosine rank ``j mod n_gold`` (the attacker's closest copy first);
the shipped demo records hold one poison per query (``scripts/build_demo_attacks.py``).
``payload_index`` names the slot (the payload text is not used).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sieve.attacks.base import Attack, SkipTarget
from sieve.attacks.sources import answer_pattern, gold_passages, require_data
from sieve.registry import ATTACKS
from sieve.types import Target

if TYPE_CHECKING:
    from sieve.resources import Resources


def replace_answer_spans(text: str, answers: Sequence[str], target_answer: str) -> tuple[str, list[str]]:
    """``text`` with every answer span replaced by ``target_answer``; also the replaced spans."""
    pat = answer_pattern(answers)
    if pat is None:
        return text, []
    spans: list[str] = []

    def sub(m: Any) -> str:
        spans.append(m.group(0))
        return target_answer

    return pat.sub(sub, text), spans


@ATTACKS.register
class NearDuplicateAttack(Attack):
    """Gold passage, answer span → target answer (§7.7). ``data``: the dataset directory (corpus + qrels)."""

    name = "near_duplicate"
    summary = "A gold passage (qrels) with only the answer span replaced by the target answer (cosine to it recorded)"
    paper = "Near-duplicate answer substitution (knowledge-conflict edits), docs/algorithms.md §7.7"
    needs = ("retriever",)

    # parameters, stored as attributes by Params.__init__ (declared for type checkers)
    data: str

    def __init__(self, data: str = "") -> None:
        super().__init__(data=str(data) if data else "")

    def prepare(self, targets, resources: "Resources") -> None:
        self._ds = require_data(self.name, self.data)
        self._cosines: list[float] = []

    def build(self, target: Target, payload_indices: list[int], resources: "Resources",
              seed: int) -> dict[int, tuple[str, dict[str, Any]]]:
        golds = gold_passages(self._ds, target)
        if not golds:
            raise SkipTarget("no relevant passage (qrels) contains a correct answer")
        edits = []
        for g in golds:
            text, spans = replace_answer_spans(g.text, target.correct_answers, target.target_answer.strip())
            edits.append((g, text, spans))
        retr = resources.retriever
        vecs = retr.encode([g.text for g, _, _ in edits] + [t for _, t, _ in edits])
        n = len(edits)
        cos = [float(vecs[i] @ vecs[n + i]) for i in range(n)]
        order = sorted(range(n), key=lambda i: (-cos[i], i))
        out = {}
        for p in payload_indices:
            g_i = order[p % n]
            g, text, spans = edits[g_i]
            out[p] = (text, {"trigger": "", "source_id": g.id, "replaced_spans": spans, "gold_passages": n,
                             "cosine_to_source": round(cos[g_i], 6), "retriever": getattr(retr, "model_id", ""),
                             "single": True})
            self._cosines.append(cos[g_i])
        return out

    def record_metadata(self) -> dict[str, Any]:
        return {"single_poison": True}

    def finish_stats(self, stats: dict[str, Any]) -> None:
        if self._cosines:
            c = np.array(self._cosines)
            stats.update(cosine_to_source_mean=round(float(c.mean()), 4), cosine_to_source_min=round(float(c.min()), 4))
