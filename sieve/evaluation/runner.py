"""Defenses × attack conditions → run artifacts (``sieve eval``).

A run directory holds:

* ``config.json``   – everything needed to reproduce the run (versions, models, seeds, defense
  parameters incl. learned thresholds, k_ctx, depth, dataset path + content hash, command line);
* ``records.jsonl`` – one line per (query, condition, defense), appended and flushed per item;
* ``summary.json``  – always recomputed from ``records.jsonl`` by :func:`summarize_records`;
* ``answers.sqlite`` – the generation cache (``--generate``).

Conditions (DESIGN.md, ALGORITHMS.md §6.1): ``clean`` = corpus only, every query of
``queries.jsonl``; one condition per attack family = clean corpus + *all* documents of that family
(embedded once, merged; the corpus is never re-embedded), evaluated on the family's target
queries. A dataset with ``contexts.jsonl`` is evaluated on those saved rankings as given.

Metric definitions are in :func:`summarize_records`; the metric functions in
:mod:`sieve.evaluation.metrics`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from sieve.evaluation import metrics as M
from sieve.types import Document, Ranking

if TYPE_CHECKING:
    from sieve.corpus import Dataset
    from sieve.defenses.base import Defense
    from sieve.resources import Resources

log = logging.getLogger("sieve.evaluation")

RUN_FORMAT = 1
CLEAN = "clean"
#: Decision statuses that mean "the defense examined this document" (removal-rate denominators).
SCORED_STATUSES = frozenset({"scored", "ran"})
#: The summary row keys (a public contract; never rename or drop).
SUMMARY_KEYS = ("defense", "attack", "queries", "poison_in_context_rate", "poisoned_mrr", "poison_removal_rate",
                "clean_removal_rate", "auroc", "detect_at_5pct", "asr", "clean_acc", "f1", "em",
                "latency_ms_p50", "latency_ms_p95")


class RunError(ValueError):
    """The run cannot start or continue as asked (incompatible run dir, unknown attack, …)."""


# ------------------------------------------------------------------------------------------------
# JSON helpers
# ------------------------------------------------------------------------------------------------

def jsonable(x: Any) -> Any:
    """Convert numpy values, sets, tuples, paths and dataclasses into JSON-serialisable values."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=str) if isinstance(x, (set, frozenset)) else x
        return [jsonable(v) for v in items]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return jsonable(x.item())
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if isinstance(x, Path):
        return str(x)
    if is_dataclass(x) and not isinstance(x, type):
        return jsonable(asdict(x))
    return str(x)


def _dumps(obj: Any) -> str:
    return json.dumps(jsonable(obj), ensure_ascii=False, allow_nan=False)


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(jsonable(obj), ensure_ascii=False, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_records(run_dir: str | Path, repair: bool = False) -> list[dict[str, Any]]:
    """Read ``records.jsonl``. A truncated last line (a run interrupted mid-write) is ignored, and
    removed from the file when ``repair``; a malformed line elsewhere is an error naming the line."""
    path = Path(run_dir) / "records.jsonl"
    if not path.exists():
        return []
    raw = path.read_text(encoding="utf-8")
    lines = raw.split("\n")
    out: list[dict[str, Any]] = []
    good_chars = 0
    for i, line in enumerate(lines):
        if not line.strip():
            good_chars += len(line) + 1
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError as e:
            if all(not rest.strip() for rest in lines[i + 1 :]):
                if repair:
                    path.write_text(raw[:good_chars], encoding="utf-8")
                break
            raise RunError(f"{path}:{i + 1}: malformed record ({e}); repair or delete the line, or rerun with --force") from None
        out.append(rec)
        good_chars += len(line) + 1
    return out


def record_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    return (str(rec["query_id"]), str(rec["condition"]), str(rec["defense"]))


def latest_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (query, condition, defense); a later line replaces an earlier one."""
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        seen[record_key(r)] = r
    return list(seen.values())


# ------------------------------------------------------------------------------------------------
# Planning: conditions and items
# ------------------------------------------------------------------------------------------------

@dataclass
class EvalItem:
    """One query of one condition. ``saved`` is the saved ranking in contexts mode."""

    query_id: str
    query: str
    condition: str
    correct_answers: tuple[str, ...] = ()
    target_answer: str = ""
    own_poison_ids: frozenset[str] = frozenset()
    saved: Ranking | None = None


@dataclass
class Plan:
    mode: str                                  # "retrieval" or "contexts"
    conditions: list[tuple[str, list[EvalItem]]] = field(default_factory=list)

    def items(self) -> list[EvalItem]:
        return [it for _, items in self.conditions for it in items]


def _correct_answers_by_query(ds: "Dataset") -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for t in ds.targets:
        out.setdefault(t.query_id, tuple(t.correct_answers))
    for a in ds.attacks:
        out.setdefault(a.query_id, tuple(a.correct_answers))
    for q in ds.queries:
        if q.answers:
            out[q.id] = tuple(q.answers)
    return out


def _select_families(available: list[str], attacks: Sequence[str] | None, where: str) -> list[str]:
    if attacks is None:
        return list(available)
    unknown = [a for a in attacks if a not in available]
    if unknown:
        raise RunError(f"unknown attack family {', '.join(map(repr, unknown))} in {where}; "
                       f"available: {', '.join(available) or 'none'}")
    return list(dict.fromkeys(attacks))


def plan_conditions(ds: "Dataset", attacks: Sequence[str] | None = None) -> Plan:
    """Conditions and their queries (see module docstring)."""
    answers = _correct_answers_by_query(ds)
    own: dict[tuple[str, str], set[str]] = {}
    for a in ds.attacks:
        own.setdefault((a.attack, a.query_id), set()).update(d.id for d in a.documents)

    if ds.contexts:
        avail = list(dict.fromkeys(r.condition for r in ds.contexts if r.condition != CLEAN))
        fams = _select_families(avail, attacks, "contexts.jsonl")
        by_cond: dict[str, list[EvalItem]] = {c: [] for c in [CLEAN, *fams]}
        seen: set[tuple[str, str]] = set()
        for r in ds.contexts:
            if r.condition not in by_cond or (r.query_id, r.condition) in seen:
                if (r.query_id, r.condition) in seen:
                    log.warning("contexts.jsonl: duplicate ranking for query %s, condition %s; first kept",
                                r.query_id, r.condition)
                continue
            seen.add((r.query_id, r.condition))
            if r.condition == CLEAN:
                mine: frozenset[str] = frozenset()
            else:
                mine = frozenset(own.get((r.condition, r.query_id)) or {d.id for d in r.documents if d.poison})
            by_cond[r.condition].append(EvalItem(
                r.query_id, r.query, r.condition, tuple(r.correct_answers) or answers.get(r.query_id, ()),
                r.target_answer, mine, saved=r))
        return Plan("contexts", [(c, items) for c, items in by_cond.items() if items or c == CLEAN])

    fams = _select_families(ds.attack_families(), attacks, "attacks.jsonl")
    conditions: list[tuple[str, list[EvalItem]]] = [
        (CLEAN, [EvalItem(q.id, q.text, CLEAN, answers.get(q.id, ())) for q in ds.queries])
    ]
    for fam in fams:
        items: dict[str, EvalItem] = {}
        for a in ds.attack_records(fam):
            if a.query_id in items:
                continue
            query = a.query or ds.query_by_id(a.query_id).text
            items[a.query_id] = EvalItem(a.query_id, query, fam, tuple(a.correct_answers) or answers.get(a.query_id, ()),
                                         a.target_answer, frozenset(own[(fam, a.query_id)]))
        conditions.append((fam, list(items.values())))
    return Plan("retrieval", conditions)


# ------------------------------------------------------------------------------------------------
# Defenses
# ------------------------------------------------------------------------------------------------

def make_defense(spec: str, params: dict[str, Any] | None = None) -> "Defense":
    """A registered defense name, or an ``a+b`` serial spec (sieve.defenses.pipeline.build_defense)."""
    from sieve.registry import DEFENSES

    if "+" in spec:
        try:
            from sieve.defenses.pipeline import build_defense
        except ImportError:
            raise RunError(f"serial spec {spec!r} needs sieve.defenses.pipeline, which is not available") from None
        try:
            d = build_defense(spec, **(params or {}))
        except ValueError as e:
            raise RunError(str(e)) from None
        if not getattr(d, "registry_name", ""):
            d.registry_name = spec
        return d
    return DEFENSES.create(spec, **(params or {}))


def _needs_calibration(d: "Defense") -> bool:
    p = d.threshold_param
    return p is not None and getattr(d, p, None) is None


# ------------------------------------------------------------------------------------------------
# Provenance
# ------------------------------------------------------------------------------------------------

def dataset_files_hash(path: str | Path) -> str:
    """sha256 over every file of a dataset (relative path + bytes), hidden entries (e.g. the
    ``.sieve`` workspace) skipped; a single-file dataset hashes that file."""
    p = Path(path)
    files = [p] if p.is_file() else sorted(
        f for f in p.rglob("*") if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts))
    h = hashlib.sha256()
    for f in files:
        rel = f.name if p.is_file() else str(f.relative_to(p))
        h.update(rel.encode("utf-8") + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _loaded_model_ids(resources: "Resources") -> dict[str, str]:
    out = {}
    for role in ("retriever", "judge", "lm", "token_encoder", "llm"):
        m = getattr(resources, f"_{role}", None)
        mid = getattr(m, "model_id", None)
        if mid:
            out[role] = str(mid)
    return out


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


# ------------------------------------------------------------------------------------------------
# The runner
# ------------------------------------------------------------------------------------------------

def _judge_client(resources: "Resources") -> Any | None:
    """The LLM judge is used only with an OpenAI-compatible endpoint configured (§9.2)."""
    if not resources.config.llm.resolved_base_url():
        return None
    return resources.llm


def run_eval(
    dataset: "str | Path | Dataset",
    out: str | Path,
    resources: "Resources | None" = None,
    *,
    defenses: Sequence[str] | None = None,
    attacks: Sequence[str] | None = None,
    generate: bool = False,
    k_ctx: int = 5,
    depth: int = 50,
    seed: int | None = None,
    calibration: str | Path | dict[str, dict[str, Any]] | None = None,
    clean_budget: float = 0.05,
    force: bool = False,
    progress: bool = True,
    command: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """Evaluate ``defenses`` (registered names or ``a+b`` specs; default all registered) on the clean
    and attack conditions of ``dataset`` and write the run directory ``out``. Returns the summary.

    Re-running with the same ``out`` resumes: completed (query, condition, defense) items are
    skipped; an incompatible existing run raises :class:`RunError` unless ``force`` (which starts over).
    """
    from sieve.corpus import Dataset, load_dataset
    from sieve.registry import DEFENSES
    from sieve.resources import Resources

    if k_ctx < 1:
        raise RunError(f"--k-ctx must be >= 1, got {k_ctx}")
    if depth < k_ctx:
        raise RunError(f"--depth ({depth}) must be >= --k-ctx ({k_ctx})")
    resources = resources or Resources()
    seed = resources.config.seed if seed is None else int(seed)
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    plan = plan_conditions(ds, attacks)
    if limit is not None:
        if limit < 1:
            raise RunError(f"--limit must be >= 1, got {limit}")
        # the first `limit` queries of every condition, in file order (deterministic, same for all defenses)
        plan = Plan(plan.mode, [(c, items[:limit]) for c, items in plan.conditions])
    if not plan.items():
        raise RunError(f"dataset {ds.path} has no queries to evaluate (queries.jsonl or contexts.jsonl)")
    specs = list(dict.fromkeys(defenses)) if defenses else DEFENSES.names()
    from sieve.evaluation.calibrate import load_calibration

    calib = load_calibration(calibration) if isinstance(calibration, (str, Path)) else dict(calibration or {})
    unknown_cal = [n for n in calib if n not in specs]
    if unknown_cal:
        log.info("calibration entries for defenses not in this run ignored: %s", unknown_cal)
    defs = {s: make_defense(s, calib.get(s)) for s in specs}

    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    fingerprint = {
        "format": RUN_FORMAT,
        "dataset_hash": dataset_files_hash(ds.path),
        "mode": plan.mode,
        "defenses": specs,
        "attacks": [c for c, _ in plan.conditions],
        "models": asdict(resources.config.models),
        "generator": {"base_url": resources.config.llm.resolved_base_url(), "model": resources.config.llm.resolved_model(),
                      "local_model": resources.config.llm.local_model} if generate else None,
        "generate": bool(generate),
        "k_ctx": k_ctx,
        "depth": depth,
        "seed": seed,
        "clean_budget": clean_budget,
        "calibration": {s: calib[s] for s in specs if s in calib},
        "limit": limit,
    }
    cfg_path = run_dir / "config.json"
    records_path = run_dir / "records.jsonl"
    learned: dict[str, dict[str, Any]] = {}
    if force:
        for f in (records_path, run_dir / "summary.json", run_dir / "answers.sqlite", run_dir / "report.html"):
            f.unlink(missing_ok=True)
    existing = read_records(run_dir, repair=True)
    if existing and cfg_path.exists():
        old = json.loads(cfg_path.read_text(encoding="utf-8"))
        old_fp = old.get("fingerprint", {})
        diff = sorted(k for k in set(old_fp) | set(fingerprint) if jsonable(old_fp.get(k)) != jsonable(fingerprint.get(k)))
        if diff:
            raise RunError(f"{run_dir} holds a run with a different configuration ({', '.join(diff)} differ); "
                           "use a new --out directory, or --force to start over")
        learned = old.get("calibrated", {}) or {}
    elif existing:
        raise RunError(f"{run_dir} has records.jsonl but no config.json; use a new --out directory or --force")
    for name, params in learned.items():  # resume: reuse thresholds learned on the clean condition
        if name in defs:
            defs[name].set_params(**params)
            defs[name].threshold_ = getattr(defs[name], defs[name].threshold_param or "", None)

    _seed_everything(seed)
    done = {record_key(r) for r in existing}
    cfg: dict[str, Any] = {
        "sieve_version": _sieve_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {p: _version(p) for p in ("torch", "transformers", "sentence-transformers", "numpy", "faiss-cpu")},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command if command is not None else " ".join(sys.argv),
        "dataset": {"path": str(Path(ds.path).resolve()), "name": ds.name, "files_sha256": fingerprint["dataset_hash"],
                    "corpus_sha256": ds.content_hash(), "documents": len(ds.documents), "queries": len(ds.queries)},
        "mode": plan.mode,
        "conditions": {c: len(items) for c, items in plan.conditions},
        "models_config": asdict(resources.config.models),
        "llm_config": {k: v for k, v in asdict(resources.config.llm).items()},
        "seed": seed,
        "k_ctx": k_ctx,
        "depth": depth,
        "clean_budget": clean_budget,
        "limit": limit,
        "generate": generate,
        "defenses": {s: {"params": defs[s].get_params(), "class": type(defs[s]).__name__,
                         "corpus_time": defs[s].corpus_time, "threshold_param": defs[s].threshold_param}
                     for s in specs},
        "calibrated": learned,
        "fingerprint": fingerprint,
    }
    _write_json_atomic(cfg_path, cfg)

    generator = None
    if generate:
        from sieve.evaluation.answers import AnswerCache, Generator

        generator = Generator(resources.llm, AnswerCache(run_dir / "answers.sqlite"), judge=_judge_client(resources))

    state = _RunState(ds, plan, defs, resources, k_ctx, depth, clean_budget, generator, done, cfg, cfg_path)
    try:
        with open(records_path, "a", encoding="utf-8") as fh:
            state.run(fh, progress)
    finally:
        cfg["models"] = _loaded_model_ids(resources)
        cfg["calibrated"] = state.learned | learned
        for s in specs:
            cfg["defenses"][s]["params"] = defs[s].get_params()
        _write_json_atomic(cfg_path, cfg)
        summary = write_summary(run_dir, ds.name, cfg["models"].get("retriever", resources.config.models.retriever),
                                defense_order=specs, condition_order=[c for c, _ in plan.conditions])
    return summary


def _sieve_version() -> str:
    import sieve

    return getattr(sieve, "__version__", "unknown")


class _RunState:
    def __init__(self, ds: "Dataset", plan: Plan, defs: dict[str, "Defense"], resources: "Resources", k_ctx: int,
                 depth: int, clean_budget: float, generator: Any, done: set[tuple[str, str, str]],
                 cfg: dict[str, Any], cfg_path: Path):
        self.ds, self.plan, self.defs, self.res = ds, plan, defs, resources
        self.k_ctx, self.depth, self.clean_budget = k_ctx, depth, clean_budget
        self.generator, self.done, self.cfg, self.cfg_path = generator, done, cfg, cfg_path
        self.learned: dict[str, dict[str, Any]] = {}
        self._base_index: Any = None
        self._clean_rankings: dict[str, Ranking] = {}

    # -- snapshots and rankings ----------------------------------------------------------------
    def base_index(self) -> Any:
        if self._base_index is None:
            from sieve.index import open_index

            self._base_index = open_index(self.ds, self.res, progress=False)
        return self._base_index

    def snapshot(self, condition: str, items: list[EvalItem]) -> Any:
        base = self.base_index()
        if condition == CLEAN:
            return base
        if any(a.attack == condition for a in self.ds.attacks):
            docs = self.ds.attack_documents(condition)
        else:  # contexts-only condition: its poison-labelled documents are the injection set
            seen: dict[str, Document] = {}
            for it in items:
                for d in (it.saved.documents if it.saved else []):
                    if d.poison and d.id not in seen:
                        seen[d.id] = Document(d.id, d.text, d.title, poison=True)
            docs = list(seen.values())
        return base.with_documents(docs)

    def ranking(self, item: EvalItem, view: Any) -> Ranking:
        if item.saved is not None:
            return item.saved
        if item.condition == CLEAN and item.query_id in self._clean_rankings:
            return self._clean_rankings[item.query_id]
        r = view.rank(item.query, self.depth, query_id=item.query_id, condition=item.condition,
                      correct_answers=item.correct_answers, target_answer=item.target_answer)
        if item.condition != CLEAN:
            from sieve.attacks.placement import apply_placement

            r = apply_placement(r, self.ds, self.depth)   # forced-top families are pinned, not retrieved
        if item.condition == CLEAN:
            self._clean_rankings[item.query_id] = r
        return r

    # -- main loop ------------------------------------------------------------------------------
    def run(self, fh: Any, progress: bool) -> None:
        from tqdm.auto import tqdm

        pending = [(c, it, s) for c, items in self.plan.conditions for it in items for s in self.defs
                   if (it.query_id, c, s) not in self.done]
        to_calibrate = [s for s, d in self.defs.items() if _needs_calibration(d)]
        with tqdm(total=len(pending), disable=not progress, unit="item", desc="sieve eval", dynamic_ncols=True) as bar:
            for cond, items in self.plan.conditions:
                todo = [s for s in self.defs if any((it.query_id, cond, s) not in self.done for it in items)]
                if not todo and not (cond == CLEAN and to_calibrate):
                    continue
                needs_view = self.plan.mode == "retrieval" or any(self.defs[s].corpus_time for s in todo + to_calibrate)
                fit_errors: dict[str, str] = {}
                try:
                    view = self.snapshot(cond, items) if needs_view else None
                except Exception as e:  # noqa: BLE001 - the whole condition cannot run
                    log.exception("condition %s: building the snapshot failed", cond)
                    view, fit_errors = None, {s: f"snapshot: {type(e).__name__}: {e}" for s in self.defs}
                for s in (todo + to_calibrate if cond == CLEAN else todo):
                    d = self.defs[s]
                    if d.corpus_time and view is not None and s not in fit_errors:
                        try:
                            d.fit(view, self.res)
                        except Exception as e:  # noqa: BLE001
                            log.exception("%s: fit on condition %s failed", s, cond)
                            fit_errors[s] = f"fit: {type(e).__name__}: {e}"
                if cond == CLEAN and to_calibrate:
                    self._calibrate(to_calibrate, items, view, fit_errors)
                    to_calibrate = []
                for it in items:
                    want = [s for s in todo if (it.query_id, cond, s) not in self.done]
                    if not want:
                        continue
                    ranking, rank_err = None, None
                    if fit_errors.keys() >= set(want):
                        rank_err = None
                    else:
                        try:
                            ranking = self.ranking(it, view)
                        except Exception as e:  # noqa: BLE001
                            log.exception("retrieval failed for query %s (%s)", it.query_id, cond)
                            rank_err = f"retrieval: {type(e).__name__}: {e}"
                    for s in want:
                        rec = self._evaluate(it, s, ranking, fit_errors.get(s) or rank_err)
                        fh.write(_dumps(rec) + "\n")
                        fh.flush()
                        self.done.add((it.query_id, cond, s))
                        bar.update(1)

    def _calibrate(self, names: list[str], items: list[EvalItem], view: Any, fit_errors: dict[str, str]) -> None:
        """Clean-only calibration (never on attack data) of defenses without a threshold."""
        rankings = []
        for it in items:
            try:
                rankings.append(self.ranking(it, view))
            except Exception:  # noqa: BLE001 - recorded when the item itself runs
                continue
        for s in names:
            if s in fit_errors:
                continue
            d = self.defs[s]
            before = jsonable(d.get_params())
            try:
                d.calibrate(rankings, self.res, self.clean_budget)
            except Exception as e:  # noqa: BLE001
                log.exception("%s: calibration failed", s)
                self.cfg.setdefault("calibration_errors", {})[s] = f"{type(e).__name__}: {e}"
                continue
            after = d.get_params()
            changed = {k: v for k, v in after.items() if jsonable(v) != before.get(k)}
            self.learned[s] = jsonable(changed or {d.threshold_param: getattr(d, d.threshold_param)})
        self.cfg["calibrated"] = {**self.cfg.get("calibrated", {}), **self.learned}
        _write_json_atomic(self.cfg_path, self.cfg)

    def _evaluate(self, it: EvalItem, spec: str, ranking: Ranking | None, error: str | None) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "query_id": it.query_id, "condition": it.condition, "defense": spec, "query": it.query,
            "correct_answers": list(it.correct_answers), "target_answer": it.target_answer,
            "own_poison_ids": sorted(it.own_poison_ids), "ranking": [], "decisions": [], "context_ids": [],
            "fallback_used": False, "warnings": [], "layers_run": [], "answer": None, "latency_ms": None,
            "latency_breakdown": {}, "error": error,
        }
        if ranking is not None:
            rec["ranking"] = [{"id": d.id, "rank": d.rank, "score": d.score, "poison": d.poison} for d in ranking.documents]
        if error or ranking is None:
            return rec
        d = self.defs[spec]
        try:
            t0 = time.perf_counter()
            result = d.apply(ranking, self.res, k_ctx=self.k_ctx)
            elapsed = (time.perf_counter() - t0) * 1000.0
        except Exception as e:  # noqa: BLE001 - one failing query must not stop the run
            log.warning("%s failed on query %s (%s): %s", spec, it.query_id, it.condition, e)
            rec["error"] = f"{type(e).__name__}: {e}"
            return rec
        rec.update(
            decisions=[x.to_dict() for x in result.decisions], context_ids=[x.id for x in result.context],
            fallback_used=result.fallback_used, warnings=list(result.warnings), layers_run=list(result.layers_run),
            latency_ms=elapsed, latency_breakdown=dict(result.latency_ms), info=result.info,
        )
        if self.generator is not None:
            try:
                ans = self.generator.answer(it.query, [x.text for x in result.context])
                rec["answer"], rec["answer_cached"] = ans.text, ans.cached
                if self.generator.judge_llm is not None and it.condition != CLEAN and it.target_answer:
                    rec["judgment"] = self.generator.judge(it.query, it.correct_answers, it.target_answer, ans.text)
            except Exception as e:  # noqa: BLE001
                log.warning("generation failed on query %s (%s, %s): %s", it.query_id, it.condition, spec, e)
                rec["error"] = f"generate: {type(e).__name__}: {e}"
        return rec


# ------------------------------------------------------------------------------------------------
# Summary
# ------------------------------------------------------------------------------------------------

def _is_scored(dec: dict[str, Any]) -> bool:
    return dec.get("status") in SCORED_STATUSES or (dec.get("score") is not None and dec.get("status") not in
                                                    ("skipped", "not_examined", "unavailable", "error", "abstained"))


def record_scores(rec: dict[str, Any]) -> dict[str, list[tuple[float | None, bool]]]:
    """Per document class ("own" poisons, "clean" documents, "other" poisons): (score, removed) of
    the documents the defense examined in this record."""
    poison = {d["id"]: bool(d.get("poison")) for d in rec.get("ranking", [])}
    own = set(rec.get("own_poison_ids", []))
    out: dict[str, list[tuple[float | None, bool]]] = {"own": [], "clean": [], "other": []}
    for dec in rec.get("decisions", []):
        if not _is_scored(dec):
            continue
        did = dec["doc_id"]
        cls = "own" if did in own else ("other" if poison.get(did) else "clean")
        s = dec.get("score")
        out[cls].append((None if s is None else float(s), bool(dec.get("removed"))))
    return out


def first_own_poison_position(rec: dict[str, Any]) -> int | None:
    own = set(rec.get("own_poison_ids", []))
    for i, did in enumerate(rec.get("context_ids", []), 1):
        if did in own:
            return i
    return None


def _rate(flags: list[bool]) -> float | None:
    return float(np.mean(flags)) if flags else None


def _ci(flags: list[bool]) -> list[float] | None:
    return list(M.wilson_interval(sum(flags), len(flags))) if flags else None


def roc_inputs(records: list[dict[str, Any]], defense: str, attack: str) -> tuple[list[float], list[float]]:
    """§9.2 positives (own-poison scores in the attack condition) and negatives (every score the
    defense produced in the clean condition) for one (defense, attack) cell."""
    pos = [s for r in records if r["defense"] == defense and r["condition"] == attack and not r.get("error")
           for s, _ in record_scores(r)["own"] if s is not None]
    neg = [s for r in records if r["defense"] == defense and r["condition"] == CLEAN and not r.get("error")
           for cls in ("clean", "other", "own") for s, _ in record_scores(r)[cls] if s is not None]
    return pos, neg


def summary_row(defense: str, attack: str, recs: list[dict[str, Any]], negatives: list[float],
                budget: float = 0.05) -> dict[str, Any]:
    """One ``summary.json`` row. Null = the defense (or the run) cannot produce the metric.

    * poison_in_context_rate: fraction of target queries whose final context holds ≥ 1 own poison;
    * poisoned_mrr: mean 1/position of the first own poison in the final context (0 if none);
    * poison_removal_rate / clean_removal_rate: removed fraction of the own poisons / clean documents
      the defense examined (status scored|ran or a score);
    * auroc / detect_at_5pct (§9.2): positives = own-poison scores here, negatives = the defense's
      scores in the clean condition;
    * asr / clean_acc (§9.1 normalised substring), f1 / em (§9.2 SQuAD) when answers were generated;
      asr_llm_judge with an LLM judge endpoint;
    * latency_ms_p50/p95 of the defense call per query.
    """
    ok = [r for r in recs if not r.get("error")]
    attacked = attack != CLEAN
    row: dict[str, Any] = {k: None for k in SUMMARY_KEYS}
    row.update(defense=defense, attack=attack, queries=len(recs))
    own_scored = [x for r in ok for x in record_scores(r)["own"]]
    clean_scored = [x for r in ok for x in record_scores(r)["clean"]]
    row["clean_removal_rate"] = _rate([rm for _, rm in clean_scored])
    if attacked and ok:
        hits = [first_own_poison_position(r) for r in ok]
        pic = [h is not None for h in hits]
        row["poison_in_context_rate"] = _rate(pic)
        row["poison_in_context_ci95"] = _ci(pic)
        row["poisoned_mrr"] = M.mrr_first(hits)
        row["poison_removal_rate"] = _rate([rm for _, rm in own_scored])
        pos = [s for s, _ in own_scored if s is not None]
        row["auroc"] = M.auroc(pos, negatives)
        row["detect_at_5pct"] = M.detect_at_clean_budget(pos, negatives, budget)
    answered = [r for r in ok if r.get("answer") is not None]
    if answered:
        if attacked:
            with_target = [r for r in answered if M.normalize_asr(r.get("target_answer"))]
            flags = [M.asr_success(r["answer"], r["target_answer"]) for r in with_target]
            row["asr"] = _rate(flags)
            row["asr_ci95"] = _ci(flags)
            judged = [r["judgment"]["attack_success"] for r in answered if isinstance(r.get("judgment"), dict)]
            row["asr_llm_judge"] = _rate(judged)
        with_ref = [r for r in answered if r.get("correct_answers")]
        if with_ref:
            flags = [M.clean_correct(r["answer"], r["correct_answers"]) for r in with_ref]
            row["clean_acc"] = _rate(flags)
            row["clean_acc_ci95"] = _ci(flags)
            row["f1"] = float(np.mean([M.token_f1(r["answer"], r["correct_answers"]) for r in with_ref]))
            row["em"] = float(np.mean([M.exact_match(r["answer"], r["correct_answers"]) for r in with_ref]))
        row["empty_answers"] = sum(1 for r in answered if not str(r["answer"]).strip())
    lat = [r["latency_ms"] for r in ok if r.get("latency_ms") is not None]
    row["latency_ms_p50"], row["latency_ms_p95"] = M.percentiles(lat, (50, 95))
    row["n_errors"] = len(recs) - len(ok)
    row["fallback_rate"] = _rate([bool(r.get("fallback_used")) for r in ok])
    row["n_scored_poisons"] = len(own_scored) if attacked else None
    row["n_scored_clean"] = len(clean_scored)
    row["n_negatives"] = len(negatives) if attacked else None
    return row


def summarize_records(records: Iterable[dict[str, Any]], dataset: str = "", retriever: str = "", *,
                      defense_order: Sequence[str] | None = None, condition_order: Sequence[str] | None = None,
                      budget: float = 0.05) -> dict[str, Any]:
    """The ``summary.json`` object, computed from records only (one row per defense × condition)."""
    recs = latest_records(records)
    defenses = list(dict.fromkeys([*(defense_order or []), *(r["defense"] for r in recs)]))
    conds = list(dict.fromkeys([*(condition_order or []), *(r["condition"] for r in recs)]))
    if CLEAN in conds:
        conds.remove(CLEAN)
        conds.insert(0, CLEAN)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in recs:
        groups.setdefault((r["defense"], r["condition"]), []).append(r)
    results = []
    for dname in defenses:
        _, negatives = roc_inputs(recs, dname, CLEAN)
        for c in conds:
            if (dname, c) in groups:
                results.append(summary_row(dname, c, groups[(dname, c)], negatives, budget))
    return {"dataset": dataset, "retriever": retriever, "results": results}


def write_summary(run_dir: str | Path, dataset: str | None = None, retriever: str | None = None, *,
                  defense_order: Sequence[str] | None = None, condition_order: Sequence[str] | None = None
                  ) -> dict[str, Any]:
    """(Re)compute ``summary.json`` from ``records.jsonl`` (also after an interrupted run)."""
    run_dir = Path(run_dir)
    cfg = {}
    if (run_dir / "config.json").exists():
        cfg = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    dataset = dataset if dataset is not None else cfg.get("dataset", {}).get("name", "")
    if retriever is None:
        retriever = cfg.get("models", {}).get("retriever") or cfg.get("models_config", {}).get("retriever", "")
    fp = cfg.get("fingerprint", {})
    summary = summarize_records(read_records(run_dir), dataset or "", retriever or "",
                                defense_order=defense_order or fp.get("defenses"),
                                condition_order=condition_order or fp.get("attacks"),
                                budget=float(cfg.get("clean_budget", 0.05)))
    _write_json_atomic(run_dir / "summary.json", summary)
    return summary
