"""Query similarity: a passage unusually close to the question in the judge's space
(docs/algorithms.md §14.7; the fusion's ``similarity`` evidence, §14.2).

PoisonedRAG-style poisons are written to be retrieved for one question, so they sit closer to it than
most passages that answer it. The score is the judge-space cosine of the passage to the question,
computed in the judge's space (not read from the retriever's scores, whose scale says nothing about the
text); the threshold is learned on clean rankings only (the one budget rule of §9.2). Alone it examines
the first ``k_ctx`` passages (the population its threshold is learned on) and leaves the rest
``not_examined``. Where the true passage is itself close to the question (an FAQ page that repeats it,
a context of otherwise off-topic passages) it is removed too: measured in docs/results/suite.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from sieve.constants import K_CTX
from sieve.defenses.base import Defense
from sieve.registry import DEFENSES
from sieve.types import Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources


def query_cosines(resources: "Resources", query: str, texts: Sequence[str]) -> list[float]:
    """The judge-space cosine of each text to the question."""
    qv = resources.judge_query_embedding(query)
    X = resources.judge_embeddings(list(texts))
    X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    return [float(v) for v in X @ qv]


@DEFENSES.register
class QuerySimilarity(Defense):
    """Query similarity (module docstring; docs/algorithms.md §14.7). Parameter: ``threshold`` (removal
    at cosine ≥ threshold; ``None`` = calibrate on clean rankings)."""

    name = "query_similarity"
    summary = ("Removes a context passage unusually close to the question in the judge's space (poisons are written "
               "to be retrieved for it); threshold learned on clean rankings.")
    paper = "Sieve extension (docs/algorithms.md §14.7; fusion's similarity evidence, §14.2)"
    needs = ("judge",)
    threshold_param = "threshold"
    requires_calibration = True

    # parameters (set by __init__ through Params; declared for type checkers)
    threshold: float | None

    def __init__(self, threshold: float | None = None) -> None:
        super().__init__(threshold=threshold)

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        docs = ranking.documents
        k = len(docs) if k_ctx is None else min(int(k_ctx), len(docs))
        sims = query_cosines(resources, ranking.query, [d.text for d in docs[:k]]) if k else []
        out = [Score(d.id, v, "scored", self.name, {"query_cosine": v}) for d, v in zip(docs, sims)]
        out += [Score(d.id, None, "not_examined", self.name, note="beyond the generation context; not examined")
                for d in docs[k:]]
        return Scores(out)

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        if s.value is None:
            return s.note
        if threshold is None:
            return f"question cosine {s.value:.3f}; no threshold set (calibrate on clean rankings); kept"
        return (f"question cosine {s.value:.3f} {'≥' if removed else '<'} {threshold:.3f}; "
                + ("removed" if removed else "kept"))
