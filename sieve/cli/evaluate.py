"""``sieve eval``, ``sieve report`` and ``sieve calibrate``."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.common import load_config as _config
from sieve.cli.common import load_dataset as _load
from sieve.cli.common import make_resources as _resources
from sieve.cli.common import split_list as _split


def _sigterm_as_interrupt() -> None:
    """Make ``kill`` (SIGTERM) stop a run like Ctrl-C: records flushed, summary recomputed."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        def _raise(signum, frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _raise)


@app.command("eval")
@user_errors
def eval_command(
    dataset_dir: str = typer.Argument(..., help="Dataset directory (corpus.jsonl, queries.jsonl, attacks.jsonl, "
                                                "optional contexts.jsonl). Or a vector store "
                                                "(chroma:///dir?collection=NAME, qdrant:, lancedb:; README \"Audit "
                                                "a vector store\") with --queries: the clean condition only.",
                                      show_default=False, metavar="DATASET_DIR"),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory (created; rerun the same command to resume)."),
    defenses: Optional[str] = typer.Option(None, "--defenses", "-d",
                                           help="Comma-separated defenses (see `sieve list`) or serial specs a+b; "
                                                "default: all registered."),
    attacks: Optional[str] = typer.Option(None, "--attacks", "-a",
                                          help="Comma-separated attack families of attacks.jsonl; default: all."),
    retriever: Optional[str] = typer.Option(None, "--retriever", help="Retriever model (default from config)."),
    generate: bool = typer.Option(False, "--generate", help="Answer from each final context with the generator "
                                                            "(ASR, CleanAcc, F1, EM)."),
    k_ctx: int = typer.Option(5, "--k-ctx", help="Generation context size after refill."),
    depth: int = typer.Option(50, "--depth", help="Retrieval depth (RSQ needs >= 20)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (default: config seed)."),
    calibration: Optional[Path] = typer.Option(None, "--calibration",
                                               help="Calibration YAML from `sieve calibrate` (defense parameters)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML config file."),
    force: bool = typer.Option(False, "--force", help="Discard an existing run in --out and start over."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate only the first N queries of every "
                                                              "condition (quick runs, LLM-heavy defenses)."),
    calibration_queries: Optional[int] = typer.Option(
        None, "--calibration-queries", help="Learn thresholds on the first N clean queries of the dataset instead "
                                            "of the run's own (with --limit, a few queries give an unstable 5 % point)."),
    llm: bool = typer.Option(True, "--llm/--no-llm", help="Allow LLM calls (TRIS L3, TrustRAG consolidation, "
                                                          "RobustRAG). --no-llm marks them skipped/unavailable."),
    queries: Optional[Path] = typer.Option(None, "--queries",
                                           help="Store sources: the clean queries to evaluate (JSONL, one "
                                                "{\"id\", \"text\", \"answers\"?} per line: the dataset's "
                                                "queries.jsonl format). A store holds documents only, so only the "
                                                "clean condition runs (clean removal, latency; answers with "
                                                "--generate)."),
) -> None:
    """Evaluate defenses on the clean and attack conditions of a dataset; writes config.json,
    records.jsonl and summary.json into --out, then prints the summary table."""
    from sieve.evaluation.report import format_table
    from sieve.evaluation.runner import RunError, run_eval

    cfg = _config(config, retriever)
    if not llm:
        if generate:
            raise UserError("--generate needs the LLM; drop --no-llm")
        cfg.llm.enabled = False
    from sieve.stores.uri import is_store_uri

    if is_store_uri(dataset_dir):
        ds, res = _store_dataset(dataset_dir, queries, attacks, cfg, retriever is not None, depth)
    else:
        if queries is not None:
            raise UserError("--queries is for a store source (chroma:, qdrant:, lancedb:); a dataset directory "
                            "has its own queries.jsonl")
        ds = _load(Path(dataset_dir))
        res = _resources(cfg, ds)
    command = shlex.join(["sieve", *sys.argv[1:]]) if sys.argv and "sieve" in Path(sys.argv[0]).name else \
        shlex.join(["sieve", "eval", str(dataset_dir), "--out", str(out)])
    _sigterm_as_interrupt()
    try:
        summary = run_eval(ds, out, res, defenses=_split(defenses), attacks=_split(attacks), generate=generate,
                           k_ctx=k_ctx, depth=depth, seed=seed, calibration=calibration, force=force,
                           progress=progress, command=command, limit=limit,
                           calibration_queries=calibration_queries)
    except RunError as e:
        raise UserError(str(e)) from None
    except KeyboardInterrupt:
        typer.secho(f"stopped; {out} is consistent (summary.json covers the finished items). "
                    "Rerun the same command to resume.", fg=typer.colors.YELLOW, err=True)
        raise
    typer.echo(format_table(summary))
    typer.echo(f"\nwrote {out}/config.json, records.jsonl, summary.json — `sieve report {out}` for plots")
    if summary.get("n_retried"):
        reasons = ", ".join(f"{k} {v}" for k, v in sorted((summary.get("retried_reasons") or {}).items()))
        typer.echo(f"retried {summary['n_retried']} items that had failed for a reason not their own ({reasons})")
    n_items, n_failed = int(summary.get("n_items") or 0), int(summary.get("n_items_failed") or 0)
    if n_items and n_failed == n_items:
        typer.secho(f"error: every one of the {n_items} items failed (see the DEGRADED rows and {out}/records.jsonl); "
                    "no result to report", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)


def _store_dataset(source: str, queries: Optional[Path], attacks: Optional[str], cfg: Any, retriever_given: bool,
                   depth: int) -> tuple[Any, Any]:
    """``sieve eval STORE --queries FILE``: the store's corpus (read only; stored vectors through the
    agreement gate, else Sieve's re-embedding) with the clean queries of FILE
    (sieve/experiment/stores.py: ``store_eval_dataset``) and the resources that read it."""
    from sieve.cli.common import open_store_source, plain
    from sieve.experiment.stores import load_queries, store_eval_dataset

    if attacks:
        raise UserError("a store source has no attack families: sieve eval on a store runs the clean condition "
                        "only; drop --attacks")
    if queries is None:
        raise UserError(f"{source}: a store holds documents, not queries: give --queries FILE (JSONL, one "
                        "{\"id\", \"text\", \"answers\"?} per line, the dataset's queries.jsonl format)")
    if not queries.is_file():
        raise UserError(f"{queries}: queries file not found (--queries)")
    load_queries(queries)                       # a bad queries file fails before the store is read
    exp, src = open_store_source(source, cfg, retriever_given=retriever_given, depth=depth)
    typer.echo(f"store      {plain(src.uri.canonical())}: {len(src.corpus)} documents; "
               f"vectors: {plain(src.decision.reason)}")
    ds = store_eval_dataset(exp, src, queries, cfg.cache_dir)
    typer.echo(f"queries    {len(ds.queries)} clean queries from {queries} (clean condition only)")
    return ds, exp.resources


@app.command("report")
@user_errors
def report_command(
    run_dir: Path = typer.Argument(..., help="A run directory written by `sieve eval`.", show_default=False),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Where to write the HTML (default RUN_DIR/report.html)."),
    force: bool = typer.Option(False, "--force", help="Let --html replace an existing file that is not a Sieve "
                                                      "report (run and dataset files are never replaced)."),
) -> None:
    """Print the defense × attack table of a run and write a self-contained report.html with the
    ASR–utility plane, ROC curves per attack and per-attack bars."""
    from sieve.evaluation.report import ReportError, format_table, is_report_html, load_run, write_report
    from sieve.evaluation.runner import RunError
    from sieve.safe_io import check_output, dataset_files

    try:
        cfg, summary, _ = load_run(run_dir)
        target = html_out or run_dir / "report.html"
        ds_path = (cfg.get("dataset") or {}).get("path") if isinstance(cfg.get("dataset"), dict) else None
        protected = [run_dir / n for n in ("config.json", "records.jsonl", "summary.json", "answers.sqlite")]
        protected += dataset_files(ds_path) if ds_path else []
        check_output(target, force=force, protected=protected, own=is_report_html, what="--html report")
        path = write_report(run_dir, target)
    except (ReportError, RunError) as e:
        raise UserError(str(e)) from None
    typer.echo(format_table(summary))
    typer.echo(f"\nwrote {path}")


@app.command("calibrate")
@user_errors
def calibrate_command(
    dataset_dir: Path = typer.Argument(..., help="Dataset directory; only its clean queries are used.",
                                       show_default=False),
    defense: str = typer.Option(..., "--defense", help="Defense name (see `sieve list`)."),
    clean_budget: float = typer.Option(0.05, "--clean-budget", help="Largest fraction of clean documents the "
                                                                     "defense may remove (strict rule, §9.2)."),
    out: Path = typer.Option(Path("calibration.yaml"), "--out", "-o", help="Calibration YAML (merged if it is an "
                                                                            "existing calibration file)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file that is not a calibration "
                                                      "file (dataset files are never replaced)."),
    depth: int = typer.Option(50, "--depth", help="Retrieval depth of the clean rankings."),
    retriever: Optional[str] = typer.Option(None, "--retriever", help="Retriever model (default from config)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML config file."),
) -> None:
    """Learn a defense's score threshold on clean queries only and save it for `sieve eval
    --calibration` and the dashboard."""
    from sieve.evaluation.calibrate import calibrate_on_dataset, is_calibration_file, save_calibration
    from sieve.evaluation.runner import RunError
    from sieve.safe_io import check_output, dataset_files

    if not 0.0 <= clean_budget < 1.0:
        raise UserError(f"--clean-budget must be in [0, 1), got {clean_budget}")
    cfg = _config(config, retriever)
    ds = _load(dataset_dir)
    check_output(out, force=force, protected=dataset_files(ds.path), own=is_calibration_file, what="--out")
    merge = out.exists() and is_calibration_file(out)   # a foreign file replaced with --force is not merged
    res = _resources(cfg, ds)
    try:
        result = calibrate_on_dataset(ds, defense, res, clean_budget, depth)
    except (ValueError, RunError) as e:
        raise UserError(str(e)) from None
    path = save_calibration(out, defense, result["params"], result["meta"], merge=merge)
    params = ", ".join(f"{k} = {v:.6g}" for k, v in result["params"].items())
    typer.echo(f"{defense}: {params} (clean budget {clean_budget:g}, {result['meta']['n_rankings']} clean rankings)")
    typer.echo(f"saved to {path}")
