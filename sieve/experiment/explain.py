"""Plain-language explanations of RSG quarantine flags (docs/algorithms.md §4): a reason in words,
a continuous priority that orders a triage queue, and likely-false-positive hints.

RSG's decision score saturates at 1.0 for every flagged document (the topology branch is capped
and the integrity branch is binary), so it cannot order a queue. The priority here is computed from
the same audit evidence, continuously:

* topology branch: ``D_i · (1 − p_i) · support`` where ``D_i`` is the local density contrast,
  ``p_i`` its corpus tail probability and ``support = min(1, kept neighbours / 4)``;
* integrity branch: 0.55 plus up to 0.3 for letter-level script switches (homoglyph-like,
  ``adjacent_transitions / 3`` capped at 1), plus 0.15 when the neighbours are single-script;
  scripts in separate words only (no switch inside a word) start at 0.35;
* both branches: the larger of the two plus 0.1 (capped at 1);
* every likely-false-positive hint multiplies the priority by 0.7.

Used by :func:`sieve.experiment.audit.record_flags` (the alert's reason and evidence), the
dashboard's Alerts page and any face that shows flags (the CLI, the HTTP service).
The module has no model and no I/O: everything is read from an ``RSGRow`` dictionary
(``RSGRow.to_dict()``) plus, when available, the scripts of the neighbours.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sieve.defenses.tris_layers import L2_REPEAT_SCORE

if TYPE_CHECKING:
    from sieve.defenses.rsg import RSGAudit

#: Multiplier applied to the priority for each likely-false-positive hint.
HINT_DISCOUNT = 0.7

#: Plain-language help for every evidence term shown to an analyst (what it measures, range, and
#: which direction is suspicious). Keys are the names used in evidence dictionaries and tables.
TERMS: dict[str, str] = {
    # RSG (docs/algorithms.md §4)
    "D": "Local density contrast D (0–1): how much tighter a document's closest neighbours are than its "
         "wider neighbourhood. Higher is more suspicious (coordinated poisons sit in unusually tight clusters).",
    "p": "Corpus tail probability p (0–1): the share of the corpus with a density contrast at least this "
         "high. Lower is more suspicious (rare).",
    "I": "Script integrity flag I (0 or 1): 1 when letters of different writing systems are mixed inside a "
         "word, or when three or more writing systems appear. 1 is suspicious.",
    "T": "Topology score T (0–1): how far into the rare, dense tail the document sits, scaled to the alert "
         "budget. Higher is more suspicious; T ≥ 0.5 flags.",
    "score": "RSG score (0–1): the larger of T and I; a document is flagged at score ≥ 0.5. It saturates at "
             "1.0, so the queue is ordered by priority instead.",
    "priority": "Triage priority (0–1): a continuous strength of the evidence (density contrast, rarity, "
                "number of supporting neighbours, letter-level script switches), lowered by 30 % for each "
                "likely-false-positive hint. Higher first.",
    "floor": "Neighbourhood floor b (cosine similarity, −1–1): similarity of the 16th neighbour — what "
             "'near' means around this document. Used as the baseline for D.",
    "core_mean": "Core mean μ (cosine similarity, −1–1): mean similarity of the 4 closest eligible "
                 "neighbours. Much higher than the floor is suspicious.",
    "kept": "Eligible neighbours kept (count): neighbours with similarity ≥ 0.85 that are not lexical "
            "near-copies. More kept neighbours = stronger density evidence.",
    "dropped": "Neighbours dropped (count): similar neighbours ignored because they share more than 60 % of "
               "their words (Jaccard > 0.60) — near-copies do not count as coordination.",
    "scripts": "Writing systems found in the letters of the passage (LATIN, CYRILLIC, ARABIC, …).",
    "transitions": "Letter-level script switches (count): adjacent letters from different writing systems "
                   "inside one word, as in homoglyph triggers ('chеss' with a Cyrillic е). More is more "
                   "suspicious; 0 means the scripts are in separate words.",
    "mixed_fraction": "Mixed-script fraction (0–1): share of letters not in the dominant writing system.",
    "similarity": "Cosine similarity of the retriever vectors (−1–1; 1 = same direction).",
    "jaccard": "Word overlap (Jaccard, 0–1) between the two passages; above 0.60 the neighbour is a "
               "near-copy and is dropped.",
    # RSQ (docs/algorithms.md §3)
    "E_a": "RSQ anchor evidence E_a (≥ 0): how strongly rare tokens shared by several top-5 passages "
           "(but rare in ranks 6–20) concentrate in this passage. Higher is more suspicious.",
    "E_i": "RSQ script evidence E_i (≥ 0): mixed writing systems compared with the reference tail (ranks "
           "6–20). Higher is more suspicious.",
    "E_p": "RSQ surprisal evidence E_p (≥ 0): unusual language-model surprisal (a trigger prefix followed by "
           "a fluent payload) compared with the tail. Higher is more suspicious.",
    "E_s": "RSQ alignment evidence E_s (≥ 0): how much of the passage aligns token-by-token with the query "
           "(a copied question as trigger). Higher is more suspicious.",
    "S": "RSQ combined score S (≥ 0): the combination of E_a, E_i, E_p and E_s; removed when S ≥ η_Q.",
    "p_a": "Anchor tail p-value p_a (0–1): chance of anchor evidence this strong among the tail passages. "
           "Lower is more suspicious.",
    "p_i": "Script tail p-value p_i (0–1): chance of script evidence this strong among the tail passages. "
           "Lower is more suspicious.",
    "J": "Anchor-set overlap J (0–1): Jaccard overlap of this passage's anchor tokens with the other top-5 "
         "passages'. Higher means the top-5 share a planted vocabulary.",
    "p_s": "Alignment tail p-value p_s (0–1): chance of a query alignment this strong among the tail "
           "passages. Lower is more suspicious.",
    "R": "Rank R (1 = first): the document's position in the retrieval ranking.",
    "margin": "Margin = score − threshold, in the units of that defense's score. Positive means on the "
              "removal side; the further from 0, the clearer the decision.",
}


#: Plain-language help for the fused detector's evidence (sieve/defenses/fusion.py, docs/algorithms.md
#: §14.2): each value is turned into a p-value against clean passages, so "p" reads the same for all.
FUSION_TERMS: dict[str, str] = {
    "l2": f"TRIS L2 prefix overlap (0–1, or {L2_REPEAT_SCORE:g} when the passage repeats the question as its "
          "prefix): how much of the question the passage's opening words repeat. Higher is more suspicious.",
    "rsq": "RSQ combined score S (≥ 0) of the passage as a top-5 candidate against ranks 6–20. Higher is more "
           "suspicious.",
    "rsg": "RSG density (0–1): the passage's density contrast among its corpus neighbours, or 1 for a script "
           "integrity alert (RSG's own score without its corpus-relative tail scaling). Higher is more suspicious.",
    "cohesion": "Cohesion (cosine, −1–1): mean similarity to the passage's two nearest neighbours among the first "
                "ten passages. Poisons of one target sit unusually close together; higher is more suspicious.",
    "mutual": "Mutual cohesion (summed cosine, 0–3, docs/algorithms.md §14.8): the similarity to those of the passage's "
              "three nearest neighbours among the first ten passages that name it among their own three nearest. "
              "Variants of one author's text are each other's nearest neighbours; a true passage merely near them is "
              "not named back and scores near 0. Higher is more suspicious.",
    "perplexity": "Perplexity (≥ 1) of the passage under the small local language model. Unusually high is "
                  "suspicious (odd text, mixed scripts, optimised triggers).",
    "answer": "Answer score (≥ 0): how much less the passage's answer is corroborated by independent passages "
              "of the corpus than the best-corroborated answer, weighted by how directly the passage answers the "
              "question. Higher is more suspicious; 0 (the passage gives the corroborated answer) takes no part.",
    "conflict": "Context conflict (≥ 0, docs/algorithms.md §14.5): how much better supported — counted in "
                "independent sources, near-copies and near-paraphrases counting once — a conflicting passage's "
                "answer is than this passage's, weighted by how directly it answers the question. Higher is more "
                "suspicious; 0 (no conflict, or a tie) takes no part.",
    "ragdefender": "RAGDefender's per-passage score (its clustering + TF-IDF vote). Higher is more suspicious.",
    "rouge": "Near-copy score (ROUGE-L F1, 0–1) to the most similar of the first ten passages. Near 1 means two "
             "passages are copies of each other except a few words — one of them may be an edited copy.",
    "similarity": "Query similarity (cosine, −1–1) of the passage to the question in the judge's embedding space. "
                  "Poisons are written to be retrieved, and sit closer to the question than the clean passages that "
                  "answer it; higher is more suspicious.",
    "promotion": "Promotion without support (cosine difference, −2–2, docs/algorithms.md §14.6): the passage's "
                 "similarity to the question minus its mean similarity to the other passages retrieved for it (its "
                 "own near-paraphrases left out). A passage written for the question sits much closer to it than to "
                 "the passages around it; higher is more suspicious.",
    "p": "p-value (0–1) of this value against the same evidence on clean passages of clean questions: the share of "
         "clean passages at least this extreme. Lower is more suspicious; the fused score combines them "
         "(Cauchy combination: one very small p-value is enough) and removes at the 5 % clean budget.",
}


@dataclass
class FlagExplanation:
    """Why a document was flagged, in words, with a continuous priority and false-positive hints."""

    reason: str
    priority: float
    hints: list[str] = field(default_factory=list)
    branch: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _script_names(scripts: Sequence[str]) -> str:
    names = [s.replace("_", " ").title() for s in scripts] or ["no letters"]
    return "/".join(names)


def explain_row(row: Mapping[str, Any], neighbour_scripts: Sequence[Sequence[str]] | None = None,
                support_scale: float = 4.0) -> FlagExplanation:
    """Explain one RSG row (``RSGRow.to_dict()``; an alert's stored evidence works too).

    ``neighbour_scripts`` are the writing systems of the row's eligible neighbours (kept and
    dropped), when known; they decide the "neighbours are Latin-only" wording and one hint."""
    branch = str(row.get("branch") or "")
    kept = list(row.get("kept") or [])
    dropped = list(row.get("dropped") or [])
    D = float(row.get("local_density_contrast", row.get("D", 0.0)) or 0.0)
    p = float(row.get("topology_tail_probability", row.get("p", 1.0)) or 0.0)
    floor = float(row.get("neighbourhood_floor", 0.0) or 0.0)
    scripts = list(row.get("scripts") or [])
    transitions = int(row.get("adjacent_transitions", 0) or 0)
    integ = int(row.get("script_integrity_score", row.get("I", 0)) or 0) >= 1
    topo = float(row.get("topological_coordination_score", row.get("T", 0.0)) or 0.0) >= 0.5
    if not branch:
        branch = "both" if integ and topo else ("integrity" if integ else ("topology" if topo else ""))
    hints: list[str] = []
    parts: list[str] = []
    strengths: list[float] = []

    if branch in ("topology", "both"):
        n = len(kept)
        sims = [float(e.get("similarity", 0.0)) for e in kept]
        mean_sim = sum(sims) / len(sims) if sims else 0.0
        rare = max(0.0, min(1.0, 1.0 - p))
        parts.append(f"{n} near-identical neighbour{'s' if n != 1 else ''} at similarity {mean_sim:.2f} "
                     f"(neighbourhood floor {floor:.2f}), a tightness rare elsewhere: density contrast {D:.2f}, "
                     f"among the densest {max(0.1, 100 * (1.0 - rare)):.1f}% of the corpus")
        support = min(1.0, n / support_scale) if support_scale > 0 else 1.0
        strengths.append(max(0.0, min(1.0, D)) * rare * support)
        if n <= 2:
            hints.append(f"only {n} eligible neighbour{'s' if n != 1 else ''}: the density evidence rests on "
                         "very little")
        if dropped and len(dropped) > n:
            hints.append(f"{len(dropped)} of its near neighbours are lexical near-copies (Jaccard > 0.60): "
                         "possibly a duplicated page rather than coordinated poisons")
    if branch in ("integrity", "both"):
        foreign = [s for s in scripts if s != "LATIN"]
        nb = [set(s) for s in (neighbour_scripts or [])]
        if nb:
            single = sum(1 for s in nb if len(s) <= 1)
            shared = sum(1 for s in nb if set(foreign) & s)
            if single == len(nb):
                only = sorted(set().union(*nb)) or ["LATIN"]
                ctx = f"whose neighbours are {_script_names(only)}-only"
            else:
                ctx = f"where {len(nb) - single} of {len(nb)} neighbours also mix scripts"
        else:
            single, shared, ctx = 0, 0, ""
        how = (f"{transitions} letter-level switch{'es' if transitions != 1 else ''} inside words"
               if transitions > 0 else f"{len(scripts)} writing systems in separate words")
        parts.append(f"mixed {_script_names(scripts)} script ({how})" + (f" in a passage {ctx}" if ctx else ""))
        s = 0.55 + 0.3 * min(1.0, transitions / 3.0) if transitions > 0 else 0.35
        if nb and single == len(nb):
            s += 0.15
        strengths.append(min(1.0, s))
        if transitions == 0:
            hints.append("the writing systems are in separate words (no switch inside a word): typical of a "
                         "quoted name or transliteration, not of a homoglyph trigger")
        if nb and foreign and shared > 0:
            hints.append(f"{shared} of {len(nb)} neighbours use the same {_script_names(foreign)} script: the "
                         "passage may belong to a multilingual topic")
    if not strengths:
        return FlagExplanation("not flagged by RSG", 0.0, [], "")
    prio = max(strengths) + (0.1 if len(strengths) > 1 else 0.0)
    prio = min(1.0, prio) * (HINT_DISCOUNT ** len(hints))
    reason = "; ".join(parts)
    return FlagExplanation(reason[:1].upper() + reason[1:], round(float(prio), 4), hints, branch)


def explain_audit(audit: "RSGAudit", i: int | str) -> FlagExplanation:
    """Explain document ``i`` of an audit (neighbour scripts read from the audit itself)."""
    pos = audit.index_of(i) if isinstance(i, str) else int(i)
    row = audit.row(pos)
    nb_scripts = []
    for e in [*row.kept, *row.dropped]:
        j = audit.index_of(e["id"])
        nb_scripts.append(list(audit.script_fields[j]["scripts"]) if audit.script_fields else [])
    return explain_row(row.to_dict(), nb_scripts, support_scale=2.0 * audit.params.support_scale)


def alert_explanation(evidence: Mapping[str, Any]) -> FlagExplanation:
    """The explanation stored with an alert (``evidence["explanation"]``), else recomputed from the
    stored RSG row (older alerts; without neighbour scripts)."""
    ex = evidence.get("explanation") if isinstance(evidence, Mapping) else None
    if isinstance(ex, Mapping) and "priority" in ex:
        return FlagExplanation(str(ex.get("reason", "")), float(ex.get("priority", 0.0)),
                               [str(h) for h in ex.get("hints", [])], str(ex.get("branch", "")))
    return explain_row(evidence or {})


_TABLE_FIELDS = (
    ("D", "density contrast D", "local_density_contrast"),
    ("p", "tail probability p", "topology_tail_probability"),
    ("T", "topology score T", "topological_coordination_score"),
    ("I", "script integrity I", "script_integrity_score"),
    ("score", "RSG score", "score"),
    ("floor", "neighbourhood floor b", "neighbourhood_floor"),
    ("core_mean", "core mean μ", "core_mean"),
    ("transitions", "letter-level script switches", "adjacent_transitions"),
    ("mixed_fraction", "mixed-script fraction", "mixed_script_fraction"),
)


def evidence_table(evidence: Mapping[str, Any], digits: int = 3) -> list[dict[str, Any]]:
    """An alert's RSG evidence as readable rows ``{term, value, meaning}`` with rounded values
    (instead of raw JSON); neighbour lists are summarised as counts (see :func:`neighbour_table`)."""
    rows: list[dict[str, Any]] = []
    for key, label, field_ in _TABLE_FIELDS:
        if field_ not in evidence:
            continue
        v = evidence[field_]
        val = round(float(v), digits) if isinstance(v, float) else v
        rows.append({"term": label, "value": str(val), "meaning": TERMS[key]})
    if "scripts" in evidence:
        rows.append({"term": "writing systems", "value": ", ".join(evidence.get("scripts") or []) or "none",
                     "meaning": TERMS["scripts"]})
    for part in ("kept", "dropped"):
        if part in evidence:
            rows.append({"term": f"neighbours {part}", "value": str(len(evidence.get(part) or [])),
                         "meaning": TERMS[part]})
    return rows


def neighbour_table(evidence: Mapping[str, Any], digits: int = 3) -> list[dict[str, Any]]:
    """The eligible neighbours of an RSG row: id, similarity, Jaccard (rounded) and kept/dropped."""
    out = []
    for part, label in (("kept", "kept"), ("dropped", "dropped (near-copy, Jaccard > 0.60)")):
        for e in evidence.get(part) or []:
            out.append({"neighbour": str(e.get("id", "")), "similarity": round(float(e.get("similarity", 0.0)), digits),
                        "jaccard": round(float(e.get("jaccard", 0.0)), digits), "edge": label})
    return out


def with_ledger_state(reason: str, removed: bool, state: str | None) -> str:
    """A defense's reason for one document plus what the quarantine ledger says about it, in the one
    wording of :data:`sieve.ledger.STATE_WORDING`. A detector's removal is a flag; when the analyst
    restored the document (dismissed or rolled back) and the detector still removes it, say both."""
    from sieve.ledger import STATE_WORDING

    words = STATE_WORDING.get(state or "")
    if not words:
        return reason
    if removed and words.startswith("restored"):
        return f"{reason} · ledger: {words} — the analyst restored it; this defense's own rule still removes it"
    return f"{reason} · ledger: {words}"
