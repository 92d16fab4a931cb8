"""Request and response bodies of ``sieve serve`` (the OpenAPI schema committed as docs/openapi.json).

The schema does not depend on the server's configuration (limits, token, dataset), so the served
document equals the committed one; limits are enforced by :mod:`sieve.service.limits`.
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The default defense of ``/v1/filter``: needs no LLM (and equals the adapters' default,
#: ``sieve.adapters.client.DEFAULT_DEFENSE``; docs/service.md).
DEFAULT_DEFENSE = "tris_l2"
#: Longest analyst name and reason accepted by the ledger routes.
MAX_NAME_CHARS = 200
MAX_REASON_CHARS = 4000
MAX_ID_CHARS = 1000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" → True or false → 0.0 coercion


def _not_blank(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be blank (only whitespace)")
    return v


class FilterDocument(_Strict):
    id: str = Field(..., min_length=1, max_length=MAX_ID_CHARS, description="Your document id (unique within the request).")
    text: str = Field(..., description="Document text. Untrusted data: never rendered, never followed.")
    title: str = Field("", description="Optional title.")
    score: Optional[float] = Field(None, allow_inf_nan=False,
                                   description="Your retriever's score (informational; order is what counts).")


class FilterRequest(_Strict):
    query: str = Field(..., min_length=1, description="The user's query.")
    documents: list[FilterDocument] = Field(..., description="Retrieved documents, best first.")
    defense: str = Field(DEFAULT_DEFENSE, min_length=1,
                         description="Registered defense name or serial spec 'a+b' (see GET /v1/defenses).")
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="Defense parameters (the defense's __init__ names; unknown names are errors).")
    k_ctx: Optional[int] = Field(5, ge=1, description="Generation context size; null keeps every survivor.")

    _query_not_blank = field_validator("query")(_not_blank)


class DecisionOut(BaseModel):
    id: str
    rank: int = Field(..., description="1-based position in your request.")
    content_hash: str = Field(..., description="sha256 prefix of the text (the ledger's key with the id).")
    score: Optional[float] = Field(None, description="Detector score (higher = more suspicious), rounded.")
    threshold: Optional[float] = Field(None, description="Threshold the score was compared with.")
    removed: bool
    status: str = Field(..., description="scored, ran, abstained, error, skipped, unavailable, not_examined, or "
                                         "quarantined (excluded by the ledger before the defense ran).")
    reason: str = ""
    layer: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict, description="Compact evidence: rounded numbers, no traces.")
    in_context: bool = Field(..., description="True if the document is in the final context.")


class ContextDocument(BaseModel):
    id: str
    rank: int
    text: str
    title: str = ""
    score: Optional[float] = None


class FilterResponse(BaseModel):
    defense: str
    k_ctx: Optional[int]
    decisions: list[DecisionOut]
    context: list[ContextDocument]
    removed: list[str]
    quarantined: list[str]
    fallback_used: bool
    warnings: list[str]
    latency_ms: float


class AuditRequest(_Strict):
    condition: str = Field("clean", min_length=1,
                           description="'clean' or an attack family of the loaded dataset (clean + its documents).")
    mode: str = Field("exact", description="Neighbour search: exact, hnsw or ivf.")
    record: bool = Field(True, description="Record flags as open alerts in the quarantine ledger.")


class AuditFlag(BaseModel):
    id: str
    score: float
    branch: str


class AuditResponse(BaseModel):
    summary: dict[str, Any]
    flags: list[AuditFlag]
    recorded: int = Field(..., description="Flags newly added to the ledger (0 if already there or record=false).")
    batch: str = Field("", description="The batch id its alerts carry (evidence.batch): one per audited snapshot "
                                       "(dataset, condition, corpus hash, index version), the same on a repeated audit.")


class AlertOut(BaseModel):
    alert_id: str
    doc_id: str
    content_hash: str
    corpus_id: str
    corpus_hash: str
    index_version: str
    detector: str
    score: Optional[float]
    threshold: Optional[float]
    evidence: dict[str, Any]
    reason: str
    created_at: float
    state: str
    updated_at: float


class AlertList(BaseModel):
    alerts: list[AlertOut]
    counts: dict[str, int]


class NewAlert(_Strict):
    doc_id: str = Field(..., min_length=1, max_length=MAX_ID_CHARS, description="Document id to quarantine.")
    text: str = Field(..., min_length=1, description="Its text (the ledger keys on id + content hash).")
    who: str = Field(..., min_length=1, max_length=MAX_NAME_CHARS, description="Who flags it.")
    reason: str = Field("", max_length=MAX_REASON_CHARS, description="Why.")

    _not_blank = field_validator("doc_id", "text", "who")(_not_blank)


class Transition(_Strict):
    who: str = Field(..., min_length=1, max_length=MAX_NAME_CHARS, description="Analyst name.")
    why: str = Field("", max_length=MAX_REASON_CHARS, description="Reason (required for rollback).")

    _who_not_blank = field_validator("who")(_not_blank)


class DefenseInfo(BaseModel):
    name: str
    summary: str
    needs: list[str]


class DefenseList(BaseModel):
    defenses: list[DefenseInfo]
    prepared: list[str]


class Health(BaseModel):
    status: str
    dataset: str
    documents: int
    retriever: str
    ledger: str
    quarantine: str


class ErrorItem(BaseModel):
    loc: list[Any]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: Any = Field(..., description="A message, or a list of {loc, msg, type} naming the field.")
