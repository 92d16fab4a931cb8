"""Promotion without support: a passage much closer to the question than to the passages around it
(docs/algorithms.md §14.6).

A passage written for one question (a poison) is pulled towards the question itself; a real passage is
about a topic, and the other passages retrieved for the question are about it too. So for each passage
d_i of a ranking, in the judge's space (the space of fusion's ``similarity`` evidence):

    promotion_i = cos(q, d_i) − mean_{j ∈ N_i} cos(d_i, d_j)

where N_i are the other passages among the first ``neighbourhood`` of the ranking, **without d_i's
near-paraphrases** (cosine ≥ ``source_cosine``): one author's variants are not support. The score is
high for a passage ranked far above what its overlap with the rest of the neighbourhood explains, and
no higher for a true passage that another passage shares a topic with (its neighbours support it). Five
agreeing poisons that are not near-paraphrases support one another, and this evidence does not see
them: it is meant for the lone poison (CorruptRAG's one-document setting), measured in
docs/results/suite.md.

Alone it scores the first ``k_ctx`` passages (the generation context, the population its threshold is
learned on: clean rankings only, the one budget rule of §9.2) and leaves the rest ``not_examined``; a
removed passage is replaced by the next one unexamined. Fusion reads every passage's value (refill
rounds included) as the ``promotion`` evidence.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sieve.constants import K_CTX
from sieve.defenses.base import Defense
from sieve.registry import DEFENSES
from sieve.types import Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources


def promotion_scores(q: np.ndarray, X: np.ndarray, neighbourhood: int, source_cosine: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(promotion, query cosine, support) of every row of ``X`` (passage vectors, ranking order) given
    the question vector ``q`` (module docstring); support is NaN where a passage has no neighbour."""
    X = np.asarray(X, dtype=np.float64)
    X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    q = np.asarray(q, dtype=np.float64)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    simq = X @ q
    m = min(int(neighbourhood), len(X))
    S = X @ X[:m].T                                    # every passage against the neighbourhood
    ok = S < float(source_cosine)                      # near-paraphrases (and the passage itself) do not support
    idx = np.arange(m)
    ok[idx, idx] = False
    counts = ok.sum(axis=1)
    support = np.where(counts > 0, (S * ok).sum(axis=1) / np.maximum(counts, 1), np.nan)
    return simq - support, simq, support


@DEFENSES.register
class Promotion(Defense):
    """Promotion without support (module docstring; docs/algorithms.md §14.6).

    Parameters: ``threshold`` (removal at promotion ≥ threshold; ``None`` = calibrate on clean
    rankings), ``neighbourhood`` (20: the first passages of the ranking that support or not),
    ``source_cosine`` (0.9: neighbours at least this close in the judge's space are the passage's own
    variants and do not support it)."""

    name = "promotion"
    summary = ("Removes a context passage much closer to the question than to the other passages retrieved for it "
               "(its own near-paraphrases excluded): promoted without support.")
    paper = "Sieve extension (docs/algorithms.md §14.6)"
    needs = ("judge",)
    threshold_param = "threshold"
    requires_calibration = True

    # parameters (set by __init__ through Params; declared for type checkers)
    threshold: float | None
    neighbourhood: int
    source_cosine: float

    def __init__(self, threshold: float | None = None, neighbourhood: int = 20, source_cosine: float = 0.9) -> None:
        if int(neighbourhood) < 2:
            raise ValueError(f"promotion: neighbourhood must be >= 2; got {neighbourhood!r}")
        if not -1.0 <= float(source_cosine) <= 1.0:
            raise ValueError(f"promotion: source_cosine must be in [-1, 1]; got {source_cosine!r}")
        super().__init__(threshold=threshold, neighbourhood=neighbourhood, source_cosine=source_cosine)

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        docs = ranking.documents
        n = len(docs)
        k = n if k_ctx is None else min(int(k_ctx), n)
        if n == 0:
            return Scores([])
        # every document, whatever k: the same arithmetic alone and in fusion (judge vectors are cached)
        X = resources.judge_embeddings([d.text for d in docs])
        q = resources.judge_query_embedding(ranking.query)
        promo, simq, support = promotion_scores(q, X, int(self.neighbourhood), float(self.source_cosine))
        out = []
        for i, d in enumerate(docs):
            if i >= k:
                out.append(Score(d.id, None, "not_examined", self.name,
                                 note="beyond the generation context; not examined"))
            elif not np.isfinite(promo[i]):
                out.append(Score(d.id, None, "unavailable", self.name, {"query_cosine": float(simq[i])},
                                 note="no neighbour to compare with (all near-paraphrases); kept"))
            else:
                out.append(Score(d.id, float(promo[i]), "scored", self.name,
                                 {"query_cosine": float(simq[i]), "support": float(support[i])}))
        return Scores(out)

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        if s.value is None:
            return s.note
        ev = s.evidence
        what = (f"question cosine {ev.get('query_cosine', float('nan')):.2f}, mean cosine to its neighbours "
                f"{ev.get('support', float('nan')):.2f}: promotion {s.value:.3f}")
        if threshold is None:
            return f"{what}; no threshold set (calibrate on clean rankings); kept"
        return f"{what} {'≥' if removed else '<'} {threshold:.3f}; " + ("removed" if removed else "kept")
