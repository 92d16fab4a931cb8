"""Perplexity filter (the PoisonedRAG PPL defense): remove passages whose LM perplexity is high.

Score = perplexity = exp(mean per-token NLL) of the passage under the causal LM
(``resources.lm_trace``, cached per document; SmolLM2-135M by default). Removed iff
score ≥ ``threshold``. There is no universal threshold: it is learned on clean data only, either
with :meth:`Defense.calibrate` on clean rankings or :meth:`Perplexity.fit_clean` on clean corpus
passages, at a clean-removal budget (5% by default, docs/algorithms.md §9.2). Never calibrate on attack
data.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from sieve.constants import CLEAN, CLEAN_BUDGET, K_CTX, LM_TRACE_TOKENS
from sieve.defenses.base import Defense, NotCalibratedError
from sieve.registry import DEFENSES
from sieve.types import Document, RankedDocument, Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources


@DEFENSES.register
class Perplexity(Defense):
    """Perplexity filter. Parameters:

    * ``threshold`` (None): perplexity at or above which a passage is removed. None means "learn it":
      call :meth:`calibrate` (clean rankings) or :meth:`fit_clean` (clean passages) first; the
      evaluation runner does this automatically on the clean condition.
    * ``max_tokens`` (:data:`sieve.constants.LM_TRACE_TOKENS`): tokens of each passage scored (part
      of the per-document NLL cache key).
    """

    name = "perplexity"
    summary = "Perplexity filter: remove passages whose LM perplexity is above a clean-calibrated threshold."
    paper = "PoisonedRAG perplexity filter (docs/algorithms.md §8.4; calibration §9.2)"
    needs = ("causal_lm",)
    threshold_param = "threshold"
    requires_calibration = True

    # parameters (set by __init__ through Params; declared for type checkers)
    threshold: float | None
    max_tokens: int

    def __init__(self, threshold: float | None = None, max_tokens: int = LM_TRACE_TOKENS) -> None:
        super().__init__(threshold=threshold, max_tokens=max_tokens)

    def score_text(self, text: str, resources: "Resources") -> float | None:
        """exp(mean token NLL); None when the passage has fewer than 2 tokens."""
        return self.score_texts([text], resources)[0]

    def score_texts(self, texts: Sequence[str], resources: "Resources") -> list[float | None]:
        """:meth:`score_text` of many passages; uncached traces are computed in length-sorted
        batches (``Resources.lm_traces``)."""
        out: list[float | None] = []
        for trace in resources.lm_traces(list(texts), self.max_tokens):
            tr = np.asarray(trace, dtype=np.float64)
            out.append(None if tr.size == 0 else float(math.exp(min(float(tr.mean()), 700.0))))
        return out

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        lm_id = resources.causal_lm_id()   # no weights loaded when every trace is cached
        out = []
        for d, ppl in zip(ranking.documents, self.score_texts([d.text for d in ranking.documents], resources)):
            if ppl is None:
                out.append(Score(d.id, None, "unavailable", "perplexity", {"lm": lm_id},
                                 note="too short to score (fewer than 2 tokens); kept"))
            else:
                out.append(Score(d.id, ppl, "scored", "perplexity",
                                 {"perplexity": ppl, "mean_nll": math.log(ppl), "lm": lm_id}))
        return Scores(out)

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        if threshold is None:
            return f"perplexity {s.value:.1f}; no threshold set (calibrate on clean passages); kept"
        return f"perplexity {s.value:.1f} {'≥' if removed else '<'} {threshold:.1f}; " + ("removed" if removed else "kept")

    def fit_clean(self, documents: Sequence[Document], resources: "Resources", budget: float = CLEAN_BUDGET) -> "Perplexity":
        """Learn ``threshold`` on clean corpus passages (same budget rule as :meth:`calibrate`)."""
        ranking = Ranking("", [RankedDocument(d.id, d.text, i + 1, 0.0, d.poison) for i, d in enumerate(documents)],
                          condition=CLEAN)
        self.calibrate([ranking], resources, budget)
        return self


__all__ = ["NotCalibratedError", "Perplexity"]
