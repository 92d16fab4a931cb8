"""Real embedded stores (Chroma persistent client, Qdrant local mode, LanceDB) filled by the tests
with the demo corpus plus one attack family; never a mock of a store."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from sieve.corpus import load_dataset
from sieve.models.tiny import HashingEmbedder
from sieve.stores.fill import fill_store

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo_data"
FAMILY = "script"            # integrity-branch poisons: RSG flags them with any retriever
STORES = ("chroma", "qdrant", "lancedb")


def source(scheme: str, where: Path, name: str = "demo", **opts: str) -> str:
    key = "table" if scheme == "lancedb" else "collection"
    extra = "".join(f"&{k}={v}" for k, v in opts.items())
    return f"{scheme}://{where}/{scheme}?{key}={name}{extra}"


@pytest.fixture(scope="session")
def demo_attacked():
    """The demo corpus followed by every document of one attack family (the JSONL audit's snapshot
    order for ``--with-attack``) and their tiny-hashing vectors."""
    ds = load_dataset(DEMO)
    docs = list(ds.documents) + list(ds.attack_documents(FAMILY))
    vecs = HashingEmbedder(dim=64).encode([d.model_text() for d in docs])
    return docs, vecs


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fill(scheme: str, where: Path, docs, vecs, *, model: str | None = "tiny-hashing", name: str = "demo",
         start: int = 0) -> str:
    src = source(scheme, where, name)
    fill_store(src, docs, vecs, model=model, start=start)
    return src


def tree_digest(path: Path, skip: tuple[str, ...] = (".lock",)) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and p.name not in skip}


def rotate(vecs: np.ndarray, seed: int = 1) -> np.ndarray:
    """The same geometry in another basis: what another model of the same width looks like to a gate
    that compares vectors (cosine ~ 0), although neighbourhoods are the same."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((vecs.shape[1], vecs.shape[1])))
    return (vecs @ q).astype(np.float32)
