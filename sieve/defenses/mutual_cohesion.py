"""Mutual cohesion: a passage that belongs to a tight group of mutually nearest passages in its ranking
(docs/algorithms.md §14.8).

Several poisons written for one question are paraphrases of one another, so they are each other's nearest
neighbours among the passages retrieved for it. Plain cohesion (fusion's ``cohesion`` evidence: the mean
cosine to a passage's two nearest neighbours) also floors the true passage on their topic, because *its*
nearest neighbours are the poisons (docs/results/suite.md, "Why the shipped fusion lost"). Nearness is not
symmetric there: the poisons are closer to one another than to the true passage, so the true passage is not
among *their* nearest neighbours. Counting mutual neighbours only separates the two. In the judge's space,
among the first ``window`` passages of a ranking:

    N_m(i) = the m passages nearest to i (cosine; ties by rank)
    mutual_i = Σ over j with j ∈ N_m(i) and i ∈ N_m(j) of max(0, cos(i, j))

High for a member of a group of at least two other mutually near passages; near 0 for a passage next to a
group it is not part of; low for ordinary passages, whose mutual neighbours are far. What it cannot see: a
lone poison and the true passage are each other's nearest neighbour, and score alike (the
``single_fluent`` setting, measured in docs/results/suite.md); poisons written far apart from one another.

Alone it scores the first ``k_ctx`` passages against a threshold learned on clean rankings (the one budget
rule of §9.2) and leaves the rest ``not_examined``; a removed passage is replaced by the next one,
unexamined. Written in the tenth suite session after measuring it on msmarco-gold and the demo.
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


#: m, how many nearest passages each passage names (the class default; fusion's ``mutual`` evidence uses it).
NEIGHBOURS = 3


def mutual_cohesion_scores(X: np.ndarray, neighbours: int) -> tuple[np.ndarray, np.ndarray]:
    """(mutual cohesion, number of mutual neighbours) of every row of ``X`` (passage vectors in ranking
    order, the window already cut) with ``neighbours`` = m (module docstring)."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    if n < 2:
        return np.full(n, np.nan), np.zeros(n, dtype=int)
    X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    S = X @ X.T
    np.fill_diagonal(S, -np.inf)
    m = min(int(neighbours), n - 1)
    order = np.argsort(-S, axis=1, kind="stable")[:, :m]       # ties: the better-ranked passage first
    near = np.zeros((n, n), dtype=bool)
    near[np.repeat(np.arange(n), m), order.ravel()] = True
    mutual = near & near.T
    values = np.where(mutual, np.maximum(S, 0.0), 0.0).sum(axis=1)
    return values, mutual.sum(axis=1)


@DEFENSES.register
class MutualCohesion(Defense):
    """Mutual cohesion (module docstring; docs/algorithms.md §14.8).

    Parameters: ``threshold`` (removal at mutual cohesion ≥ threshold; ``None`` = calibrate on clean
    rankings), ``neighbours`` (3: m, how many nearest passages each passage names), ``window`` (10: the
    first passages of the ranking compared with one another)."""

    name = "mutual_cohesion"
    summary = ("Removes a context passage that is one of a tight group of passages that are each other's nearest "
               "neighbours among those retrieved (one author's variants); a passage merely near the group is kept.")
    paper = "Sieve extension (docs/algorithms.md §14.8)"
    needs = ("judge",)
    threshold_param = "threshold"
    requires_calibration = True

    # parameters (set by __init__ through Params; declared for type checkers)
    threshold: float | None
    neighbours: int
    window: int

    def __init__(self, threshold: float | None = None, neighbours: int = NEIGHBOURS, window: int = 10) -> None:
        if int(neighbours) < 1:
            raise ValueError(f"mutual_cohesion: neighbours must be >= 1; got {neighbours!r}")
        if int(window) < 2:
            raise ValueError(f"mutual_cohesion: window must be >= 2; got {window!r}")
        super().__init__(threshold=threshold, neighbours=neighbours, window=window)

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        docs = ranking.documents
        n = len(docs)
        k = n if k_ctx is None else min(int(k_ctx), n)
        if n == 0:
            return Scores([])
        w = min(int(self.window), n)
        X = resources.judge_embeddings([d.text for d in docs[:w]])     # cached per document
        values, counts = mutual_cohesion_scores(X, int(self.neighbours))
        out = []
        for i, d in enumerate(docs):
            if i >= k:
                out.append(Score(d.id, None, "not_examined", self.name,
                                 note="beyond the generation context; not examined"))
            elif i >= w or not np.isfinite(values[i]):
                out.append(Score(d.id, None, "unavailable", self.name,
                                 note="no other passage in the window to compare with; kept"))
            else:
                out.append(Score(d.id, float(values[i]), "scored", self.name,
                                 {"mutual_neighbours": int(counts[i]), "window": w}))
        return Scores(out)

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        if s.value is None:
            return s.note
        ev = s.evidence
        what = (f"{ev.get('mutual_neighbours', 0)} mutual nearest neighbour(s) among the first {ev.get('window')} "
                f"passages: mutual cohesion {s.value:.3f}")
        if threshold is None:
            return f"{what}; no threshold set (calibrate on clean rankings); kept"
        return f"{what} {'≥' if removed else '<'} {threshold:.3f}; " + ("removed" if removed else "kept")
