"""Context conflict: two context passages answer the question differently, and the answer stated by
more independent sources of the corpus wins (docs/algorithms.md §14.5).

``answer_consistency`` (§14.1) counts how many corpus passages state each candidate's answer, so
five poisons written by one attacker are five supporters of the attacker's answer and the one true
passage is the odd one out. Conflict counts **sources** instead:

1. each of the first ``k_ctx`` passages gets its lexical answer (:func:`extract_answer`);
2. the *supporters* of an answer are the passages of the fitted snapshot whose answer sentence to
   the query states it (the corpus rule of :mod:`sieve.defenses.answer_corpus`), the passage itself
   included, passages already removed excluded, at most ``max_supporters``;
3. supporters are merged into one source when they are near-copies (Jaccard of their content words
   beyond the question and the answer ≥ ``duplicate_jaccard``, as in §14.1) or near-paraphrases in the retriever's space (cosine of their snapshot
   vectors ≥ ``source_cosine``): one author writing five variants is one source. S(a) = the number
   of sources;
4. a passage conflicts with another context passage when neither states the other's answer; its
   score is max over conflicting passages j of w_ij · max(0, ln(1 + S(a_j)) − ln(1 + S(a_i))), w the
   share of the question's words in a passage's answer sentence. ``rival_weight``: ``"own"`` (the
   default) w_ij = w_i; ``"answering"`` the same, but only a passage that answers the question
   (w_j > 0) can be a rival; ``"min"`` w_ij = min(w_i, w_j) — a conflict is as strong as the weaker
   claim to answer the question. With ``own``, an off-topic passage whose generic phrase ("Ohio")
   many pages state outvotes the true passage (measured: docs/results/suite.md, seventh session).
   No conflicting passage, or a tie: 0.

A lone poison beside a true passage that two independent pages corroborate scores w · (ln 4 − ln 2) > 0;
five agreeing poisons (one source) against one true passage (one source) score 0 on both sides, so
the true passage is never removed *by this evidence* for being outnumbered. Calibrated on clean
rankings with the one budget rule (§9.2); 0 abstains in fusion (most clean contexts agree).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sieve.constants import K_CTX
from sieve.defenses.answer_corpus import AnswerIndex, answers_query
from sieve.defenses.answer_evidence import Answer, _content_words, answer_sentence, extract_answer, states
from sieve.defenses.base import Defense
from sieve.registry import DEFENSES
from sieve.types import Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources


#: How a conflict is weighed (module docstring, 4).
RIVAL_WEIGHTS = ("min", "answering", "own")
#: (query, phrase) statement tests kept per fitted detector.
_MEMO_SIZE = 4096


def _sources(members: Sequence[int], words: Sequence[frozenset[str]], vectors: np.ndarray | None,
             duplicate_jaccard: float, source_cosine: float) -> int:
    """Connected components of ``members`` under "near-copy or near-paraphrase" (module docstring, 3):
    the pairwise Jaccard of ``words`` and cosine of ``vectors`` as matrices, components by scipy."""
    n = len(members)
    if n <= 1:
        return n
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    vocab = {w: i for i, w in enumerate(sorted(set().union(*words)))}
    B = np.zeros((n, max(len(vocab), 1)), dtype=np.float32)
    for a, ws in enumerate(words):
        B[a, [vocab[w] for w in ws]] = 1.0
    inter = B @ B.T
    size = B.sum(axis=1)
    union = size[:, None] + size[None, :] - inter
    same = np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0) >= duplicate_jaccard
    if vectors is not None:
        V = np.asarray(vectors, dtype=np.float32)
        V = V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)
        sims = V @ V.T
        same |= np.isfinite(sims) & (sims >= source_cosine)
    np.fill_diagonal(same, False)
    return int(connected_components(csr_matrix(same), directed=False)[0])


@DEFENSES.register
class ContextConflict(Defense):
    """Context conflict with source-counted corpus support (module docstring; docs/algorithms.md §14.5).

    Parameters: ``threshold`` (removal at score ≥ threshold; ``None`` = calibrate on clean rankings),
    ``duplicate_jaccard`` (0.5), ``source_cosine`` (0.9: supporters at least this close in the
    retriever's space are one source), ``max_supporters`` (32 per answer), ``rival_weight`` (``"own"``,
    ``"answering"`` or ``"min"``: how a conflict is weighed, module docstring 4). Learned in ``fit``:
    ``index_`` (the snapshot's answer index) and ``rows_`` (id → row of the snapshot's vectors)."""

    name = "context_conflict"
    summary = ("Removes a context passage whose answer conflicts with another context passage's answer that more "
               "independent sources of the corpus state (near-copies and near-paraphrases count once).")
    paper = "Sieve extension (docs/algorithms.md §14.5)"
    needs = ()
    threshold_param = "threshold"
    corpus_time = True
    requires_calibration = True

    # parameters (set by __init__ through Params; declared for type checkers)
    threshold: float | None
    duplicate_jaccard: float
    source_cosine: float
    max_supporters: int
    rival_weight: str

    def __init__(self, threshold: float | None = None, duplicate_jaccard: float = 0.5, source_cosine: float = 0.9,
                 max_supporters: int = 32, rival_weight: str = "own") -> None:
        if not 0.0 < float(duplicate_jaccard) <= 1.0:
            raise ValueError(f"context_conflict: duplicate_jaccard must be in (0, 1]; got {duplicate_jaccard!r}")
        if not -1.0 <= float(source_cosine) <= 1.0:
            raise ValueError(f"context_conflict: source_cosine must be in [-1, 1]; got {source_cosine!r}")
        if int(max_supporters) < 1:
            raise ValueError(f"context_conflict: max_supporters must be >= 1; got {max_supporters!r}")
        if rival_weight not in RIVAL_WEIGHTS:
            raise ValueError(f"context_conflict: rival_weight must be one of {', '.join(RIVAL_WEIGHTS)}; "
                             f"got {rival_weight!r}")
        super().__init__(threshold=threshold, duplicate_jaccard=duplicate_jaccard, source_cosine=source_cosine,
                         max_supporters=max_supporters, rival_weight=rival_weight)

    def fit(self, snapshot: Any, resources: "Resources | None" = None) -> "ContextConflict":
        """Index the snapshot's passages (``ids``, ``documents``) and keep its vectors (no labels read)."""
        self.index_ = AnswerIndex.of_snapshot(snapshot)
        self.vectors_ = getattr(snapshot, "vectors", None)
        self.rows_ = {pid: j for j, pid in enumerate(self.index_.ids)}
        self.__dict__.pop("_memo", None)
        self.__dict__.pop("_count_memo", None)
        return self

    def _supporters(self, query: str, phrase: frozenset[str], own: int | None, exclude: frozenset[str]) -> list[int]:
        """Snapshot positions whose answer sentence states ``phrase`` (module docstring, 2). The
        statement test is memoised per (query, phrase) — refill rounds ask again with more exclusions."""
        index: AnswerIndex = self.index_
        memo: OrderedDict[tuple[str, frozenset[str]], list[int]] = self.__dict__.setdefault("_memo", OrderedDict())
        key = (query, phrase)
        stating = memo.get(key)
        if stating is None:
            q = set(_content_words(query))
            half = (len(phrase) + 1) // 2
            stating = [int(j) for j in index.containing(phrase, at_least=half)
                       if len(phrase & (frozenset(_content_words(answer_sentence(query, index.texts[int(j)]))) - q))
                       >= half]
            memo[key] = stating
            if len(memo) > _MEMO_SIZE:
                memo.popitem(last=False)
        else:
            memo.move_to_end(key)
        found: list[int] = [] if own is None else [own]
        for j in stating:
            if len(found) >= int(self.max_supporters):
                break
            if j != own and index.ids[j] not in exclude:
                found.append(j)
        return sorted(found)

    def _support(self, query: str, answer: Answer, own: int | None, exclude: frozenset[str]) -> int:
        """S(a): the sources of the answer's best-supported phrase (module docstring, 2–3)."""
        index: AnswerIndex = self.index_
        q = frozenset(_content_words(query))
        best = 0
        for phrase in (answer.phrases or ((answer.tokens,) if answer.tokens else ())):
            if not phrase:
                continue
            rows = self._supporters(query, phrase, own, exclude)
            strip = q | answer.tokens          # independence is judged beyond the question and the answer
            memo: OrderedDict[Any, int] = self.__dict__.setdefault("_count_memo", OrderedDict())
            key = (strip, tuple(rows))
            n = memo.get(key, -1)
            if n < 0:
                vecs = None if self.vectors_ is None or not rows else np.asarray(self.vectors_[rows], dtype=np.float32)
                n = memo[key] = _sources(rows, [index.words[j] - strip for j in rows], vecs,
                                         float(self.duplicate_jaccard), float(self.source_cosine))
                if len(memo) > _MEMO_SIZE:
                    memo.popitem(last=False)
            best = max(best, n + (0 if own is not None else 1))   # a passage outside the snapshot is a source too
        return best

    def conflict_scores(self, ranking: Ranking, k_ctx: int | None = K_CTX,
                        exclude_ids: frozenset[str] = frozenset()) -> dict[int, dict[str, Any]]:
        """THE conflict evidence of the first ``k_ctx`` documents (read by this defense and by fusion's
        ``conflict`` evidence): per position, the score and what it was computed from."""
        docs = ranking.documents
        k = len(docs) if k_ctx is None else min(int(k_ctx), len(docs))
        index: AnswerIndex | None = getattr(self, "index_", None)
        answers = {i: extract_answer(ranking.query, docs[i].text) for i in range(k)}
        words = {i: frozenset(_content_words(docs[i].text)) for i in range(k)}
        support: dict[int, int] = {}
        for i in range(k):
            if not answers[i].tokens:
                support[i] = 0
                continue
            if index is None:       # not fitted: the context's own sources only
                members_words = [words[j] for j in range(k) if states(answers[i], words[j])]
                support[i] = _sources(list(range(len(members_words))), members_words, None,
                                      float(self.duplicate_jaccard), float(self.source_cosine))
                continue
            support[i] = self._support(ranking.query, answers[i], self.rows_.get(docs[i].id), exclude_ids)
        w = {i: answers_query(ranking.query, answers[i]) for i in range(k)}
        by_own_weight = self.rival_weight != "min"     # own and answering weigh by w_i alone
        answering = self.rival_weight == "answering"
        out: dict[int, dict[str, Any]] = {}
        for i in range(k):
            rivals = [j for j in range(k) if j != i and answers[i].tokens and answers[j].tokens
                      and not states(answers[i], words[j]) and not states(answers[j], words[i])
                      and not (answering and w[j] <= 0.0)]
            # each rival's term: the weight of the conflict times the gap in sources (module docstring, 4)
            terms = {j: (w[i] if by_own_weight else min(w[i], w[j]))
                     * max(0.0, math.log1p(support[j]) - math.log1p(support[i])) for j in rivals}
            best = max(rivals, key=lambda j: (terms[j], support[j], -j)) if rivals else None
            out[i] = {"score": round(terms[best] if best is not None else 0.0, 9), "answer": answers[i].text,
                      "sources": support[i], "rival": None if best is None else docs[best].id,
                      "rival_answer": None if best is None else answers[best].text,
                      "rival_sources": None if best is None else support[best], "answers_query": round(w[i], 4),
                      "rival_answers_query": None if best is None else round(w[best], 4)}
        return out

    def score(self, ranking: Ranking, resources: "Resources | None" = None, k_ctx: int | None = K_CTX) -> Scores:
        ev = self.conflict_scores(ranking, k_ctx)
        warnings = ([] if getattr(self, "index_", None) is not None else
                    ["context_conflict: not fitted on a corpus snapshot; sources counted in the context only"])
        out = []
        for i, d in enumerate(ranking.documents):
            e = ev.get(i)
            if e is None:
                out.append(Score(d.id, None, "not_examined", "conflict",
                                 note=f"rank {i + 1} is outside the first {len(ev)} (the context)"))
                continue
            out.append(Score(d.id, e["score"], "scored", "conflict", e))
        return Scores(out, {}, warnings)

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        e = s.evidence
        what = (f"answer {str(e.get('answer'))[:50]!r} from {e.get('sources')} source(s)"
                + (f" against {str(e.get('rival_answer'))[:50]!r} from {e.get('rival_sources')} ({e.get('rival')})"
                   if e.get("rival") else ", no conflicting passage in the context"))
        if threshold is None:
            return f"{what}; score {s.value:.2f} (no threshold set: calibrate on clean rankings); kept"
        return f"{what}; score {s.value:.2f} {'≥' if removed else '<'} {threshold:.2f}; {'removed' if removed else 'kept'}"
