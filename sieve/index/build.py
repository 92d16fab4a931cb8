"""Opening the persisted index of a dataset: where its workspace lives, and exporting shipped vectors.

:func:`open_index` needs only a retriever, a configuration and an artifact cache; it takes any
object with those three attributes (:class:`IndexResources`, e.g. a :class:`sieve.resources.Resources`)
so that this package never imports :mod:`sieve.resources`.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sieve.corpus.dataset import Dataset
from sieve.index.cache import ArtifactCache
from sieve.index.shipped import PACK_DIR, seed_from_pack
from sieve.index.storage import CHECKED_FILES, MANIFEST_FORMAT, atomic_write, file_sha256, safe_name, save_npy
from sieve.index.vector import VectorIndex

if TYPE_CHECKING:
    from sieve.config import SieveConfig
    from sieve.models.protocols import Embedder


class IndexResources(Protocol):
    """What :func:`open_index` uses of a :class:`sieve.resources.Resources`."""

    @property
    def config(self) -> "SieveConfig": ...

    @property
    def retriever(self) -> "Embedder": ...

    @property
    def cache(self) -> ArtifactCache: ...


def export_index_artifacts(index: VectorIndex, directory: str | os.PathLike[str]) -> Path:
    """Write the base corpus vectors, ids and manifest to ``directory/<model id>/`` (e.g.
    ``demo_data/.artifacts``) so that :func:`open_index` can reuse them instead of embedding."""
    out = Path(directory) / safe_name(index.model_id)
    out.mkdir(parents=True, exist_ok=True)
    n = index.n_base
    v16 = index.vectors[:n].astype(np.float16)
    if index.workspace is not None and (index.workspace / "vectors.f16.npy").exists():
        v16 = np.load(index.workspace / "vectors.f16.npy", allow_pickle=False)  # exact stored copy
    manifest = {**index.manifest, "n_docs": n, "format": MANIFEST_FORMAT}
    atomic_write(out / "vectors.f16.npy", lambda p: save_npy(p, v16))
    atomic_write(out / "ids.json", lambda p: p.write_text(json.dumps(index.ids[:n], ensure_ascii=False),
                                                          encoding="utf-8"))
    manifest["sha256"] = {name: file_sha256(out / name) for name in CHECKED_FILES}
    atomic_write(out / "manifest.json", lambda p: p.write_text(json.dumps(manifest, indent=2), encoding="utf-8"))
    return out


def workspace_dir(dataset: Dataset | str | os.PathLike[str], model_id: str, config: "SieveConfig") -> Path:
    """Where the index of ``dataset`` for retriever ``model_id`` lives: ``config.workspace/<model>``
    if set, else ``<cache_dir>/workspaces/<dataset name>-<hash of its absolute path>/<model>``.
    Never inside the user's dataset directory."""
    model = safe_name(model_id)
    if config.workspace is not None:
        return Path(config.workspace) / model
    path = dataset.path if isinstance(dataset, Dataset) else Path(dataset)
    name = dataset.name if isinstance(dataset, Dataset) else Path(dataset).stem
    absolute = str(Path(path).expanduser().resolve())
    short = hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:10]
    return Path(config.cache_dir) / "workspaces" / f"{safe_name(name)}-{short}" / model


def open_index(dataset: Dataset, resources: IndexResources, progress: bool = True) -> VectorIndex:
    """The persisted retriever index of ``dataset`` (built or reused) using ``resources.retriever``,
    its config (workspace) and its artifact cache; shipped ``<dataset>/.artifacts`` are reused:
    the retriever vectors, and the artifact pack (:mod:`sieve.index.shipped`) seeds the cache."""
    embedder = resources.retriever
    ws = workspace_dir(dataset, embedder.model_id, resources.config)
    adir = Path(dataset.path) / ".artifacts" if Path(dataset.path).is_dir() else None
    index = VectorIndex.open_or_build(dataset.documents, embedder, ws, progress=progress,
                                      cache=resources.cache, artifacts_dir=adir)
    if adir is not None and (adir / PACK_DIR).is_dir() and hasattr(resources, "artifact_model_ids"):
        seed_from_pack(dataset, resources)
    return index
