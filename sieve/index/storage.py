"""Persistence of an index workspace: manifest, float16 vectors, ids, FAISS file, shipped artifacts.

A workspace holds ``manifest.json``, ``vectors.f16.npy``, ``ids.json`` and ``index.faiss``; every
file is written atomically and the manifest last, so a crash leaves a set the next open rebuilds.
The manifest carries the sha256 of every file, verified on every open: same-size
damage (zeroed rows in the vectors, bytes flipped in the FAISS file) is detected and rebuilt, never
searched. A manifest from before checksums is upgraded in place once the files agree with it.
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
from sieve.safe_io import file_sha256  # one checksum function (also re-exported here)
from sieve.types import Document

if TYPE_CHECKING:
    from sieve.models.protocols import Embedder

log = logging.getLogger("sieve.index")

MANIFEST_FORMAT = 2
"""2: the manifest has ``sha256`` per file (1: sizes and shapes only)."""
CHECKED_FILES = ("vectors.f16.npy", "ids.json")
"""Files whose checksum :func:`read_workspace` verifies (``index.faiss``: :func:`read_faiss`)."""


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_") or "model"


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
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


def read_workspace(ws: Path, upgrade: bool = True) -> tuple[dict[str, Any], np.ndarray, list[str]] | str | None:
    """(manifest, float16 vectors, ids); ``None`` if nothing is there; a reason string if broken
    (unreadable, inconsistent, or a file that fails its checksum). A manifest without checksums
    is upgraded in place when ``upgrade``, else rejected (shipped artifacts are never rewritten)."""
    mpath = ws / "manifest.json"
    if not mpath.exists():
        return None
    try:
        m = json.loads(mpath.read_text(encoding="utf-8"))
        sums = m.get("sha256") if isinstance(m, dict) else None
        if isinstance(sums, dict):
            for name in CHECKED_FILES:
                if file_sha256(ws / name) != sums.get(name):
                    return f"{name} fails its checksum (damaged in place)"
        ids = json.loads((ws / "ids.json").read_text(encoding="utf-8"))
        v16 = np.load(ws / "vectors.f16.npy", allow_pickle=False)
    except (OSError, ValueError) as e:
        return f"workspace files unreadable ({e})"
    if (not isinstance(m, dict) or not isinstance(ids, list) or v16.ndim != 2
            or v16.shape[0] != len(ids) or m.get("n_docs") != len(ids)):
        return "workspace files inconsistent (manifest, ids and vectors disagree)"
    if not isinstance(sums, dict):
        if not upgrade:
            return "no checksums in the manifest (older format)"
        m = upgrade_manifest(ws, m)
    return m, v16.astype(np.float16, copy=False), [str(i) for i in ids]


def upgrade_manifest(ws: Path, m: dict[str, Any]) -> dict[str, Any]:
    """Add the checksums of the present files to a format-1 manifest (best effort: a read-only
    directory, e.g. shipped artifacts, keeps its manifest and is verified by content instead)."""
    names = [n for n in (*CHECKED_FILES, "index.faiss") if (ws / n).exists()]
    m = {**m, "format": MANIFEST_FORMAT, "sha256": {n: file_sha256(ws / n) for n in names}}
    with contextlib.suppress(OSError):
        atomic_write(ws / "manifest.json", lambda p: p.write_text(json.dumps(m, indent=2), encoding="utf-8"))
    return m


def read_faiss(ws: Path, n: int, dim: int, manifest: dict[str, Any] | None = None) -> Any:
    """The FAISS index of the workspace, or ``None`` (missing, wrong shape or failing its checksum:
    :class:`VectorIndex` then rebuilds it from the verified vectors and rewrites it)."""
    import faiss

    want = ((manifest or {}).get("sha256") or {}).get("index.faiss")
    path = ws / "index.faiss"
    try:
        if want is not None and file_sha256(path) != want:
            log.warning("%s fails its checksum (damaged in place); rebuilding it from the vectors", path)
            return None
        idx = faiss.read_index(str(path))
        if idx.ntotal == n and idx.d == dim:
            return idx
    except (OSError, RuntimeError):
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
    manifest = {**manifest, "sha256": {n: file_sha256(ws / n) for n in (*CHECKED_FILES, "index.faiss")}}
    atomic_write(ws / "manifest.json", lambda p: p.write_text(json.dumps(manifest, indent=2), encoding="utf-8"))


def write_faiss(ws: Path, manifest: dict[str, Any], faiss_idx: Any) -> dict[str, Any]:
    """Rewrite a damaged ``index.faiss`` and its checksum; returns the updated manifest."""
    import faiss

    atomic_write(ws / "index.faiss", lambda p: faiss.write_index(faiss_idx, str(p)))
    manifest = {**manifest, "sha256": {**(manifest.get("sha256") or {}), "index.faiss": file_sha256(ws / "index.faiss")}}
    atomic_write(ws / "manifest.json", lambda p: p.write_text(json.dumps(manifest, indent=2), encoding="utf-8"))
    return manifest


def save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, arr, allow_pickle=False)


def read_shipped(adir: Path, model_id: str, chash: str, ids: list[str]) -> np.ndarray | None:
    """Shipped retriever vectors for this corpus and model, verified by checksum, corpus hash,
    model id and ids; ``None`` (with the reason logged) when any differs."""
    d = adir / safe_name(model_id)
    got = read_workspace(d, upgrade=False) if d.is_dir() else None
    if isinstance(got, str):
        log.warning("shipped artifacts in %s rejected: %s; embedding instead", d, got)
        return None
    if got is None:
        return None
    m, v16, sids = got
    if m.get("model_id") != model_id or m.get("corpus_hash") != chash or sids != ids:
        log.info("shipped artifacts in %s are stale (model or corpus differs); embedding instead", d)
        return None
    return v16
