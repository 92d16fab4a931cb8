"""The Streamlit side of the service layer: settings that persist across pages (``st.session_state``),
cached loaders (models/index/fitted defenses once per process via ``st.cache_resource``; data via
``st.cache_data``) and :func:`page_guard`, which turns any exception into a friendly message."""
from __future__ import annotations

import json
import os
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import streamlit as st

from sieve.dashboard import alerts as A
from sieve.dashboard import geometry as G
from sieve.dashboard import runs as R
from sieve.dashboard import session as S
from sieve.dashboard.safe import md_escape, scrub_secrets

if TYPE_CHECKING:
    from sieve.corpus import Dataset
    from sieve.defenses.base import Defense
    from sieve.experiment import AuditReport, Experiment, Snapshot
    from sieve.index import VectorIndex
    from sieve.resources import Resources

DEFAULTS: dict[str, Any] = {
    "dataset_path": None,          # filled from session.default_dataset_path()
    "uploaded_dataset": None,      # a Dataset built from an uploaded corpus file
    "condition": S.CLEAN,
    "defenses": list(S.DEFAULT_DEFENSES),
    "params": {},                  # {defense: {param: value}} chosen on the explorer / trade-offs
    "k_ctx": 5,
    "run_dir": None,
    "query_text": "",
    "query_id": "",
}


def _ensure_router() -> None:
    """A fresh server starts in Streamlit's legacy page-directory mode (``pages/`` beside ``app.py``):
    the first visit, when it is a deep link, runs the page file found by its name (each file is
    named after its ``url_path``, so ``/attack-lab`` finds ``pages/5_attack-lab.py``) without
    ``app.py``'s ``st.navigation``. Switch that process-wide mode off and rerun the same page through
    ``app.py`` (page identity is the url path in both modes)."""
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # pragma: no cover - other Streamlit versions
        return
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def init_state() -> None:
    """Fill missing session keys with defaults (idempotent; called by every page)."""
    _ensure_router()
    for k, v in DEFAULTS.items():
        if k not in st.session_state:
            st.session_state[k] = json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v
    if st.session_state["dataset_path"] is None:
        st.session_state["dataset_path"] = str(S.default_dataset_path())
    if st.session_state["run_dir"] is None:
        st.session_state["run_dir"] = str(S.default_run_dir())


# ---- error guard --------------------------------------------------------------------------------
def friendly(e: BaseException) -> str:
    """A one-paragraph message for an exception (domain errors carry their own clear text)."""
    from sieve.corpus import DatasetError
    from sieve.models.errors import LLMError, ModelError, ModelNotInstalledError

    msg = md_escape(scrub_secrets(str(e)) or type(e).__name__)
    if isinstance(e, DatasetError):
        return f"The dataset could not be loaded:\n\n{msg}\n\nFix the file(s) named above or choose another dataset on the Corpus & index page."
    if isinstance(e, ModelNotInstalledError):
        return f"A model is not installed: {msg}"
    if isinstance(e, LLMError):
        return f"The LLM call failed: {msg}. Check the endpoint settings (or use the local model) and try again."
    if isinstance(e, ModelError):
        return f"A model could not be loaded: {msg}"
    from sieve.evaluation.report import ReportError
    from sieve.evaluation.runner import RunError

    if isinstance(e, (ReportError, RunError)):
        return msg
    if isinstance(e, (FileNotFoundError, NotADirectoryError)):
        return f"Path not found: {msg}"
    return f"Something went wrong ({type(e).__name__}): {msg}"


@contextmanager
def page_guard(title: str) -> Iterator[None]:
    """Run a page body; any exception becomes ``st.error`` with details (secrets scrubbed) in an
    expander, never a raw traceback."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - this is the last line of defence of a page
        st.error(f"{md_escape(title)}: " + friendly(e))
        with st.expander("Details"):
            st.code(scrub_secrets("".join(traceback.format_exception_only(type(e), e))
                                  + "".join(traceback.format_tb(e.__traceback__)[-6:])), language=None)
    finally:   # also after st.stop(): the sidebar shows what the page chose on this run
        refresh_sidebar()


def show_error(prefix: str, e: BaseException) -> None:
    st.error(f"{md_escape(prefix)}: " + friendly(e))


# ---- cached loaders ---------------------------------------------------------------------------
def _mtime_key(path: str) -> str:
    p = Path(path)
    try:
        files = [p] if p.is_file() else sorted(f for f in p.iterdir() if f.is_file())
        return ";".join(f"{f.name}:{f.stat().st_mtime_ns}:{f.stat().st_size}" for f in files)
    except OSError:
        return "missing"


@st.cache_resource(show_spinner=False, max_entries=4)
def _dataset(path: str, mtime_key: str) -> "Dataset":
    return S.load_dataset(path)


def dataset() -> "Dataset":
    """The active dataset (an uploaded corpus, or the dataset directory in ``dataset_path``)."""
    init_state()
    up = st.session_state.get("uploaded_dataset")
    if up is not None:
        return up
    path = st.session_state["dataset_path"]
    return _dataset(path, _mtime_key(path))


@st.cache_resource(show_spinner=False)
def _real_resources() -> "Resources":
    return S.make_resources(tiny=False)


@st.cache_resource(show_spinner=False, max_entries=4)
def _tiny_resources(corpus_key: str, _texts: tuple[str, ...]) -> "Resources":
    return S.make_resources(tiny=True, corpus_texts=_texts)


def resources() -> "Resources":
    """Models once per process (real) or per corpus (tiny test models)."""
    if S.tiny_mode():
        ds = dataset()
        return _tiny_resources(ds.content_hash(), tuple(d.text for d in ds.documents))
    return _real_resources()


def _ds_key(ds: "Dataset") -> str:
    return f"{ds.path}|{ds.content_hash()}|{'tiny' if S.tiny_mode() else 'real'}"


@st.cache_resource(show_spinner=False, max_entries=4)
def _experiment(key: str, _ds: "Dataset", _res: "Resources") -> "Experiment":
    return S.make_experiment(_ds, _res)


def experiment() -> "Experiment":
    """The active dataset's experiment (snapshots, ranking, quarantine), once per dataset and process."""
    ds = dataset()
    res = resources()
    # the ledger path is part of the key: the experiment reads its quarantine exclusions from that file
    return _experiment(_ds_key(ds) + "|" + str(S.ledger_path(None if S.tiny_mode() else res)), ds, res)


def index() -> "VectorIndex":
    """The clean corpus's retriever index."""
    return experiment().base_index()


def view(condition: str) -> "Snapshot":
    """The corpus snapshot of ``condition`` (quarantine exclusions refreshed from the ledger)."""
    return experiment().snapshot(condition)


@st.cache_resource(show_spinner=False, max_entries=64)
def _defense(key: str, spec: str, params_json: str, condition: str, calib_json: str,
             _exp: "Experiment", questions_json: str = "[]") -> "Defense":
    return S.prepare(_exp, spec, condition, json.loads(params_json), json.loads(calib_json),
                     clean_questions=json.loads(questions_json))


CALIB_QUESTIONS = "calib_questions"   # session key: {dataset content hash: [typed clean questions]}


def clean_questions() -> list[str]:
    """The clean questions the analyst typed to calibrate defenses on the active dataset (a corpus
    without queries.jsonl); ``[]`` when none."""
    return list(st.session_state.get(CALIB_QUESTIONS, {}).get(dataset().content_hash(), []))


def set_clean_questions(questions: list[str]) -> None:
    """Remember typed clean questions for the active dataset (defenses prepared after this use them)."""
    qs = [q.strip() for q in questions if q.strip()]
    st.session_state.setdefault(CALIB_QUESTIONS, {})[dataset().content_hash()] = qs


def calibration() -> dict[str, dict[str, Any]]:
    """Thresholds learned on the clean condition of the shipped runs (the answers run, then the
    detection run, then the demo's shipped calibration), used when the user sets none."""
    if S.tiny_mode():
        return {}
    run_dir = str(st.session_state.get("run_dir") or S.default_run_dir())
    ds = dataset()
    roc = R.default_roc_run()
    demo = st.session_state.get("uploaded_dataset") is None and roc is not None and S.is_demo_dataset(ds)
    return _calibration(run_dir, _mtime_key(run_dir), str(roc) if demo else "",
                        _mtime_key(str(roc)) + _mtime_key(str(S.SHIPPED_CALIBRATION)) if demo else "",
                        ds.content_hash() if demo else "")


@st.cache_data(show_spinner=False, max_entries=16)
def _calibration(run_dir: str, run_key: str, roc: str, roc_key: str, ds_hash: str) -> dict[str, dict[str, Any]]:
    """:func:`calibration`, read once per state of its files (every rerun prepares the selected
    defenses through the cache, and each asks for it)."""
    own = S.run_calibration(run_dir)
    if not roc:
        return own   # the demo's detection run and shipped calibration are for the demo corpus only
    return S.merged_calibration(own, S.run_calibration(roc), S.shipped_calibration(ds_hash))


def defense(spec: str, condition: str, params: dict[str, Any] | None = None) -> "Defense":
    """A prepared (fitted / calibrated) defense for ``condition``, cached per parameters."""
    ds = dataset()
    return _defense(_ds_key(ds), spec, json.dumps(params or {}, sort_keys=True), condition,
                    json.dumps(calibration(), sort_keys=True), experiment(), json.dumps(clean_questions()))


@st.cache_resource(show_spinner=False, max_entries=32)
def _lab_defense(key: str, spec: str, family: str, poisons_key: str, params_json: str, calib_json: str,
                 _exp: "Experiment", _sandbox: "Snapshot") -> "Defense":
    return S.prepare(_exp, spec, snapshot=_sandbox, params=json.loads(params_json),
                     calibration=json.loads(calib_json))


def lab_defense(spec: str, family: str, poisons: Any, sandbox: "Snapshot") -> "Defense":
    """A defense prepared for the attack lab's sandbox, cached across reruns and sessions of the
    process: a query-time defense does not depend on the sandbox (it is the explorer's prepared
    ``spec`` on the clean condition), a corpus-time one (RSG, fusion) is fitted on the sandbox once per
    set of poisons (ids and texts)."""
    import hashlib

    from sieve.dashboard.lab import LAB_PARAMS
    from sieve.experiment import build_defense

    calib = calibration()
    params = dict(LAB_PARAMS.get(spec, {}))
    if not build_defense(spec, params, calib).corpus_time:
        return defense(spec, S.CLEAN, params)
    pkey = hashlib.sha256("\n".join(f"{d.id}\t{d.text}" for d in poisons).encode("utf-8")).hexdigest()
    return _lab_defense(_ds_key(dataset()), spec, family, pkey, json.dumps(params, sort_keys=True),
                        json.dumps(calib, sort_keys=True), experiment(), sandbox)


@st.cache_resource(show_spinner=False)
def _audit_store() -> dict[tuple[str, str], "AuditReport"]:
    """Audits per (dataset key, condition), shared by every session of the process. A plain store
    rather than a cached function, so the first (slow) run can drive a progress bar."""
    return {}


def audit(condition: str, progress: bool = False) -> "AuditReport":
    """The RSG audit of ``condition``'s snapshot (once per dataset and condition); with ``progress``
    a progress bar follows the first run and disappears when it is done."""
    ds = dataset()
    store = _audit_store()
    key = (_ds_key(ds), condition)
    if key in store:
        return store[key]
    if not progress:
        report = A.audit(experiment(), condition)
    else:
        report = _audit_with_progress(experiment(), condition)
    while len(store) >= 16:
        store.pop(next(iter(store)))
    store[key] = report
    return report


def _audit_with_progress(exp: "Experiment", condition: str) -> "AuditReport":
    """The audit in a worker thread while this script thread moves a progress bar: the audit reports
    only its stage changes, so between them the bar advances with the elapsed time (towards, never
    past, the next stage) and names the stage and the seconds so far."""
    import threading
    import time

    bar = st.progress(0.0, text="RSG audit: loading the retriever index of the snapshot…")
    last: dict[str, Any] = {"frac": 0.0, "msg": "loading the retriever index of the snapshot",
                            "at": time.perf_counter()}
    out: dict[str, Any] = {}

    def step(frac: float, msg: str) -> None:   # worker thread: no Streamlit calls here
        last.update(frac=min(1.0, max(0.0, float(frac))), msg=msg, at=time.perf_counter())

    def work() -> None:
        try:
            out["report"] = A.audit(exp, condition, step)
        except BaseException as e:  # noqa: BLE001 - re-raised in the script thread
            out["error"] = e

    t0 = time.perf_counter()
    worker = threading.Thread(target=work, name="sieve-audit", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.5)
            frac, since = float(last["frac"]), time.perf_counter() - float(last["at"])
            ceiling = 0.9 if frac < 0.9 else 1.0   # the next stage the audit reports
            shown = frac + (ceiling - frac) * (1.0 - 0.5 ** (since / 20.0)) * 0.95
            bar.progress(min(0.99, shown), text=f"RSG audit: {md_escape(last['msg'])} · "
                                                f"{time.perf_counter() - t0:.0f} s so far")
    finally:
        bar.empty()
    if "error" in out:
        raise out["error"]
    return out["report"]


@st.cache_data(show_spinner=False, max_entries=32)
def projection(content_key: str, method: str, _vectors: Any, n_neighbors: int = 15) -> Any:
    """2-D projection cached by content hash (the vectors themselves are not hashed)."""
    return G.project_2d(_vectors, method, n_neighbors=n_neighbors)


@st.cache_resource(show_spinner=False, max_entries=4)
def _shipped_answers(key: str, mtime_key: str, _ds: "Dataset", _config: Any) -> Any:
    from sieve.dashboard import lab as L

    return L.load_shipped_answers(_ds, _config)


def shipped_answers() -> Any:
    """The Attack lab's shipped answers (:class:`sieve.dashboard.lab.ShippedAnswers`), checked once
    per dataset and process against the corpus, retriever and generator in use."""
    from sieve.dashboard import lab as L

    ds = dataset()
    return _shipped_answers(_ds_key(ds), f"{L.SHIPPED_ANSWERS}|{_mtime_key(str(L.SHIPPED_ANSWERS))}", ds, resources().config)


@st.cache_resource(show_spinner=False, max_entries=8)
def _run(path: str, mtime_key: str) -> R.RunData:
    return R.load_run(path)


def run(path: str) -> R.RunData:
    return _run(path, _mtime_key(path))


@st.cache_data(show_spinner=False, max_entries=8)
def _run_summary(path: str, mtime_key: str) -> dict[str, Any]:
    from sieve.evaluation.records import read_summary

    return read_summary(path)


def run_summary(path: str) -> dict[str, Any]:
    """A run's ``summary.json`` alone (cached; no records are read)."""
    return _run_summary(path, _mtime_key(path))


@st.cache_data(show_spinner=False, max_entries=16)
def _tradeoff_rows(path: str, mtime_key: str, overrides_json: str, k_ctx: int) -> "Any":
    return R.tradeoff_rows(_run(path, mtime_key), json.loads(overrides_json), k_ctx)


def tradeoff_rows(path: str, overrides: dict[str, Any], k_ctx: int) -> Any:
    """:func:`sieve.dashboard.runs.tradeoff_rows` of a run, cached per thresholds and k_ctx (the
    recorded settings, shown as the comparison on every rerun, are computed once)."""
    return _tradeoff_rows(path, _mtime_key(path), json.dumps(overrides, sort_keys=True, default=str), int(k_ctx))


@st.cache_data(show_spinner=False, max_entries=64)
def _roc_curves(path: str, mtime_key: str, attack: str) -> dict[str, Any]:
    r = _run(path, mtime_key)
    return {name: rd for name in r.defenses if (rd := R.roc_data(r, name, attack)) is not None}


def roc_curves(path: str, attack: str) -> dict[str, Any]:
    """ROC data of every scoring defense of a run for one attack family (cached; the run is fixed)."""
    return _roc_curves(path, _mtime_key(path), attack)


@st.cache_data(show_spinner=False, max_entries=16)
def _run_knobs(path: str, mtime_key: str) -> list[dict[str, Any]]:
    r = _run(path, mtime_key)
    return [k for d in r.defenses for k in R.threshold_knobs(r, d)]


def run_knobs(path: str) -> list[dict[str, Any]]:
    """Every live-tunable threshold of a run (:func:`sieve.dashboard.runs.threshold_knobs`), cached."""
    return _run_knobs(path, _mtime_key(path))


def clean_cost(defense: str) -> tuple[dict[str, Any] | None, str]:
    """``defense``'s clean-question cost in the shipped runs (:func:`sieve.dashboard.runs.clean_cost`):
    the answers run of ``run_dir`` first (clean accuracy too), then the detection run; with the run's
    name for the page. ``(None, "")`` on another corpus than the runs' (their numbers are not about it)
    or when no run has the row."""
    ds = dataset()
    if st.session_state.get("uploaded_dataset") is not None or not S.is_demo_dataset(ds):
        return None, ""
    for path in (st.session_state.get("run_dir"), R.default_roc_run()):
        if not path:
            continue
        try:
            summary = run_summary(str(path))
        except Exception:  # noqa: BLE001 - a missing or damaged run simply has no number to give
            continue
        cost = R.clean_cost(summary, defense)
        if cost is not None:
            return cost, S.display_path(str(path))
    return None, ""


def run_corpus_note(run_data: R.RunData) -> str | None:
    """A plain sentence when a run was made on another corpus than the active dataset (after an
    upload, the shipped demo runs are about the demo, not about the upload); None when they match or
    the run does not say. Plain text: the caller escapes it for markdown."""
    ds_info = (run_data.config or {}).get("dataset") or {}
    digest = ds_info.get("corpus_sha256") if isinstance(ds_info, dict) else None
    ds = dataset()
    if not digest or digest == ds.content_hash():
        return None
    name = ds_info.get("name") or "another dataset"
    return (f"This run was made on {name}, not on the active dataset {ds.name}: its numbers "
            "are about that corpus. Make a run of yours with sieve eval DATASET --out DIR (add --generate for "
            "answers) and enter its directory on Trade-offs.")


def ledger() -> Any:
    p = S.ledger_path(None if S.tiny_mode() else resources())
    return _ledger(str(p))


@st.cache_resource(show_spinner=False)
def _ledger(path: str) -> Any:
    return A.open_ledger(path)


_SIDEBAR = threading.local()   # the sidebar slot of the script run on this thread


def _sidebar_text() -> tuple[str, str]:
    """The sidebar's dataset name and condition (raw; the caller escapes them)."""
    up = st.session_state.get("uploaded_dataset")
    name = f"upload: {up.name}" if up is not None else Path(st.session_state["dataset_path"]).name
    return name, str(st.session_state["condition"])


def _draw_sidebar(slot: Any) -> None:
    name, cond = _sidebar_text()
    slot.caption(f"Dataset: **{md_escape(name)}**  \nCondition: **{md_escape(cond)}**"
                 + ("  \nModels: tiny test models" if S.tiny_mode() else ""))


def sidebar_status() -> None:
    """Dataset / condition / mode line in the sidebar (never secrets). Drawn into a slot that
    :func:`page_guard` fills again when the page body is done, so a condition or dataset chosen on
    this run shows at once (not one step behind)."""
    init_state()
    with st.sidebar:
        slot = st.empty()
    _draw_sidebar(slot)
    _SIDEBAR.slot = slot


def refresh_sidebar() -> None:
    """Redraw the sidebar line with the session's current dataset and condition."""
    slot = getattr(_SIDEBAR, "slot", None)
    if slot is None:
        return
    try:
        _draw_sidebar(slot)
    except Exception:  # noqa: BLE001 - a slot of an earlier run (never fatal for the page)
        pass


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")
