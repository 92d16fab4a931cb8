"""``sieve audit`` (RSG corpus audit → report + quarantine ledger); ``sieve ledger ...`` is in sieve/cli/ledger.py.

RSG (docs/algorithms.md §4) scans the whole snapshot: the clean corpus, or the clean corpus plus every
document of one attack family (``--with-attack``). Flags go to the quarantine ledger (docs/design.md:
quarantine is never deletion; the dataset files are not modified).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.common import CONFIG_HELP, DATASET_HELP, RETRIEVER_HELP, default_ledger, load_config, open_experiment, plain


@app.command("audit")
@user_errors
def audit_command(
    dataset_dir: Path = typer.Argument(..., help=DATASET_HELP, show_default=False),
    with_attack: Optional[str] = typer.Option(None, "--with-attack", "-a",
                                              help="Audit the corpus plus every document of this attack family "
                                                   "(a name from attacks.jsonl, e.g. pr_b)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Directory for rsg_audit.json and rsg_audit.csv "
                                            "(default: <cache dir>/audits/<dataset>-<condition>)."),
    mode: str = typer.Option("auto", "--mode", help="Neighbour search: exact, ivf or hnsw (approximate, for large "
                                                    "corpora; the report gives their neighbour recall@16 measured "
                                                    "against exact on 1,000 documents), or auto (exact up to 20,000 "
                                                    "documents, ivf past that)."),
    engine: str = typer.Option("local", "--engine", help="local: run in this process; ray: run the same audit as a "
                                                         "Ray Data pipeline (needs pip install 'sieve[ray]'); starts "
                                                         "a local Ray instance unless --ray-address is given."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address",
                                              help="Address of an existing Ray cluster for --engine ray "
                                                   "(e.g. ray://head:10001 or auto)."),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger",
                                               help="Quarantine ledger file (default: <cache dir>/ledger.sqlite)."),
    no_ledger: bool = typer.Option(False, "--no-ledger", help="Do not record flags in the ledger."),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help=RETRIEVER_HELP),
    config_file: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Audit a corpus snapshot with RSG (RAGSieve's corpus-time kNN-graph density + script integrity check).

    Flags about 5% of the snapshot at most: documents with mixed writing systems (integrity branch) and documents sitting in unusually dense, lexically distinct neighbourhoods (topology branch; the budget left after integrity alerts). Writes a JSON report and a CSV with one row per document, records each flag as an open alert in the quarantine ledger, and prints a summary (with AUROC and detection at 5% clean removal when poison labels are known). Your dataset files are never modified.
    """
    from sieve.experiment import AUDIT_MODES, record_flags, run_audit
    from sieve.experiment.audit import AUDIT_ENGINES

    if mode not in AUDIT_MODES:
        raise UserError(f"--mode must be {', '.join(AUDIT_MODES)} (got {mode!r})")
    if engine not in AUDIT_ENGINES:
        raise UserError(f"--engine must be {', '.join(AUDIT_ENGINES)} (got {engine!r})")
    if ray_address and engine != "ray":
        raise UserError("--ray-address needs --engine ray")
    if engine == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise UserError("--engine ray needs the optional extra: pip install 'sieve[ray]'")
    from sieve.corpus import load_dataset

    cfg = load_config(config_file, retriever)
    ds = load_dataset(dataset_dir)
    if with_attack and with_attack not in ds.attack_families():
        families = ds.attack_families()
        raise UserError(f"{ds.path}: unknown attack family {with_attack!r}; "
                        f"available: {', '.join(families) or 'none (no attacks.jsonl)'}")
    if not no_ledger:
        # check the ledger before the audit: a corrupt ledger is reported (and moved aside) in seconds,
        # not after a long audit whose flags could then not be recorded
        from sieve.ledger import Ledger

        with Ledger(default_ledger(cfg, ledger_path)):
            pass
    exp = open_experiment(ds, cfg)
    condition = with_attack or "clean"
    report = run_audit(exp, condition, mode=mode, progress=True, engine=engine, ray_address=ray_address)
    if report.poison_labels is not None:
        from sieve.evaluation.metrics import audit_metrics

        report.summary["metrics"] = audit_metrics(report.audit, report.poison_labels)
    audit, summary, docs = report.audit, report.summary, report.snapshot.documents
    injected = report.snapshot.injected
    out_dir = out or Path(cfg.cache_dir) / "audits" / f"{ds.name}-{condition}"
    json_path, csv_path = report.write(out_dir)
    flagged = report.flagged

    typer.echo(f"snapshot   {ds.name} ({condition}): {len(docs)} documents"
               + (f" incl. {len(injected)} injected" if injected else ""))
    knn = summary.get("knn") or {}
    typer.echo(f"rsg        {knn.get('mode', mode)} kNN ({engine} engine), {summary['seconds']:.2f} s "
               f"({summary['docs_per_second']} docs/s)")
    rec = summary.get("neighbour_recall")
    if rec:
        typer.echo(f"recall@{rec['k']}  {rec['recall']:.4f} (95% CI {rec['ci95'][0]:.4f}–{rec['ci95'][1]:.4f}, "
                   f"n={rec['n']} documents checked against exact search)")
    if "ray" in summary:
        lay = summary["ray"]
        typer.echo(f"ray        {lay['address']}: {lay['actors_per_stage']} actors per stage, "
                   f"pipeline {lay['seconds']['pipeline']:.2f} s of {lay['seconds']['total']:.2f} s")
    typer.echo(f"flags      {len(flagged)} ({100 * len(flagged) / len(docs):.1f}%): "
               f"integrity {summary['integrity_flags']}, topology {summary['topology_flags']}; "
               f"f_I={audit.f_I:.4f} f_T={audit.f_T:.4f}")
    if "metrics" in summary:
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
        from sieve.ledger import Ledger

        with Ledger(default_ledger(cfg, ledger_path)) as led:
            n, added = record_flags(report, led, ds.name)
            typer.echo(f"ledger     {added} new open alerts ({n - added} already recorded) in {led.path}")
    typer.echo(f"report     {json_path}")
    typer.echo(f"csv        {csv_path}")

