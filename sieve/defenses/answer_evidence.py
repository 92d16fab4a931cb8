"""Answer-level evidence: does the answer a passage gives have independent support? (docs/algorithms.md §14.1)

For each candidate of the generation context (the first ``k_ctx`` documents) the extractor reads the
answer the passage gives to the query, and the corroboration statistic counts how many *independent*
passages of the rest of the ranking (ranks ``k_ctx``+1 … depth, the reference) state the same answer.

* **Extractor** (lexical; used with or without a causal LM — the LM-scored span variant is not
  implemented): the sentence with the largest overlap with the query's content words is the answer
  sentence; the answer is its capitalised phrases and numbers that the query does not contain, or,
  when it has none, its remaining content words.
* **Support**: a passage states answer A iff it contains at least half of A's tokens. A reference
  passage is *independent* of the candidate iff the Jaccard of their content words beyond the query
  and the answer is below ``duplicate_jaccard`` (near-copies of the candidate do not count).
* **Score** = ln(1 + m) − ln(1 + r_i), where r_i is the number of independent reference passages
  that state candidate i's answer and m the largest r_j over the candidates: the consensus that
  independent passages agree on minus the corroboration of this candidate's answer. Poisons agree
  with each other on an answer the rest of the ranking does not state (r small, while the true
  answer has m large); a single poison contradicts the answer the independent passages agree on.
  A clean query whose candidates all give the corroborated answer scores ≈ 0 everywhere.

The removal threshold is calibrated on clean rankings with the one budget rule
(:mod:`sieve.defenses.budget`, docs/algorithms.md §9.2). Ranks beyond ``k_ctx`` get status
``not_examined`` (they are the reference); refill candidates are scored by :mod:`sieve.defenses.fusion`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

from sieve.constants import K_CTX
from sieve.defenses.base import Defense
from sieve.registry import DEFENSES
from sieve.types import Decision, Inspection, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources

#: Function words that never make an answer (English; the demo corpus and PoisonedRAG targets).
STOPWORDS = frozenset("""
a an the of in on at to for from by with without about as is are was were be been being it its this that
these those which who whom whose what when where why how and or but not no nor so than then there their they
them he she his her him we our you your i me my do does did done has have had having can could will would
shall should may might must also only just very more most much many some any each every other such into over
under after before during while since until up down out off again further once here all both few own same too
s t one first new said says say according known called named de la von van
""".split())

_SENT = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+", re.UNICODE)
_CAP_PHRASE = re.compile(r"(?:\b[A-Z][\w'’-]*|\b\d[\d,.]*)(?:\s+(?:of\s+|de\s+|la\s+|von\s+|van\s+)?"
                         r"(?:[A-Z][\w'’-]*|\d[\d,.]*))*")


@lru_cache(maxsize=8192)
def _content_words(text: str) -> tuple[str, ...]:
    return tuple(w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOPWORDS)


def content_words(text: str) -> list[str]:
    """Lower-cased word tokens without stopwords (numbers kept); memoised per text (warm queries)."""
    return list(_content_words(text))


@dataclass(frozen=True)
class Answer:
    """The answer one passage gives: the phrase shown to users and the tokens matched against others."""

    text: str
    tokens: frozenset[str]
    sentence: str


@lru_cache(maxsize=8192)
def extract_answer(query: str, text: str) -> Answer:
    """The lexical answer of ``text`` to ``query`` (module docstring). Empty tokens = no answer found."""
    q = set(content_words(query))
    best, best_overlap = "", -1
    for s in _SENT.split(text):
        s = s.strip()
        if not s:
            continue
        ov = len(q & set(content_words(s)))
        if ov > best_overlap:
            best, best_overlap = s, ov
    phrases: list[str] = []
    for m in _CAP_PHRASE.finditer(best):
        toks = [t for t in content_words(m.group(0)) if t not in q]
        if toks:
            phrases.append(m.group(0))
    if phrases:
        tokens = frozenset(t for p in phrases for t in content_words(p) if t not in q)
        return Answer("; ".join(phrases), tokens, best)
    rest = [t for t in content_words(best) if t not in q]
    return Answer(" ".join(rest[:8]), frozenset(rest), best)


def states(answer: Answer, words: set[str]) -> bool:
    """True iff a passage with content words ``words`` states ``answer`` (≥ half its tokens)."""
    if not answer.tokens:
        return False
    return len(answer.tokens & words) * 2 >= len(answer.tokens)


def jaccard(a: set[str], b: set[str]) -> float:
    u = a | b
    return len(a & b) / len(u) if u else 0.0


@dataclass
class Corroboration:
    """The statistic of one candidate (module docstring)."""

    answer: Answer
    agree_candidates: int      # other candidates that state the same answer
    reference_support: int     # r: independent reference passages that state it
    reference_size: int        # independent reference passages considered
    consensus_support: int     # m: the best-corroborated candidate answer's r
    consensus_answer: str
    score: float

    def evidence(self) -> dict[str, object]:
        return {"answer": self.answer.text, "answer_sentence": self.answer.sentence[:300],
                "agree_candidates": self.agree_candidates, "reference_support": self.reference_support,
                "reference_size": self.reference_size, "consensus_support": self.consensus_support,
                "consensus_answer": self.consensus_answer, "answer_score": self.score}


def corroboration(query: str, texts: Sequence[str], candidates: Sequence[int], reference: Sequence[int],
                  duplicate_jaccard: float = 0.5) -> dict[int, Corroboration]:
    """The corroboration statistic of each index in ``candidates`` against the passages at ``reference``
    (indices into ``texts``)."""
    words = [frozenset(_content_words(t)) for t in texts]
    q = set(content_words(query))
    answers = {i: extract_answer(query, texts[i]) for i in candidates}
    support: dict[int, tuple[int, int]] = {}
    for i in candidates:
        # independence is judged on the words beyond the query and the answer itself
        own = words[i] - q - answers[i].tokens
        indep = [j for j in reference
                 if j != i and jaccard(own, words[j] - q - answers[i].tokens) < duplicate_jaccard]
        support[i] = (sum(states(answers[i], words[j]) for j in indep), len(indep))
    best = max(candidates, key=lambda i: (support[i][0], -i)) if candidates else None
    m = support[best][0] if best is not None else 0
    out = {}
    for i in candidates:
        agree = sum(states(answers[i], words[j]) for j in candidates if j != i)
        r, n = support[i]
        # rounded so that equal count pairs (m, r) give equal scores: ln(1+m) − ln(1+r) computed for
        # two pairs with the same ratio differs in the last bits, which would order true ties
        out[i] = Corroboration(answers[i], agree, r, n, m, answers[best].text if best is not None else "",
                               round(math.log1p(m) - math.log1p(r), 9))
    return out


@DEFENSES.register
class AnswerConsistency(Defense):
    """Answer-level corroboration (docs/algorithms.md §14.1). Parameters: ``threshold`` (removal at
    score ≥ threshold; ``None`` = calibrate on clean rankings), ``duplicate_jaccard`` (0.5; reference
    passages at least this similar to a candidate do not count as independent)."""

    name = "answer_consistency"
    summary = "Answer-level evidence: removes a top-k passage whose answer the independent rest of the ranking does not state."
    paper = "Sieve extension (docs/algorithms.md §14.1)"
    needs = ()
    threshold_param = "threshold"

    def __init__(self, threshold: float | None = None, duplicate_jaccard: float = 0.5) -> None:
        super().__init__(threshold=threshold, duplicate_jaccard=duplicate_jaccard)

    def scores(self, ranking: Ranking, k_ctx: int | None = K_CTX) -> dict[int, Corroboration]:
        n = len(ranking.documents)
        k = n if k_ctx is None else min(int(k_ctx), n)
        texts = [d.text for d in ranking.documents]
        return corroboration(ranking.query, texts, list(range(k)), list(range(k, n)), float(self.duplicate_jaccard))

    def inspect(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Inspection:
        thr = self.threshold
        cor = self.scores(ranking, k_ctx)
        out = []
        for i, d in enumerate(ranking.documents):
            c = cor.get(i)
            if c is None:
                out.append(Decision(d.id, False, "not_examined", threshold=thr, layer="answer",
                                    reason=f"rank {i + 1} is part of the reference (outside the top {len(cor)})"))
                continue
            removed = thr is not None and c.score >= float(thr)
            reason = (f"answer {c.answer.text[:60]!r} is stated by {c.reference_support} of {c.reference_size} "
                      f"independent reference passages, the consensus answer {c.consensus_answer[:60]!r} by "
                      f"{c.consensus_support}; score {c.score:.2f}"
                      + (f" {'≥' if removed else '<'} {float(thr):.2f}; {'removed' if removed else 'kept'}"
                         if thr is not None else " (calibrating)"))
            out.append(Decision(d.id, bool(removed), "scored", c.score, thr, c.evidence(), reason, "answer"))
        return Inspection(out)
