"""The defense protocol (one small class per method) and the shared refill/fallback rule.

A defense is constructed with its parameters only (scikit-learn style: ``__init__`` stores,
learned attributes end in ``_``), then applied to a :class:`~sieve.types.Ranking`:

    result = defense.apply(ranking, resources, k_ctx=5)

``inspect`` returns one :class:`~sieve.types.Decision` per input document; ``apply`` adds the
final generation context via :func:`finalize_context` (ALGORITHMS.md §5: refill from the saved
ranking without rescoring; DESIGN.md: everything filtered → unfiltered list + warning + flag).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

from sieve.params import Params
from sieve.types import Decision, DefenseResult, RankedDocument, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources

log = logging.getLogger("sieve.defenses")


class Defense(Params):
    """Base class of every query-time defense.

    Class metadata (read by ``sieve list``, the runner and the dashboard):
    ``name`` – registered name; ``paper`` – source; ``needs`` – resources used
    (``"embedder"`` judge embeddings, ``"lm"`` causal LM, ``"token_encoder"``, ``"llm"``,
    ``"retriever"`` vectors).
    """

    #: True for corpus-time detectors (RSG) that must be ``fit`` on each corpus snapshot.
    corpus_time: ClassVar[bool] = False
    #: Name of the parameter that ``calibrate`` sets (None: nothing to calibrate).
    threshold_param: ClassVar[str | None] = None

    # -- fitting ------------------------------------------------------------------------------
    def fit(self, snapshot: Any, resources: "Resources") -> "Defense":
        """Corpus-time fitting on the snapshot being defended (clean corpus + the condition's
        injected documents). ``snapshot`` has ``ids``, ``documents`` and ``vectors`` (a
        :class:`sieve.index.VectorIndex`). Query-time defenses ignore it."""
        return self

    def calibrate(self, clean_rankings: list[Ranking], resources: "Resources",
                  clean_budget: float = 0.05) -> "Defense":
        """Learn ``threshold_param`` on clean rankings only so that at most ``clean_budget`` of the
        clean documents it scores would be removed (strict ">" rule of ALGORITHMS.md §9.2).
        Sets ``threshold_`` and the parameter. Never calibrate on the data you report."""
        if self.threshold_param is None:
            return self
        scores: list[float] = []
        for r in clean_rankings:
            for d in self.inspect(r, resources):
                if d.score is not None:
                    scores.append(float(d.score))
        if not scores:
            raise ValueError(f"{self.label}: no clean scores to calibrate on")
        from sieve.evaluation.metrics import threshold_at_clean_budget

        import numpy as np

        # Defenses remove at score >= threshold; the next float above the §9.2 threshold makes
        # that equal to the strict "score > threshold" rule of detection at a clean budget.
        self.threshold_ = float(np.nextafter(threshold_at_clean_budget(scores, clean_budget), np.inf))
        self.set_params(**{self.threshold_param: self.threshold_})
        return self

    # -- protocol -----------------------------------------------------------------------------
    def inspect(self, ranking: Ranking, resources: "Resources") -> list[Decision]:
        """One decision per document of ``ranking`` (same order). Must not invent documents."""
        raise NotImplementedError

    def apply(self, ranking: Ranking, resources: "Resources", k_ctx: int = 5) -> DefenseResult:
        t0 = time.perf_counter()
        decisions = self.inspect(ranking, resources)
        elapsed = (time.perf_counter() - t0) * 1000.0
        result = finalize_context(self.label, ranking, decisions, k_ctx)
        result.latency_ms.setdefault("total", elapsed)
        result.layers_run = result.layers_run or [self.label]
        return result


def finalize_context(
    defense: str,
    ranking: Ranking,
    decisions: list[Decision],
    k_ctx: int | None = 5,
    *,
    layers_run: list[str] | None = None,
    latency_ms: dict[str, float] | None = None,
    info: dict[str, Any] | None = None,
) -> DefenseResult:
    """Build the generation context from decisions.

    Context = the first ``k_ctx`` documents of the ranking that were not removed, in original rank
    order (refill from ranks k_ctx+1.. without rescoring, RAGSieve §5). ``k_ctx=None`` passes all
    survivors (TRIS's variable-length context). If nothing survives, fall back to the unfiltered
    list, set ``fallback_used`` and log a warning (DESIGN.md; TRIS §2.5).
    """
    if len(decisions) != len(ranking.documents):
        raise ValueError(
            f"{defense}: {len(decisions)} decisions for {len(ranking.documents)} documents"
        )
    removed = {d.doc_id for d in decisions if d.removed}
    survivors: list[RankedDocument] = [d for d in ranking.documents if d.id not in removed]
    warnings: list[str] = []
    fallback = False
    if not survivors and ranking.documents:
        fallback = True
        msg = (f"{defense}: every document was filtered for query {ranking.query_id or ranking.query!r}; "
               "falling back to the unfiltered ranking")
        log.warning(msg)
        warnings.append(msg)
        survivors = list(ranking.documents)
    context = survivors if k_ctx is None else survivors[:k_ctx]
    return DefenseResult(
        defense=defense,
        decisions=decisions,
        context=context,
        fallback_used=fallback,
        layers_run=list(layers_run or []),
        latency_ms=dict(latency_ms or {}),
        warnings=warnings,
        info=dict(info or {}),
    )


def keep_all(ranking: Ranking, status: str = "skipped", reason: str = "", layer: str = "") -> list[Decision]:
    """Decisions that keep every document (e.g. a layer that did not run)."""
    return [Decision(d.id, False, status, reason=reason, layer=layer) for d in ranking.documents]
