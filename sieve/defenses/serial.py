"""``rsg_rsq`` — RAGSieve serial deployment RSG → RSQ (ALGORITHMS.md §5, paper Table 3).

1. Quarantine: drop RSG-flagged documents from the saved ranking and renumber ranks 1.. (§5 step 1).
2. At least 20 survivors are required; otherwise RSQ is ``unavailable`` on the survivors and the
   reason names the remedy (retrieve deeper, or re-retrieve with RSG-flagged documents excluded).
3. RSQ on the survivors: new ranks 1–5 against survivor ranks 6–20. RSQ decisions made on the
   pre-quarantine ranking are never reused.
4. A single refill to ``k_ctx`` from the survivors in rank order, without rescoring.

Each original document gets one decision: layer ``"RSG"`` for quarantined documents, layer
``"RSQ"`` for survivors (``evidence["survivor_rank"]`` gives the renumbered rank).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sieve.defenses.base import Defense, finalize_context
from sieve.defenses.rsg import RSG, RSGParams
from sieve.defenses.rsq import CONTEXT_SIZE, DECISION_THRESHOLD, RSQ
from sieve.registry import DEFENSES
from sieve.types import Decision, DefenseResult, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources

SURVIVOR_REASON = ("RSQ needs at least 20 documents after RSG quarantine; retrieve deeper (depth ≥ 20 + "
                   "quarantined) or re-retrieve from the index with RSG-flagged documents excluded")


@DEFENSES.register(
    "rsg_rsq",
    summary="RAGSieve serial deployment: RSG corpus quarantine, then RSQ on the re-ranked survivors.",
    paper="RAGSieve §5 (serial RSG → RSQ)",
    needs=("retriever", "lm", "token_encoder"),
)
class SerialRSGRSQ(Defense):
    """RSG → RSQ serial deployment (§5). Parameters: ``eta_q`` (RSQ threshold) and any
    :class:`~sieve.defenses.rsg.RSGParams` field (``mode``, ``progress`` …)."""

    name = "rsg_rsq"
    paper = "RAGSieve (RS:filtering.py, README.md)"
    needs = ("retriever", "lm", "token_encoder")
    corpus_time = True
    threshold_param = "eta_q"

    def __init__(self, eta_q: float = DECISION_THRESHOLD, trace_tokens: bool = True, **params: Any) -> None:
        unknown = set(params) - set(RSGParams.__dataclass_fields__)
        if unknown:
            raise ValueError(f"rsg_rsq: unknown parameter(s) {sorted(unknown)}")
        super().__init__(eta_q=eta_q, trace_tokens=trace_tokens, **params)

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

    def _run(self, ranking: Ranking, resources: "Resources") -> tuple[list[Decision], dict[str, Any], list[str]]:
        warnings: list[str] = []
        rsg_decisions = self._rsg().decisions_for(ranking)
        if rsg_decisions and all(d.status == "unavailable" for d in rsg_decisions):
            warnings.append("rsg_rsq: RSG not fitted; RSQ runs on the unquarantined ranking")
        quarantined = {d.doc_id for d in rsg_decisions if d.removed}
        survivors = ranking.without(quarantined)
        info: dict[str, Any] = {"quarantined_document_ids": [d.id for d in ranking.documents if d.id in quarantined],
                                "survivors": len(survivors.documents)}
        if len(survivors.documents) < CONTEXT_SIZE:
            msg = (f"rsg_rsq: RSQ unavailable for query {ranking.query_id or ranking.query!r}: "
                   f"{len(survivors.documents)} survivors after quarantining {len(quarantined)}; {SURVIVOR_REASON}")
            warnings.append(msg)
            rsq_decisions = [Decision(d.id, False, "unavailable", threshold=float(self.eta_q),
                                      reason=SURVIVOR_REASON, layer="RSQ") for d in survivors.documents]
        else:
            rsq = self._rsq()
            rsq_decisions = rsq.score_ranking(survivors, resources)   # computed on the new ranks only
            self.last_latency_ms_ = getattr(rsq, "last_latency_ms_", {})
        new_rank = {d.id: d.rank for d in survivors.documents}
        rsg_by_id = {d.doc_id: d for d in rsg_decisions}
        by_id: dict[str, Decision] = {d.doc_id: d for d in rsg_decisions if d.removed}
        for d in rsq_decisions:
            d.evidence["survivor_rank"] = new_rank[d.doc_id]
            rsg_d = rsg_by_id.get(d.doc_id)
            if rsg_d is not None and rsg_d.score is not None:
                d.evidence["rsg_score"] = rsg_d.score
            by_id[d.doc_id] = d
        info["rsq_flagged"] = [d.doc_id for d in rsq_decisions if d.removed]
        return [by_id[d.id] for d in ranking.documents], info, warnings

    def inspect(self, ranking: Ranking, resources: "Resources") -> list[Decision]:
        return self._run(ranking, resources)[0]

    def calibrate(self, clean_rankings: list[Ranking], resources: "Resources",
                  clean_budget: float = 0.05) -> "SerialRSGRSQ":
        """Calibrate ``eta_q`` on the RSQ scores only (RSG's fixed 0.5 scale is not mixed in)."""
        RSQ.calibrate(_RSQView(self), clean_rankings, resources, clean_budget)
        self.threshold_ = self.eta_q
        return self

    def apply(self, ranking: Ranking, resources: "Resources", k_ctx: int = 5) -> DefenseResult:
        t0 = time.perf_counter()
        decisions, info, warnings = self._run(ranking, resources)
        elapsed = (time.perf_counter() - t0) * 1000.0
        result = finalize_context(self.label, ranking, decisions, k_ctx, layers_run=["RSG", "RSQ"],
                                  latency_ms={"total": elapsed}, info=info)
        result.warnings = warnings + result.warnings
        return result


class _RSQView(RSQ):
    """Adapter so :meth:`Defense.calibrate` sees only the RSQ-layer scores of a serial run."""

    def __init__(self, serial: SerialRSGRSQ) -> None:  # noqa: D107
        self._serial = serial
        super().__init__(eta_q=serial.eta_q, trace_tokens=False)

    def inspect(self, ranking: Ranking, resources: "Resources") -> list[Decision]:
        return [d for d in self._serial.inspect(ranking, resources) if d.layer == "RSQ"]

    def set_params(self, **params: Any) -> "_RSQView":
        super().set_params(**params)
        self._serial.set_params(**params)
        return self
