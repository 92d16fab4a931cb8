"""Defenses × attack conditions → run artifacts (``sieve eval``): the run loop.

Size: just over 500 lines — the run directory checks, resume, calibration on clean data and the
loop that writes one record per item stay together: they share the run's state and config.

A run directory holds:

* ``config.json``   – everything needed to reproduce the run (versions, models, seeds, defense
  parameters incl. learned thresholds, k_ctx, depth, dataset path + content hash, command line);
* ``records.jsonl`` – one line per (query, condition, defense), appended and flushed per item, with
  ``rankings.jsonl`` (each ranking once) and ``decisions.jsonl.gz`` (decisions and evidence) as
  side files (format 2, :mod:`sieve.evaluation.records`; read only through ``read_records``);
* ``summary.json``  – always recomputed from the records (:mod:`sieve.evaluation.summary`);
* ``answers.sqlite`` – the generation cache (``--generate``).

Conditions and queries are planned by :mod:`sieve.evaluation.plan`; snapshots, rankings and the
preparation of every defense (fit, clean-only calibration) go through :mod:`sieve.experiment`,
the same path as the CLI and the dashboard.
"""
from __future__ import annotations

import logging
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from sieve.constants import CLEAN, CLEAN_BUDGET, DEPTH, K_CTX
from sieve.evaluation.plan import EvalItem, Plan, plan_conditions
from sieve.evaluation.provenance import (
    dataset_files_hash,
    loaded_model_ids,
    package_version,
    seed_everything,
    sieve_version,
)
from sieve.evaluation.records import (
    RECORD_FILES,
    RECORDS_FORMAT,
    SIDE_FILES_KEY,
    RecordWriter,
    RunError,
    jsonable,
    latest_records,
    read_records,
    read_run_config,
    record_key,
    write_run_config,
)
from sieve.evaluation.summary import (
    SCORED_STATUSES,
    SUMMARY_KEYS,
    roc_inputs,
    summarize_records,
    summary_record,
    write_summary,
)
from sieve.evaluation.truth import relevant_ids
from sieve.types import Document, Ranking

if TYPE_CHECKING:
    from sieve.corpus import Dataset
    from sieve.defenses.base import Defense
    from sieve.experiment import Experiment, Snapshot
    from sieve.resources import Resources

log = logging.getLogger("sieve.evaluation")

RUN_FORMAT = RECORDS_FORMAT   # 2: records with side files (docs/architecture.md)

# Names other modules and users import from here (kept: `sieve.evaluation.runner` is public).
__all__ = ["run_eval", "RunError", "RUN_FORMAT", "CLEAN", "SUMMARY_KEYS", "SCORED_STATUSES", "read_records",
           "record_key", "latest_records", "write_summary", "summarize_records", "roc_inputs", "plan_conditions",
           "EvalItem", "Plan", "jsonable"]


def _judge_client(resources: "Resources") -> Any | None:
    """The LLM judge is used only with an OpenAI-compatible endpoint configured (docs/algorithms.md §9.2)."""
    if not resources.config.llm.resolved_base_url():
        return None
    return resources.llm


def _build_defenses(specs: Sequence[str], calib: dict[str, dict[str, Any]]) -> dict[str, "Defense"]:
    from sieve.experiment import DefenseSpecError, build_defense

    try:
        return {s: build_defense(s, calibration=calib) for s in specs}
    except DefenseSpecError as e:
        raise RunError(str(e)) from None


def _with_learned(calib: dict[str, dict[str, Any]], learned: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The calibration mapping of a resumed run: the run's calibration entries, overridden by the
    parameters its clean condition learned (``config.json`` → ``calibrated``)."""
    out = {s: dict(p) for s, p in calib.items()}
    for s, p in learned.items():
        out[s] = {**out.get(s, {}), **dict(p or {})}
    return out


#: Record errors that are not the item's own (the item is redone when the run is resumed): a
#: condition that could not be built or fitted, a failed retrieval or generation, a defense left
#: uncalibrated by an interrupted or failed calibration, and resource faults (disk, memory, network).
_NOT_THE_ITEMS_OWN = ("snapshot:", "fit:", "retrieval:", "generate:")
_RESOURCE_FAULTS = ("OSError", "IOError", "MemoryError", "TimeoutError", "ConnectionError", "ConnectionResetError",
                    "BrokenPipeError", "WriteFailedError", "OperationalError", "APIConnectionError", "APITimeoutError",
                    "LLMError", "DefensePreparationError", "KeyboardInterrupt")


def retry_reason(error: str | None) -> str | None:
    """Why an item that failed with ``error`` is retried on resume (``None``: the failure is the
    item's own — a defense that cannot handle this ranking — and is kept)."""
    if not error:
        return None
    e = str(error)
    for prefix in _NOT_THE_ITEMS_OWN:
        if e.startswith(prefix):
            return prefix.rstrip(":")
    if "not calibrated" in e:
        return "not calibrated"
    head = e.split(":", 1)[0].strip()
    if head in _RESOURCE_FAULTS:
        return head
    return None


def run_eval(
    dataset: "str | Path | Dataset",
    out: str | Path,
    resources: "Resources | None" = None,
    *,
    defenses: Sequence[str] | None = None,
    attacks: Sequence[str] | None = None,
    generate: bool = False,
    k_ctx: int = K_CTX,
    depth: int = DEPTH,
    seed: int | None = None,
    calibration: str | Path | dict[str, dict[str, Any]] | None = None,
    clean_budget: float = CLEAN_BUDGET,
    force: bool = False,
    progress: bool = True,
    command: str | None = None,
    limit: int | None = None,
    calibration_queries: int | None = None,
) -> dict[str, Any]:
    """Evaluate ``defenses`` (registered names or ``a+b`` specs; default all registered) on the clean
    and attack conditions of ``dataset`` and write the run directory ``out``. Returns the summary.

    Re-running with the same ``out`` resumes: completed (query, condition, defense) items are
    skipped; an incompatible existing run raises :class:`RunError` unless ``force`` (which starts over).

    ``calibration_queries``: thresholds are learned on the first N clean queries of the dataset
    instead of the run's own clean queries (with ``limit``, a handful of queries gives a 5 % point
    from a few dozen documents; the clean material stays clean, only its amount changes).
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
    calibration_items = None
    if calibration_queries is not None:
        if calibration_queries < 1:
            raise RunError(f"--calibration-queries must be >= 1, got {calibration_queries}")
        calibration_items = [it for c, items in plan.conditions if c == CLEAN for it in items][:calibration_queries]
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
    defs = _build_defenses(specs, calib)
    if plan.mode == "retrieval":
        from sieve.experiment.defenses import DefenseSpecError, check_depth

        for d in defs.values():
            try:
                check_depth(d, depth)
            except DefenseSpecError as e:
                raise RunError(f"{e} (--depth); refusing to report a row that would look like 'none'") from None
    warnings = _plan_warnings(ds, plan)

    run_dir = _check_run_dir(Path(out), ds, force)
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
        **({"calibration_queries": calibration_queries} if calibration_queries is not None else {}),
    }
    cfg_path = run_dir / "config.json"
    learned: dict[str, dict[str, Any]] = {}
    if force:
        for f in (*(run_dir / n for n in RECORD_FILES), run_dir / "summary.json", run_dir / "answers.sqlite",
                  run_dir / "report.html"):
            f.unlink(missing_ok=True)
    # resume: only the keys are needed (evidence left out; the list is dropped below, not held during the run)
    existing = read_records(run_dir, repair=True, evidence=False)
    if existing and cfg_path.exists():
        old = read_run_config(cfg_path)
        old_fp = old.get("fingerprint", {})
        diff = sorted(k for k in set(old_fp) | set(fingerprint) if jsonable(old_fp.get(k)) != jsonable(fingerprint.get(k)))
        if diff:
            raise RunError(f"{run_dir} holds a run with a different configuration ({', '.join(diff)} differ); "
                           "use a new --out directory, or --force to start over")
        learned = old.get("calibrated", {}) or {}
    elif existing:
        raise RunError(f"{run_dir} has records.jsonl but no config.json; use a new --out directory or --force")
    if any(name in defs for name in learned):
        # resume: the parameters learned on the clean condition, applied by the same build path as a
        # calibration file; learned state that is no parameter (fusion's nulls) is learned again
        defs = _build_defenses(specs, _with_learned(calib, learned))

    seed_everything(seed)
    # items that failed for a reason not their own (an interrupted calibration, a full disk, a dead
    # endpoint) are redone; a later record of the same key replaces the failed one (latest_records)
    retried: dict[str, int] = {}
    retry: set[tuple[str, str, str]] = set()
    for r in latest_records(existing):
        why = retry_reason(r.get("error"))
        if why is not None:
            retry.add(record_key(r))
            retried[why] = retried.get(why, 0) + 1
    done = {record_key(r) for r in existing} - retry
    kept = [summary_record(r) for r in existing]   # what the summary reads of them (small)
    del existing
    cfg: dict[str, Any] = {
        "sieve_version": sieve_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {p: package_version(p) for p in ("torch", "transformers", "sentence-transformers", "numpy", "faiss-cpu")},
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
        "calibration_queries": len(calibration_items) if calibration_items is not None else None,
        "generate": generate,
        "defenses": {s: {"params": defs[s].get_params(), "class": type(defs[s]).__name__,
                         "corpus_time": defs[s].corpus_time, "threshold_param": defs[s].threshold_param}
                     for s in specs},
        "calibrated": learned,
        "retried": {"items": len(retry), "reasons": retried},
        "fingerprint": fingerprint,
        "warnings": warnings,
        # deterministic work is memoised across defenses in one process (K-Means fits, RSG audits,
        # RSQ rows, ROUGE-L pairs): the first defense needing it pays, later ones hit the memo
        "latency_note": "latency_ms is the defense call inside this run: work shared with an earlier defense "
                        "on the same ranking (memoised fits, RSQ rows) is paid once; standalone costs: sieve bench defenses",
    }
    writer = RecordWriter(run_dir)   # after the resume repair: its checkpoint describes the files as they are
    cfg[SIDE_FILES_KEY] = writer.checkpoint()
    write_run_config(cfg_path, cfg)

    generator = None
    if generate:
        from sieve.evaluation.answers import AnswerCache, Generator

        generator = Generator(resources.llm, AnswerCache(run_dir / "answers.sqlite"), judge=_judge_client(resources))

    from sieve.experiment import Experiment

    experiment = Experiment(ds, resources, depth=depth)   # no quarantine: results never depend on triage state
    state = _RunState(experiment, plan, defs, k_ctx, clean_budget, generator, done, cfg, cfg_path, calibration_items,
                      kept)
    try:
        with writer:
            state.run(writer, progress)
    finally:
        cfg[SIDE_FILES_KEY] = writer.checkpoint()
        cfg["models"] = loaded_model_ids(resources)
        llm_health = _llm_health(resources)
        if llm_health:
            cfg["llm_health"] = llm_health
        cfg["calibrated"] = learned | state.learned   # a resumed run's re-calibration (fusion's nulls) wins
        for s in specs:
            cfg["defenses"][s]["params"] = defs[s].get_params()
        write_run_config(cfg_path, cfg)
        summary = write_summary(run_dir, ds.name, cfg["models"].get("retriever", resources.config.models.retriever),
                                defense_order=specs, condition_order=[c for c, _ in plan.conditions],
                                records=state.summary_records)   # held since written: no second read
        summary.update(_run_outcome(state.summary_records, len(retry), retried))
        from sieve.evaluation.records import write_json_atomic

        write_json_atomic(run_dir / "summary.json", summary)
    return summary


def _run_outcome(records: Sequence[dict[str, Any]], n_retried: int, reasons: dict[str, int]) -> dict[str, Any]:
    """Keys added to ``summary.json`` by ``sieve eval`` (added, never renamed: a public contract):
    ``n_items`` / ``n_items_failed`` over the latest record of every item, ``n_retried`` (items this
    invocation redid because an earlier attempt failed for a reason not their own) and
    ``retried_reasons`` (count per reason, :func:`retry_reason`)."""
    recs = latest_records(records)
    return {"n_items": len(recs), "n_items_failed": sum(1 for r in recs if r.get("error")),
            "n_retried": int(n_retried), "retried_reasons": dict(reasons)}




def _plan_warnings(ds: "Dataset", plan: Plan) -> list[str]:
    """Loud notes for a plan that silently lost something (e.g. no clean condition)."""
    import os

    out: list[str] = []
    clean_items = dict(plan.conditions).get(CLEAN, [])
    if not clean_items:
        root = Path(ds.path)
        qfile = root / "queries.jsonl" if root.is_dir() else None
        if qfile is not None and qfile.exists() and not os.access(qfile, os.R_OK):
            raise RunError(f"{qfile}: cannot read it (permission denied); the clean condition needs it")
        why = ("queries.jsonl is missing" if qfile is not None and not qfile.exists()
               else "the dataset has no clean queries")
        out.append(f"no clean condition: {why} — thresholds cannot be calibrated on clean data and "
                   "AUROC, det@5% and clean removal are unavailable")
    return out


def _llm_client(resources: "Resources") -> Any | None:
    """The LLM client if one was loaded (never loads it)."""
    llm = getattr(resources, "_llm", None)
    return llm if hasattr(llm, "n_errors") else None


def _llm_errors(resources: "Resources") -> int:
    llm = _llm_client(resources)
    return int(llm.n_errors) if llm is not None else 0


def _llm_health(resources: "Resources") -> dict[str, Any] | None:
    llm = _llm_client(resources)
    if llm is None or not hasattr(llm, "health"):
        return None
    return {"model": getattr(llm, "model_id", ""), **llm.health()}


def _check_run_dir(run_dir: Path, ds: "Dataset", force: bool) -> Path:
    """The run directory, created; never the dataset's directory, never over a dataset file, and a
    ``config.json`` that ``sieve eval`` did not write is replaced only with ``force``."""
    from sieve.safe_io import UnsafeWriteError, check_output_dir, dataset_files

    ds_path = Path(ds.path)
    try:
        check_output_dir(run_dir, protected=[ds_path] if ds_path.is_dir() else [], what="--out run directory")
    except UnsafeWriteError as e:
        raise RunError(str(e)) from None
    ours = {run_dir / n for n in ("config.json", *RECORD_FILES, "summary.json", "answers.sqlite", "report.html")}
    clash = [f for f in dataset_files(ds_path) if any(f.resolve() == o.resolve() for o in ours)]
    if clash:
        raise RunError(f"refusing to write the run into {run_dir}: {clash[0]} is a file of the dataset; "
                       "choose another --out")
    cfg_path = run_dir / "config.json"
    if cfg_path.is_dir():
        raise RunError(f"{cfg_path} is a directory; choose another --out")
    from sieve.evaluation.records import is_run_config

    if cfg_path.exists() and not force and not is_run_config(cfg_path):
        try:
            read_run_config(cfg_path)
        except RunError as e:
            raise RunError(f"{e}") from None
        raise RunError(f"{cfg_path} exists and was not written by `sieve eval`; choose another --out, "
                       "or --force to replace it")
    return run_dir


class _RunState:
    """The run loop over conditions → queries → defenses, writing one record per item."""

    def __init__(self, experiment: "Experiment", plan: Plan, defs: dict[str, "Defense"], k_ctx: int,
                 clean_budget: float, generator: Any, done: set[tuple[str, str, str]],
                 cfg: dict[str, Any], cfg_path: Path, calibration_items: list[EvalItem] | None = None,
                 summary_records: list[dict[str, Any]] | None = None):
        self.exp, self.plan, self.defs, self.res = experiment, plan, defs, experiment.resources
        self.k_ctx, self.clean_budget = k_ctx, clean_budget
        self.generator, self.done, self.cfg, self.cfg_path = generator, done, cfg, cfg_path
        self.learned: dict[str, dict[str, Any]] = {}
        #: clean items thresholds are learned on when not the run's own (``calibration_queries``)
        self.calibration_items = calibration_items
        #: :func:`~sieve.evaluation.summary.summary_record` of every record in the files, in file order
        self.summary_records: list[dict[str, Any]] = summary_records if summary_records is not None else []

    # -- snapshots and rankings ----------------------------------------------------------------
    def snapshot(self, condition: str, items: list[EvalItem]) -> "Snapshot":
        ds = self.exp.dataset
        if condition == CLEAN or condition in ds.attack_families():
            return self.exp.snapshot(condition)
        # contexts-only condition: its poison-labelled documents are the injection set
        seen: dict[str, Document] = {}
        for it in items:
            for d in (it.saved.documents if it.saved else []):
                if d.poison and d.id not in seen:
                    seen[d.id] = Document(d.id, d.text, d.title, poison=True)
        return self.exp.snapshot(condition, documents=list(seen.values()))

    def ranking(self, item: EvalItem) -> Ranking:
        if item.saved is not None:
            return item.saved
        # clean rankings are cached by the experiment: calibration and evaluation share them
        return self.exp.rank(item.query, condition=item.condition, query_id=item.query_id,
                             correct_answers=item.correct_answers, target_answer=item.target_answer)

    # -- main loop ------------------------------------------------------------------------------
    def run(self, writer: RecordWriter, progress: bool) -> None:
        from tqdm.auto import tqdm

        from sieve.experiment import needs_calibration

        pending = [(c, it, s) for c, items in self.plan.conditions for it in items for s in self.defs
                   if (it.query_id, c, s) not in self.done]
        to_calibrate = [s for s, d in self.defs.items() if needs_calibration(d)]
        with tqdm(total=len(pending), disable=not progress, unit="item", desc="sieve eval", dynamic_ncols=True) as bar:
            for cond, items in self.plan.conditions:
                todo = [s for s in self.defs if any((it.query_id, cond, s) not in self.done for it in items)]
                if not todo and not (cond == CLEAN and to_calibrate):
                    continue
                needs_view = self.plan.mode == "retrieval" or any(self.defs[s].corpus_time for s in todo + to_calibrate)
                fit_errors: dict[str, str] = {}
                view = None
                try:
                    view = self.snapshot(cond, items) if needs_view else None
                except Exception as e:  # noqa: BLE001 - the whole condition cannot run
                    log.exception("condition %s: building the snapshot failed", cond)
                    fit_errors = {s: f"snapshot: {type(e).__name__}: {e}" for s in self.defs}
                calibrating = to_calibrate if cond == CLEAN else []
                clean = self._clean_material(self.calibration_items or items) if calibrating else []
                for s in dict.fromkeys(todo + calibrating):
                    if s in fit_errors:
                        continue
                    self._prepare(s, cond, view, clean if s in calibrating else None, fit_errors)
                if calibrating:
                    self.cfg["calibrated"] = {**self.cfg.get("calibrated", {}), **self.learned}
                    self.cfg[SIDE_FILES_KEY] = writer.checkpoint()
                    write_run_config(self.cfg_path, self.cfg)
                    to_calibrate = []
                for it in items:
                    want = [s for s in todo if (it.query_id, cond, s) not in self.done]
                    if not want:
                        continue
                    ranking, rank_err = None, None
                    if not fit_errors.keys() >= set(want):
                        try:
                            ranking = self.ranking(it)
                        except Exception as e:  # noqa: BLE001
                            log.exception("retrieval failed for query %s (%s)", it.query_id, cond)
                            rank_err = f"retrieval: {type(e).__name__}: {e}"
                    rows = ([{"id": d.id, "rank": d.rank, "score": d.score, "poison": d.poison} for d in ranking.documents]
                            if ranking is not None else [])   # stored once per (query, condition)
                    for s in want:
                        rec, decisions = self._evaluate(it, s, ranking, rows, fit_errors.get(s) or rank_err)
                        writer.write(rec, decisions)
                        self.summary_records.append(summary_record(rec, decisions))
                        self.done.add((it.query_id, cond, s))
                        bar.update(1)
                if todo:
                    self.cfg[SIDE_FILES_KEY] = writer.checkpoint()
                    write_run_config(self.cfg_path, self.cfg)

    def _clean_material(self, items: list[EvalItem]) -> list[Ranking]:
        """Clean rankings of the run's clean queries: the only calibration material (never attack data)."""
        rankings = []
        for it in items:
            try:
                rankings.append(self.ranking(it))
            except Exception:  # noqa: BLE001 - recorded when the item itself runs
                continue
        return rankings

    def _prepare(self, spec: str, cond: str, view: "Snapshot | None", clean: list[Ranking] | None,
                 fit_errors: dict[str, str]) -> None:
        """Prepare ``spec`` for this condition through :func:`sieve.experiment.prepare_defense`: fit on
        the condition's snapshot and, on the clean condition (``clean`` given), calibrate it when it is
        not calibrated, on clean rankings only. Errors are recorded: a failed fit fails the defense's
        items of this condition; a failed calibration is reported in ``config.json``
        (``calibration_errors``)."""
        from sieve.experiment import DefensePreparationError, needs_calibration, prepare_defense

        d = self.defs[spec]
        calibrate = clean is not None and needs_calibration(d)
        got: dict[str, Any] = {}
        try:
            prepare_defense(self.exp, d, snapshot=view, condition=cond, clean_rankings=clean if calibrate else None,
                            clean_budget=self.clean_budget, k_ctx=self.k_ctx, calibrate=calibrate, check=False,
                            learned=got)
        except DefensePreparationError as e:
            if e.stage == "fit":
                log.exception("%s: fit on condition %s failed", spec, cond)
                fit_errors[spec] = f"fit: {e.detail}"
            else:   # one line (no traceback): its items fail "not calibrated" and are retried on resume
                log.error("%s: calibration failed: %s", spec, e.detail)
                self.cfg.setdefault("calibration_errors", {})[spec] = e.detail
            return
        if calibrate:
            self.learned[spec] = jsonable(got)

    def _evaluate(self, it: EvalItem, spec: str, ranking: Ranking | None, rows: list[dict[str, Any]],
                  error: str | None) -> tuple[dict[str, Any], list[Any]]:
        """(record, decisions): the record of one item and its decisions (:class:`~sieve.types.Decision`
        objects, written column-wise by :class:`~sieve.evaluation.records.RecordWriter`)."""
        rec: dict[str, Any] = {
            "query_id": it.query_id, "condition": it.condition, "defense": spec, "query": it.query,
            "correct_answers": list(it.correct_answers), "target_answer": it.target_answer,
            "own_poison_ids": sorted(it.own_poison_ids), "ranking": [], "decisions": [], "context_ids": [],
            "fallback_used": False, "warnings": [], "layers_run": [], "answer": None, "latency_ms": None,
            "latency_breakdown": {}, "error": error,
        }
        rec["ranking"] = rows
        if ranking is not None:   # truth-kept (sieve/evaluation/truth.py): the relevant clean passages ranked
            rec["relevant_ids"] = relevant_ids(self.exp.dataset.qrels, it.query_id, it.correct_answers, ranking)
        if error or ranking is None:
            return rec, []
        d = self.defs[spec]
        errors_before = _llm_errors(self.res)
        try:
            return rec, self._apply(it, spec, d, ranking, rec)
        finally:   # endpoint failures during this item (the defense failed open, or generation failed)
            n = _llm_errors(self.res) - errors_before
            rec["llm_errors"] = n
            if n:
                llm = _llm_client(self.res)
                rec["llm_last_error"] = getattr(llm, "last_error", "")
                rec["llm_circuit_open"] = bool(getattr(llm, "circuit_open", False))

    def _apply(self, it: EvalItem, spec: str, d: "Defense", ranking: Ranking, rec: dict[str, Any]) -> list[Any]:
        """Run the defense into ``rec``; returns its decisions (empty when it failed)."""
        try:
            t0 = time.perf_counter()
            result = d.apply(ranking, self.res, k_ctx=self.k_ctx)
            elapsed = (time.perf_counter() - t0) * 1000.0
        except Exception as e:  # noqa: BLE001 - one failing query must not stop the run
            log.warning("%s failed on query %s (%s): %s", spec, it.query_id, it.condition, e)
            rec["error"] = f"{type(e).__name__}: {e}"
            return []
        rec.update(
            context_ids=[x.id for x in result.context],
            fallback_used=result.fallback_used, warnings=list(result.warnings), layers_run=list(result.layers_run),
            latency_ms=elapsed, latency_breakdown=dict(result.latency_ms), info=result.info,
        )
        if self.generator is not None:
            try:
                if getattr(result, "answer", None) is not None:
                    # defenses that answer (RobustRAG, TrustRAG) are scored on their own answer
                    rec["answer"], rec["answer_source"] = result.answer, "defense"
                else:
                    ans = self.generator.answer(it.query, [x.text for x in result.context])
                    rec["answer"], rec["answer_cached"], rec["answer_source"] = ans.text, ans.cached, "generator"
                if self.generator.judge_llm is not None and it.condition != CLEAN and it.target_answer:
                    rec["judgment"] = self.generator.judge(it.query, it.correct_answers, it.target_answer, rec["answer"])
            except Exception as e:  # noqa: BLE001
                log.warning("generation failed on query %s (%s, %s): %s", it.query_id, it.condition, spec, e)
                rec["error"] = f"generate: {type(e).__name__}: {e}"
        return result.decisions
