"""Live threshold trade-offs from a finished run, without re-running any model (dashboard).

:func:`recompute_run` takes the rows of ``records.jsonl`` and new thresholds per defense, recomputes
the removal flags from the cached raw scores and evidence, rebuilds each final context from the saved
ranking (refill to ``k_ctx`` in original rank order, no rescoring, everything-filtered fallback;
ALGORITHMS.md §5), and returns summary rows computed by the same code as ``summary.json``.

What is recomputable live:

* ``threshold`` – one score threshold for every examined decision of a defense (removed iff
  score ≥ threshold): RSQ η_Q, RSG, perplexity, TrustRAG scores, …;
* ``layers`` – ``{layer: threshold}`` for the decisions a given layer made (``Decision.layer``).
  For TRIS ``L2`` the raw per-document overlaps stored in ``evidence["L2"]`` are used, so documents
  that L2 kept and L3 later judged are re-tested against the new L2 threshold too; documents L1
  removed stay removed (L2 never saw them);
* ``k_ctx`` – the context size.

What needs a rerun (``sieve eval``): anything that changes the scores themselves — models, TRIS C
(cluster count) and L1 clustering, RSQ windows, RSG k, retrieval depth, the L3 mode (documents a
raised L2 threshold lets through were never shown to L3 and are kept, i.e. L3 fails open), and
generated answers: an answer is kept only for records whose context did not change; ASR / accuracy
of changed contexts are left out (counted in ``n_stale_answers``).
"""
from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping

from sieve.evaluation.runner import SCORED_STATUSES, latest_records, summarize_records

RECOMPUTABLE = ("threshold", "layers", "k_ctx")
NEEDS_RERUN = ("models", "cluster_count", "depth", "l3_mode", "prefix_token_count", "rsq windows", "rsg k")


def _l2_score(ev: Mapping[str, Any]) -> float:
    if ev.get("repeat_trigger"):
        return float("inf")
    return max(float(ev.get(k, 0.0) or 0.0) for k in ("jaccard", "bigram_overlap", "trigram_overlap"))


def _new_removed(dec: dict[str, Any], ov: Mapping[str, Any]) -> bool:
    removed = bool(dec.get("removed"))
    layers: Mapping[str, float] = ov.get("layers") or {}
    layer = dec.get("layer") or ""
    score = dec.get("score")
    examined = dec.get("status") in SCORED_STATUSES or score is not None
    ev_l2 = (dec.get("evidence") or {}).get("L2")
    if "L2" in layers and isinstance(ev_l2, dict) and layer in ("L2", "L3"):
        l2 = _l2_score(ev_l2) >= float(layers["L2"])
        return l2 if layer == "L2" else (l2 or removed)
    if layer in layers and score is not None and examined:
        return float(score) >= float(layers[layer])
    if ov.get("threshold") is not None and score is not None and examined:
        return float(score) >= float(ov["threshold"])
    return removed


def recompute_record(rec: dict[str, Any], ov: Mapping[str, Any], default_k_ctx: int) -> dict[str, Any]:
    """A copy of one record with decisions, context and fallback recomputed under ``ov``."""
    if rec.get("error"):
        return rec
    out = copy.copy(rec)
    decs = []
    for dec in rec.get("decisions", []):
        d = dict(dec)
        new = _new_removed(dec, ov)
        if new != bool(dec.get("removed")):
            d["removed"] = new
        decs.append(d)
    out["decisions"] = decs
    k = int(ov.get("k_ctx") or default_k_ctx)
    removed = {d["doc_id"] for d in decs if d.get("removed")}
    order = [d["id"] for d in sorted(rec.get("ranking", []), key=lambda x: x["rank"])]
    survivors = [i for i in order if i not in removed]
    out["fallback_used"] = not survivors and bool(order)
    out["context_ids"] = (survivors or order)[:k]
    if out["context_ids"] != rec.get("context_ids") and rec.get("answer") is not None:
        out["answer"] = None
        out["judgment"] = None
        out["stale_answer"] = True
    return out


def recompute_run(records: Iterable[dict[str, Any]], overrides: Mapping[str, Mapping[str, Any]],
                  k_ctx: int = 5, *, dataset: str = "", retriever: str = "", budget: float = 0.05) -> list[dict[str, Any]]:
    """Summary rows (the ``summary.json`` ``results`` schema) after applying ``overrides``:
    ``{defense: {"threshold": float, "layers": {layer: float}, "k_ctx": int}}``. Defenses without
    an override keep their recorded decisions (their context is still rebuilt if ``k_ctx`` is
    given under the key ``"*"``, which applies to every defense)."""
    bad = {d: sorted(set(ov) - set(RECOMPUTABLE)) for d, ov in overrides.items() if set(ov) - set(RECOMPUTABLE)}
    if bad:
        raise ValueError(f"not recomputable without a rerun: {bad}; live parameters are {RECOMPUTABLE}")
    glob = overrides.get("*", {})
    new = []
    stale: dict[tuple[str, str], int] = {}
    for r in latest_records(records):
        ov = {**glob, **overrides.get(r["defense"], {})}
        nr = recompute_record(r, ov, k_ctx) if ov else r
        if nr.get("stale_answer"):
            stale[(r["defense"], r["condition"])] = stale.get((r["defense"], r["condition"]), 0) + 1
        new.append(nr)
    rows = summarize_records(new, dataset, retriever, budget=budget)["results"]
    for row in rows:
        row["n_stale_answers"] = stale.get((row["defense"], row["attack"]), 0)
    return rows
