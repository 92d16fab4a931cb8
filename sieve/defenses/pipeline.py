"""Serial composition of defenses: ``A+B`` = A on the ranking, then B on A's survivors
(docs/algorithms.md §5, RAGSieve's serial deployment; ``rsg_rsq`` is its registered preset).

Each stage scores and decides by its own rule; B sees a ranking of A's survivors with ranks
renumbered 1.. (:meth:`Ranking.without`) and scores it anew (RSQ decisions made on the
pre-quarantine ranking are never reused). Every stage runs with the real generation context size
``k_ctx``. The context is built by :meth:`sieve.defenses.base.Defense.apply` (refill from the saved
original ranking without rescoring).

:func:`build_defense` turns a spec such as ``"tris+perplexity"`` into a :class:`Serial`; the faces
call it through :func:`sieve.experiment.build_defense`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import numpy as np

from sieve.constants import CLEAN_BUDGET, K_CTX
from sieve.defenses.base import NOT_REDECIDABLE, Defense
from sieve.params import UnknownParameterError, unknown_parameter_message
from sieve.registry import DEFENSES
from sieve.types import Decision, Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources

#: Threshold of the combined (normalised) score: a document is removed iff score ≥ 1.0.
COMBINED_THRESHOLD = 1.0
_BELOW_ONE = float(np.nextafter(COMBINED_THRESHOLD, 0.0))
_FLOAT_MAX = float(np.finfo(float).max)
#: The keys a stage's entry in a serial decision's evidence adds to the stage's own evidence.
_META = ("status", "score", "threshold", "flagged", "reason", "layer", "seen")
#: Separators of nested parameter names: ``stage__param`` (scikit-learn's convention) and the
#: older ``stage.param`` (still accepted: calibration files and requests use it).
NESTED = "__"


def normalised_score(value: float, threshold: float, flagged: bool) -> float:
    """``value / threshold`` for a layer that removes iff ``value ≥ threshold``, so 1.0 is the layer's
    decision boundary, kept exactly consistent with the layer's own decision: a kept document is
    clamped to the largest float below 1.0 and a flagged one to at least 1.0 (float rounding at the
    boundary). Non-positive or non-finite thresholds use the shift 1 + value − threshold."""
    v, t = float(value), float(threshold)
    q = v / t if (t > 0 and math.isfinite(t)) else 1.0 + (v - t)
    if math.isnan(q):
        q = COMBINED_THRESHOLD if flagged else _BELOW_ONE
    q = min(max(q, -_FLOAT_MAX), _FLOAT_MAX)      # finite scores only (overflow of the ratio)
    if flagged:
        return max(q, COMBINED_THRESHOLD)
    return min(q, _BELOW_ONE)


@dataclass
class StageScores:
    """One stage's scores on the ranking it saw (document ids in that ranking's order)."""

    label: str
    ranking: Ranking | None
    scores: Scores
    #: Rank of each document in the ranking this stage saw (from ``ranking``, or stored decisions).
    ranks: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ranking is not None and not self.ranks:
            self.ranks = {d.id: d.rank for d in self.ranking.documents}


@dataclass
class SerialScores(Scores):
    """:class:`~sieve.types.Scores` of a serial composition: the stages' own scores, in order."""

    stages: list[StageScores] = field(default_factory=list)


def _split(key: str) -> tuple[str, str] | None:
    for sep in (NESTED, "."):
        if sep in key:
            a, b = key.split(sep, 1)
            return a, b
    return None


@DEFENSES.register
class Serial(Defense):
    """Stages applied in order, each on the survivors of the previous ones (docs/algorithms.md §5).

    ``stages``: registered names (or constructed defenses). Registered under ``rsg_rsq`` (its
    default stages: RSG's corpus quarantine, then RSQ on the re-ranked survivors, RAGSieve Table 3);
    ``a+b`` specs build others (:func:`build_defense`).

    Parameters are nested: ``"<stage>__<param>"`` (scikit-learn's pipeline convention; the older
    ``"<stage>.<param>"`` is accepted too); an unprefixed name goes to every stage that has it (so
    ``rsg_rsq`` takes ``eta_q`` and RSG's ``mode``). Threshold knobs are the stages' knobs, nested the
    same way. Calibration calibrates every stage that needs it, in order, each on the clean rankings
    it would see in the pipeline.

    **Decisions.** A document's decision is that of the stage that removed it, else of the last stage
    that scored it, else of the first stage. ``score`` is one scale across stages: the largest
    ``score / threshold`` over the stages that scored it (:func:`normalised_score`), with threshold
    1.0, so ``removed`` ⇔ a stage removed ⇔ ``score ≥ 1.0``. Each stage's own decision is kept in
    ``evidence[<stage>]`` (its evidence plus status, score, threshold, flagged, reason, layer);
    ``evidence["layer_scores"]`` holds the normalised values and ``evidence["survivor_rank"]`` the
    rank in the last stage's ranking. The answer is the last stage's, when that stage answers.
    """

    name = "rsg_rsq"
    summary = "RAGSieve serial deployment: RSG corpus quarantine, then RSQ on the re-ranked survivors."
    paper = "RAGSieve serial RSG → RSQ (docs/algorithms.md §5)"
    needs = ("retriever", "causal_lm", "token_encoder")
    corpus_time = True
    adaptive = True
    #: Registry flag: nested names (``stage__param``) are parameters too (Registry.create).
    nested_params: ClassVar[bool] = True

    stages: tuple[str, ...]

    def __init__(self, stages: Sequence[str | Defense] = ("rsg", "rsq")) -> None:
        built = [DEFENSES.create(s) if isinstance(s, str) else s for s in stages]
        if not built:
            raise ValueError("serial: give at least one defense")
        labels = [s.label for s in built]
        if len(set(labels)) != len(labels):
            raise ValueError(f"serial: each stage must appear once; got {'+'.join(labels)}")
        super().__init__(stages=tuple(labels))
        self.stages_: list[Defense] = built
        if tuple(labels) != ("rsg", "rsq"):
            self.registry_name = "+".join(labels)
            self.summary = " → ".join(labels)  # type: ignore[misc]
            self.paper = " → ".join(s.paper or s.label for s in built)  # type: ignore[misc]
        self.needs = tuple(dict.fromkeys(str(n) for s in built for n in s.needs))  # type: ignore[misc,assignment]
        self.corpus_time = any(s.corpus_time for s in built)  # type: ignore[misc]
        self.answers = built[-1].answers  # type: ignore[misc]
        self.min_documents = max((s.min_documents or 0 for s in built), default=0) or None  # type: ignore[misc]

    # -- parameters ------------------------------------------------------------------------------
    @property
    def threshold_param(self) -> str | None:  # type: ignore[override]
        """The nested name of the first stage threshold still to learn (else of the first stage with one)."""
        pending = [s for s in self.stages_ if s.threshold_param and not s.is_calibrated()]
        with_thr = pending or [s for s in self.stages_ if s.threshold_param]
        return f"{with_thr[0].label}{NESTED}{with_thr[0].threshold_param}" if with_thr else None

    def stage(self, label: str) -> Defense:
        for s in self.stages_:
            if s.label == label:
                return s
        raise ValueError(f"serial {self.label}: no stage {label!r}; stages: {', '.join(s.label for s in self.stages_)}")

    def __getattr__(self, name: str) -> Any:
        if "stages_" in self.__dict__ and (parts := _split(name)):
            try:
                return getattr(self.stage(parts[0]), parts[1])
            except ValueError:
                pass
        raise AttributeError(name)

    def get_params(self) -> dict[str, Any]:
        return {"stages": self.stages,
                **{f"{s.label}{NESTED}{k}": v for s in self.stages_ for k, v in s.get_params().items()}}

    def set_params(self, **params: Any) -> "Serial":
        valid = list(self.get_params())
        bad = [k for k in params if k != "stages" and not (
            (p := _split(k)) and f"{p[0]}{NESTED}{p[1]}" in valid
            or (not _split(k) and any(k in s.get_params() for s in self.stages_)))]
        if bad:
            raise UnknownParameterError(unknown_parameter_message(self.label, set(bad), valid))
        if "stages" in params and tuple(params["stages"]) != self.stages:
            self.__init__(params["stages"])  # type: ignore[misc]
        for key, value in params.items():
            if key == "stages":
                continue
            parts = _split(key)
            if parts:
                self.stage(parts[0]).set_params(**{parts[1]: value})
                continue
            for s in self.stages_:
                if key in s.get_params():
                    s.set_params(**{key: value})
        return self

    def is_calibrated(self) -> bool:
        return all(s.is_calibrated() for s in self.stages_)

    @property
    def requires_calibration(self) -> bool:  # type: ignore[override]
        """True while a stage that cannot run uncalibrated is not calibrated."""
        return any(s.requires_calibration and not s.is_calibrated() for s in self.stages_)

    def can_calibrate(self, resources: "Resources") -> bool:
        return any(s.threshold_param is not None for s in self.stages_)

    # -- fitting and calibration -----------------------------------------------------------------
    def fit(self, snapshot: Any, resources: "Resources") -> "Serial":
        for s in self.stages_:
            if s.corpus_time:
                s.fit(snapshot, resources)
        return self

    def learn_thresholds(self, clean_rankings: list[Ranking], resources: "Resources", clean_budget: float = CLEAN_BUDGET,
                         k_ctx: int | None = K_CTX) -> dict[str, Any]:
        """Every stage that needs it is calibrated on the clean rankings it sees in the pipeline."""
        current = list(clean_rankings)
        for s in self.stages_:
            if s.threshold_param and not s.is_calibrated():
                s.calibrate(current, resources, clean_budget, k_ctx)
            if s is not self.stages_[-1]:
                current = [r.without(set(s.inspect(r, resources, k_ctx).removed_ids)) for r in current]
        return {}

    # -- score, then decide ----------------------------------------------------------------------
    def _thresholds_of(self, stage: Defense, thresholds: Mapping[str, float | None]) -> dict[str, float | None]:
        """A stage's knobs: its current values, updated by plain keys and then by its nested keys."""
        out = stage.current_thresholds()
        out.update({k: v for k, v in thresholds.items() if not _split(k) and v is not None})
        for k, v in thresholds.items():
            parts = _split(k)
            if parts and parts[0] == stage.label and parts[1] in out:
                out[parts[1]] = v
        return out

    def current_thresholds(self) -> dict[str, float | None]:
        return {f"{s.label}{NESTED}{k}": v for s in self.stages_ for k, v in s.current_thresholds().items()}

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        first = self.stages_[0]
        t = time.perf_counter()
        s0 = first.score(ranking, resources, k_ctx)
        s0.latency_ms.setdefault("total", (time.perf_counter() - t) * 1000)
        return self._combined([StageScores(first.label, ranking, s0)])

    def refine(self, ranking: Ranking, resources: "Resources", k_ctx: int | None, scores: Scores,
               decisions: list[Decision], thresholds: Mapping[str, float | None]) -> Scores | None:
        """The current stage's own refine; once it is done, the next stage on its survivors."""
        assert isinstance(scores, SerialScores)
        last = scores.stages[-1]
        stage = self.stage(last.label)
        thr = self._thresholds_of(stage, thresholds)
        own = stage.decide(last.scores, thr)
        if stage.adaptive and last.ranking is not None:
            more = stage.refine(last.ranking, resources, k_ctx, last.scores, own, thr)
            if more is not None:
                return self._combined(scores.stages[:-1] + [StageScores(last.label, last.ranking, more)])
        j = self.stages_.index(stage)
        if j + 1 >= len(self.stages_) or last.ranking is None:
            return None
        survivors = last.ranking.without({d.doc_id for d in own if d.removed})
        nxt = self.stages_[j + 1]
        if not survivors.documents:
            return self._combined(scores.stages + [StageScores(nxt.label, None, Scores([]))])
        t = time.perf_counter()
        sn = nxt.score(survivors, resources, k_ctx)
        sn.latency_ms.setdefault("total", (time.perf_counter() - t) * 1000)
        return self._combined(scores.stages + [StageScores(nxt.label, survivors, sn)])

    def _combined(self, stages: list[StageScores]) -> SerialScores:
        info: dict[str, Any] = {"stages": [s.label for s in self.stages_]}
        seen: dict[str, dict[str, Any]] = {}
        for st in stages:   # one item per document: what each stage that saw it scored (no combined value:
            for x in st.scores.items:   # the common scale needs each stage's threshold, so decide makes it)
                seen.setdefault(x.doc_id, {})[st.label] = {"value": x.value, "status": x.status, "layer": x.layer}
        items = [Score(x.doc_id, None, x.status, "serial", seen.get(x.doc_id, {})) for x in stages[0].scores.items]
        out = SerialScores(items, info, stages=stages)
        for st in stages:
            if st.ranking is None:
                info.setdefault("skipped_stages", []).append(st.label)
                continue
            out.warnings += st.scores.warnings
            out.layers_run += [f"{st.label}:{x}" for x in (st.scores.layers_run or [st.label])]
            out.latency_ms.update({f"{st.label}:{k}": v for k, v in st.scores.latency_ms.items()})
            info[st.label] = dict(st.scores.info)
        last = stages[-1]
        if last.label == self.stages_[-1].label and self.stages_[-1].answers:
            out.answer = last.scores.answer
        return out

    def decide(self, scores: Scores, thresholds: Mapping[str, float | None]) -> list[Decision]:
        if not isinstance(scores, SerialScores):   # stored decisions without stage evidence: kept as they are
            return [Decision(x.doc_id, bool(x.flag), x.status, x.value, x.threshold, x.evidence, x.note, x.layer)
                    for x in scores.items]
        per_stage = [(st, self.stage(st.label).decide(st.scores, self._thresholds_of(self.stage(st.label), thresholds)))
                     for st in scores.stages]
        order = [s.doc_id for s in scores.stages[0].scores.items]
        seen: dict[str, list[tuple[str, Decision, int | None]]] = {i: [] for i in order}
        for st, decisions in per_stage:
            for d in decisions:
                seen[d.doc_id].append((st.label, d, st.ranks.get(d.doc_id)))
        return [self._merge(seen[i], scores.stages) for i in order]

    def _merge(self, views: list[tuple[str, Decision, int | None]], stages: list[StageScores]) -> Decision:
        evidence: dict[str, Any] = {}
        layer_scores: dict[str, float] = {}
        chosen: Decision | None = None
        remover: str | None = None
        for label, d, _ in views:
            evidence[label] = {**d.evidence, "status": d.status, "score": d.score, "threshold": d.threshold,
                               "flagged": bool(d.removed), "reason": d.reason, "layer": d.layer}
            if d.score is not None and d.threshold is not None and d.status not in NOT_REDECIDABLE:
                layer_scores[d.layer or label] = normalised_score(d.score, d.threshold, d.removed)
            if d.removed and remover is None:
                chosen, remover = d, label
        if chosen is None:
            informative = [d for _, d, _ in views if d.status not in NOT_REDECIDABLE]
            chosen = informative[-1] if informative else views[0][1]
        later = [st.label for st in stages if st.label not in evidence]
        for label in later:
            evidence[label] = {"status": "skipped", "seen": False,
                               "reason": f"removed by {remover} before {label} ran" if remover
                               else f"{label} did not run"}
        if len(views) > 1:
            evidence["survivor_rank"] = views[-1][2]
        evidence["layer_scores"] = layer_scores
        reason = "; ".join(f"{label}: {d.reason}" for label, d, _ in views if d.reason)
        if remover is not None and later:
            reason = f"removed by {remover} before {', '.join(later)} ran: " + reason
        score = max(layer_scores.values()) if layer_scores else None
        return Decision(chosen.doc_id, remover is not None, chosen.status, score, COMBINED_THRESHOLD,
                        evidence, reason, chosen.layer)

    def scores_from(self, decisions: Sequence[Decision]) -> Scores:
        """Each stage's scores rebuilt from ``evidence[<stage>]`` of the stored decisions (decisions
        stored without it — a compacted run — are re-decided as they were)."""
        if not any(isinstance(d.evidence.get(self.stages_[0].label), Mapping) for d in decisions):
            return super().scores_from(decisions)
        stages: list[StageScores] = []
        for s in self.stages_:
            items: list[Score] = []
            ranks: dict[str, int] = {}
            for d in decisions:
                ev = d.evidence.get(s.label)
                if not isinstance(ev, Mapping) or ev.get("seen") is False:
                    continue
                own = {k: v for k, v in ev.items() if k not in _META}
                items.append(Score(d.doc_id, ev.get("score"), ev.get("status", "scored"), ev.get("layer", ""), own,
                                   bool(ev.get("flagged")), ev.get("threshold"), ev.get("reason", "")))
                if d.evidence.get("survivor_rank") is not None:
                    ranks[d.doc_id] = d.evidence["survivor_rank"]   # the last stage that saw it: overwritten in order
            if items or not stages:
                stages.append(StageScores(s.label, None, Scores(items), ranks))
        return SerialScores([], stages=stages)

    def summarize(self, scores: Scores, decisions: list[Decision]) -> dict[str, Any]:
        assert isinstance(scores, SerialScores)
        out: dict[str, Any] = {}
        rebuilt = self.scores_from(decisions)
        assert isinstance(rebuilt, SerialScores)
        for st, mine in zip(scores.stages, rebuilt.stages):
            if st.ranking is None:
                continue
            own = [Decision(x.doc_id, bool(x.flag), x.status, x.value, x.threshold, x.evidence, x.note, x.layer)
                   for x in mine.scores.items]
            out[st.label] = {**st.scores.info, **self.stage(st.label).summarize(st.scores, own)}
        return out


def build_defense(spec: str, **params: Any) -> Defense:
    """``"name"`` → the registered defense; ``"a+b[+c]"`` → :class:`Serial` of registered defenses.

    For a serial spec, parameters are ``"<stage>__<param>"`` (or ``"<stage>.<param>"``, or an
    unprefixed name shared by stages), e.g. ``build_defense("tris+perplexity", perplexity__threshold=40.0)``.
    """
    names = [n.strip() for n in spec.split("+")]
    if not spec.strip() or any(not n for n in names):
        raise ValueError(f"bad defense spec {spec!r}: use a registered name or names joined by '+'")
    if len(names) == 1:
        return DEFENSES.create(names[0], **params)
    serial = Serial(names)
    if params:
        serial.set_params(**params)
    return serial
