"""``python -m sieve.service DATASET [options]`` — the service process that ``sieve serve`` execs
(the CLI face starts this program; it does not import the service).

Loads the dataset (or a store source, sieve/experiment/stores.py) and the models once, prepares the
``--preload`` defenses (build, fit, clean calibration), then runs the app under uvicorn. Bad input:
one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from sieve.runtime import configure_process_environment

#: Defenses prepared at start unless ``--preload`` says otherwise: the recommended detector and the
#: request default (:data:`sieve.service.schemas.DEFAULT_DEFENSE`); neither needs an LLM.
DEFAULT_PRELOAD = "fusion,tris_l2"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sieve serve", description="Serve Sieve over HTTP (docs/service.md).")
    ap.add_argument("dataset", help="dataset directory or file, or a store source (chroma:///dir?collection=NAME, "
                                    "qdrant:///dir?collection=NAME, lancedb:///dir?table=NAME)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--preload", default=DEFAULT_PRELOAD)
    ap.add_argument("--ledger", default=None)
    ap.add_argument("--quarantine", default="open_and_confirmed")
    ap.add_argument("--max-documents", type=int, default=200)
    ap.add_argument("--max-text-chars", type=int, default=20_000)
    ap.add_argument("--max-body-bytes", type=int, default=2_000_000)
    ap.add_argument("--clean-limit", type=int, default=None)
    ap.add_argument("--workers", type=int, default=2, help="work requests running at once")
    ap.add_argument("--queue", type=int, default=16, help="work requests waiting (beyond: 503 + Retry-After)")
    ap.add_argument("--deadline", type=float, default=10.0, help="longest wait in the queue, seconds")
    ap.add_argument("--run-deadline", type=float, default=60.0,
                    help="a running request past this many seconds stops at its next safe point (0: none)")
    ap.add_argument("--max-prepared", type=int, default=16, help="prepared defenses kept besides --preload (LRU)")
    ap.add_argument("--shutdown-timeout", type=float, default=5.0, help="seconds to finish running requests")
    ap.add_argument("--calibration", default=None,
                    help="store source only: a dataset whose clean queries calibrate unset thresholds")
    ap.add_argument("--store-model", default=None, help="store source only: the model of the stored vectors")
    ap.add_argument("--reembed", action="store_true", help="store source only: ignore the stored vectors")
    ap.add_argument("--token-env", default="SIEVE_API_TOKEN")
    ap.add_argument("--retriever", default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--log-level", default="warning")
    return ap


class StartError(ValueError):
    """A configuration the service cannot start with; the message is one line for users."""


def _resources(cfg: Any, texts: list[str]) -> Any:
    """The models of ``cfg`` with the persistent artifact cache (sieve/experiment/workspace.py)."""
    from sieve.experiment.workspace import make_resources

    return make_resources(cfg, texts=texts)


def _store_experiment(a: argparse.Namespace, cfg: Any, ledger: Path) -> Any:
    """The experiment over a store source (sieve/experiment/stores.py), with the clean queries of
    ``--calibration`` when given (a store has none). When the store names the model of its vectors
    and no ``--retriever`` was given, that model is the retriever if Sieve has it, as for
    ``sieve audit SOURCE`` (so the stored vectors can pass the agreement gate)."""
    from sieve.corpus import load_dataset
    from sieve.experiment.stores import open_store
    from sieve.experiment.workspace import adopt_store_model
    from sieve.stores.readers import read_store
    from sieve.stores.uri import parse_store_uri

    uri = parse_store_uri(a.dataset)
    cal = None
    if a.calibration:
        cal = load_dataset(Path(a.calibration))
        if not cal.queries:
            raise StartError(f"--calibration {a.calibration}: the dataset has no clean queries (queries.jsonl)")
    corpus = read_store(uri, progress=True)
    adopt_store_model(cfg, a.store_model or corpus.model, retriever_given=bool(a.retriever), reembed=a.reembed)
    res = _resources(cfg, [d.text for d in corpus.documents])
    exp, src = open_store(uri, res, store_model=a.store_model, reembed=a.reembed, progress=True,
                          ledger_path=ledger, quarantine=a.quarantine, corpus=corpus)
    print(f"store {uri.canonical()}: {len(src.corpus)} documents; vectors: {src.decision.reason}",
          file=sys.stderr, flush=True)
    if cal is not None:   # clean queries of the same domain, ranked over the store's corpus
        exp.dataset.queries = list(cal.queries)
        exp.dataset.__post_init__()
    return exp


def check_calibration(has_queries: bool, specs: list[str], source: str) -> None:
    """Refuse to start when a ``--preload`` defense needs calibration and the corpus has no clean
    queries (a store source without ``--calibration``): one line naming what is missing."""
    from sieve.experiment import build_defense
    from sieve.experiment.defenses import needs_calibration

    if has_queries:
        return
    need = []
    for spec in specs:
        d = build_defense(spec)
        if needs_calibration(d):
            need.append(f"{spec} ({d.threshold_param or 'its threshold'})")
    if need:
        raise StartError(f"{source}: a store has no clean queries to calibrate {', '.join(need)} on; give "
                         "--calibration DATASET (clean queries of the same domain) or --preload defenses that "
                         "need no calibration (e.g. --preload tris_l2,rsg)")


def build_state(a: argparse.Namespace) -> tuple[Any, str | None, Path]:
    """The :class:`~sieve.service.ServiceState` of the parsed options, warmed (models loaded,
    preloaded defenses prepared), the token and the ledger path."""
    from sieve.config import SieveConfig
    from sieve.corpus import load_dataset
    from sieve.experiment import Experiment
    from sieve.ledger import default_ledger_path
    from sieve.models.tiny import TESTING_RETRIEVER
    from sieve.service.app import ServiceState
    from sieve.service.limits import Limits
    from sieve.stores.uri import is_store_uri

    cfg = SieveConfig.load(Path(a.config) if a.config else None)
    if a.retriever:
        cfg.models.retriever = a.retriever
        if a.retriever != TESTING_RETRIEVER:
            cfg.validate()
    ledger = Path(a.ledger) if a.ledger else default_ledger_path(cfg)
    store = is_store_uri(a.dataset)
    if not store and (a.calibration or a.store_model or a.reembed):
        raise StartError("--calibration, --store-model and --reembed apply to a store source "
                         "(chroma:, qdrant:, lancedb:); a dataset calibrates on its own clean queries")
    specs = [s.strip() for s in a.preload.split(",") if s.strip()]
    if store:
        if not a.calibration:   # known before the store is read: say so at once
            check_calibration(False, specs, a.dataset)
        exp = _store_experiment(a, cfg, ledger)
    else:
        ds = load_dataset(Path(a.dataset))
        exp = Experiment(ds, _resources(cfg, [d.text for d in ds.documents]), ledger_path=ledger,
                         quarantine=a.quarantine, persist=True, progress=True)
    check_calibration(bool(exp.dataset.queries or exp.dataset.contexts), specs, a.dataset)
    token = os.environ.get(a.token_env) or None
    state = ServiceState.build(exp, ledger_path=ledger, quarantine=a.quarantine, token=token,
                               clean_limit=a.clean_limit,
                               limits=Limits(max_body_bytes=a.max_body_bytes, max_documents=a.max_documents,
                                             max_text_chars=a.max_text_chars, workers=a.workers, queue=a.queue,
                                             deadline_s=a.deadline, run_deadline_s=a.run_deadline,
                                             max_prepared=a.max_prepared))
    print(f"loading models and preparing {', '.join(specs) or 'no defenses'} on {exp.dataset.name} "
          f"({len(exp.dataset.documents)} documents)…", file=sys.stderr, flush=True)
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
    if a.queue < 0 or a.deadline <= 0 or a.shutdown_timeout < 0 or a.run_deadline < 0:
        print("error: --queue must be >= 0, --deadline > 0, --run-deadline >= 0 and --shutdown-timeout >= 0",
              file=sys.stderr)
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
