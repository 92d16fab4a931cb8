"""``python -m sieve.service DATASET [options]`` — the service process that ``sieve serve`` execs
(the CLI face starts this program; it does not import the service).

Loads the dataset and the models once, prepares the ``--preload`` defenses (build, fit, clean
calibration), then runs the app under uvicorn. Bad input: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sieve.runtime import configure_process_environment


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sieve serve", description="Serve Sieve over HTTP (docs/service.md).")
    ap.add_argument("dataset")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--preload", default="tris,rsq")
    ap.add_argument("--ledger", default=None)
    ap.add_argument("--quarantine", default="open_and_confirmed")
    ap.add_argument("--max-documents", type=int, default=200)
    ap.add_argument("--max-text-chars", type=int, default=20_000)
    ap.add_argument("--max-body-bytes", type=int, default=2_000_000)
    ap.add_argument("--clean-limit", type=int, default=None)
    ap.add_argument("--token-env", default="SIEVE_API_TOKEN")
    ap.add_argument("--retriever", default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--log-level", default="warning")
    return ap


def build_state(a: argparse.Namespace):
    """The :class:`~sieve.service.ServiceState` of the parsed options, warmed (models loaded,
    preloaded defenses prepared)."""
    from sieve.config import SieveConfig
    from sieve.corpus import load_dataset
    from sieve.experiment import Experiment
    from sieve.index import ArtifactCache
    from sieve.ledger import default_ledger_path
    from sieve.models.tiny import TESTING_RETRIEVER
    from sieve.service.app import ServiceState
    from sieve.service.limits import Limits

    cfg = SieveConfig.load(Path(a.config) if a.config else None)
    if a.retriever:
        cfg.models.retriever = a.retriever
        if a.retriever != TESTING_RETRIEVER:
            cfg.validate()
    ds = load_dataset(Path(a.dataset))
    cache = ArtifactCache.default(cfg)
    if cfg.models.retriever == TESTING_RETRIEVER:  # every role tiny (tests, smoke runs)
        from sieve.testing_models import tiny_resources

        res = tiny_resources(cfg, [d.text for d in ds.documents], cache=cache)
    else:
        from sieve.resources import Resources

        res = Resources(cfg, cache=cache)
    ledger = Path(a.ledger) if a.ledger else default_ledger_path(cfg)
    exp = Experiment(ds, res, ledger_path=ledger, quarantine=a.quarantine, persist=True, progress=True)
    token = os.environ.get(a.token_env) or None
    state = ServiceState.build(exp, ledger_path=ledger, quarantine=a.quarantine, token=token,
                               clean_limit=a.clean_limit,
                               limits=Limits(max_body_bytes=a.max_body_bytes, max_documents=a.max_documents,
                                             max_text_chars=a.max_text_chars))
    specs = [s.strip() for s in a.preload.split(",") if s.strip()]
    print(f"loading models and preparing {', '.join(specs) or 'no defenses'} on {ds.name} "
          f"({len(ds.documents)} documents)…", file=sys.stderr, flush=True)
    state.warm(specs)
    return state, token, ledger


def main(argv: list[str] | None = None) -> int:
    configure_process_environment()   # before uvicorn, the app and the models (torch) load
    a = parser().parse_args(argv)
    try:
        import uvicorn

        from sieve.service.app import create_app
    except ModuleNotFoundError as e:
        print(f"error: sieve serve needs the 'serve' extra ({e.name} is missing): pip install 'sieve-rag[serve]'",
              file=sys.stderr)
        return 2
    from sieve.config import ConfigError
    from sieve.corpus import DatasetError
    from sieve.experiment import DefenseSpecError, ExperimentError
    from sieve.models.errors import ModelError

    try:
        state, token, ledger = build_state(a)
    except (ConfigError, DatasetError, ExperimentError, DefenseSpecError, ModelError, FileNotFoundError,
            ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.host not in ("127.0.0.1", "localhost", "::1") and not token:
        print(f"warning: listening on {a.host} without a bearer token (set {a.token_env})", file=sys.stderr)
    print(f"sieve serve: http://{a.host}:{a.port}  (ledger {ledger}; auth {'on' if token else 'off'})",
          file=sys.stderr, flush=True)
    uvicorn.run(create_app(state), host=a.host, port=a.port, log_level=a.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
