"""LangChain adapter (``pip install 'sieve-rag[langchain]'``): a document compressor that filters a
retriever's documents with a Sieve defense — usable inside ``ContextualCompressionRetriever``.

    from langchain_classic.retrievers import ContextualCompressionRetriever  # (langchain-classic)
    compressor = SieveCompressor(backend=LocalSieve.from_dataset("demo_data"), defense="rsq")
    compressor = SieveCompressor(base_url="http://127.0.0.1:8765", defense="rsq")   # sieve serve

Each returned ``Document`` carries its decision in ``metadata["sieve"]`` (score, threshold,
removed, status, reason, layer, compact evidence). Documents quarantined in the ledger are
excluded. See docs/service.md.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.documents.compressor import BaseDocumentCompressor
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict, Field, PrivateAttr

from sieve.adapters.client import DEFAULT_DEFENSE, backend_for
from sieve.types import content_hash


def _doc_id(doc: Document, id_key: str) -> str:
    return str(doc.metadata.get(id_key) or doc.id or content_hash(doc.page_content))


class SieveCompressor(BaseDocumentCompressor):
    """Filter retrieved documents with a Sieve defense (in-process ``backend`` or ``base_url``).

    ``defense``: registered name or ``a+b`` spec; ``params``: its parameters; ``k_ctx``: how many
    documents to return (``None``: every survivor); ``keep_removed``: also return removed
    documents (their ``metadata["sieve"]["removed"]`` is True) instead of dropping them;
    ``id_key``: metadata key holding the document id (else ``Document.id``, else the text hash).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = None
    base_url: Optional[str] = None
    token: Optional[str] = None
    defense: str = DEFAULT_DEFENSE   # tris_l2: no LLM
    params: dict[str, Any] = Field(default_factory=dict)
    k_ctx: Optional[int] = 5
    keep_removed: bool = False
    id_key: str = "id"
    metadata_key: str = "sieve"
    _backend: Any = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        self._backend = backend_for(self.backend, self.base_url, self.token)

    def decide(self, documents: Sequence[Document], query: str) -> dict[str, Any]:
        """The raw ``/v1/filter`` answer for ``documents`` (decisions and context)."""
        payload = []
        for d in documents:
            score = d.metadata.get("score")
            payload.append({"id": _doc_id(d, self.id_key), "text": d.page_content,
                            "title": str(d.metadata.get("title") or ""),
                            "score": float(score) if isinstance(score, (int, float)) else None})
        return self._backend.filter(query, payload, self.defense, self.params, self.k_ctx)

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        if not documents:
            return []
        out = self.decide(documents, query)
        by_id = {_doc_id(d, self.id_key): d for d in documents}
        decisions = {d["id"]: d for d in out["decisions"]}
        keep = [c["id"] for c in out["context"]]
        if self.keep_removed:
            keep = keep + [d["id"] for d in out["decisions"] if d["id"] not in set(keep)]
        result = []
        for doc_id in keep:
            src = by_id[doc_id]
            meta = dict(src.metadata)
            meta[self.metadata_key] = {**decisions[doc_id], "defense": out["defense"],
                                       "fallback_used": out["fallback_used"]}
            result.append(Document(page_content=src.page_content, metadata=meta, id=src.id))
        return result


class SieveEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over a Sieve embedder (``Resources.retriever``; tiny or packaged),
    so a LangChain vector store can use the same retriever as Sieve.

    ``known``: vectors already computed, by text (e.g. :meth:`from_index`: the dataset's index,
    which reuses the shipped demo vectors); only the other texts are encoded, in batches with a
    progress bar on stderr (``progress``)."""

    def __init__(self, embedder: Any, known: dict[str, Any] | None = None, progress: bool = True,
                 batch_size: int = 32) -> None:
        self.embedder = embedder
        self.known = dict(known or {})
        self.progress = progress
        self.batch_size = batch_size

    @classmethod
    def from_index(cls, index: Any, **kw: Any) -> "SieveEmbeddings":
        """Over a :class:`~sieve.index.VectorIndex` (``Experiment.base_index()``): its documents'
        vectors are reused, by text; its embedder encodes the rest."""
        known = {d.text: index.vector_of(d.id) for d in index.documents}
        return cls(index.embedder, known, **kw)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self.known))
        if missing:
            from tqdm.auto import tqdm

            with tqdm(total=len(missing), desc="embedding documents", unit="doc", disable=not self.progress) as bar:
                for i in range(0, len(missing), self.batch_size):
                    chunk = missing[i:i + self.batch_size]
                    for t, v in zip(chunk, self.embedder.encode(chunk, kind="passage")):
                        self.known[t] = v
                    bar.update(len(chunk))
        return [[float(x) for x in self.known[t]] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.encode([text], kind="query")[0].tolist()


__all__ = ["SieveCompressor", "SieveEmbeddings"]
