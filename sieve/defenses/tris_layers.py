"""TRIS layers 1 and 2 (docs/algorithms.md §2.2–§2.3): judge-space K-Means majority keep and the
structural query-prefix features, with the one L2 score (:func:`l2_score`) that TRIS decides on and
fusion reads. The defense that composes them with L3 is :mod:`sieve.defenses.tris`.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from sieve.defenses.text import ngram_set, word_tokens

if TYPE_CHECKING:
    from sieve.resources import Resources

QUERY_PREFIX_TOKENS = 12  # §2.3 repeat_trigger: first ≤ 12 query tokens
#: L2 score of a repeated query prefix: above every recall (≤ 1), so it ranks first and removes at
#: any threshold in [0, 1]; the rule removes it at any threshold at all.
L2_REPEAT_SCORE = 2.0


_KMEANS_CACHE: "OrderedDict[tuple[Any, ...], Any]" = OrderedDict()
_KMEANS_CACHE_SIZE = 1024


def fit_kmeans(X: np.ndarray, n_clusters: int, random_state: int, n_init: int = 10, max_iter: int = 300) -> Any:
    """scikit-learn K-Means (Lloyd, k-means++) on one thread; the fitted values (``labels_``,
    ``cluster_centers_``, ``inertia_``, ``n_iter_``).

    Inputs here are tiny (k ≤ a few hundred rows): :func:`sieve.defenses.kernels.kmeans_fit` runs
    scikit-learn's own steps with its fixed per-fit costs paid once (bit-identical to
    ``KMeans.fit``). Duplicate rows (fewer distinct points than clusters) are allowed; scikit-learn's
    warning about them is silenced.

    The fit is deterministic (fixed ``random_state``, one thread), so fits are memoised by the bytes
    of ``X`` and the parameters: TRIS presets, TrustRAG and fusion cluster the same ranking's
    embeddings in one ``sieve eval`` and share one fit (same labels and centres as a new fit).
    Callers must not modify the returned arrays.
    """
    import hashlib

    if not isinstance(random_state, (int, np.integer)):   # unseeded: every fit is its own
        return _fit_kmeans(X, n_clusters, random_state, n_init, max_iter)
    Xc = np.ascontiguousarray(X)
    key = (hashlib.blake2b(Xc.tobytes(), digest_size=16).digest(), Xc.shape, Xc.dtype.str, int(n_clusters),
           int(random_state), int(n_init), int(max_iter))
    hit = _KMEANS_CACHE.get(key)
    if hit is not None:
        _KMEANS_CACHE.move_to_end(key)
        return hit
    km = _fit_kmeans(X, n_clusters, random_state, n_init, max_iter)
    _KMEANS_CACHE[key] = km
    if len(_KMEANS_CACHE) > _KMEANS_CACHE_SIZE:
        _KMEANS_CACHE.popitem(last=False)
    return km


def _fit_kmeans(X: np.ndarray, n_clusters: int, random_state: Any, n_init: int, max_iter: int) -> Any:
    from sieve.defenses.kernels import kmeans_fit

    return kmeans_fit(X, n_clusters, random_state, n_init=n_init, max_iter=max_iter)


# ---- Layer 1 -----------------------------------------------------------------------------------
@dataclass
class L1Result:
    removed: list[bool]
    evidence: list[dict[str, Any]]
    cluster_sizes: list[int]
    majority_cluster: int | None
    reason: str


def layer1(texts: list[str], resources: "Resources", cluster_count: int = 2) -> L1Result:
    """§2.2: K-Means (k_c = min(C, n), random_state 42, n_init 10) on judge embeddings; keep the largest
    cluster iff its size > n/2 (strict). n < 3, k_c < 2 or no strict majority → keep all."""
    n = len(texts)
    keep = L1Result([False] * n, [{} for _ in range(n)], [], None, "")
    if n < 3:
        keep.reason = f"fewer than 3 documents ({n}); L1 keeps all"
        return keep
    k_c = min(int(cluster_count), n)
    if k_c < 2:
        keep.reason = f"cluster count {cluster_count} < 2: L1 is off"
        return keep
    X = resources.judge_embeddings(texts)
    km = fit_kmeans(X, k_c, random_state=42, n_init=10)
    labels = km.labels_.astype(int)
    sizes = np.bincount(labels, minlength=k_c)
    largest = int(np.argmax(sizes))
    majority = bool(sizes[largest] > n / 2)
    dist = np.linalg.norm(X - km.cluster_centers_[largest], axis=1)
    judge_space = getattr(resources.judge, "model_id", "judge")
    out = L1Result([], [], [int(s) for s in sizes], largest if majority else None, "")
    for i in range(n):
        removed = bool(majority and labels[i] != largest)
        out.removed.append(removed)
        out.evidence.append({
            "cluster": int(labels[i]), "cluster_sizes": out.cluster_sizes,
            "majority_cluster": out.majority_cluster, "judge_space": judge_space,
            "distance_to_largest_centroid": float(dist[i]), "in_majority": majority and not removed,
        })
    out.reason = (f"majority cluster {largest} holds {sizes[largest]} of {n} (> {n / 2:g})" if majority
                  else f"no strict majority (cluster sizes {out.cluster_sizes}, need > {n / 2:g}); L1 keeps all")
    return out


# ---- Layer 2 -----------------------------------------------------------------------------------
@dataclass
class QueryGrams:
    """Query-side features of §2.3, computed once per query."""

    tokens: list[str]
    token_set: set[str]
    bigrams: set[tuple[str, ...]]
    trigrams: set[tuple[str, ...]]
    prefix_string: str

    @classmethod
    def of(cls, query: str) -> "QueryGrams":
        q = word_tokens(query)
        return cls(q, set(q), ngram_set(q, 2), ngram_set(q, 3), " ".join(q[:QUERY_PREFIX_TOKENS]))


@dataclass
class L2Features:
    jaccard: float
    bigram_overlap: float
    trigram_overlap: float
    repeat_trigger: bool
    prefix_tokens: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"jaccard": self.jaccard, "bigram_overlap": self.bigram_overlap,
                "trigram_overlap": self.trigram_overlap, "repeat_trigger": self.repeat_trigger,
                "prefix_tokens": self.prefix_tokens}


def l2_features(query: QueryGrams, text: str, prefix_token_count: int = 20) -> L2Features:
    """§2.3 features of one document: prefix P = first T tokens (T clamped to ≥ 5); Jaccard of sets;
    query-side bigram/trigram recall |Q ∩ P| / max(1, |Q|); repeat_trigger = the ≤12-token query
    prefix string occurs ≥ 2 times (non-overlapping, raw substring) in the space-joined P.
    Memoised per (query, text, T): the same document meets the same query in every condition's
    ranking and in every TRIS preset and fusion; each call returns its own copy."""
    T = max(5, int(prefix_token_count))
    key = (tuple(query.tokens), query.prefix_string, len(query.token_set), len(query.bigrams),
           len(query.trigrams), text, T)
    hit = _L2_CACHE.get(key)
    if hit is None:
        hit = _L2_CACHE[key] = _l2_features(query, text, T)
        if len(_L2_CACHE) > _L2_CACHE_SIZE:
            _L2_CACHE.popitem(last=False)
    return L2Features(hit.jaccard, hit.bigram_overlap, hit.trigram_overlap, hit.repeat_trigger,
                      list(hit.prefix_tokens))


_L2_CACHE: "OrderedDict[tuple[Any, ...], L2Features]" = OrderedDict()
_L2_CACHE_SIZE = 50_000


def _l2_features(query: QueryGrams, text: str, T: int) -> L2Features:
    P = word_tokens(text)[:T]
    sp = set(P)
    union = query.token_set | sp
    jaccard = len(query.token_set & sp) / len(union) if union else 0.0
    bigram = len(query.bigrams & ngram_set(P, 2)) / max(1, len(query.bigrams))
    trigram = len(query.trigrams & ngram_set(P, 3)) / max(1, len(query.trigrams))
    repeat = bool(query.prefix_string) and " ".join(P).count(query.prefix_string) >= 2
    return L2Features(jaccard, bigram, trigram, repeat, P)


def l2_removes(f: L2Features, jaccard_threshold: float = 0.8, ngram_threshold: float = 0.8) -> bool:
    """§2.3 rule, inclusive (≥) [CONTRADICTION #2: paper says >]."""
    return (f.jaccard >= jaccard_threshold or f.bigram_overlap >= ngram_threshold
            or f.trigram_overlap >= ngram_threshold or f.repeat_trigger)


def l2_score(f: L2Features) -> float:
    """THE L2 score (docs/algorithms.md §2.3), read by TRIS and by fusion: max(Jaccard, bigram,
    trigram recall) of the prefix vs. the query, in [0, 1]; :data:`L2_REPEAT_SCORE` (above that
    range) when repeat_trigger fires, which removes at any threshold."""
    if f.repeat_trigger:
        return L2_REPEAT_SCORE
    return max(f.jaccard, f.bigram_overlap, f.trigram_overlap)


def l2_evidence_features(ev: Mapping[str, Any]) -> L2Features:
    """The :class:`L2Features` stored in a decision's ``evidence["L2"]``."""
    return L2Features(float(ev.get("jaccard", 0.0) or 0.0), float(ev.get("bigram_overlap", 0.0) or 0.0),
                      float(ev.get("trigram_overlap", 0.0) or 0.0), bool(ev.get("repeat_trigger")),
                      list(ev.get("prefix_tokens") or []))


def l2_evidence_score(ev: Mapping[str, Any]) -> float:
    """:func:`l2_score` of a stored ``evidence["L2"]``."""
    return l2_score(l2_evidence_features(ev))
