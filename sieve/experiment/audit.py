"""Corpus audit: RSG over a snapshot, its report, and its flags in the quarantine ledger.

One library path for ``sieve audit``, the dashboard's Alerts page and the HTTP service
(docs/algorithms.md §4 for RSG; docs/design.md: quarantine is exclusion, never deletion — the
dataset files are not modified).

:func:`run_audit` audits a dataset's snapshot; :func:`run_corpus_audit` audits a corpus file of any
size (``sieve audit --corpus``): streamed in chunks, embedded into float16 shards with a manifest
(sieve/scale/shards.py; a killed run resumes from the last shard whose sha256 matches), then RSG on
the memory-mapped shards, locally or on Ray (sieve/scale/ray_engine.py).
"""
from __future__ import annotations

import csv
import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

if TYPE_CHECKING:
    from sieve.defenses.rsg import RSGAudit
    from sieve.experiment.snapshots import Experiment, Snapshot
    from sieve.ledger import Ledger
    from sieve.scale.shards import IngestResult
    from sieve.types import Document

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

    def write(self, out: Path, protected: Sequence[Path] = (), force: bool = False) -> tuple[Path, Path]:
        """Write ``rsg_audit.json`` (summary + flagged rows) and ``rsg_audit.csv`` (every document),
        atomically. A file of that name that an audit did not write is replaced only with ``force``;
        one of ``protected`` (the audited corpus) never (sieve/safe_io.py; ``UnsafeWriteError``)."""
        from sieve.safe_io import atomic_open, check_output, check_output_dir

        check_output_dir(out, protected=[q for q in protected if Path(q).is_dir()], what="--out directory")
        csv_path = check_output(out / "rsg_audit.csv", protected=protected, own=_own_csv, what="audit CSV",
                                force=force)
        json_path = check_output(out / "rsg_audit.json", protected=protected, own=_own_json, what="audit report",
                                 force=force)
        with atomic_open(csv_path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
            w.writeheader()
            w.writerows(self.rows())
        report = dict(self.summary)
        report["flagged"] = [self.audit.row(i).to_dict() for i in self.flagged]
        with atomic_open(json_path, "w") as fh:
            fh.write(json.dumps(report, indent=2, default=str))
        return json_path, csv_path


def _own_csv(path: Path) -> bool:
    """An ``rsg_audit.csv`` written by an audit: its header is CSV_COLUMNS."""
    with open(path, encoding="utf-8") as fh:
        return fh.readline().strip() == ",".join(CSV_COLUMNS)


def _own_json(path: Path) -> bool:
    """An ``rsg_audit.json`` written by an audit: an object with the summary's identifying keys."""
    obj = json.loads(path.read_text(encoding="utf-8"))
    return isinstance(obj, dict) and {"corpus_hash", "flags", "f_I", "flagged"} <= set(obj)


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
    report = _report(audit, snap, docs, experiment.dataset.name, str(experiment.dataset.path), mode, engine,
                     seconds, layout)
    if on_progress:
        on_progress(1.0, f"{len(report.flagged)} flags")
    return report


def index_version(index: Any) -> str:
    """Retriever model and index format of a snapshot (part of an alert's identity)."""
    return f"{index.model_id}/{index.manifest.get('format', '')}"


def snapshot_id_for(source: str, corpus_hash: str, index_version: str) -> str:
    """The id of one audited snapshot: a source (a store URI, or ``dataset:condition``), its corpus hash and
    index version (``S-`` + 12 hex digits of their sha256)."""
    key = "\x1f".join((source, corpus_hash, index_version))
    return "S-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def audit_batch(report: AuditReport, dataset_name: str) -> str:
    """The batch id of an audit's alerts: the report's own ``snapshot_id`` (a store audit), else the id
    of the audited snapshot — dataset, condition, corpus hash and index version, as
    :func:`snapshot_id_for` names store snapshots — so every recorded audit
    (CLI, HTTP service, dashboard) tags its alerts with the batch they came from, and the same
    snapshot audited twice is one batch."""
    return str(report.summary.get("snapshot_id") or snapshot_id_for(
        f"{dataset_name}:{report.snapshot.condition}", str(report.summary["corpus_hash"]),
        str(report.summary["index_version"])))


def record_flags(report: AuditReport, ledger: "Ledger", dataset_name: str, *,
                 rows: "Sequence[int] | None" = None, batch: str | None = None) -> tuple[int, int]:
    """Record every RSG flag of ``report`` as an open alert. Returns (flags, newly added); a flag
    already recorded for the same document, snapshot and index is not added twice. ``rows``: record
    only the flags among these rows (an incremental audit's new documents); ``batch``: the snapshot
    id the alerts came from (``evidence["batch"]``; default :func:`audit_batch`)."""
    from sieve.ledger import Flag

    a = report.audit
    docs = report.snapshot.index.documents          # indexed by flagged row only (a shard corpus is lazy)
    snapshot_hash = report.summary["corpus_hash"]
    cond = report.snapshot.condition
    from sieve.experiment.explain import explain_audit

    only = None if rows is None else {int(r) for r in rows}
    flagged = [i for i in report.flagged if only is None or i in only]
    tag = {"batch": audit_batch(report, dataset_name) if batch is None else batch}
    explained = {i: explain_audit(a, i) for i in flagged}   # plain reason + priority + hints
    flags = [Flag(a.ids[i], docs[i].hash, float(a.score[i]), a.params.decision_threshold,
                  {**a.row(i).to_dict(), "explanation": explained[i].to_dict(), **tag},
                  f"RSG {report.branches.get(i, '')} flag ({cond}): {explained[i].reason}") for i in flagged]
    before = len(ledger.alerts(detector="rsg", corpus_hash=snapshot_hash))
    if flags:
        ledger.add_flags(flags, detector="rsg", corpus_id=f"{dataset_name}:{cond}", corpus_hash=snapshot_hash,
                         index_version=report.summary["index_version"])
    after = len(ledger.alerts(detector="rsg", corpus_hash=snapshot_hash))
    return len(flags), after - before


# ---------------------------------------------------------------------------------------------
class ShardDocuments(Sequence["Document"]):
    """The documents of a shard directory as a lazy sequence (one :class:`Document` per access:
    a 1M-row corpus is not copied into a million objects to print ten flags)."""

    def __init__(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self.ids, self.texts = ids, texts

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: Any) -> Any:
        from sieve.types import Document

        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Document(str(self.ids[i]), self.texts[i])

    def __iter__(self) -> Iterator["Document"]:
        from sieve.types import Document

        for i, t in zip(self.ids, self.texts):
            yield Document(str(i), t)


@dataclass
class ShardIndex:
    """What an audit reads of an index, for a shard directory: ids, documents, vectors, model."""

    ids: list[str]
    documents: ShardDocuments
    vectors: Any
    model_id: str
    manifest: dict[str, Any]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class CorpusSnapshot:
    """A corpus audited from its shards (``sieve audit --corpus``): condition ``corpus``, no
    injected documents, no poison labels."""

    index: ShardIndex
    condition: str = "corpus"
    injected: tuple = ()

    @property
    def documents(self) -> ShardDocuments:
        return self.index.documents

    def __len__(self) -> int:
        return len(self.index)


def run_corpus_audit(corpus: Path, *, workdir: Path | None, embedder: Callable[[], Any] | None, model_id: str,
                     mode: str = "auto", engine: str = "local", ray_address: str | None = None,
                     chunk_rows: int | None = None, progress: bool = False,
                     note: Callable[[str], None] | None = None) -> tuple[AuditReport, "IngestResult | None"]:
    """RSG over a corpus of any size: ``corpus`` is a JSONL/Parquet file (``id``, ``text``) or a
    complete shard directory.

    A file is streamed in chunks of ``chunk_rows`` rows, each chunk embedded with the retriever
    (``embedder`` is a zero-argument factory, called once here or once per Ray actor) and written
    as one float16 shard under ``workdir`` with the manifest (sieve/scale/shards.py). Run again, the
    same call verifies the existing shards' sha256 and continues after the last good one (a shard
    that fails is recomputed, with everything after it). RSG then reads the memory-mapped shards.
    ``engine="ray"`` embeds on Ray actors and runs the audit as the Ray pipeline. ``note`` receives
    one-line messages (resume, verification, recomputation)."""
    if mode not in AUDIT_MODES:
        raise ValueError(f"audit mode must be one of {', '.join(AUDIT_MODES)}; got {mode!r}")
    if engine not in AUDIT_ENGINES:
        raise ValueError(f"audit engine must be one of {', '.join(AUDIT_ENGINES)}; got {engine!r}")
    from contextlib import nullcontext

    from sieve.scale.shards import CHUNK_ROWS, IngestError, ingest, open_shards

    say = note or (lambda _m: None)
    corpus = Path(corpus)
    if not corpus.exists():
        raise IngestError(f"{corpus}: corpus not found")
    session: Any = nullcontext()
    if engine == "ray":
        from sieve.scale.ray_engine import ray_session

        session = ray_session(ray_address)
    ing = None
    embed_stage: dict[str, Any] = {}
    with session:
        if corpus.is_dir():
            shard_dir = corpus
            shards = open_shards(shard_dir, verify=True)
            say(f"shards     {shard_dir}: {len(shards.manifest['shards'])} shards, sha256 verified")
        else:
            if workdir is None or embedder is None:
                raise ValueError("run_corpus_audit: a corpus file needs a workdir and an embedder factory")
            shard_dir = Path(workdir)
            embed_fn = embed_chunks = None
            if engine == "ray":
                from sieve.scale.ray_engine import ray_embed_chunks

                def embed_chunks(chunks: Any) -> Any:
                    return ray_embed_chunks(chunks, embedder, stats=embed_stage)
            else:
                model: list[Any] = []

                def embed_fn(texts: list[str]) -> Any:
                    from sieve.index.embedding import embed_documents
                    from sieve.types import Document

                    if not model:
                        model.append(embedder())
                    return embed_documents([Document(str(i), t) for i, t in enumerate(texts)], model[0], None,
                                           False, "embedding")
            ing = ingest(corpus, shard_dir, embed_fn, model_id, chunk_rows=chunk_rows or CHUNK_ROWS,
                         progress=progress, embed_chunks=embed_chunks, note=say)
            shards = open_shards(shard_dir, verify=False)        # ingest verified or wrote every shard
        report = _audit_shards(corpus, shards, mode, engine, ray_address, progress)
    if ing is not None:
        report.summary["ingest"] = {"workdir": str(shard_dir), "shards": ing.shards, "rows": ing.rows,
                                    "resumed_rows": ing.resumed_rows, "verified_shards": ing.verified_shards,
                                    "recomputed_shards": ing.dropped_shards, "embed_seconds": round(ing.seconds, 3),
                                    "embed_docs_per_second": (round(ing.docs_per_second, 1)
                                                              if ing.rows > ing.resumed_rows else None)}
    if embed_stage and "ray" in report.summary:
        report.summary["ray"]["stages"].insert(0, embed_stage)
    return report, ing


def _audit_shards(corpus: Path, shards: Any, mode: str, engine: str, ray_address: str | None,
                  progress: bool) -> AuditReport:
    from sieve.defenses.rsg import RSGParams, audit_corpus

    docs = ShardDocuments(shards.ids, shards.texts)
    index = ShardIndex(shards.ids, docs, shards.vectors, str(shards.manifest.get("model_id", "")),
                       {"format": shards.manifest.get("format", "")})
    snap = CorpusSnapshot(index)
    params = RSGParams(mode=mode, progress=progress)
    t0 = time.perf_counter()
    layout = None
    if engine == "ray":
        from sieve.scale.ray_engine import ray_audit

        audit, layout = ray_audit(shards.ids, shards.texts, shards.vectors, params, address=ray_address)
    else:
        audit = audit_corpus(shards.ids, shards.texts, shards.vectors, params)
    seconds = time.perf_counter() - t0
    name = corpus.stem if corpus.is_file() else corpus.name
    return _report(audit, snap, docs, name, str(corpus), mode, engine, seconds, layout)


def _report(audit: "RSGAudit", snap: Any, docs: Sequence["Document"], name: str, path: str, mode: str,
            engine: str, seconds: float, layout: dict[str, Any] | None) -> AuditReport:
    """The report and its summary (the ``rsg_audit.json`` fields), one definition for both entries."""
    from sieve.corpus import corpus_hash

    flagged = [int(i) for i in audit.flagged.nonzero()[0]]
    branches = {i: audit.row(i).branch for i in flagged}
    counts = Counter(branches.values())
    summary: dict[str, Any] = {
        "dataset": name, "dataset_path": path,
        "condition": snap.condition, "mode": mode, "engine": engine, "knn": audit.knn,
        "neighbour_recall": audit.recall, "documents": len(docs), "injected": len(snap.injected),
        "corpus_hash": corpus_hash(docs), "index_version": index_version(snap.index),
        "seconds": round(seconds, 3), "docs_per_second": round(len(docs) / seconds, 1) if seconds > 0 else None,
        "f_I": audit.f_I, "f_T": audit.f_T, "flags": len(flagged),
        "integrity_flags": counts.get("integrity", 0) + counts.get("both", 0),
        "topology_flags": counts.get("topology", 0) + counts.get("both", 0),
        "params": {k: v for k, v in vars(audit.params).items() if k != "progress"},
    }
    if layout is not None:
        summary["ray"] = layout
    return AuditReport(audit, snap, summary, flagged, branches)
