"""The in-process memos of deterministic defense work (docs/architecture.md), listed once.

Each memo is a bounded ``OrderedDict`` in its defense module with a size constant beside it. The
scope says what a memo holds, so callers can drop exactly one kind of work:

* ``query`` — results for one ranking or query (RSQ candidate rows and per-document alignments, TRIS K-Means fits and L2
  features, TrustRAG ROUGE-L pairs of the passages ranked together);
* ``document`` — per-text features (RSQ token sets, script fractions and surprisal profiles, RSG script profiles);
* ``corpus`` — RSG audits of a snapshot, the answer evidence's inverted index of a snapshot.

A benchmark timing a *new* query with warm per-document caches clears ``query``; the identity test
clears them all (tests/evaluation/test_memo_identity.py).
"""
from __future__ import annotations

import hashlib
import importlib
from collections import OrderedDict
from types import ModuleType
from typing import Any, Callable, Hashable, Sequence

#: (defense module, memo attribute, size attribute, scope) of every memo.
MEMOS: tuple[tuple[str, str, str, str], ...] = (
    ("sieve.defenses.tris_layers", "_KMEANS_CACHE", "_KMEANS_CACHE_SIZE", "query"),
    ("sieve.defenses.tris_layers", "_L2_CACHE", "_L2_CACHE_SIZE", "query"),
    ("sieve.defenses.trustrag", "_ROUGE_CACHE", "_ROUGE_CACHE_SIZE", "query"),
    ("sieve.defenses.rsq", "_CANDIDATES", "_CANDIDATES_SIZE", "query"),
    ("sieve.defenses.rsq_alignment", "_ALIGNMENTS", "_ALIGNMENTS_SIZE", "query"),
    ("sieve.defenses.rsq", "_PER_TEXT", "_PER_TEXT_SIZE", "document"),
    ("sieve.defenses.rsq", "_SURPRISALS", "_SURPRISALS_SIZE", "document"),
    ("sieve.defenses.rsg", "_PROFILES", "_PROFILES_SIZE", "document"),
    ("sieve.defenses.rsg", "_AUDIT_CACHE", "_AUDIT_CACHE_SIZE", "corpus"),
    ("sieve.defenses.answer_corpus", "_INDEX_CACHE", "_INDEX_CACHE_SIZE", "corpus"),
)


def snapshot_digest(ids: Sequence[str], texts: Sequence[str]) -> Any:
    """A blake2b (16 bytes) fed with a snapshot's ids and texts, the key of the ``corpus`` memos;
    a memo whose result depends on more (RSG: the vectors) feeds that in too."""
    h = hashlib.blake2b(digest_size=16)
    for i, t in zip(ids, texts):
        h.update(str(i).encode("utf-8", "surrogatepass") + b"\0" + str(t).encode("utf-8", "surrogatepass") + b"\0")
    return h


def fill(memo: "OrderedDict[Any, tuple[Any, Any]]", size: int, keys: Sequence[Hashable], owner: Any,
         compute: Callable[[list[int]], Sequence[Any]]) -> list[Any]:
    """The memoised value of each key, ``compute(positions)`` giving those of the keys not held (one
    batched call); entries keep ``owner`` (the resources whose ``id`` is in the key: an id is reused
    only after its object is gone), and the oldest go beyond ``size``."""
    hits = [memo.get(key) for key in keys]
    todo = [i for i, h in enumerate(hits) if h is None or h[0] is not owner]
    if todo:
        for i, value in zip(todo, compute(todo), strict=True):
            hits[i] = memo[keys[i]] = (owner, value)
        while len(memo) > size:
            memo.popitem(last=False)
    return [h[1] for h in hits if h is not None]


def memos(scope: str | None = None) -> list[tuple[ModuleType, str, str]]:
    """(module, memo attribute, size attribute) of every memo, or of those of one ``scope``."""
    return [(importlib.import_module(m), cache, size) for m, cache, size, sc in MEMOS if scope in (None, sc)]


def clear(scope: str | None = None) -> None:
    """Empty every memo, or those of one ``scope``."""
    for module, cache, _ in memos(scope):
        getattr(module, cache).clear()
