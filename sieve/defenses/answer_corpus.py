"""Corpus-level answer corroboration: how many independent passages of the whole snapshot give a
candidate's answer to the query (docs/algorithms.md §14.1, "corpus reference").

The ranking reference of :mod:`sieve.defenses.answer_evidence` reads only ranks ``k_ctx``+1 … depth.
On the demo the true answer is stated by one to three passages, which usually sit in the top 5
themselves, so the ranking reference rarely restates anything. The corpus reference counts support
over every passage of the snapshot being defended, the other top-k candidates included:

* **Fitted at corpus time** (:meth:`AnswerIndex.build`, from ``fit(snapshot)`` like RSG): each
  passage's content words and an inverted index word → passages. Memoised by the snapshot's
  content, so ``answer_consistency`` and ``fusion`` fitted on the same condition share one.
* **Answer phrases**: the lexical answer of a candidate is a list of phrases (each capitalised
  phrase or number of its answer sentence; :attr:`Answer.phrases`); an LM answer is one phrase.
* **Support of a phrase**: the passages whose *answer sentence to this query* (the sentence sharing
  the most words with the query, :func:`~sieve.defenses.answer_evidence.answer_sentence`) states the
  phrase — holds at least half of its words, the rule of
  :func:`~sieve.defenses.answer_evidence.states` (a capitalised run such as "In 1542 Francisco de
  Orellana" is one phrase, and "Francisco de Orellana" alone should support it). Mentioning the entity elsewhere does not count: on the demo the
  attacker's target answer occurs in a clean passage for 72 % of targets, but in another context.
* **Independence**: the candidate itself, passages already removed, and near-copies of the
  candidate (the same text, or a Jaccard of the content words beyond the query and the answer ≥
  ``duplicate_jaccard``) do not count. r_i = the largest support over the candidate's phrases.
* **Score** = w_i · (ln(1 + m) − ln(1 + r_i)), m = the largest r_j over the candidates, and w_i the
  share of the query's content words in the candidate's answer sentence: a passage that answers the
  question directly and contradicts the corroborated answer scores high; a passage about something
  else (w small) does not.

Support comes from the fitted snapshot only: passages of a ranking that are not in it (a ranking
posted to the HTTP service) are candidates but never support.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from sieve.defenses.answer_evidence import (
    Answer,
    Corroboration,
    _content_words,
    answer_sentence,
    content_words,
    corroboration,
    extract_answer,
    jaccard,
    states,
)
from sieve.defenses.memo import snapshot_digest

#: Name of the corpus reference in decisions and parameters.
CORPUS = "corpus"


@dataclass
class AnswerIndex:
    """Content words and an inverted index of one snapshot (module docstring). Read-only once built."""

    ids: list[str]
    texts: list[str]
    words: list[frozenset[str]]
    postings: dict[str, np.ndarray]

    @classmethod
    def of_snapshot(cls, snapshot: Any) -> "AnswerIndex":
        """The index of what ``fit`` receives: ``ids`` and ``documents`` (with ``.text``)."""
        return cls.build(list(snapshot.ids), [getattr(d, "text", d) for d in snapshot.documents])

    @classmethod
    def build(cls, ids: Sequence[str], texts: Sequence[str]) -> "AnswerIndex":
        """The index of a snapshot, memoised by its content (ids and texts; a ``corpus`` memo of
        :mod:`sieve.defenses.memo`)."""
        key = snapshot_digest(ids, texts).hexdigest()
        hit = _INDEX_CACHE.get(key)
        if hit is not None:
            _INDEX_CACHE.move_to_end(key)
            return hit
        words = [frozenset(_content_words(str(t))) for t in texts]
        lists: dict[str, list[int]] = {}
        for j, w in enumerate(words):
            for tok in w:
                lists.setdefault(tok, []).append(j)
        index = cls(list(map(str, ids)), [str(t) for t in texts], words,
                    {t: np.asarray(v, dtype=np.int32) for t, v in lists.items()})
        _INDEX_CACHE[key] = index
        if len(_INDEX_CACHE) > _INDEX_CACHE_SIZE:
            _INDEX_CACHE.popitem(last=False)
        return index

    def __len__(self) -> int:
        return len(self.ids)

    def containing(self, tokens: frozenset[str], at_least: int | None = None) -> np.ndarray:
        """Passages (positions, ascending) whose content words include at least ``at_least`` of
        ``tokens`` (default: all of them)."""
        need = len(tokens) if at_least is None else int(at_least)
        if not tokens or need > len(tokens):
            return np.empty(0, dtype=np.int32)
        if need <= 0:
            return np.arange(len(self.ids), dtype=np.int32)
        found = np.concatenate([self.postings.get(t, np.empty(0, dtype=np.int32)) for t in tokens])
        ids, counts = np.unique(found, return_counts=True)
        return ids[counts >= need].astype(np.int32)


_INDEX_CACHE: "OrderedDict[str, AnswerIndex]" = OrderedDict()
_INDEX_CACHE_SIZE = 8


def answers_query(query: str, answer: Answer) -> float:
    """w: the share of the query's content words in the answer sentence (1.0 for a query without any)."""
    q = set(content_words(query))
    if not q:
        return 1.0
    return len(q & set(content_words(answer.sentence))) / len(q)


def corpus_corroboration(query: str, texts: Sequence[str], ids: Sequence[str], candidates: Sequence[int],
                         index: AnswerIndex, duplicate_jaccard: float = 0.5,
                         answers: Mapping[int, Answer] | None = None,
                         exclude_ids: frozenset[str] = frozenset()) -> dict[int, Corroboration]:
    """The corpus statistic (module docstring) of each index in ``candidates`` (positions in
    ``texts``/``ids``, the ranking). ``exclude_ids``: passages that never support (already removed)."""
    q = set(content_words(query))
    given = answers or {}
    ans = {i: given[i] if i in given else extract_answer(query, texts[i]) for i in candidates}
    sentence_words: dict[int, frozenset[str]] = {}

    def stated_in_answer_sentence(j: int) -> frozenset[str]:
        if j not in sentence_words:
            sentence_words[j] = frozenset(_content_words(answer_sentence(query, index.texts[j])))
        return sentence_words[j]

    support: dict[int, int] = {}
    for i in candidates:
        a = ans[i]
        own = frozenset(_content_words(texts[i])) - q - a.tokens
        best = 0
        for phrase in (a.phrases or ((a.tokens,) if a.tokens else ())):
            if not phrase:
                continue
            n = 0
            half = (len(phrase) + 1) // 2           # states(): at least half of the phrase's words
            for j in index.containing(phrase, at_least=half):
                pid = index.ids[j]
                if pid == ids[i] or pid in exclude_ids or index.texts[j] == texts[i]:
                    continue
                if jaccard(own, index.words[j] - q - a.tokens) >= duplicate_jaccard:
                    continue
                if len(phrase & stated_in_answer_sentence(j)) >= half:
                    n += 1
            best = max(best, n)
        support[i] = best
    top = max(candidates, key=lambda i: (support[i], -i)) if candidates else None
    m = support[top] if top is not None else 0
    out = {}
    for i in candidates:
        w = answers_query(query, ans[i])
        agree = sum(states(ans[i], set(_content_words(texts[j]))) for j in candidates if j != i)
        r = support[i]
        out[i] = Corroboration(ans[i], agree, r, len(index), m, ans[top].text if top is not None else "",
                               round(w * (math.log1p(m) - math.log1p(r)), 9), reference=CORPUS,
                               answers_query=round(w, 4))
    return out


#: Where the support of a candidate's answer is counted.
REFERENCES = ("corpus", "ranking")


def answer_corroboration(query: str, texts: Sequence[str], ids: Sequence[str], candidates: Sequence[int],
                         reference: Sequence[int], index: AnswerIndex | None, duplicate_jaccard: float = 0.5,
                         answers: Mapping[int, Answer] | None = None,
                         exclude_ids: frozenset[str] = frozenset()) -> dict[int, Corroboration]:
    """The one entry point of ``answer_consistency`` and fusion's ``answer`` evidence: the corpus
    statistic when an :class:`AnswerIndex` is given, else the ranking statistic over ``reference``
    (positions of the ranking; :func:`~sieve.defenses.answer_evidence.corroboration`)."""
    if index is None:
        return corroboration(query, texts, candidates, reference, duplicate_jaccard, answers=answers)
    return corpus_corroboration(query, texts, ids, candidates, index, duplicate_jaccard, answers=answers,
                                exclude_ids=exclude_ids)
