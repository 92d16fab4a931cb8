"""The Trade-offs page's data: a finished run, its live-tunable thresholds and recomputed rows."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

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
    ``layer`` is None for the defense-wide threshold. Only the knobs the defense itself declares
    (:meth:`Defense.threshold_knobs`, re-decided by its own rule) are offered; ranges come from the
    recorded raw scores."""
    from sieve.evaluation.tradeoffs import defense_for_record

    declared = [k for k in defense_for_record(defense).threshold_knobs() if "." not in k]
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
