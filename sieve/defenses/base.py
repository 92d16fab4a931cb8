"""The defense protocol (one small class per method), the context rule and re-deciding.

A defense is constructed with its parameters only (scikit-learn style: ``__init__`` stores,
learned attributes end in ``_``), then used on a :class:`~sieve.types.Ranking`:

    inspection = defense.inspect(ranking, resources, k_ctx=5)   # decisions, info, warnings, answer
    result = defense.apply(ranking, resources, k_ctx=5)         # + the generation context

Every defense implements :meth:`Defense.inspect`; :meth:`Defense.apply` is implemented here only:
it builds the context with :func:`finalize_context` (docs/algorithms.md §5: refill from the saved
ranking without rescoring; docs/design.md: everything filtered → unfiltered list + warning + flag).
A defense that needs another context size says so in ``Inspection.info["context_k"]`` (``None`` =
all survivors, TRIS ``context_mode="all_survivors"``).

:meth:`Defense.redecide` re-decides stored decisions at new thresholds without any model, so the
Trade-offs page never re-implements a removal rule.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from sieve.constants import CLEAN_BUDGET, K_CTX
from sieve.defenses.budget import removal_threshold
from sieve.params import Params
from sieve.types import Decision, DefenseResult, Inspection, RankedDocument, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources

log = logging.getLogger("sieve.defenses")

#: Statuses whose decision is never re-decided (the detector produced no usable verdict).
NOT_REDECIDABLE = frozenset(["skipped", "not_examined", "unavailable", "error", "abstained"])
#: ``Inspection.info`` key overriding the context size used by :meth:`Defense.apply`.
CONTEXT_K = "context_k"


class Defense(Params):
    """Base class of every query-time defense.

    Class metadata (read by the registry, ``sieve list``, the runner and the dashboard):
    ``name`` – registered name; ``summary`` – one line; ``paper`` – source and section;
    ``needs`` – resource roles used (:data:`sieve.registry.RESOURCE_ROLES`: ``"retriever"``,
    ``"judge"``, ``"causal_lm"``, ``"token_encoder"``, ``"llm"``); ``presets`` – extra registered
    names with fixed parameters; ``answers`` – True if :meth:`inspect` produces its own answer.
    """

    #: True for corpus-time detectors (RSG) that must be ``fit`` on each corpus snapshot.
    corpus_time: ClassVar[bool] = False
    #: Name of the parameter that ``calibrate`` sets (None: nothing to calibrate).
    threshold_param: ClassVar[str | None] = None
    #: True for defenses that answer the query themselves (``Inspection.answer``).
    answers: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "apply" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: override inspect(), not apply(); the context is built only in "
                            "sieve.defenses.base (return Inspection.info['context_k'] for another context size)")

    # -- fitting ------------------------------------------------------------------------------
    def fit(self, snapshot: Any, resources: "Resources") -> "Defense":
        """Corpus-time fitting on the snapshot being defended (clean corpus + the condition's
        injected documents). ``snapshot`` has ``ids``, ``documents`` and ``vectors`` (a
        :class:`sieve.index.VectorIndex`). Query-time defenses ignore it."""
        return self

    def calibration_scores(self, clean_rankings: list[Ranking], resources: "Resources",
                           k_ctx: int | None = K_CTX) -> list[float]:
        """The scores ``calibrate`` learns the threshold on: every non-``None`` decision score of
        :meth:`inspect` over ``clean_rankings``. Overridden when the threshold applies to another
        scale (``rsg_rsq``: the raw RSQ layer)."""
        scores: list[float] = []
        for r in clean_rankings:
            for d in self.inspect(r, resources, k_ctx).decisions:
                if d.score is not None:
                    scores.append(float(d.score))
        return scores

    def calibrate(self, clean_rankings: list[Ranking], resources: "Resources",
                  clean_budget: float = CLEAN_BUDGET, k_ctx: int | None = K_CTX) -> "Defense":
        """Learn ``threshold_param`` on clean rankings only so that at most ``clean_budget`` of the
        clean documents it scores would be removed (strict ">" rule of docs/algorithms.md §9.2).
        Sets ``threshold_`` and the parameter. Never calibrate on the data you report."""
        if self.threshold_param is None:
            return self
        scores = self.calibration_scores(clean_rankings, resources, k_ctx)
        if not scores:
            raise ValueError(f"{self.label}: no clean scores to calibrate on")
        # Defenses remove at score >= threshold; the next float above the §9.2 threshold makes
        # that equal to the strict "score > threshold" rule of detection at a clean budget.
        self.threshold_ = removal_threshold(scores, clean_budget)
        self.set_params(**{self.threshold_param: self.threshold_})
        return self

    # -- protocol -----------------------------------------------------------------------------
    def inspect(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Inspection:
        """One decision per document of ``ranking`` (same order; never invents documents), plus
        info, warnings, layers run, latencies and (``answers = True``) the defense's answer.
        ``k_ctx`` is the generation context size (``None`` = all survivors) for defenses whose work
        depends on it (TRIS L3 scope, TrustRAG consolidation); others ignore it."""
        raise NotImplementedError

    def apply(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> DefenseResult:
        """:meth:`inspect`, then the context via :func:`finalize_context`. Not overridden by subclasses."""
        t0 = time.perf_counter()
        ins = self.inspect(ranking, resources, k_ctx)
        elapsed = (time.perf_counter() - t0) * 1000.0
        k = ins.info[CONTEXT_K] if CONTEXT_K in ins.info else k_ctx
        result = finalize_context(self.label, ranking, ins.decisions, k,
                                  layers_run=ins.layers_run or [self.label], latency_ms=ins.latency_ms,
                                  info=ins.info)
        result.warnings = list(ins.warnings) + result.warnings
        result.answer = ins.answer
        result.latency_ms["total"] = elapsed
        return result

    # -- re-deciding at new thresholds -------------------------------------------------------
    def current_thresholds(self) -> dict[str, float | None]:
        """The current value of every knob of :meth:`threshold_knobs` (``None`` = not calibrated)."""
        if self.threshold_param is None:
            return {}
        return {"threshold": getattr(self, self.threshold_param, None)}

    def threshold_knobs(self) -> list[str]:
        """The keys worth offering for :meth:`redecide` (e.g. as Trade-offs sliders): ``"threshold"``
        (the defense-wide threshold) and/or layer names (``Decision.layer``); empty when no
        decision can be re-decided without a rerun."""
        return list(self.current_thresholds())

    def redecide(self, decisions: list[Decision], thresholds: Mapping[str, float]) -> list[Decision]:
        """New decisions (copies) re-decided at ``thresholds`` from the stored decisions alone (score,
        status, layer, evidence; no model runs).

        Keys are layer names (``Decision.layer``) or ``"threshold"`` (every layer without its own
        key); keys that match no decision are ignored. Default rule: a decision with a score whose
        status is not in :data:`NOT_REDECIDABLE` is removed iff ``score ≥`` its threshold, and its
        ``threshold`` field is updated; other decisions are unchanged.
        Contract: ``redecide(inspection.decisions, current_thresholds())`` gives inspect's
        ``removed`` flags."""
        return [redecide_by_score(d, thresholds) for d in decisions]


def redecide_by_score(d: Decision, thresholds: Mapping[str, float]) -> Decision:
    """The default re-decision of one decision (see :meth:`Defense.redecide`); returns a copy."""
    nd = copy_decision(d)
    thr = thresholds.get(d.layer) if d.layer in thresholds else thresholds.get("threshold")
    if thr is not None and d.score is not None and d.status not in NOT_REDECIDABLE:
        nd.removed = bool(float(d.score) >= float(thr))
        nd.threshold = float(thr)
    return nd


def copy_decision(d: Decision) -> Decision:
    """A copy of ``d`` whose evidence dict can be changed without touching ``d``."""
    return dataclasses.replace(d, evidence=dict(d.evidence))


def context_of(ranking: Ranking, decisions: list[Decision], k_ctx: int | None = K_CTX
               ) -> tuple[list[RankedDocument], bool]:
    """(context, fallback_used): the first ``k_ctx`` documents of ``ranking`` that were not removed,
    in original rank order (``k_ctx=None``: all of them); if nothing survives, the unfiltered list."""
    removed = {d.doc_id for d in decisions if d.removed}
    survivors: list[RankedDocument] = [d for d in ranking.documents if d.id not in removed]
    fallback = not survivors and bool(ranking.documents)
    if fallback:
        survivors = list(ranking.documents)
    return (survivors if k_ctx is None else survivors[:k_ctx]), fallback


def finalize_context(
    defense: str,
    ranking: Ranking,
    decisions: list[Decision],
    k_ctx: int | None = K_CTX,
    *,
    layers_run: list[str] | None = None,
    latency_ms: dict[str, float] | None = None,
    info: dict[str, Any] | None = None,
) -> DefenseResult:
    """Build the generation context from decisions.

    Context = the first ``k_ctx`` documents of the ranking that were not removed, in original rank
    order (refill from ranks k_ctx+1.. without rescoring, RAGSieve §5). ``k_ctx=None`` passes all
    survivors (TRIS's variable-length context). If nothing survives, fall back to the unfiltered
    list, set ``fallback_used`` and log a warning (docs/design.md; TRIS §2.5).
    """
    if len(decisions) != len(ranking.documents):
        raise ValueError(
            f"{defense}: {len(decisions)} decisions for {len(ranking.documents)} documents"
        )
    context, fallback = context_of(ranking, decisions, k_ctx)
    warnings: list[str] = []
    if fallback:
        msg = (f"{defense}: every document was filtered for query {ranking.query_id or ranking.query!r}; "
               "falling back to the unfiltered ranking")
        log.warning(msg)
        warnings.append(msg)
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
