"""``sieve audit`` (RSG corpus audit → report + quarantine ledger) and ``sieve ledger ...``.

RSG (ALGORITHMS.md §4) scans the whole snapshot: the clean corpus, or the clean corpus plus every
document of one attack family (``--with-attack``). Flags go to the quarantine ledger (DESIGN.md:
quarantine is never deletion; the dataset files are not modified).
"""
from __future__ import annotations

import csv
import getpass
import json
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.data import _CONFIG_HELP, _DATASET_HELP, _RETRIEVER_HELP, _config, _open, plain

if TYPE_CHECKING:
    from sieve.defenses.rsg import RSGAudit
    from sieve.ledger import Ledger

ledger_app = typer.Typer(help="Review the quarantine ledger: list, confirm, dismiss, roll back, export alerts.",
                         no_args_is_help=True)
app.add_typer(ledger_app, name="ledger")

CSV_COLUMNS = ["id", "poison", "D", "p", "I", "T", "score", "flagged", "branch", "eligible_neighbours"]


def audit_rows(audit: "RSGAudit", poison: dict[str, bool] | None = None) -> list[dict[str, Any]]:
    """One CSV row per document: id, poison label (if known), D, p, I, T, score, flagged, branch,
    eligible neighbour count."""
    counts = audit.eligible_counts
    rows = []
    for i, doc_id in enumerate(audit.ids):
        integ, topo = bool(audit.integrity[i]), bool(audit.topology[i] >= 0.5)
        flagged = bool(audit.flagged[i])
        branch = ("both" if integ and topo else "integrity" if integ else "topology") if flagged else ""
        rows.append({
            "id": doc_id,
            "poison": "" if poison is None else int(bool(poison.get(doc_id, False))),
            "D": float(audit.density[i]), "p": float(audit.tail_p[i]), "I": int(audit.integrity[i]),
            "T": float(audit.topology[i]), "score": float(audit.score[i]), "flagged": int(flagged),
            "branch": branch, "eligible_neighbours": int(counts[i]),
        })
    return rows


def audit_metrics(audit: "RSGAudit", poison: dict[str, bool]) -> dict[str, Any]:
    """§9.2 RSG evaluation: positives = poison-labelled documents, negatives = the rest."""
    from sieve.evaluation.metrics import auroc, detect_at_clean_budget

    pos = [float(audit.score[i]) for i, d in enumerate(audit.ids) if poison.get(d)]
    neg = [float(audit.score[i]) for i, d in enumerate(audit.ids) if not poison.get(d)]
    flagged_pos = sum(1 for i, d in enumerate(audit.ids) if poison.get(d) and audit.flagged[i])
    flagged_neg = sum(1 for i, d in enumerate(audit.ids) if not poison.get(d) and audit.flagged[i])
    return {
        "positives": len(pos), "negatives": len(neg),
        "auroc": auroc(pos, neg), "detect_at_5pct": detect_at_clean_budget(pos, neg, 0.05),
        "tpr_at_0.5": flagged_pos / len(pos) if pos else None,
        "fpr_at_0.5": flagged_neg / len(neg) if neg else None,
    }


def write_audit_report(out: Path, audit: "RSGAudit", summary: dict[str, Any],
                       poison: dict[str, bool] | None) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = audit_rows(audit, poison)
    csv_path = out / "rsg_audit.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    report = dict(summary)
    report["flagged"] = [audit.row(i).to_dict() for i in map(int, audit.flagged.nonzero()[0])]
    json_path = out / "rsg_audit.json"
    json_path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    return json_path, csv_path


@app.command("audit")
@user_errors
def audit_command(
    dataset_dir: Path = typer.Argument(..., help=_DATASET_HELP, show_default=False),
    with_attack: Optional[str] = typer.Option(None, "--with-attack", "-a",
                                              help="Audit the corpus plus every document of this attack family "
                                                   "(a name from attacks.jsonl, e.g. pr_b)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Directory for rsg_audit.json and rsg_audit.csv "
                                            "(default: <cache dir>/audits/<dataset>-<condition>)."),
    mode: str = typer.Option("exact", "--mode", help="Neighbour search: exact (FAISS flat), hnsw or ivf "
                                                     "(approximate, for large corpora)."),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger",
                                               help="Quarantine ledger file (default: <cache dir>/ledger.sqlite)."),
    no_ledger: bool = typer.Option(False, "--no-ledger", help="Do not record flags in the ledger."),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help=_RETRIEVER_HELP),
    config_file: Optional[Path] = typer.Option(None, "--config", help=_CONFIG_HELP),
) -> None:
    """Audit a corpus snapshot with RSG (RAGSieve's corpus-time kNN-graph density + script integrity check).

    Flags about 5% of the snapshot at most: documents with mixed writing systems (integrity branch) and documents sitting in unusually dense, lexically distinct neighbourhoods (topology branch; the budget left after integrity alerts). Writes a JSON report and a CSV with one row per document, records each flag as an open alert in the quarantine ledger, and prints a summary (with AUROC and detection at 5% clean removal when poison labels are known). Your dataset files are never modified.
    """
    if mode not in ("exact", "hnsw", "ivf"):
        raise UserError(f"--mode must be exact, hnsw or ivf (got {mode!r})")
    from sieve.corpus import corpus_hash, load_dataset
    from sieve.defenses.rsg import RSGParams, audit_corpus

    cfg = _config(config_file, retriever)
    ds = load_dataset(dataset_dir)
    injected = []
    if with_attack:
        families = ds.attack_families()
        if with_attack not in families:
            raise UserError(f"{ds.path}: unknown attack family {with_attack!r}; "
                            f"available: {', '.join(families) or 'none (no attacks.jsonl)'}")
        injected = ds.attack_documents(with_attack)
    index, cache = _open(ds, cfg)
    if injected:
        index = index.with_documents(injected, cache=cache, progress=True)
    condition = with_attack or "clean"
    docs = list(index.documents)
    t0 = time.perf_counter()
    audit = audit_corpus(index.ids, [d.text for d in docs], index.vectors, RSGParams(mode=mode, progress=True))
    seconds = time.perf_counter() - t0
    poison = {d.id: bool(d.poison) for d in docs} if with_attack else None
    snapshot_hash = corpus_hash(docs)
    index_version = f"{index.model_id}/{index.manifest.get('format', '')}"
    flagged = [int(i) for i in audit.flagged.nonzero()[0]]
    branches = Counter(audit.row(i).branch for i in flagged)
    summary: dict[str, Any] = {
        "dataset": ds.name, "dataset_path": str(ds.path), "condition": condition, "mode": mode,
        "documents": len(docs), "injected": len(injected), "corpus_hash": snapshot_hash,
        "index_version": index_version, "seconds": round(seconds, 3),
        "docs_per_second": round(len(docs) / seconds, 1) if seconds > 0 else None,
        "f_I": audit.f_I, "f_T": audit.f_T, "flags": len(flagged),
        "integrity_flags": branches.get("integrity", 0) + branches.get("both", 0),
        "topology_flags": branches.get("topology", 0) + branches.get("both", 0),
        "params": {k: v for k, v in vars(audit.params).items() if k != "progress"},
    }
    if poison is not None:
        summary["metrics"] = audit_metrics(audit, poison)
    out_dir = out or Path(cfg.cache_dir) / "audits" / f"{ds.name}-{condition}"
    json_path, csv_path = write_audit_report(out_dir, audit, summary, poison)

    typer.echo(f"snapshot   {ds.name} ({condition}): {len(docs)} documents"
               + (f" incl. {len(injected)} injected" if injected else ""))
    typer.echo(f"rsg        {mode} kNN, {seconds:.2f} s ({summary['docs_per_second']} docs/s)")
    typer.echo(f"flags      {len(flagged)} ({100 * len(flagged) / len(docs):.1f}%): "
               f"integrity {summary['integrity_flags']}, topology {summary['topology_flags']}; "
               f"f_I={audit.f_I:.4f} f_T={audit.f_T:.4f}")
    if poison is not None:
        m = summary["metrics"]
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        typer.echo(f"labels     {m['positives']} poison / {m['negatives']} clean: AUROC {fmt(m['auroc'])}, "
                   f"detect@5% {fmt(m['detect_at_5pct'])}, TPR@0.5 {fmt(m['tpr_at_0.5'])}, "
                   f"FPR@0.5 {fmt(m['fpr_at_0.5'])}")
    for i in flagged[:10]:
        row = audit.row(i)
        typer.echo(f"  {row.branch:<9} score {row.score:.3f}  D={row.local_density_contrast:.3f}  "
                   f"{plain(row.document_id, 32)}  {plain(docs[i].text, 70)}")
    if len(flagged) > 10:
        typer.echo(f"  … {len(flagged) - 10} more in {csv_path}")
    if not no_ledger and flagged:
        from sieve.ledger import Flag, Ledger, default_ledger_path

        with Ledger(ledger_path or default_ledger_path(cfg)) as led:
            flags = [Flag(audit.ids[i], docs[i].hash, float(audit.score[i]), audit.params.decision_threshold,
                          audit.row(i).to_dict(), f"RSG {audit.row(i).branch} flag ({condition})") for i in flagged]
            before = len(led.list(detector="rsg", corpus_hash=snapshot_hash))
            led.add_flags(flags, detector="rsg", corpus_id=f"{ds.name}:{condition}", corpus_hash=snapshot_hash,
                          index_version=index_version)
            added = len(led.list(detector="rsg", corpus_hash=snapshot_hash)) - before
            typer.echo(f"ledger     {added} new open alerts ({len(flagged) - added} already recorded) in {led.path}")
    typer.echo(f"report     {json_path}")
    typer.echo(f"csv        {csv_path}")


# ---------------------------------------------------------------------------------------------
# sieve ledger ...
# ---------------------------------------------------------------------------------------------
_LEDGER_HELP = "Quarantine ledger file (default: <cache dir>/ledger.sqlite)."


def _ledger(path: Optional[Path], config_file: Optional[Path] = None) -> "Ledger":
    from sieve.config import SieveConfig
    from sieve.ledger import Ledger, default_ledger_path

    p = path or default_ledger_path(SieveConfig.load(config_file))
    if path is not None and not p.exists():
        raise UserError(f"ledger file not found: {p}")
    return Ledger(p)


def _ledger_errors(fn):  # noqa: ANN001, ANN202
    """LedgerError (bad id, forbidden transition, bad filter) → one-line user error."""
    import functools

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        from sieve.ledger import LedgerError

        try:
            return fn(*a, **kw)
        except LedgerError as e:
            raise UserError(str(e)) from None

    return wrapper


@ledger_app.command("list")
@user_errors
@_ledger_errors
def ledger_list(
    state: Optional[str] = typer.Option(None, "--state", help="open, confirmed, dismissed or rolled_back."),
    detector: Optional[str] = typer.Option(None, "--detector", help="e.g. rsg"),
    min_score: Optional[float] = typer.Option(None, "--min-score"),
    sort: str = typer.Option("-score", "--sort", help="score, -score, created, -created or doc."),
    limit: int = typer.Option(50, "--limit", min=1),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP),
) -> None:
    """List quarantine alerts (newest evidence first by default: highest score)."""
    with _ledger(ledger_path) as led:
        alerts = led.list(state=state, detector=detector, min_score=min_score, sort=sort, limit=limit)
        counts = led.counts()
    typer.echo("alerts     " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for a in alerts:
        score = "n/a" if a.score is None else f"{a.score:.3f}"
        typer.echo(f"{a.alert_id}  {a.state:<11} {a.detector:<5} score {score}  {plain(a.doc_id, 40)}  "
                   f"{plain(a.reason, 60)}")


def _transition(alert_id: str, new_state: str, who: Optional[str], why: str, ledger_path: Optional[Path]) -> None:
    with _ledger(ledger_path) as led:
        a = led.transition(alert_id, new_state, who or getpass.getuser(), why)
    typer.echo(f"{a.alert_id}  {a.doc_id}: now {a.state}")


_WHO = typer.Option(None, "--who", help="Analyst name (default: the login name).")
_WHY = typer.Option("", "--why", help="Reason, kept in the alert history.")


@ledger_app.command("confirm")
@user_errors
@_ledger_errors
def ledger_confirm(alert_id: str = typer.Argument(...), who: Optional[str] = _WHO, why: str = _WHY,
                   ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP)) -> None:
    """Confirm an open alert: the document stays out of retrieval."""
    _transition(alert_id, "confirmed", who, why, ledger_path)


@ledger_app.command("dismiss")
@user_errors
@_ledger_errors
def ledger_dismiss(alert_id: str = typer.Argument(...), who: Optional[str] = _WHO, why: str = _WHY,
                   ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP)) -> None:
    """Dismiss an open alert as a false positive: the document is retrievable again."""
    _transition(alert_id, "dismissed", who, why, ledger_path)


@ledger_app.command("rollback")
@user_errors
@_ledger_errors
def ledger_rollback(alert_id: str = typer.Argument(...), who: Optional[str] = _WHO, why: str = _WHY,
                    ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP)) -> None:
    """Roll back a confirmed quarantine: the document is restored to retrieval."""
    _transition(alert_id, "rolled_back", who, why, ledger_path)


@ledger_app.command("reopen")
@user_errors
@_ledger_errors
def ledger_reopen(alert_id: str = typer.Argument(...), who: Optional[str] = _WHO, why: str = _WHY,
                  ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP)) -> None:
    """Reopen a dismissed or rolled-back alert for review."""
    _transition(alert_id, "open", who, why, ledger_path)


@ledger_app.command("export")
@user_errors
@_ledger_errors
def ledger_export(
    out: Path = typer.Argument(..., help="CSV file to write."),
    state: Optional[str] = typer.Option(None, "--state"),
    detector: Optional[str] = typer.Option(None, "--detector"),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP),
) -> None:
    """Export alerts (with evidence as JSON) to CSV."""
    with _ledger(ledger_path) as led:
        n = led.export_csv(out, state=state, detector=detector)
    typer.echo(f"{n} alerts written to {out}")
