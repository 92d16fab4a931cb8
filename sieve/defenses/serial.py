"""``rsg_rsq`` — RAGSieve serial deployment RSG → RSQ (docs/algorithms.md §5, paper Table 3).

1. Quarantine: drop RSG-flagged documents from the saved ranking and renumber ranks 1.. (§5 step 1).
2. At least 20 survivors are required; otherwise RSQ is ``unavailable`` on the survivors and the
   reason names the remedy (retrieve deeper, or re-retrieve with RSG-flagged documents excluded).
3. RSQ on the survivors: new ranks 1–5 against survivor ranks 6–20. RSQ decisions made on the
   pre-quarantine ranking are never reused.
4. A single refill to ``k_ctx`` from the survivors in rank order, without rescoring.

Each original document gets one decision that reflects both layers (see :class:`SerialRSGRSQ`).
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from sieve.constants import K_CTX
from sieve.defenses.base import Defense
from sieve.defenses.rsg import RSG_DEFAULTS as _G  # noqa: N811
from sieve.defenses.rsg import RSG, RSGParams
from sieve.defenses.rsq import CONTEXT_SIZE, DECISION_THRESHOLD, RSQ
from sieve.ledger import DETECTOR_FLAG
from sieve.registry import DEFENSES
from sieve.types import Decision, Inspection, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources

SURVIVOR_REASON = ("RSQ needs at least 20 documents after RSG's removals; retrieve deeper (depth ≥ 20 + "
                   "RSG-flagged) or re-retrieve from the index with RSG-flagged documents excluded")
TAIL_REASON = "RSQ examines only the top 5 survivors (survivor ranks 6–20 are its reference tail)"
QUARANTINE_REASON = f"{DETECTOR_FLAG} by RSG's corpus audit, removed before RSQ ran (RSQ never scored it)"
#: Threshold of the combined (normalised) score: a document is removed iff score ≥ 1.0.
COMBINED_THRESHOLD = 1.0
_BELOW_ONE = float(np.nextafter(COMBINED_THRESHOLD, 0.0))
_FLOAT_MAX = float(np.finfo(float).max)


def normalised_score(value: float, threshold: float, flagged: bool) -> float:
    """``value / threshold`` for a layer that removes iff ``value ≥ threshold``, so 1.0 is the layer's
    decision boundary. Kept exactly consistent with the layer's own decision (the critical case is a
    clean S one ulp below a calibrated η_Q): value ≥ threshold gives a correctly rounded ratio ≥ 1.0,
    and as a guard against rounding up to 1.0 from below, a kept document is clamped to the largest
    float below 1.0 and a flagged one to at least 1.0.
    Non-positive or non-finite thresholds (degenerate calibration) use the shift 1 + value − threshold,
    which preserves the order and the boundary."""
    v, t = float(value), float(threshold)
    q = v / t if (t > 0 and math.isfinite(t)) else 1.0 + (v - t)
    if math.isnan(q):
        q = COMBINED_THRESHOLD if flagged else _BELOW_ONE
    q = min(max(q, -_FLOAT_MAX), _FLOAT_MAX)      # finite scores only (overflow of the ratio)
    if flagged:
        return max(q, COMBINED_THRESHOLD)
    return min(q, _BELOW_ONE)


@DEFENSES.register
class SerialRSGRSQ(Defense):
    """RSG → RSQ serial deployment (§5). Parameters: ``eta_q`` (RSQ threshold) and any
    :class:`~sieve.defenses.rsg.RSGParams` field (``mode``, ``progress`` …).

    **Decisions.** Every document of the ranking gets one decision reflecting both layers:

    * RSG scored every document of its snapshot (documents outside it are ``not_examined`` by RSG).
    * Quarantined by RSG → removed, layer ``"RSG"``.
    * Survivor scored by RSQ (survivor ranks 1–5) → layer ``"RSQ"``, removed iff RSQ flagged it.
    * Survivor not examined by RSQ (survivor rank 6+) → keeps its RSG decision (kept, status
      ``"scored"`` by RSG, layer ``"RSG"``); ``evidence["rsq"]`` records ``not_examined``.
    * Fewer than 20 survivors → RSQ is unavailable: survivors keep their RSG decisions and the
      unavailability is recorded in ``evidence["rsq"]``, the reason and the result warnings.

    Survivors carry ``evidence["survivor_rank"]`` (rank after quarantine and renumbering).

    **One score scale.** ``Decision.score`` is the combined suspicion relative to each layer's own
    threshold, ``max(rsg_score / η_G, S / η_Q)`` over the layers that scored the document, and
    ``Decision.threshold`` is 1.0. Both layers remove inclusively (RSG: score ≥ η_G = 0.5; RSQ:
    S ≥ η_Q), so ``removed`` ⇔ a layer removed ⇔ ``score ≥ 1.0``. ``removed`` is taken from the layer
    decisions and :func:`normalised_score` clamps the rare float-division rounding at the boundary,
    so the equivalence holds exactly. Why: removal rates, AUROC and detection at a clean budget
    compare scores across documents, which is meaningless when RSG's [0, 1] score and RSQ's S are
    mixed raw. The raw layer values are kept: ``evidence["rsg"]`` = {score, threshold, flagged,
    status, …RSG audit row}, ``evidence["rsq"]`` = {status, threshold, E_a, E_i, E_p, E_s, S, …} when
    RSQ scored the document, and ``evidence["layer_scores"]`` the normalised per-layer values.

    **Calibration** learns ``eta_q`` on the RSQ layer's raw S values of the clean rankings (RSQ run
    on the post-quarantine survivors), never on the combined score.

    **Re-deciding** (:meth:`redecide`) uses the one knob ``"threshold"`` on the combined score
    (current value 1.0): a value t removes documents whose score is ≥ t times a layer's threshold.
    """

    name = "rsg_rsq"
    summary = "RAGSieve serial deployment: RSG corpus quarantine, then RSQ on the re-ranked survivors."
    paper = "RAGSieve serial RSG → RSQ (docs/algorithms.md §5)"
    needs = ("retriever", "causal_lm", "token_encoder")
    corpus_time = True
    threshold_param = "eta_q"

    def __init__(self, eta_q: float = DECISION_THRESHOLD, trace_tokens: bool = True,
                 neighbor_count: int = _G.neighbor_count, dense_core_count: int = _G.dense_core_count,
                 support_scale: float = _G.support_scale, semantic_threshold: float = _G.semantic_threshold,
                 lexical_ceiling: float = _G.lexical_ceiling, multiscript_gate: int = _G.multiscript_gate,
                 target_alert_fraction: float = _G.target_alert_fraction,
                 decision_threshold: float = _G.decision_threshold, mode: str = _G.mode, hnsw_m: int = _G.hnsw_m,
                 hnsw_ef_search: int = _G.hnsw_ef_search, ivf_nprobe: int = _G.ivf_nprobe,
                 block_size: int = _G.block_size, progress: bool = _G.progress) -> None:
        super().__init__(eta_q=eta_q, trace_tokens=trace_tokens, neighbor_count=neighbor_count,
                         dense_core_count=dense_core_count, support_scale=support_scale,
                         semantic_threshold=semantic_threshold, lexical_ceiling=lexical_ceiling,
                         multiscript_gate=multiscript_gate, target_alert_fraction=target_alert_fraction,
                         decision_threshold=decision_threshold, mode=mode, hnsw_m=hnsw_m,
                         hnsw_ef_search=hnsw_ef_search, ivf_nprobe=ivf_nprobe, block_size=block_size,
                         progress=progress)

    def current_thresholds(self) -> dict[str, float | None]:
        return {"threshold": COMBINED_THRESHOLD}

    def _rsg(self) -> RSG:
        rsg_params = {k: v for k, v in self.get_params().items() if k in RSGParams.__dataclass_fields__}
        rsg = getattr(self, "rsg_", None)
        if rsg is None:
            rsg = RSG(**rsg_params)
        return rsg

    def _rsq(self) -> RSQ:
        return RSQ(eta_q=self.eta_q, refill="paper", trace_tokens=self.trace_tokens)

    def fit(self, snapshot: Any, resources: "Resources | None" = None) -> "SerialRSGRSQ":
        self.rsg_ = self._rsg().fit(snapshot, resources)
        self.audit_ = self.rsg_.audit_
        return self

    # -- the two layers, raw ---------------------------------------------------------------------
    def _layers(self, ranking: Ranking, resources: "Resources"
                ) -> tuple[list[Decision], Ranking, list[Decision] | None, dict[str, Any], list[str]]:
        """(RSG decisions on ``ranking``, survivors, raw RSQ decisions on the survivors or ``None``
        when RSQ is unavailable, info, warnings)."""
        warnings: list[str] = []
        rsg_decisions = self._rsg().decisions_for(ranking)
        if rsg_decisions and all(d.status == "unavailable" for d in rsg_decisions):
            warnings.append("rsg_rsq: RSG not fitted; RSQ runs on the unquarantined ranking")
        quarantined = {d.doc_id for d in rsg_decisions if d.removed}
        survivors = ranking.without(quarantined)
        info: dict[str, Any] = {"quarantined_document_ids": [d.id for d in ranking.documents if d.id in quarantined],
                                "survivors": len(survivors.documents)}
        rsq_decisions: list[Decision] | None
        if len(survivors.documents) < CONTEXT_SIZE:
            msg = (f"rsg_rsq: RSQ unavailable for query {ranking.query_id or ranking.query!r}: "
                   f"{len(survivors.documents)} survivors after removing {len(quarantined)} RSG-flagged; {SURVIVOR_REASON}")
            warnings.append(msg)
            rsq_decisions = None
            info["rsq_unavailable"] = SURVIVOR_REASON
        else:
            rsq = self._rsq()
            rsq_decisions = rsq.score_ranking(survivors, resources)   # computed on the new ranks only
            self.last_latency_ms_ = getattr(rsq, "last_latency_ms_", {})
        info["rsq_flagged"] = [d.doc_id for d in (rsq_decisions or []) if d.removed]
        return rsg_decisions, survivors, rsq_decisions, info, warnings

    # -- merge -----------------------------------------------------------------------------------
    def _run(self, ranking: Ranking, resources: "Resources") -> tuple[list[Decision], dict[str, Any], list[str]]:
        rsg_decisions, survivors, rsq_decisions, info, warnings = self._layers(ranking, resources)
        rsg_by_id = {d.doc_id: d for d in rsg_decisions}
        rsq_by_id = {d.doc_id: d for d in (rsq_decisions or [])}
        new_rank = {d.id: d.rank for d in survivors.documents}
        eta_q = float(self.eta_q)
        out = [self._merge(rsg_by_id[d.id], rsq_by_id.get(d.id), new_rank.get(d.id), eta_q)
               for d in ranking.documents]
        return out, info, warnings

    @staticmethod
    def _merge(g: Decision, q: Decision | None, survivor_rank: int | None, eta_q: float) -> Decision:
        rsg_ev: dict[str, Any] = {**g.evidence, "status": g.status, "score": g.score, "threshold": g.threshold,
                                  "flagged": bool(g.removed), "reason": g.reason}
        evidence: dict[str, Any] = {"rsg": rsg_ev}
        layer_scores: dict[str, float] = {}
        if g.score is not None and g.threshold is not None:
            layer_scores["RSG"] = normalised_score(g.score, g.threshold, g.removed)
        if g.removed:                                   # flagged by RSG: RSQ never saw it
            evidence["rsq"] = {"status": "skipped", "reason": QUARANTINE_REASON}
            evidence["layer_scores"] = layer_scores
            return Decision(g.doc_id, True, g.status, score=layer_scores.get("RSG"), threshold=COMBINED_THRESHOLD,
                            evidence=evidence, reason=f"removed before RSQ ran: RSG {g.reason}", layer="RSG")
        evidence["survivor_rank"] = survivor_rank
        if q is not None and q.status == "scored" and q.score is not None:
            evidence["rsq"] = {**q.evidence, "status": q.status, "threshold": eta_q, "reason": q.reason}
            layer_scores["RSQ"] = normalised_score(q.score, eta_q, q.removed)
            evidence["layer_scores"] = layer_scores
            reason = q.reason if not g.reason else f"RSQ: {q.reason}; RSG: {g.reason}"
            return Decision(g.doc_id, bool(q.removed), "scored", score=max(layer_scores.values()),
                            threshold=COMBINED_THRESHOLD, evidence=evidence, reason=reason, layer="RSQ")
        if q is None:                                   # fewer than 20 survivors
            evidence["rsq"] = {"status": "unavailable", "reason": SURVIVOR_REASON}
            rsq_note = f"RSQ unavailable: {SURVIVOR_REASON}"
        else:                                           # survivor rank 6+
            evidence["rsq"] = {"status": q.status, "reason": TAIL_REASON}
            rsq_note = f"survivor rank {survivor_rank}: {TAIL_REASON}"
        evidence["layer_scores"] = layer_scores
        reason = f"{g.reason}; {rsq_note}" if g.reason else rsq_note
        return Decision(g.doc_id, False, g.status, score=layer_scores.get("RSG"),
                        threshold=COMBINED_THRESHOLD, evidence=evidence, reason=reason, layer="RSG")

    def inspect(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Inspection:
        self.last_latency_ms_ = {}
        t0 = time.perf_counter()
        decisions, info, warnings = self._run(ranking, resources)
        latency = {"RSG+RSQ": (time.perf_counter() - t0) * 1000.0,
                   **{f"RSQ:{k}": v for k, v in self.last_latency_ms_.items()}}
        return Inspection(decisions, info, warnings, ["RSG", "RSQ"], latency)

    def rsq_layer_decisions(self, ranking: Ranking, resources: "Resources") -> list[Decision]:
        """The raw RSQ decisions (score = S, threshold = η_Q) on the post-quarantine survivors of
        ``ranking``; empty when RSQ is unavailable."""
        return self._layers(ranking, resources)[2] or []

    def calibration_scores(self, clean_rankings: list[Ranking], resources: "Resources",
                           k_ctx: int | None = K_CTX) -> list[float]:
        """``eta_q`` is learned on the RSQ layer's raw S values of the clean rankings (RSQ on the
        post-quarantine survivors); neither RSG's scale nor the combined score is mixed in."""
        return [float(d.score) for r in clean_rankings for d in self.rsq_layer_decisions(r, resources)
                if d.status == "scored" and d.score is not None]
