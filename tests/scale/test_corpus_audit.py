"""``sieve audit --corpus``: a killed audit resumes where it stopped (shards verified by sha256), with
no lost or duplicated rows and the same flags as an uninterrupted run; damaged shards are recomputed;
bad input and foreign files are refused with a one-line error (exit 2)."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from _kill import kill_after_shards
from sieve.cli import app
from sieve.scale.shards import MANIFEST, open_shards, sha256_file

ROOT = Path(__file__).resolve().parents[2]
N = 1000
SHARD = 50
WORDS = ["river", "mountain", "forest", "valley", "ocean", "desert", "island", "meadow", "glacier", "canyon"]
runner = CliRunner()

# the CLI in a child process, its tiny retriever held after HOLD shards so that the kill lands mid-ingestion
HOLD = 3
HELD_CLI = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
sys.path.insert(0, {str(Path(__file__).parent)!r})
from _kill import hold_after_shards
from sieve.models.tiny import HashingEmbedder
from sieve.scale.shards import MANIFEST
encode = HashingEmbedder.encode
manifest = os.path.join(sys.argv[sys.argv.index("--workdir") + 1], MANIFEST)
def held(self, *a, **k):
    hold_after_shards(manifest, {HOLD})
    return encode(self, *a, **k)
HashingEmbedder.encode = held
from sieve.cli import app
app(sys.argv[1:])
"""


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "big.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(N):
            text = (f"The {WORDS[i % 10]} number {i % 50} lies near the {WORDS[i * 3 % 10]} "
                    f"with fact{i} and note{i % 7}.")
            if i % 97 == 5:                       # mixed Latin/Cyrillic: the integrity branch flags these
                text = f"The rivеr {i} flows sоuth past the {WORDS[i % 10]}"
            fh.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    return path


def args(corpus, workdir, out, *extra):
    return ["audit", "--corpus", str(corpus), "--workdir", str(workdir), "--out", str(out), "--retriever",
            "tiny-hashing", "--shard-rows", str(SHARD), "--no-ledger", *extra]


def flags_of(out):
    with open(out / "rsg_audit.csv", encoding="utf-8") as fh:
        return [(r["id"], r["flagged"], r["score"], r["D"]) for r in csv.DictReader(fh)]


def test_killed_audit_resumes_from_verified_shards_with_the_same_flags(corpus, tmp_path):
    wd, out = tmp_path / "wd", tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", HELD_CLI, *args(corpus, wd, out)],
                            env={**os.environ, "SIEVE_CACHE_DIR": str(tmp_path / "cache")},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_after_shards(proc, wd / MANIFEST, HOLD)
    before = json.loads((wd / MANIFEST).read_text())
    assert not before["complete"] and 3 <= len(before["shards"]) < N // SHARD
    assert not (out / "rsg_audit.json").exists()            # killed before the audit
    kept = len(before["shards"])
    kept_rows = sum(s["rows"] for s in before["shards"])
    kept_hashes = [(s["vectors_sha256"], s["docs_sha256"]) for s in before["shards"]]

    res = runner.invoke(app, args(corpus, wd, out))          # the same command again
    assert res.exit_code == 0, res.output
    assert f"resume     {kept} shards ({kept_rows} rows) verified by sha256 and kept; embedding from row {kept_rows}" \
        in res.output
    assert f"{N} documents in {N // SHARD} shards" in res.output
    shards = open_shards(wd)                                 # verifies every shard's sha256 again
    man = shards.manifest
    assert man["complete"] and [s["start"] for s in man["shards"]] == list(range(0, N, SHARD))
    assert [(s["vectors_sha256"], s["docs_sha256"]) for s in man["shards"][:kept]] == kept_hashes   # not rewritten
    for s in man["shards"]:
        assert sha256_file(wd / s["vectors"]) == s["vectors_sha256"] and sha256_file(wd / s["docs"]) == s["docs_sha256"]
    assert shards.ids == [f"d{i}" for i in range(N)]         # no row lost, none twice, in order
    report = json.loads((out / "rsg_audit.json").read_text())
    assert report["ingest"]["resumed_rows"] == kept_rows and report["ingest"]["verified_shards"] == kept

    # an uninterrupted run in fresh directories: the same vectors and the same flags
    wd2, out2 = tmp_path / "wd2", tmp_path / "out2"
    res2 = runner.invoke(app, args(corpus, wd2, out2))
    assert res2.exit_code == 0, res2.output
    np.testing.assert_array_equal(open_shards(wd2).vectors[0:N], shards.vectors[0:N])
    assert flags_of(out) == flags_of(out2)
    assert sum(f == "1" for _, f, _, _ in flags_of(out)) == report["flags"] > 10
    assert report["integrity_flags"] >= 10 and report["documents"] == N


def test_damaged_shard_is_recomputed_and_said_in_one_line(corpus, tmp_path):
    wd, out = tmp_path / "wd", tmp_path / "out"
    assert runner.invoke(app, args(corpus, wd, out)).exit_code == 0
    first = flags_of(out)
    victim = wd / "shard-00007.f16.npy"
    data = bytearray(victim.read_bytes())
    data[-5] ^= 0xFF
    victim.write_bytes(bytes(data))
    res = runner.invoke(app, args(corpus, wd, out))
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if "failed its sha256 check" in ln]
    assert lines == [f"resume     {victim} failed its sha256 check: recomputing it and {N // SHARD - 8} later shards"]
    assert "resume     7 shards (350 rows) verified by sha256 and kept; embedding from row 350" in res.output
    assert flags_of(out) == first
    assert open_shards(wd).ids == [f"d{i}" for i in range(N)]
    again = runner.invoke(app, args(corpus, wd, out))
    assert f"all {N // SHARD} shards ({N} rows) verified by sha256; nothing to embed" in again.output


def test_bad_input_and_foreign_files_are_one_line_errors(corpus, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "text": "fine"}) + "\n" + json.dumps({"id": "b", "txt": "x"}) + "\n")
    res = runner.invoke(app, args(bad, tmp_path / "wdb", tmp_path / "ob"))
    assert res.exit_code == 2 and "bad.jsonl:2: field 'text' missing or empty" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "wdb").exists()    # nothing written
    out = tmp_path / "mine"
    out.mkdir()
    (out / "rsg_audit.csv").write_text("my own notes\n")
    res = runner.invoke(app, args(corpus, tmp_path / "wd", out))
    assert res.exit_code == 2 and "rsg_audit.csv already exists and was not written by this command" in res.output
    assert (out / "rsg_audit.csv").read_text() == "my own notes\n"
    res = runner.invoke(app, args(corpus, tmp_path / "wd", tmp_path / "o3") + ["--shard-rows", "70"])
    assert res.exit_code == 0, res.output                    # the first run's shard size is kept on resume
    assert open_shards(tmp_path / "wd").manifest["chunk_rows"] == SHARD
    res = runner.invoke(app, args(bad, tmp_path / "wd", tmp_path / "o4"))     # shards of another corpus
    assert res.exit_code == 2 and "holds shards of another corpus or model" in res.output
    assert open_shards(tmp_path / "wd").ids == [f"d{i}" for i in range(N)]    # left as they were
    res = runner.invoke(app, ["audit"])
    assert res.exit_code == 2 and "give a dataset directory or --corpus" in res.output
    res = runner.invoke(app, ["audit", str(tmp_path), "--corpus", str(corpus)])
    assert res.exit_code == 2 and "one of the two" in res.output
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["audit", "--corpus", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "not a shard directory" in res.output


def test_default_workdir_is_found_again(corpus, tmp_path):
    cmd = ["audit", "--corpus", str(corpus), "--retriever", "tiny-hashing", "--no-ledger", "--out", str(tmp_path / "o")]
    first = runner.invoke(app, cmd)
    assert first.exit_code == 0, first.output
    wd = Path(first.output.splitlines()[0].split(maxsplit=1)[1])
    assert wd.parent == tmp_path / "cache" / "shards" and wd.name.startswith("big-")
    again = runner.invoke(app, cmd)
    assert f"resume     all 1 shard ({N} rows) verified by sha256; nothing to embed" in again.output
    assert flags_of(tmp_path / "o") and open_shards(wd).ids == [f"d{i}" for i in range(N)]


def test_a_shard_directory_is_audited_directly(corpus, tmp_path):
    wd = tmp_path / "wd"
    assert runner.invoke(app, args(corpus, wd, tmp_path / "a")).exit_code == 0
    res = runner.invoke(app, ["audit", "--corpus", str(wd), "--out", str(tmp_path / "b"), "--no-ledger"])
    assert res.exit_code == 0, res.output
    assert "sha256 verified" in res.output
    assert flags_of(tmp_path / "a") == flags_of(tmp_path / "b")


@pytest.mark.realmodel
def test_corpus_audit_embeds_with_the_real_retriever(tmp_path, real_retriever):
    """The real retriever (all-mpnet-base-v2): the shards hold exactly the library's batched embedding
    (sieve/index/embedding.py) in row order, and the flags equal RSG on those vectors."""
    from sieve.defenses.rsg import audit_corpus
    from sieve.index.embedding import embed_documents
    from sieve.types import Document

    texts = [f"The {WORDS[i % 10]} number {i % 12} lies near the {WORDS[i * 3 % 10]}." for i in range(100)]
    texts[7] = "The rivеr seven flows sоuth"                      # mixed Latin/Cyrillic
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    wd, out = tmp_path / "wd", tmp_path / "out"
    res = runner.invoke(app, ["audit", "--corpus", str(src), "--retriever", "all-mpnet-base-v2", "--workdir", str(wd),
                              "--out", str(out), "--shard-rows", "64", "--no-ledger", "--mode", "exact"])
    assert res.exit_code == 0, res.output
    shards = open_shards(wd)
    assert shards.manifest["model_id"] == real_retriever.model_id and shards.ids == [f"d{i}" for i in range(100)]
    want = embed_documents([Document(f"d{i}", t) for i, t in enumerate(texts)], real_retriever, None, False, "x")
    # the same embedding in row order, stored as float16. Not bit-equal: the shard path and the
    # reference call run torch's CPU kernels under different thread scheduling, and a float32 value
    # that lands on a float16 rounding boundary flips by one float16 step (≤ 2**-10 relative, about
    # 6e-5 for these unit vectors). Row order and identity are what this checks.
    got = np.asarray(shards.vectors[0:100], dtype=np.float32)
    ref16 = want.astype(np.float16).astype(np.float32)
    one_step = np.spacing(np.abs(ref16).astype(np.float16)).astype(np.float32)
    assert np.all(np.abs(got - ref16) <= one_step + 1e-7)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 0.9999
    ref = audit_corpus(shards.ids, texts, shards.vectors, mode="exact")
    assert [r for r, f, _, _ in flags_of(out) if f == "1"] == ref.flagged_ids and "d7" in ref.flagged_ids
