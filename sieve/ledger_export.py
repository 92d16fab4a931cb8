"""CSV export of the quarantine ledger's alerts (``sieve ledger export``; sieve/ledger.py) and the JSON
encoding of alert evidence.

The header (:data:`EXPORT_COLUMNS`) identifies a file written by Sieve, so a later export may
replace it (:func:`is_ledger_export`); the ledger's own files are never an export's target.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, Callable

#: Columns of :meth:`Ledger.export_csv` (the header identifies an export written by Sieve).
EXPORT_COLUMNS = ["alert_id", "doc_id", "content_hash", "corpus_id", "corpus_hash", "index_version", "detector",
                  "score", "threshold", "state", "reason", "created_at", "updated_at", "evidence"]


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def is_ledger_export(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a CSV written by :meth:`Ledger.export_csv` (safe to replace)."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return next(csv.reader([fh.readline()]), []) == EXPORT_COLUMNS
    except (OSError, UnicodeDecodeError, csv.Error):
        return False


class CsvExport:
    """The export method of :class:`~sieve.ledger.Ledger` (it provides ``alerts`` and ``files``)."""

    alerts: Callable[..., list[Any]]          # provided by Ledger
    files: Callable[[], list[Path]]

    def export_csv(self, path: str | os.PathLike[str], **filters: Any) -> int:
        """Write the alerts (filters as in :meth:`alerts`) to CSV; evidence as JSON. Returns the row count."""
        from sieve.safe_io import atomic_open, check_output

        rows = self.alerts(**filters)
        p = check_output(path, force=True, protected=self.files(), what="ledger export")
        with atomic_open(p, newline="") as fh:
            w = csv.writer(fh)
            w.writerow(EXPORT_COLUMNS)
            for a in rows:
                d = a.to_dict()
                d["evidence"] = json.dumps(d["evidence"], default=_json_default)
                w.writerow([d[c] for c in EXPORT_COLUMNS])
        return len(rows)
