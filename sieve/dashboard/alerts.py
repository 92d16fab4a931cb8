"""Corpus audit and triage for the Corpus and Alerts pages (RSG via :mod:`sieve.experiment.audit`)."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from sieve.dashboard.safe import snippet

if TYPE_CHECKING:
    import pandas as pd

    from sieve.experiment import AuditReport, Experiment


def audit(experiment: "Experiment", condition: str) -> "AuditReport":
    """RSG over the condition's snapshot (:func:`sieve.experiment.run_audit`, the same path as ``sieve audit``)."""
    from sieve.experiment import run_audit

    return run_audit(experiment, condition)


def audit_table(report: "AuditReport") -> "pd.DataFrame":
    """One row per document of the audited snapshot (the ``rsg_audit.csv`` columns) plus a text snippet."""
    import pandas as pd

    df = pd.DataFrame(report.rows())
    df["text"] = [snippet(d.text, 90) for d in report.snapshot.index.documents]
    return df


def record_audit_flags(report: "AuditReport", dataset_name: str, ledger: Any) -> tuple[int, int]:
    """Record RSG flags as open alerts (:func:`sieve.experiment.record_flags`). Returns (flags, newly added)."""
    from sieve.experiment import record_flags

    return record_flags(report, ledger, dataset_name)


def open_ledger(path: str | os.PathLike[str]) -> Any:
    from sieve.ledger import Ledger

    return Ledger(path)


def alerts_frame(alerts: Sequence[Any]) -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame([{"alert": a.alert_id, "doc_id": a.doc_id, "detector": a.detector,
                          "score": None if a.score is None else round(float(a.score), 4), "state": a.state,
                          "reason": a.reason, "corpus": a.corpus_id,
                          "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(a.created_at))}
                         for a in alerts])


def alerts_csv(ledger: Any, **filters: Any) -> bytes:
    """CSV bytes of the filtered alerts, written by :meth:`sieve.ledger.Ledger.export_csv`."""
    with tempfile.TemporaryDirectory(prefix="sieve-alerts-") as tmp:
        path = Path(tmp) / "alerts.csv"
        ledger.export_csv(path, **filters)
        return path.read_bytes()
