"""What every ``sieve`` command shares: configuration, models, the experiment, plain text output.

Commands build an :class:`~sieve.experiment.Experiment` here and take every ranking, snapshot and
defense from it (docs/architecture.md). The hidden retriever name ``tiny-hashing`` turns every
model role into a tiny in-process model (tests, smoke checks) — except the LLM when an
OpenAI-compatible endpoint is configured, which stays real (endpoint chaos tests).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from sieve.cli._app import UserError
from sieve.models.tiny import TESTING_RETRIEVER  # hidden retriever name: every role tiny (tests)

if TYPE_CHECKING:
    from sieve.config import SieveConfig
    from sieve.corpus import Dataset
    from sieve.experiment import Experiment
    from sieve.resources import Resources


DATASET_HELP = ("Dataset directory (corpus.jsonl, queries.jsonl, optional qrels/attacks/targets), a BEIR "
                "directory, or a single corpus file (.jsonl, .csv, .parquet).")
RETRIEVER_HELP = ("Retriever model: all-mpnet-base-v2 (default), all-MiniLM-L6-v2 or multilingual-e5-small, "
                  "or a local model path.")
CONFIG_HELP = "YAML config file (default: $SIEVE_CONFIG, else built-in defaults)."

def plain(text: str, width: int | None = None) -> str:
    """Untrusted text as one printable terminal line (:func:`sieve.escape.terminal_text`): control,
    escape and bidi characters shown visibly as ``\\xNN`` / ``\\uNNNN``, whitespace collapsed, cut to
    ``width`` characters with an ellipsis."""
    from sieve.escape import terminal_text

    return terminal_text(text, width)


def split_list(v: Optional[str]) -> Optional[list[str]]:
    """A comma-separated option as a list (``None`` when empty)."""
    if v is None:
        return None
    items = [x.strip() for x in v.split(",") if x.strip()]
    return items or None


def load_config(config_file: Optional[Path], retriever: Optional[str] = None) -> "SieveConfig":
    from sieve.config import SieveConfig

    cfg = SieveConfig.load(config_file)
    if retriever:
        cfg.models.retriever = retriever
        if retriever != TESTING_RETRIEVER:
            cfg.validate()
    return cfg


def load_dataset(dataset_dir: Path) -> "Dataset":
    from sieve.corpus import load_dataset as _load

    return _load(dataset_dir)


def make_resources(cfg: "SieveConfig", ds: "Dataset | None" = None) -> "Resources":
    """The models of ``cfg`` (:func:`sieve.experiment.workspace.make_resources`)."""
    from sieve.experiment.workspace import make_resources as _make

    return _make(cfg, ds)


def open_experiment(ds: "Dataset", cfg: "SieveConfig", *, depth: int | None = None, progress: bool = True,
                    ledger_path: Optional[Path] = None, quarantine: str = "none") -> "Experiment":
    """:func:`sieve.experiment.workspace.open_experiment`, its errors as one-line :class:`UserError`."""
    from sieve.experiment import ExperimentError
    from sieve.experiment.workspace import open_experiment as _open

    try:
        return _open(ds, cfg, depth=depth, progress=progress, ledger_path=ledger_path, quarantine=quarantine)
    except ExperimentError as e:
        raise UserError(str(e)) from None
    except ValueError as e:
        raise UserError(f"{ds.path}: {e}") from None


def open_store_source(source: str, cfg: "SieveConfig", *, store_model: Optional[str] = None, reembed: bool = False,
                      retriever_given: bool = False, ledger_path: Optional[Path] = None, quarantine: str = "none",
                      depth: int | None = None) -> tuple["Experiment", Any]:
    """An experiment over a store source (``chroma:///dir?collection=NAME``, ``qdrant:``, ``lancedb:``;
    sieve/stores/uri.py) and its :class:`~sieve.experiment.stores.StoreSource`. When the store names the
    model of its vectors and no ``--retriever`` was given, that model becomes the retriever if Sieve has
    it (so its stored vectors can pass the agreement gate). Store errors are one-line UserErrors."""
    import time

    from sieve.experiment.stores import open_store
    from sieve.stores.readers import read_store
    from sieve.stores.uri import StoreError, parse_store_uri

    try:
        uri = parse_store_uri(source)
        t0 = time.perf_counter()
        corpus = read_store(uri, progress=True)
        corpus.info["read_seconds"] = round(time.perf_counter() - t0, 3)
    except StoreError as e:
        raise UserError(str(e)) from None
    from sieve.experiment.workspace import adopt_store_model

    adopt_store_model(cfg, store_model or corpus.model, retriever_given=retriever_given, reembed=reembed)
    try:
        return open_store(uri, make_resources(cfg), store_model=store_model, reembed=reembed, progress=True,
                          ledger_path=ledger_path, quarantine=quarantine, depth=depth, corpus=corpus)
    except StoreError as e:
        raise UserError(str(e)) from None
    except ValueError as e:                                   # the index's validation (duplicate ids, shapes)
        raise UserError(f"{source}: {e}") from None


def default_ledger(cfg: "SieveConfig", path: Optional[Path]) -> Path:
    from sieve.ledger import default_ledger_path

    return Path(path) if path is not None else default_ledger_path(cfg)
