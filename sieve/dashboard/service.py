"""The dashboard's service layer: loaders and the call paths each page draws (no Streamlit here).

Pages call these functions and draw what they return; every number comes from the library
(:mod:`sieve.index`, :mod:`sieve.defenses`, :mod:`sieve.attacks`, :mod:`sieve.evaluation`,
:mod:`sieve.ledger`). The Streamlit caching wrappers live in :mod:`sieve.dashboard.state`.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from sieve.dashboard.safe import snippet
from sieve.types import Decision, DefenseResult, Document, Ranking, Target

if TYPE_CHECKING:
    import pandas as pd

    from sieve.corpus import Dataset
    from sieve.defenses.base import Defense
    from sieve.defenses.rsg import RSGAudit
    from sieve.index import VectorIndex
    from sieve.resources import Resources

ROOT = Path(__file__).resolve().parents[2]
DEMO_DIR = ROOT / "demo_data"
DEMO_RUN = DEMO_DIR / "runs" / "demo"
CLEAN = "clean"
EXPLORER_DEPTH = 50            # retrieval depth of the explorer (TRIS k=50; RSQ reads the top-20)
DEFAULT_DEFENSES = ("tris", "rsq", "rsg_rsq")
#: Defenses that are cheap enough to run live in the explorer (LLM-heavy ones are opt-in).
LIVE_DEFENSES = ("none", "tris", "tris_l1", "tris_l2", "rsq", "rsg", "rsg_rsq", "perplexity", "trustrag",
                 "robustrag", "tris_full", "tris_l3")


# =============================================================================================
# configuration / modes
# =============================================================================================
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
    from sieve.models.tiny import ScriptedLLM, tiny_resources

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


# =============================================================================================
# datasets
# =============================================================================================
def load_dataset(path: str | os.PathLike[str]) -> "Dataset":
    """:func:`sieve.corpus.load_dataset` with a clear error for a missing path (DatasetError otherwise)."""
    from sieve.corpus import DatasetError, load_dataset as _load

    p = Path(str(path)).expanduser()
    if not str(path).strip():
        raise DatasetError("<path>", None, None, "give a dataset directory or a corpus file")
    if not p.exists():
        raise DatasetError(str(p), None, None,
                           "not found; give a dataset directory (corpus.jsonl, queries.jsonl, …) or a corpus file")
    ds = _load(p)
    if not ds.documents:
        raise DatasetError(str(p), None, None, "the corpus is empty")
    return ds


def dataset_from_upload(name: str, data: bytes, directory: str | os.PathLike[str] | None = None) -> "Dataset":
    """A dataset made of one uploaded corpus file (.jsonl/.csv/.parquet), written to a private temp
    directory (the upload is only read)."""
    suffix = Path(name).suffix.lower()
    if suffix not in (".jsonl", ".csv", ".parquet"):
        from sieve.corpus import DatasetError

        raise DatasetError(name, None, None, "upload a .jsonl, .csv or .parquet corpus file")
    base = Path(directory or tempfile.mkdtemp(prefix="sieve-upload-"))
    base.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(name).name) or f"corpus{suffix}"
    target = base / safe
    target.write_bytes(data)
    return load_dataset(target)


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


# =============================================================================================
# index and attack-condition views
# =============================================================================================
def open_dataset_index(ds: "Dataset", resources: "Resources") -> "VectorIndex":
    """The persisted retriever index (reused when unchanged; shipped demo vectors are copied); with
    injected tiny models an in-memory index (nothing written)."""
    from sieve.index import VectorIndex, open_index

    if getattr(resources, "_models_injected", False):
        return VectorIndex.build(ds.documents, resources.retriever, progress=False, cache=resources.cache)
    return open_index(ds, resources, progress=False)


def condition_documents(ds: "Dataset", condition: str) -> list[Document]:
    return [] if condition == CLEAN else ds.attack_documents(condition)


def condition_view(index: "VectorIndex", ds: "Dataset", condition: str) -> "VectorIndex":
    """Clean index, or the clean index plus every document of the attack family (DESIGN.md:
    an attack condition = clean corpus + all documents of that family; base never re-embedded)."""
    docs = condition_documents(ds, condition)
    return index.with_documents(docs) if docs else index


def quarantined_ids(view: "VectorIndex", resources: "Resources | None" = None,
                    policy: str = "open_and_confirmed") -> set[str]:
    """Documents of ``view`` the quarantine ledger keeps out of retrieval under ``policy`` (same rule as
    ``sieve search``: alert state and content hash must match). No ledger file → nothing excluded."""
    from sieve.ledger import Ledger

    path = ledger_path(resources)
    if policy == "none" or not path.exists():
        return set()
    return Ledger(path).quarantined_ids(view.documents, policy)


def rank_query(view: "VectorIndex", ds: "Dataset", query: str, condition: str = CLEAN, query_id: str = "",
               depth: int = EXPLORER_DEPTH, exclude: "set[str] | frozenset[str]" = frozenset()) -> Ranking:
    """The explorer's ranking: retrieval on the condition's snapshot with correct/target answers
    filled from the dataset; forced-top families are pinned with :func:`force_top` (§7.3)."""
    correct: tuple[str, ...] = ()
    target_answer = ""
    t = ds.targets_by_query.get(query_id) if query_id else None
    if t is not None:
        correct, target_answer = tuple(t.correct_answers), t.target_answer
    elif query_id:
        try:
            correct = tuple(ds.query_by_id(query_id).answers)
        except KeyError:
            pass
    if condition != CLEAN and query_id:
        recs = [r for r in ds.attack_records(condition) if r.query_id == query_id]
        if recs:
            target_answer = recs[0].target_answer or target_answer
            correct = tuple(recs[0].correct_answers) or correct
    ranking = view.rank(query, depth, query_id=query_id, condition=condition, correct_answers=correct,
                        target_answer=target_answer, exclude=set(exclude))
    from sieve.attacks.placement import apply_placement

    return apply_placement(ranking, ds, depth)


# =============================================================================================
# defenses
# =============================================================================================
def defense_catalog() -> "pd.DataFrame":
    import pandas as pd

    from sieve.registry import DEFENSES

    return pd.DataFrame([{"defense": e.name, "summary": e.summary, "paper": e.paper, "needs": ", ".join(e.needs)}
                         for e in DEFENSES.entries()])


def run_calibration(run_dir: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Thresholds learned on the clean condition of a run (``config.json`` → ``calibrated``)."""
    import json

    p = Path(run_dir or default_run_dir()) / "config.json"
    if not p.exists():
        return {}
    try:
        return dict(json.loads(p.read_text(encoding="utf-8")).get("calibrated") or {})
    except (OSError, ValueError):
        return {}


def build_defense(spec: str, params: dict[str, Any] | None = None,
                  calibration: dict[str, dict[str, Any]] | None = None) -> "Defense":
    """A defense by registered name or ``a+b`` spec (the runner's :func:`make_defense`), with
    learned thresholds from ``calibration`` under explicit ``params``."""
    from sieve.evaluation.runner import make_defense

    merged = {**((calibration or {}).get(spec) or {}), **(params or {})}
    return make_defense(spec, merged)


def needs_threshold(defense: "Defense") -> bool:
    p = defense.threshold_param
    return p is not None and getattr(defense, p, None) is None


def clean_rankings(index: "VectorIndex", ds: "Dataset", limit: int = 20) -> list[Ranking]:
    """Clean rankings of the first ``limit`` queries (calibration material; never attack data)."""
    return [rank_query(index, ds, q.text, CLEAN, q.id) for q in ds.queries[:limit]]


def prepare_defense(spec: str, params: dict[str, Any] | None, view: "VectorIndex", ds: "Dataset",
                    resources: "Resources", base_index: "VectorIndex | None" = None,
                    calibration: dict[str, dict[str, Any]] | None = None) -> "Defense":
    """Build ``spec``, fit corpus-time detectors on the condition snapshot ``view``, and calibrate a
    missing threshold on clean rankings of ``base_index`` (5 % clean budget, §9.2)."""
    d = build_defense(spec, params, calibration)
    if d.corpus_time:
        d.fit(view, resources)
    if needs_threshold(d):
        d.calibrate(clean_rankings(base_index or view, ds), resources, 0.05)
    return d


@dataclass
class ExplorerResult:
    """What the Query explorer draws for one query."""

    ranking: Ranking
    results: dict[str, DefenseResult]
    errors: dict[str, str] = field(default_factory=dict)
    rsq_rows: dict[str, dict[str, Any]] = field(default_factory=dict)   # doc id → RSQ evidence
    timings_ms: dict[str, float] = field(default_factory=dict)

    def table(self, top: int = 20) -> "pd.DataFrame":
        """Ranked list with each defense's decision and margin (Decision.margin())."""
        import pandas as pd

        rows = []
        for doc in self.ranking.documents[:top]:
            row: dict[str, Any] = {"rank": doc.rank, "id": doc.id, "poison": "yes" if doc.poison else "",
                                   "retriever score": round(float(doc.score), 4), "text": snippet(doc.text, 90)}
            for name, res in self.results.items():
                dec = res.decision_for(doc.id)
                row[name] = decision_label(dec)
                m = dec.margin() if dec is not None else None
                row[f"{name} margin"] = None if m is None else round(m, 3)
            rows.append(row)
        return pd.DataFrame(rows)


def decision_label(dec: Decision | None) -> str:
    if dec is None:
        return "—"
    if dec.removed:
        return f"removed ({dec.layer})" if dec.layer else "removed"
    return "kept" if dec.status in ("scored", "ran") else dec.status.replace("_", " ")


def rsq_evidence(ranking: Ranking, resources: "Resources", results: dict[str, DefenseResult]) -> dict[str, dict[str, Any]]:
    """RSQ evidence rows (E_a, E_i, E_p, E_s, traces) per candidate document: from a selected RSQ /
    RSG→RSQ result when present, else computed with :func:`sieve.defenses.rsq.score_candidates`."""
    for res in results.values():
        rows = {d.doc_id: d.evidence for d in res.decisions if d.layer == "RSQ" and "E_a" in d.evidence}
        if rows and any(r.get("survivor_rank") is None for r in rows.values()):
            return rows
    from sieve.defenses.rsq import CONTEXT_SIZE, score_candidates

    if len(ranking.documents) < CONTEXT_SIZE:
        return {}
    rows_, _ = score_candidates(ranking, resources)
    return {r.doc_id: r.evidence() for r in rows_}


def explore(view: "VectorIndex", ds: "Dataset", resources: "Resources", query: str, condition: str,
            defenses: dict[str, "Defense"], query_id: str = "", k_ctx: int = 5,
            depth: int = EXPLORER_DEPTH, exclude: "set[str] | frozenset[str]" = frozenset()) -> ExplorerResult:
    """The explorer's call path: rank, apply every (prepared) defense, collect RSQ evidence. A
    failing defense is reported in ``errors`` and the others still run."""
    t0 = time.perf_counter()
    ranking = rank_query(view, ds, query, condition, query_id, depth, exclude)
    timings = {"retrieval": (time.perf_counter() - t0) * 1000}
    results: dict[str, DefenseResult] = {}
    errors: dict[str, str] = {}
    for name, d in defenses.items():
        t = time.perf_counter()
        try:
            results[name] = d.apply(ranking, resources, k_ctx=k_ctx)
        except Exception as e:  # noqa: BLE001 - one defense failing must not hide the others
            errors[name] = f"{type(e).__name__}: {e}"
        timings[name] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    try:
        rsq_rows = rsq_evidence(ranking, resources, results)
    except Exception as e:  # noqa: BLE001
        rsq_rows = {}
        errors["rsq evidence"] = f"{type(e).__name__}: {e}"
    timings["rsq evidence"] = (time.perf_counter() - t) * 1000
    timings["total"] = (time.perf_counter() - t0) * 1000
    return ExplorerResult(ranking, results, errors, rsq_rows, timings)


def tris_layers(dec: Decision | None) -> dict[str, Any]:
    """TRIS layer verdicts of one document (L1 cluster, L2 overlaps, L3 status/reason) from its evidence."""
    if dec is None:
        return {}
    ev = dec.evidence or {}
    out: dict[str, Any] = {}
    if "L1" in ev:
        l1 = ev["L1"]
        out["L1"] = {"cluster": l1.get("cluster"), "cluster sizes": l1.get("cluster_sizes"),
                     "majority cluster": l1.get("majority_cluster"),
                     "distance to majority centroid": round(float(l1.get("distance_to_largest_centroid", 0.0)), 4)}
    if "L2" in ev:
        l2 = ev["L2"]
        out["L2"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in l2.items() if k != "prefix_tokens"}
    if "L3" in ev:
        l3 = ev["L3"]
        out["L3"] = {"status": l3.get("status"), "verdict": l3.get("verdict"), "reason": l3.get("reason")}
    out["final"] = {"layer": dec.layer, "removed": dec.removed, "status": dec.status, "reason": dec.reason}
    return out


def generate_answers(resources: "Resources", query: str, contexts: dict[str, Sequence[str]]) -> dict[str, str]:
    """Answer ``query`` from each named context with the configured generator (local Qwen by
    default) through the answer cache. Raises :class:`~sieve.models.errors.LLMError` on failure."""
    from sieve.evaluation.answers import AnswerCache, Generator

    cache_path = None if getattr(resources, "_models_injected", False) else \
        Path(resources.config.cache_dir) / "dashboard-answers.sqlite"
    gen = Generator(resources.llm, AnswerCache(cache_path))
    return {name: gen.answer(query, list(texts)).text for name, texts in contexts.items()}


def answer_verdict(answer: str, correct: Sequence[str], target: str) -> str:
    """Plain-language verdict of an answer (§9.1 normalised substring rules)."""
    from sieve.evaluation.metrics import asr_success, clean_correct

    if target and asr_success(answer, target):
        return "attack succeeded (asserts the target answer)"
    if correct and clean_correct(answer, correct):
        return "correct"
    return "neither correct nor the target"


# =============================================================================================
# RSG audit
# =============================================================================================
def rsg_audit(view: "VectorIndex", **params: Any) -> "RSGAudit":
    from sieve.defenses.rsg import audit_corpus

    return audit_corpus(view.ids, [d.text for d in view.documents], view.vectors, **params)


def audit_table(audit: "RSGAudit", view: "VectorIndex") -> "pd.DataFrame":
    import pandas as pd

    from sieve.cli.audit import audit_rows

    poison = {d.id: bool(d.poison) for d in view.documents}
    df = pd.DataFrame(audit_rows(audit, poison))
    df["text"] = [snippet(d.text, 90) for d in view.documents]
    return df


def record_audit_flags(audit: "RSGAudit", view: "VectorIndex", ds: "Dataset", condition: str,
                       ledger: Any) -> tuple[int, int]:
    """Record RSG flags as open alerts (same fields as ``sieve audit``). Returns (flags, newly added)."""
    from sieve.corpus import corpus_hash
    from sieve.ledger import Flag

    docs = list(view.documents)
    flagged = [int(i) for i in np.flatnonzero(audit.flagged)]
    snapshot_hash = corpus_hash(docs)
    index_version = f"{view.model_id}/{view.manifest.get('format', '')}"
    before = len(ledger.list(detector="rsg", corpus_hash=snapshot_hash))
    flags = [Flag(audit.ids[i], docs[i].hash, float(audit.score[i]), audit.params.decision_threshold,
                  audit.row(i).to_dict(), f"RSG {audit.row(i).branch} flag ({condition})") for i in flagged]
    if flags:
        ledger.add_flags(flags, detector="rsg", corpus_id=f"{ds.name}:{condition}", corpus_hash=snapshot_hash,
                         index_version=index_version)
    return len(flags), len(ledger.list(detector="rsg", corpus_hash=snapshot_hash)) - before


# =============================================================================================
# geometry
# =============================================================================================
def project_2d(vectors: np.ndarray, method: str = "umap", seed: int = 12, n_neighbors: int = 15) -> np.ndarray:
    """2-D projection of row vectors: UMAP (cosine, ``n_neighbors`` clipped to n−1) or PCA."""
    x = np.asarray(vectors, dtype=np.float32)
    n = x.shape[0]
    if n == 0:
        return np.zeros((0, 2), np.float32)
    if n < 4 or method == "pca":
        from sklearn.decomposition import PCA

        if n < 2:
            return np.zeros((n, 2), np.float32)
        y = PCA(n_components=min(2, n, x.shape[1]), random_state=seed).fit_transform(x)
        return np.pad(y, ((0, 0), (0, 2 - y.shape[1]))).astype(np.float32)
    import warnings

    import umap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(n_components=2, n_neighbors=max(2, min(n_neighbors, n - 1)), metric="cosine",
                            random_state=seed, init="random" if n < 10 else "spectral", n_jobs=1)
        return np.asarray(reducer.fit_transform(x), dtype=np.float32)


def judge_geometry(ranking: Ranking, resources: "Resources", tris_result: DefenseResult | None,
                   top_k: int = 50, method: str = "umap", xy: np.ndarray | None = None) -> "pd.DataFrame":
    """The query's top-k in TRIS judge space: 2-D coordinates, K-Means cluster (from TRIS L1 evidence),
    poison flag, whether the document is in the kept majority, id and snippet."""
    import pandas as pd

    docs = ranking.documents[:top_k]
    if xy is None:
        emb = resources.judge_embeddings([d.text for d in docs])
        xy = project_2d(emb, method, n_neighbors=min(10, max(2, len(docs) - 1)))
    rows = []
    for d, (x, y) in zip(docs, xy):
        dec = tris_result.decision_for(d.id) if tris_result is not None else None
        l1 = (dec.evidence or {}).get("L1", {}) if dec is not None else {}
        rows.append({"id": d.id, "rank": d.rank, "x": float(x), "y": float(y), "poison": bool(d.poison),
                     "cluster": str(l1.get("cluster", "n/a")), "in_majority": bool(l1.get("in_majority", False)),
                     "removed": bool(dec.removed) if dec is not None else False, "text": d.text})
    return pd.DataFrame(rows)


def corpus_geometry(view: "VectorIndex", audit: "RSGAudit", method: str = "umap",
                    xy: np.ndarray | None = None) -> "pd.DataFrame":
    """The snapshot in retriever space: 2-D coordinates coloured by RSG density contrast D_i."""
    import pandas as pd

    if xy is None:
        xy = project_2d(view.vectors, method)
    return pd.DataFrame({"id": view.ids, "x": xy[:, 0], "y": xy[:, 1], "D": audit.density.astype(float),
                         "score": audit.score.astype(float), "flagged": audit.flagged.astype(bool),
                         "poison": [bool(d.poison) for d in view.documents],
                         "text": [d.text for d in view.documents]})


# =============================================================================================
# trade-offs (run directories)
# =============================================================================================
@dataclass
class RunData:
    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def defenses(self) -> list[str]:
        return list(dict.fromkeys(r["defense"] for r in self.records))

    @property
    def conditions(self) -> list[str]:
        return list(dict.fromkeys(r["condition"] for r in self.records))

    @property
    def k_ctx(self) -> int:
        return int(self.config.get("k_ctx", 5))

    @property
    def has_answers(self) -> bool:
        return any(r.get("answer") is not None for r in self.records)


def load_run(run_dir: str | os.PathLike[str]) -> RunData:
    """A run directory written by ``sieve eval`` (:func:`sieve.evaluation.report.load_run`)."""
    from sieve.evaluation.report import load_run as _load

    cfg, summary, records = _load(run_dir)
    if not records:
        from sieve.evaluation.report import ReportError

        raise ReportError(f"{run_dir}: records.jsonl is empty; run `sieve eval` to fill it")
    return RunData(Path(run_dir), cfg, summary, records)


def threshold_knobs(run: RunData, defense: str) -> list[dict[str, Any]]:
    """Live-tunable thresholds of one defense in a run: ``{key, label, value, lo, hi, layer}`` where
    ``layer`` is None for the defense-wide threshold. Ranges come from the recorded raw scores."""
    recs = [r for r in run.records if r["defense"] == defense and not r.get("error")]
    layers: dict[str, list[float]] = {}
    for r in recs:
        for d in r.get("decisions", []):
            if d.get("score") is None or d.get("threshold") is None:
                continue
            s = float(d["score"])
            if np.isfinite(s):
                layers.setdefault(d.get("layer") or "", []).append(s)
    knobs = []
    current: dict[str, float] = {}
    for r in recs:
        for d in r.get("decisions", []):
            if d.get("threshold") is not None:
                current.setdefault(d.get("layer") or "", float(d["threshold"]))
    for layer, scores in layers.items():
        if layer in ("L1",):
            continue   # L1 is a cluster membership, not a threshold (needs a rerun)
        lo, hi = float(min(scores)), float(max(scores))
        val = current.get(layer, hi)
        lo, hi = min(lo, val), max(hi, val)
        if hi - lo < 1e-9:
            hi = lo + 1.0
        knobs.append({"key": f"{defense}:{layer or 'threshold'}", "label": f"{defense} {layer or 'threshold'}".strip(),
                      "value": val, "lo": lo, "hi": hi, "layer": layer or None})
    return knobs


def tradeoff_rows(run: RunData, overrides: dict[str, dict[str, Any]], k_ctx: int | None = None) -> "pd.DataFrame":
    """Summary rows after moving thresholds / k_ctx (:func:`sieve.evaluation.tradeoffs.recompute_run`)."""
    import pandas as pd

    from sieve.evaluation.tradeoffs import recompute_run

    ov = {k: dict(v) for k, v in overrides.items() if v}
    if k_ctx is not None and k_ctx != run.k_ctx:
        ov.setdefault("*", {})["k_ctx"] = int(k_ctx)
    rows = recompute_run(run.records, ov, k_ctx=run.k_ctx, dataset=str(run.summary.get("dataset", "")),
                         budget=float(run.config.get("clean_budget", 0.05)))
    return pd.DataFrame(rows)


def overrides_from_knobs(values: dict[str, float], knobs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Slider values → :func:`recompute_run` overrides (only knobs moved off their recorded value)."""
    out: dict[str, dict[str, Any]] = {}
    for k in knobs:
        v = values.get(k["key"])
        if v is None or abs(float(v) - float(k["value"])) < 1e-12:
            continue
        defense = k["key"].split(":", 1)[0]
        if k["layer"] is None:
            out.setdefault(defense, {})["threshold"] = float(v)
        else:
            out.setdefault(defense, {}).setdefault("layers", {})[k["layer"]] = float(v)
    return out


def roc_data(run: RunData, defense: str, attack: str) -> dict[str, Any] | None:
    """ROC curve of one (defense, attack) cell from recorded scores (§9.2 positives / negatives)."""
    from sieve.evaluation.metrics import auroc, roc_curve
    from sieve.evaluation.runner import roc_inputs

    pos, neg = roc_inputs(run.records, defense, attack)
    pos = [p for p in pos if np.isfinite(p)]
    neg = [n for n in neg if np.isfinite(n)]
    if not pos or not neg:
        return None
    fpr, tpr, thr = roc_curve(pos, neg)
    return {"fpr": fpr, "tpr": tpr, "thresholds": thr, "auroc": auroc(pos, neg), "pos": pos, "neg": neg}


def operating_point(pos: Sequence[float], neg: Sequence[float], threshold: float) -> tuple[float, float]:
    """(FPR, TPR) when a document is removed iff score ≥ ``threshold``."""
    p = np.asarray(pos, float)
    n = np.asarray(neg, float)
    return (float(np.mean(n >= threshold)) if n.size else 0.0, float(np.mean(p >= threshold)) if p.size else 0.0)


# =============================================================================================
# attack lab
# =============================================================================================
LAB_FAMILIES = ("pr_b", "pr_w", "paraphrase", "script", "forced_top", "diverse", "payload_only")


def lab_families() -> list[str]:
    from sieve.registry import ATTACKS

    names = ATTACKS.names()
    return [f for f in LAB_FAMILIES if f in names] + [n for n in names if n not in LAB_FAMILIES]


def lab_poisons(family: str, target: Target, resources: "Resources", volume: int = 5, seed: int = 0,
                id_prefix: str = "lab") -> tuple[list[Document], dict[str, Any]]:
    """Generate ``volume`` poisons of ``family`` for one target (ids prefixed so they never clash
    with the dataset's own attack documents). Returns (documents, stats)."""
    from sieve.attacks import generate_attack

    out = generate_attack(family, [target], resources, seed=seed, volume=volume)
    if out.skipped and not out.records:
        from sieve.attacks import AttackError

        raise AttackError(f"{family}: target {target.query_id} skipped: {out.skipped[0][1]}")
    docs = [Document(f"{id_prefix}:{d.id}", d.text, d.title, True, dict(d.metadata)) for d in out.documents]
    return docs, dict(out.stats)


def sandbox_view(index: "VectorIndex", poisons: Sequence[Document]) -> "VectorIndex":
    """A sandbox copy of the index with ``poisons`` added (in memory; the demo files are never touched)."""
    return index.with_documents(poisons) if poisons else index


def lab_ranking(sandbox: "VectorIndex", target: Target, family: str, poisons: Sequence[Document],
                depth: int = EXPLORER_DEPTH) -> Ranking:
    r = sandbox.rank(target.query, depth, query_id=target.query_id, condition=f"lab:{family}",
                     correct_answers=target.correct_answers, target_answer=target.target_answer)
    if family == "forced_top":
        from sieve.attacks.placement import force_top

        r = force_top(r, list(poisons), depth)
    return r


def poison_ranks(ranking: Ranking) -> list[int]:
    return [d.rank for d in ranking.documents if d.poison]


# =============================================================================================
# alerts
# =============================================================================================
def open_ledger(path: str | os.PathLike[str]) -> Any:
    from sieve.ledger import Ledger

    return Ledger(path)


def alerts_frame(alerts: Sequence[Any]) -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame([{"alert": a.alert_id, "doc_id": a.doc_id, "detector": a.detector,
                          "score": None if a.score is None else round(float(a.score), 4), "state": a.state,
                          "reason": a.reason, "corpus": a.corpus_id,
                          "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(a.created_at))}
                         for a in alerts])


def alerts_csv(ledger: Any, **filters: Any) -> bytes:
    """CSV bytes of the filtered alerts, written by :meth:`sieve.ledger.Ledger.export_csv`."""
    with tempfile.TemporaryDirectory(prefix="sieve-alerts-") as tmp:
        path = Path(tmp) / "alerts.csv"
        ledger.export_csv(path, **filters)
        return path.read_bytes()


def timed(fn: Callable[..., Any], *args: Any, **kw: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, (time.perf_counter() - t) * 1000
