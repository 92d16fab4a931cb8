"""RobustRAG keyword aggregation, original design (docs/algorithms.md §8.3, RR0:src/defense.py).

Isolated answers (one LLM call per passage, PoisonedRAG single-context prompt §10.1) → abstention
removal ("I don't") → keyword/phrase candidates per answer → keep candidates found in at least
min(β, α·#non-abstained) answers → final answer from the corroborated keywords (one more call).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from sieve.constants import K_CTX
from sieve.defenses.base import Defense, unscored
from sieve.defenses.text import is_keyword, phrase_candidates
from sieve.models.errors import LLMError
from sieve.registry import DEFENSES
from sieve.types import Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources

ISOLATED_SYSTEM = "You are a helpful assistant."
ISOLATED_PROMPT = (
    "You are a helpful assistant. Below is a query from a user and a relevant context. Answer the "
    "question given the information in the context. Your answer should be short and concise. If "
    "you cannot find the answer to the question, just say \"I don't know\".\n\n"
    "Context: {context}\n\nQuery: {question}\n\nAnswer:"
)
FINAL_PROMPT = (
    "Answer the query using only words from the word list, as a short phrase. If the list does not "
    "contain an answer, say \"I don't know\".\n\nWord list: {hints}\n\nQuery: {question}\n\nAnswer:"
)


def is_robustrag_abstention(response: str) -> bool:
    """RR0 rule: a response containing "I don't" abstains (case-insensitive here; curly quotes too)."""
    return "i don't" in response.lower().replace("\u2019", "'")


@DEFENSES.register
class RobustRAG(Defense):
    """Original RobustRAG keyword aggregation (§8.3). Parameters and sources:

    * ``alpha`` = 0.3 (relative) and ``beta`` = 3 (absolute): keep keywords in ≥ min(β, α·#non-abstained)
      answers (RR0 defaults).
    * ``max_docs`` = 10: RR0's top-k; documents beyond it are ``not_examined`` (kept, used for refill).
    * Phrases: POS-free extractor (:func:`sieve.defenses.text.phrase_candidates`): stopwords and
      punctuation split the answer; maximal runs of other words, each word and the whole answer are
      candidates (spaCy POS tags + lemmas in the source; no lemmatisation here).

    Per-document decision: score = 1 − (fraction of the passage's keywords that are corroborated),
    threshold 1.0, removed iff none of its answer's keywords is corroborated. Abstaining answers are
    removed from the aggregation and the passage is removed (status ``scored``, evidence
    ``abstained``). A failed LLM call keeps the passage with status ``error``. The final answer goes
    is the defense's answer (``Inspection.answer``; also ``info["answer"]``). Without an LLM: status ``unavailable`` for all documents
    and a warning.
    """

    name = "robustrag"
    summary = "RobustRAG: isolated per-passage answers, keywords kept when corroborated by min(3, 0.3·n) answers."
    paper = "RobustRAG keyword aggregation (docs/algorithms.md §8.3)"
    needs = ("llm",)
    answers: ClassVar[bool] = True

    # parameters (set by __init__ through Params; declared for type checkers)
    alpha: float
    beta: float
    max_docs: int
    final_answer: bool

    def __init__(self, alpha: float = 0.3, beta: float = 3, max_docs: int = 10, final_answer: bool = True) -> None:
        super().__init__(alpha=alpha, beta=beta, max_docs=max_docs, final_answer=final_answer)

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        t = time.perf_counter()
        items, info, warnings = self._run(ranking, resources)
        return Scores(items, info, warnings, ["isolated_answers"],
                      {"isolated_answers": (time.perf_counter() - t) * 1000}, answer=info.get("answer"))

    def current_thresholds(self) -> dict[str, float | None]:
        """Score = 1 − corroborated keyword fraction, removed iff ≥ 1.0 (no keyword corroborated)."""
        return {"threshold": 1.0}

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        ev = s.evidence
        if ev.get("abstained"):
            return "the isolated answer abstains (\"I don't …\"); removed from the aggregation"
        need = float(ev.get("min_count", 0.0))
        if removed:
            return f"isolated answer {ev.get('answer')!r} shares no keyword with ≥ {need:g} answers; removed"
        return (f"{len(ev.get('corroborated', []))} of {len(ev.get('keywords', []))} keywords corroborated by "
                f"≥ {need:g} answers; kept")

    def _run(self, ranking: Ranking, resources: "Resources") -> tuple[list[Score], dict[str, Any], list[str]]:
        llm = resources.llm
        if llm is None:
            msg = "robustrag needs an LLM for isolated answers; none configured, nothing filtered"
            return (unscored(ranking, "unavailable", "no LLM configured", "robustrag"),
                    {"answer": None, "status": "unavailable"}, [msg])
        docs = ranking.documents
        m = min(len(docs), int(self.max_docs))
        answers: list[str | None] = []
        errors: dict[int, str] = {}
        for i in range(m):
            prompt = ISOLATED_PROMPT.format(context=docs[i].text, question=ranking.query)
            try:
                answers.append(llm.generate(prompt, system=ISOLATED_SYSTEM, max_tokens=64).strip())
            except LLMError as e:
                answers.append(None)
                errors[i] = str(e)
        abstained = {i for i, a in enumerate(answers) if a is not None and is_robustrag_abstention(a)}
        voters = [i for i, a in enumerate(answers) if a is not None and i not in abstained]
        keywords = {i: {c for c in phrase_candidates(answers[i] or "") if is_keyword(c)} for i in voters}
        counts: dict[str, int] = {}
        for i in voters:
            for c in keywords[i]:
                counts[c] = counts.get(c, 0) + 1
        need = min(float(self.beta), float(self.alpha) * len(voters))
        corroborated = {c for c, k in counts.items() if k >= need} if voters else set()
        hints = sorted(corroborated, key=lambda s: (len(s), s), reverse=True)

        out: list[Score] = []
        for i, d in enumerate(docs):
            if i >= m:
                out.append(Score(d.id, None, "not_examined", "robustrag", note=f"outside the examined top {m}"))
            elif i in errors:
                out.append(Score(d.id, None, "error", "robustrag", {"answer": None},
                                 note=f"isolated answer failed: {errors[i]}; kept"))
            elif i in abstained:
                out.append(Score(d.id, 1.0, "scored", "robustrag", {"answer": answers[i], "abstained": True}))
            else:
                kw = keywords[i]
                hit = sorted(kw & corroborated)
                frac = len(hit) / len(kw) if kw else 0.0
                ev = {"answer": answers[i], "abstained": False, "keywords": sorted(kw), "corroborated": hit,
                      "keyword_counts": {c: counts[c] for c in sorted(kw)}, "min_count": need}
                out.append(Score(d.id, 1.0 - frac, "scored", "robustrag", ev))
        info: dict[str, Any] = {"status": "ran", "answers": answers, "abstained": len(abstained),
                                "min_count": need, "keywords": hints, "llm_calls": m}
        if not voters:
            info["answer"] = "I don't know."
        elif self.final_answer and hints:
            try:
                info["answer"] = llm.generate(FINAL_PROMPT.format(hints=", ".join(hints), question=ranking.query),
                                              max_tokens=32).strip()
                info["llm_calls"] = m + 1
            except LLMError as e:
                info["answer"] = None
                info["final_answer_error"] = str(e)
        else:
            info["answer"] = None if self.final_answer is False else "I don't know."
        return out, info, []

