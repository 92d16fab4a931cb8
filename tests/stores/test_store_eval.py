"""``sieve eval STORE --queries FILE`` (issue 25 item 1, clean conditions): a real embedded Chroma
and LanceDB filled with the demo corpus; the clean records equal those of the JSONL dataset's run,
the stored vectors are used (nothing re-embedded), the store is left alone; wrong use is one
``error:`` line, exit 2."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sieve.cli import app
from sieve.corpus import load_dataset
from tests.stores.conftest import DEMO, STORES, fill

runner = CliRunner()
LIMIT = 6
DEFENSES = "none,rsg"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def clean_records(run_dir):
    out = {}
    for line in (run_dir / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["condition"] == "clean":
            # relevant_ids are left out: the demo's qrels.jsonl is not part of a store (nor of --queries)
            out[(r["query_id"], r["defense"])] = (r["ranking_ref"], r["context_ids"], r["fallback_used"], r["error"])
    return out


@pytest.fixture(scope="module")
def jsonl_run(tmp_path_factory):
    """The demo dataset's own run (clean + one family), the reference for the store's clean records."""
    import os

    tmp = tmp_path_factory.mktemp("jsonl-eval")
    old = os.environ.get("SIEVE_CACHE_DIR")
    os.environ["SIEVE_CACHE_DIR"] = str(tmp / "cache")
    try:
        res = run("eval", DEMO, "--out", tmp / "run", "--retriever", "tiny-hashing", "--defenses", DEFENSES,
                  "--attacks", "script", "--limit", LIMIT, "--no-llm", "--no-progress")
    finally:
        if old is None:
            os.environ.pop("SIEVE_CACHE_DIR", None)
        else:
            os.environ["SIEVE_CACHE_DIR"] = old
    assert res.exit_code == 0, res.output
    return tmp / "run"


@pytest.mark.parametrize("scheme", STORES)
def test_eval_on_a_store_equals_the_jsonl_clean_run(scheme, tmp_path, cache_env, jsonl_run):
    from sieve.models.tiny import HashingEmbedder

    ds = load_dataset(DEMO)
    vecs = HashingEmbedder(dim=64).encode([d.model_text() for d in ds.documents])
    src = fill(scheme, tmp_path, ds.documents, vecs) + "&model=tiny-hashing"   # Qdrant keeps no collection model
    res = run("eval", src, "--queries", DEMO / "queries.jsonl", "--out", tmp_path / "run", "--retriever",
              "tiny-hashing", "--defenses", DEFENSES, "--limit", LIMIT, "--no-llm", "--no-progress")
    assert res.exit_code == 0, res.output
    assert "stored vectors used" in res.output and f"{len(ds.queries)} clean queries" in res.output
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["conditions"] == {"clean": LIMIT}
    assert cfg["dataset"]["corpus_sha256"] == ds.content_hash()
    ours, ref = clean_records(tmp_path / "run"), clean_records(jsonl_run)
    assert ours and ours == ref                                  # same rankings, contexts and removals
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {(r["defense"], r["attack"]) for r in summary["results"]} == {("none", "clean"), ("rsg", "clean")}
    # the stored vectors were seeded into the run's workspace: the evaluation embedded no document
    source = json.loads((tmp_path / "cache" / "stores" / "eval").glob("*/source.json").__next__().read_text())
    assert source["stored_vectors"] is True and source["documents"] == len(ds.documents)
    # a second run resumes (same store, same queries); a changed queries file is another dataset
    res = run("eval", src, "--queries", DEMO / "queries.jsonl", "--out", tmp_path / "run", "--retriever",
              "tiny-hashing", "--defenses", DEFENSES, "--limit", LIMIT, "--no-llm", "--no-progress")
    assert res.exit_code == 0, res.output
    fewer = tmp_path / "q.jsonl"
    fewer.write_text("\n".join((DEMO / "queries.jsonl").read_text().splitlines()[:3]) + "\n")
    res = run("eval", src, "--queries", fewer, "--out", tmp_path / "run", "--retriever", "tiny-hashing",
              "--defenses", DEFENSES, "--limit", LIMIT, "--no-llm", "--no-progress")
    assert res.exit_code == 2 and "different configuration" in res.output


def test_eval_store_errors(tmp_path, cache_env):
    from sieve.models.tiny import HashingEmbedder

    ds = load_dataset(DEMO)
    docs = ds.documents[:50]
    src = fill("chroma", tmp_path, docs, HashingEmbedder(dim=64).encode([d.model_text() for d in docs]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q1", "text": "where?"}\n{"id": "q2"}\n')
    cases = [
        (["eval", src, "--out", tmp_path / "r1"], "a store holds documents, not queries: give --queries FILE"),
        (["eval", src, "--queries", DEMO / "queries.jsonl", "--attacks", "script", "--out", tmp_path / "r2"],
         "a store source has no attack families"),
        (["eval", DEMO, "--queries", DEMO / "queries.jsonl", "--out", tmp_path / "r3"],
         "--queries is for a store source"),
        (["eval", src, "--queries", tmp_path / "none.jsonl", "--out", tmp_path / "r4"], "queries file not found"),
        (["eval", src, "--queries", bad, "--out", tmp_path / "r5", "--retriever", "tiny-hashing"], "bad.jsonl"),
        (["eval", "chroma:///nowhere/at/all?collection=x", "--queries", DEMO / "queries.jsonl", "--out",
          tmp_path / "r6"], "no chroma store at /nowhere/at/all"),
    ]
    for args, words in cases:
        res = run(*args)
        errors = [x for x in res.output.splitlines() if x.startswith("error:")]
        assert res.exit_code == 2 and len(errors) == 1 and words in errors[0], (args, res.output)
        assert "Traceback" not in res.output
    res = run("eval", src, "--queries", bad, "--out", tmp_path / "r5", "--retriever", "tiny-hashing")
    assert "line 2" in res.output and "text" in res.output
