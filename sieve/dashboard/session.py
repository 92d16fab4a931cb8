"""What every dashboard page shares: modes, paths, models, the dataset and its experiment.

Pages never rank, prepare or audit on their own: they take an :class:`~sieve.experiment.Experiment`
(cached per dataset by :mod:`sieve.dashboard.state`) and call the library through it.

Test hooks (environment): ``SIEVE_DASHBOARD_TINY=1`` uses the tiny in-process models of
:mod:`sieve.models.tiny` instead of the packaged ones; ``SIEVE_DASHBOARD_DATASET`` /
``SIEVE_DASHBOARD_RUN`` / ``SIEVE_DASHBOARD_LEDGER`` override the default dataset directory, run
directory and ledger file.
"""
from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from sieve.constants import CLEAN, CLEAN_BUDGET, DEPTH

if TYPE_CHECKING:
    import pandas as pd

    from sieve.corpus import Dataset
    from sieve.defenses.base import Defense
    from sieve.experiment import Experiment, Snapshot
    from sieve.resources import Resources


ROOT = Path(__file__).resolve().parents[2]


DEMO_DIR = ROOT / "demo_data"


DEMO_RUN = DEMO_DIR / "runs" / "demo"


EXPLORER_DEPTH = DEPTH         # retrieval depth of the explorer (TRIS k=50; RSQ reads the top-20)


#: What the explorer and the attack lab start with: Sieve's recommended detector (``fusion``, README
#: "What the demo evaluation shows") first, then the papers' methods (TRIS, RAGSieve's RSQ and RSG→RSQ).
DEFAULT_DEFENSES = ("fusion", "tris", "rsq", "rsg_rsq")


LIVE_DEFENSES = ("none", "fusion", "tris", "tris_l1", "tris_l2", "rsq", "rsg", "rsg_rsq", "perplexity", "trustrag",
                 "robustrag", "tris_full", "tris_l3")


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as the pages show it: relative to the project when inside it (never the server's
    absolute layout), else its last two parts."""
    p = Path(os.path.realpath(str(path)))
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(Path(*p.parts[-2:])) if len(p.parts) >= 2 else p.name


def tiny_mode() -> bool:
    """True when ``SIEVE_DASHBOARD_TINY`` asks for the tiny in-process models (tests, quick demos)."""
    return os.environ.get("SIEVE_DASHBOARD_TINY", "").strip().lower() in ("1", "true", "yes")


def default_dataset_path() -> Path:
    return Path(os.environ.get("SIEVE_DASHBOARD_DATASET") or DEMO_DIR)


def default_run_dir() -> Path:
    return Path(os.environ.get("SIEVE_DASHBOARD_RUN") or DEMO_RUN)


def ledger_path(resources: "Resources | None" = None) -> Path:
    env = os.environ.get("SIEVE_DASHBOARD_LEDGER")
    if env:
        return Path(env)
    from sieve.ledger import default_ledger_path

    if tiny_mode():
        return Path(tempfile.gettempdir()) / "sieve-dashboard-tiny" / "ledger.sqlite"
    return default_ledger_path(resources.config if resources is not None else None)


def tiny_reply(prompt: str, system: str | None = None) -> str:
    """The tiny generator used with ``SIEVE_DASHBOARD_TINY``: the first sentence of the first context
    (a stand-in that, like a faithful reader, repeats what the top context asserts)."""
    m = re.search(r"\[Context 1\]\n(.*?)(?:\n\[End of context 1\])", prompt, flags=re.S)
    if not m:
        return "I don't know"
    first = re.split(r"(?<=[.!?])\s", m.group(1).strip(), maxsplit=1)[0]
    return first[:200]


def make_resources(tiny: bool | None = None, corpus_texts: Sequence[str] = ()) -> "Resources":
    """Resources for the dashboard: the packaged models (loaded lazily, once per process through
    :mod:`sieve.models`), or the tiny in-process models when ``tiny``."""
    from sieve.config import SieveConfig
    from sieve.resources import Resources

    tiny = tiny_mode() if tiny is None else tiny
    if not tiny:
        return Resources(SieveConfig.load())
    from sieve.models.tiny import ScriptedLLM
    from sieve.testing_models import tiny_resources

    return tiny_resources(SieveConfig(), corpus_texts, llm=ScriptedLLM(tiny_reply, model_id="tiny-echo"))


def model_summary(resources: "Resources") -> dict[str, str]:
    """Configured model per role (never the API key)."""
    c = resources.config
    llm = c.llm.resolved_base_url()
    return {
        "retriever": c.models.retriever, "judge": c.models.judge, "causal LM": c.models.causal_lm,
        "token encoder": f"{c.models.token_encoder} (layer {c.models.token_encoder_layer})",
        "generator / L3": (f"endpoint {llm} ({c.llm.resolved_model() or 'default model'})" if llm
                           else f"local {c.llm.local_model}") if c.llm.enabled else "disabled",
    }


def user_data_dir() -> Path:
    """Where a user keeps datasets for the dashboard: ``$XDG_DATA_HOME/sieve/datasets``
    (``~/.local/share/sieve/datasets``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "sieve" / "datasets"


def dataset_roots() -> list[Path]:
    """Folders the dashboard may open datasets from: ``SIEVE_DASHBOARD_ROOTS`` (``os.pathsep``-separated)
    or, by default, the project's ``demo_data`` and :func:`user_data_dir`; the operator's
    ``SIEVE_DASHBOARD_DATASET`` is always allowed."""
    env = os.environ.get("SIEVE_DASHBOARD_ROOTS", "").strip()
    roots = [Path(p) for p in env.split(os.pathsep) if p.strip()] if env else [DEMO_DIR, user_data_dir()]
    if os.environ.get("SIEVE_DASHBOARD_DATASET"):
        roots.append(Path(os.environ["SIEVE_DASHBOARD_DATASET"]))
    return [Path(os.path.realpath(r.expanduser())) for r in roots]


def allowed_path(path: str | os.PathLike[str]) -> Path | None:
    """The real path of ``path`` when it exists inside one of :func:`dataset_roots`, else None.
    Symlinks and ``..`` are resolved first, so neither can leave a root."""
    try:
        real = Path(os.path.realpath(Path(str(path)).expanduser()))
    except (OSError, ValueError):
        return None
    if not any(real == r or real.is_relative_to(r) for r in dataset_roots()):
        return None
    return real if real.exists() else None


def load_dataset(path: str | os.PathLike[str]) -> "Dataset":
    """:func:`sieve.corpus.load_dataset` restricted to :func:`dataset_roots`. A missing path and a path
    outside the allowed folders get the same message (the dashboard never reveals whether a
    server path exists); validation problems are DatasetErrors naming file, line and field."""
    from sieve.corpus import DatasetError
    from sieve.corpus import load_dataset as _load

    if not str(path).strip():
        raise DatasetError("<path>", None, None, "give a dataset directory or a corpus file")
    p = allowed_path(path)
    if p is None:
        raise DatasetError(str(path), None, None,
                           "no dataset the dashboard may open there; give a dataset directory (corpus.jsonl, "
                           "queries.jsonl, …) or a corpus file inside an allowed folder: "
                           + ", ".join(str(r) for r in dataset_roots()))
    ds = _load(p)
    if not ds.documents:
        raise DatasetError(str(p), None, None, "the corpus is empty")
    return ds


def dataset_from_upload(name: str, data: bytes, directory: str | os.PathLike[str] | None = None) -> "Dataset":
    """A dataset made of one uploaded corpus file (.jsonl/.csv/.parquet), written to a private temp
    directory that is removed again once the file is loaded (the dataset lives in memory)."""
    suffix = Path(name).suffix.lower()
    if suffix not in (".jsonl", ".csv", ".parquet"):
        from sieve.corpus import DatasetError

        raise DatasetError(name, None, None, "upload a .jsonl, .csv or .parquet corpus file")
    import shutil

    from sieve.corpus import load_dataset as _load

    base = Path(tempfile.mkdtemp(prefix="sieve-upload-", dir=directory))
    try:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(name).name) or f"corpus{suffix}"
        target = base / safe
        target.write_bytes(data)
        ds = _load(target)
        ds.documents   # noqa: B018 - read everything before the file goes away
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if not ds.documents:
        from sieve.corpus import DatasetError

        raise DatasetError(name, None, None, "the corpus is empty")
    return ds


def dataset_from_store(source: str) -> "Dataset":
    """A store source (``chroma:///dir?collection=NAME``, ``qdrant:``, ``lancedb:``; sieve/stores/uri.py)
    as the dashboard's dataset: its documents, ids and metadata read in batches, nothing written to the
    store (sieve/experiment/stores.py). A store holds no questions or attack families, so the pages
    work as on an uploaded corpus (typed queries, calibration on typed clean questions). Store errors
    are ``StoreError`` with one line naming the source."""
    from sieve.experiment.stores import store_dataset
    from sieve.stores.readers import read_store
    from sieve.stores.uri import parse_store_uri

    ds = store_dataset(read_store(parse_store_uri(source), progress=False))
    if not ds.documents:
        from sieve.stores.uri import StoreError

        raise StoreError(f"{source}: the collection is empty")
    return ds


def conditions(ds: "Dataset") -> list[str]:
    """``clean`` plus one condition per attack family of ``attacks.jsonl``."""
    return [CLEAN, *ds.attack_families()]


def corpus_stats(ds: "Dataset") -> dict[str, Any]:
    """Headline numbers and a per-document length table for the Corpus page."""
    import pandas as pd

    words = np.array([len(d.text.split()) for d in ds.documents]) if ds.documents else np.zeros(0)
    lengths = pd.DataFrame({"id": [d.id for d in ds.documents], "words": words,
                            "title": [d.title for d in ds.documents]})
    fam = {f: len(ds.attack_documents(f)) for f in ds.attack_families()}
    return {
        "documents": len(ds.documents), "queries": len(ds.queries), "targets": len(ds.targets),
        "qrels": sum(len(v) for v in ds.qrels.values()), "attack_families": fam,
        "words_median": float(np.median(words)) if words.size else 0.0,
        "words_max": int(words.max()) if words.size else 0,
        "titles": len({d.title for d in ds.documents if d.title}),
        "content_hash": ds.content_hash()[:10], "lengths": lengths, "summary": ds.summary(),
    }


def make_experiment(ds: "Dataset", resources: "Resources", quarantine: str = "open_and_confirmed") -> "Experiment":
    """The dashboard's experiment over ``ds``: the persisted retriever index (shipped demo vectors are
    reused; with injected tiny models an in-memory index, nothing written) and the quarantine ledger
    honoured like ``sieve search`` does."""
    from sieve.experiment import Experiment

    return Experiment(ds, resources, depth=EXPLORER_DEPTH, ledger_path=ledger_path(resources), quarantine=quarantine)


#: Clean queries used to calibrate a threshold that neither the user nor the demo run provides
#: (the explorer must answer in seconds; ``sieve calibrate`` uses every clean query).
DASHBOARD_CALIBRATION_QUERIES = 20


def prepare(experiment: "Experiment", spec: str, condition: str = CLEAN, params: Mapping[str, Any] | None = None,
            calibration: Mapping[str, Mapping[str, Any]] | None = None,
            snapshot: "Snapshot | None" = None, clean_questions: Sequence[str] = ()) -> "Defense":
    """``spec`` prepared for ``condition`` (or a sandbox ``snapshot``, the attack lab's) through
    :func:`sieve.experiment.prepare_defense`: learned thresholds from ``calibration`` (the demo
    run's), else calibrated on clean queries only — the dataset's, or, when given, the analyst's
    ``clean_questions`` (typed on the page for a corpus without queries), ranked on the clean corpus."""
    from sieve.experiment import prepare_defense

    rankings = [experiment.rank(q, condition=CLEAN) for q in clean_questions if q.strip()] or None
    return prepare_defense(experiment, spec, condition=condition, snapshot=snapshot, params=params,
                           calibration=calibration, clean_budget=CLEAN_BUDGET, clean_rankings=rankings,
                           clean_limit=DASHBOARD_CALIBRATION_QUERIES)


def manual_threshold(spec: str) -> tuple[str, float] | None:
    """``(parameter, default)`` when setting ``spec``'s threshold parameter by hand is enough to run
    it without calibration (its learned state is only that threshold); None for a defense that also
    learns other state on clean questions (fusion's clean p-value nulls)."""
    from sieve.experiment import build_defense

    d = build_defense(spec, {}, {})
    param = getattr(d, "threshold_param", None)
    if not param:
        return None
    default = d.get_params().get(param)
    try:
        ok = build_defense(spec, {param: 1.0 if default is None else default}, {}).is_calibrated()
    except Exception:  # noqa: BLE001 - a parameter this spec does not take
        return None
    return (param, 1.0 if default is None else float(default)) if ok else None


def calibration_fix(spec: str, error: BaseException) -> str | None:
    """How to make ``spec`` run when preparing it failed because nothing clean was there to learn its
    threshold from (a corpus without queries): plain words (no markdown) naming the page's controls,
    or None for any other failure."""
    from sieve.experiment.defenses import DefensePreparationError

    if not (isinstance(error, DefensePreparationError) and error.stage == "calibrate"):
        return None
    how = ("type a few questions your corpus answers (one per line) in the box 'Calibrate on your own questions' "
           "below and press Calibrate: the defense learns from their passages what clean passages look like")
    manual = manual_threshold(spec)
    if manual is not None:
        how += f"; or set its threshold ({manual[0]}) by hand there"
    return (f"{spec} cannot run on this corpus: it learns its threshold on clean questions, and this corpus has "
            f"none. To fix it, {how}.")


def defense_catalog() -> "pd.DataFrame":
    import pandas as pd

    from sieve.registry import DEFENSES

    return pd.DataFrame([{"defense": e.name, "summary": e.summary, "paper": e.paper, "needs": ", ".join(e.needs)}
                         for e in DEFENSES.entries()])


def run_calibration(run_dir: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Thresholds learned on the clean condition of a run (``config.json`` → ``calibrated``, read and
    verified by :func:`sieve.evaluation.records.read_run_config`); ``{}`` without one, or when it is damaged."""
    from sieve.evaluation.records import CONFIG, RunError, read_run_config

    p = Path(run_dir or default_run_dir()) / CONFIG
    if not p.exists():
        return {}
    try:
        return dict(read_run_config(p).get("calibrated") or {})
    except (RunError, OSError):
        return {}


#: Thresholds calibrated on the demo's clean questions for the defaults whose calibration the shipped
#: runs do not hold (TRIS's L3 verifier: minutes of local-LLM calls otherwise), written by
#: ``scripts/build_dashboard_calibration.py`` and used only for the same corpus.
SHIPPED_CALIBRATION = DEMO_DIR / "runs" / "dashboard-calibration.json"


def shipped_calibration(dataset_hash: str, path: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """The calibrated thresholds shipped with the demo (``{}`` when missing, damaged or for another corpus)."""
    import json

    try:
        doc = json.loads(Path(path or SHIPPED_CALIBRATION).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("corpus_sha256") != dataset_hash:
        return {}
    return {k: dict(v) for k, v in (doc.get("calibrated") or {}).items() if isinstance(v, dict)}


def is_demo_dataset(ds: "Dataset") -> bool:
    """True for the bundled demo dataset directory (the shipped runs were made on it)."""
    try:
        return Path(os.path.realpath(str(ds.path))) == Path(os.path.realpath(DEMO_DIR))
    except (OSError, TypeError, ValueError):
        return False


def merged_calibration(*sources: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per defense, each threshold from the first source that sets it (``None`` = not calibrated there)."""
    out: dict[str, dict[str, Any]] = {}
    for src in sources:
        for name, vals in src.items():
            for k, v in vals.items():
                if v is not None and out.get(name, {}).get(k) is None:
                    out.setdefault(name, {})[k] = v
    return out


def timed(fn: Callable[..., Any], *args: Any, **kw: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, (time.perf_counter() - t) * 1000
