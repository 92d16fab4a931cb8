"""``sieve audit`` (RSG corpus audit → report + quarantine ledger); ``sieve ledger ...`` is in sieve/cli/ledger.py.

RSG (docs/algorithms.md §4) scans the whole snapshot: the clean corpus, or the clean corpus plus every
document of one attack family (``--with-attack``). Flags go to the quarantine ledger (docs/design.md:
quarantine is never deletion; the dataset files are not modified).

``--corpus FILE|SHARD_DIR`` audits a corpus of any size instead of a dataset directory: the file is
streamed into float16 shards under ``--workdir`` (sieve/scale/shards.py) and a killed run resumes
from the last shard whose sha256 matches its manifest (sieve/experiment/audit.py:
``run_corpus_audit``).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.common import (
    CONFIG_HELP,
    DATASET_HELP,
    RETRIEVER_HELP,
    default_ledger,
    load_config,
    open_experiment,
    open_store_source,
    plain,
)

if TYPE_CHECKING:
    from sieve.config import SieveConfig


@app.command("audit")
@user_errors
def audit_command(
    source: Optional[str] = typer.Argument(None, help=DATASET_HELP + " Or a vector store: "
                                           "chroma:///dir?collection=NAME, qdrant:///dir?collection=NAME, "
                                           "lancedb:///dir?table=NAME (add &model=MODEL when its vectors come "
                                           "from a Sieve model; README \"Audit a vector store\"). Omit it with "
                                           "--corpus.", show_default=False, metavar="SOURCE"),
    corpus: Optional[Path] = typer.Option(None, "--corpus",
                                          help="Audit a large corpus instead of a dataset: a .jsonl or .parquet "
                                               "file with id and text (streamed in chunks and embedded into "
                                               "float16 shards under --workdir; run the same command again after "
                                               "an interruption to resume from the last complete shard), or a "
                                               "shard directory written by an earlier run."),
    workdir: Optional[Path] = typer.Option(None, "--workdir",
                                           help="Directory for the shards of --corpus (default: <cache dir>/shards/"
                                                "<corpus name>-<path hash>-<retriever>). Re-use it to resume."),
    shard_rows: int = typer.Option(8192, "--shard-rows", min=1,
                                   help="Rows per shard for --corpus: one embedding call and one file each; an "
                                        "interrupted run loses at most one shard of work."),
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
                                                         "Ray Data pipeline (needs pip install 'sieve\\[ray]'; with "
                                                         "--corpus the embedding runs on Ray actors too); starts "
                                                         "a local Ray instance unless --ray-address is given."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address",
                                              help="Address of an existing Ray cluster for --engine ray "
                                                   "(e.g. ray://head:10001 or auto)."),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger",
                                               help="Quarantine ledger file (default: <cache dir>/ledger.sqlite)."),
    no_ledger: bool = typer.Option(False, "--no-ledger", help="Do not record flags in the ledger."),
    force: bool = typer.Option(False, "--force", help="Replace rsg_audit.json / rsg_audit.csv in --out even when "
                                                      "they were not written by sieve audit."),
    since: Optional[str] = typer.Option(None, "--since",
                                        help="Store sources: audit only the documents added since this earlier "
                                             "audit's snapshot id (printed as 'snapshot id', recorded in the "
                                             "ledger), or only those whose metadata matches a filter "
                                             "meta:FIELD OP VALUE (OP one of >= <= > < = !=; e.g. "
                                             "meta:ingested_at>=2026-11-30T00:00), against the whole current "
                                             "store; alerts are raised for those documents only."),
    store_model: Optional[str] = typer.Option(None, "--store-model",
                                              help="Store sources: the embedding model that wrote the stored "
                                                   "vectors (as the source's &model=). When it is the retriever, "
                                                   "a sample of 256 passages is re-embedded and the stored vectors "
                                                   "are used if they agree (cosine and recall@10 agreement "
                                                   ">= 0.99); otherwise the store is re-embedded."),
    reembed: bool = typer.Option(False, "--reembed", help="Store sources: ignore the stored vectors and embed "
                                                          "every passage with the retriever."),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help=RETRIEVER_HELP),
    config_file: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Audit a corpus snapshot with RSG (RAGSieve's corpus-time kNN-graph density + script integrity check).

    Flags about 5% of the snapshot at most: documents with mixed writing systems (integrity branch) and documents sitting in unusually dense, lexically distinct neighbourhoods (topology branch; the budget left after integrity alerts). Writes a JSON report and a CSV with one row per document, records each flag as an open alert in the quarantine ledger, and prints a summary (with AUROC and detection at 5% clean removal when poison labels are known). Your dataset files are never modified.
    """
    from sieve.experiment import AUDIT_MODES, run_audit
    from sieve.experiment.audit import AUDIT_ENGINES
    from sieve.stores.uri import is_store_uri

    is_store = is_store_uri(source)
    if not is_store and (since or store_model or reembed):
        raise UserError("--since, --store-model and --reembed need a store source (chroma:, qdrant:, lancedb:)")
    if is_store and (with_attack or engine != "local" or workdir is not None):
        raise UserError("a store source is audited as it is: --with-attack, --engine ray and --workdir do not "
                        "apply to it")
    dataset_dir = None if source is None or is_store else Path(source)
    if (source is None) == (corpus is None):
        raise UserError("give a dataset directory or --corpus FILE|SHARD_DIR (one of the two)")
    if corpus is not None and with_attack:
        raise UserError("--with-attack needs a dataset directory (a --corpus has no attack families)")
    if corpus is None and workdir is not None:
        raise UserError("--workdir needs --corpus")
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
    cfg = load_config(config_file, retriever)
    if is_store:
        assert source is not None
        _store_audit(source, since, store_model, reembed, out, mode, ledger_path, no_ledger, cfg, force,
                     retriever is not None)
        return
    if corpus is not None:
        _corpus_audit(corpus, workdir, shard_rows, out, mode, engine, ray_address, ledger_path, no_ledger, cfg,
                      force)
        return
    from sieve.corpus import load_dataset

    assert dataset_dir is not None   # exactly one of dataset_dir / --corpus (checked above)
    ds = load_dataset(dataset_dir)
    if with_attack and with_attack not in ds.attack_families():
        families = ds.attack_families()
        raise UserError(f"{ds.path}: unknown attack family {with_attack!r}; "
                        f"available: {', '.join(families) or 'none (no attacks.jsonl)'}")
    _check_ledger(cfg, ledger_path, no_ledger)
    exp = open_experiment(ds, cfg)
    condition = with_attack or "clean"
    report = run_audit(exp, condition, mode=mode, progress=True, engine=engine, ray_address=ray_address)
    if report.poison_labels is not None:
        from sieve.evaluation.metrics import audit_metrics

        report.summary["metrics"] = audit_metrics(report.audit, report.poison_labels)
    from sieve.safe_io import dataset_files

    docs, injected = report.snapshot.documents, report.snapshot.injected
    out_dir = out or Path(cfg.cache_dir) / "audits" / f"{ds.name}-{condition}"
    json_path, csv_path = report.write(out_dir, protected=dataset_files(ds.path), force=force)
    typer.echo(f"snapshot   {plain(ds.name)} ({plain(condition)}): {len(docs)} documents"
               + (f" incl. {len(injected)} injected" if injected else ""))
    _print_report(report, mode, engine, json_path, csv_path, ledger_path, no_ledger, cfg, ds.name)


def _corpus_audit(corpus: Path, workdir: Optional[Path], shard_rows: int, out: Optional[Path], mode: str,
                  engine: str, ray_address: Optional[str], ledger_path: Optional[Path], no_ledger: bool,
                  cfg: "SieveConfig", force: bool) -> None:
    """``sieve audit --corpus``: ingest (resumable) → RSG on the shards → the same report and ledger flags."""
    from sieve.experiment.audit import run_corpus_audit
    from sieve.scale.shards import IngestError

    if not corpus.exists():
        raise UserError(f"{corpus}: corpus not found")
    name = corpus.stem if corpus.is_file() else corpus.name
    if corpus.is_file() and corpus.suffix.lower() not in (".jsonl", ".json", ".parquet", ".pq"):
        raise UserError(f"{corpus}: unsupported corpus format {corpus.suffix!r}; use .jsonl or .parquet "
                        "(id and text) or a shard directory")
    if corpus.is_dir() and not (corpus / "manifest.json").is_file():
        raise UserError(f"{corpus}: not a shard directory (no manifest.json); for a dataset directory run "
                        f"sieve audit {corpus}")
    factory, model_id = _retriever_factory(cfg)
    if workdir is None:                           # one directory per corpus path and retriever: a re-run finds it
        import hashlib

        tag = hashlib.sha256(str(corpus.resolve()).encode("utf-8")).hexdigest()[:8]
        workdir = Path(cfg.cache_dir) / "shards" / f"{name}-{tag}-{model_id.replace('/', '_')}"
    wd = workdir
    if corpus.is_file() and wd.resolve() == corpus.resolve().parent:
        raise UserError(f"refusing to write shards into {wd}: it holds the corpus; choose another --workdir")
    _check_ledger(cfg, ledger_path, no_ledger)
    if corpus.is_file():
        typer.echo(f"shards     {wd}")
    try:
        report, _ = run_corpus_audit(corpus, workdir=wd, embedder=factory, model_id=model_id, mode=mode,
                                     engine=engine, ray_address=ray_address, chunk_rows=shard_rows,
                                     progress=True, note=typer.echo)
    except IngestError as e:
        raise UserError(str(e)) from None
    except ValueError as e:                           # RSG's validation (zero / non-finite vectors)
        raise UserError(f"{corpus}: {e}") from None
    out_dir = out or Path(cfg.cache_dir) / "audits" / f"{name}-corpus"
    json_path, csv_path = report.write(out_dir, protected=[corpus, wd], force=force)
    ing = report.summary.get("ingest")
    typer.echo(f"snapshot   {plain(name)} (corpus): {report.summary['documents']} documents"
               + (f" in {ing['shards']} shard{'s' if ing['shards'] != 1 else ''}" if ing else ""))
    _print_report(report, mode, engine, json_path, csv_path, ledger_path, no_ledger, cfg, name)


def _store_audit(source: str, since: Optional[str], store_model: Optional[str], reembed: bool, out: Optional[Path],
                 mode: str, ledger_path: Optional[Path], no_ledger: bool, cfg: "SieveConfig", force: bool,
                 retriever_given: bool) -> None:
    """``sieve audit chroma:///dir?collection=NAME`` (and qdrant:, lancedb:): read the store (read only),
    the stored vectors or Sieve's re-embedding, RSG (whole store, or ``--since`` a snapshot), flags to
    the ledger (sieve/experiment/stores.py)."""
    from sieve.experiment.stores import SinceError, audit_store
    from sieve.stores.filters import FilterError, is_snapshot_id, parse_filter
    from sieve.stores.uri import StoreError, parse_store_uri

    try:
        parse_store_uri(source)                   # a malformed source fails before anything is opened
        if since is not None and not is_snapshot_id(since):
            parse_filter(since)                   # and so does a malformed --since filter
    except (StoreError, FilterError) as e:
        raise UserError(str(e)) from None
    if since is not None and no_ledger:
        raise UserError("--since reads the snapshots recorded in the ledger: drop --no-ledger")
    _check_ledger(cfg, ledger_path, no_ledger)
    from contextlib import nullcontext

    from sieve.ledger import Ledger

    exp, src = open_store_source(source, cfg, store_model=store_model, reembed=reembed,
                                 retriever_given=retriever_given)
    uri = src.uri
    dec = src.decision
    typer.echo(f"store      {plain(uri.canonical())}: {len(src.corpus)} documents read in {src.seconds['read']:.2f} s")
    nums = dec.numbers
    if "min_cosine" in nums:
        typer.echo(f"agreement  {nums['sample']} passages re-embedded: min cosine {nums['min_cosine']:.4f}, "
                   f"mean {nums['mean_cosine']:.4f}, recall@10 agreement {nums['recall_at_10_agreement']:.4f} "
                   f"(need >= {nums['required_cosine']} and >= {nums['required_agreement']})")
    typer.echo(f"vectors    {plain(dec.reason)}")
    led_ctx: Any = nullcontext(None) if no_ledger else Ledger(default_ledger(cfg, ledger_path))
    with led_ctx as led:
        try:
            report = audit_store(exp, src, since=since, mode=mode, ledger=led, cache_dir=cfg.cache_dir,
                                 progress=True)
        except (SinceError, FilterError) as e:
            raise UserError(str(e)) from None
    protected = [uri.path] if uri.path is not None else []
    out_dir = out or Path(cfg.cache_dir) / "audits" / f"{src.dataset.name}-store"
    json_path, csv_path = report.write(out_dir, protected=protected, force=force)
    inc = report.summary.get("incremental")
    typer.echo(f"snapshot   {plain(src.dataset.name)}: {report.summary['documents']} documents, snapshot id "
               f"{report.summary['snapshot_id']}" + (f" ({_batch_line(inc)})" if inc else ""))
    _print_report(report, mode if not (inc and inc.get("base")) else "exact", "local", json_path, csv_path,
                  ledger_path, True, cfg, src.dataset.name)
    if not no_ledger:
        from sieve.experiment import record_flags

        rows = report.summary.get("incremental_rows")
        with Ledger(default_ledger(cfg, ledger_path)) as led:
            n, added = record_flags(report, led, src.dataset.name, rows=rows, batch=report.summary["snapshot_id"])
            scope = ("matching documents' " if inc and inc.get("filter") else "new documents' ") \
                if rows is not None else ""
            typer.echo(f"ledger     {added} new open alerts ({n - added} already recorded) from the {scope}"
                       f"{n} flags, batch {report.summary['snapshot_id']}, in {led.path}")


def _batch_line(inc: dict[str, Any]) -> str:
    """What ``--since`` audited: the new documents since a snapshot, or those a metadata filter matched."""
    lists = f"{inc['searched']} kNN lists searched, {inc['merged']} merged"
    if not inc.get("filter"):
        return f"{inc['new']} new since {plain(inc['since'])}; {lists}"
    base = (f"neighbour lists from snapshot {inc['base']} ({inc['new']} new since; {lists})" if inc["base"]
            else "no earlier snapshot of this store in the ledger: the whole store audited")
    return f"{inc['matched']} documents match {plain(inc['since'])}; {base}"


def _check_ledger(cfg: "SieveConfig", ledger_path: Optional[Path], no_ledger: bool) -> None:
    """Open the ledger before the audit: a corrupt ledger is reported (and moved aside) in seconds,
    not after a long audit whose flags could then not be recorded."""
    if not no_ledger:
        from sieve.ledger import Ledger

        with Ledger(default_ledger(cfg, ledger_path)):
            pass


def _retriever_factory(cfg: "SieveConfig") -> tuple[Callable[[], Any], str]:
    """A picklable zero-argument factory of the configured retriever (called once per process or Ray
    actor) and its model id, known without loading the model."""
    from functools import partial

    from sieve.models.tiny import TESTING_RETRIEVER, HashingEmbedder

    if cfg.models.retriever == TESTING_RETRIEVER:
        return partial(HashingEmbedder, dim=64), HashingEmbedder(dim=64).model_id
    from sieve.models.loaders import embedder_model_id, load_embedder

    return partial(load_embedder, cfg.models.retriever, cfg), embedder_model_id(cfg.models.retriever)


def _print_report(report: Any, mode: str, engine: str, json_path: Path, csv_path: Path,
                  ledger_path: Optional[Path], no_ledger: bool, cfg: "SieveConfig", corpus_name: str) -> None:
    from sieve.experiment import record_flags

    audit, summary, docs = report.audit, report.summary, report.snapshot.documents
    flagged = report.flagged
    knn = summary.get("knn") or {}
    ing = summary.get("ingest")
    if ing and ing["embed_docs_per_second"]:
        stage = next((st for st in summary.get("ray", {}).get("stages", []) if st.get("name") == "embed"), None)
        typer.echo(f"embedded   {ing['rows'] - ing['resumed_rows']} documents in {ing['embed_seconds']:.2f} s "
                   f"({ing['embed_docs_per_second']} docs/s"
                   + (f"; {stage['actors']} EmbedActors, {stage['batch_size']} texts per call)" if stage else ")"))
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
            n, added = record_flags(report, led, corpus_name)
            typer.echo(f"ledger     {added} new open alerts ({n - added} already recorded) in {led.path}")
    typer.echo(f"report     {json_path}")
    typer.echo(f"csv        {csv_path}")

