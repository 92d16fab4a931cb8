"""The retriever index of a corpus: exact inner-product search with FAISS (docs/design.md).

A corpus is embedded once with the retriever (FAISS ``IndexFlatIP`` on L2-normalised float32
vectors; stored as float16, docs/algorithms.md §6.1), persisted in a workspace directory with a
manifest. Reopening reuses it; a changed corpus or model is detected and rebuilt; appended
documents are embedded alone. Attack conditions are in-memory views
(:meth:`VectorIndex.with_documents`) that never re-embed the base corpus.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from sieve.corpus.hashing import corpus_hash
from sieve.index.cache import ArtifactCache
from sieve.index.embedding import embed_documents, finalise, flat_ip, normalise, single_thread_faiss
from sieve.index.storage import (
    make_manifest,
    read_faiss,
    read_shipped,
    read_workspace,
    workspace_lock,
    write_faiss,
    write_workspace,
)
from sieve.types import Document, RankedDocument, Ranking

if TYPE_CHECKING:
    from sieve.models.protocols import Embedder

log = logging.getLogger("sieve.index")

TIE_SLACK = 8
"""Extra FAISS candidates fetched so that ties at the k-th place are resolved by the stable rule."""
QUERY_MEMO = 256
"""Recent query embeddings memoised per index (and shared with its views)."""
QUERY_KIND = "query_embedding@v1"
"""Artifact-cache kind of query vectors: stored as computed (float32), one query per encoder call,
so a cached query vector equals a freshly computed one bit for bit."""



def query_embedding(query: str, model_id: str, embedder: Callable[[], "Embedder"],
                    cache: ArtifactCache | None) -> np.ndarray:
    """One query's embedding (``kind="query"``, one query per encoder call, float32 as computed),
    persisted in ``cache`` under :data:`QUERY_KIND` and ``model_id`` when one is given. ``embedder``
    is called only on a miss, so a lazily loaded model stays unloaded when the vector is cached."""
    def encode(texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(embedder().encode([t], kind="query"), dtype=np.float32)[0] for t in texts]

    if cache is None:
        return encode([query])[0]
    return cache.get_or_compute(QUERY_KIND, model_id, [query], encode)[0]

@dataclass
class BuildReport:
    """What :meth:`VectorIndex.open_or_build` did: ``action`` is one of ``built``, ``reused``,
    ``appended``, ``rebuilt`` or ``copied`` (from shipped artifacts); ``reason`` says why."""

    action: str
    reason: str
    n_docs: int
    n_embedded: int
    seconds: float
    workspace: Path | None = None


class VectorIndex:
    """Retriever vectors of a document list with exact inner-product search.

    ``documents``/``ids``/``vectors`` cover the base corpus followed by any documents added with
    :meth:`with_documents`. ``vectors`` are float32, L2-normalised (float16 on disk).
    """

    def __init__(self, documents: Sequence[Document], vectors: np.ndarray, embedder: "Embedder | None",
                 manifest: dict[str, Any], workspace: Path | None = None, cache: ArtifactCache | None = None,
                 *, _faiss: Any = None, _n_base: int | None = None,
                 build_report: BuildReport | None = None) -> None:
        self.documents: list[Document] = list(documents)
        self.ids: list[str] = [d.id for d in self.documents]
        self._all = np.ascontiguousarray(vectors, dtype=np.float32)
        if self._all.shape[0] != len(self.documents):
            raise ValueError(f"{len(self.documents)} documents but {self._all.shape[0]} vectors")
        self.embedder = embedder
        self.manifest = dict(manifest)
        self.workspace = workspace
        self.cache = cache
        self.build_report = build_report
        self._n_base = len(self.documents) if _n_base is None else _n_base
        self._faiss = _faiss if _faiss is not None else flat_ip(self._all[: self._n_base])
        self._pos = {i: p for p, i in enumerate(self.ids)}
        if len(self._pos) != len(self.ids):
            seen: set[str] = set()
            dup = next(i for i in self.ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ValueError(f"duplicate document id {dup!r} in the index")
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_lock = threading.Lock()

    # -- basic accessors -----------------------------------------------------------------------
    @property
    def vectors(self) -> np.ndarray:
        return self._all

    @property
    def model_id(self) -> str:
        return str(self.manifest.get("model_id", ""))

    @property
    def dim(self) -> int:
        return int(self._all.shape[1])

    @property
    def n_base(self) -> int:
        """Number of base-corpus documents (the rest were added by :meth:`with_documents`)."""
        return self._n_base

    def __len__(self) -> int:
        return len(self.documents)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._pos

    def vector_of(self, doc_id: str) -> np.ndarray:
        try:
            return self._all[self._pos[doc_id]]
        except KeyError:
            raise KeyError(f"document id {doc_id!r} is not in the index") from None

    def document(self, doc_id: str) -> Document:
        try:
            return self.documents[self._pos[doc_id]]
        except KeyError:
            raise KeyError(f"document id {doc_id!r} is not in the index") from None

    # -- building / opening --------------------------------------------------------------------
    @classmethod
    def build(cls, documents: Sequence[Document], embedder: "Embedder", progress: bool = True,
              cache: ArtifactCache | None = None) -> "VectorIndex":
        """An in-memory index (nothing written)."""
        t0 = time.perf_counter()
        docs = list(documents)
        _, v32 = finalise(embed_documents(docs, embedder, cache, progress, "embedding corpus"))
        manifest = make_manifest(embedder, docs, v32.shape[1])
        rep = BuildReport("built", "in-memory index", len(docs), len(docs), time.perf_counter() - t0)
        return cls(docs, v32, embedder, manifest, None, cache, build_report=rep)

    @classmethod
    def open_or_build(cls, documents: Sequence[Document], embedder: "Embedder", workspace: str | os.PathLike[str],
                      progress: bool = True, cache: ArtifactCache | None = None,
                      artifacts_dir: str | os.PathLike[str] | None = None) -> "VectorIndex":
        """Open the index persisted in ``workspace`` or (re)build it.

        * same model id and corpus hash → reuse (nothing embedded);
        * same model, old corpus is a prefix of the new one → embed only the appended documents;
        * different model id or corpus → rebuild (the reason is logged and in ``build_report``);
        * nothing usable persisted (none yet, or damaged) and ``artifacts_dir/<model>/`` holds
          matching shipped vectors (verified by checksum, corpus hash and model id) → copy them;
        * every file is verified by its sha256 on open (same-size damage → rebuilt, logged).
        """
        t0 = time.perf_counter()
        ws = Path(workspace)
        docs = list(documents)
        if not docs:
            raise ValueError("cannot index an empty corpus")
        ids = [d.id for d in docs]
        if len(set(ids)) != len(ids):
            raise ValueError("document ids must be unique")
        full_hash = corpus_hash(docs)
        with workspace_lock(ws):
            old = read_workspace(ws)
            action, reason, n_embedded = "built", "no index in the workspace yet", len(docs)
            v16: np.ndarray | None = None
            faiss_idx = None
            if isinstance(old, str):
                action, reason = "rebuilt", old
            elif old is not None:
                m, old16, old_ids = old
                if m.get("model_id") != embedder.model_id:
                    action, reason = "rebuilt", f"retriever changed ({m.get('model_id')} -> {embedder.model_id})"
                elif m.get("corpus_hash") == full_hash and old_ids == ids:
                    action, reason, n_embedded, v16 = "reused", "corpus and model unchanged", 0, old16
                    faiss_idx = read_faiss(ws, len(docs), old16.shape[1], m)
                elif (len(old_ids) < len(docs) and old_ids == ids[: len(old_ids)]
                      and corpus_hash(docs[: len(old_ids)]) == m.get("corpus_hash")):
                    new = docs[len(old_ids):]
                    new16, _ = finalise(embed_documents(new, embedder, cache, progress, "embedding new documents"))
                    v16 = np.concatenate([old16, new16]) if len(new16) else old16
                    action, reason, n_embedded = "appended", f"{len(new)} documents appended", len(new)
                else:
                    action, reason = "rebuilt", (f"corpus changed ({m.get('n_docs')} -> {len(docs)} documents, "
                                                 f"content hash differs)")
            if v16 is None and not isinstance(old, tuple) and artifacts_dir is not None:
                shipped = read_shipped(Path(artifacts_dir), embedder.model_id, full_hash, ids)
                if shipped is not None:
                    v16, action, reason, n_embedded = shipped, "copied", f"shipped vectors in {artifacts_dir}", 0
            if action == "rebuilt":
                log.warning("rebuilding index in %s: %s", ws, reason)
            if v16 is None:
                v16, _ = finalise(embed_documents(docs, embedder, cache, progress, "embedding corpus"))
            v32 = normalise(v16)
            manifest = make_manifest(embedder, docs, v32.shape[1], full_hash)
            if action != "reused":
                faiss_idx = flat_ip(v32)
                write_workspace(ws, manifest, v16, ids, faiss_idx)
            else:
                manifest = {**manifest, "created": m.get("created", manifest["created"])}
                if faiss_idx is None:   # missing or damaged FAISS file: rebuilt from the verified vectors
                    faiss_idx = flat_ip(v32)
                    write_faiss(ws, m, faiss_idx)
                    reason += "; index.faiss rebuilt from the vectors"
        rep = BuildReport(action, reason, len(docs), n_embedded, time.perf_counter() - t0, ws)
        log.info("index %s: %s (%d documents, %d embedded)", action, reason, len(docs), n_embedded)
        return cls(docs, v32, embedder, manifest, ws, cache, _faiss=faiss_idx, build_report=rep)

    # -- attack conditions ---------------------------------------------------------------------
    def with_documents(self, extra: Iterable[Document], cache: ArtifactCache | None = None,
                       progress: bool = False) -> "VectorIndex":
        """A new in-memory view: this index plus ``extra`` documents appended. Their vectors come
        from the cache (kind ``"embedding"``, retriever model id), computed once; the base corpus
        is never re-embedded. A duplicate id raises ``ValueError``."""
        extra = list(extra)
        seen: set[str] = set()
        for d in extra:
            if d.id in self._pos:
                raise ValueError(f"document id {d.id!r} is already in the index")
            if d.id in seen:
                raise ValueError(f"document id {d.id!r} appears twice in the added documents")
            seen.add(d.id)
        if self.embedder is None:
            raise ValueError("this index has no embedder; cannot embed new documents")
        cache = cache or self.cache
        if cache is None:
            cache = self.cache = ArtifactCache.in_memory()
        _, v32 = finalise(embed_documents(extra, self.embedder, cache, progress, "embedding added documents"))
        vectors = np.concatenate([self._all, v32]) if len(extra) else self._all
        view = VectorIndex(self.documents + extra, vectors, self.embedder, self.manifest, self.workspace,
                           cache, _faiss=self._faiss, _n_base=self._n_base, build_report=self.build_report)
        view._query_cache, view._query_lock = self._query_cache, self._query_lock  # same embedder
        return view

    # -- search --------------------------------------------------------------------------------
    def query_vector(self, query: str | np.ndarray) -> np.ndarray:
        """The normalised query embedding (``kind="query"``); recent queries are memoised, and with an
        artifact cache every query vector is persisted (kind :data:`QUERY_KIND`), like document vectors."""
        if not isinstance(query, str):
            q = np.asarray(query, dtype=np.float32).reshape(-1)
            if q.shape[0] != self.dim:
                raise ValueError(f"query vector has dimension {q.shape[0]}, index has {self.dim}")
            return q
        with self._query_lock:
            hit = self._query_cache.get(query)
            if hit is not None:
                self._query_cache.move_to_end(query)
                return hit
        if self.embedder is None:
            raise ValueError("this index has no embedder; pass a query vector")
        embedder = self.embedder
        q = query_embedding(query, embedder.model_id, lambda: embedder, self.cache)
        if self.cache is None:
            q.setflags(write=False)
        with self._query_lock:
            self._query_cache[query] = q
            if len(self._query_cache) > QUERY_MEMO:
                self._query_cache.popitem(last=False)
        return q

    def search(self, query: str | np.ndarray, k: int, exclude: set[str] | frozenset[str] = frozenset()) -> list[tuple[str, float]]:
        """Top-``k`` ``(id, score)`` by cosine similarity, descending. Ids in ``exclude`` are removed
        before the top-k is taken. Ties: clean before poison, then index order (docs/algorithms.md §6.1)."""
        if k <= 0:
            return []
        q = self.query_vector(query)
        positions: list[int] = []
        if self._n_base:
            n_ex = sum(1 for i in exclude if self._pos.get(i, self._n_base) < self._n_base)
            kb = min(self._n_base, k + n_ex + TIE_SLACK)
            with single_thread_faiss():
                _, idx = self._faiss.search(q.reshape(1, -1), kb)
            positions = [int(p) for p in idx[0] if p >= 0]
        positions.extend(range(self._n_base, len(self.documents)))
        positions = [p for p in positions if self.ids[p] not in exclude]
        if not positions:
            return []
        # rescore every candidate with one expression so base and added documents compare exactly
        scores = np.einsum("ij,j->i", self._all[positions], q)
        cands = [(float(s), p) for s, p in zip(scores, positions) if np.isfinite(s)]
        cands.sort(key=lambda c: (-c[0], self.documents[c[1]].poison, c[1]))
        return [(self.ids[p], s) for s, p in cands[:k]]

    def rank(self, query: str, k: int, query_id: str = "", condition: str = "clean",
             correct_answers: Sequence[str] = (), target_answer: str = "",
             exclude: set[str] | frozenset[str] = frozenset()) -> Ranking:
        """A :class:`~sieve.types.Ranking` of the top-``k`` (ranks 1..k, poison flags from the documents)."""
        hits = self.search(query, k, exclude)
        docs = []
        for r, (doc_id, score) in enumerate(hits, start=1):
            d = self.documents[self._pos[doc_id]]
            docs.append(RankedDocument(d.id, d.text, r, score, d.poison, d.title))
        return Ranking(query, docs, query_id, condition, tuple(correct_answers), target_answer)
