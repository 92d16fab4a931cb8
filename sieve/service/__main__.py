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
from typing import Any

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
    ap.add_argument("--workers", type=int, default=2, help="work requests running at once")
    ap.add_argument("--queue", type=int, default=16, help="work requests waiting (beyond: 503 + Retry-After)")
    ap.add_argument("--deadline", type=float, default=10.0, help="longest wait in the queue, seconds")
    ap.add_argument("--max-prepared", type=int, default=16, help="prepared defenses kept besides --preload (LRU)")
    ap.add_argument("--shutdown-timeout", type=float, default=5.0, help="seconds to finish running requests")
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
                                             max_text_chars=a.max_text_chars, workers=a.workers, queue=a.queue,
                                             deadline_s=a.deadline, max_prepared=a.max_prepared))
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

    for name, v in (("--workers", a.workers), ("--max-prepared", a.max_prepared)):
        if v < 1:
            print(f"error: {name} must be >= 1, got {v}", file=sys.stderr)
            return 2
    if a.queue < 0 or a.deadline <= 0 or a.shutdown_timeout < 0:
        print("error: --queue must be >= 0, --deadline > 0 and --shutdown-timeout >= 0", file=sys.stderr)
        return 2

    try:
        state, token, ledger = build_state(a)
    except (ConfigError, DatasetError, ExperimentError, DefenseSpecError, ModelError, FileNotFoundError,
            ValueError, OSError) as e:   # LedgerError is a ValueError: a non-ledger --ledger is refused here
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if a.host not in ("127.0.0.1", "localhost", "::1") and not token:
        print(f"warning: listening on {a.host} without a bearer token (set {a.token_env})", file=sys.stderr)
    print(f"sieve serve: http://{a.host}:{a.port}  (ledger {ledger}; auth {'on' if token else 'off'})",
          file=sys.stderr, flush=True)
    from sieve.service.limits import ADMISSION

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            for adm in ADMISSION:   # queued requests are answered 503 at once; running ones finish
                adm.close()
            super().handle_exit(sig, frame)

    server = _Server(uvicorn.Config(create_app(state), host=a.host, port=a.port, log_level=a.log_level,
                                    timeout_graceful_shutdown=a.shutdown_timeout))
    server.run()
    sys.stdout.flush()
    sys.stderr.flush()
    # a defense call still running in a worker thread past the shutdown timeout is not waited for
    # (its client is gone; ledger writes are transactions): exit now
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
