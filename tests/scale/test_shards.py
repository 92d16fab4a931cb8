"""Streaming ingestion (sieve/scale/shards.py): a killed chunked ingestion resumes with no lost or
duplicated rows and verified shard hashes; damaged shards are rebuilt; foreign directories refused."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _kill import kill_after_shards
from sieve.scale.shards import MANIFEST, IngestError, ingest, open_shards, read_chunks, sha256_file

ROOT = Path(__file__).resolve().parents[2]
N = 1200
CHUNK = 50


def hash_embed(texts):
    """Deterministic 16-d text embedding (a real function of the text, so a shifted row shows)."""
    out = np.zeros((len(texts), 16), np.float32)
    for i, t in enumerate(texts):
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode("utf-8")).digest()[:8], "little"))
        out[i] = rng.normal(size=16)
    return out


HOLD = 4
HELD_INGEST = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
sys.path.insert(0, {str(Path(__file__).parent)!r})
from _kill import hold_after_shards
from test_shards import hash_embed
from sieve.scale.shards import MANIFEST, ingest
def held(texts):   # stops after {HOLD} shards until the parent kills it
    hold_after_shards(os.path.join(sys.argv[2], MANIFEST), {HOLD})
    return hash_embed(texts)
ingest(sys.argv[1], sys.argv[2], held, "hash16", chunk_rows={CHUNK}, progress=False)
"""


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "corpus.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(N):
            fh.write(json.dumps({"id": f"d{i}", "text": f"passage {i} about topic {i % 37} and item {i * 7 % 101}"}) + "\n")
    return path


def test_killed_ingestion_resumes_without_lost_or_duplicated_rows(source, tmp_path):
    out = tmp_path / "shards"
    proc = subprocess.Popen([sys.executable, "-c", HELD_INGEST, str(source), str(out)])
    kill_after_shards(proc, out / MANIFEST, HOLD)        # mid-way: a few shards recorded
    before = json.loads((out / MANIFEST).read_text())
    assert not before["complete"] and 4 <= len(before["shards"]) < N // CHUNK
    done_rows = sum(s["rows"] for s in before["shards"])
    first_hashes = [s["vectors_sha256"] for s in before["shards"]]

    res = ingest(source, out, hash_embed, "hash16", chunk_rows=CHUNK, progress=False)
    assert res.resumed_rows == done_rows and res.rows == N and res.dropped_shards == 0
    shards = open_shards(out)                   # verifies every shard's sha256
    assert shards.ids == [f"d{i}" for i in range(N)]                     # none lost, none twice, in order
    assert [s["vectors_sha256"] for s in shards.manifest["shards"][: len(first_hashes)]] == first_hashes
    texts = [json.loads(line)["text"] for line in source.read_text().splitlines()]
    assert shards.texts == texts
    np.testing.assert_array_equal(shards.vectors[0:N], hash_embed(texts).astype(np.float16))
    # running it again is a no-op
    again = ingest(source, out, hash_embed, "hash16", chunk_rows=CHUNK, progress=False)
    assert again.resumed_rows == N and again.rows == N


def test_damaged_shard_is_rebuilt_from_there(source, tmp_path):
    out = tmp_path / "shards"
    ingest(source, out, hash_embed, "hash16", chunk_rows=CHUNK, progress=False)
    man = json.loads((out / MANIFEST).read_text())
    victim = out / man["shards"][5]["vectors"]
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(IngestError, match="sha256"):
        open_shards(out)
    res = ingest(source, out, hash_embed, "hash16", chunk_rows=CHUNK, progress=False)
    assert res.resumed_rows == 5 * CHUNK and res.dropped_shards == N // CHUNK - 5
    shards = open_shards(out)
    assert shards.ids == [f"d{i}" for i in range(N)]
    assert sha256_file(victim) == json.loads((out / MANIFEST).read_text())["shards"][5]["vectors_sha256"]


def test_directory_of_another_corpus_is_not_overwritten(source, tmp_path):
    out = tmp_path / "shards"
    ingest(source, out, hash_embed, "hash16", chunk_rows=CHUNK, progress=False)
    with pytest.raises(IngestError, match="another corpus or model"):
        ingest(source, out, hash_embed, "other-model", chunk_rows=CHUNK, progress=False)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "x", "text": "y"}) + "\n")
    with pytest.raises(IngestError, match="another corpus or model"):
        ingest(other, out, hash_embed, "hash16", chunk_rows=CHUNK, progress=False)


def test_bad_line_names_file_line_and_field(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "ok"}) + "\n" + json.dumps({"id": "b"}) + "\n")
    with pytest.raises(IngestError, match=r"c.jsonl:2: field 'text'"):
        list(read_chunks(path, 10))


def test_parquet_chunks_skip_and_match_jsonl(source, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in source.read_text().splitlines()]
    pq.write_table(pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows]}),
                   tmp_path / "c.parquet", row_group_size=128)
    got = [i for ids, _ in read_chunks(tmp_path / "c.parquet", 70, skip_rows=333) for i in ids]
    assert got == [f"d{i}" for i in range(333, N)]
    a = ingest(tmp_path / "c.parquet", tmp_path / "pq", hash_embed, "hash16", chunk_rows=100, progress=False)
    assert a.rows == N and open_shards(tmp_path / "pq").ids == [r["id"] for r in rows]
