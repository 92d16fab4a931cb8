"""A small LangChain RAG chain over the Sieve demo corpus with a PoisonedRAG (pr_b) attack injected,
and Sieve as a document compressor in a ContextualCompressionRetriever.

    python examples/langchain_rag.py            # packaged local models, local generator
    python examples/langchain_rag.py --tiny     # tiny models, seconds
    python examples/langchain_rag.py --base-url http://127.0.0.1:8765   # against `sieve serve demo_data`

No network: the retriever, Sieve's models and the generator are local (docs/models.md).
"""
from __future__ import annotations

from _demo import SYSTEM, ReusingEmbedder, backend, knowledge_base, parse_args, print_decisions, prompt_for, resources
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document as LCDocument
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore

from sieve.adapters.langchain import SieveCompressor, SieveEmbeddings


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    ds, docs, question = knowledge_base()
    res = resources(ds, args.tiny)
    poison_ids = {d.id for d in docs if d.poison}

    sieve_backend = backend(ds, res, args.base_url)   # server and token checked before any embedding
    store = InMemoryVectorStore(SieveEmbeddings(ReusingEmbedder(ds, res)))   # shipped vectors reused
    store.add_documents([LCDocument(page_content=d.text, metadata={"id": d.id, "title": d.title}, id=d.id)
                         for d in docs])
    base = store.as_retriever(search_kwargs={"k": 20})  # RSQ reads the top 20 of a ranking
    compressor = SieveCompressor(backend=sieve_backend, defense=args.defense, k_ctx=5)
    guarded = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)

    print(f"knowledge base: {len(docs)} documents ({len(poison_ids)} injected pr_b poisons)")
    print(f"question: {question}\n")
    retrieved = base.invoke(question)
    print_decisions(compressor.decide(retrieved, question), poison_ids)

    unguarded_ctx = [d.metadata["id"] for d in retrieved[:5]]
    guarded_docs = guarded.invoke(question)
    print(f"\ncontext without Sieve: {unguarded_ctx}  ({sum(i in poison_ids for i in unguarded_ctx)} poisons)")
    print(f"context with Sieve:    {[d.metadata['id'] for d in guarded_docs]}  "
          f"({sum(d.metadata['id'] in poison_ids for d in guarded_docs)} poisons)")
    print(f"decision in metadata:  {guarded_docs[0].metadata['sieve']['status']}, "
          f"score {guarded_docs[0].metadata['sieve']['score']}")

    if args.tiny or args.no_generate or res.llm is None:
        return
    llm = res.llm

    def generate(inputs: dict) -> str:
        return llm.generate(prompt_for(inputs["question"], [d.page_content for d in inputs["docs"]]),
                            system=SYSTEM, max_tokens=40).strip()

    for name, retriever in (("without Sieve", base | RunnableLambda(lambda ds_: ds_[:5])), ("with Sieve", guarded)):
        chain = RunnableLambda(lambda q, r=retriever: {"question": q, "docs": r.invoke(q)}) | RunnableLambda(generate)
        print(f"answer {name}: {chain.invoke(question)}")


if __name__ == "__main__":
    main()
