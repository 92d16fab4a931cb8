"""``sieve serve``: run the HTTP service (sieve/service/, docs/service.md) under uvicorn.

The command checks its options and then execs ``python -m sieve.service`` (sieve/service/__main__.py):
the service is a separate face, started as a program, not imported by the CLI.

The dataset's corpus snapshot (or a store source's collection: ``chroma:``, ``qdrant:``, ``lancedb:``,
sieve/stores/uri.py) and the models are loaded once at start (and the ``--preload``
defenses prepared: built, fitted, calibrated on clean queries), so that no request loads or
downloads a model. Binds 127.0.0.1 unless told otherwise; ``SIEVE_API_TOKEN`` turns on bearer auth.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.common import CONFIG_HELP, DATASET_HELP, RETRIEVER_HELP


@app.command("serve")
@user_errors
def serve_command(
    source: str = typer.Argument(..., metavar="DATASET|STORE",
                                 help=DATASET_HELP + " Its clean queries calibrate unset thresholds; /v1/audit audits "
                                 "its snapshots. Or a store source (chroma:///dir?collection=NAME, "
                                 "qdrant:///dir?collection=NAME, lancedb:///dir?table=NAME): its documents and stored "
                                 "vectors are the corpus (read only); give --calibration for clean queries.",
                                 show_default=False),
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (default: localhost only). Use 0.0.0.0 only "
                                                         "behind a proxy and with SIEVE_API_TOKEN set."),
    port: int = typer.Option(8765, "--port", "-p", help="TCP port."),
    preload: str = typer.Option("fusion,tris_l2", "--preload",
                                help="Defenses prepared at start (comma-separated); others are prepared on their first "
                                     "request. The default needs no LLM: fusion (the recommended detector) and tris_l2 "
                                     "(the request default)."),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger",
                                               help="Quarantine ledger file (default: <cache dir>/ledger.sqlite)."),
    quarantine: str = typer.Option("open_and_confirmed", "--quarantine",
                                   help="Which ledger alerts exclude a document from /v1/filter: open_and_confirmed, "
                                        "confirmed_only or none."),
    max_documents: int = typer.Option(200, "--max-documents", help="Most documents per /v1/filter request (else 422)."),
    max_text_chars: int = typer.Option(20_000, "--max-text-chars", help="Longest document text in characters (else 422)."),
    max_body_bytes: int = typer.Option(2_000_000, "--max-body-bytes", help="Largest request body in bytes (else 413)."),
    clean_limit: Optional[int] = typer.Option(None, "--clean-limit",
                                              help="Clean queries used to calibrate unset thresholds (default: all)."),
    token_env: str = typer.Option("SIEVE_API_TOKEN", "--token-env",
                                  help="Environment variable holding the bearer token (unset or empty: no auth)."),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help=RETRIEVER_HELP),
    config_file: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn log level (warning: no per-request log)."),
    workers: int = typer.Option(2, "--workers", help="/v1/filter and /v1/audit requests running at once."),
    queue: int = typer.Option(16, "--queue", help="Requests waiting for a worker; beyond, 503 with Retry-After at once."),
    deadline: float = typer.Option(10.0, "--deadline", help="Longest wait in the queue in seconds (then 503 + Retry-After)."),
    max_prepared: int = typer.Option(16, "--max-prepared", help="Prepared (defense, params) kept besides --preload "
                                                                "(least recently used dropped)."),
    shutdown_timeout: float = typer.Option(5.0, "--shutdown-timeout", help="Seconds running requests get to finish "
                                                                           "on SIGTERM / Ctrl-C."),
    run_deadline: float = typer.Option(60.0, "--run-deadline", help="A running request past this many seconds stops "
                                                                    "at its next safe point with 503 (0: no limit)."),
    calibration: Optional[Path] = typer.Option(None, "--calibration",
                                               help="Store source only: a dataset whose clean queries (same domain) "
                                                    "calibrate unset thresholds; without it, preload defenses that "
                                                    "need no calibration (tris_l2, rsg)."),
    store_model: Optional[str] = typer.Option(None, "--store-model",
                                              help="Store source only: the model of the stored vectors."),
    reembed: bool = typer.Option(False, "--reembed", help="Store source only: ignore the stored vectors, re-embed."),
) -> None:
    """Serve Sieve over HTTP: POST /v1/filter, POST /v1/audit, /v1/alerts, GET /healthz, GET /metrics.

    Filters the documents another RAG stack retrieved (LangChain, LlamaIndex or any HTTP client) with the same defenses, decisions and quarantine ledger as the CLI and the dashboard. Models load once at start; requests never download anything. The OpenAPI schema is at /docs and /openapi.json; see docs/service.md.
    """
    from sieve.ledger import EXCLUSION_POLICIES

    if quarantine not in EXCLUSION_POLICIES:
        raise UserError(f"--quarantine must be one of {', '.join(EXCLUSION_POLICIES)}; got {quarantine!r}")
    for name, v in (("--max-documents", max_documents), ("--max-text-chars", max_text_chars),
                    ("--max-body-bytes", max_body_bytes), ("--port", port), ("--workers", workers),
                    ("--max-prepared", max_prepared)):
        if v < 1:
            raise UserError(f"{name} must be >= 1, got {v}")
    from sieve.stores.uri import StoreError, is_store_uri, parse_store_uri

    if is_store_uri(source):
        try:
            parse_store_uri(source)
        except StoreError as e:
            raise UserError(str(e)) from None
        if calibration is not None and not calibration.exists():
            raise UserError(f"--calibration {calibration}: no such dataset directory or file")
    else:
        if not Path(source).exists():
            raise UserError(f"{source}: no such dataset directory or file")
        if calibration is not None or store_model is not None or reembed:
            raise UserError("--calibration, --store-model and --reembed apply to a store source (chroma:, qdrant:, "
                            "lancedb:); a dataset calibrates on its own clean queries")
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        raise UserError("sieve serve needs the 'serve' extra: pip install 'sieve-rag[serve]'")
    argv = [sys.executable, "-m", "sieve.service", source, "--host", host, "--port", str(port),
            "--preload", preload, "--quarantine", quarantine, "--max-documents", str(max_documents),
            "--max-text-chars", str(max_text_chars), "--max-body-bytes", str(max_body_bytes),
            "--token-env", token_env, "--log-level", log_level, "--workers", str(workers), "--queue", str(queue),
            "--deadline", str(deadline), "--max-prepared", str(max_prepared), "--shutdown-timeout", str(shutdown_timeout),
            "--run-deadline", str(run_deadline)]
    if queue < 0 or deadline <= 0 or shutdown_timeout < 0 or run_deadline < 0:
        raise UserError("--queue must be >= 0, --deadline > 0, --run-deadline >= 0 and --shutdown-timeout >= 0")
    if reembed:
        argv.append("--reembed")
    for flag, value in (("--ledger", ledger_path), ("--clean-limit", clean_limit), ("--retriever", retriever),
                        ("--config", config_file), ("--calibration", calibration), ("--store-model", store_model)):
        if value is not None:
            argv += [flag, str(value)]
    sys.stdout.flush()
    sys.stderr.flush()
    # the service is its own program (sieve/service/__main__.py): the CLI face starts it, never imports it
    os.execv(sys.executable, argv)
