"""TRIS — the Tri-Layer Retrieval Integrity Sieve (docs/algorithms.md §2).

L1 judge-space K-Means majority keep (§2.2) → L2 structural prefix filter on L1's survivors (§2.3;
both in :mod:`sieve.defenses.tris_layers`) → optional L3 LLM consistency check on L2's survivors
(§2.4, :mod:`sieve.defenses.l3`). ``score`` runs L1 and L2; L3 depends on their decisions, so it
runs in ``refine`` (the protocol of :mod:`sieve.defenses.base`).

Registered presets: ``tris`` (L1+L2, L3 adaptive when an LLM is available), ``tris_l1``,
``tris_l2``, ``tris_l3`` (L3 alone, always on), ``tris_full`` (L1+L2+L3 always on).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from sieve.constants import CLEAN_BUDGET, K_CTX
from sieve.defenses.base import Defense
from sieve.defenses.budget import removal_threshold
from sieve.defenses.l3 import L3_VARIANTS, DocVerdict, L3Outcome, make_verifier, skipped_outcome
from sieve.defenses.tris_layers import (
    L2_REPEAT_SCORE,
    QUERY_PREFIX_TOKENS,
    L1Result,
    L2Features,
    QueryGrams,
    fit_kmeans,
    l2_evidence_features,
    l2_evidence_score,
    l2_features,
    l2_removes,
    l2_score,
    layer1,
)
from sieve.registry import DEFENSES
from sieve.types import Decision, RankedDocument, Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources

L3_MODES = ("off", "always", "adaptive", "selective")
CONTEXT_MODES = ("refill", "all_survivors")
L1_THRESHOLD = 0.5        # L1 score is 1.0 outside the majority cluster, 0.0 inside; removed iff ≥ 0.5
#: L3 likelihood delta threshold (nats/token) used while ``l3_delta_threshold`` is not calibrated
#: (docs/models.md; docs/algorithms.md §14.3).
L3_DEFAULT_DELTA = 1.0
#: Names re-exported from :mod:`sieve.defenses.tris_layers` (imported from here by other modules).
__all__ = ["TRIS", "TRISScores", "L1Result", "L2Features", "QueryGrams", "fit_kmeans", "layer1", "l2_features",
           "l2_removes", "l2_score", "l2_evidence_features", "l2_evidence_score", "L2_REPEAT_SCORE",
           "QUERY_PREFIX_TOKENS", "L1_THRESHOLD", "L3_DEFAULT_DELTA"]


# ---- the defense -------------------------------------------------------------------------------
@DEFENSES.register
class TRIS(Defense):
    """TRIS: L1 → L2 → L3 (docs/algorithms.md §2). Every threshold is a parameter:

    * ``use_l1`` (True), ``cluster_count`` C = 2 — §1.1: every TRIS run uses 2; 3 and 5 only in the
      k × C sweep [CONTRADICTION #1: paper says 3]. C = 1 switches L1 off, as in the TRIS ablations.
      L1 score: 1.0 for a document outside the strict-majority cluster, 0.0 otherwise, threshold 0.5;
      the continuous ``distance_to_largest_centroid`` is in the evidence.
    * ``use_l2`` (True), ``prefix_token_count`` T = 20 (clamped ≥ 5), ``jaccard_threshold`` = 0.8,
      ``ngram_threshold`` = 0.8, both inclusive (§2.3). L2 score = max(jaccard, bigram, trigram
      recall) — :func:`~sieve.defenses.tris_layers.l2_score`, the one definition fusion reads too —
      and ``L2_REPEAT_SCORE`` (2.0) when repeat_trigger fires; the reported threshold
      is min(jaccard_threshold, ngram_threshold) (exact when they are equal, as by default). Setting
      the thresholds to 10 (TRIS "L2 off" ablation) leaves repeat_trigger active, as in the source.
    * ``l3_mode``: ``off``; ``always`` (run on L2's survivors whenever non-empty); ``selective``
      (TRIS code §2.5: L1 removed ≥ 1 OR L2 removed ≥ 1); ``adaptive`` (default; the paper's "only
      when L1 and L2 disagree", contradiction register #6): L3 runs iff exactly ONE of L1 and L2
      removed at least one document — one layer saw an attack and the other did not. (L2 runs on
      L1's survivors, so disagreement is judged at the layer level, not per document.) A disabled
      layer counts as having removed nothing.
    * ``l3_variant``: ``auto`` (likelihood verifier for a local LLM, prompted JSON verifier for an
      endpoint), ``prompted``, ``likelihood``, ``paper`` (§2.4.1 SAFE/CONTRADICTORY reproduction).
      ``l3_confidence_threshold`` = 4.0 and ``l3_delta_threshold`` configure the likelihood verifier
      (see :class:`~sieve.defenses.l3.LikelihoodVerifier`). ``l3_delta_threshold`` = ``None`` (default)
      is calibrated on clean rankings with the one budget rule (docs/algorithms.md §14.3,
      :meth:`calibrate`): L3 then removes at most the clean budget of the clean documents it judges;
      until calibrated (no LLM, the prompted back-end, or no clean L3 verdicts) it is 1.0.
      ``l3_calibration_queries`` (24) caps the clean queries L3 is calibrated on (≈ 6 local-LLM
      calls each).
      Without an LLM (``resources.llm is None``) L3 is ``skipped`` with reason "no LLM configured".
    * ``context_mode``: ``refill`` (default, docs/design.md: first ``k_ctx`` survivors) or
      ``all_survivors`` (TRIS's variable-length context, §1.6; ``k_ctx`` ignored: the inspection
      sets ``info["context_k"] = None`` and ``apply`` passes every survivor).
    * ``l3_scope``: ``context`` (default, Sieve product decision) — L3 verifies L2's survivors in rank
      order until ``k_ctx`` of them are kept, i.e. exactly the documents that reach the generator
      (a removal pulls the next survivor in and verifies it too); the rest get status ``skipped``
      ("outside the generation context"). ``all`` — the source behaviour (§2.4: every survivor,
      1 + |working set| LLM calls; up to 50 calls per query at k = 50). ``context`` costs about
      1 + k_ctx calls and judges the same context documents; with ``context_mode="all_survivors"``
      (or ``k_ctx=None``) the scope is always ``all``. ``k_ctx`` is the argument of :meth:`inspect`
      / :meth:`apply` (decided once, by the caller).

    Everything filtered → unfiltered fallback with a warning (§2.5, docs/design.md).

    Re-deciding (:meth:`redecide`): the knob ``"L2"`` is one threshold for the L2 Jaccard and
    n-gram recalls (exactly the current decisions when ``jaccard_threshold == ngram_threshold``,
    as by default); L1 removals stay; documents L3 judged are re-tested against L2.
    """

    name = "tris"
    summary = ("TRIS L1+L2; L3 adaptive (only when exactly one of L1/L2 removed something) "
               "if an LLM is configured.")
    paper = "TRIS, Tri-Layer Retrieval Integrity Sieve (docs/algorithms.md §2)"
    needs = ("judge", "llm")
    adaptive = True          # L3 runs on L2's survivors (refine)
    calibrated_knob = "L3"
    presets = {
        "tris_l1": {"params": {"use_l2": False, "l3_mode": "off"}, "needs": ("judge",),
                    "paper": "TRIS Layer 1 (docs/algorithms.md §2.2)",
                    "summary": "TRIS Layer 1 only: judge-space K-Means majority keep."},
        "tris_l2": {"params": {"use_l1": False, "l3_mode": "off"}, "needs": (),
                    "paper": "TRIS Layer 2 (docs/algorithms.md §2.3)",
                    "summary": "TRIS Layer 2 only: structural query-prefix filter."},
        "tris_l3": {"params": {"use_l1": False, "use_l2": False, "l3_mode": "always"}, "needs": ("llm",),
                    "paper": "TRIS Layer 3 (docs/algorithms.md §2.4)",
                    "summary": "TRIS Layer 3 only: fail-open LLM consistency check, always on."},
        "tris_full": {"params": {"l3_mode": "always"}, "needs": ("judge", "llm"),
                      "paper": "TRIS full pipeline (docs/algorithms.md §2.5)",
                      "summary": "TRIS L1+L2+L3 with L3 always on."},
    }

    # parameters (set by __init__ through Params; declared for type checkers)
    use_l1: bool
    use_l2: bool
    cluster_count: int
    prefix_token_count: int
    jaccard_threshold: float
    ngram_threshold: float
    l3_mode: str
    l3_variant: str
    l3_confidence_threshold: float
    l3_delta_threshold: float | None
    context_mode: str
    l3_scope: str
    l3_calibration_queries: int

    def __init__(self, use_l1: bool = True, use_l2: bool = True, cluster_count: int = 2,
                 prefix_token_count: int = 20, jaccard_threshold: float = 0.8, ngram_threshold: float = 0.8,
                 l3_mode: str = "adaptive", l3_variant: str = "auto", l3_confidence_threshold: float = 4.0,
                 l3_delta_threshold: float | None = None, context_mode: str = "refill", l3_scope: str = "context",
                 l3_calibration_queries: int = 24) -> None:
        if l3_scope not in ("context", "all"):
            raise ValueError(f"tris: l3_scope must be 'context' or 'all'; got {l3_scope!r}")
        if l3_mode not in L3_MODES:
            raise ValueError(f"tris: l3_mode must be one of {', '.join(L3_MODES)}; got {l3_mode!r}")
        if l3_variant not in L3_VARIANTS:
            raise ValueError(f"tris: l3_variant must be one of {', '.join(L3_VARIANTS)}; got {l3_variant!r}")
        if context_mode not in CONTEXT_MODES:
            raise ValueError(f"tris: context_mode must be one of {', '.join(CONTEXT_MODES)}; got {context_mode!r}")
        if int(cluster_count) < 1:
            raise ValueError(f"tris: cluster_count must be >= 1; got {cluster_count!r}")
        super().__init__(use_l1=use_l1, use_l2=use_l2, cluster_count=cluster_count,
                         prefix_token_count=prefix_token_count, jaccard_threshold=jaccard_threshold,
                         ngram_threshold=ngram_threshold, l3_mode=l3_mode, l3_variant=l3_variant,
                         l3_confidence_threshold=l3_confidence_threshold, l3_delta_threshold=l3_delta_threshold,
                         context_mode=context_mode, l3_scope=l3_scope, l3_calibration_queries=l3_calibration_queries)

    @property
    def threshold_param(self) -> str | None:  # type: ignore[override]
        """``l3_delta_threshold`` when L3 can run (``l3_mode`` not ``off``); ``None`` for tris_l1/tris_l2."""
        return None if self.l3_mode == "off" else "l3_delta_threshold"

    # -- thresholds and calibration (docs/algorithms.md §14.3) -----------------------------------
    def l3_delta(self) -> float:
        """The L3 likelihood threshold in use (the calibrated one, else :data:`L3_DEFAULT_DELTA`)."""
        return L3_DEFAULT_DELTA if self.l3_delta_threshold is None else float(self.l3_delta_threshold)

    def current_thresholds(self) -> dict[str, float | None]:
        """``"L2"``: one threshold for the Jaccard and n-gram recalls (exactly the current rule when
        they are equal, as by default); ``"L3"``: the likelihood delta. L1's majority rule has none."""
        out: dict[str, float | None] = {}
        if self.use_l2:
            out["L2"] = min(float(self.jaccard_threshold), float(self.ngram_threshold))
        if self.l3_mode != "off":
            out["L3"] = self.l3_delta()
        return out

    def context_size(self, k_ctx: int | None) -> int | None:
        return None if self.context_mode == "all_survivors" else k_ctx

    def can_calibrate(self, resources: "Resources") -> bool:
        """True when L3 can run and uses the likelihood back-end (a continuous score to calibrate)."""
        llm = resources.llm
        if self.l3_mode == "off" or llm is None:
            return False
        return self.l3_variant == "likelihood" or (self.l3_variant == "auto" and bool(getattr(llm, "supports_nll", False)))

    l3_calibrates = can_calibrate

    def learn_thresholds(self, clean_rankings: list[Ranking], resources: "Resources", clean_budget: float = CLEAN_BUDGET,
                         k_ctx: int | None = K_CTX) -> dict[str, Any]:
        """``l3_delta_threshold`` from the L3 deltas of the clean documents L3 judges (L3 removing
        nothing meanwhile) on the first ``l3_calibration_queries`` clean rankings: at most
        ``clean_budget`` of them removed, never below 1.0 (calibration only makes L3 more careful).
        Nothing is learned when no clean document was judged. L1 and L2 keep the paper's thresholds."""
        scores = self.calibration_scores(clean_rankings[:max(1, int(self.l3_calibration_queries))], resources, k_ctx)
        self.l3_calibration_n_ = len(scores)
        if not scores:
            return {}
        return {"l3_delta_threshold": max(removal_threshold(scores, clean_budget), L3_DEFAULT_DELTA)}

    # -- L3 gating ---------------------------------------------------------------------------
    def l3_should_run(self, l1_removed: int, l2_removed: int, working: int) -> tuple[bool, str]:
        """(run?, reason) for the mode rule of §2.5 / the adaptive definition above."""
        mode = self.l3_mode
        if mode == "off":
            return False, "L3 is off"
        if working == 0:
            return False, "no documents left for L3"
        if mode == "always":
            return True, "L3 always on"
        if mode == "selective":
            ok = l1_removed > 0 or l2_removed > 0
            return ok, ("L1 or L2 removed something (selective)" if ok
                        else "selective mode: neither L1 nor L2 removed anything")
        ok = (l1_removed > 0) != (l2_removed > 0)
        return ok, ("L1 and L2 disagree (exactly one removed something)" if ok
                    else f"adaptive mode: L1 and L2 agree (L1 removed {l1_removed}, L2 removed {l2_removed})")

    # -- score: L1 and L2 ------------------------------------------------------------------------
    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        """L1 on the ranking, L2 on L1's survivors (L1's majority rule has no threshold); L3 follows
        in :meth:`refine`, once L2's decisions are known."""
        t_start = time.perf_counter()
        docs = ranking.documents
        n = len(docs)
        evidence: list[dict[str, Any]] = [{} for _ in range(n)]
        items: list[Score | None] = [None] * n
        layers: list[str] = []
        latency: dict[str, float] = {}
        info: dict[str, Any] = {"l3_mode": self.l3_mode}
        working = list(range(n))
        if self.use_l1 and n:
            t = time.perf_counter()
            r1 = layer1([d.text for d in docs], resources, self.cluster_count)
            latency["L1"] = (time.perf_counter() - t) * 1000
            layers.append("L1")
            info["l1"] = {"cluster_sizes": r1.cluster_sizes, "majority_cluster": r1.majority_cluster,
                          "reason": r1.reason}
            for i in range(n):
                evidence[i]["L1"] = r1.evidence[i]
                reason = (f"outside the judge-space majority cluster {r1.majority_cluster} "
                          f"(cluster sizes {r1.cluster_sizes}); removed" if r1.removed[i]
                          else r1.reason if r1.majority_cluster is None or not r1.evidence[i]
                          else f"in the majority cluster {r1.majority_cluster}; kept")
                items[i] = Score(docs[i].id, 1.0 if r1.removed[i] else 0.0, "scored", "L1", evidence[i],
                                 flag=r1.removed[i], threshold=L1_THRESHOLD, note=reason)
            working = [i for i in working if not r1.removed[i]]
        if self.use_l2 and working:
            t = time.perf_counter()
            qg = QueryGrams.of(ranking.query)
            for i in working:
                f = l2_features(qg, docs[i].text, self.prefix_token_count)
                evidence[i]["L2"] = f.as_dict()
                items[i] = Score(docs[i].id, l2_score(f), "scored", "L2", evidence[i])
            latency["L2"] = (time.perf_counter() - t) * 1000
            layers.append("L2")
        final = [s if s is not None else Score(docs[i].id, None, "skipped", "", evidence[i],
                                                note="no TRIS layer is enabled")
                 for i, s in enumerate(items)]
        latency["total"] = (time.perf_counter() - t_start) * 1000
        return TRISScores(final, info, layers_run=layers, latency_ms=latency)

    # -- refine: L3 on L2's survivors --------------------------------------------------------------
    def refine(self, ranking: Ranking, resources: "Resources", k_ctx: int | None, scores: Scores,
               decisions: list[Decision], thresholds: Mapping[str, float | None]) -> Scores | None:
        """L3 on L2's survivors, gated by ``l3_mode``. With ``l3_scope="context"`` it verifies the
        first ``k_ctx`` survivors, and while some are removed, the next ones that refill their places
        (one refine per batch); the rest are recorded as skipped."""
        assert isinstance(scores, TRISScores)
        if scores.l3_done:
            return None
        docs = ranking.documents
        removed = {d.doc_id for d in decisions if d.removed}
        if not scores.l3_outcomes:       # L3 has not started: gate it on L1's and L2's decisions
            counts = {layer: sum(1 for d in decisions if d.removed and d.layer == layer) for layer in ("L1", "L2")}
            working = [i for i, d in enumerate(docs) if d.id not in removed]
            run_l3, why = self.l3_should_run(counts["L1"], counts["L2"], len(working))
            if run_l3 and resources.llm is None:
                run_l3, why = False, "no LLM configured"
            if not run_l3:
                outcome = skipped_outcome([docs[i] for i in working], why)
                return self._with_l3(scores, docs, working, [outcome], done=True)
            scores = TRISScores(scores.items, scores.info, scores.warnings, scores.layers_run + ["L3"],
                                dict(scores.latency_ms), l3_working=working)
        working = scores.l3_working
        work_docs = [docs[i] for i in working]
        verified = {v.doc_id for o in scores.l3_outcomes for v in o.verdicts}
        kept = sum(1 for d in decisions if d.doc_id in verified and not d.removed)
        whole = self.l3_scope == "all" or self.context_mode == "all_survivors" or not k_ctx
        pos = len(verified)
        if scores.l3_outcomes and (whole or pos >= len(work_docs) or kept >= int(k_ctx or 0)):
            return self._with_l3(scores, docs, working, scores.l3_outcomes, done=True)
        batch = work_docs if whole else work_docs[pos:pos + (int(k_ctx or 0) - kept)]
        t = time.perf_counter()
        delta = thresholds.get("L3")
        assert resources.llm is not None   # gated above: L3 runs only with an LLM
        verifier = make_verifier(resources.llm, self.l3_variant, confidence_threshold=self.l3_confidence_threshold,
                                 delta_threshold=self.l3_delta() if delta is None else float(delta))
        outcome = verifier.verify(ranking.query, batch)
        out = self._with_l3(scores, docs, working, scores.l3_outcomes + [outcome], done=False)
        out.latency_ms["L3"] = out.latency_ms.get("L3", 0.0) + (time.perf_counter() - t) * 1000
        return out

    def _with_l3(self, scores: "TRISScores", docs: list[RankedDocument], working: list[int],
                 outcomes: list[L3Outcome], done: bool) -> "TRISScores":
        """The scores with L3's verdicts so far: a verdict (ran/abstained/error) becomes the document's
        L3 score; a skipped one is recorded in ``evidence["L3"]`` and the L2/L1 score stands."""
        verdicts = {v.doc_id: v for o in outcomes for v in o.verdicts}
        first = outcomes[0]
        if done and len(verdicts) < len(working):
            reason = "outside the generation context (l3_scope='context'); not verified"
            for i in working:
                verdicts.setdefault(docs[i].id, DocVerdict(docs[i].id, False, "skipped", reason=reason))
        items = list(scores.items)
        for i in working:
            v = verdicts.get(docs[i].id)
            if v is None:
                continue
            ev = {**items[i].evidence, "L3": {"status": v.status, "verdict": v.verdict, "reason": v.reason, **v.evidence}}
            if v.status == "skipped" and items[i].layer:
                items[i] = dataclasses.replace(items[i], evidence=ev)
            else:
                items[i] = Score(v.doc_id, v.score, v.status, "L3", ev, flag=v.removed, threshold=v.threshold,
                                 note=v.reason)
        info = dict(scores.info)
        if done:
            status = "ran" if any(o.status == "ran" for o in outcomes) else first.status
            info.update(l3_status=status, l3_reason=first.reason, l3_backend=first.backend,
                        l3_abstained=status == "abstained", internal_answer=first.internal_answer,
                        l3_llm_calls=sum(o.llm_calls for o in outcomes))
        return TRISScores(items, info, scores.warnings, scores.layers_run, dict(scores.latency_ms),
                          l3_working=working, l3_outcomes=outcomes, l3_done=done)

    # -- decide ------------------------------------------------------------------------------------
    def _l2_rule(self, thresholds: Mapping[str, float | None]) -> tuple[float, float]:
        """(Jaccard, n-gram) thresholds of L2 at ``thresholds["L2"]``: the parameters themselves at
        their current value, else that one value for both."""
        current = min(float(self.jaccard_threshold), float(self.ngram_threshold))
        t = thresholds.get("L2")
        if t is None or float(t) == current:
            return float(self.jaccard_threshold), float(self.ngram_threshold)
        return float(t), float(t)

    def decide(self, scores: Scores, thresholds: Mapping[str, float | None]) -> list[Decision]:
        """L1: its majority rule. L2: the §2.3 rule (inclusive; repeat_trigger removes at any
        threshold). L3: the likelihood delta ≥ ``thresholds["L3"]`` (the prompted verdict otherwise);
        a document L3 judged is removed by L2 too when L2 now removes it. A document a raised L2
        threshold lets through was never shown to L3 and stays kept (L3 fails open)."""
        jt, nt = self._l2_rule(thresholds)
        out = []
        for s in scores.items:
            ev_l2 = s.evidence.get("L2")
            if s.layer == "L2" and isinstance(ev_l2, Mapping):
                f = l2_evidence_features(ev_l2)
                removed = l2_removes(f, jt, nt)
                out.append(Decision(s.doc_id, removed, s.status, s.value, min(jt, nt), s.evidence,
                                    _l2_reason(f, removed, jt, nt), "L2"))
                continue
            d = self.decide_one(s, thresholds)
            if s.layer == "L3" and isinstance(ev_l2, Mapping) and l2_removes(l2_evidence_features(ev_l2), jt, nt):
                d.removed = True
            out.append(d)
        return out

    def knob_of(self, s: Score, thresholds: Mapping[str, Any]) -> str | None:
        """L2 and likelihood-L3 scores have knobs; L1's majority rule and a prompted L3 verdict do not."""
        l3 = s.evidence.get("L3")
        if s.layer == "L3" and isinstance(l3, Mapping) and "delta" in l3 and "L3" in thresholds:
            return "L3"
        return "L2" if s.layer == "L2" and "L2" in thresholds else None

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        l3 = s.evidence.get("L3")
        if s.layer == "L3" and isinstance(l3, Mapping) and "delta" in l3 and threshold is not None:
            return _l3_reason(l3, removed, threshold)
        return super().explain(s, removed, threshold)

    def summarize(self, scores: Scores, decisions: list[Decision]) -> dict[str, Any]:
        return {"removed": {layer: sum(1 for d in decisions if d.removed and d.layer == layer)
                            for layer in ("L1", "L2", "L3")}}


@dataclass
class TRISScores(Scores):
    """TRIS's scores with the state of its L3 refine (working set, the verifier's outcomes so far)."""

    l3_working: list[int] = field(default_factory=list)
    l3_outcomes: list[L3Outcome] = field(default_factory=list)
    l3_done: bool = False


def _l3_reason(ev: Mapping[str, Any], removed: bool, threshold: float) -> str:
    """The likelihood verifier's reason at ``threshold`` (docs/algorithms.md §14.3)."""
    return (f"the passage makes the model's own answer {ev.get('internal_answer')!r} "
            f"{'much less' if removed else 'not much less'} likely: delta {float(ev['delta']):+.2f} "
            f"{'≥' if removed else '<'} {threshold:g} nats/token")


def _l2_reason(f: L2Features, removed: bool, jt: float, nt: float) -> str:
    if not removed:
        return (f"prefix does not repeat the query (jaccard {f.jaccard:.2f}, bigram recall {f.bigram_overlap:.2f}, "
                f"trigram recall {f.trigram_overlap:.2f}; thresholds {jt:g}/{nt:g}); kept")
    parts = []
    if f.bigram_overlap >= nt:
        parts.append(f"bigram recall {f.bigram_overlap:.2f} ≥ {nt:g}")
    if f.trigram_overlap >= nt:
        parts.append(f"trigram recall {f.trigram_overlap:.2f} ≥ {nt:g}")
    if f.jaccard >= jt:
        parts.append(f"token Jaccard {f.jaccard:.2f} ≥ {jt:g}")
    if f.repeat_trigger:
        parts.append("the query prefix occurs twice in the first tokens")
    return "prefix repeats the query: " + "; ".join(parts) + "; removed"
