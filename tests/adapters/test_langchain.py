"""The LangChain compressor inside a real ContextualCompressionRetriever over langchain_core's
InMemoryVectorStore (embeddings: Sieve's retriever through SieveEmbeddings)."""
from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")
ccr = pytest.importorskip("langchain_classic.retrievers")
from langchain_core.documents import Document as LCDocument  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

from sieve.adapters.langchain import SieveCompressor, SieveEmbeddings  # noqa: E402
from sieve.ledger import Flag, Ledger  # noqa: E402


def _store(docs, embedder):
    store = InMemoryVectorStore(SieveEmbeddings(embedder))
    store.add_documents([LCDocument(page_content=d.text, metadata={"id": d.id, "title": d.title}, id=d.id)
                         for d in docs])
    return store


@pytest.fixture(scope="module")
def store(knowledge_base, tiny_res):
    return _store(knowledge_base, tiny_res.retriever)


def test_compressor_in_contextual_compression_retriever_filters_pr_b(store, target, local_backend):
    query, poisons = target
    base = store.as_retriever(search_kwargs={"k": 20})
    retrieved = base.invoke(query)
    poison_ids = {d.id for d in poisons}
    assert poison_ids <= {d.metadata["id"] for d in retrieved[:5]}  # the attack works without Sieve
    compressor = SieveCompressor(backend=local_backend, defense="rsq", k_ctx=5)
    guarded = ccr.ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    docs = guarded.invoke(query)
    ids = [d.metadata["id"] for d in docs]
    assert len(docs) == 5 and not poison_ids & set(ids)
    # the context is the retriever's order minus removed documents, each with its decision
    survivors = [d.metadata["id"] for d in retrieved if d.metadata["id"] not in poison_ids]
    assert ids == survivors[:5]
    for d in docs:
        s = d.metadata["sieve"]
        assert s["removed"] is False and s["in_context"] and s["defense"] == "rsq"
        assert s["status"] in ("scored", "not_examined")
    # decisions equal the library's on the same ranking
    raw = compressor.decide(retrieved, query)
    removed = set(raw["removed"])
    assert poison_ids <= removed
    scored = [x for x in raw["decisions"] if x["status"] == "scored"]
    assert all((x["score"] >= x["threshold"]) == x["removed"] for x in scored)
    # keep_removed returns the removed ones too, marked
    marked = SieveCompressor(backend=local_backend, defense="rsq", k_ctx=5, keep_removed=True)
    out = marked.compress_documents(retrieved, query)
    assert {d.metadata["id"] for d in out if d.metadata["sieve"]["removed"]} == removed


def test_compressor_honours_the_quarantine_ledger(store, target, local_backend):
    query, _ = target
    base = store.as_retriever(search_kwargs={"k": 20})
    retrieved = base.invoke(query)
    compressor = SieveCompressor(backend=local_backend, defense="none", k_ctx=None)  # keeps every document
    before = [d.metadata["id"] for d in compressor.compress_documents(retrieved, query)]
    victim = next(d for d in retrieved if d.metadata["id"] in before)
    from sieve.types import content_hash

    with Ledger(local_backend.filterer.ledger_path) as led:  # what the dashboard / API does
        led.add_flags([Flag(victim.metadata["id"], content_hash(victim.page_content), 1.0, 0.5, {}, "analyst")],
                      detector="manual")
    after = [d.metadata["id"] for d in compressor.compress_documents(retrieved, query)]
    assert len(before) == 20
    assert after == [i for i in before if i != victim.metadata["id"]]
    row = next(x for x in compressor.decide(retrieved, query)["decisions"] if x["id"] == victim.metadata["id"])
    assert row["status"] == "quarantined" and row["removed"] and row["layer"] == "ledger"


def test_compressor_needs_a_backend():
    with pytest.raises(ValueError, match="base_url"):
        SieveCompressor(defense="rsq")
    assert SieveCompressor(backend=object()).compress_documents([], "q") == []


@pytest.mark.realmodel
def test_compressor_with_real_models_removes_pr_b(demo_dataset, target, real_resources, tmp_path):
    """Real packaged models: the demo's shipped retriever vectors, tris_l2 calibrated on clean queries."""
    from sieve.adapters import LocalSieve
    from sieve.experiment import Experiment

    query, poisons = target
    topic = poisons[0].metadata.get("query_id", "").removeprefix("q-").rsplit("-", 1)[0] or "amazon-river"
    kb = [d for d in demo_dataset.documents if d.id.startswith(topic)][:10] + poisons + \
         [d for d in demo_dataset.documents if not d.id.startswith(topic)][:15]
    store = _store(kb, real_resources.retriever)
    exp = Experiment(demo_dataset, real_resources, ledger_path=tmp_path / "l.sqlite", persist=True)
    backend = LocalSieve(exp, ledger_path=tmp_path / "l.sqlite", clean_limit=20)
    guarded = ccr.ContextualCompressionRetriever(
        base_compressor=SieveCompressor(backend=backend, defense="tris_l2", k_ctx=5),
        base_retriever=store.as_retriever(search_kwargs={"k": 20}))
    docs = guarded.invoke(query)
    ids = {d.metadata["id"] for d in docs}
    assert len(docs) == 5 and not ids & {p.id for p in poisons}
    assert all(d.metadata["sieve"]["layer"] == "L2" for d in docs)
