"""``sieve index`` and ``sieve search``: embed a dataset once, then look at what a query retrieves."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.models.tiny import TESTING_RETRIEVER, tiny_resources

if TYPE_CHECKING:
    from sieve.config import SieveConfig
    from sieve.corpus import Dataset
    from sieve.models.protocols import Embedder


_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def plain(text: str, width: int | None = None) -> str:
    """Untrusted text as one printable line: control / bidi characters removed, whitespace
    collapsed, cut to ``width`` characters with an ellipsis."""
    s = " ".join(_UNSAFE.sub(" ", text).split())
    if width is not None and len(s) > width:
        s = s[: max(0, width - 1)] + "…"
    return s


def _config(config_file: Optional[Path], retriever: Optional[str]) -> "SieveConfig":
    from sieve.config import SieveConfig

    cfg = SieveConfig.load(config_file)
    if retriever:
        cfg.models.retriever = retriever  # only the retriever is used here; no judge check needed
    return cfg


def _load_retriever(cfg: "SieveConfig") -> "Embedder":
    name = cfg.models.retriever
    if name == TESTING_RETRIEVER:
        return tiny_resources(cfg).retriever
    try:
        from sieve.models import load_embedder
    except ImportError as e:  # pragma: no cover - partial installation
        raise UserError(f"model loading is unavailable in this installation: {e}") from None
    return load_embedder(name, cfg)


def _open(ds: "Dataset", cfg: "SieveConfig", progress: bool = True):  # noqa: ANN202
    from sieve.index import ArtifactCache, VectorIndex, workspace_dir

    embedder = _load_retriever(cfg)
    cache = ArtifactCache.default(cfg)
    ws = workspace_dir(ds, embedder.model_id, cfg)
    adir = ds.path / ".artifacts" if ds.path.is_dir() else None
    try:
        index = VectorIndex.open_or_build(ds.documents, embedder, ws, progress=progress, cache=cache,
                                          artifacts_dir=adir)
    except ValueError as e:
        raise UserError(f"{ds.path}: {e}") from None
    return index, cache


_DATASET_HELP = ("Dataset directory (corpus.jsonl, queries.jsonl, optional qrels/attacks/targets), a BEIR "
                 "directory, or a single corpus file (.jsonl, .csv, .parquet).")
_RETRIEVER_HELP = ("Retriever model: all-mpnet-base-v2 (default), all-MiniLM-L6-v2 or multilingual-e5-small, "
                   "or a local model path.")
_CONFIG_HELP = "YAML config file (default: $SIEVE_CONFIG, else built-in defaults)."


@app.command("index")
@user_errors
def index_command(
    dataset_dir: Path = typer.Argument(..., help=_DATASET_HELP, show_default=False),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help=_RETRIEVER_HELP),
    with_attacks: bool = typer.Option(False, "--with-attacks",
                                      help="Also embed the documents of every attack family in attacks.jsonl "
                                           "(cached, so later searches and evaluations start instantly)."),
    config_file: Optional[Path] = typer.Option(None, "--config", help=_CONFIG_HELP),
) -> None:
    """Embed a dataset's corpus with the retriever and store the search index.

    Run it once per dataset: the index is kept in Sieve's cache directory (your dataset files are never modified) and reused by `sieve search`, `sieve eval` and the dashboard. If the corpus or the retriever changes, the index is rebuilt; if documents were only appended, just those are embedded.
    """
    from sieve.types import content_hash

    from sieve.corpus import load_dataset

    cfg = _config(config_file, retriever)
    t0 = time.perf_counter()
    ds = load_dataset(dataset_dir)
    index, cache = _open(ds, cfg)
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
            index.with_documents(docs, cache=cache, progress=True)
            typer.echo(f"attack     {fam}: {len(docs)} documents, {len(set(keys) - set(cached))} embedded "
                       f"in {time.perf_counter() - t1:.1f} s")
    typer.echo(f"workspace  {index.workspace}")
    typer.echo(f"total      {time.perf_counter() - t0:.1f} s")


def _quarantined(documents: list, cfg: "SieveConfig", ledger_path: Optional[Path], policy: str) -> set[str]:
    """Ids the quarantine ledger keeps out of retrieval (DESIGN.md: quarantine is exclusion, never
    deletion). No ledger file yet → nothing excluded (searching never creates one)."""
    from sieve.ledger import EXCLUSION_POLICIES, Ledger, default_ledger_path

    if policy not in EXCLUSION_POLICIES:
        raise UserError(f"--quarantine must be one of {', '.join(EXCLUSION_POLICIES)}; got {policy!r}")
    path = ledger_path or default_ledger_path(cfg)
    if policy == "none" or not Path(path).exists():
        return set()
    return Ledger(path).quarantined_ids(documents, policy)


@app.command("search")
@user_errors
def search_command(
    dataset_dir: Path = typer.Argument(..., help=_DATASET_HELP, show_default=False),
    query: str = typer.Argument(..., help="The question to retrieve documents for (quote it).", show_default=False),
    k: int = typer.Option(20, "-k", "--top-k", min=1, help="Number of documents to show."),
    attack: Optional[str] = typer.Option(None, "--attack", "-a",
                                         help="Inject every document of this attack family (a name from "
                                              "attacks.jsonl, e.g. pr_b) before searching, as in an attack "
                                              "condition."),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help=_RETRIEVER_HELP),
    width: int = typer.Option(90, "--width", min=20, help="Maximum characters of each text snippet."),
    config_file: Optional[Path] = typer.Option(None, "--config", help=_CONFIG_HELP),
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
    from sieve.corpus import load_dataset

    cfg = _config(config_file, retriever)
    ds = load_dataset(dataset_dir)
    injected = ds.attack_documents(attack) if attack else []  # unknown family: fail before loading models
    index, cache = _open(ds, cfg)
    rep = index.build_report
    if rep is not None and rep.action != "reused":
        typer.echo(f"(index {rep.action}: {rep.reason})", err=True)
    condition = "clean"
    if attack:
        index = index.with_documents(injected, cache=cache, progress=True)
        condition = attack
    excluded = _quarantined(index.documents, cfg, ledger_path, quarantine)
    ranking = index.rank(query, k, condition=condition, exclude=excluded)
    if excluded:
        typer.echo(f"({len(excluded)} quarantined document(s) excluded by the ledger, policy {quarantine}; "
                   "`--quarantine none` shows them)", err=True)
    typer.echo(f"{len(ranking.documents)} of {len(index)} documents ({condition}) for: {plain(query, 200)}")
    id_w = min(32, max((len(plain(d.id)) for d in ranking.documents), default=2))
    typer.echo(f"{'rank':>4}  {'score':>6}  {'':6}  {'id':<{id_w}}  text")
    for d in ranking.documents:
        marker = "POISON" if d.poison else ""
        typer.echo(f"{d.rank:>4}  {d.score:6.4f}  {marker:6}  {plain(d.id, id_w):<{id_w}}  {plain(d.text, width)}")
