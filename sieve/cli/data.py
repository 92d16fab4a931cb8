"""``sieve index`` and ``sieve search``: embed a dataset once, then look at what a query retrieves."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.common import (
    CONFIG_HELP,
    DATASET_HELP,
    RETRIEVER_HELP,
    load_config,
    load_dataset,
    open_experiment,
    plain,
)


@app.command("index")
@user_errors
def index_command(
    dataset_dir: Path = typer.Argument(..., help=DATASET_HELP, show_default=False),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help=RETRIEVER_HELP),
    with_attacks: bool = typer.Option(False, "--with-attacks",
                                      help="Also embed the documents of every attack family in attacks.jsonl "
                                           "(cached, so later searches and evaluations start instantly)."),
    precompute: bool = typer.Option(False, "--precompute",
                                    help="Also compute the per-document artifacts the defenses read at query "
                                         "time (judge embeddings, LM surprisal traces, token states) for the "
                                         "corpus, and for the attack documents with --with-attacks, in batches "
                                         "with a progress bar, so the first query is fast."),
    config_file: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Embed a dataset's corpus with the retriever and store the search index.

    Run it once per dataset: the index is kept in Sieve's cache directory (your dataset files are never modified) and reused by `sieve search`, `sieve eval` and the dashboard. If the corpus or the retriever changes, the index is rebuilt; if documents were only appended, just those are embedded.
    """
    from sieve.types import content_hash

    cfg = load_config(config_file, retriever)
    t0 = time.perf_counter()
    ds = load_dataset(dataset_dir)
    exp = open_experiment(ds, cfg)
    index = exp.base_index()
    cache = exp.resources.cache
    rep = index.build_report
    assert rep is not None
    typer.echo(f"dataset    {ds.name}: {ds.summary()}")
    typer.echo(f"retriever  {index.model_id} ({index.dim}-d)")
    typer.echo(f"index      {rep.action}: {rep.reason}; {rep.n_docs} documents, {rep.n_embedded} embedded "
               f"in {rep.seconds:.1f} s")
    if with_attacks:
        families = ds.attack_families()
        if not families:
            typer.echo("attacks    none (the dataset has no attacks.jsonl)")
        for fam in families:
            docs = ds.attack_documents(fam)
            keys = [content_hash(d.model_text()) for d in docs]
            cached = cache.get_many("embedding", index.model_id, keys)
            t1 = time.perf_counter()
            exp.snapshot(fam)
            typer.echo(f"attack     {fam}: {len(docs)} documents, {len(set(keys) - set(cached))} embedded "
                       f"in {time.perf_counter() - t1:.1f} s")
    if precompute:
        from sieve.index import precompute_artifacts

        docs = list(ds.documents) + ([d for f in ds.attack_families() for d in ds.attack_documents(f)]
                                     if with_attacks else [])
        t1 = time.perf_counter()
        precompute_artifacts(docs, exp.resources, kinds=("judge", "lm", "states"), progress=True)
        typer.echo(f"precompute judge embeddings, LM traces, token states: {len(docs)} documents "
                   f"in {time.perf_counter() - t1:.1f} s")
    typer.echo(f"workspace  {index.workspace}")
    typer.echo(f"total      {time.perf_counter() - t0:.1f} s")


@app.command("search")
@user_errors
def search_command(
    dataset_dir: str = typer.Argument(..., help=DATASET_HELP + " Or a vector store source: chroma:///dir?"
                                      "collection=NAME, qdrant:///dir?collection=NAME, lancedb:///dir?table=NAME "
                                      "(README \"Audit a vector store\").", show_default=False, metavar="SOURCE"),
    query: str = typer.Argument(..., help="The question to retrieve documents for (quote it).", show_default=False),
    k: int = typer.Option(20, "-k", "--top-k", min=1, help="Number of documents to show."),
    attack: Optional[str] = typer.Option(None, "--attack", "-a",
                                         help="Inject every document of this attack family (a name from "
                                              "attacks.jsonl, e.g. pr_b) before searching, as in an attack "
                                              "condition."),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help=RETRIEVER_HELP),
    width: int = typer.Option(90, "--width", min=20, help="Maximum characters of each text snippet."),
    config_file: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
    quarantine: str = typer.Option("open_and_confirmed", "--quarantine",
                                   help="Which quarantine-ledger alerts keep a document out of the results: "
                                        "open_and_confirmed (default), confirmed_only or none."),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger", help="Quarantine ledger (SQLite; default "
                                               "<cache dir>/ledger.sqlite, written by `sieve audit`)."),
) -> None:
    """Show the top-k documents the retriever returns for a query (builds the index if needed).

    Each line: rank, similarity score, POISON if the document is an injected attack document, the document id and a one-line snippet. Document text is untrusted and printed as plain text.
    """
    if not query.strip():
        raise UserError("the query is empty")
    from sieve.ledger import EXCLUSION_POLICIES

    if quarantine not in EXCLUSION_POLICIES:
        raise UserError(f"--quarantine must be one of {', '.join(EXCLUSION_POLICIES)}; got {quarantine!r}")
    from sieve.cli.common import default_ledger

    cfg = load_config(config_file, retriever)
    from sieve.stores.uri import is_store_uri

    condition = attack or "clean"
    if is_store_uri(dataset_dir):                     # a vector store: its documents and (checked) stored vectors
        from sieve.cli.common import open_store_source

        if attack:
            raise UserError("--attack needs a dataset directory (a store source has no attack families)")
        exp, src = open_store_source(dataset_dir, cfg, retriever_given=retriever is not None,
                                     ledger_path=default_ledger(cfg, ledger_path), quarantine=quarantine)
        typer.echo(f"(store {plain(src.uri.label)}: {len(src.corpus)} documents; {plain(src.decision.reason)})",
                   err=True)
    else:
        ds = load_dataset(Path(dataset_dir))
        if attack and attack not in ds.attack_families():  # unknown family: fail before loading models
            ds.attack_documents(attack)
        exp = open_experiment(ds, cfg, ledger_path=default_ledger(cfg, ledger_path), quarantine=quarantine)
    rep = exp.base_index().build_report
    if rep is not None and rep.action != "reused":
        typer.echo(f"(index {rep.action}: {rep.reason})", err=True)
    snap = exp.snapshot(condition)
    # the same ranking as `sieve eval` and the explorer (forced-top poisons pinned, quarantine excluded)
    ranking = exp.rank(query, condition=condition, depth=k)
    for w in exp.warnings:   # degraded retrieval (e.g. corrupt ledger moved aside) is never silent
        typer.secho(f"warning: {w}", fg=typer.colors.YELLOW, err=True)
    excluded = snap.excluded
    if excluded:
        typer.echo(f"({len(excluded)} quarantined document(s) excluded by the ledger, policy {quarantine}; "
                   "`--quarantine none` shows them)", err=True)
    typer.echo(f"{len(ranking.documents)} of {len(snap)} documents ({plain(condition)}) for: {plain(query, 200)}")
    id_w = min(32, max((len(plain(d.id)) for d in ranking.documents), default=2))
    typer.echo(f"{'rank':>4}  {'score':>6}  {'':6}  {'id':<{id_w}}  text")
    for d in ranking.documents:
        marker = "POISON" if d.poison else ""
        typer.echo(f"{d.rank:>4}  {d.score:6.4f}  {marker:6}  {plain(d.id, id_w):<{id_w}}  {plain(d.text, width)}")
