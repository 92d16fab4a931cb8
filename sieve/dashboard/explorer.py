"""The Query explorer's call path: rank one query, apply every prepared defense, gather evidence."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from sieve.dashboard.safe import snippet
from sieve.types import Decision, DefenseResult, Ranking

if TYPE_CHECKING:
    import pandas as pd

    from sieve.dashboard.lab import ShippedAnswers
    from sieve.defenses.base import Defense
    from sieve.experiment import Experiment
    from sieve.resources import Resources


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
    from sieve.defenses.rsq import CONTEXT_SIZE, score_candidates
    from sieve.defenses.rsq_traces import expand_evidence

    text = {d.id: d.text for d in ranking.documents}   # traces are references into the artifact cache
    for res in results.values():
        rows = {d.doc_id: d.evidence for d in res.decisions if d.layer == "RSQ" and "E_a" in d.evidence}
        if rows and any(r.get("survivor_rank") is None for r in rows.values()):
            return {i: expand_evidence(ev, resources, text.get(i)) for i, ev in rows.items()}
    if len(ranking.documents) < CONTEXT_SIZE:
        return {}
    rows_, _ = score_candidates(ranking, resources)
    return {r.doc_id: expand_evidence(r.evidence(), resources, text.get(r.doc_id)) for r in rows_}


def explore(experiment: "Experiment", query: str, condition: str, defenses: dict[str, "Defense"],
            query_id: str = "", k_ctx: int = 5) -> ExplorerResult:
    """The explorer's call path: rank on the condition's snapshot (:meth:`Experiment.rank`: quarantine
    excluded, forced-top pinned), apply every prepared defense, collect RSQ evidence. A failing
    defense is reported in ``errors`` and the others still run."""
    t0 = time.perf_counter()
    ranking = experiment.rank(query, condition=condition, query_id=query_id)
    resources = experiment.resources
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


def generate_answers(resources: "Resources", query: str, contexts: dict[str, Sequence[str]],
                     shipped: "ShippedAnswers | None" = None,
                     on_step: Callable[[int, int, str], None] | None = None,
                     stats: dict[str, int] | None = None) -> dict[str, str]:
    """Answer ``query`` from each named context with the configured generator (local Qwen by
    default) through the answer cache; with usable ``shipped`` answers (the demo's
    ``demo_data/answers/lab_answers.json``) those are looked up first and the model is loaded only
    for a context nobody answered yet. ``on_step(i, n, name)`` runs before each answer; ``stats``,
    when given, receives ``answers`` and ``shipped`` (how many came from the shipped file).
    Raises :class:`~sieve.models.errors.LLMError` on failure."""
    from sieve.dashboard.lab import LazyLLM, ShippedFirstCache
    from sieve.evaluation.answers import AnswerCache, Generator

    cache_path = None if getattr(resources, "_models_injected", False) else \
        Path(resources.config.cache_dir) / "dashboard-answers.sqlite"
    cache: Any = AnswerCache(cache_path)
    llm: Any
    if shipped is not None and shipped.usable:
        cache, llm = ShippedFirstCache(cache, shipped), LazyLLM(resources, shipped.model_id)
    else:
        llm = resources.llm
    gen = Generator(llm, cache)
    out = {}
    for i, (name, texts) in enumerate(contexts.items()):
        if on_step is not None:
            on_step(i, len(contexts), name)
        out[name] = gen.answer(query, list(texts)).text
    if stats is not None:
        stats.update(answers=len(out), shipped=getattr(cache, "hits", 0))
    return out


def answer_verdict(answer: str, correct: Sequence[str], target: str) -> str:
    """Plain-language verdict of an answer (§9.1 normalised substring rules)."""
    from sieve.evaluation.metrics import asr_success, clean_correct

    if target and asr_success(answer, target):
        return "attack succeeded (asserts the target answer)"
    if correct and clean_correct(answer, correct):
        return "correct"
    return "neither correct nor the target"
