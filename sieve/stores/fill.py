"""Loading documents and vectors INTO a store: for the tests, the benchmark and the README's demo
walk-through only (``python -m sieve.stores.fill``). Sieve's audit and filter paths never call this
module — they only read a store (sieve/stores/readers.py).

Layouts written are the ones the readers expect by default and the frameworks use: Chroma
documents + metadatas + embeddings; Qdrant points with payload ``{"page_content", "metadata": {"id",
"title"}}`` (LangChain's layout) and integer point ids; LanceDB columns ``id``, ``text``,
``title``, ``vector``.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sieve.stores.uri import StoreURI, parse_store_uri
from sieve.types import Document


def fill_store(source: str | StoreURI, documents: Sequence[Document], vectors: np.ndarray, *,
               model: str | None = None, start: int = 0, batch: int = 1000) -> None:
    """Add ``documents`` with ``vectors`` to the collection of ``source`` (created if missing).
    ``model`` is written into the collection's metadata (Chroma) or schema metadata (LanceDB) as
    ``sieve:model``. ``start``: first integer point id (Qdrant) when appending a batch."""
    uri = parse_store_uri(source) if isinstance(source, str) else source
    vecs = np.asarray(vectors, np.float32)
    assert len(documents) == vecs.shape[0]
    if uri.scheme == "chroma":
        _fill_chroma(uri, documents, vecs, model, batch)
    elif uri.scheme == "qdrant":
        _fill_qdrant(uri, documents, vecs, start, batch)
    else:
        _fill_lancedb(uri, documents, vecs, model)


def _meta(d: Document) -> dict[str, Any]:
    return {"title": d.title or "", **{k: v for k, v in d.metadata.items() if isinstance(v, (str, int, float, bool))}}


def _fill_chroma(uri: StoreURI, docs: Sequence[Document], vecs: np.ndarray, model: str | None, batch: int) -> None:
    import chromadb

    assert uri.path is not None
    client = chromadb.PersistentClient(path=str(uri.path))
    meta = {"hnsw:space": "cosine", **({"sieve:model": model} if model else {})}
    col = client.get_or_create_collection(uri.name, metadata=meta, embedding_function=None)
    for s in range(0, len(docs), batch):
        part = docs[s: s + batch]
        col.add(ids=[d.id for d in part], documents=[d.text for d in part],
                metadatas=[_meta(d) for d in part], embeddings=vecs[s: s + batch].tolist())


def _fill_qdrant(uri: StoreURI, docs: Sequence[Document], vecs: np.ndarray, start: int, batch: int) -> None:
    from qdrant_client import QdrantClient, models

    assert uri.path is not None
    client = QdrantClient(path=str(uri.path))
    try:
        if not client.collection_exists(uri.name):
            client.create_collection(uri.name, vectors_config=models.VectorParams(size=int(vecs.shape[1]),
                                                                                 distance=models.Distance.COSINE))
        for s in range(0, len(docs), batch):
            pts = [models.PointStruct(id=start + s + j, vector=vecs[s + j].tolist(),
                                      payload={"page_content": d.text, "metadata": {"id": d.id, **_meta(d)}})
                   for j, d in enumerate(docs[s: s + batch])]
            client.upsert(uri.name, pts)
    finally:
        client.close()


def _fill_lancedb(uri: StoreURI, docs: Sequence[Document], vecs: np.ndarray, model: str | None) -> None:
    import lancedb
    import pyarrow as pa

    assert uri.path is not None
    db = lancedb.connect(str(uri.path))
    dim = int(vecs.shape[1])
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("title", pa.string()),
                        ("vector", pa.list_(pa.float32(), dim))],
                       metadata={"sieve:model": model} if model else None)
    table = pa.Table.from_pydict({"id": [d.id for d in docs], "text": [d.text for d in docs],
                                  "title": [d.title or "" for d in docs],
                                  "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), dim)},
                                 schema=schema)
    listed = db.list_tables()
    names = getattr(listed, "tables", None) or list(listed)
    if uri.name in names:
        db.open_table(uri.name).add(table)
    else:
        db.create_table(uri.name, data=table, schema=schema)


def demo_vectors(dataset_dir: str | Path = "demo_data") -> tuple[list[Document], np.ndarray, str]:
    """The demo corpus and its shipped retriever vectors (``demo_data/.artifacts``, float16)."""
    import json

    from sieve.corpus import load_dataset

    ds = load_dataset(dataset_dir)
    adir = Path(dataset_dir) / ".artifacts" / "all-mpnet-base-v2"
    ids = json.loads((adir / "ids.json").read_text(encoding="utf-8"))
    vecs = np.load(adir / "vectors.f16.npy", allow_pickle=False).astype(np.float32)
    if ids != [d.id for d in ds.documents]:
        raise ValueError(f"{adir}: shipped vectors do not match the corpus of {dataset_dir}")
    return ds.documents, vecs, "all-mpnet-base-v2"


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m sieve.stores.fill SOURCE [DATASET]``: load the demo corpus with its shipped
    all-mpnet-base-v2 vectors into a store (to try ``sieve audit SOURCE``)."""
    ap = argparse.ArgumentParser(prog="python -m sieve.stores.fill", description=main.__doc__)
    ap.add_argument("source", help="e.g. chroma:///tmp/kb?collection=demo")
    ap.add_argument("dataset", nargs="?", default="demo_data")
    a = ap.parse_args(argv)
    docs, vecs, model = demo_vectors(a.dataset)
    fill_store(a.source, docs, vecs, model=model)
    print(f"{len(docs)} documents with {model} vectors written to {a.source}")


if __name__ == "__main__":
    main()
