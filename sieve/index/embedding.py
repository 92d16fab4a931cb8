"""Retriever vectors of documents: embedding through the cache, float16 round trip, FAISS flat index.

Every vector goes through the same float16 round trip (stored as float16, searched as
L2-normalised float32, docs/algorithms.md §6.1), so a fresh build, a reopened index and cached
extras agree exactly.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from sieve.index.cache import ArtifactCache
from sieve.types import Document

if TYPE_CHECKING:
    from sieve.models.protocols import Embedder

EMBED_BATCH = 256
"""Documents per ``Embedder.encode`` call while indexing. The encoder sorts them by length inside the
call, so a larger call pads less (more than twice the docs/s of calls of 32: docs/results/speed.md
§3); the progress bar moves once per call. Sequences per forward pass:
:func:`sieve.models.batching.embed_batch`."""


def finalise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float16 storage copy, float32 L2-normalised working copy). Every vector goes through the
    same float16 round trip, so a fresh build, a reopened index and cached extras agree exactly."""
    v16 = np.asarray(vectors, dtype=np.float32).astype(np.float16)
    return v16, normalise(v16)


def normalise(v16: np.ndarray) -> np.ndarray:
    v = np.array(v16, dtype=np.float32, copy=True, order="C")
    norms = np.sqrt(np.einsum("ij,ij->i", v, v))
    norms[norms == 0] = 1.0
    v /= norms[:, None]
    return v


def flat_ip(vectors: np.ndarray) -> Any:
    import faiss

    idx = faiss.IndexFlatIP(int(vectors.shape[1]))
    if len(vectors):
        idx.add(vectors)
    return idx


@contextlib.contextmanager
def single_thread_faiss() -> Iterator[None]:
    """One query is faster on one OpenMP thread: on a busy machine the other threads spin instead of
    working (docs/results/speed.md §3); batch callers keep FAISS's own setting."""
    import faiss

    prev = faiss.omp_get_max_threads()
    if prev == 1:
        yield
        return
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(prev)


def embed_documents(docs: Sequence[Document], embedder: "Embedder", cache: ArtifactCache | None,
                     progress: bool, desc: str) -> np.ndarray:
    """Retriever passage embeddings of ``Document.model_text()``, in length-sorted batches
    (:data:`EMBED_BATCH` documents per ``encode`` call), with a progress bar.
    Through ``cache`` (kind ``"embedding"``, float16) when given: only misses are encoded."""
    from tqdm.auto import tqdm

    from sieve.models.batching import embed_batch

    def encode(texts: list[str]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        per_pass = embed_batch(embedder)
        with tqdm(total=len(texts), desc=desc, unit="doc", disable=not progress or not texts,
                  leave=False) as bar:
            for i in range(0, len(texts), EMBED_BATCH):
                chunk = texts[i : i + EMBED_BATCH]
                out.extend(np.asarray(embedder.encode(chunk, kind="passage", batch_size=per_pass), np.float32))
                bar.update(len(chunk))
        return out

    texts = [d.model_text() for d in docs]
    if not texts:
        return np.zeros((0, embedder.dim), np.float32)
    if cache is None:
        return np.vstack(encode(texts))
    return np.vstack(cache.get_or_compute("embedding", embedder.model_id, texts, encode, store_dtype=np.float16))
