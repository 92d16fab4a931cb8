"""The defense protocol: score, then decide (docs/architecture.md §Defenses, docs/algorithms.md §5).

A defense is constructed with its parameters only (scikit-learn style: ``__init__`` stores,
learned attributes end in ``_``) and implements two methods:

    scores = defense.score(ranking, resources, k_ctx)     # per document: score + named evidence
    decisions = defense.decide(scores, thresholds)        # pure: no model, no state change

``score`` never looks at a threshold and never removes anything; ``decide`` turns scores into
removals at the thresholds it is given (:meth:`Defense.current_thresholds` by default) and writes the
reasons. Everything else is built from these two, here and only here:

* :meth:`Defense.inspect` = ``decide(score(r), current_thresholds())`` — for *adaptive* methods,
  whose later scoring depends on earlier decisions (TRIS L3 on L2's survivors, fusion's rescored
  refill, a serial stage on the previous stage's survivors), :meth:`Defense.refine` scores more
  and ``decide`` runs again, until ``refine`` returns ``None``. Either way
  ``decide(inspection.scores, current_thresholds())`` equals ``inspection.decisions``.
* :meth:`Defense.redecide` = ``decide(scores rebuilt from stored decisions, thresholds)``: the
  Trade-offs page and the service re-decide without any model, by the same rule.
* :meth:`Defense.calibrate` scores clean rankings (the calibrated knob removing nothing meanwhile)
  and learns the knob with the one budget rule (:mod:`sieve.defenses.budget`, docs/algorithms.md
  §9.2); :meth:`Defense.learn_thresholds` is the hook for methods that learn more (fusion's nulls).
* :meth:`Defense.apply` = ``inspect`` + the generation context (:func:`finalize_context`: refill
  from the saved ranking without rescoring; everything filtered → unfiltered list + warning).

Subclasses may not define ``inspect``, ``apply``, ``run``, ``redecide`` or ``calibrate``
(checked at class creation and by tests/test_architecture.py).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

from sieve.constants import CLEAN, CLEAN_BUDGET, K_CTX
from sieve.defenses.budget import removal_threshold
from sieve.params import Params
from sieve.types import Decision, DefenseResult, Inspection, RankedDocument, Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources

log = logging.getLogger("sieve.defenses")

#: Statuses whose decision is never re-decided (the detector produced no usable verdict).
NOT_REDECIDABLE = frozenset(["skipped", "not_examined", "unavailable", "error", "abstained"])
#: ``Inspection.info`` key recording the context size :meth:`Defense.apply` used (``None`` = all survivors).
CONTEXT_K = "context_k"
#: Methods built here only; a subclass defining one is refused at class creation.
PROTOCOL_METHODS = ("inspect", "apply", "run", "redecide", "calibrate")
#: Upper bound on refine rounds (a refine that never ends is a bug, not a long query).
MAX_REFINES = 1000


class NotCalibratedError(ValueError):
    """A defense whose threshold must be learned was used before calibration."""


class Defense(Params):
    """Base class of every query-time defense (module docstring: score, then decide).

    Class metadata (read by the registry, ``sieve list``, the runner and the dashboard):
    ``name`` – registered name; ``summary`` – one line; ``paper`` – source and section;
    ``needs`` – resource roles used (:data:`sieve.registry.RESOURCE_ROLES`); ``presets`` – extra
    registered names with fixed parameters; and the typed attributes below.
    """

    #: True for corpus-time detectors (RSG) that must be ``fit`` on each corpus snapshot.
    corpus_time: ClassVar[bool] = False
    #: Name of the parameter that ``calibrate`` sets (None: nothing to calibrate).
    threshold_param: ClassVar[str | None] = None
    #: The key of :meth:`current_thresholds` that ``threshold_param`` feeds.
    calibrated_knob: ClassVar[str] = "threshold"
    #: True when ``inspect`` must refuse to run before calibration (no safe default threshold).
    requires_calibration: ClassVar[bool] = False
    #: True for defenses that answer the query themselves (``Inspection.answer``).
    answers: ClassVar[bool] = False
    #: True when :meth:`refine` may score more after a decision (TRIS L3, fusion's refill, serial).
    adaptive: ClassVar[bool] = False
    #: Retrieved documents per query the defense needs to decide at all (None: no minimum).
    min_documents: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = [m for m in PROTOCOL_METHODS if m in cls.__dict__]
        if own:
            raise TypeError(f"{cls.__name__}: defines {', '.join(own)}; implement score() and decide() (and refine() "
                            "for adaptive methods) — the protocol methods are built only in sieve.defenses.base")

    # -- the two methods every defense implements -------------------------------------------------
    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        """One :class:`~sieve.types.Score` per document of ``ranking`` (same order; never invents
        documents): the detector's value (higher = more suspicious) and named evidence. No threshold,
        no removal. ``k_ctx`` is the generation context size for methods whose scope depends on it."""
        raise NotImplementedError

    def decide(self, scores: Scores, thresholds: Mapping[str, float | None]) -> list[Decision]:
        """Pure: decisions at ``thresholds`` (keys are layer names or ``"threshold"``, the key of every
        layer without its own). Default rule per document: a score whose status is re-decidable is
        removed iff ``value ≥`` its knob's threshold; without a knob (or with an unset one) the
        method's own verdict (``Score.flag``) stands; otherwise the document is kept."""
        return [self.decide_one(s, thresholds) for s in scores.items]

    def refine(self, ranking: Ranking, resources: "Resources", k_ctx: int | None, scores: Scores,
               decisions: list[Decision], thresholds: Mapping[str, float | None]) -> Scores | None:
        """Adaptive methods only: the scores extended by what the decisions so far (taken at
        ``thresholds``) call for — the next refill round, the next layer's verdicts; ``None`` when
        nothing more is to be scored. Never decides: :meth:`decide` runs on what it returns."""
        return None

    def summarize(self, scores: Scores, decisions: list[Decision]) -> dict[str, Any]:
        """What the inspection's ``info`` says about the decisions (removal counts, flagged per round);
        merged over ``scores.info``. Pure, like :meth:`decide`."""
        return {}

    # -- the rule and its words (overridable pieces of decide) ------------------------------------
    def knob_of(self, s: Score, thresholds: Mapping[str, Any]) -> str | None:
        """The key of ``thresholds`` that decides ``s``: its layer, else ``"threshold"``, else none."""
        if s.layer and s.layer in thresholds:
            return s.layer
        return "threshold" if "threshold" in thresholds else None

    def decide_one(self, s: Score, thresholds: Mapping[str, float | None]) -> Decision:
        """The default rule of :meth:`decide` for one document."""
        knob = self.knob_of(s, thresholds)
        thr = thresholds.get(knob) if knob is not None else None
        if s.status in NOT_REDECIDABLE:
            return Decision(s.doc_id, bool(s.flag), s.status, s.value, s.threshold if thr is None else float(thr),
                            s.evidence, s.note, s.layer)
        if thr is not None and s.value is not None:
            removed = bool(float(s.value) >= float(thr))
            return Decision(s.doc_id, removed, s.status, s.value, float(thr), s.evidence,
                            self.explain(s, removed, float(thr)), s.layer)
        if s.flag is not None:
            return Decision(s.doc_id, bool(s.flag), s.status, s.value, s.threshold, s.evidence, s.note, s.layer)
        return Decision(s.doc_id, False, s.status, s.value, None, s.evidence, self.explain(s, False, None), s.layer)

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        """The reason of a threshold decision (``threshold`` None: no threshold set yet)."""
        if threshold is None:
            return (f"score {s.value:.3g}; no threshold set (calibrate on clean rankings); kept"
                    if s.value is not None else s.note)
        return f"score {s.value:.3g} {'≥' if removed else '<'} {threshold:.3g}; {'removed' if removed else 'kept'}"

    # -- thresholds --------------------------------------------------------------------------------
    def current_thresholds(self) -> dict[str, float | None]:
        """The current value of every threshold knob (``None`` = not calibrated)."""
        if self.threshold_param is None:
            return {}
        return {self.calibrated_knob: getattr(self, self.threshold_param, None)}

    def threshold_knobs(self) -> list[str]:
        """The keys worth offering for :meth:`redecide` (e.g. as Trade-offs sliders)."""
        return list(self.current_thresholds())

    def is_calibrated(self) -> bool:
        """False while ``threshold_param`` (or other learned state) is unset."""
        p = self.threshold_param
        return p is None or getattr(self, p, None) is not None

    def context_size(self, k_ctx: int | None) -> int | None:
        """The generation context size :meth:`apply` builds (``None`` = every survivor)."""
        return k_ctx

    # -- built from score and decide (never overridden) --------------------------------------------
    def run(self, ranking: Ranking, resources: "Resources", k_ctx: int | None,
            thresholds: Mapping[str, float | None]) -> Inspection:
        """Score, decide at ``thresholds`` and, for adaptive methods, refine until nothing more is to
        be scored. The inspection carries the final scores: ``decide(ins.scores, thresholds)`` equals
        ``ins.decisions``."""
        t0 = time.perf_counter()
        scores = self.score(ranking, resources, k_ctx)
        decisions = self.decide(scores, thresholds)
        if self.adaptive:
            for _ in range(MAX_REFINES):
                more = self.refine(ranking, resources, k_ctx, scores, decisions, thresholds)
                if more is None:
                    break
                scores = more
                decisions = self.decide(scores, thresholds)
            else:  # pragma: no cover - a refine that never ends
                raise RuntimeError(f"{self.label}: refine did not finish after {MAX_REFINES} rounds")
        if len(decisions) != len(ranking.documents):
            raise ValueError(f"{self.label}: {len(decisions)} decisions for {len(ranking.documents)} documents")
        latency = {**scores.latency_ms, "total": (time.perf_counter() - t0) * 1000.0}
        info = {**scores.info, **self.summarize(scores, decisions)}
        size = self.context_size(k_ctx)
        if size != k_ctx:
            info[CONTEXT_K] = size
        return Inspection(decisions, info, list(scores.warnings), list(scores.layers_run), latency,
                          scores.answer, scores=scores)

    def inspect(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Inspection:
        """:meth:`run` at :meth:`current_thresholds`: one decision per document of ``ranking`` (same
        order), plus info, warnings, layers run, latencies, the defense's answer and the scores."""
        if self.requires_calibration and not self.is_calibrated():
            raise NotCalibratedError(
                f"{self.label}: not calibrated; pass {self.threshold_param}=..., or learn it on clean data with "
                "calibrate(clean_rankings, resources) (prepare_defense does)")
        return self.run(ranking, resources, k_ctx, self.current_thresholds())

    def apply(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> DefenseResult:
        """:meth:`inspect`, then the context via :func:`finalize_context`."""
        t0 = time.perf_counter()
        ins = self.inspect(ranking, resources, k_ctx)
        elapsed = (time.perf_counter() - t0) * 1000.0
        result = finalize_context(self.label, ranking, ins.decisions, self.context_size(k_ctx),
                                  layers_run=ins.layers_run or [self.label], latency_ms=ins.latency_ms,
                                  info=ins.info)
        result.warnings = list(ins.warnings) + result.warnings
        result.answer = ins.answer
        result.latency_ms["total"] = elapsed
        return result

    def redecide(self, decisions: list[Decision], thresholds: Mapping[str, float | None]) -> list[Decision]:
        """New decisions (copies) at ``thresholds`` from stored decisions alone, by :meth:`decide`:
        ``decide(scores_from(decisions), current_thresholds() updated by thresholds)``. Keys are knobs,
        layer names (``Decision.layer``) or ``"threshold"`` (every layer without its own key); keys
        that match nothing are ignored. ``redecide(ins.decisions, current_thresholds())`` equals
        ``ins.decisions``."""
        merged = self.current_thresholds()
        merged.update({k: v for k, v in thresholds.items() if v is not None})
        return self.decide(self.scores_from(decisions), merged)

    def scores_from(self, decisions: Sequence[Decision]) -> Scores:
        """The scores stored decisions were decided from (the stored verdict kept as ``flag``, for
        layers no knob decides)."""
        return Scores([Score(d.doc_id, d.score, d.status, d.layer, dict(d.evidence), bool(d.removed),
                             d.threshold, d.reason) for d in decisions])

    # -- corpus time and calibration ---------------------------------------------------------------
    def fit(self, snapshot: Any, resources: "Resources") -> "Defense":
        """Corpus-time fitting on the snapshot being defended (clean corpus + the condition's
        injected documents). ``snapshot`` has ``ids``, ``documents`` and ``vectors`` (a
        :class:`sieve.index.VectorIndex`). Query-time defenses ignore it."""
        return self

    def can_calibrate(self, resources: "Resources") -> bool:
        """False when the calibrated knob cannot be learned with these resources (TRIS L3 without a
        likelihood-capable LLM); calibration is then a no-op."""
        return self.threshold_param is not None

    def calibrate(self, clean_rankings: list[Ranking], resources: "Resources",
                  clean_budget: float = CLEAN_BUDGET, k_ctx: int | None = K_CTX) -> "Defense":
        """Learn ``threshold_param`` on clean rankings only so that at most ``clean_budget`` of the
        clean documents it scores would be removed (strict ">" rule of docs/algorithms.md §9.2).
        Rankings that are not clean are refused. Sets ``threshold_`` and the parameter."""
        refuse_unclean(self.label, clean_rankings)
        if self.threshold_param is None or not self.can_calibrate(resources):
            return self
        learned = self.learn_thresholds(list(clean_rankings), resources, clean_budget, k_ctx)
        if learned:
            self.set_params(**learned)
            self.threshold_ = getattr(self, self.threshold_param, None)
        return self

    def calibration_scores(self, clean_rankings: list[Ranking], resources: "Resources",
                           k_ctx: int | None = K_CTX) -> list[float]:
        """The values the calibrated knob is learned on: the scores that knob decides, over the clean
        rankings, run with that knob removing nothing meanwhile."""
        thresholds = {**self.current_thresholds(), self.calibrated_knob: math.inf}
        values: list[float] = []
        for r in clean_rankings:
            scores = self.run(r, resources, k_ctx, thresholds).scores
            assert scores is not None
            for s in scores.items:
                if (s.value is not None and s.status in ("scored", "ran")
                        and self.knob_of(s, thresholds) == self.calibrated_knob):
                    values.append(float(s.value))
        return values

    def learn_thresholds(self, clean_rankings: list[Ranking], resources: "Resources", clean_budget: float,
                         k_ctx: int | None) -> dict[str, Any]:
        """The parameters calibration sets: by default the budget rule on :meth:`calibration_scores`
        (defenses remove at score ≥ threshold; the next float above the §9.2 threshold makes that the
        strict "score > threshold" rule of detection at a clean budget)."""
        assert self.threshold_param is not None
        values = self.calibration_scores(clean_rankings, resources, k_ctx)
        if not values:
            raise ValueError(f"{self.label}: no clean scores to calibrate on")
        return {self.threshold_param: removal_threshold(values, clean_budget)}


def refuse_unclean(label: str, rankings: Sequence[Ranking]) -> None:
    """Calibration reads clean rankings only: a ranking of another condition or holding a
    poison-labelled document is refused, naming it."""
    for r in rankings:
        if r.condition != CLEAN or any(d.poison for d in r.documents):
            raise ValueError(f"{label}: calibration reads clean rankings only; query {r.query_id or r.query!r} "
                             f"(condition {r.condition!r}) holds attack documents")


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


def unscored(ranking: Ranking, status: str = "skipped", reason: str = "", layer: str = "") -> list[Score]:
    """Scores that keep every document (e.g. a layer that did not run), with ``reason`` as the note."""
    return [Score(d.id, None, status, layer, {}, None, None, reason) for d in ranking.documents]
