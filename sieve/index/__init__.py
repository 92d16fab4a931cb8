"""Embeddings, the persistent FAISS index and the per-document artifact cache (docs/design.md).

* :class:`ArtifactCache` (:mod:`sieve.index.cache`) – query-independent per-document arrays
  (retriever / judge embeddings, LM NLL traces, token states) keyed by (kind, model id, content
  hash), in SQLite (WAL) with an in-memory LRU in front. Safe to share between processes.
* :class:`VectorIndex` (:mod:`sieve.index.vector`) – a corpus embedded once with the retriever,
  exact inner-product search (FAISS ``IndexFlatIP`` on L2-normalised float32 vectors; stored as
  float16, docs/algorithms.md §6.1). Attack conditions are in-memory views
  (:meth:`VectorIndex.with_documents`) that never re-embed the base corpus.
* :mod:`sieve.index.embedding` – embedding documents through the cache, the float16 round trip.
* :mod:`sieve.index.storage` – the workspace files (manifest, vectors, ids, FAISS) and shipped
  artifacts; :mod:`sieve.index.build` – :func:`open_index`, :func:`workspace_dir`,
  :func:`export_index_artifacts`.
* :mod:`sieve.index.precompute` – :func:`precompute_artifacts`, filling the cache ahead of queries.

This package never imports :mod:`sieve.resources`: :func:`open_index` and
:func:`precompute_artifacts` take any object with the attributes they use (a ``Resources`` is one).
"""
from __future__ import annotations

from sieve.index.build import IndexResources, export_index_artifacts, open_index, workspace_dir
from sieve.index.cache import ArtifactCache, CacheStats
from sieve.index.embedding import EMBED_BATCH
from sieve.index.precompute import PRECOMPUTE_KINDS, ArtifactSource, precompute_artifacts
from sieve.index.storage import MANIFEST_FORMAT
from sieve.index.vector import TIE_SLACK, BuildReport, VectorIndex

__all__ = [
    "EMBED_BATCH", "MANIFEST_FORMAT", "PRECOMPUTE_KINDS", "TIE_SLACK", "ArtifactCache", "ArtifactSource",
    "BuildReport", "CacheStats", "IndexResources", "VectorIndex", "export_index_artifacts", "open_index",
    "precompute_artifacts", "workspace_dir",
]
