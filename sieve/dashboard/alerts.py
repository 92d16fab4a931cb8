"""Corpus audit and triage for the Corpus and Alerts pages (RSG via :mod:`sieve.experiment.audit`)."""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from sieve.dashboard.safe import snippet
from sieve.ledger import STATE_WORDING

if TYPE_CHECKING:
    import pandas as pd

    from sieve.experiment import AuditReport, Experiment


def audit(experiment: "Experiment", condition: str, on_progress: Any = None) -> "AuditReport":
    """RSG over the condition's snapshot (:func:`sieve.experiment.run_audit`, the same path as
    ``sieve audit``); ``on_progress(fraction, message)`` drives a progress bar."""
    from sieve.experiment import run_audit

    return run_audit(experiment, condition, on_progress=on_progress)


def audit_table(report: "AuditReport") -> "pd.DataFrame":
    """One row per document of the audited snapshot (the ``rsg_audit.csv`` columns) plus a text snippet."""
    import pandas as pd

    df = pd.DataFrame(report.rows())
    df["text"] = [snippet(d.text, 90) for d in report.snapshot.index.documents]
    return df


def _audit_help() -> dict[str, str]:
    from sieve.experiment.explain import TERMS

    return {
        "id": "The document id in the corpus (attack documents start with 'attack:').",
        "poison": "1 when the document is one of this snapshot's attack documents (known only in the demo and in "
                  "evaluation data), 0 when clean, blank when unknown.",
        "D": TERMS["D"], "p": TERMS["p"], "I": TERMS["I"], "T": TERMS["T"], "score": TERMS["score"],
        "flagged": "1 when RSG flags the document for quarantine (score ≥ 0.5), else 0.",
        "branch": "Which evidence flagged it: topology (a dense, rare neighbourhood: D, p, T), integrity (mixed "
                  "writing systems: I), or both.",
        "eligible_neighbours": "Neighbours with retriever similarity ≥ 0.85 that count for D (count). More "
                               "neighbours = stronger density evidence.",
        "text": "The first characters of the document (shown as plain text).",
    }


#: Help for every column of the RSG audit table (Corpus & index page): what it measures, its range
#: and which direction is suspicious.
AUDIT_COLUMN_HELP: dict[str, str] = _audit_help()


def record_audit_flags(report: "AuditReport", dataset_name: str, ledger: Any) -> tuple[int, int]:
    """Record RSG flags as open alerts (:func:`sieve.experiment.record_flags`). Returns (flags, newly added)."""
    from sieve.experiment import record_flags

    return record_flags(report, ledger, dataset_name)


def open_ledger(path: str | os.PathLike[str]) -> Any:
    from sieve.ledger import Ledger

    return Ledger(path)


#: Queue orders offered on the Alerts page (label → key of :func:`sorted_alerts`).
SORTS = {"priority (highest first)": "-priority", "priority (lowest first)": "priority",
         "newest first": "-created", "oldest first": "created", "document id": "doc"}


def priority(alert: Any) -> float:
    """The alert's triage priority (:func:`sieve.experiment.explain.alert_explanation`)."""
    from sieve.experiment.explain import alert_explanation

    return alert_explanation(alert.evidence or {}).priority


def sorted_alerts(alerts: Sequence[Any], sort: str = "-priority") -> list[Any]:
    """Alerts ordered for triage: by the continuous priority (RSG's own score saturates at 1.0),
    creation time or document id; ties broken by alert id so the order is stable."""
    if sort in ("-priority", "priority"):
        sign = -1.0 if sort == "-priority" else 1.0
        return sorted(alerts, key=lambda a: (sign * priority(a), a.alert_id))
    if sort in ("-created", "created"):
        return sorted(alerts, key=lambda a: ((-1 if sort == "-created" else 1) * a.created_at, a.alert_id))
    return sorted(alerts, key=lambda a: (a.doc_id, a.alert_id))


def plain_reason(alert: Any) -> str:
    """The flag's reason in words (stored explanation, else recomputed from the evidence)."""
    from sieve.experiment.explain import alert_explanation

    ex = alert_explanation(alert.evidence or {})
    return ex.reason if ex.priority > 0 else alert.reason


def alerts_frame(alerts: Sequence[Any]) -> "pd.DataFrame":
    """The triage queue as a table: priority, document, state, branch, plain reason, hint count, the
    detector, the alert id and the batch it came from."""
    import pandas as pd

    from sieve.experiment.explain import alert_explanation

    rows = []
    for a in alerts:
        ex = alert_explanation(a.evidence or {})
        rows.append({"priority": round(ex.priority, 3), "doc_id": a.doc_id, "state": a.state,
                     "branch": ex.branch or str((a.evidence or {}).get("branch", "")),
                     "reason": ex.reason if ex.priority > 0 else a.reason,
                     "false-positive hints": len(ex.hints), "detector": a.detector, "alert": a.alert_id,
                     "batch": batch_label(a), "corpus": a.corpus_id,
                     "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(a.created_at))})
    return pd.DataFrame(rows)


def bulk_transition(ledger: Any, alert_ids: Sequence[str], new_state: str, who: str, why: str) -> tuple[int, list[str]]:
    """Apply one transition to several alerts; returns (moved, errors) — alerts whose state does not
    allow the move are skipped with a message."""
    from sieve.ledger import LedgerError

    moved, errors = 0, []
    for aid in alert_ids:
        try:
            ledger.transition(aid, new_state, who, why)
            moved += 1
        except LedgerError as e:
            errors.append(str(e))
    return moved, errors


def find_document_text(ds: Any, doc_id: str) -> str | None:
    """The text of ``doc_id`` in the dataset's corpus or any attack family (None when absent)."""
    try:
        return ds.doc_by_id(doc_id).text
    except KeyError:
        pass
    for fam in ds.attack_families():
        hit = next((d for d in ds.attack_documents(fam) if d.id == doc_id), None)
        if hit is not None:
            return hit.text
    return None


def labels_key(labels: Any) -> str:
    """A short stable digest of widget option labels (a widget key that changes when a label does)."""
    import hashlib

    return hashlib.sha1("\n".join(labels).encode("utf-8")).hexdigest()[:10]


def batch_label(alert: Any) -> str:
    """The audit batch an alert came from. Every recorded audit tags its alerts with the snapshot id it
    audited (``evidence["batch"]``, :func:`sieve.experiment.audit_batch`): that id, then the detector,
    the corpus and when; an alert without one (a hand-made flag, a ledger older than batch ids): the
    detector, the corpus and when (every flag of one recorded audit shares them)."""
    when = time.strftime('%Y-%m-%d %H:%M', time.localtime(alert.created_at))
    batch = (alert.evidence or {}).get("batch")
    if batch:
        return f"batch {batch} · {alert.detector} on {alert.corpus_id} · {when}"
    return f"{alert.detector} on {alert.corpus_id} · {when}"


def batches(alerts: Sequence[Any]) -> list[str]:
    """The distinct batches of ``alerts`` (:func:`batch_label`), newest first."""
    newest: dict[str, float] = {}
    for a in alerts:
        label = batch_label(a)
        newest[label] = max(newest.get(label, 0.0), float(a.created_at))
    return sorted(newest, key=lambda k: (-newest[k], k))


#: Columns of the Alerts page's CSV export: what the triage list shows, in its order.
TRIAGE_EXPORT_COLUMNS = ("alert_id", "doc_id", "state", "priority", "detector", "detector_score", "threshold",
                         "reason", "false_positive_hints", "batch", "corpus_id", "created", "updated")


def triage_csv(alerts: Sequence[Any]) -> bytes:
    """CSV bytes of the triage list as shown: id, state, priority (the score the list shows, RSG's own
    score saturates at 1.0 and is kept as ``detector_score``), the plain reason and the batch, in the
    list's order."""
    import csv
    import io

    from sieve.experiment.explain import alert_explanation

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(TRIAGE_EXPORT_COLUMNS)
    stamp = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))  # noqa: E731
    for a in alerts:
        ex = alert_explanation(a.evidence or {})
        w.writerow([a.alert_id, a.doc_id, a.state, f"{ex.priority:.3f}", a.detector,
                    "" if a.score is None else f"{float(a.score):.3f}",
                    "" if a.threshold is None else f"{float(a.threshold):.3f}",
                    ex.reason if ex.priority > 0 else a.reason, len(ex.hints), batch_label(a), a.corpus_id,
                    stamp(a.created_at), stamp(a.updated_at)])
    return buf.getvalue().encode("utf-8")


def alerts_csv(ledger: Any, **filters: Any) -> bytes:
    """CSV bytes of the filtered alerts, written by :meth:`sieve.ledger.Ledger.export_csv`."""
    with tempfile.TemporaryDirectory(prefix="sieve-alerts-") as tmp:
        path = Path(tmp) / "alerts.csv"
        ledger.export_csv(path, **filters)
        return path.read_bytes()


#: One wording per ledger state, used wherever a page shows what the ledger does to a document
#: (defined once in :data:`sieve.ledger.STATE_WORDING`).
LEDGER_WORDING = STATE_WORDING


def ledger_states(ledger: Any) -> dict[str, str]:
    """Document id → the state of its most recently updated alert."""
    out: dict[str, tuple[float, str]] = {}
    for a in ledger.alerts():
        if a.doc_id not in out or a.updated_at >= out[a.doc_id][0]:
            out[a.doc_id] = (a.updated_at, a.state)
    return {k: v[1] for k, v in out.items()}
