"""A small LlamaIndex RAG query engine over the Sieve demo corpus with a PoisonedRAG (pr_b) attack
injected, and Sieve as a node postprocessor.

    python examples/llamaindex_rag.py            # packaged local models, local generator
    python examples/llamaindex_rag.py --tiny     # tiny models and LlamaIndex's MockLLM, seconds
    python examples/llamaindex_rag.py --base-url http://127.0.0.1:8765   # against `sieve serve demo_data`

No network: the retriever, Sieve's models and the generator are local (docs/models.md).
"""
from __future__ import annotations

from typing import Any

from _demo import SYSTEM, ReusingEmbedder, backend, knowledge_base, parse_args, print_decisions, resources
from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.mock import MockLLM
from llama_index.core.schema import QueryBundle, TextNode

from sieve.adapters.llamaindex import SieveEmbedding, SievePostprocessor


class LocalGenerator(CustomLLM):
    """LlamaIndex LLM over Sieve's local generator (sieve/models/llm.py)."""

    client: Any = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=4096, num_output=40, model_name="sieve-local")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
        return CompletionResponse(text=self.client.generate(prompt, system=SYSTEM, max_tokens=40).strip())

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponseGen:
        yield self.complete(prompt)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    ds, docs, question = knowledge_base()
    res = resources(ds, args.tiny)
    poison_ids = {d.id for d in docs if d.poison}
    generate = not (args.tiny or args.no_generate) and res.llm is not None
    Settings.llm = LocalGenerator(client=res.llm) if generate else MockLLM(max_tokens=8)

    nodes = [TextNode(text=d.text, id_=d.id, metadata={"id": d.id, "title": d.title},
                      excluded_embed_metadata_keys=["id", "title"], excluded_llm_metadata_keys=["id"])
             for d in docs]
    sieve_backend = backend(ds, res, args.base_url)   # server and token checked before any embedding
    index = VectorStoreIndex(nodes, embed_model=SieveEmbedding(ReusingEmbedder(ds, res)))   # shipped vectors reused
    sieve = SievePostprocessor(backend=sieve_backend, defense=args.defense, k_ctx=5)
    engine = index.as_query_engine(similarity_top_k=20, node_postprocessors=[sieve])

    print(f"knowledge base: {len(docs)} documents ({len(poison_ids)} injected pr_b poisons)")
    print(f"question: {question}\n")
    retrieved = index.as_retriever(similarity_top_k=20).retrieve(question)
    marked = SievePostprocessor(backend=sieve._backend, defense=args.defense, k_ctx=5, keep_removed=True)
    kept = marked.postprocess_nodes(retrieved, QueryBundle(question))
    out = {"defense": kept[0].node.metadata["sieve"]["defense"] if kept else args.defense,
           "decisions": sorted((n.node.metadata["sieve"] for n in kept), key=lambda d: d["rank"]),
           "removed": [n.node.metadata["id"] for n in kept if n.node.metadata["sieve"]["removed"]], "warnings": []}
    print_decisions(out, poison_ids)

    response = engine.query(question)
    used = [n.node.metadata["id"] for n in response.source_nodes]
    unguarded = [n.node.metadata["id"] for n in retrieved[:5]]
    print(f"\ncontext without Sieve: {unguarded}  ({sum(i in poison_ids for i in unguarded)} poisons)")
    print(f"context with Sieve:    {used}  ({sum(i in poison_ids for i in used)} poisons)")
    if generate:
        plain = index.as_query_engine(similarity_top_k=5)
        print(f"answer without Sieve: {str(plain.query(question)).strip()}")
        print(f"answer with Sieve:    {str(response).strip()}")


if __name__ == "__main__":
    main()
