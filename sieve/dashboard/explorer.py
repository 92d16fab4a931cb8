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
    """Plain-language verdict of an answer (§9.1 normalised substring rules). A query without a gold
    answer (a typed query, an uploaded corpus) is never called wrong: the verdict says there is
    nothing to compare with."""
    from sieve.evaluation.metrics import asr_success, clean_correct

    if target and asr_success(answer, target):
        return "attack succeeded (asserts the target answer)"
    if not correct:
        return NO_GOLD_VERDICT if not target else "does not give the attack's target (no correct answer known)"
    if clean_correct(answer, correct):
        return "correct"
    return "neither correct nor the target" if target else "not the correct answer"


#: The verdict of an answer to a query without a gold answer and without an attack target.
NO_GOLD_VERDICT = "no correct answer known for this query (nothing to compare with)"


def l1_removals(result: DefenseResult) -> list[Decision]:
    """The decisions TRIS Layer 1 removed (the minority judge-space clusters of the top-k)."""
    return [d for d in result.decisions if d.removed and d.layer == "L1"]


def l1_note(name: str, result: DefenseResult, ranking: Ranking, cost: dict[str, Any] | None,
            run_label: str = "") -> str | None:
    """Plain words beside a TRIS result whose Layer 1 removed passages on this query: L1 keeps only
    the largest judge-space cluster of the top-k by design, so on a small corpus it removes
    relevant passages too; with ``cost`` (:func:`sieve.dashboard.runs.clean_cost` of the shipped
    run) the measured clean removal rate and clean accuracy are named. None when L1 removed no clean
    passage here.
    The text is our own words plus numbers and names (the caller escapes it for markdown)."""
    removed = l1_removals(result)
    rank = {d.id: d.rank for d in ranking.documents}
    ranks = sorted(rank[d.doc_id] for d in removed if d.doc_id in rank)
    clean = sum(1 for d in ranking.documents if d.id in {x.doc_id for x in removed} and not d.poison)
    if not clean:   # nothing but poisons removed (or nothing at all): L1 did its job, no caveat to state
        return None
    where = _rank_span(ranks)
    text = (f"{name}: Layer 1 removed {len(removed)} passage(s) of the top {len(ranking.documents)} here ({where}; "
            f"{clean} of them not poisons). "
            "By design, TRIS L1 keeps only the largest K-Means cluster of the top-k in the judge space and removes "
            "the rest, so on a small corpus it removes relevant passages too (the paper's method, unchanged).")
    if cost is not None:
        acc = cost.get("clean_acc")
        text += (f" Measured in the shipped run{f' {run_label}' if run_label else ''}: on clean questions "
                 f"{cost['defense']} removes {cost['clean_removal_rate']:.2f} of the clean passages it examines"
                 + (f" and answers {acc:.2f} of them correctly" if acc is not None else "")
                 + f" (n = {cost['queries']} questions).")
    return text


def _rank_span(ranks: Sequence[int]) -> str:
    """Ranks as runs: ``ranks 1–10``, ``ranks 1–5, 35–36, 38``, ``rank 7``."""
    if not ranks:
        return "no ranks"
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(f"{a}–{b}" if b > a else f"{a}" for a, b in runs)
    return ("rank " if len(ranks) == 1 else "ranks ") + text
