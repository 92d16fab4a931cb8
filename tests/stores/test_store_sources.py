"""Stores as sources (issue 25): the source syntax, each real store's round trip against the JSONL
audit of the same corpus, read-only access, the agreement gate, errors as one line + exit 2.

The round trips use the tiny in-process retriever (milliseconds); the one real-model test
(``realmodel``) loads the demo's shipped all-mpnet-base-v2 vectors into Chroma and lets the gate
re-embed 256 passages with the real model."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from sieve.cli import app
from sieve.ledger import Ledger
from sieve.stores import StoreError, parse_store_uri, read_store
from tests.stores.conftest import DEMO, FAMILY, STORES, fill, rotate, source, tree_digest

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def flagged_in(ledger_path) -> set[str]:
    with Ledger(ledger_path) as led:
        return {a.doc_id for a in led.list(detector="rsg")}


@pytest.fixture(scope="module")
def jsonl_flags(tmp_path_factory):
    """The JSONL audit of the same corpus: ``sieve audit demo_data --with-attack script``."""
    tmp = tmp_path_factory.mktemp("jsonl")
    mp = pytest.MonkeyPatch()
    mp.setenv("SIEVE_CACHE_DIR", str(tmp / "cache"))
    try:
        res = run("audit", DEMO, "--with-attack", FAMILY, "--retriever", "tiny-hashing", "--out", tmp / "out",
                  "--ledger", tmp / "ledger.sqlite")
    finally:
        mp.undo()
    assert res.exit_code == 0, res.output
    flags = flagged_in(tmp / "ledger.sqlite")
    rows = json.loads((tmp / "out" / "rsg_audit.json").read_text())
    return flags, rows


# -- the syntax --------------------------------------------------------------------------------
def test_store_uri_syntax(tmp_path):
    u = parse_store_uri(f"chroma://{tmp_path}/kb?collection=docs&model=all-mpnet-base-v2")
    assert (u.scheme, u.name, u.path, u.model, u.server) == ("chroma", "docs", tmp_path / "kb",
                                                              "all-mpnet-base-v2", None)
    assert u.canonical() == f"chroma://{tmp_path}/kb?collection=docs"
    assert parse_store_uri("qdrant://127.0.0.1:6333?collection=c").server == "127.0.0.1:6333"
    assert parse_store_uri("lancedb:rel/dir?table=t").path.is_absolute()
    for bad, why in [("chroma:///x", "no collection named"), ("lancedb:///x?collection=t", "names a table"),
                     ("qdrant:///x?collection=c&colour=red", "unknown option 'colour'"),
                     ("qdrant://host?collection=c", "HOST:PORT"), ("lancedb://h:1?table=t", "embedded"),
                     ("chroma:///x?collection=c&batch=0", "positive integer"), ("redis:///x", "not a store")]:
        with pytest.raises(StoreError, match=why):
            parse_store_uri(bad)


# -- round trip per store --------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", STORES)
def test_store_audit_equals_jsonl_audit_and_leaves_the_store_alone(scheme, tmp_path, cache_env, demo_attacked,
                                                                   jsonl_flags):
    docs, vecs = demo_attacked
    src = fill(scheme, tmp_path, docs, vecs)
    store_dir = tmp_path / scheme
    before = tree_digest(store_dir)
    got = read_store(src)
    content_before = ([d.id for d in got.documents], [d.text for d in got.documents], got.vectors.copy())
    led = tmp_path / "ledger.sqlite"
    res = run("audit", src, "--store-model", "tiny-hashing", "--retriever", "tiny-hashing", "--out", tmp_path / "o",
              "--ledger", led)
    assert res.exit_code == 0, res.output
    assert f"{len(docs)} documents read" in res.output
    assert "agreement  256 passages re-embedded: min cosine 1.0000" in res.output
    assert "stored vectors used" in res.output
    flags, report = jsonl_flags
    assert flagged_in(led) == flags                    # same flags as the JSONL audit of the same corpus
    poisons = {d.id for d in docs if d.poison}
    assert poisons & flags                             # and the audit finds the family's poisons
    ours = json.loads((tmp_path / "o" / "rsg_audit.json").read_text())
    assert ours["corpus_hash"] == report["corpus_hash"] and ours["flags"] == report["flags"]
    assert ours["vectors"]["use_stored"] is True and ours["store"] == scheme
    # nothing written to the store: files byte-identical (Chroma's own client rewrites its bookkeeping
    # and HNSW segment files on every open, so for Chroma the records are compared)
    again = read_store(src)
    assert [d.id for d in again.documents] == content_before[0]
    assert [d.text for d in again.documents] == content_before[1]
    assert np.array_equal(again.vectors, content_before[2])
    if scheme != "chroma":
        assert tree_digest(store_dir) == before
    with Ledger(led) as ledger:
        alerts = ledger.list()
        assert {a.evidence["batch"] for a in alerts} == {ours["snapshot_id"]}
        assert ledger.snapshot(ours["snapshot_id"])["n_docs"] == len(docs)


@pytest.mark.parametrize("scheme", STORES)
def test_gate_refuses_vectors_of_another_model_and_reembeds(scheme, tmp_path, cache_env, demo_attacked,
                                                            jsonl_flags):
    docs, vecs = demo_attacked
    src = fill(scheme, tmp_path, docs, rotate(vecs))     # claimed tiny-hashing, written by "another model"
    led = tmp_path / "ledger.sqlite"
    res = run("audit", src, "--store-model", "tiny-hashing", "--retriever", "tiny-hashing", "--out", tmp_path / "o",
              "--ledger", led)
    assert res.exit_code == 0, res.output
    assert "stored vectors refused: min cosine" in res.output and "re-embedding with tiny-hashing-64" in res.output
    assert flagged_in(led) == jsonl_flags[0]             # still auditable with Sieve's retriever
    report = json.loads((tmp_path / "o" / "rsg_audit.json").read_text())
    assert report["vectors"]["use_stored"] is False and report["vectors"]["min_cosine"] < 0.5


def test_gate_refuses_other_dimensions_and_unnamed_models(tmp_path, cache_env, demo_attacked):
    from sieve.models.tiny import HashingEmbedder
    from sieve.stores.vectors import decide_vectors

    docs, vecs = demo_attacked
    src = fill("lancedb", tmp_path, docs, HashingEmbedder(dim=32).encode([d.text for d in docs]))
    corpus = read_store(src)
    d = decide_vectors(corpus, HashingEmbedder(dim=64))
    assert not d.use_stored and "32 dimensions" in d.reason and "gives 64" in d.reason
    corpus.model = None
    d = decide_vectors(corpus, HashingEmbedder(dim=64))
    assert not d.use_stored and "does not name the model" in d.reason
    corpus.model = "multilingual-e5-small"
    d = decide_vectors(corpus, HashingEmbedder(dim=64))
    assert not d.use_stored and "not from Sieve's retriever" in d.reason


# -- errors: one line, exit 2 ------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", STORES)
def test_bad_sources_are_one_error_line(scheme, tmp_path, cache_env, demo_attacked):
    docs, vecs = demo_attacked
    fill(scheme, tmp_path, docs[:20], vecs[:20])
    key = "table" if scheme == "lancedb" else "collection"
    cases = [(source(scheme, tmp_path, "missing"), f"no {key} 'missing'"),
             (f"{scheme}://{tmp_path}/nowhere?{key}=demo", "not a directory"),
             (f"{scheme}://{tmp_path}/{scheme}", f"no {key} named"),
             (f"{scheme}://{tmp_path}/{scheme}?{key}=demo&bogus=1", "unknown option 'bogus'")]
    for src, why in cases:
        res = run("audit", src, "--retriever", "tiny-hashing", "--no-ledger")
        lines = [x for x in res.output.splitlines() if x.strip()]
        assert res.exit_code == 2, (src, res.output)
        assert lines[-1].startswith("error: ") and why in lines[-1], (src, res.output)
        assert "Traceback" not in res.output
    assert not (tmp_path / "nowhere").exists()            # no client created an empty store there


@pytest.mark.parametrize("scheme,module", [("chroma", "chromadb"), ("qdrant", "qdrant_client"),
                                           ("lancedb", "lancedb")])
def test_missing_extra_names_it(scheme, module, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    res = run("audit", source(scheme, tmp_path), "--retriever", "tiny-hashing", "--no-ledger")
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].endswith(f"pip install 'sieve-rag[{scheme}]'")


def test_store_only_options_need_a_store(tmp_path, cache_env):
    res = run("audit", DEMO, "--since", "S-x", "--retriever", "tiny-hashing")
    assert res.exit_code == 2 and "need a store source" in res.output


# -- the real retriever: the demo's shipped vectors in Chroma -----------------------------------------
@pytest.mark.realmodel
def test_real_stored_vectors_pass_the_gate_and_match_the_jsonl_audit(tmp_path):
    from sieve.stores.fill import demo_vectors

    docs, vecs, model = demo_vectors(DEMO)
    src = fill("chroma", tmp_path, docs, vecs, model=model)    # the collection metadata names the model
    res = run("audit", src, "--out", tmp_path / "o", "--ledger", tmp_path / "store.sqlite")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "o" / "rsg_audit.json").read_text())
    gate = report["vectors"]
    assert gate["use_stored"] and gate["sample"] == 256
    assert gate["min_cosine"] >= 0.99 and gate["recall_at_10_agreement"] >= 0.99
    res = run("audit", DEMO, "--out", tmp_path / "j", "--ledger", tmp_path / "jsonl.sqlite")
    assert res.exit_code == 0, res.output
    assert flagged_in(tmp_path / "store.sqlite") == flagged_in(tmp_path / "jsonl.sqlite")
    print(json.dumps(gate))


def test_chroma_http_server_source(tmp_path, cache_env, demo_attacked, jsonl_flags):
    """The same collection served by ``chroma run`` on 127.0.0.1, read through chromadb's HttpClient."""
    import shutil
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    exe = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    if not Path(exe).exists():
        pytest.skip("chroma's server command is not installed")
    docs, vecs = demo_attacked
    fill("chroma", tmp_path, docs, vecs)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "run", "--path", str(tmp_path / "chroma"), "--host", "127.0.0.1", "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import chromadb

        deadline = time.monotonic() + 60
        while True:
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("chroma run did not start")
                time.sleep(0.5)
        led = tmp_path / "ledger.sqlite"
        res = run("audit", f"chroma://127.0.0.1:{port}?collection=demo&model=tiny-hashing", "--retriever",
                  "tiny-hashing", "--out", tmp_path / "o", "--ledger", led)
        assert res.exit_code == 0, res.output
        assert flagged_in(led) == jsonl_flags[0]
        res = run("audit", f"chroma://127.0.0.1:{port}?collection=nope", "--retriever", "tiny-hashing",
                  "--no-ledger")
        assert res.exit_code == 2 and "no collection 'nope'" in res.output
    finally:
        proc.terminate()
        proc.wait(timeout=30)
