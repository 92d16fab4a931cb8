"""One real ``sieve serve`` process (uvicorn) on a free port, tiny models, bearer token: the HTTP
client, the LangChain compressor and the LlamaIndex postprocessor in remote mode."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok-123"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import httpx

    tmp = tmp_path_factory.mktemp("serve")
    port = _free_port()
    env = {**os.environ, "SIEVE_CACHE_DIR": str(tmp / "cache"), "SIEVE_API_TOKEN": TOKEN}
    cmd = [sys.executable, "-c", "from sieve.cli import app; app()", "serve", str(ROOT / "demo_data"),
           "--retriever", "tiny-hashing", "--port", str(port), "--ledger", str(tmp / "ledger.sqlite"),
           "--clean-limit", "10", "--preload", "rsq", "--max-documents", "40"]
    log = open(tmp / "server.log", "w+")  # a file, not a pipe nobody reads: output must never block the server
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"sieve serve exited {proc.returncode}: {log.read()[-2000:]}")
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("sieve serve did not come up in 120 s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def attacked(server):
    from sieve.corpus import load_dataset

    ds = load_dataset(ROOT / "demo_data")
    rec = next(r for r in ds.attack_records("pr_b"))
    return ds, rec


def test_real_server_filters_and_honours_quarantine(server, attacked):
    import httpx

    from sieve.adapters import SieveClient, SieveError

    ds, rec = attacked
    assert httpx.post(server + "/v1/filter", json={}).status_code == 401  # token required
    client = SieveClient(server, token=TOKEN)
    h = client.health()
    assert h["documents"] == len(ds.documents) and h["quarantine"] == "open_and_confirmed"
    clean = [d for d in ds.documents if "amazon" in d.id][:15]
    docs = [{"id": d.id, "text": d.text} for d in list(rec.documents) + clean]
    out = client.filter(rec.query, docs, defense="none", k_ctx=None)
    assert [c["id"] for c in out["context"]] == [d["id"] for d in docs]
    alert = client.quarantine(rec.documents[0].id, rec.documents[0].text, who="ana", reason="poison")
    out = client.filter(rec.query, docs, defense="none", k_ctx=None)
    assert out["quarantined"] == [rec.documents[0].id]
    assert [c["id"] for c in out["context"]] == [d["id"] for d in docs[1:]]
    client.transition(alert["alert_id"], "dismiss", who="ana", why="test")
    assert client.filter(rec.query, docs, defense="none")["quarantined"] == []
    with pytest.raises(SieveError, match="body.defense") as e:
        client.filter(rec.query, docs, defense="nope")
    assert e.value.status == 422
    with pytest.raises(SieveError, match="40") as e:
        client.filter(rec.query, docs * 3, defense="none")  # 60 documents > --max-documents 40
    assert e.value.status == 422
    metrics = httpx.get(server + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert 'sieve_requests_total{method="POST",route="/v1/filter",status="200"} 3.0' in metrics


def test_adapters_in_remote_mode(server, attacked):
    from langchain_core.documents import Document as LCDocument
    from llama_index.core.schema import NodeWithScore, TextNode

    from sieve.adapters.langchain import SieveCompressor
    from sieve.adapters.llamaindex import SievePostprocessor

    ds, rec = attacked
    clean = [d for d in ds.documents if "amazon" in d.id][:10] + [d for d in ds.documents if "andes" in d.id][:5]
    docs = list(rec.documents) + clean
    lc = SieveCompressor(base_url=server, token=TOKEN, defense="none", k_ctx=3)
    out = lc.compress_documents([LCDocument(page_content=d.text, metadata={"id": d.id}) for d in docs], rec.query)
    assert [d.metadata["id"] for d in out] == [d.id for d in docs[:3]]
    assert out[0].metadata["sieve"]["status"] == "skipped" or out[0].metadata["sieve"]["removed"] is False
    li = SievePostprocessor(base_url=server, token=TOKEN, defense="rsq", k_ctx=5)
    nodes = [NodeWithScore(node=TextNode(text=d.text, id_=d.id), score=1.0 - i / 100) for i, d in enumerate(docs)]
    kept = li.postprocess_nodes(nodes, query_str=rec.query)
    assert len(kept) == 5 and all(n.node.metadata["sieve"]["removed"] is False for n in kept)
    # the server decides exactly as the in-process library does with the same models
    from sieve.adapters import LocalSieve
    from sieve.experiment import Experiment
    from sieve.testing_models import tiny_resources

    local = LocalSieve(Experiment(ds, tiny_resources(corpus_texts=[d.text for d in ds.documents])), quarantine="none")
    ref = local.filter(rec.query, [{"id": d.id, "text": d.text, "score": 1.0 - i / 100} for i, d in enumerate(docs)],
                       "rsq", k_ctx=5)
    assert [n.node.node_id for n in kept] == [c["id"] for c in ref["context"]]
    assert [n.node.metadata["sieve"]["score"] for n in kept] == [
        next(x["score"] for x in ref["decisions"] if x["id"] == n.node.node_id) for n in kept]
    assert any(x["status"] == "scored" for x in ref["decisions"])
