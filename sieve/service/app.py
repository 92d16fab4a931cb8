"""The FastAPI application of ``sieve serve`` (docs/service.md).

A face over the library: ``/v1/filter`` goes through :class:`sieve.experiment.filtering.DocumentFilter`
(defenses prepared once per spec and parameters by ``prepare_defense``, ledger exclusion, then
``Defense.apply``), ``/v1/audit`` through ``run_audit`` + ``record_flags``, alerts through
:class:`sieve.ledger.Ledger`. Models are loaded once when the service starts (:meth:`ServiceState.warm`);
requests never download anything.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

import sieve.service.schemas as S
from sieve.ledger import LedgerError, LedgerIOError
from sieve.service.auth import bearer_guard
from sieve.service.auth import token_ok as _token_ok
from sieve.service.limits import (
    AdmissionControl,
    BodySizeLimit,
    Cancelled,
    Limits,
    LRUDefenses,
    cancel_of,
    check_params,
    limit_error,
    params_loc,
)
from sieve.service.metrics import Metrics, MetricsMiddleware

if TYPE_CHECKING:
    from sieve.experiment import Experiment
    from sieve.experiment.filtering import DocumentFilter

API_VERSION = "1.0.0"
_FIELD_PREFIX = re.compile(r"^(query|k_ctx|documents\[(\d+)\]\.(\w+)): ")

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": S.ErrorBody, "description": "The body is not UTF-8 JSON."},
    401: {"model": S.ErrorBody, "description": "Missing or wrong bearer token."},
    413: {"model": S.ErrorBody, "description": "Request body over the size limit."},
    422: {"model": S.ErrorBody, "description": "Invalid field, unknown defense/parameter or a limit (names the field)."},
    503: {"model": S.ErrorBody, "description": "At capacity, past the queue deadline, cancelled or shutting down "
                                               "(Retry-After), or the quarantine ledger is unreadable (names it)."},
}


@dataclass
class ServiceState:
    """What the service holds for its lifetime: the experiment over the corpus snapshot loaded at
    start, the document filter (prepared defenses), the ledger, the limits and the token."""

    experiment: "Experiment"
    filter: "DocumentFilter"
    ledger_path: Path
    limits: Limits = field(default_factory=Limits)
    token: Optional[str] = None
    metrics: Metrics = field(default_factory=Metrics)
    audit_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def build(cls, experiment: "Experiment", *, ledger_path: str | Path, quarantine: str = "open_and_confirmed",
              limits: Limits | None = None, token: Optional[str] = None, clean_limit: int | None = None
              ) -> "ServiceState":
        from sieve.experiment.filtering import DocumentFilter
        from sieve.ledger import Ledger

        limits = limits or Limits()
        with Ledger(ledger_path):   # checked at start: a dataset file or a folder is refused (LedgerError)
            pass
        f = DocumentFilter(experiment, ledger_path=ledger_path, quarantine=quarantine, clean_limit=clean_limit)
        f._defenses = LRUDefenses(limits.max_prepared)   # bounded (the --preload defenses are pinned)
        return cls(experiment, f, Path(ledger_path), limits, token or None)

    def warm(self, defenses: list[str]) -> None:
        """Load the models and prepare ``defenses`` now (build, fit, clean calibration), so that
        no request loads a model. A defense that cannot be prepared raises."""
        from sieve.experiment.filtering import _spec_key

        self.experiment.base_index()
        for spec in defenses:
            self.filter.defense(spec)
            if isinstance(self.filter._defenses, LRUDefenses):
                self.filter._defenses.pinned.add(_spec_key(spec, None))

    def missing_models(self, spec: str) -> list[str]:
        """Model roles ``spec`` needs that are not loaded (a request never loads one: 409)."""
        from sieve.registry import DEFENSES

        res = self.experiment.resources
        loaded = {"retriever": getattr(res, "_retriever", None) is not None,
                  "judge": getattr(res, "_judge", None) is not None,
                  "causal_lm": getattr(res, "_lm", None) is not None,
                  "token_encoder": getattr(res, "_token_encoder", None) is not None,
                  "llm": _llm_ready(res)}
        out: list[str] = []
        for part in spec.split("+"):
            try:
                needs = DEFENSES.entry(part.strip()).needs
            except Exception:  # noqa: BLE001 - unknown names are reported elsewhere
                continue
            out += [n for n in needs if not loaded.get(n, True) and n not in out]
        return out


def _llm_ready(res: Any) -> bool:
    """The LLM role needs no load: disabled, an endpoint client (no weights), or already loaded."""
    from sieve.resources import _UNSET

    llm = getattr(res, "_llm", _UNSET)
    if llm is not _UNSET:
        return True
    cfg = getattr(res, "config", None)
    return cfg is None or not cfg.llm.enabled or bool(cfg.llm.resolved_base_url())


def _known_defense(spec: str) -> str | None:
    """The first unknown name of a serial spec, or None when every part is registered."""
    from sieve.registry import DEFENSES

    names = set(DEFENSES.names())
    for part in spec.split("+"):
        if part.strip() not in names:
            return part.strip()
    return None


def _value_error(e: Exception, default_loc: list[Any]) -> HTTPException:
    msg = str(e.args[0]) if e.args else str(e)
    m = _FIELD_PREFIX.match(msg)
    if m:
        loc: list[Any] = ["body", "documents", int(m.group(2)), m.group(3)] if m.group(2) else ["body", m.group(1)]
        return HTTPException(422, detail=[{"loc": loc, "msg": msg, "type": "value_error"}])
    return HTTPException(422, detail=[{"loc": default_loc, "msg": msg, "type": "value_error"}])


def _preparation_error(e: Exception, state: ServiceState, spec: str, params: dict[str, Any]) -> HTTPException:
    """422 for a defense that could not be prepared: one that needs calibration on a corpus without
    clean queries (a store source started without ``--calibration``) names its threshold parameter."""
    ds = state.experiment.dataset
    if getattr(e, "stage", "") == "calibrate" and not ds.queries and not ds.contexts:
        from sieve.experiment import build_defense

        try:
            knob = build_defense(spec, params).threshold_param or "threshold"
        except Exception:  # noqa: BLE001 - the message still says what is missing
            knob = "threshold"
        return HTTPException(422, detail=[{"loc": ["body", "params", knob], "type": "not_calibrated",
                                           "msg": f"defense {spec!r} needs a calibrated threshold and this server's "
                                                  f"corpus ({ds.name}) has no clean queries to calibrate it on: give "
                                                  f"params.{knob}, or restart the server with --calibration DATASET"}])
    msg = str(e)
    return HTTPException(422, detail=[{"loc": params_loc(msg, params), "msg": msg, "type": "value_error"}])


def create_app(state: ServiceState) -> FastAPI:
    """The ASGI app over ``state`` (tests call it directly; ``sieve serve`` runs it under uvicorn)."""
    app = FastAPI(title="Sieve", version=API_VERSION,
                  description="Filter knowledge poisoning out of retrieved documents before generation. "
                              "Document text is untrusted data: it is never rendered or followed.",
                  responses=ERRORS)
    app.state.sieve = state
    guard = [Depends(bearer_guard(state.token))]

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own shape, without echoing the (untrusted, possibly large) input back
        errs = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
        return JSONResponse({"detail": errs}, status_code=422)

    @app.exception_handler(LedgerError)
    async def _ledger_unavailable(request: Request, exc: LedgerError) -> JSONResponse:
        # an unreadable, damaged or vanished ledger: fail loudly, never answer as if nothing were quarantined
        return JSONResponse({"detail": [{"loc": ["ledger"], "msg": str(exc), "type": "ledger_unavailable"}]},
                            status_code=503, headers={"Retry-After": "30"})

    @app.exception_handler(Cancelled)
    async def _cancelled(request: Request, exc: Cancelled) -> JSONResponse:
        # abandoned at a safe point (client gone, shutdown, run deadline): nothing more was done
        state.metrics.admission("cancelled")
        return JSONResponse({"detail": [{"loc": [], "msg": f"request cancelled: {exc.reason}", "type": "cancelled"}]},
                            status_code=503, headers={"Retry-After": "1"})

    @app.get("/healthz", response_model=S.Health, tags=["service"])
    def healthz(authorization: Optional[str] = Header(None, include_in_schema=False)) -> dict[str, Any]:
        """Liveness and what the service loaded (no token needed; the ledger path only with the token)."""
        exp = state.experiment
        authorized = state.token is not None and _token_ok(state.token, authorization)
        return {"status": "ok", "dataset": exp.dataset.name, "documents": len(exp.dataset.documents),
                "retriever": str(getattr(exp.resources.retriever, "model_id", "")),
                "ledger": str(state.ledger_path) if authorized else "", "quarantine": state.filter.quarantine}

    @app.get("/v1/defenses", response_model=S.DefenseList, dependencies=guard, tags=["filter"])
    def defenses() -> dict[str, Any]:
        """Registered defenses and the specs this server has prepared."""
        from sieve.registry import DEFENSES

        return {"defenses": [{"name": e.name, "summary": e.summary, "needs": list(e.needs)} for e in DEFENSES.entries()],
                "prepared": state.filter.prepared()}

    @app.post("/v1/filter", response_model=S.FilterResponse, dependencies=guard, tags=["filter"])
    def filter_documents(req: S.FilterRequest, request: Request) -> dict[str, Any]:
        """Decide on each retrieved document (score, threshold, removed, status, reason, layer,
        compact evidence) and return the final context. Documents quarantined in the ledger
        (same id and content hash) are excluded before the defense runs."""
        from sieve.experiment import DefenseSpecError
        from sieve.experiment.defenses import DefensePreparationError
        from sieve.experiment.filtering import InputDocument

        cancel = cancel_of(request.scope)
        state.limits.check_filter(req.query, [d.text for d in req.documents], req.k_ctx)
        bad = _known_defense(req.defense)
        if bad is not None:
            from sieve.registry import DEFENSES

            raise limit_error(["body", "defense"], f"unknown defense {bad!r}; available: {', '.join(DEFENSES.names())}",
                              kind="value_error")
        check_params(req.defense, req.params)
        from sieve.experiment.filtering import _spec_key

        if state.filter._defenses.get(_spec_key(req.defense, req.params)) is None:
            missing = state.missing_models(req.defense)
            if missing:
                raise HTTPException(409, detail=[{"loc": ["body", "defense"], "type": "not_preloaded",
                                                  "msg": f"defense {req.defense!r} needs {', '.join(missing)}, which "
                                                         "this server did not load at start (requests never load a "
                                                         f"model); restart with --preload {req.defense}"}])
        if state.filter.quarantine != "none" and not state.ledger_path.exists():
            raise LedgerIOError(f"quarantine ledger {state.ledger_path} is missing (moved aside as corrupt, or "
                                "deleted); refusing to filter as if nothing were quarantined", state.ledger_path)
        docs = [InputDocument(d.id, d.text, d.title, d.score) for d in req.documents]
        try:
            cancel.check()                                    # safe point: before preparing the defense
            state.filter.defense(req.defense, req.params)     # cached after the first request
            cancel.check()                                    # safe point: before the defense runs
            out = state.filter.filter(req.query, docs, req.defense, req.params, req.k_ctx)
        except (LedgerError, Cancelled):
            raise
        except DefensePreparationError as e:
            raise _preparation_error(e, state, req.defense, req.params) from None
        except DefenseSpecError as e:
            raise HTTPException(422, detail=[{"loc": params_loc(str(e), req.params), "msg": str(e),
                                              "type": "value_error"}]) from None
        except (ValueError, TypeError) as e:
            if req.params and not _FIELD_PREFIX.match(str(e.args[0]) if e.args else str(e)):
                raise HTTPException(422, detail=[{"loc": params_loc(str(e), req.params), "msg": str(e),
                                                  "type": "value_error"}]) from None
            raise _value_error(e, ["body"]) from None
        state.metrics.filtered(req.defense, len(docs), len(out.removed_ids))
        return out.to_dict()

    @app.post("/v1/audit", response_model=S.AuditResponse, dependencies=guard, tags=["ledger"])
    def audit(req: S.AuditRequest, request: Request) -> dict[str, Any]:
        """RSG audit of the loaded corpus snapshot (clean, or clean + one attack family); flags are
        recorded as open alerts in the quarantine ledger."""
        from sieve.experiment import AUDIT_MODES, ExperimentError, audit_batch, record_flags, run_audit
        from sieve.ledger import Ledger

        if req.mode not in AUDIT_MODES:
            raise limit_error(["body", "mode"], f"mode must be one of {', '.join(AUDIT_MODES)}; got {req.mode!r}",
                              kind="value_error")
        exp = state.experiment
        cancel = cancel_of(request.scope)
        while not state.audit_lock.acquire(timeout=0.1):   # one audit at a time; a waiting one can be cancelled
            cancel.check()
        try:
            cancel.check()                                  # safe point: before the audit
            try:
                report = run_audit(exp, req.condition, mode=req.mode)
            except ExperimentError as e:
                raise limit_error(["body", "condition"], str(e), kind="value_error") from None
            added = 0
            cancel.check()                                  # safe point: nothing recorded for an abandoned audit
            if req.record:
                with Ledger(state.ledger_path, must_exist=True) as led:
                    _, added = record_flags(report, led, exp.dataset.name)
        finally:
            state.audit_lock.release()
        a = report.audit
        flags = [{"id": a.ids[i], "score": round(float(a.score[i]), 4), "branch": report.branches.get(i, "")}
                 for i in report.flagged]
        return {"summary": report.summary, "flags": flags, "recorded": added,
                "batch": audit_batch(report, exp.dataset.name)}

    @app.get("/v1/alerts", response_model=S.AlertList, dependencies=guard, tags=["ledger"])
    def alerts(state_: Optional[str] = Query(None, alias="state", description="open, confirmed, dismissed or rolled_back"),
               detector: Optional[str] = Query(None, description="e.g. rsg or manual"),
               limit: int = Query(500, ge=1, le=10_000, description="At most this many alerts.")) -> dict[str, Any]:
        """Alerts of the quarantine ledger, newest first, and counts per state."""
        from sieve.ledger import STATES, Ledger

        if state_ is not None and state_ not in STATES:
            raise limit_error(["query", "state"], f"state must be one of {', '.join(STATES)}; got {state_!r}",
                              kind="value_error")
        with Ledger(state.ledger_path, must_exist=True) as led:
            rows = led.alerts(state=state_, detector=detector, sort="-created", limit=limit)
            return {"alerts": [_alert(a) for a in rows], "counts": led.counts()}

    @app.post("/v1/quarantine", response_model=S.AlertOut, status_code=201, dependencies=guard, tags=["ledger"])
    def flag(req: S.NewAlert) -> dict[str, Any]:
        """Quarantine one document by hand (an open alert, detector 'manual'): /v1/filter, the
        adapters, ``sieve search`` and the dashboard exclude it until it is dismissed or rolled back."""
        from sieve.ledger import Flag, Ledger, alert_id_for
        from sieve.types import content_hash

        if len(req.text) > state.limits.max_text_chars:
            raise limit_error(["body", "text"], f"text has {len(req.text)} characters; the limit is "
                                                f"{state.limits.max_text_chars}")
        h = content_hash(req.text)
        with Ledger(state.ledger_path, must_exist=True) as led:
            led.add_flags([Flag(req.doc_id, h, None, None, {"who": req.who}, req.reason or f"flagged by {req.who}")],
                          detector="manual")
            return _alert(led.get(alert_id_for(h, "manual", "", "")))

    def _transition(alert_id: str, new_state: str, t: S.Transition) -> dict[str, Any]:
        from sieve.ledger import Ledger, LedgerCorruptError, LedgerError

        with Ledger(state.ledger_path, must_exist=True) as led:
            try:
                led.get(alert_id)
            except (LedgerIOError, LedgerCorruptError):
                raise
            except LedgerError as e:
                raise HTTPException(404, detail=str(e)) from None
            try:
                return _alert(led.transition(alert_id, new_state, t.who, t.why))
            except (LedgerIOError, LedgerCorruptError):
                raise
            except LedgerError as e:
                status = 422 if "reason" in str(e) else 409
                loc = ["body", "why"] if status == 422 else ["path", "alert_id"]
                raise HTTPException(status, detail=[{"loc": loc, "msg": str(e), "type": "ledger"}]) from None

    transition_errors: dict[int | str, dict[str, Any]] = {
        404: {"model": S.ErrorBody, "description": "Unknown alert."},
        409: {"model": S.ErrorBody, "description": "Transition not allowed from the alert's state."}}

    @app.post("/v1/alerts/{alert_id}/confirm", response_model=S.AlertOut, dependencies=guard, tags=["ledger"],
              responses=transition_errors)
    def confirm(alert_id: str, t: S.Transition) -> dict[str, Any]:
        """open → confirmed (the document stays quarantined)."""
        return _transition(alert_id, "confirmed", t)

    @app.post("/v1/alerts/{alert_id}/dismiss", response_model=S.AlertOut, dependencies=guard, tags=["ledger"],
              responses=transition_errors)
    def dismiss(alert_id: str, t: S.Transition) -> dict[str, Any]:
        """open → dismissed (the document is no longer excluded)."""
        return _transition(alert_id, "dismissed", t)

    @app.post("/v1/alerts/{alert_id}/rollback", response_model=S.AlertOut, dependencies=guard, tags=["ledger"],
              responses=transition_errors)
    def rollback(alert_id: str, t: S.Transition) -> dict[str, Any]:
        """confirmed → rolled_back (restores the document); needs a reason in ``why``."""
        return _transition(alert_id, "rolled_back", t)

    @app.get("/metrics", dependencies=guard, tags=["service"],
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text exposition."}})
    def metrics() -> Response:
        """Prometheus metrics: sieve_requests_total, sieve_request_seconds (histogram),
        sieve_documents_total and sieve_removals_total by defense."""
        return Response(state.metrics.render(), media_type=state.metrics.content_type)

    app.add_middleware(AdmissionControl, workers=state.limits.workers, queue=state.limits.queue,
                       deadline_s=state.limits.deadline_s, run_deadline_s=state.limits.run_deadline_s,
                       metrics=state.metrics)   # inside the body limit: bodies are bounded
    app.add_middleware(BodySizeLimit, max_bytes=state.limits.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)  # outermost: 413s are counted too
    return app


def _alert(a: Any) -> dict[str, Any]:
    d = a.to_dict()
    d["evidence"] = {k: v for k, v in (d.get("evidence") or {}).items()
                     if isinstance(v, (str, int, float, bool)) or v is None}
    return d
