"""The filter reads the same ledger (issue 25): a LangChain retrieval over a real Chroma collection,
guarded by Sieve's compressor over the same store, excludes the poison an analyst confirmed after
``sieve audit chroma:...`` flagged it."""
from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from sieve.cli import app
from sieve.corpus import load_dataset
from sieve.ledger import Ledger
from tests.stores.conftest import DEMO, FAMILY, fill

pytest.importorskip("langchain_core")
ccr = pytest.importorskip("langchain_classic.retrievers")
from langchain_core.callbacks import CallbackManagerForRetrieverRun  # noqa: E402
from langchain_core.documents import Document as LCDocument  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402

from sieve.adapters import LocalSieve  # noqa: E402
from sieve.adapters.langchain import SieveCompressor  # noqa: E402
from sieve.models.tiny import HashingEmbedder  # noqa: E402


class ChromaRetriever(BaseRetriever):
    """The application's retriever: a query against the Chroma collection, nothing of Sieve."""

    collection: Any
    k: int = 10

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[LCDocument]:
        q = HashingEmbedder(dim=64).encode([query], kind="query")[0]
        got = self.collection.query(query_embeddings=[q.tolist()], n_results=self.k,
                                    include=["documents", "metadatas"])
        return [LCDocument(page_content=t, metadata={**(m or {}), "id": i})
                for i, t, m in zip(got["ids"][0], got["documents"][0], got["metadatas"][0])]


def test_langchain_over_chroma_excludes_a_confirmed_poison(tmp_path, cache_env, demo_attacked):
    import chromadb

    from sieve.testing_models import tiny_resources

    docs, vecs = demo_attacked
    src = fill("chroma", tmp_path, docs, vecs)
    led = tmp_path / "ledger.sqlite"
    res = CliRunner().invoke(app, ["audit", src, "--store-model", "tiny-hashing", "--retriever", "tiny-hashing",
                                   "--out", str(tmp_path / "o"), "--ledger", str(led)])
    assert res.exit_code == 0, res.output
    poisons = [d for d in docs if d.poison]
    with Ledger(led) as ledger:
        alerts = {a.doc_id: a for a in ledger.list()}
        flagged_poison = next(d for d in poisons if d.id in alerts)
        ledger.confirm(alerts[flagged_poison.id].alert_id, who="analyst", why="mixed scripts, attacker answer")
        for doc_id, a in alerts.items():                   # triage: everything else was a false alarm
            if doc_id != flagged_poison.id:
                ledger.dismiss(a.alert_id, who="analyst", why="fine")
    qid = flagged_poison.metadata["query_id"]
    text_query = next(r.query for r in load_dataset(DEMO).attack_records(FAMILY) if r.query_id == qid)
    collection = chromadb.PersistentClient(path=str(tmp_path / "chroma")).get_collection("demo")
    base = ChromaRetriever(collection=collection, k=10)
    retrieved = [d.metadata["id"] for d in base.invoke(text_query)]
    assert flagged_poison.id in retrieved                   # the application's retriever returns the poison

    backend = LocalSieve.from_store(src, tiny_resources(corpus_texts=[d.text for d in docs]), ledger_path=led,
                                    store_model="tiny-hashing")
    guarded = ccr.ContextualCompressionRetriever(
        base_compressor=SieveCompressor(backend=backend, defense="none", k_ctx=None), base_retriever=base)
    kept = [d.metadata["id"] for d in guarded.invoke(text_query)]
    assert flagged_poison.id not in kept
    assert kept == [i for i in retrieved if i != flagged_poison.id]   # only the confirmed poison went
    # the README's corpus-time defense over the store (no queries to calibrate on): RSG fitted on the
    # store's snapshot removes the flagged documents too
    rsg = ccr.ContextualCompressionRetriever(
        base_compressor=SieveCompressor(backend=backend, defense="rsg", k_ctx=5), base_retriever=base)
    kept = [d.metadata["id"] for d in rsg.invoke(text_query)]
    assert flagged_poison.id not in kept and 0 < len(kept) <= 5
    # `sieve search SOURCE` ranks the store with its stored vectors and honours the same ledger
    res = CliRunner().invoke(app, ["search", src, text_query, "-k", "10", "--retriever", "tiny-hashing",
                                   "--ledger", str(led)])
    assert res.exit_code == 0, res.output
    assert flagged_poison.id not in res.output and "1 quarantined document(s) excluded" in res.output
    res = CliRunner().invoke(app, ["search", src, text_query, "-k", "10", "--retriever", "tiny-hashing",
                                   "--ledger", str(led), "--quarantine", "none"])
    assert res.exit_code == 0 and flagged_poison.id in res.output
