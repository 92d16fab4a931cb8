"""The evidence fusion combines, each read from the method that defines it (docs/algorithms.md §14.2).

Every evidence is one line of :data:`EVIDENCE`: the score of a registered defense (``method``), or
a named function a defense itself uses (TrustRAG's ROUGE-L near-copy signal), or fusion's own
judge-space cohesion among the context, or the mutual cohesion of §14.8 over fusion's window. There is one
definition of each: a change to a method's score changes the fusion that reads it, and
tests/defenses/test_fusion_evidence.py checks they agree on the same ranking.

Scopes: ``document`` — the method scores the context documents themselves (a sub-ranking of them;
per-document scores); ``ranking`` — the method scores the whole ranking once (RAGDefender's top
``k_ctx``); ``neighbourhood`` — the method scores every document of the ranking once against the
ranking's first documents (promotion without support, §14.6); ``context`` — the method scores the
current survivors as a ranking, again every refill round (RSQ's top-5 vs ranks 6–20, the answer corroboration of the context against the rest);
``window`` — pairwise over the first ``cohesion_scope`` survivors (plus, with ``pairwise_scope="seen"``,
the documents removed in earlier rounds).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from sieve.constants import K_CTX
from sieve.defenses.mutual_cohesion import NEIGHBOURS, mutual_cohesion_scores
from sieve.defenses.rsg import density_without, snapshot_free_score
from sieve.registry import DEFENSES
from sieve.types import Ranking

if TYPE_CHECKING:
    from sieve.defenses.base import Defense
    from sieve.resources import Resources


@dataclass(frozen=True)
class Evidence:
    """One fused evidence: where it comes from and how often it is recomputed."""

    name: str
    scope: str                         # document | ranking | context | window
    method: str | None = None          # the registered defense whose score it is
    params: tuple[tuple[str, Any], ...] = ()   # fixed parameters of that defense (by name)
    read: Callable[[dict[str, Any]], float] | None = None   # the value from the method's score evidence
                                                            # (None: the score's value itself)


#: Every evidence fusion can use, one line each (module docstring).
EVIDENCE: dict[str, Evidence] = {e.name: e for e in (   # in the order values are combined
    Evidence("l2", "document", "tris_l2"),
    Evidence("similarity", "document", "query_similarity"),   # judge-space cosine to the question (§14.7)
    Evidence("perplexity", "document", "perplexity"),
    Evidence("rsg", "document", "rsg", read=snapshot_free_score),
    Evidence("ragdefender", "ranking", "ragdefender"),
    Evidence("rsq", "context", "rsq"),
    Evidence("cohesion", "window"),       # fusion's own: mean cosine to the two nearest in the window
    Evidence("rouge", "window"),          # TrustRAG's near-copy signal (sieve.defenses.trustrag.max_rouge)
    Evidence("mutual", "window"),         # mutual_cohesion's score over the window (§14.8; mutual_cohesion_scores)
    Evidence("answer", "context", "answer_consistency"),
    Evidence("conflict", "context", "context_conflict"),   # sources, not passages, decide (§14.5)
    Evidence("promotion", "neighbourhood", "promotion"),   # closer to the question than to its neighbours (§14.6)
)}


def judge_cohesion(X: np.ndarray, rows: Sequence[int]) -> list[float]:
    """Fusion's cohesion: for each of ``rows``, the mean of its two largest judge-space cosines to the
    other rows of ``X`` (poisons of one target form a tight cluster, docs/algorithms.md §8.2)."""
    X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    S = X @ X.T
    np.fill_diagonal(S, -np.inf)
    return [float(np.mean(np.sort(S[r])[-2:])) for r in rows]


class EvidenceSources:
    """The registered methods fusion reads (constructed once, fitted on the snapshot it defends)."""

    def __init__(self, evidence: Sequence[str], duplicate_jaccard: float = 0.5, conflict_weight: str = "own",
                 mutual_neighbours: int = NEIGHBOURS, rouge_query: str = "keep", density_mutual: int = 0) -> None:
        self.evidence = tuple(evidence)
        self.rouge_query = rouge_query
        self.density_mutual = int(density_mutual)
        self.duplicate_jaccard = float(duplicate_jaccard)
        self.conflict_weight = conflict_weight
        self.mutual_neighbours = int(mutual_neighbours)
        self.methods: dict[str, "Defense"] = {}
        for name in self.evidence:
            e = EVIDENCE[name]
            if e.method is None or e.method not in DEFENSES.names():
                continue
            params = dict(e.params)
            if name == "answer":
                params["duplicate_jaccard"] = duplicate_jaccard
            if name == "conflict":
                params["rival_weight"] = conflict_weight
            self.methods[name] = DEFENSES.create(e.method, **params)
        self.fitted: set[str] = set()
        self._whole: dict[str, tuple[tuple[str, ...], list[Any]]] = {}   # last whole-ranking scores, per evidence

    def fit(self, snapshot: Any, resources: "Resources") -> None:
        self._whole.clear()
        for name, m in self.methods.items():
            if m.corpus_time:
                m.fit(snapshot, resources)
                self.fitted.add(name)

    def method(self, name: str) -> "Defense | None":
        return self.methods.get(name)

    # -- evidence that depends only on the document (and the query) ------------------------------
    def static(self, ranking: Ranking, resources: "Resources", idx: list[int]) -> dict[int, dict[str, float]]:
        docs = ranking.documents
        out: dict[int, dict[str, float]] = {i: {} for i in idx}
        if not idx:
            return out
        sub = Ranking(ranking.query, [docs[i] for i in idx], ranking.query_id, ranking.condition)
        for name, e in EVIDENCE.items():
            if name not in self.evidence:
                continue
            if e.scope == "document" and name in self.methods:
                if self.methods[name].corpus_time and name not in self.fitted:
                    continue          # RSG not fitted: the evidence is missing (Fusion reports it)
                if name == "rsg" and self.density_mutual:   # the mutual density, not RSG's audited rows
                    for i, v in self.density(ranking, idx).items():
                        out[i]["rsg"] = v
                    continue
                _store(out, idx, name, self.methods[name].score(sub, resources, None).items, e.read)
            elif e.scope in ("ranking", "neighbourhood") and name in self.methods:
                k = K_CTX if e.scope == "ranking" else None   # neighbourhood: every document, refill included
                try:   # a peer baseline failing must not break the fused detector
                    items = self._whole_ranking(name, ranking, resources, k)
                except Exception:  # noqa: BLE001
                    continue
                for i, s in enumerate(items):
                    if i in out and s.value is not None:
                        out[i][name] = float(s.value)
        return out

    def survivor_density(self, ranking: Ranking, idx: list[int], removed: set[int]) -> dict[int, float]:
        """The ``rsg`` evidence of the documents ``idx`` with the documents ``removed`` from this query's
        ranking no longer counted as their neighbours (:func:`~sieve.defenses.rsg.density_without`):
        max(D_i without them, I_i). Empty when RSG is not fitted or nothing was removed."""
        return self.density(ranking, idx, removed) if removed else {}

    def density(self, ranking: Ranking, idx: list[int], removed: Iterable[int] = ()) -> dict[int, float]:
        """The ``rsg`` evidence max(D_i, I_i) of the documents ``idx`` recomputed from the audit: without
        the ``removed`` documents of this ranking as neighbours, and with ``density_mutual`` = m > 0 only
        over neighbours that name the document among their own m nearest (docs/algorithms.md §14.2).
        Empty when RSG is not fitted."""
        audit = getattr(self.methods.get("rsg"), "audit_", None) if "rsg" in self.fitted else None
        if audit is None:
            return {}
        docs = ranking.documents
        gone = [audit.index_of(docs[j].id) for j in removed if docs[j].id in audit]
        rows = [i for i in idx if docs[i].id in audit]
        if not rows:
            return {}
        at = [audit.index_of(docs[i].id) for i in rows]
        dens = density_without(audit, at, gone, self.density_mutual)
        return {i: float(max(float(d), float(audit.integrity[r]))) for i, r, d in zip(rows, at, dens)}

    def _whole_ranking(self, name: str, ranking: Ranking, resources: "Resources", k: int | None) -> list[Any]:
        """The method's scores of the whole ranking, computed once per ranking: every refill round
        asks again for the documents that entered the context, and the answer does not change."""
        key = (ranking.query, *(d.id for d in ranking.documents))
        hit = self._whole.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        items = list(self.methods[name].score(ranking, resources, k).items)
        self._whole[name] = (key, items)
        return items

    # -- evidence that depends on the current context --------------------------------------------
    def contextual(self, ranking: Ranking, resources: "Resources", survivors: list[int], ctx: list[int], k: int,
                   window: list[int], judge: Callable[[list[str]], np.ndarray]) -> dict[int, dict[str, Any]]:
        docs = ranking.documents
        out: dict[int, dict[str, Any]] = {i: {} for i in ctx}
        sub = Ranking(ranking.query, [docs[i] for i in survivors], ranking.query_id, ranking.condition)
        pos = {docs[i].id: i for i in survivors}
        rsq = self.methods.get("rsq")
        if rsq is not None and rsq.min_documents is not None and len(survivors) >= rsq.min_documents:
            for doc_id, v in rsq.candidate_values(sub, resources).items():  # type: ignore[attr-defined]
                if pos[doc_id] in out:
                    out[pos[doc_id]]["rsq"] = v
        if "cohesion" in self.evidence and len(window) >= 3:
            where = {i: j for j, i in enumerate(window)}
            X = judge([docs[i].text for i in window])
            for i, v in zip(ctx, judge_cohesion(X, [where[i] for i in ctx])):
                out[i]["cohesion"] = v
        if "mutual" in self.evidence and len(window) >= 2:
            where = {i: j for j, i in enumerate(window)}
            values, _ = mutual_cohesion_scores(judge([docs[i].text for i in window]), self.mutual_neighbours)
            for i in ctx:
                out[i]["mutual"] = float(values[where[i]])
        if "rouge" in self.evidence and len(window) >= 2:
            from sieve.defenses.trustrag import max_rouge

            where = {i: j for j, i in enumerate(window)}
            texts = [docs[i].text for i in window]
            if self.rouge_query == "drop":
                texts = without_question_words(texts, ranking.query)
            best = max_rouge(texts)
            for i in ctx:
                out[i]["rouge"] = best[where[i]]
        answer = self.methods.get("answer")
        if answer is not None:
            alive = set(survivors)
            gone = frozenset(d.id for j, d in enumerate(docs) if j not in alive)
            cor = answer.corroboration(sub, k, None, exclude_ids=gone)[0]  # type: ignore[attr-defined]
            for j, c in cor.items():
                i = survivors[j]
                out[i]["answer"] = c.score
                out[i]["answer_text"] = c.answer.text
        conflict = self.methods.get("conflict")
        if conflict is not None:
            alive = set(survivors)
            gone = frozenset(d.id for j, d in enumerate(docs) if j not in alive)
            for j, c in conflict.conflict_scores(sub, k, exclude_ids=gone).items():  # type: ignore[attr-defined]
                out[survivors[j]]["conflict"] = c["score"]
        return out


def without_question_words(texts: Sequence[str], question: str) -> list[str]:
    """``texts`` as word tokens (:func:`~sieve.defenses.text.word_tokens`) without the question's content
    words (its tokens that are not :data:`~sieve.defenses.text.STOPWORDS`), joined by spaces: what
    fusion's ROUGE-L compares with ``rouge_query="drop"`` (docs/algorithms.md §14.2)."""
    from sieve.defenses.text import STOPWORDS, word_tokens

    drop = {t for t in word_tokens(question) if t not in STOPWORDS}
    return [" ".join(t for t in word_tokens(x) if t not in drop) for x in texts]


def _store(out: dict[int, dict[str, float]], idx: list[int], name: str, items: Sequence[Any],
           read: Callable[[dict[str, Any]], float] | None = None) -> None:
    for i, s in zip(idx, items):
        if s.value is not None:
            out[i][name] = float(s.value) if read is None else read(s.evidence)
