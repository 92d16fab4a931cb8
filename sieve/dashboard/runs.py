"""The Trade-offs page's data: a finished run, its live-tunable thresholds and recomputed rows."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


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


def run_roots() -> list[Path]:
    """Folders the Trade-offs page may open run directories from: the dataset roots of the
    dashboard (``SIEVE_DASHBOARD_ROOTS``, else ``demo_data`` and the user data folder) and the
    operator's ``SIEVE_DASHBOARD_RUN``."""
    from sieve.dashboard.session import dataset_roots

    roots = list(dataset_roots())
    if os.environ.get("SIEVE_DASHBOARD_RUN"):
        roots.append(Path(os.path.realpath(Path(os.environ["SIEVE_DASHBOARD_RUN"]).expanduser())))
    return roots


def allowed_run_dir(path: str | os.PathLike[str]) -> Path | None:
    """The real path of ``path`` when it is an existing directory under :func:`run_roots`, else None
    (symlinks and ``..`` resolved first). A missing path and a path outside the roots are alike: the
    page never says whether a server path exists."""
    try:
        real = Path(os.path.realpath(Path(str(path)).expanduser()))
    except (OSError, ValueError):
        return None
    if not str(path).strip() or not any(real == r or real.is_relative_to(r) for r in run_roots()):
        return None
    return real if real.is_dir() else None


def run_dir_refusal(path: str | os.PathLike[str]) -> str:
    """The one message for a run directory the page may not (or cannot) open."""
    return ("no run directory the dashboard may open there; give a directory written by `sieve eval --out` "
            "inside an allowed folder: " + ", ".join(str(r) for r in run_roots()))


def load_run(run_dir: str | os.PathLike[str]) -> RunData:
    """A run directory written by ``sieve eval``, or a compact shipped run (``records.compact.jsonl.gz``
    made by :func:`compact_run`, no records.jsonl): :func:`sieve.evaluation.report.load_run`, which
    reads every file through :mod:`sieve.evaluation.records`."""
    from sieve.evaluation.report import ReportError
    from sieve.evaluation.report import load_run as _load

    cfg, summary, records = _load(Path(run_dir))
    if not records:
        raise ReportError(f"{run_dir}: records.jsonl is empty; run `sieve eval` to fill it")
    return RunData(Path(run_dir), cfg, summary, records)


def threshold_knobs(run: RunData, defense: str) -> list[dict[str, Any]]:
    """Live-tunable thresholds of one defense in a run: ``{key, label, value, lo, hi, layer}`` where
    ``layer`` is None for the defense-wide threshold. Only the knobs the defense itself declares
    (:meth:`Defense.threshold_knobs`, re-decided by its own rule) are offered; ranges come from the
    recorded raw scores."""
    from sieve.evaluation.tradeoffs import defense_for_record

    declared = [k for k in defense_for_record(defense).threshold_knobs() if "." not in k and "__" not in k]
    recs = [r for r in run.records if r["defense"] == defense and not r.get("error")]
    knobs = []
    for knob in declared:
        scores: list[float] = []
        current: float | None = None
        for r in recs:
            for d in r.get("decisions", []):
                if d.get("score") is None or d.get("threshold") is None:
                    continue
                if knob != "threshold" and (d.get("layer") or "") != knob:
                    continue
                s = float(d["score"])
                if np.isfinite(s):
                    scores.append(s)
                if current is None:
                    current = float(d["threshold"])
        if not scores:
            continue
        lo, hi = float(min(scores)), float(max(scores))
        val = hi if current is None else current
        lo, hi = min(lo, val), max(hi, val)
        if hi - lo < 1e-9:
            hi = lo + 1.0
        layer = None if knob == "threshold" else knob
        knobs.append({"key": f"{defense}:{knob}", "label": f"{defense} {knob}", "value": val, "lo": lo, "hi": hi,
                      "layer": layer})
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
    from sieve.evaluation.summary import roc_inputs

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


#: Help text of every metric the Trade-offs page (and the overview table) shows: what it measures,
#: its range and which direction is good for the defender.
METRIC_HELP: dict[str, str] = {
    "defense": "The defense (registry name; see 'About the methods').",
    "attack": "The condition: 'clean' (no poisons) or one attack family's poisons added to the corpus.",
    "queries": "n: the number of queries evaluated in this row (attack targets, or clean questions).",
    "poison_in_context_rate": "Poison in context (0–1): share of attacked queries whose final context (the k_ctx "
                              "passages handed to the generator) still holds at least one of that query's poisons. "
                              "Lower is better.",
    "poison_in_context_ci95": "Wilson 95 % interval of the poison-in-context rate over the row's n queries.",
    "poisoned_mrr": "Poisoned MRR (0–1): mean of 1 / position of the first poison in the final context "
                    "(0 when none). Lower is better.",
    "poison_removal_rate": "Poison removal (0–1): share of the poisons the defense examined that it removed. "
                           "Higher is better.",
    "clean_removal_rate": "Clean removal (0–1): share of clean passages the defense examined that it removed "
                          "(false alarms). Lower is better.",
    "auroc": "AUROC (0–1): chance that a poison scores higher than a clean passage, from the recorded scores; "
             "0.5 = chance, 1 = perfect separation. Higher is better. Does not depend on the threshold.",
    "detect_at_5pct": "Detection at 5 % clean removal (0–1): share of poisons removed when the threshold is "
                      "set so that 5 % of clean passages are removed. Higher is better.",
    "asr": "Attack success rate (0–1): share of attacked queries whose generated answer contains the attacker's "
           "target answer. Lower is better. Needs generated answers (a run with --generate).",
    "asr_ci95": "Wilson 95 % interval of the ASR over the answered queries.",
    "clean_acc": "Clean accuracy (0–1): share of questions whose generated answer contains a correct answer. "
                 "Higher is better. Needs generated answers.",
    "clean_acc_ci95": "Wilson 95 % interval of the clean accuracy over the answered questions.",
    "answered": "How many of the row's queries have an answer for the context shown now. Answers belong to the "
                "context they were generated from; a context changed by a threshold or k_ctx has none, so ASR "
                "and accuracy are computed over fewer queries (or are n/a).",
    "f1": "Token F1 (0–1) of the answer against the correct answers (SQuAD style). Higher is better.",
    "em": "Exact match (0–1) of the answer with a correct answer. Higher is better.",
    "latency_ms_p50": "Median time of the defense call per query, in milliseconds.",
    "fallback_rate": "Share of queries where the defense removed everything and the unfiltered list was used.",
}


def ci_text(ci: Any) -> str:
    """A Wilson interval as text ``[0.12, 0.48]`` ('' when missing)."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or ci[0] is None:
        return ""
    return f"[{float(ci[0]):.2f}, {float(ci[1]):.2f}]"


def display_frame(rows: "pd.DataFrame") -> "pd.DataFrame":
    """The Trade-offs table: n, each rate with its Wilson 95 % interval, the number of answered
    queries behind ASR / accuracy; the same numbers the plots use (0.0 is 0.0, None is n/a)."""
    import pandas as pd

    out = []
    for _, r in rows.iterrows():
        n = int(r.get("queries") or 0)
        stale = int(r.get("n_stale_answers") or 0) if "n_stale_answers" in r else 0
        has_ans = any(r.get(k) is not None and not (isinstance(r.get(k), float) and np.isnan(r.get(k)))
                      for k in ("asr", "clean_acc"))
        out.append({
            "defense": r["defense"], "attack": r["attack"], "queries": n,
            "poison_in_context_rate": r.get("poison_in_context_rate"),
            "poison_in_context_ci95": ci_text(r.get("poison_in_context_ci95")),
            "poison_removal_rate": r.get("poison_removal_rate"), "clean_removal_rate": r.get("clean_removal_rate"),
            "auroc": r.get("auroc"), "asr": r.get("asr"), "asr_ci95": ci_text(r.get("asr_ci95")),
            "clean_acc": r.get("clean_acc"), "clean_acc_ci95": ci_text(r.get("clean_acc_ci95")),
            "answered": (n - stale) if has_ans or stale else 0,
        })
    return pd.DataFrame(out)


def answers_status(rows: "pd.DataFrame", k_ctx: int, recorded_k_ctx: int, has_answers: bool) -> str | None:
    """A plain sentence when ASR / accuracy are not the recorded ones (None when they are)."""
    if not has_answers:
        return ("This run has no generated answers, so ASR and clean accuracy are n/a; the plots use "
                "poison-in-context and 1 − clean removal instead. Load a run made with --generate to see them.")
    stale = int(rows["n_stale_answers"].fillna(0).sum()) if "n_stale_answers" in rows else 0
    total = int(rows["queries"].fillna(0).sum()) if "queries" in rows else 0
    if k_ctx != recorded_k_ctx:
        return (f"Answers were generated at k_ctx = {recorded_k_ctx}. At k_ctx = {k_ctx} every context changed, so "
                f"{stale} of {total} answers no longer belong to their context: ASR and clean accuracy are n/a "
                "(poison-in-context, removal rates and AUROC are recomputed exactly). Rerun "
                f"sieve eval DATASET --generate --k-ctx {k_ctx} for answer metrics at this size.")
    if stale:
        return (f"{stale} of {total} answers belong to contexts that the new thresholds changed and are left out: "
                "ASR and clean accuracy are computed over the 'answered' queries only (see the table).")
    return None


def default_roc_run() -> Path | None:
    """The shipped detection run (all targets, no LLM) used for ROC curves, when present."""
    from sieve.dashboard.session import DEMO_DIR
    from sieve.evaluation.records import has_records

    p = DEMO_DIR / "runs" / "demo-nollm"
    return p if has_records(p) else None


#: Record fields the Trade-offs page needs (thresholds, k_ctx, ROC, answers); evidence is dropped
#: except what a defense's ``redecide`` reads (TRIS L2 overlaps).
_COMPACT_KEYS = ("query_id", "condition", "defense", "query", "correct_answers", "target_answer", "own_poison_ids",
                 "ranking", "decisions", "context_ids", "fallback_used", "answer", "latency_ms", "error", "layers_run")


#: Evidence keys a defense's ``decide`` reads (re-deciding at a Trade-offs threshold): TRIS's L2
#: features and L3 delta, fusion's round, the serial stages' own decisions (``Serial.scores_from``).
_DECIDE_EVIDENCE = ("L2", "relaxed", "round", "drivers", "values", "p_values", "survivor_rank", "layer_scores",
                    "branch", "abstained", "min_count")
_STAGE_META = ("status", "score", "threshold", "flagged", "reason", "layer", "seen")
_L3_KEEP = ("status", "delta", "internal_answer", "verdict")


def compact_evidence(ev: dict[str, Any]) -> dict[str, Any]:
    """The part of one decision's evidence that re-deciding reads (bulky traces dropped)."""
    out: dict[str, Any] = {k: ev[k] for k in _DECIDE_EVIDENCE if k in ev}
    if isinstance(ev.get("L3"), dict):
        out["L3"] = {k: ev["L3"][k] for k in _L3_KEEP if k in ev["L3"]}
    for k, v in ev.items():   # a serial composition's stage entries (sieve.defenses.pipeline.Serial)
        if isinstance(v, dict) and "status" in v and ("flagged" in v or v.get("seen") is False):
            out[k] = {**{m: v[m] for m in _STAGE_META if m in v}, **compact_evidence(v)}
    return out


def compact_record(rec: dict[str, Any]) -> dict[str, Any]:
    """One record without bulky evidence (RSQ traces, anchor lists): what :func:`recompute_run`,
    :func:`roc_data` and the summary need, with scores rounded to 6 digits."""
    out = {k: rec[k] for k in _COMPACT_KEYS if k in rec}
    out["ranking"] = [{"id": x["id"], "rank": x["rank"], "score": round(float(x.get("score") or 0.0), 6),
                       "poison": bool(x.get("poison"))} for x in rec.get("ranking", [])]
    decs = []
    for dd in rec.get("decisions", []):
        d = {k: dd.get(k) for k in ("doc_id", "removed", "status", "score", "threshold", "layer", "reason") if k in dd}
        if isinstance(d.get("score"), float):
            d["score"] = round(d["score"], 6)
        keep = compact_evidence(dd.get("evidence") or {})
        if keep:
            d["evidence"] = keep
        decs.append(d)
    out["decisions"] = decs
    return out


def compact_run(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Path:
    """Write a compact copy of a run (config.json, summary.json, ``records.compact.jsonl.gz``) for
    shipping with the demo: the page's numbers are unchanged, the file is a few MB instead of 100+."""
    import shutil

    from sieve.evaluation.records import CONFIG, SUMMARY, latest_records, read_records, write_compact_records

    s, d = Path(src), Path(dst)
    d.mkdir(parents=True, exist_ok=True)
    for name in (CONFIG, SUMMARY):
        if (s / name).exists():
            shutil.copyfile(s / name, d / name)
    return write_compact_records(d, (compact_record(rec) for rec in latest_records(read_records(s))))


def clean_cost(summary: Mapping[str, Any], defense: str) -> dict[str, Any] | None:
    """What ``defense`` costs on clean questions in a run's summary: its clean-condition row's clean
    removal rate, clean accuracy (None without answers) and n; None when the run has no such row."""
    for row in summary.get("results", []) or []:
        if row.get("defense") == defense and row.get("attack") == "clean" and row.get("clean_removal_rate") is not None:
            acc = row.get("clean_acc")
            return {"defense": defense, "clean_removal_rate": float(row["clean_removal_rate"]),
                    "clean_acc": None if acc is None else float(acc), "queries": int(row.get("queries") or 0)}
    return None
