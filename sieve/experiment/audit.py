"""Corpus audit: RSG over a snapshot, its report, and its flags in the quarantine ledger.

One library path for ``sieve audit``, the dashboard's Alerts page and the HTTP service
(docs/algorithms.md §4 for RSG; docs/design.md: quarantine is exclusion, never deletion — the
dataset files are not modified).
"""
from __future__ import annotations

import csv
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable


if TYPE_CHECKING:
    from sieve.defenses.rsg import RSGAudit
    from sieve.experiment.snapshots import Experiment, Snapshot
    from sieve.ledger import Ledger

CSV_COLUMNS = ["id", "poison", "D", "p", "I", "T", "score", "flagged", "branch", "eligible_neighbours"]
AUDIT_MODES = ("exact", "ivf", "hnsw", "auto")
AUDIT_ENGINES = ("local", "ray")


@dataclass
class AuditReport:
    """An RSG audit of one snapshot with its summary (the ``rsg_audit.json`` contents). Detection
    metrics against poison labels are :func:`sieve.evaluation.metrics.audit_metrics`."""

    audit: "RSGAudit"
    snapshot: "Snapshot"
    summary: dict[str, Any]
    flagged: list[int] = field(default_factory=list)
    branches: dict[int, str] = field(default_factory=dict)

    @property
    def poison_labels(self) -> dict[str, bool] | None:
        """Poison labels of the snapshot's documents when they are known (an attack condition)."""
        if not self.snapshot.injected:
            return None
        return {d.id: bool(d.poison) for d in self.snapshot.index.documents}

    def rows(self) -> list[dict[str, Any]]:
        """One row per document: id, poison label, D, p, I, T, score, flagged, branch, neighbours."""
        a = self.audit
        poison = self.poison_labels
        counts = a.eligible_counts
        return [{
            "id": doc_id, "poison": "" if poison is None else int(bool(poison.get(doc_id, False))),
            "D": float(a.density[i]), "p": float(a.tail_p[i]), "I": int(a.integrity[i]),
            "T": float(a.topology[i]), "score": float(a.score[i]), "flagged": int(bool(a.flagged[i])),
            "branch": self.branches.get(i, ""), "eligible_neighbours": int(counts[i]),
        } for i, doc_id in enumerate(a.ids)]

    def write(self, out: Path) -> tuple[Path, Path]:
        """Write ``rsg_audit.json`` (summary + flagged rows) and ``rsg_audit.csv`` (every document)."""
        out.mkdir(parents=True, exist_ok=True)
        csv_path = out / "rsg_audit.csv"
        with open(csv_path, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
            w.writeheader()
            w.writerows(self.rows())
        report = dict(self.summary)
        report["flagged"] = [self.audit.row(i).to_dict() for i in self.flagged]
        json_path = out / "rsg_audit.json"
        json_path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        return json_path, csv_path


def run_audit(experiment: "Experiment", condition: str = "clean", *, mode: str = "exact",
              progress: bool = False, snapshot: "Snapshot | None" = None,
              on_progress: Callable[[float, str], None] | None = None, engine: str = "local",
              ray_address: str | None = None) -> AuditReport:
    """RSG over the snapshot of ``condition`` (clean corpus, or clean + one attack family).

    ``engine="local"`` runs in this process; ``engine="ray"`` runs the same audit as a Ray Data
    pipeline (sieve/scale/ray_engine.py) on a local Ray instance or the cluster at ``ray_address``.
    ``mode`` is the neighbour search of sieve/index/knn.py; approximate modes report their sampled
    neighbour recall@16 in the summary."""
    if mode not in AUDIT_MODES:
        raise ValueError(f"audit mode must be one of {', '.join(AUDIT_MODES)}; got {mode!r}")
    if engine not in AUDIT_ENGINES:
        raise ValueError(f"audit engine must be one of {', '.join(AUDIT_ENGINES)}; got {engine!r}")
    from sieve.corpus import corpus_hash
    from sieve.defenses.rsg import RSGParams, audit_corpus

    snap = snapshot if snapshot is not None else experiment.snapshot(condition)
    index = snap.index
    docs = list(index.documents)
    if on_progress:
        on_progress(0.05, f"searching neighbours of {len(docs)} documents ({mode})")
    t0 = time.perf_counter()
    params = RSGParams(mode=mode, progress=progress)
    layout = None
    if engine == "ray":
        from sieve.scale.ray_engine import ray_audit

        audit, layout = ray_audit(index.ids, [d.text for d in docs], index.vectors, params, address=ray_address)
    else:
        audit = audit_corpus(index.ids, [d.text for d in docs], index.vectors, params)
    seconds = time.perf_counter() - t0
    if on_progress:
        on_progress(0.9, "summarising flags")
    flagged = [int(i) for i in audit.flagged.nonzero()[0]]
    branches = {i: audit.row(i).branch for i in flagged}
    counts = Counter(branches.values())
    summary: dict[str, Any] = {
        "dataset": experiment.dataset.name, "dataset_path": str(experiment.dataset.path),
        "condition": snap.condition, "mode": mode, "engine": engine, "knn": audit.knn,
        "neighbour_recall": audit.recall, "documents": len(docs), "injected": len(snap.injected),
        "corpus_hash": corpus_hash(docs), "index_version": index_version(index),
        "seconds": round(seconds, 3), "docs_per_second": round(len(docs) / seconds, 1) if seconds > 0 else None,
        "f_I": audit.f_I, "f_T": audit.f_T, "flags": len(flagged),
        "integrity_flags": counts.get("integrity", 0) + counts.get("both", 0),
        "topology_flags": counts.get("topology", 0) + counts.get("both", 0),
        "params": {k: v for k, v in vars(audit.params).items() if k != "progress"},
    }
    if layout is not None:
        summary["ray"] = layout
    report = AuditReport(audit, snap, summary, flagged, branches)
    if on_progress:
        on_progress(1.0, f"{len(flagged)} flags")
    return report


def index_version(index: Any) -> str:
    """Retriever model and index format of a snapshot (part of an alert's identity)."""
    return f"{index.model_id}/{index.manifest.get('format', '')}"


def record_flags(report: AuditReport, ledger: "Ledger", dataset_name: str) -> tuple[int, int]:
    """Record every RSG flag of ``report`` as an open alert. Returns (flags, newly added); a flag
    already recorded for the same document, snapshot and index is not added twice."""
    from sieve.ledger import Flag

    a = report.audit
    docs = list(report.snapshot.index.documents)
    snapshot_hash = report.summary["corpus_hash"]
    cond = report.snapshot.condition
    from sieve.experiment.explain import explain_audit

    explained = {i: explain_audit(a, i) for i in report.flagged}   # plain reason + priority + hints
    flags = [Flag(a.ids[i], docs[i].hash, float(a.score[i]), a.params.decision_threshold,
                  {**a.row(i).to_dict(), "explanation": explained[i].to_dict()},
                  f"RSG {report.branches.get(i, '')} flag ({cond}): {explained[i].reason}") for i in report.flagged]
    before = len(ledger.alerts(detector="rsg", corpus_hash=snapshot_hash))
    if flags:
        ledger.add_flags(flags, detector="rsg", corpus_id=f"{dataset_name}:{cond}", corpus_hash=snapshot_hash,
                         index_version=report.summary["index_version"])
    after = len(ledger.alerts(detector="rsg", corpus_hash=snapshot_hash))
    return len(flags), after - before
