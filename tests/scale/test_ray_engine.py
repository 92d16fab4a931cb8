"""The Ray engine (sieve/scale/ray_engine.py) in a real local Ray instance against the local engine on a
5k-document corpus: identical neighbours, statistics and flags; and ``sieve audit --engine ray``."""
import json

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from sieve.defenses.rsg import audit_corpus  # noqa: E402
from sieve.scale.ray_engine import ray_audit  # noqa: E402
from sieve.scale.synthetic import SyntheticCorpus  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_engine_equals_local_engine_on_5k(local_ray):
    ch = SyntheticCorpus(5000, dim=128, seed=3, coord_fraction=0.01).chunk(0, 5000)
    loc = audit_corpus(ch.ids, ch.texts, ch.vectors, mode="ivf", recall_sample=200)
    got, layout = ray_audit(ch.ids, ch.texts, ch.vectors, mode="ivf", recall_sample=200)
    assert loc.flagged.sum() > 100
    np.testing.assert_array_equal(got.neighbour_ids, loc.neighbour_ids)
    np.testing.assert_array_equal(got.density, loc.density)
    np.testing.assert_array_equal(got.flagged, loc.flagged)
    np.testing.assert_array_equal(got.score, loc.score)
    assert got.recall == loc.recall
    knn = layout["stages"][1]
    assert knn["actor"] == "KnnActor" and knn["work_units"] == loc.knn["nlist"] and layout["actors_per_stage"] == 2
    assert layout["address"] == "local"
    assert ray.is_initialized()                 # an existing Ray runtime is left running


def test_cli_audit_engine_ray_writes_the_same_report(local_ray, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sieve.cli import app

    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "ds"
    d.mkdir()
    words = ["river", "mountain", "forest", "valley", "ocean", "desert", "island", "meadow"]
    with open(d / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i in range(60):
            fh.write(json.dumps({"id": f"c{i}", "text": f"The {words[i % 8]} {i} has fact{i} and note{i % 5}."}) + "\n")
        for i in range(2):                      # mixed Latin/Cyrillic words: the integrity branch flags them
            fh.write(json.dumps({"id": f"m{i}", "text": f"The rivеr {i} flows sоuth"}) + "\n")
    (d / "queries.jsonl").write_text(json.dumps({"id": "q1", "text": "where is the river", "answers": ["n"]}) + "\n")
    runner = CliRunner()
    reports = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        res = runner.invoke(app, ["audit", str(d), "--engine", engine, "--retriever", "tiny-hashing", "--out", str(out),
                                  "--no-ledger"])
        assert res.exit_code == 0, res.output
        assert f"({engine} engine)" in res.output
        reports[engine] = json.loads((out / "rsg_audit.json").read_text())
    assert reports["ray"]["engine"] == "ray" and reports["ray"]["ray"]["stages"][2]["actor"] == "DensityActor"
    assert [r["document_id"] for r in reports["ray"]["flagged"]] == [r["document_id"] for r in reports["local"]["flagged"]]
    assert reports["ray"]["flags"] == reports["local"]["flags"] > 0


def test_cli_rejects_bad_engine_and_stray_address(tmp_path):
    from typer.testing import CliRunner

    from sieve.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["audit", str(tmp_path), "--engine", "spark"])
    assert res.exit_code == 2 and "--engine must be local, ray" in res.output
    res = runner.invoke(app, ["audit", str(tmp_path), "--ray-address", "auto"])
    assert res.exit_code == 2 and "--ray-address needs --engine ray" in res.output


def _texts(n):
    words = ["river", "mountain", "forest", "valley", "ocean", "desert", "island", "meadow", "glacier", "canyon"]
    out = [f"The {words[i % 10]} number {i % 40} lies near the {words[i * 3 % 10]} with fact{i} and note{i % 7}."
           for i in range(n)]
    for i in range(0, n, 61):                   # mixed Latin/Cyrillic: integrity flags
        out[i] = f"The rivеr {i} flows sоuth past the {words[i % 10]}"
    return out


def test_texts_without_vectors_are_embedded_on_actors_with_the_local_flags(local_ray):
    from functools import partial

    from sieve.index.embedding import embed_documents
    from sieve.models.tiny import HashingEmbedder
    from sieve.scale.ray_engine import EMBED_BATCH_RAY
    from sieve.types import Document

    texts = _texts(600)
    ids = [f"d{i}" for i in range(len(texts))]
    factory = partial(HashingEmbedder, dim=64)
    local = embed_documents([Document(i, t) for i, t in zip(ids, texts)], factory(), None, False, "embedding")
    got, layout = ray_audit(ids, texts, None, embedder=factory, mode="ivf", recall_sample=100)
    loc = audit_corpus(ids, texts, local.astype(np.float16), mode="ivf", recall_sample=100)
    embed = layout["stages"][0]
    assert embed["name"] == "embed" and embed["actor"] == "EmbedActor" and embed["actors"] == 2
    assert embed["batch_size"] == EMBED_BATCH_RAY and embed["rows"] == 600 and embed["windows"] == 1
    assert layout["stages"][2]["actor"] == "KnnActor"
    np.testing.assert_array_equal(got.neighbour_ids, loc.neighbour_ids)
    np.testing.assert_array_equal(got.density, loc.density)
    np.testing.assert_array_equal(got.flagged, loc.flagged)
    assert loc.flagged.sum() >= 10 and loc.integrity.sum() == 10


def test_cli_corpus_audit_on_ray_writes_the_local_shards_and_flags(local_ray, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sieve.cli import app
    from sieve.scale.shards import open_shards

    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(_texts(400))))
    runner = CliRunner()
    reports = {}
    for engine in ("local", "ray"):
        res = runner.invoke(app, ["audit", "--corpus", str(src), "--engine", engine, "--workdir", str(tmp_path / f"wd-{engine}"),
                                  "--out", str(tmp_path / engine), "--retriever", "tiny-hashing", "--shard-rows", "50",
                                  "--no-ledger"])
        assert res.exit_code == 0, res.output
        assert ("embedded   400 documents" in res.output
                and ("2 EmbedActors, 256 texts per call" in res.output) == (engine == "ray"))
        reports[engine] = json.loads((tmp_path / engine / "rsg_audit.json").read_text())
    a, b = open_shards(tmp_path / "wd-local"), open_shards(tmp_path / "wd-ray")
    assert a.ids == b.ids == [f"d{i}" for i in range(400)] and len(b.manifest["shards"]) == 8
    np.testing.assert_allclose(np.asarray(a.vectors[0:400], np.float32), np.asarray(b.vectors[0:400], np.float32),
                               atol=1e-3)
    embed = reports["ray"]["ray"]["stages"][0]
    assert embed["name"] == "embed" and embed["actor"] == "EmbedActor" and embed["rows"] == 400
    assert embed["windows"] == 2                # 8 shards in windows of EMBED_WINDOW_CHUNKS = 4, gathered in order
    assert [r["document_id"] for r in reports["ray"]["flagged"]] == [r["document_id"] for r in reports["local"]["flagged"]]
    assert reports["ray"]["flags"] == reports["local"]["flags"] > 0
