"""RAGDefender (Kim, Lee, Koo, ACSAC 2025) from the published package ``ragdefender==0.2.0``
(docs/algorithms.md §8.5): the peer baseline, CPU-only, no LLM calls.

The package's two stages run unchanged on the retrieved set R (the first ``max_docs`` documents of
the ranking; default the generation context, ``k_ctx``, as in the paper where R is the top-k):

1. **Grouping** estimates N_adv, the number of adversarial passages in R:
   ``task_type="single_hop"`` → :class:`ragdefender.ClusteringBasedGrouping` (2-cluster
   agglomerative clustering + the TF-IDF top-``m`` vote, paper Eq. 1–2);
   ``task_type="multi_hop"`` → :class:`ragdefender.ConcentrationBasedGrouping` (concentration factors,
   Eq. 3, in the package's implemented form).
2. **Identification** (:class:`ragdefender.IdentifyAdversarial`) ranks R by the pair-frequency score
   f_i = Σ over the top N_pairs = max(1, C(N_adv, 2)) most similar pairs containing i of sim^p
   (Eq. 4–7) and removes the top N_adv.

Embedder: the package accepts any object with ``encode(texts, convert_to_tensor=True)``. Sieve
passes :class:`JudgeEmbedder`, which returns the judge model's vectors (Sieve's packaged MiniLM
``all-MiniLM-L6-v2`` by default — the package's own default model, so nothing is downloaded)
through ``Resources.judge_embeddings`` (artifact-cached per document). The result equals running
``ragdefender.RAGDefender(embedder=<the judge's SentenceTransformer>).defend(...)`` on the same
texts (tests/defenses/test_ragdefender.py checks it with the real model).

Decisions: removed = the package's removed indices. Score (higher = more suspicious): the Eq. 6
frequency with N_pairs fixed at C(⌈|R|/2⌉, 2) (``pair_frequency_half``) so that every document of
R gets a score whatever N_adv is (for AUROC and for the fusion detector); the paper's own
``pair_frequency`` at the estimated N_adv, ``n_adv`` and the cluster labels are in ``evidence``.
The removal follows the package's rule, not ``score ≥ threshold``, so there is nothing to
re-decide without a rerun (no threshold knobs), as for TrustRAG.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sieve.constants import K_CTX
from sieve.defenses.base import Defense
from sieve.registry import DEFENSES
from sieve.types import Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources

TASK_TYPES = ("single_hop", "multi_hop")


class JudgeEmbedder:
    """A SentenceTransformer-like ``encode`` over Sieve's judge model (cached judge embeddings)."""

    def __init__(self, resources: "Resources") -> None:
        self.resources = resources

    def encode(self, texts: Sequence[str], convert_to_tensor: bool = False, **_: Any) -> Any:
        X = self.resources.judge_embeddings(list(texts))
        if convert_to_tensor:
            import torch

            return torch.from_numpy(np.ascontiguousarray(X))
        return X


def pair_frequency(embeddings: Any, n_pairs: int, p: int = 2) -> list[float]:
    """Eq. 6 of the paper with the package's pair selection (``ragdefender.similarity``): f_i over the
    top ``n_pairs`` most similar pairs; the same numbers ``IdentifyAdversarial.select`` ranks by."""
    from ragdefender.similarity import top_similar_pairs

    f = [0.0] * len(embeddings)
    for (i, j), sim in top_similar_pairs(embeddings, n_pairs):
        w = (1.0 if sim >= 0.0 else -1.0) * (abs(sim) ** p)
        f[i] += w
        f[j] += w
    return f


@DEFENSES.register
class RAGDefender(Defense):
    """RAGDefender via the ``ragdefender`` package (§8.5). Parameters:

    * ``task_type`` ("single_hop"): "single_hop" = clustering-based grouping (NQ / MS MARCO),
      "multi_hop" = concentration-based grouping (HotpotQA).
    * ``max_docs`` (None): size of R, the examined top of the ranking; None = ``k_ctx`` (the context
      the generator sees; all documents when ``k_ctx`` is None). Documents below R are
      ``not_examined`` and kept (the context is refilled from them without rescoring).
    * ``p`` (2): Eq. 6 weighting exponent; ``m`` (5): TF-IDF top-m terms of Eq. 1 (paper defaults).
    """

    name = "ragdefender"
    summary = ("RAGDefender (ragdefender 0.2.0): estimate the number of poisons by clustering + TF-IDF vote, "
               "remove the passages with the highest pair-frequency score. No LLM.")
    paper = "RAGDefender (Kim, Lee, Koo, ACSAC 2025), package ragdefender==0.2.0; docs/algorithms.md §8.5"
    needs = ("judge",)

    # parameters (set by __init__ through Params; declared for type checkers)
    task_type: str
    max_docs: int | None
    p: int
    m: int

    def __init__(self, task_type: str = "single_hop", max_docs: int | None = None, p: int = 2, m: int = 5) -> None:
        if task_type not in TASK_TYPES:
            raise ValueError(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
        if max_docs is not None and int(max_docs) < 1:
            raise ValueError(f"max_docs must be >= 1 or None, got {max_docs}")
        super().__init__(task_type=task_type, max_docs=None if max_docs is None else int(max_docs), p=int(p), m=int(m))

    def current_thresholds(self) -> dict[str, float | None]:
        return {}   # the package's selection rule, not score ≥ threshold: rerun to change it

    def scope(self, n: int, k_ctx: int | None) -> int:
        """|R|: how many of the ``n`` ranked documents are examined."""
        k = self.max_docs if self.max_docs is not None else k_ctx
        return n if k is None else min(n, int(k))

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        """The package's removal per document of R as ``Score.flag`` (its N_adv selection is no
        threshold rule), with the pair-frequency score for ranking and fusion."""
        t0 = time.perf_counter()
        docs = ranking.documents
        m = self.scope(len(docs), k_ctx)
        texts = [d.text for d in docs[:m]]
        info: dict[str, Any] = {"task_type": self.task_type, "examined": m}
        out: list[Score] = []
        if m < 3:
            reason = f"fewer than 3 documents in R ({m}); RAGDefender keeps all"
            info.update(n_adv=0, reason=reason)
            scores: list[float | None] = [None] * m
            removed: set[int] = set()
            ev_rows: list[dict[str, Any]] = [{} for _ in range(m)]
        else:
            n_adv, removed_list, ev_rows, scores = self.run_package(ranking.query, texts, resources)
            removed = set(removed_list)
            reason = f"N_adv = {n_adv} of |R| = {m} ({self.task_type})"
            info.update(n_adv=n_adv, removed_indices=removed_list, reason=reason)
        for i, d in enumerate(docs):
            if i >= m:
                out.append(Score(d.id, None, "not_examined", "ragdefender", note=f"outside R (the examined top {m})"))
                continue
            gone = i in removed
            why = (f"{reason}; among the {len(removed)} highest pair-frequency passages: removed" if gone
                   else f"{reason}; kept")
            out.append(Score(d.id, scores[i], "scored" if scores[i] is not None else "skipped", "ragdefender",
                             ev_rows[i], flag=gone, note=why))
        return Scores(out, info, layers_run=["ragdefender"],
                      latency_ms={"ragdefender": (time.perf_counter() - t0) * 1000})

    def run_package(self, query: str, texts: list[str], resources: "Resources"
                    ) -> tuple[int, list[int], list[dict[str, Any]], list[float | None]]:
        """(N_adv, removed indices, per-document evidence, scores) from the package's stages — the same
        calls and order as ``ragdefender.RAGDefender.defend`` (embeddings encoded once, shared)."""
        from ragdefender import ClusteringBasedGrouping, ConcentrationBasedGrouping, IdentifyAdversarial
        from ragdefender.similarity import n_pairs_for

        embedder = JudgeEmbedder(resources)
        emb = embedder.encode(texts, convert_to_tensor=True)
        if self.task_type == "single_hop":
            n_adv = int(ClusteringBasedGrouping(embedder, m=self.m).estimate_n_adv(texts, embeddings=emb))
        else:
            n_adv = int(ConcentrationBasedGrouping(embedder).estimate_n_adv(texts, embeddings=emb))
        removed = sorted(IdentifyAdversarial(embedder, p=self.p).select(texts, n_adv, embeddings=emb)) if n_adv > 0 else []
        n = len(texts)
        f_adv = pair_frequency(emb, n_pairs_for(n_adv), self.p) if n_adv > 0 else [0.0] * n
        f_half = pair_frequency(emb, max(1, math.comb(math.ceil(n / 2), 2)), self.p)
        judge_space = getattr(resources.judge, "model_id", "judge")
        ev = [{"pair_frequency": float(f_adv[i]), "pair_frequency_half": float(f_half[i]), "n_adv": n_adv,
               "removed_by_package": i in removed, "task_type": self.task_type, "judge_space": judge_space}
              for i in range(n)]
        return n_adv, removed, ev, [float(x) for x in f_half]
