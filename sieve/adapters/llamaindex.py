"""LlamaIndex adapter (``pip install 'sieve-rag[llamaindex]'``): a node postprocessor that filters
retrieved nodes with a Sieve defense, in-process or as a client of ``sieve serve``.

    engine = index.as_query_engine(node_postprocessors=[SievePostprocessor(backend=..., defense="rsq")])

Each kept node's metadata carries its decision under ``"sieve"``; quarantined documents (ledger)
are excluded. See docs/service.md.
"""
from __future__ import annotations

from typing import Any, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from sieve.adapters.client import DEFAULT_DEFENSE, backend_for


class SievePostprocessor(BaseNodePostprocessor):
    """Filter retrieved nodes with a Sieve defense (``backend`` in-process, or ``base_url``).

    Document ids are ``node.metadata[id_key]`` when present, else the node id. ``k_ctx``: nodes
    to return (``None``: every survivor); ``keep_removed``: return removed nodes too, marked."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = None
    base_url: Optional[str] = None
    token: Optional[str] = None
    defense: str = DEFAULT_DEFENSE   # tris_l2: no LLM
    params: dict = Field(default_factory=dict)
    k_ctx: Optional[int] = 5
    keep_removed: bool = False
    id_key: str = "id"
    metadata_key: str = "sieve"
    _backend: Any = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        self._backend = backend_for(self.backend, self.base_url, self.token)

    @classmethod
    def class_name(cls) -> str:
        return "SievePostprocessor"

    def _id(self, n: NodeWithScore) -> str:
        return str(n.node.metadata.get(self.id_key) or n.node.node_id)

    def _postprocess_nodes(self, nodes: List[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        if not nodes:
            return []
        if query_bundle is None:
            raise ValueError("SievePostprocessor needs the query (query_bundle or query_str)")
        payload = [{"id": self._id(n), "text": n.node.get_content(), "score": n.score,
                    "title": str(n.node.metadata.get("title") or "")} for n in nodes]
        out = self._backend.filter(query_bundle.query_str, payload, self.defense, self.params, self.k_ctx)
        by_id = {self._id(n): n for n in nodes}
        decisions = {d["id"]: d for d in out["decisions"]}
        keep = [c["id"] for c in out["context"]]
        if self.keep_removed:
            keep = keep + [d["id"] for d in out["decisions"] if d["id"] not in set(keep)]
        result = []
        for doc_id in keep:
            n = by_id[doc_id]
            n.node.metadata[self.metadata_key] = {**decisions[doc_id], "defense": out["defense"]}
            # the decision is for programs, not for the LLM prompt or the embedding
            for attr in ("excluded_llm_metadata_keys", "excluded_embed_metadata_keys"):
                keys = getattr(n.node, attr, None)
                if keys is not None and self.metadata_key not in keys:
                    keys.append(self.metadata_key)
            result.append(n)
        return result


class SieveEmbedding(BaseEmbedding):
    """LlamaIndex embedding model over a Sieve embedder (``Resources.retriever``; tiny or packaged),
    so a LlamaIndex vector index uses the same retriever as Sieve."""

    _embedder: Any = PrivateAttr(default=None)

    def __init__(self, embedder: Any, **kw: Any) -> None:
        super().__init__(model_name=str(getattr(embedder, "model_id", "sieve")), **kw)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "SieveEmbedding"

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._embedder.encode([query], kind="query")[0].tolist()

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._embedder.encode([text], kind="passage")[0].tolist()

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        return self._embedder.encode(list(texts), kind="passage").tolist()

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_query_embedding(query)


__all__ = ["SievePostprocessor", "SieveEmbedding"]
