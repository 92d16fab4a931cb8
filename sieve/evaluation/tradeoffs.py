"""Live threshold trade-offs from a finished run, without re-running any model (dashboard).

:func:`recompute_run` takes the rows of ``records.jsonl`` and new thresholds per defense, re-decides
every stored decision with the defense's own rule (:meth:`Defense.redecide`, no model runs; the
rule is never re-implemented here), rebuilds each final context from the saved
ranking (refill to ``k_ctx`` in original rank order, no rescoring, everything-filtered fallback;
docs/algorithms.md §5), and returns summary rows computed by the same code as ``summary.json``.

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
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from sieve.evaluation.records import latest_records
from sieve.evaluation.summary import summarize_records

if TYPE_CHECKING:
    from sieve.defenses.base import Defense

RECOMPUTABLE = ("threshold", "layers", "k_ctx")
NEEDS_RERUN = ("models", "cluster_count", "depth", "l3_mode", "prefix_token_count", "rsq windows", "rsg k")


def defense_for_record(spec: str, cache: dict[str, "Defense"] | None = None) -> "Defense":
    """The defense object whose ``redecide`` rule applies to records of ``spec`` (built once per spec;
    a spec that no longer builds falls back to the base rule: removed iff score ≥ threshold)."""
    if cache is not None and spec in cache:
        return cache[spec]
    from sieve.defenses.base import Defense
    from sieve.experiment import DefenseSpecError, build_defense

    try:
        d = build_defense(spec)
    except DefenseSpecError:
        d = Defense()
    if cache is not None:
        cache[spec] = d
    return d


def thresholds_of(ov: Mapping[str, Any]) -> dict[str, float]:
    """Override mapping → the ``thresholds`` argument of :meth:`Defense.redecide`."""
    out = {str(k): float(v) for k, v in (ov.get("layers") or {}).items()}
    if ov.get("threshold") is not None:
        out["threshold"] = float(ov["threshold"])
    return out


def recompute_record(rec: dict[str, Any], ov: Mapping[str, Any], default_k_ctx: int,
                     defense: "Defense | None" = None) -> dict[str, Any]:
    """A copy of one record with decisions, context and fallback recomputed under ``ov``."""
    if rec.get("error"):
        return rec
    from sieve.defenses.base import finalize_context
    from sieve.types import Decision, RankedDocument, Ranking

    d = defense if defense is not None else defense_for_record(rec["defense"])
    out = copy.copy(rec)
    decisions = [Decision.from_dict(x) for x in rec.get("decisions", [])]
    thresholds = thresholds_of(ov)
    if thresholds and decisions:
        decisions = d.redecide(decisions, thresholds)
    out["decisions"] = [x.to_dict() for x in decisions]
    k = int(ov.get("k_ctx") or default_k_ctx)
    ranked = sorted(rec.get("ranking", []), key=lambda x: x["rank"])
    ranking = Ranking(rec.get("query", ""), [RankedDocument(x["id"], "", int(x["rank"]), float(x.get("score") or 0.0),
                                                            bool(x.get("poison"))) for x in ranked])
    if len(decisions) == len(ranking.documents):
        res = finalize_context(rec["defense"], ranking, decisions, k)
        out["fallback_used"] = res.fallback_used
        out["context_ids"] = [x.id for x in res.context]
    if out.get("context_ids") != rec.get("context_ids") and rec.get("answer") is not None:
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
    defenses: dict[str, "Defense"] = {}
    for r in latest_records(records):
        ov = {**glob, **overrides.get(r["defense"], {})}
        nr = recompute_record(r, ov, k_ctx, defense_for_record(r["defense"], defenses)) if ov else r
        if nr.get("stale_answer"):
            stale[(r["defense"], r["condition"])] = stale.get((r["defense"], r["condition"]), 0) + 1
        new.append(nr)
    rows = summarize_records(new, dataset, retriever, budget=budget)["results"]
    for row in rows:
        row["n_stale_answers"] = stale.get((row["defense"], row["attack"]), 0)
    return rows
