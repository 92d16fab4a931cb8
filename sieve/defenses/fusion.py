"""Fusion: one clean-calibrated score from the evidence of the other methods, with a rescored refill
(docs/algorithms.md §14.2; the defaults were chosen on the development suite by the held-out rule of
§9.4, measurements in docs/results/suite.md).

Evidence (each "higher = more suspicious", each read from the method that defines it:
:mod:`sieve.defenses.fusion_evidence`): TRIS L2, RSQ, RSG's density, perplexity, TrustRAG's ROUGE-L
near-copy signal and the context conflict (§14.5) by default; cohesion, mutual cohesion (§14.8),
RAGDefender, the answer corroboration and the query similarity opt-in (``evidence=``). Per-evidence p-values count tied clean
values half (mid-p).

Calibration reads clean rankings only: the evidence of every document of the clean contexts forms,
per evidence, an empirical null; a document's p-values (:mod:`sieve.defenses.pvalues`) are combined
(Cauchy by default: one very small p-value is enough, yet every evidence counts) and turned into an
empirical p-value against the clean documents; the score is −ln of it. The combination nulls are
cross-fitted by query folds, so calibration documents are scored as a new query's would be. The
budget rule (docs/algorithms.md §9.2) gives a per-document threshold, then the threshold is raised
by bisection until the whole procedure — first context and every refill round — removes at most
the budget of the clean documents it scores.

Rescored refill (``refine``): removed documents are replaced by the next survivors, which are
scored too (the context evidence is recomputed without the removed documents), until a round
removes nothing or ``max_rounds`` rounds are spent, every round at the same threshold by default.
With ``refill_factor`` > 1, rounds after the first remove at a threshold lowered by ln
``refill_factor`` (a query with a removal is suspect) — it removed the truth with the poisons, so it
is opt-in.
Documents that never entered a context are ``not_examined``. Each decision's evidence lists every
value with its p-value, and the reason names the evidence below p = 0.05.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from sieve.constants import CLEAN_BUDGET, K_CTX
from sieve.defenses.base import Defense
from sieve.defenses.budget import budget_index, removal_threshold
from sieve.defenses.conflict import RIVAL_WEIGHTS
from sieve.defenses.fusion_evidence import EVIDENCE as EVIDENCE_SOURCES
from sieve.defenses.fusion_evidence import EvidenceSources
from sieve.defenses.mutual_cohesion import NEIGHBOURS as MUTUAL_NEIGHBOURS
from sieve.defenses.pvalues import (
    COMBINE,
    TIES,
    cauchy_stat,
    combination_nulls,
    empirical_p,
    fisher_stat,
    minp_stat,
    query_folds,
)
from sieve.registry import DEFENSES
from sieve.types import Decision, Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources

EVIDENCE = tuple(EVIDENCE_SOURCES)
#: The evidence used unless ``evidence=`` says otherwise (docs/algorithms.md §14.2).
DEFAULT_EVIDENCE = ("l2", "rsq", "rsg", "perplexity", "rouge", "conflict")
#: Which documents the pairwise evidence (cohesion, rouge) compares a context document with: the
#: first ``cohesion_scope`` survivors, or those plus the documents removed in earlier refill rounds.
PAIRWISE_SCOPES = ("survivors", "seen")
#: Which neighbours RSG's density counts for a document first examined after a removal: every corpus
#: neighbour as audited (``corpus``), or not the documents removed from this query (``survivors``).
DENSITY_SCOPES = ("corpus", "survivors")
#: What the ROUGE-L near-copy evidence compares: the passages as written (``keep``, TrustRAG's), or the
#: passages without the question's content words (``drop``) — FAQ pages and search snippets repeat the
#: question, so sharing its words is no sign of one author (docs/algorithms.md §14.2).
ROUGE_QUERY = ("keep", "drop")
DENSITY_MUTUAL = 4   #: m of ``density_mutual``: five poisons of one question name one another (§14.2)
#: Evidence whose value 0 means "nothing seen", not "clean": it abstains from the combination there
#: (most clean passages score 0 on the answer evidence, and p = 1 would veto removal under Cauchy).
ABSTAINS_AT_ZERO = frozenset({"answer", "conflict"})
#: p-value at or below which an evidence is named in the reason.
REASON_P = 0.05


@dataclass
class FusionScores(Scores):
    """Fusion's scores with the state of its refill: rounds scored, the evidence of every document
    that entered a context (its last round), and the per-document evidence computed so far."""

    rounds: int = 0
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    static: dict[int, dict[str, float]] = field(default_factory=dict)


@DEFENSES.register
class Fusion(Defense):
    """Clean-calibrated fusion of per-document evidence with a rescored refill (docs/algorithms.md §14.2).

    Parameters: ``threshold`` (on the fused score; ``None`` = calibrate), ``evidence`` (a subset of
    :data:`EVIDENCE`; default :data:`DEFAULT_EVIDENCE`), ``combine`` (``cauchy`` | ``fisher`` |
    ``omnibus`` | ``minp``), ``calibration_folds`` (8), ``max_rounds`` (10), ``cohesion_scope`` (10),
    ``duplicate_jaccard`` (0.5, answer evidence), ``pairwise_scope`` (``"survivors"``; ``"seen"``:
    cohesion and ROUGE-L also compare with the documents removed in earlier rounds, so removing one of
    two near-copies does not launder the other — and a true passage on the poisons' topic keeps them as
    neighbours), ``refill_factor`` (1 = the same threshold in every round), ``ties`` (``"mid"`` |
    ``"conservative"``: how clean values tied with a document's count in its empirical p-values,
    :func:`~sieve.defenses.pvalues.empirical_p`), ``component_budget`` (0 = off;
    else each evidence also decides alone: a document whose value of one evidence is beyond the
    threshold removing this share of the clean calibration documents is removed whatever the
    combination says, so a component that separates a family by itself is never diluted by the others;
    the procedure threshold still keeps the whole within the clean budget), ``density_scope``
    (``"corpus"``; ``"survivors"``: a document first examined after a removal gets RSG's density
    without the removed documents as neighbours — a true passage beside its poisons is not dense
    by their company; a document already examined keeps its value, so a removal launders no twin),
    ``conflict_weight`` (the ``conflict`` evidence's ``rival_weight``, §14.5: ``"own"``, ``"answering"``
    or ``"min"``), ``mutual_neighbours`` (m of the ``mutual`` evidence, §14.8: how many nearest passages
    each passage of the window names; 3, as ``mutual_cohesion``), ``rouge_query`` (``"keep"``; ``"drop"``:
    ROUGE-L compares the passages without the question's content words, so two passages that both repeat
    the question are not near copies for that alone), ``density_mutual`` (4; 0 = the audited density; m > 0: RSG's density
    counts only the corpus neighbours that name the document among their own m nearest, so a true passage
    beside a group of poisons — which name one another — is not dense by their company; §14.2).
    Learned in calibration: ``null_`` (sorted clean values per evidence), ``fisher_null_``,
    ``minp_null_``, ``cauchy_null_``, ``component_thresholds_`` (per evidence, with ``component_budget``),
    ``clean_scores_``, ``document_threshold_``, ``calibration_removal_`` and ``threshold``.
    """

    name = "fusion"
    summary = ("Fusion of TRIS L2, RSQ, RSG density, perplexity, ROUGE-L near-copy and context-conflict evidence "
               "(cohesion, mutual cohesion, answer, RAGDefender, query similarity opt-in): clean-only mid-p values, Cauchy "
               "combination, budget threshold, rescored refill.")
    paper = "Sieve extension (docs/algorithms.md §14.2)"
    needs = ("retriever", "judge", "causal_lm", "token_encoder")
    corpus_time = True
    threshold_param = "threshold"
    requires_calibration = True
    adaptive = True

    # parameters (set by __init__ through Params; declared for type checkers)
    threshold: float | None
    evidence: Sequence[str]
    combine: str
    calibration_folds: int
    max_rounds: int
    cohesion_scope: int
    duplicate_jaccard: float
    pairwise_scope: str
    refill_factor: float
    ties: str
    component_budget: float
    density_scope: str
    conflict_weight: str
    mutual_neighbours: int
    rouge_query: str
    density_mutual: int

    def __init__(self, threshold: float | None = None, evidence: Sequence[str] = DEFAULT_EVIDENCE,
                 combine: str = "cauchy", calibration_folds: int = 8, max_rounds: int = 10,
                 cohesion_scope: int = 10, duplicate_jaccard: float = 0.5, pairwise_scope: str = "survivors",
                 refill_factor: float = 1.0, ties: str = "mid", component_budget: float = 0.0,
                 density_scope: str = "corpus", conflict_weight: str = "own",
                 mutual_neighbours: int = MUTUAL_NEIGHBOURS, rouge_query: str = "keep",
                 density_mutual: int = DENSITY_MUTUAL) -> None:
        ev = tuple(evidence.split(",") if isinstance(evidence, str) else evidence)
        bad = [e for e in ev if e not in EVIDENCE]
        if bad or not ev:
            raise ValueError(f"fusion: evidence must be a non-empty subset of {', '.join(EVIDENCE)}; got {list(ev)}")
        if int(max_rounds) < 1:
            raise ValueError("fusion: max_rounds must be >= 1")
        if combine not in COMBINE:
            raise ValueError(f"fusion: combine must be one of {', '.join(COMBINE)}; got {combine!r}")
        if int(calibration_folds) < 2:
            raise ValueError("fusion: calibration_folds must be >= 2")
        if pairwise_scope not in PAIRWISE_SCOPES:
            raise ValueError(f"fusion: pairwise_scope must be one of {', '.join(PAIRWISE_SCOPES)}; got {pairwise_scope!r}")
        if not float(refill_factor) >= 1.0:
            raise ValueError(f"fusion: refill_factor must be >= 1 (1 = the same threshold in every round); got {refill_factor!r}")
        if not 0.0 <= float(component_budget) <= CLEAN_BUDGET:
            raise ValueError(f"fusion: component_budget must be within [0, {CLEAN_BUDGET}] (0 = off); "
                             f"got {component_budget!r}")
        if density_scope not in DENSITY_SCOPES:
            raise ValueError(f"fusion: density_scope must be one of {', '.join(DENSITY_SCOPES)}; got {density_scope!r}")
        if conflict_weight not in RIVAL_WEIGHTS:
            raise ValueError(f"fusion: conflict_weight must be one of {', '.join(RIVAL_WEIGHTS)}; got {conflict_weight!r}")
        if ties not in TIES:
            raise ValueError(f"fusion: ties must be one of {', '.join(TIES)}; got {ties!r}")
        if isinstance(mutual_neighbours, bool) or int(mutual_neighbours) != mutual_neighbours or int(mutual_neighbours) < 1:
            raise ValueError(f"fusion: mutual_neighbours must be a whole number >= 1; got {mutual_neighbours!r}")
        if rouge_query not in ROUGE_QUERY:
            raise ValueError(f"fusion: rouge_query must be one of {', '.join(ROUGE_QUERY)}; got {rouge_query!r}")
        if isinstance(density_mutual, bool) or int(density_mutual) != density_mutual or int(density_mutual) < 0:
            raise ValueError(f"fusion: density_mutual must be a whole number >= 0 (0 = off); got {density_mutual!r}")
        super().__init__(threshold=threshold, evidence=ev, combine=combine, calibration_folds=calibration_folds,
                         max_rounds=max_rounds, cohesion_scope=cohesion_scope, duplicate_jaccard=duplicate_jaccard,
                         pairwise_scope=pairwise_scope, refill_factor=refill_factor, ties=ties,
                         component_budget=component_budget, density_scope=density_scope,
                         conflict_weight=conflict_weight, mutual_neighbours=int(mutual_neighbours),
                         rouge_query=rouge_query, density_mutual=int(density_mutual))

    # -- the methods it reads ---------------------------------------------------------------------
    @property
    def sources_(self) -> EvidenceSources:
        """The registered methods the evidence comes from (built on first use, fitted by :meth:`fit`)."""
        settings = (tuple(self.evidence), float(self.duplicate_jaccard), self.conflict_weight,
                    int(self.mutual_neighbours), self.rouge_query, int(self.density_mutual))
        src = self.__dict__.get("_sources")
        if src is None or self.__dict__.get("_sources_settings") != settings:   # rebuilt after set_params
            src = self.__dict__["_sources"] = EvidenceSources(*settings)
            self.__dict__["_sources_settings"] = settings
        return src

    @property
    def rsg_(self) -> Any:
        """The fitted RSG whose score is the ``rsg`` evidence (None until :meth:`fit`)."""
        src = self.sources_
        return src.method("rsg") if "rsg" in src.fitted else None

    def fit(self, snapshot: Any, resources: "Resources") -> "Fusion":
        """Fit the corpus-time methods (RSG, the answer evidence's corpus reference, RAGDefender) on
        the snapshot being defended (no labels are read)."""
        self.sources_.fit(snapshot, resources)
        return self

    # -- evidence ---------------------------------------------------------------------------------
    def _static(self, ranking: Ranking, resources: "Resources", idx: list[int]) -> dict[int, dict[str, float]]:
        """Evidence that does not depend on the other documents of the context."""
        return self.sources_.static(ranking, resources, idx)

    def _window(self, ranking: Ranking, survivors: list[int], k: int) -> list[int]:
        alive = set(survivors)
        window = survivors[:max(int(self.cohesion_scope), k)]
        if self.pairwise_scope == "seen":   # removed documents stay neighbours: removal does not launder a twin
            window = sorted(set(window) | {i for i in range(len(ranking.documents)) if i not in alive})
        return window

    def _contextual(self, ranking: Ranking, resources: "Resources", survivors: list[int], ctx: list[int],
                    k: int) -> dict[int, dict[str, Any]]:
        """Evidence that depends on the current context: RSQ, cohesion, ROUGE-L, answer corroboration."""
        return self.sources_.contextual(ranking, resources, survivors, ctx, k, self._window(ranking, survivors, k),
                                        resources.judge_embeddings)

    # -- score, refine, decide --------------------------------------------------------------------
    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        """Round 1: the evidence of the first ``k_ctx`` documents and their fused scores."""
        t0 = time.perf_counter()
        out = self._round(ranking, resources, k_ctx, FusionScores([]), set())
        out.latency_ms["scoring"] = (time.perf_counter() - t0) * 1000
        return out

    def refine(self, ranking: Ranking, resources: "Resources", k_ctx: int | None, scores: Scores,
               decisions: list[Decision], thresholds: Mapping[str, float | None]) -> Scores | None:
        """The next refill round, while the last one removed something (at most ``max_rounds``)."""
        assert isinstance(scores, FusionScores)
        rnd = scores.rounds
        flagged = [d for d in decisions if d.removed and d.evidence.get("round") == rnd]
        if not flagged or rnd >= int(self.max_rounds):
            return None
        t0 = time.perf_counter()
        out = self._round(ranking, resources, k_ctx, scores, {i for i, d in enumerate(decisions) if d.removed})
        out.latency_ms["scoring"] = scores.latency_ms.get("scoring", 0.0) + (time.perf_counter() - t0) * 1000
        return out

    def _round(self, ranking: Ranking, resources: "Resources", k_ctx: int | None, prev: FusionScores,
               removed: set[int]) -> FusionScores:
        docs = ranking.documents
        n = len(docs)
        k = n if k_ctx is None else min(int(k_ctx), n)
        rnd = prev.rounds + 1
        survivors = [i for i in range(n) if i not in removed]
        ctx = survivors[:k]
        static = dict(prev.static)
        new = [i for i in ctx if i not in static]
        static.update(self._static(ranking, resources, new))
        if self.density_scope == "survivors" and removed and "rsg" in self.evidence:
            for i, v in self.sources_.survivor_density(ranking, new, removed).items():
                static[i] = {**static[i], "rsg": v}   # its density without this query's removed documents
        ctxev = self._contextual(ranking, resources, survivors, ctx, k)
        records = dict(prev.records)
        for i in ctx:
            values = {**static[i], **ctxev[i]}
            answer_text = values.pop("answer_text", None)
            records[i] = {"values": values, "round": rnd, "answer_text": answer_text}
        calibrated = getattr(self, "null_", None) is not None
        # a record this round left as it was (not in the context now, or never examined) keeps its score;
        # round 1 has no earlier items
        items = [prev.items[i] if i < len(prev.items) and records.get(i) is prev.records.get(i)
                 else self._item(d, records.get(i), calibrated) for i, d in enumerate(docs)]
        info: dict[str, Any] = {"rounds": rnd}
        missing = self._unfitted()
        if missing:   # a degraded run says so (summary.json lists it per row)
            info["degraded"] = missing
        return FusionScores(items, info, [f"fusion: {missing}"] if missing else [], latency_ms=dict(prev.latency_ms),
                            rounds=rnd, records=records, static=static)

    def _item(self, d: Any, rec: dict[str, Any] | None, calibrated: bool) -> Score:
        if rec is None:
            return Score(d.id, None, "not_examined", "fusion",
                         note="never entered the generation context (no refill reached it)")
        values = rec["values"]
        score, ps = self._score(values) if calibrated else (None, {})
        ev: dict[str, Any] = {"values": values, "p_values": ps, "round": rec["round"],
                              "relaxed": rec["round"] > 1 and float(self.refill_factor) > 1.0}
        if rec.get("answer_text"):
            ev["answer"] = rec["answer_text"]
        if score is None:
            return Score(d.id, None, "unavailable" if calibrated else "scored", "fusion", ev,
                         note="no evidence available" if calibrated else "calibrating")
        ev["drivers"] = [e for _, e in sorted((p, e) for e, p in ps.items() if p <= REASON_P)]
        decisive = self._decisive(values)
        if decisive:
            ev["decisive"] = decisive
        return Score(d.id, score, "scored", "fusion", ev)

    def _decisive(self, values: dict[str, Any]) -> list[str]:
        """The evidence beyond its own clean-budget threshold (``component_budget``; empty when off)."""
        thr = getattr(self, "component_thresholds_", None) or {}
        return [e for e, t in thr.items() if isinstance(values.get(e), (int, float)) and float(values[e]) >= t]

    def decide(self, scores: Scores, thresholds: Mapping[str, float | None]) -> list[Decision]:
        """Removed iff the fused score ≥ the threshold of its round: ``thresholds["threshold"]`` in
        round 1, lowered by ln ``refill_factor`` in later rounds (there was a removal before)."""
        thr = thresholds.get("threshold")
        out = []
        for s in scores.items:
            relaxed = bool(s.evidence.get("relaxed"))
            t = None if thr is None else (self._lowered(thr) if relaxed else float(thr))
            d = self.decide_one(s, {"threshold": t})
            if not d.removed and s.value is not None and t is not None and s.evidence.get("decisive"):
                d = Decision(d.doc_id, True, d.status, d.score, d.threshold, d.evidence,
                             self.explain(s, True, t), d.layer)
            out.append(d)
        return out

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        if s.value is None:
            return s.note
        ev, values, ps = s.evidence, s.evidence.get("values", {}), s.evidence.get("p_values", {})
        drivers = [e for e in ev.get("drivers", []) if e in ps]
        why = (", ".join(f"{e} {values[e]:.3g} (p={ps[e]:.3f})" for e in drivers) or "no single evidence below p=0.05")
        if threshold is None:
            return f"fused score {s.value:.2f} (no threshold: calibrate on clean rankings)"
        rnd = int(ev.get("round", 1))
        alone = [e for e in ev.get("decisive", []) if e in values]
        if removed and alone and s.value < threshold:
            return (f"{', '.join(f'{e} {values[e]:.3g}' for e in alone)} beyond what its own clean budget allows "
                    f"(fused score {s.value:.2f} < {threshold:.2f}); removed by that evidence alone")
        where = (f"round {rnd}" + (" (refill)" if rnd > 1 else "")
                 + (f", threshold lowered by ln {float(self.refill_factor):g} after a removal" if ev.get("relaxed") else ""))
        return (f"fused score {s.value:.2f} {'≥' if removed else '<'} {threshold:.2f} ({where}); "
                + (f"pushed over by {why}; removed" if removed else f"strongest: {why}; kept"))

    def summarize(self, scores: Scores, decisions: list[Decision]) -> dict[str, Any]:
        return {"removed": sum(1 for d in decisions if d.removed)}

    def is_calibrated(self) -> bool:
        return getattr(self, "null_", None) is not None and self.threshold is not None

    def _lowered(self, threshold: float) -> float:
        """The threshold of a query after a removal: lowered by ln ``refill_factor``."""
        return float(threshold) - math.log(float(self.refill_factor))

    # -- scoring ----------------------------------------------------------------------------------
    def _pvalues(self, values: dict[str, float], null: dict[str, np.ndarray] | None = None) -> dict[str, float]:
        """Per-evidence p-values; an evidence of :data:`ABSTAINS_AT_ZERO` at a value ≤ 0 abstains."""
        null = (getattr(self, "null_", None) or {}) if null is None else null
        return {e: empirical_p(null[e], float(v), ties=self.ties) for e, v in values.items()
                if e in null and isinstance(v, (int, float)) and null[e].size
                and not (e in ABSTAINS_AT_ZERO and float(v) <= 0.0)}

    def _combined(self, ps: dict[str, float], member: bool = False) -> float:
        """−ln of the combination's p-value against the clean combination nulls."""
        vals = list(ps.values())
        if self.combine == "cauchy":
            return float(-math.log(empirical_p(self.cauchy_null_, cauchy_stat(vals), member, self.ties)))
        pf = empirical_p(self.fisher_null_, fisher_stat(vals), member, self.ties)
        pm = empirical_p(self.minp_null_, minp_stat(vals), member, self.ties)
        p = {"omnibus": min(pf, pm), "fisher": pf, "minp": pm}[self.combine]
        return float(-math.log(p))

    def _score(self, values: dict[str, float]) -> tuple[float | None, dict[str, float]]:
        ps = self._pvalues(values)
        if not ps:
            return None, ps
        return self._combined(ps), ps

    # -- calibration ------------------------------------------------------------------------------
    def _clean_evidence(self, clean_rankings: list[Ranking], resources: "Resources",
                        k_ctx: int | None) -> tuple[list[dict[str, float]], list[int]]:
        """The evidence values of every document of the clean first contexts, and each one's query."""
        rows: list[dict[str, float]] = []
        query_of: list[int] = []
        for q, r in enumerate(clean_rankings):
            for rec in self._round(r, resources, k_ctx, FusionScores([]), set()).records.values():
                rows.append(rec["values"])
                query_of.append(q)
        return rows, query_of

    def learn_thresholds(self, clean_rankings: list[Ranking], resources: "Resources",
                         clean_budget: float = CLEAN_BUDGET, k_ctx: int | None = K_CTX) -> dict[str, Any]:
        """The per-evidence clean nulls, the combination nulls and the procedure threshold, from clean
        rankings only (module docstring)."""
        rows, query_of = self._clean_evidence(clean_rankings, resources, k_ctx)
        if not rows:
            raise ValueError("fusion: no clean documents to calibrate on")
        self.null_ = self._nulls(rows)
        self.component_thresholds_ = self._component_thresholds(self.null_)
        per = self._cross_fitted_pvalues(rows, query_of)
        self.fisher_null_, self.minp_null_, self.cauchy_null_ = combination_nulls(per)
        scores = [self._combined(p, member=True) for p in per if p]
        self.clean_scores_ = scores
        self.document_threshold_ = removal_threshold(scores, clean_budget)
        threshold, self.calibration_removal_ = self._procedure_threshold(
            clean_rankings, resources, k_ctx, rows, query_of, per, scores, clean_budget)
        return {"threshold": threshold}

    def _procedure_threshold(self, rankings: list[Ranking], resources: "Resources", k_ctx: int | None,
                             rows: list[dict[str, float]], query_of: list[int], per: list[dict[str, float]],
                             scores: list[float], budget: float) -> tuple[float, tuple[int, int]]:
        """The smallest threshold at or above the per-document one at which the whole procedure —
        first context and every rescored refill round — removes at most ``budget`` of the clean
        documents it scores on the calibration rankings, each query scored by a detector fitted on
        the other query folds (docs/algorithms.md §14.2). Returns (threshold, (removed, scored))."""
        fold_of = query_folds(query_of, self.calibration_folds)
        if fold_of is None or int(self.max_rounds) < 2:
            return self.document_threshold_, (sum(s >= self.document_threshold_ for s in scores), len(scores))
        states = []
        for k in sorted(set(fold_of.values())):
            other = [j for j, q in enumerate(query_of) if fold_of[q] != k]
            st = copy.copy(self)
            st.null_ = self._nulls([rows[j] for j in other])
            st.component_thresholds_ = self._component_thresholds(st.null_)
            st.fisher_null_, st.minp_null_, st.cauchy_null_ = combination_nulls([per[j] for j in other])
            states.append(st)

        def removal(t: float) -> tuple[int, int]:
            removed = scored = 0
            for q, r in enumerate(rankings):
                ins = states[fold_of[q]].run(r, resources, k_ctx, {"threshold": t})
                scored += sum(1 for d in ins.decisions if d.status != "not_examined")
                removed += sum(1 for d in ins.decisions if d.removed)
            return removed, scored

        def within(counts: tuple[int, int]) -> bool:
            return counts[0] <= budget_index(counts[1], budget)

        candidates = sorted({float(np.nextafter(s, np.inf)) for s in scores if s >= self.document_threshold_}
                            | {self.document_threshold_})
        lo, hi = 0, len(candidates) - 1
        best = removal(candidates[lo])
        if within(best):
            return candidates[lo], best
        top = removal(candidates[hi])
        if not within(top):
            return candidates[hi], top
        best = top
        while hi - lo > 1:               # removal falls as the threshold rises: bisect to the lowest within budget
            mid = (lo + hi) // 2
            counts = removal(candidates[mid])
            if within(counts):
                hi, best = mid, counts
            else:
                lo = mid
        return candidates[hi], best

    def _component_thresholds(self, null: dict[str, np.ndarray]) -> dict[str, float]:
        """Per evidence, the value at which it alone removes ``component_budget`` of the clean documents
        (the one budget rule, docs/algorithms.md §9.2); empty when ``component_budget`` is 0."""
        if float(self.component_budget) <= 0.0:
            return {}
        return {e: removal_threshold(list(v), float(self.component_budget)) for e, v in null.items()
                if e not in ABSTAINS_AT_ZERO}

    def _nulls(self, rows: list[dict[str, float]]) -> dict[str, np.ndarray]:
        null = {e: np.sort(np.asarray([row[e] for row in rows if e in row], dtype=np.float64)) for e in self.evidence}
        return {e: v for e, v in null.items() if v.size}

    def _cross_fitted_pvalues(self, rows: list[dict[str, float]], query_of: list[int]) -> list[dict[str, float]]:
        """Per-evidence p-values of each calibration document against the documents of the other
        query folds (module docstring); with a single query, against the other documents."""
        fold_of = query_folds(query_of, self.calibration_folds)
        if fold_of is None:
            return [self._pvalues(row, self._nulls(rows[:j] + rows[j + 1:])) for j, row in enumerate(rows)]
        per: list[dict[str, float]] = [{} for _ in rows]
        for k in sorted(set(fold_of.values())):
            null = self._nulls([row for row, q in zip(rows, query_of) if fold_of[q] != k])
            for j, (row, q) in enumerate(zip(rows, query_of)):
                if fold_of[q] == k:
                    per[j] = self._pvalues(row, null)
        return per

    def _unfitted(self) -> str | None:
        """What corpus-time evidence is missing because ``fit`` was not called (None: nothing)."""
        gaps = []
        fitted = self.sources_.fitted
        if "rsg" in self.evidence and "rsg" not in fitted:
            gaps.append("rsg evidence unavailable")
        if "answer" in self.evidence and "answer" not in fitted:
            gaps.append("answer evidence counted over the ranking only")
        if "conflict" in self.evidence and "conflict" not in fitted:
            gaps.append("conflict evidence counted over the context only")
        return (", ".join(gaps) + " (not fitted on a corpus snapshot: call fit(snapshot), as prepare_defense does)"
                if gaps else None)
