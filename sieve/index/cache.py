"""The per-document artifact cache: SQLite (WAL) with an in-memory LRU in front (docs/design.md).

Query-independent per-document arrays (retriever / judge embeddings, LM NLL traces, token states)
keyed by (kind, model id, content hash). Safe to share between processes.
"""
from __future__ import annotations

import io
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from sieve.types import content_hash

if TYPE_CHECKING:
    from sieve.config import SieveConfig


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

    ``kind`` names the artifact (``"embedding"``, ``"nll@<LM_TRACE_TOKENS>"``,
    ``"states@<TOKEN_STATE_TOKENS>"``, see :mod:`sieve.constants`). Use
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
                self._insert(rows)
            for text, arr in zip(texts, stored):
                self._remember((kind, model_id, content_hash(text)), arr)
        return stored

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        """Write artifact rows in one transaction (caller holds ``self._lock``)."""
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

    def put_keys(self, kind: str, model_id: str, keys: Sequence[str], arrays: Sequence[np.ndarray]) -> None:
        """Store arrays under precomputed content-hash ``keys`` (shipped artifact packs,
        :mod:`sieve.index.shipped`); stored as given (float16 comes back as float32)."""
        if len(keys) != len(arrays):
            raise ValueError(f"put_keys: {len(keys)} keys but {len(arrays)} arrays")
        now = time.time()
        values = [_readonly(np.array(a)) for a in arrays]
        with self._lock:
            if self.path is not None and keys:
                rows = [(kind, model_id, k, _to_blob(np.asarray(a)), int(np.asarray(a).nbytes), now)
                        for k, a in zip(keys, arrays)]
                self._insert(rows)
            for k, v in zip(keys, values):
                self._remember((kind, model_id, k), v)

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
