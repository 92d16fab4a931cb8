"""Streaming corpus ingestion into float16 memory-mapped shards with a manifest.

A corpus larger than memory is read in chunks (JSONL lines or Parquet row batches with ``id`` and
``text``), each chunk embedded in one batch call and written as one shard:

    <out>/shard-00000.f16.npy    float16 [rows, dim]   (np.load(..., mmap_mode="r") maps it)
    <out>/shard-00000.docs.jsonl {"id", "text"} per row, same order
    <out>/manifest.json          source, model, dim, chunk size, and per shard: rows, first row,
                                 sha256 of both files; "complete" once the source is exhausted

Each shard is written under a temporary name, flushed and renamed, and only then entered in the
manifest (itself replaced atomically). A killed ingestion therefore leaves at most one orphan
temporary file; :func:`ingest` run again verifies every listed shard's hashes, drops the first bad
shard and everything after it, and continues from the first row not yet in a verified shard — no row
is lost or written twice. float16 halves the disk and page-cache footprint (1M × 384 = 768 MB);
RSG converts back to float32 per block (sieve/index/knn.py).

A directory holding a manifest for another source or model is never overwritten (docs/design.md:
no command overwrites what the user owns).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

MANIFEST = "manifest.json"
FORMAT = "sieve-shards/1"
#: rows per chunk = per shard: 8,192 × 384 float16 = 6 MB per shard, one embedding call per chunk.
CHUNK_ROWS = 8192

Embedder = Callable[[list[str]], np.ndarray]
#: embeds a stream of (ids, texts) chunks, yielding one float32 [rows, dim] matrix per chunk in order
#: (the Ray engine's embedding stage, sieve/scale/ray_engine.py: ``ray_embed_chunks``)
ChunkEmbedder = Callable[[Iterator[tuple[list[str], list[str]]]], Iterator[np.ndarray]]


class IngestError(ValueError):
    """Bad input or a directory that belongs to another corpus (message names file/line/field)."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for blk in iter(lambda: fh.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def source_identity(path: Path) -> dict[str, Any]:
    """What identifies the source: path, size, and the hash of its first MiB (cheap for 1M rows)."""
    st = path.stat()
    with open(path, "rb") as fh:
        head = hashlib.sha256(fh.read(1 << 20)).hexdigest()
    return {"path": str(path.resolve()), "bytes": st.st_size, "head_sha256": head}


# ---------------------------------------------------------------------------------------------
def read_chunks(path: Path, chunk_rows: int, skip_rows: int = 0) -> Iterator[tuple[list[str], list[str]]]:
    """(ids, texts) chunks of a JSONL or Parquet corpus, starting after ``skip_rows`` rows."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        yield from _jsonl_chunks(path, chunk_rows, skip_rows)
    elif suffix in (".parquet", ".pq"):
        yield from _parquet_chunks(path, chunk_rows, skip_rows)
    else:
        raise IngestError(f"{path}: unsupported corpus format {suffix!r}; use .jsonl or .parquet")


def _jsonl_chunks(path: Path, chunk_rows: int, skip: int) -> Iterator[tuple[list[str], list[str]]]:
    ids: list[str] = []
    texts: list[str] = []
    row = 0
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row += 1
            if row <= skip:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise IngestError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise IngestError(f"{path}:{lineno}: expected a JSON object with 'id' and 'text'")
            for key in ("id", "text"):
                if key not in obj or not isinstance(obj[key], (str, int)) or obj[key] == "":
                    raise IngestError(f"{path}:{lineno}: field '{key}' missing or empty")
            ids.append(str(obj["id"]))
            texts.append(str(obj["text"]))
            if len(ids) == chunk_rows:
                yield ids, texts
                ids, texts = [], []
    if ids:
        yield ids, texts


def _parquet_chunks(path: Path, chunk_rows: int, skip: int) -> Iterator[tuple[list[str], list[str]]]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    names = set(pf.schema_arrow.names)
    for key in ("id", "text"):
        if key not in names:
            raise IngestError(f"{path}: column '{key}' missing (columns: {', '.join(sorted(names))})")
    seen = 0
    ids: list[str] = []
    texts: list[str] = []
    for batch in pf.iter_batches(batch_size=chunk_rows, columns=["id", "text"]):
        b_ids = [str(v) for v in batch.column("id").to_pylist()]
        b_texts = batch.column("text").to_pylist()
        start = max(0, skip - seen)
        seen += len(b_ids)
        for j in range(start, len(b_ids)):
            if b_texts[j] is None or b_texts[j] == "":
                raise IngestError(f"{path}: row {seen - len(b_ids) + j + 1}: field 'text' missing or empty")
            ids.append(b_ids[j])
            texts.append(str(b_texts[j]))
            if len(ids) == chunk_rows:
                yield ids, texts
                ids, texts = [], []
    if ids:
        yield ids, texts


def scan_rows(path: Path, skip_rows: int = 0) -> int:
    """Rows of the source, after checking every row past ``skip_rows`` (JSON, ``id``, ``text``):
    a bad line is reported (file:line: field) before anything is embedded, not hours into a run —
    and a corrected file then starts a clean run instead of clashing with shards of the old one.
    One parsing pass costs a few seconds per million rows, against hours of embedding."""
    rows = 0
    for ids, _ in read_chunks(path, 65_536, skip_rows=skip_rows):
        rows += len(ids)
    return skip_rows + rows


# ---------------------------------------------------------------------------------------------
def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _verified_prefix(out: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Listed shards whose files exist and match their hashes, up to the first that does not."""
    good = []
    row = 0
    for sh in manifest.get("shards", []):
        vec, docs = out / sh["vectors"], out / sh["docs"]
        if (sh["start"] != row or not vec.exists() or not docs.exists()
                or sha256_file(vec) != sh["vectors_sha256"] or sha256_file(docs) != sh["docs_sha256"]):
            break
        good.append(sh)
        row += sh["rows"]
    return good


@dataclass
class IngestResult:
    out: Path
    rows: int
    shards: int
    resumed_rows: int        # rows found in verified shards and not recomputed
    dropped_shards: int      # listed shards that failed verification and were rebuilt
    seconds: float
    verified_shards: int = 0     # shards of an earlier run whose sha256 matched the manifest
    failed: str | None = None    # the first shard whose hash (or file) did not match, if any

    @property
    def docs_per_second(self) -> float:
        new = self.rows - self.resumed_rows
        return new / self.seconds if self.seconds > 0 else float("nan")


def ingest(source: Path, out: Path, embed: Embedder | None, model_id: str, *, chunk_rows: int = CHUNK_ROWS,
           progress: bool = True, embed_chunks: ChunkEmbedder | None = None,
           note: Callable[[str], None] | None = None) -> IngestResult:
    """Embed ``source`` into shards under ``out``; resume a previous run of the same source and model.

    ``embed`` embeds one chunk's texts; ``embed_chunks`` (instead) embeds the stream of remaining
    chunks — the Ray engine's actor pool — and must yield one matrix per chunk in order. ``note``
    receives one line per resume event (shards verified and kept, a shard that failed its sha256),
    before any embedding starts."""
    if (embed is None) == (embed_chunks is None):
        raise ValueError("ingest: give exactly one of embed and embed_chunks")
    source, out = Path(source), Path(out)
    if not source.exists():
        raise IngestError(f"{source}: corpus file not found")
    ident = source_identity(source)
    mpath = out / MANIFEST
    manifest: dict[str, Any] = {"format": FORMAT, "source": ident, "model_id": model_id, "dim": None,
                                "chunk_rows": int(chunk_rows), "shards": [], "complete": False}
    dropped = 0
    failed = None
    if mpath.exists():
        try:
            old = json.loads(mpath.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise IngestError(f"{mpath}: unreadable manifest ({e.msg}); choose another output directory") from None
        if old.get("format") != FORMAT or old.get("source") != ident or old.get("model_id") != model_id:
            raise IngestError(f"{out}: holds shards of another corpus or model ({old.get('source', {}).get('path')}, "
                              f"{old.get('model_id')}); choose another output directory")
        manifest = old
        if int(manifest.get("chunk_rows", chunk_rows)) != chunk_rows:
            chunk_rows = int(manifest["chunk_rows"])           # keep the shard layout of the first run
        good = _verified_prefix(out, manifest)
        dropped = len(manifest["shards"]) - len(good)
        if dropped:
            failed = manifest["shards"][len(good)]["vectors"]
        manifest["shards"] = good
        if dropped:
            manifest["complete"] = False
    elif any(out.glob("shard-*")):
        raise IngestError(f"{out}: contains shard files but no {MANIFEST}; choose another output directory")
    done = sum(sh["rows"] for sh in manifest["shards"])
    verified = len(manifest["shards"])
    if note is not None and failed:
        note(f"resume     {out / failed} failed its sha256 check: recomputing it"
             + (f" and {dropped - 1} later shards" if dropped > 1 else ""))
    if note is not None and manifest["complete"]:
        note(f"resume     all {verified} shard{'s' if verified != 1 else ''} ({done} rows) verified by sha256; "
             "nothing to embed")
    elif note is not None and done:
        note(f"resume     {verified} shards ({done} rows) verified by sha256 and kept; embedding from row {done}")
    if manifest["complete"]:
        return IngestResult(out, done, len(manifest["shards"]), done, dropped, 0.0, verified, failed)
    total = scan_rows(source, skip_rows=done)          # bad input is reported before any embedding
    out.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(mpath, manifest)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=done, desc="embedding", unit="doc", unit_scale=True, smoothing=0.05)
    t0 = time.perf_counter()
    row = done
    pending: list[tuple[list[str], list[str]]] = []     # chunks handed to embed_chunks, not yet written

    def chunks() -> Iterator[tuple[list[str], list[str]]]:
        for ch in read_chunks(source, chunk_rows, skip_rows=done):
            pending.append(ch)
            yield ch

    if embed_chunks is not None:
        stream: Iterator[tuple[list[str], list[str], np.ndarray]] = (
            (*pending.pop(0), v) for v in embed_chunks(chunks()))
    else:
        embed_one = embed
        assert embed_one is not None   # exactly one of embed / embed_chunks (checked above)
        stream = ((ids, texts, embed_one(texts)) for ids, texts in read_chunks(source, chunk_rows, skip_rows=done))
    for ids, texts, vec in stream:
        vec = np.asarray(vec, dtype=np.float32)
        if vec.ndim != 2 or vec.shape[0] != len(ids):
            raise IngestError(f"embedder returned shape {vec.shape} for {len(ids)} texts")
        if manifest["dim"] is None:
            manifest["dim"] = int(vec.shape[1])
        elif vec.shape[1] != manifest["dim"]:
            raise IngestError(f"embedder returned dimension {vec.shape[1]}, the manifest says {manifest['dim']}")
        i = len(manifest["shards"])
        vname, dname = f"shard-{i:05d}.f16.npy", f"shard-{i:05d}.docs.jsonl"
        _write_shard(out / vname, out / dname, vec.astype(np.float16), ids, texts)
        manifest["shards"].append({"vectors": vname, "docs": dname, "start": row, "rows": len(ids),
                                   "vectors_sha256": sha256_file(out / vname),
                                   "docs_sha256": sha256_file(out / dname)})
        _write_json_atomic(mpath, manifest)
        row += len(ids)
        if bar is not None:
            bar.update(len(ids))
    manifest["complete"] = True
    _write_json_atomic(mpath, manifest)
    if bar is not None:
        bar.close()
    return IngestResult(out, row, len(manifest["shards"]), done, dropped, time.perf_counter() - t0, verified, failed)


def _write_shard(vpath: Path, dpath: Path, vec: np.ndarray, ids: Sequence[str], texts: Sequence[str]) -> None:
    for path, write in ((vpath, lambda fh: np.save(fh, vec)),
                        (dpath, lambda fh: fh.write("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n"
                                                            for i, t in zip(ids, texts)).encode("utf-8")))):
        tmp = path.with_name(path.name + ".part")
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


def write_shards(out: Path, chunks: Iterator[tuple[list[str], list[str], np.ndarray]], model_id: str,
                 source: dict[str, Any]) -> Path:
    """Shards from already-embedded chunks (benchmarks: synthetic vectors). Refuses a non-empty ``out``."""
    out = Path(out)
    if (out / MANIFEST).exists() or any(out.glob("shard-*")):
        raise IngestError(f"{out}: already holds shards; choose another output directory")
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"format": FORMAT, "source": source, "model_id": model_id, "dim": None,
                                "chunk_rows": 0, "shards": [], "complete": False}
    row = 0
    for i, (ids, texts, vec) in enumerate(chunks):
        vname, dname = f"shard-{i:05d}.f16.npy", f"shard-{i:05d}.docs.jsonl"
        _write_shard(out / vname, out / dname, np.asarray(vec, np.float16), ids, texts)
        manifest["dim"] = int(vec.shape[1])
        manifest["chunk_rows"] = max(manifest["chunk_rows"], len(ids))
        manifest["shards"].append({"vectors": vname, "docs": dname, "start": row, "rows": len(ids),
                                   "vectors_sha256": sha256_file(out / vname), "docs_sha256": sha256_file(out / dname)})
        row += len(ids)
    manifest["complete"] = True
    _write_json_atomic(out / MANIFEST, manifest)
    return out


# ---------------------------------------------------------------------------------------------
class ShardVectors:
    """The shards' float16 memory maps as one read-only [N, dim] matrix (row slices only)."""

    def __init__(self, maps: list[np.ndarray]) -> None:
        self.maps = maps
        self.starts = np.cumsum([0] + [m.shape[0] for m in maps])
        self.shape = (int(self.starts[-1]), int(maps[0].shape[1]) if maps else 0)
        self.dtype = np.dtype(np.float16)
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if not isinstance(key, slice):
            raise TypeError("ShardVectors supports row slices only")
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise TypeError("ShardVectors supports contiguous row slices only")
        parts = []
        for m, s0 in zip(self.maps, self.starts[:-1]):
            lo, hi = max(start, s0), min(stop, s0 + m.shape[0])
            if lo < hi:
                parts.append(m[lo - s0: hi - s0])
        if not parts:
            return np.empty((0, self.shape[1]), np.float16)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


@dataclass
class ShardSet:
    ids: list[str]
    texts: list[str]
    vectors: ShardVectors
    manifest: dict[str, Any]


def open_shards(out: Path, verify: bool = True) -> ShardSet:
    """Open a complete shard directory: ids, texts, and the vectors as memory maps."""
    out = Path(out)
    mpath = out / MANIFEST
    if not mpath.exists():
        raise IngestError(f"{out}: no {MANIFEST}; run the ingestion first")
    manifest = json.loads(mpath.read_text(encoding="utf-8"))
    if not manifest.get("complete"):
        raise IngestError(f"{mpath}: ingestion incomplete; run it again to resume")
    if verify and len(_verified_prefix(out, manifest)) != len(manifest["shards"]):
        raise IngestError(f"{mpath}: a shard does not match its sha256; run the ingestion again to rebuild it")
    ids: list[str] = []
    texts: list[str] = []
    maps = []
    for sh in manifest["shards"]:
        maps.append(np.load(out / sh["vectors"], mmap_mode="r"))
        with open(out / sh["docs"], encoding="utf-8") as fh:
            for line in fh:
                obj = json.loads(line)
                ids.append(obj["id"])
                texts.append(obj["text"])
    return ShardSet(ids, texts, ShardVectors(maps), manifest)
