"""Persistence of an index workspace: manifest, float16 vectors, ids, FAISS file, shipped artifacts.

A workspace holds ``manifest.json``, ``vectors.f16.npy``, ``ids.json`` and ``index.faiss``; every
file is written atomically and the manifest last, so a crash leaves a set the next open rebuilds.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from sieve.corpus.hashing import corpus_hash
from sieve.types import Document

if TYPE_CHECKING:
    from sieve.models.protocols import Embedder

log = logging.getLogger("sieve.index")

MANIFEST_FORMAT = 1


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_") or "model"


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
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
def workspace_lock(workspace: Path) -> Iterator[None]:
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


def make_manifest(embedder: "Embedder", docs: Sequence[Document], dim: int, chash: str | None = None) -> dict[str, Any]:
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


def read_workspace(ws: Path) -> tuple[dict[str, Any], np.ndarray, list[str]] | str | None:
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


def read_faiss(ws: Path, n: int, dim: int) -> Any:
    import faiss

    try:
        idx = faiss.read_index(str(ws / "index.faiss"))
        if idx.ntotal == n and idx.d == dim:
            return idx
    except RuntimeError:
        pass
    return None  # VectorIndex rebuilds it from the vectors


def write_workspace(ws: Path, manifest: dict[str, Any], v16: np.ndarray, ids: list[str], faiss_idx: Any) -> None:
    import faiss

    ws.mkdir(parents=True, exist_ok=True)
    # manifest last: a crash in between leaves an inconsistent set that the next open rebuilds
    with contextlib.suppress(FileNotFoundError):
        (ws / "manifest.json").unlink()
    atomic_write(ws / "vectors.f16.npy", lambda p: save_npy(p, v16))
    atomic_write(ws / "ids.json", lambda p: p.write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8"))
    atomic_write(ws / "index.faiss", lambda p: faiss.write_index(faiss_idx, str(p)))
    atomic_write(ws / "manifest.json", lambda p: p.write_text(json.dumps(manifest, indent=2), encoding="utf-8"))


def save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, arr, allow_pickle=False)


def read_shipped(adir: Path, model_id: str, chash: str, ids: list[str]) -> np.ndarray | None:
    d = adir / safe_name(model_id)
    got = read_workspace(d) if d.is_dir() else None
    if not isinstance(got, tuple):
        return None
    m, v16, sids = got
    if m.get("model_id") != model_id or m.get("corpus_hash") != chash or sids != ids:
        log.info("shipped artifacts in %s are stale (model or corpus differs); embedding instead", d)
        return None
    return v16
