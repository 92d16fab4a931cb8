"""Embeddings, the persistent FAISS index and the per-document artifact cache (DESIGN.md).

* :class:`ArtifactCache` – query-independent per-document arrays (retriever / judge embeddings,
  LM NLL traces, token states) keyed by (kind, model id, content hash), in SQLite (WAL) with an
  in-memory LRU in front. Safe to share between processes.
* :class:`VectorIndex` – a corpus embedded once with the retriever, exact inner-product search
  (FAISS ``IndexFlatIP`` on L2-normalised float32 vectors; stored as float16, ALGORITHMS.md §6.1),
  persisted in a workspace directory with a manifest. Reopening reuses it; a changed corpus or
  model is detected and rebuilt; appended documents are embedded alone. Attack conditions are
  in-memory views (:meth:`VectorIndex.with_documents`) that never re-embed the base corpus.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from sieve.corpus import Dataset, corpus_hash
from sieve.types import Document, RankedDocument, Ranking, content_hash

if TYPE_CHECKING:
    from sieve.config import SieveConfig
    from sieve.models.protocols import Embedder
    from sieve.resources import Resources

log = logging.getLogger("sieve.index")

EMBED_BATCH = 32
"""Documents per ``Embedder.encode`` call while indexing."""
TIE_SLACK = 8
"""Extra FAISS candidates fetched so that ties at the k-th place are resolved by the stable rule."""
MANIFEST_FORMAT = 1


# =============================================================================================
# ArtifactCache
# =============================================================================================
@dataclass
class CacheStats:
    kind: str
    model_id: str
    rows: int
    bytes: int


def _to_blob(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def _from_blob(blob: bytes) -> np.ndarray:
    return np.load(io.BytesIO(blob), allow_pickle=False)


def _readonly(arr: np.ndarray) -> np.ndarray:
    """Values handed out by the cache; float16 storage is returned as float32. Read-only so that
    a caller cannot corrupt the shared copy by mutating it in place."""
    arr = np.asarray(arr)
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    arr.setflags(write=False)
    return arr


class ArtifactCache:
    """Per-document, query-independent arrays keyed by ``(kind, model_id, content_hash(text))``.

    ``kind`` names the artifact (``"embedding"``, ``"nll@512"``, ``"states@256"``, ...). Use
    :meth:`open` for the persistent SQLite store (WAL mode, several processes may read and write)
    or :meth:`in_memory` for a process-local dict (tests, throw-away runs).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, lru_bytes: int = 512 * 2**20):
        self.path = Path(path) if path is not None else None
        self.lru_bytes = lru_bytes
        self._lru: OrderedDict[tuple[str, str, str], np.ndarray] = OrderedDict()
        self._lru_size = 0
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._connection()

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def in_memory(cls) -> "ArtifactCache":
        """A process-local cache with no eviction and no file."""
        return cls(None)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "ArtifactCache":
        """The persistent cache at ``path`` (created if missing)."""
        return cls(path)

    @classmethod
    def default(cls, config: "SieveConfig") -> "ArtifactCache":
        """The global on-disk cache of a configuration: ``<cache_dir>/artifacts.sqlite``."""
        return cls.open(Path(config.cache_dir) / "artifacts.sqlite")

    def _connection(self) -> sqlite3.Connection:
        # a connection must not cross a fork: reconnect in a child process
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=60000")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS artifacts (kind TEXT NOT NULL, model_id TEXT NOT NULL, "
                "key TEXT NOT NULL, data BLOB NOT NULL, nbytes INTEGER NOT NULL, created REAL NOT NULL)"
            )
            conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS artifacts_key ON artifacts (kind, model_id, key)")
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "ArtifactCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:  # picklable: reconnects on the other side
        return {"path": self.path, "lru_bytes": self.lru_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["lru_bytes"])  # type: ignore[misc]

    # -- in-memory layer -----------------------------------------------------------------------
    def _remember(self, key: tuple[str, str, str], arr: np.ndarray) -> None:
        if key in self._lru:
            self._lru_size -= self._lru.pop(key).nbytes
        self._lru[key] = arr
        self._lru_size += arr.nbytes
        if self.path is None:
            return  # in-memory mode: the dict *is* the store
        while self._lru_size > self.lru_bytes and len(self._lru) > 1:
            _, old = self._lru.popitem(last=False)
            self._lru_size -= old.nbytes

    # -- reads ---------------------------------------------------------------------------------
    def get_many(self, kind: str, model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Cached arrays for content-hash ``keys`` (missing keys are absent from the result)."""
        out: dict[str, np.ndarray] = {}
        with self._lock:
            missing: list[str] = []
            for k in dict.fromkeys(keys):
                arr = self._lru.get((kind, model_id, k))
                if arr is not None:
                    self._lru.move_to_end((kind, model_id, k))
                    out[k] = arr
                else:
                    missing.append(k)
            if missing and self.path is not None:
                conn = self._connection()
                for i in range(0, len(missing), 500):
                    chunk = missing[i : i + 500]
                    marks = ",".join("?" * len(chunk))
                    rows = conn.execute(
                        f"SELECT key, data FROM artifacts WHERE kind=? AND model_id=? AND key IN ({marks})",
                        (kind, model_id, *chunk),
                    ).fetchall()
                    for k, blob in rows:
                        arr = _readonly(_from_blob(blob))
                        out[k] = arr
                        self._remember((kind, model_id, k), arr)
        return out

    def get(self, kind: str, model_id: str, text: str) -> np.ndarray | None:
        """The cached array for ``text`` or ``None``."""
        key = content_hash(text)
        return self.get_many(kind, model_id, [key]).get(key)

    # -- writes --------------------------------------------------------------------------------
    def put_many(self, kind: str, model_id: str, texts: Sequence[str], arrays: Sequence[np.ndarray],
                 store_dtype: Any = None) -> list[np.ndarray]:
        """Store one array per text (``store_dtype=np.float16`` halves storage; such values come
        back as float32). Returns the values exactly as later reads will return them."""
        if len(texts) != len(arrays):
            raise ValueError(f"put_many: {len(texts)} texts but {len(arrays)} arrays")
        stored: list[np.ndarray] = []
        rows: list[tuple[str, str, str, bytes, int, float]] = []
        now = time.time()
        for text, arr in zip(texts, arrays):
            a = np.asarray(arr)
            if store_dtype is not None:
                a = a.astype(store_dtype)
            if self.path is not None:
                rows.append((kind, model_id, content_hash(text), _to_blob(a), int(a.nbytes), now))
            stored.append(_readonly(a.copy()))
        with self._lock:
            if rows:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(
                        "INSERT OR REPLACE INTO artifacts (kind, model_id, key, data, nbytes, created) "
                        "VALUES (?, ?, ?, ?, ?, ?)", rows)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            for text, arr in zip(texts, stored):
                self._remember((kind, model_id, content_hash(text)), arr)
        return stored

    def get_or_compute(self, kind: str, model_id: str, texts: Sequence[str],
                       compute_batch: Callable[[list[str]], Sequence[np.ndarray]],
                       store_dtype: Any = None) -> list[np.ndarray]:
        """One array per text, in order. Misses are computed in ONE ``compute_batch(miss_texts)``
        call (equal texts computed once) and stored; hits are read from memory or SQLite."""
        keys = [content_hash(t) for t in texts]
        found = self.get_many(kind, model_id, keys)
        miss_texts: dict[str, str] = {}
        for k, t in zip(keys, texts):
            if k not in found and k not in miss_texts:
                miss_texts[k] = t
        if miss_texts:
            batch = list(miss_texts.values())
            computed = list(compute_batch(batch))
            if len(computed) != len(batch):
                raise ValueError(f"compute_batch for {kind!r}/{model_id!r} returned {len(computed)} "
                                 f"arrays for {len(batch)} texts")
            for k, arr in zip(miss_texts, self.put_many(kind, model_id, batch, computed, store_dtype)):
                found[k] = arr
        return [found[k] for k in keys]

    # -- maintenance ---------------------------------------------------------------------------
    def stats(self) -> list[CacheStats]:
        """Rows and bytes per (kind, model id)."""
        with self._lock:
            if self.path is None:
                agg: dict[tuple[str, str], list[int]] = {}
                for (kind, model_id, _), arr in self._lru.items():
                    a = agg.setdefault((kind, model_id), [0, 0])
                    a[0] += 1
                    a[1] += int(arr.nbytes)
                return [CacheStats(k, m, r, b) for (k, m), (r, b) in sorted(agg.items())]
            rows = self._connection().execute(
                "SELECT kind, model_id, COUNT(*), SUM(nbytes) FROM artifacts GROUP BY kind, model_id "
                "ORDER BY kind, model_id").fetchall()
            return [CacheStats(k, m, int(r), int(b or 0)) for k, m, r, b in rows]

    def clear_memory(self) -> None:
        """Drop the in-memory LRU (persistent mode only; benchmarks use it for cold reads)."""
        with self._lock:
            if self.path is not None:
                self._lru.clear()
                self._lru_size = 0


# =============================================================================================
# VectorIndex
# =============================================================================================
@dataclass
class BuildReport:
    """What :meth:`VectorIndex.open_or_build` did: ``action`` is one of ``built``, ``reused``,
    ``appended``, ``rebuilt`` or ``copied`` (from shipped artifacts); ``reason`` says why."""

    action: str
    reason: str
    n_docs: int
    n_embedded: int
    seconds: float
    workspace: Path | None = None


def _finalise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float16 storage copy, float32 L2-normalised working copy). Every vector goes through the
    same float16 round trip, so a fresh build, a reopened index and cached extras agree exactly."""
    v16 = np.asarray(vectors, dtype=np.float32).astype(np.float16)
    return v16, _normalise(v16)


def _normalise(v16: np.ndarray) -> np.ndarray:
    v = np.array(v16, dtype=np.float32, copy=True, order="C")
    norms = np.sqrt(np.einsum("ij,ij->i", v, v))
    norms[norms == 0] = 1.0
    v /= norms[:, None]
    return v


def _flat_ip(vectors: np.ndarray) -> Any:
    import faiss

    idx = faiss.IndexFlatIP(int(vectors.shape[1]))
    if len(vectors):
        idx.add(vectors)
    return idx


@contextlib.contextmanager
def _single_thread_faiss() -> Iterator[None]:
    """One query is faster on one OpenMP thread (measured: 3 ms vs 22 ms CPU for 20k x 768 on a
    busy 2-core machine, where OpenMP threads spin); batch callers keep FAISS's own setting."""
    import faiss

    prev = faiss.omp_get_max_threads()
    if prev == 1:
        yield
        return
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(prev)


def _embed_documents(docs: Sequence[Document], embedder: "Embedder", cache: ArtifactCache | None,
                     progress: bool, desc: str) -> np.ndarray:
    """Retriever passage embeddings of ``Document.model_text()``, batched, with a progress bar.
    Through ``cache`` (kind ``"embedding"``, float16) when given: only misses are encoded."""
    from tqdm.auto import tqdm

    def encode(texts: list[str]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        with tqdm(total=len(texts), desc=desc, unit="doc", disable=not progress or not texts,
                  leave=False) as bar:
            for i in range(0, len(texts), EMBED_BATCH):
                chunk = texts[i : i + EMBED_BATCH]
                out.extend(np.asarray(embedder.encode(chunk, kind="passage", batch_size=EMBED_BATCH), np.float32))
                bar.update(len(chunk))
        return out

    texts = [d.model_text() for d in docs]
    if not texts:
        return np.zeros((0, embedder.dim), np.float32)
    if cache is None:
        return np.vstack(encode(texts))
    return np.vstack(cache.get_or_compute("embedding", embedder.model_id, texts, encode, store_dtype=np.float16))


def _safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_") or "model"


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _workspace_lock(workspace: Path) -> Iterator[None]:
    """Exclusive lock so two processes never build the same workspace at once."""
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(workspace / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class VectorIndex:
    """Retriever vectors of a document list with exact inner-product search.

    ``documents``/``ids``/``vectors`` cover the base corpus followed by any documents added with
    :meth:`with_documents`. ``vectors`` are float32, L2-normalised (float16 on disk).
    """

    def __init__(self, documents: Sequence[Document], vectors: np.ndarray, embedder: "Embedder | None",
                 manifest: dict[str, Any], workspace: Path | None = None, cache: ArtifactCache | None = None,
                 *, _faiss: Any = None, _n_base: int | None = None,
                 build_report: BuildReport | None = None) -> None:
        self.documents: list[Document] = list(documents)
        self.ids: list[str] = [d.id for d in self.documents]
        self._all = np.ascontiguousarray(vectors, dtype=np.float32)
        if self._all.shape[0] != len(self.documents):
            raise ValueError(f"{len(self.documents)} documents but {self._all.shape[0]} vectors")
        self.embedder = embedder
        self.manifest = dict(manifest)
        self.workspace = workspace
        self.cache = cache
        self.build_report = build_report
        self._n_base = len(self.documents) if _n_base is None else _n_base
        self._faiss = _faiss if _faiss is not None else _flat_ip(self._all[: self._n_base])
        self._pos = {i: p for p, i in enumerate(self.ids)}
        if len(self._pos) != len(self.ids):
            seen: set[str] = set()
            dup = next(i for i in self.ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ValueError(f"duplicate document id {dup!r} in the index")
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_lock = threading.Lock()

    # -- basic accessors -----------------------------------------------------------------------
    @property
    def vectors(self) -> np.ndarray:
        return self._all

    @property
    def model_id(self) -> str:
        return str(self.manifest.get("model_id", ""))

    @property
    def dim(self) -> int:
        return int(self._all.shape[1])

    @property
    def n_base(self) -> int:
        """Number of base-corpus documents (the rest were added by :meth:`with_documents`)."""
        return self._n_base

    def __len__(self) -> int:
        return len(self.documents)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._pos

    def vector_of(self, doc_id: str) -> np.ndarray:
        try:
            return self._all[self._pos[doc_id]]
        except KeyError:
            raise KeyError(f"document id {doc_id!r} is not in the index") from None

    def document(self, doc_id: str) -> Document:
        try:
            return self.documents[self._pos[doc_id]]
        except KeyError:
            raise KeyError(f"document id {doc_id!r} is not in the index") from None

    # -- building / opening --------------------------------------------------------------------
    @classmethod
    def build(cls, documents: Sequence[Document], embedder: "Embedder", progress: bool = True,
              cache: ArtifactCache | None = None) -> "VectorIndex":
        """An in-memory index (nothing written)."""
        t0 = time.perf_counter()
        docs = list(documents)
        _, v32 = _finalise(_embed_documents(docs, embedder, cache, progress, "embedding corpus"))
        manifest = _manifest(embedder, docs, v32.shape[1])
        rep = BuildReport("built", "in-memory index", len(docs), len(docs), time.perf_counter() - t0)
        return cls(docs, v32, embedder, manifest, None, cache, build_report=rep)

    @classmethod
    def open_or_build(cls, documents: Sequence[Document], embedder: "Embedder", workspace: str | os.PathLike[str],
                      progress: bool = True, cache: ArtifactCache | None = None,
                      artifacts_dir: str | os.PathLike[str] | None = None) -> "VectorIndex":
        """Open the index persisted in ``workspace`` or (re)build it.

        * same model id and corpus hash → reuse (nothing embedded);
        * same model, old corpus is a prefix of the new one → embed only the appended documents;
        * different model id or corpus → rebuild (the reason is logged and in ``build_report``);
        * nothing persisted yet and ``artifacts_dir/<model>/`` holds matching shipped vectors
          (verified by corpus hash and model id) → copy them.
        """
        t0 = time.perf_counter()
        ws = Path(workspace)
        docs = list(documents)
        if not docs:
            raise ValueError("cannot index an empty corpus")
        ids = [d.id for d in docs]
        if len(set(ids)) != len(ids):
            raise ValueError("document ids must be unique")
        full_hash = corpus_hash(docs)
        with _workspace_lock(ws):
            old = _read_workspace(ws)
            action, reason, n_embedded = "built", "no index in the workspace yet", len(docs)
            v16: np.ndarray | None = None
            faiss_idx = None
            if isinstance(old, str):
                action, reason = "rebuilt", old
            elif old is not None:
                m, old16, old_ids = old
                if m.get("model_id") != embedder.model_id:
                    action, reason = "rebuilt", f"retriever changed ({m.get('model_id')} -> {embedder.model_id})"
                elif m.get("corpus_hash") == full_hash and old_ids == ids:
                    action, reason, n_embedded, v16 = "reused", "corpus and model unchanged", 0, old16
                    faiss_idx = _read_faiss(ws, len(docs), old16.shape[1])
                elif (len(old_ids) < len(docs) and old_ids == ids[: len(old_ids)]
                      and corpus_hash(docs[: len(old_ids)]) == m.get("corpus_hash")):
                    new = docs[len(old_ids):]
                    new16, _ = _finalise(_embed_documents(new, embedder, cache, progress, "embedding new documents"))
                    v16 = np.concatenate([old16, new16]) if len(new16) else old16
                    action, reason, n_embedded = "appended", f"{len(new)} documents appended", len(new)
                else:
                    action, reason = "rebuilt", (f"corpus changed ({m.get('n_docs')} -> {len(docs)} documents, "
                                                 f"content hash differs)")
            if v16 is None and old is None and artifacts_dir is not None:
                shipped = _read_shipped(Path(artifacts_dir), embedder.model_id, full_hash, ids)
                if shipped is not None:
                    v16, action, reason, n_embedded = shipped, "copied", f"shipped vectors in {artifacts_dir}", 0
            if action == "rebuilt":
                log.warning("rebuilding index in %s: %s", ws, reason)
            if v16 is None:
                v16, _ = _finalise(_embed_documents(docs, embedder, cache, progress, "embedding corpus"))
            v32 = _normalise(v16)
            manifest = _manifest(embedder, docs, v32.shape[1], full_hash)
            if action != "reused":
                faiss_idx = _flat_ip(v32)
                _write_workspace(ws, manifest, v16, ids, faiss_idx)
            else:
                manifest = {**manifest, "created": old[0].get("created", manifest["created"])}  # type: ignore[index]
        rep = BuildReport(action, reason, len(docs), n_embedded, time.perf_counter() - t0, ws)
        log.info("index %s: %s (%d documents, %d embedded)", action, reason, len(docs), n_embedded)
        return cls(docs, v32, embedder, manifest, ws, cache, _faiss=faiss_idx, build_report=rep)

    # -- attack conditions ---------------------------------------------------------------------
    def with_documents(self, extra: Iterable[Document], cache: ArtifactCache | None = None,
                       progress: bool = False) -> "VectorIndex":
        """A new in-memory view: this index plus ``extra`` documents appended. Their vectors come
        from the cache (kind ``"embedding"``, retriever model id), computed once; the base corpus
        is never re-embedded. A duplicate id raises ``ValueError``."""
        extra = list(extra)
        seen: set[str] = set()
        for d in extra:
            if d.id in self._pos:
                raise ValueError(f"document id {d.id!r} is already in the index")
            if d.id in seen:
                raise ValueError(f"document id {d.id!r} appears twice in the added documents")
            seen.add(d.id)
        if self.embedder is None:
            raise ValueError("this index has no embedder; cannot embed new documents")
        cache = cache or self.cache
        if cache is None:
            cache = self.cache = ArtifactCache.in_memory()
        _, v32 = _finalise(_embed_documents(extra, self.embedder, cache, progress, "embedding added documents"))
        vectors = np.concatenate([self._all, v32]) if len(extra) else self._all
        view = VectorIndex(self.documents + extra, vectors, self.embedder, self.manifest, self.workspace,
                           cache, _faiss=self._faiss, _n_base=self._n_base, build_report=self.build_report)
        view._query_cache, view._query_lock = self._query_cache, self._query_lock  # same embedder
        return view

    # -- search --------------------------------------------------------------------------------
    def query_vector(self, query: str | np.ndarray) -> np.ndarray:
        """The normalised query embedding (``kind="query"``); recent queries are memoised."""
        if not isinstance(query, str):
            q = np.asarray(query, dtype=np.float32).reshape(-1)
            if q.shape[0] != self.dim:
                raise ValueError(f"query vector has dimension {q.shape[0]}, index has {self.dim}")
            return q
        with self._query_lock:
            hit = self._query_cache.get(query)
            if hit is not None:
                self._query_cache.move_to_end(query)
                return hit
        if self.embedder is None:
            raise ValueError("this index has no embedder; pass a query vector")
        q = np.asarray(self.embedder.encode([query], kind="query"), dtype=np.float32)[0]
        q.setflags(write=False)
        with self._query_lock:
            self._query_cache[query] = q
            if len(self._query_cache) > 256:
                self._query_cache.popitem(last=False)
        return q

    def search(self, query: str | np.ndarray, k: int, exclude: set[str] | frozenset[str] = frozenset()) -> list[tuple[str, float]]:
        """Top-``k`` ``(id, score)`` by cosine similarity, descending. Ids in ``exclude`` are removed
        before the top-k is taken. Ties: clean before poison, then index order (ALGORITHMS.md §6.1)."""
        if k <= 0:
            return []
        q = self.query_vector(query)
        positions: list[int] = []
        if self._n_base:
            n_ex = sum(1 for i in exclude if self._pos.get(i, self._n_base) < self._n_base)
            kb = min(self._n_base, k + n_ex + TIE_SLACK)
            with _single_thread_faiss():
                _, idx = self._faiss.search(q.reshape(1, -1), kb)
            positions = [int(p) for p in idx[0] if p >= 0]
        positions.extend(range(self._n_base, len(self.documents)))
        positions = [p for p in positions if self.ids[p] not in exclude]
        if not positions:
            return []
        # rescore every candidate with one expression so base and added documents compare exactly
        scores = np.einsum("ij,j->i", self._all[positions], q)
        cands = [(float(s), p) for s, p in zip(scores, positions) if np.isfinite(s)]
        cands.sort(key=lambda c: (-c[0], self.documents[c[1]].poison, c[1]))
        return [(self.ids[p], s) for s, p in cands[:k]]

    def rank(self, query: str, k: int, query_id: str = "", condition: str = "clean",
             correct_answers: Sequence[str] = (), target_answer: str = "",
             exclude: set[str] | frozenset[str] = frozenset()) -> Ranking:
        """A :class:`~sieve.types.Ranking` of the top-``k`` (ranks 1..k, poison flags from the documents)."""
        hits = self.search(query, k, exclude)
        docs = []
        for r, (doc_id, score) in enumerate(hits, start=1):
            d = self.documents[self._pos[doc_id]]
            docs.append(RankedDocument(d.id, d.text, r, score, d.poison, d.title))
        return Ranking(query, docs, query_id, condition, tuple(correct_answers), target_answer)


# -- persistence helpers ----------------------------------------------------------------------
def _manifest(embedder: "Embedder", docs: Sequence[Document], dim: int, chash: str | None = None) -> dict[str, Any]:
    import sieve

    return {
        "format": MANIFEST_FORMAT,
        "model_id": embedder.model_id,
        "dim": int(dim),
        "corpus_hash": chash or corpus_hash(docs),
        "n_docs": len(docs),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sieve_version": sieve.__version__,
        "normalised": True,
    }


def _read_workspace(ws: Path) -> tuple[dict[str, Any], np.ndarray, list[str]] | str | None:
    """(manifest, float16 vectors, ids); ``None`` if nothing is there; a reason string if broken."""
    mpath = ws / "manifest.json"
    if not mpath.exists():
        return None
    try:
        m = json.loads(mpath.read_text(encoding="utf-8"))
        ids = json.loads((ws / "ids.json").read_text(encoding="utf-8"))
        v16 = np.load(ws / "vectors.f16.npy", allow_pickle=False)
    except (OSError, ValueError) as e:
        return f"workspace files unreadable ({e})"
    if (not isinstance(m, dict) or not isinstance(ids, list) or v16.ndim != 2
            or v16.shape[0] != len(ids) or m.get("n_docs") != len(ids)):
        return "workspace files inconsistent (manifest, ids and vectors disagree)"
    return m, v16.astype(np.float16, copy=False), [str(i) for i in ids]


def _read_faiss(ws: Path, n: int, dim: int) -> Any:
    import faiss

    try:
        idx = faiss.read_index(str(ws / "index.faiss"))
        if idx.ntotal == n and idx.d == dim:
            return idx
    except RuntimeError:
        pass
    return None  # VectorIndex rebuilds it from the vectors


def _write_workspace(ws: Path, manifest: dict[str, Any], v16: np.ndarray, ids: list[str], faiss_idx: Any) -> None:
    import faiss

    ws.mkdir(parents=True, exist_ok=True)
    # manifest last: a crash in between leaves an inconsistent set that the next open rebuilds
    with contextlib.suppress(FileNotFoundError):
        (ws / "manifest.json").unlink()
    _atomic_write(ws / "vectors.f16.npy", lambda p: _save_npy(p, v16))
    _atomic_write(ws / "ids.json", lambda p: p.write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8"))
    _atomic_write(ws / "index.faiss", lambda p: faiss.write_index(faiss_idx, str(p)))
    _atomic_write(ws / "manifest.json", lambda p: p.write_text(json.dumps(manifest, indent=2), encoding="utf-8"))


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, arr, allow_pickle=False)


def _read_shipped(adir: Path, model_id: str, chash: str, ids: list[str]) -> np.ndarray | None:
    d = adir / _safe_name(model_id)
    got = _read_workspace(d) if d.is_dir() else None
    if not isinstance(got, tuple):
        return None
    m, v16, sids = got
    if m.get("model_id") != model_id or m.get("corpus_hash") != chash or sids != ids:
        log.info("shipped artifacts in %s are stale (model or corpus differs); embedding instead", d)
        return None
    return v16


def export_index_artifacts(index: VectorIndex, directory: str | os.PathLike[str]) -> Path:
    """Write the base corpus vectors, ids and manifest to ``directory/<model id>/`` (e.g.
    ``demo_data/.artifacts``) so that :func:`open_index` can reuse them instead of embedding."""
    out = Path(directory) / _safe_name(index.model_id)
    out.mkdir(parents=True, exist_ok=True)
    n = index.n_base
    v16 = index.vectors[:n].astype(np.float16)
    if index.workspace is not None and (index.workspace / "vectors.f16.npy").exists():
        v16 = np.load(index.workspace / "vectors.f16.npy", allow_pickle=False)  # exact stored copy
    manifest = {**index.manifest, "n_docs": n}
    _atomic_write(out / "vectors.f16.npy", lambda p: _save_npy(p, v16))
    _atomic_write(out / "ids.json", lambda p: p.write_text(json.dumps(index.ids[:n], ensure_ascii=False),
                                                           encoding="utf-8"))
    _atomic_write(out / "manifest.json", lambda p: p.write_text(json.dumps(manifest, indent=2), encoding="utf-8"))
    return out


# =============================================================================================
# conveniences
# =============================================================================================
def workspace_dir(dataset: Dataset | str | os.PathLike[str], model_id: str, config: "SieveConfig") -> Path:
    """Where the index of ``dataset`` for retriever ``model_id`` lives: ``config.workspace/<model>``
    if set, else ``<cache_dir>/workspaces/<dataset name>-<hash of its absolute path>/<model>``.
    Never inside the user's dataset directory."""
    model = _safe_name(model_id)
    if config.workspace is not None:
        return Path(config.workspace) / model
    path = dataset.path if isinstance(dataset, Dataset) else Path(dataset)
    name = dataset.name if isinstance(dataset, Dataset) else Path(dataset).stem
    absolute = str(Path(path).expanduser().resolve())
    short = hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:10]
    return Path(config.cache_dir) / "workspaces" / f"{_safe_name(name)}-{short}" / model


def open_index(dataset: Dataset, resources: "Resources", progress: bool = True) -> VectorIndex:
    """The persisted retriever index of ``dataset`` (built or reused) using ``resources.retriever``,
    its config (workspace) and its artifact cache; shipped ``<dataset>/.artifacts`` are reused."""
    embedder = resources.retriever
    ws = workspace_dir(dataset, embedder.model_id, resources.config)
    adir = Path(dataset.path) / ".artifacts" if Path(dataset.path).is_dir() else None
    return VectorIndex.open_or_build(dataset.documents, embedder, ws, progress=progress,
                                     cache=resources.cache, artifacts_dir=adir)


PRECOMPUTE_KINDS = ("retriever", "judge", "lm", "states")


def precompute_artifacts(documents: Sequence[Document], resources: "Resources",
                         kinds: Sequence[str] = ("judge",), progress: bool = True,
                         lm_max_tokens: int = 512, states_max_tokens: int = 256) -> dict[str, int]:
    """Fill the artifact cache with query-independent per-document features so that query-time
    defenses only read them. Keys follow the :class:`~sieve.resources.Resources` helpers on
    ``Document.text`` (what :class:`~sieve.types.RankedDocument` carries): ``judge`` →
    ``judge_embeddings``, ``lm`` → ``lm_trace``, ``states`` → ``token_states``; ``retriever`` →
    retriever embeddings of ``model_text()`` (used by :meth:`VectorIndex.with_documents`).
    Returns the number of documents processed per kind."""
    from tqdm.auto import tqdm

    bad = [k for k in kinds if k not in PRECOMPUTE_KINDS]
    if bad:
        raise ValueError(f"unknown artifact kind(s) {bad}; choose from {PRECOMPUTE_KINDS}")
    docs = list(documents)
    texts = [d.text for d in docs]
    done: dict[str, int] = {}
    for kind in kinds:
        if kind == "retriever":
            _embed_documents(docs, resources.retriever, resources.cache, progress, "retriever embeddings")
        elif kind == "judge":
            with tqdm(total=len(texts), desc="judge embeddings", unit="doc", disable=not progress, leave=False) as bar:
                for i in range(0, len(texts), 64):
                    resources.judge_embeddings(texts[i : i + 64])
                    bar.update(len(texts[i : i + 64]))
        else:
            fn = (lambda t: resources.lm_trace(t, lm_max_tokens)) if kind == "lm" else \
                 (lambda t: resources.token_states(t, states_max_tokens))
            label = "LM surprisal traces" if kind == "lm" else "token states"
            for t in tqdm(texts, desc=label, unit="doc", disable=not progress, leave=False):
                fn(t)
        done[kind] = len(docs)
    return done


__all__ = [
    "ArtifactCache", "BuildReport", "CacheStats", "VectorIndex", "export_index_artifacts", "open_index",
    "precompute_artifacts", "workspace_dir",
]
