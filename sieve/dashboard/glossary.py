"""Help texts of the Query explorer's tables and the "About the methods" section (plain words: what a
value measures, its range, which direction is suspicious). Evidence terms come from
:data:`sieve.experiment.explain.TERMS`; run metrics from :data:`sieve.dashboard.runs.METRIC_HELP`."""
from __future__ import annotations

from sieve.experiment.explain import TERMS

RANKING_HELP: dict[str, str] = {
    "rank": TERMS["R"],
    "id": "Document id in the corpus (attack documents start with 'attack:').",
    "poison": "'yes' when the passage is one of this condition's poisons (known only in the demo and in "
              "evaluation data).",
    "retriever score": "Cosine similarity between the query and the passage in the retriever's space (−1–1); the "
                       "ranking is by this score. Poisons are written to score high.",
    "text": "The first characters of the passage (shown as plain text).",
    "quarantine ledger": "The analyst's ledger state of this document, in the same words on every page: excluded "
                         "(open alert), excluded (confirmed poison), restored (dismissed as a false alarm), restored "
                         "(quarantine rolled back). A defense's own column can still remove a restored document — "
                         "that is the defense's verdict on this query, not the ledger.",
}

DECISION_HELP = ("The defense's verdict on this passage: kept, removed (with the layer that removed it), "
                 "or 'not examined' when the defense only looks at some ranks (RSQ: ranks 1–5).")
MARGIN_HELP = TERMS["margin"]
#: The other columns of the explorer's Decisions tab.
DECISION_COLUMN_HELP: dict[str, str] = {
    "defense": "The defense whose verdict this row shows.",
    "layer": "Which part of the defense decided: L1/L2/L3 for TRIS, RSQ, RSG, fusion, …",
    "status": "scored: the defense scored this passage; not_examined: outside the ranks it looks at; "
              "unavailable: its evidence could not be computed (e.g. no LLM configured).",
    "score": "The defense's score for this passage, in its own units (About the methods); compared with the "
             "threshold — the margin column shows the difference.",
    "threshold": "The score at which the defense removes a passage (most remove at score ≥ threshold; TRIS L1 "
                 "removes the minority cluster and has none).",
    "reason": "The defense's reason in plain words, with the quarantine-ledger state appended when an analyst "
              "acted on this document.",
}

CONTEXT_HELP = "The passages handed to the generator after filtering and refill, in rank order."


def _fusion_help() -> dict[str, str]:
    from sieve.experiment.explain import FUSION_TERMS

    return dict(FUSION_TERMS)


#: Help for the fused detector's evidence table (the explorer's Decisions tab): the library's
#: :data:`sieve.experiment.explain.FUSION_TERMS` (one wording, read by every face).
FUSION_HELP: dict[str, str] = _fusion_help()


def ranking_column_help(columns: list[str], defenses: list[str]) -> dict[str, str]:
    """Help text for every column of the explorer's ranked table."""
    out = {}
    for c in columns:
        if c in RANKING_HELP:
            out[c] = RANKING_HELP[c]
        elif c.endswith(" margin") and c[: -len(" margin")] in defenses:
            out[c] = MARGIN_HELP
        elif c in defenses:
            out[c] = DECISION_HELP
    return out


def methods_table() -> list[dict[str, str]]:
    """One row per registered defense: name, what it does, and the paper section in docs/algorithms.md."""
    from sieve.registry import DEFENSES

    return [{"defense": e.name, "what it does": e.summary, "paper and section": e.paper, "needs": ", ".join(e.needs)}
            for e in DEFENSES.entries()]
