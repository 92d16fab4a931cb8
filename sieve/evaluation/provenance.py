"""Provenance of a run: dataset file hash, package versions, loaded model ids, seeding."""
from __future__ import annotations

import hashlib
import random
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sieve.resources import Resources


def dataset_files_hash(path: str | Path) -> str:
    """sha256 over every file of a dataset (relative path + bytes), hidden entries (e.g. the
    ``.sieve`` workspace) skipped; a single-file dataset hashes that file."""
    p = Path(path)
    files = [p] if p.is_file() else sorted(
        f for f in p.rglob("*") if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts))
    h = hashlib.sha256()
    for f in files:
        rel = f.name if p.is_file() else str(f.relative_to(p))
        h.update(rel.encode("utf-8") + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def package_version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def loaded_model_ids(resources: "Resources") -> dict[str, str]:
    out = {}
    for role in ("retriever", "judge", "lm", "token_encoder", "llm"):
        m = getattr(resources, f"_{role}", None)
        mid = getattr(m, "model_id", None)
        if mid:
            out[role] = str(mid)
    return out


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)



def sieve_version() -> str:
    import sieve

    return getattr(sieve, "__version__", "unknown")
