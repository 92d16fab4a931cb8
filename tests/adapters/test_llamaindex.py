"""The LlamaIndex postprocessor in a real query engine (VectorStoreIndex, SieveEmbedding over Sieve's
tiny retriever, llama_index.core's MockLLM as the stub generator)."""
from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")
from llama_index.core import VectorStoreIndex
from llama_index.core.llms.mock import MockLLM
from llama_index.core.schema import QueryBundle, TextNode

from sieve.adapters.llamaindex import SieveEmbedding, SievePostprocessor
from sieve.ledger import Flag, Ledger
from sieve.types import content_hash


@pytest.fixture(scope="module")
def index(knowledge_base, tiny_res):
    nodes = [TextNode(text=d.text, id_=d.id, metadata={"title": d.title}, excluded_embed_metadata_keys=["title"])
             for d in knowledge_base]
    return VectorStoreIndex(nodes, embed_model=SieveEmbedding(tiny_res.retriever))


def test_postprocessor_in_a_query_engine_filters_pr_b(index, target, local_backend):
    query, poisons = target
    poison_ids = {p.id for p in poisons}
    retrieved = index.as_retriever(similarity_top_k=20).retrieve(query)
    assert poison_ids <= {n.node.node_id for n in retrieved[:5]}  # the attack works without Sieve
    sieve = SievePostprocessor(backend=local_backend, defense="rsq", k_ctx=5)
    engine = index.as_query_engine(llm=MockLLM(max_tokens=8), similarity_top_k=20, node_postprocessors=[sieve])
    response = engine.query(query)
    used = [n.node.node_id for n in response.source_nodes]
    survivors = [n.node.node_id for n in retrieved if n.node.node_id not in poison_ids]
    assert used == survivors[:5]
    assert str(response).strip()  # the stub LLM answered from the filtered context
    for n in response.source_nodes:
        s = n.node.metadata["sieve"]
        assert s["removed"] is False and s["in_context"] and s["defense"] == "rsq"
        assert "sieve" in n.node.excluded_llm_metadata_keys  # decisions stay out of the prompt
    # keep_removed: the removed nodes come back marked, the poisons among them
    marked = SievePostprocessor(backend=local_backend, defense="rsq", k_ctx=5, keep_removed=True)
    out = marked.postprocess_nodes(index.as_retriever(similarity_top_k=20).retrieve(query), QueryBundle(query))
    removed = {n.node.node_id for n in out if n.node.metadata["sieve"]["removed"]}
    assert poison_ids <= removed
    assert all(n.node.metadata["sieve"]["score"] >= n.node.metadata["sieve"]["threshold"]
               for n in out if n.node.node_id in removed)


def test_postprocessor_honours_the_quarantine_ledger(index, target, local_backend):
    query, _ = target
    nodes = index.as_retriever(similarity_top_k=10).retrieve(query)
    victim = nodes[7]
    with Ledger(local_backend.filterer.ledger_path) as led:
        led.add_flags([Flag(victim.node.node_id, content_hash(victim.node.get_content()), 1.0, 0.5, {}, "x")],
                      detector="rsg", corpus_hash="c", index_version="v")
    sieve = SievePostprocessor(backend=local_backend, defense="none", k_ctx=None)
    out = [n.node.node_id for n in sieve.postprocess_nodes(nodes, query_str=query)]
    assert out == [n.node.node_id for n in nodes if n is not victim]


def test_postprocessor_needs_the_query(local_backend, index):
    nodes = index.as_retriever(similarity_top_k=3).retrieve("amazon")
    with pytest.raises(ValueError, match="query"):
        SievePostprocessor(backend=local_backend).postprocess_nodes(nodes)
