"""``sieve serve``: run the HTTP service (sieve/service/, docs/service.md) under uvicorn.

The dataset's corpus snapshot and the models are loaded once at start (and the ``--preload``
defenses prepared: built, fitted, calibrated on clean queries), so that no request loads or
downloads a model. Binds 127.0.0.1 unless told otherwise; ``SIEVE_API_TOKEN`` turns on bearer auth.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.common import CONFIG_HELP, DATASET_HELP, RETRIEVER_HELP, default_ledger, load_config, load_dataset, open_experiment, split_list


@app.command("serve")
@user_errors
def serve_command(
    dataset_dir: Path = typer.Argument(..., help=DATASET_HELP + " Its clean queries calibrate unset thresholds; "
                                                               "/v1/audit audits its snapshots.", show_default=False),
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (default: localhost only). Use 0.0.0.0 only "
                                                         "behind a proxy and with SIEVE_API_TOKEN set."),
    port: int = typer.Option(8765, "--port", "-p", help="TCP port."),
    preload: str = typer.Option("tris,rsq", "--preload", help="Defenses prepared at start (comma-separated); others "
                                                              "are prepared on their first request."),
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
) -> None:
    """Serve Sieve over HTTP: POST /v1/filter, POST /v1/audit, /v1/alerts, GET /healthz, GET /metrics.

    Filters the documents another RAG stack retrieved (LangChain, LlamaIndex or any HTTP client) with
    the same defenses, decisions and quarantine ledger as the CLI and the dashboard. The OpenAPI
    schema is at /docs and /openapi.json.
    """
    try:
        import uvicorn

        from sieve.service import Limits, ServiceState, create_app
    except ModuleNotFoundError as e:
        raise UserError(f"sieve serve needs the 'serve' extra ({e.name} is missing): pip install 'sieve-rag[serve]'") from None
    from sieve.ledger import EXCLUSION_POLICIES

    if quarantine not in EXCLUSION_POLICIES:
        raise UserError(f"--quarantine must be one of {', '.join(EXCLUSION_POLICIES)}; got {quarantine!r}")
    for name, v in (("--max-documents", max_documents), ("--max-text-chars", max_text_chars),
                    ("--max-body-bytes", max_body_bytes), ("--port", port)):
        if v < 1:
            raise UserError(f"{name} must be >= 1, got {v}")
    cfg = load_config(config_file, retriever)
    ds = load_dataset(dataset_dir)
    ledger = default_ledger(cfg, ledger_path)
    exp = open_experiment(ds, cfg, ledger_path=ledger, quarantine=quarantine)
    token = os.environ.get(token_env) or None
    state = ServiceState.build(exp, ledger_path=ledger, quarantine=quarantine, token=token, clean_limit=clean_limit,
                               limits=Limits(max_body_bytes=max_body_bytes, max_documents=max_documents,
                                             max_text_chars=max_text_chars))
    specs = split_list(preload) or []
    typer.echo(f"loading models and preparing {', '.join(specs) or 'no defenses'} on {ds.name} "
               f"({len(ds.documents)} documents)…", err=True)
    try:
        state.warm(specs)
    except ValueError as e:
        raise UserError(f"--preload: {e}") from None
    if host not in ("127.0.0.1", "localhost", "::1") and not token:
        typer.secho(f"warning: listening on {host} without a bearer token (set {token_env})", fg=typer.colors.YELLOW,
                    err=True)
    typer.echo(f"sieve serve: http://{host}:{port}  (ledger {ledger}; auth {'on' if token else 'off'})", err=True)
    uvicorn.run(create_app(state), host=host, port=port, log_level=log_level)
