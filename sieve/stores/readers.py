"""Reading a store's corpus: documents, ids, metadata and stored vectors, in batches, read only.

One reader per store, each through the store's own client package (``chromadb``,
``qdrant_client``, ``lancedb``; extras ``sieve-rag[chroma]``, ``[qdrant]``, ``[lancedb]``), never a
reader of their files. Nothing is written to the store: Sieve's flags go to the quarantine ledger
only. A store directory that does not exist is refused before any client opens it (the embedded
clients would create an empty store there). Qdrant's local mode takes a ``.lock`` file in its
directory while it is open, as every Qdrant client does; the collection's data is not touched.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sieve.stores.uri import SCHEMES, StoreError, StoreURI, parse_store_uri
from sieve.types import Document

TEXT_FIELDS = ("text", "document", "page_content", "content")
ID_FIELDS = ("id", "doc_id")
#: Collection metadata keys that may name the embedding model of the stored vectors.
MODEL_KEYS = ("sieve:model", "embedding_model", "model")


@dataclass
class StoreCorpus:
    """What was read from one collection: documents (with metadata; ``title`` from metadata),
    the stored vectors as float32 rows aligned with them (``None`` when the store holds none) and
    the embedding model the store names (``uri`` option, else collection metadata)."""

    uri: StoreURI
    documents: list[Document]
    vectors: np.ndarray | None
    model: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.documents)


def client_module(uri: StoreURI) -> Any:
    """The store's client package, or :class:`StoreError` naming the extra that installs it."""
    mod = SCHEMES[uri.scheme][0]
    if importlib.util.find_spec(mod) is None:
        raise StoreError(f"{uri.text}: reading {uri.scheme} needs its client package: "
                         f"pip install '{uri.extra}'")
    return importlib.import_module(mod)


def read_store(source: str | StoreURI, *, progress: bool = False) -> StoreCorpus:
    """Read the whole collection named by ``source`` (see sieve/stores/uri.py)."""
    uri = parse_store_uri(source) if isinstance(source, str) else source
    client_module(uri)
    if uri.path is not None and not uri.path.is_dir():
        raise StoreError(f"{uri.text}: no {uri.scheme} store at {uri.path} (not a directory)")
    reader: Callable[[StoreURI, bool], StoreCorpus] = {"chroma": _read_chroma, "qdrant": _read_qdrant,
                                                       "lancedb": _read_lancedb}[uri.scheme]
    corpus = reader(uri, progress)
    if not corpus.documents:
        raise StoreError(f"{uri.text}: the {SCHEMES[uri.scheme][1]} {uri.name!r} is empty (no documents)")
    seen: set[str] = set()
    for d in corpus.documents:
        if d.id in seen:
            raise StoreError(f"{uri.text}: duplicate document id {d.id!r}")
        seen.add(d.id)
    if uri.model:
        corpus.model = uri.model
    corpus.info.setdefault("documents", len(corpus.documents))
    if corpus.vectors is not None:
        corpus.info["dim"] = int(corpus.vectors.shape[1])
    return corpus


# -- shared ------------------------------------------------------------------------------------
def _bar(total: int, progress: bool, uri: StoreURI) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"reading {uri.label}", unit="doc", disable=not progress)


def _document(uri: StoreURI, doc_id: Any, text: Any, meta: Any) -> Document:
    if doc_id is None or str(doc_id) == "":
        raise StoreError(f"{uri.text}: a row has no document id")
    if not isinstance(text, str) or not text.strip():
        raise StoreError(f"{uri.text}: document {str(doc_id)!r} has no text")
    md = dict(meta) if isinstance(meta, dict) else {}
    title = md.get("title")
    return Document(str(doc_id), text, title if isinstance(title, str) else "", metadata=md)


def _vectors(uri: StoreURI, rows: list[Any], n: int) -> np.ndarray | None:
    if not rows or all(r is None for r in rows):
        return None
    if any(r is None for r in rows):
        missing = sum(r is None for r in rows)
        raise StoreError(f"{uri.text}: {missing} of {n} documents have no stored vector")
    try:
        arr = np.asarray(np.stack([np.asarray(r, dtype=np.float32) for r in rows]), dtype=np.float32)
    except ValueError as e:
        raise StoreError(f"{uri.text}: stored vectors of unequal length ({e})") from None
    return arr


def _model_from(meta: Any) -> str | None:
    if isinstance(meta, dict):
        for k in MODEL_KEYS:
            v = meta.get(k)
            if isinstance(v, str) and v.strip():
                return v.strip()
    return None


# -- Chroma --------------------------------------------------------------------------------------
def _read_chroma(uri: StoreURI, progress: bool) -> StoreCorpus:
    import chromadb
    from chromadb.errors import NotFoundError

    try:
        if uri.server:
            host, _, port = uri.server.rpartition(":")
            client = chromadb.HttpClient(host=host, port=int(port))
        else:
            if not (uri.path / "chroma.sqlite3").is_file():     # type: ignore[operator]
                raise StoreError(f"{uri.text}: {uri.path} is not a Chroma directory (no chroma.sqlite3)")
            client = chromadb.PersistentClient(path=str(uri.path))
        try:
            col = client.get_collection(uri.name)
        except (NotFoundError, ValueError):
            names = sorted(c if isinstance(c, str) else c.name for c in client.list_collections())
            raise StoreError(f"{uri.text}: no collection {uri.name!r}; collections: "
                             f"{', '.join(names) or 'none'}") from None
        total = int(col.count())
        docs: list[Document] = []
        vecs: list[Any] = []
        with _bar(total, progress, uri) as bar:
            for off in range(0, total, uri.batch):
                got: Any = col.get(limit=uri.batch, offset=off, include=["documents", "metadatas", "embeddings"])
                emb = got.get("embeddings")
                metas: list[Any] = got.get("metadatas") or [None] * len(got["ids"])
                texts: list[Any] = got.get("documents") or [None] * len(got["ids"])
                for j, doc_id in enumerate(got["ids"]):
                    docs.append(_document(uri, doc_id, texts[j], metas[j]))
                    vecs.append(None if emb is None else emb[j])
                bar.update(len(got["ids"]))
        meta = col.metadata or {}
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001 - the client's own errors (connection, schema) as one line
        raise StoreError(f"{uri.text}: cannot read the Chroma collection: {_one_line(e)}") from None
    return StoreCorpus(uri, docs, _vectors(uri, vecs, len(docs)), _model_from(meta),
                       {"store": "chroma", "distance": str(meta.get("hnsw:space", "l2"))})


# -- Qdrant --------------------------------------------------------------------------------------
def _read_qdrant(uri: StoreURI, progress: bool) -> StoreCorpus:
    from qdrant_client import QdrantClient

    try:
        if uri.server:
            host, _, port = uri.server.rpartition(":")
            client = QdrantClient(host=host, port=int(port))
        else:
            client = QdrantClient(path=str(uri.path))
    except Exception as e:  # noqa: BLE001 - e.g. the directory locked by another process
        raise StoreError(f"{uri.text}: cannot open the Qdrant store: {_one_line(e)}") from None
    try:
        names = sorted(c.name for c in client.get_collections().collections)
        if uri.name not in names:
            raise StoreError(f"{uri.text}: no collection {uri.name!r}; collections: {', '.join(names) or 'none'}")
        info = client.get_collection(uri.name)
        vcfg = info.config.params.vectors
        vname: str | None = uri.options.get("vector")
        distance = ""
        if isinstance(vcfg, dict):                       # named vectors
            if vname is None:
                if len(vcfg) != 1:
                    raise StoreError(f"{uri.text}: the collection has several named vectors "
                                     f"({', '.join(sorted(vcfg))}); choose one with &vector=NAME")
                vname = next(iter(vcfg))
            if vname not in vcfg:
                raise StoreError(f"{uri.text}: no vector named {vname!r}; vectors: {', '.join(sorted(vcfg))}")
            distance = str(vcfg[vname].distance)
        elif vcfg is not None:
            distance = str(vcfg.distance)
        total = int(client.count(uri.name, exact=True).count)
        docs: list[Document] = []
        vecs: list[Any] = []
        offset: Any = None
        with _bar(total, progress, uri) as bar:
            while True:
                points, offset = client.scroll(uri.name, limit=uri.batch, offset=offset, with_payload=True,
                                               with_vectors=True)
                for p in points:
                    payload = dict(p.payload or {})
                    text = _field(payload, uri.options.get("text"), TEXT_FIELDS)
                    raw_meta = payload.get("metadata")
                    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
                    flat = {k: v for k, v in payload.items() if k != "metadata"}
                    md = {**flat, **meta}
                    doc_id = _field(md, uri.options.get("id"), ID_FIELDS)
                    md = {k: v for k, v in md.items() if k not in TEXT_FIELDS or k == "title"}
                    docs.append(_document(uri, doc_id if doc_id is not None else p.id, text, md))
                    v: Any = p.vector
                    if isinstance(v, dict):
                        v = v.get(vname) if vname else None
                    vecs.append(v)
                bar.update(len(points))
                if offset is None or not points:
                    break
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001
        raise StoreError(f"{uri.text}: cannot read the Qdrant collection: {_one_line(e)}") from None
    finally:
        client.close()
    return StoreCorpus(uri, docs, _vectors(uri, vecs, len(docs)), None, {"store": "qdrant", "distance": distance})


def _field(payload: dict[str, Any], name: str | None, defaults: tuple[str, ...]) -> Any:
    for k in ((name,) if name else defaults):
        if k in payload and payload[k] is not None:
            return payload[k]
    return None


# -- LanceDB -------------------------------------------------------------------------------------
def _read_lancedb(uri: StoreURI, progress: bool) -> StoreCorpus:
    import lancedb

    try:
        db = lancedb.connect(str(uri.path))
        listed = db.list_tables()
        names = sorted(getattr(listed, "tables", None) or list(listed))
        if uri.name not in names:
            raise StoreError(f"{uri.text}: no table {uri.name!r}; tables: {', '.join(names) or 'none'}")
        tb = db.open_table(uri.name)
        schema = tb.schema
        cols = list(schema.names)
        text_col = _column(uri, cols, uri.options.get("text"), TEXT_FIELDS, "text")
        id_col = _column(uri, cols, uri.options.get("id"), ID_FIELDS, "id")
        vec_cols = [f.name for f in schema if _is_vector(f.type)]
        vec_col = uri.options.get("vector") or ("vector" if "vector" in vec_cols else
                                                (vec_cols[0] if len(vec_cols) == 1 else None))
        if uri.options.get("vector") and vec_col not in vec_cols:
            raise StoreError(f"{uri.text}: no vector column {vec_col!r}; vector columns: "
                             f"{', '.join(vec_cols) or 'none'}")
        meta_cols = [c for c in cols if c not in (text_col, id_col, vec_col)]
        model = _model_from({k.decode(): v.decode() for k, v in (schema.metadata or {}).items()})
        total = int(tb.count_rows())
        docs: list[Document] = []
        vecs: list[Any] = []
        with _bar(total, progress, uri) as bar:
            for off in range(0, total, uri.batch):
                part = tb.search().offset(off).limit(uri.batch).to_arrow().to_pylist()
                for row in part:
                    md = {c: _plain(row.get(c)) for c in meta_cols}
                    if isinstance(md.get("metadata"), str):         # LangChain's LanceDB keeps JSON text
                        try:
                            extra = json.loads(md["metadata"])
                            if isinstance(extra, dict):
                                md = {**{k: v for k, v in md.items() if k != "metadata"}, **extra}
                        except ValueError:
                            pass
                    docs.append(_document(uri, row.get(id_col), row.get(text_col), md))
                    vecs.append(row.get(vec_col) if vec_col else None)
                bar.update(len(part))
                if not part:
                    break
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001
        raise StoreError(f"{uri.text}: cannot read the LanceDB table: {_one_line(e)}") from None
    return StoreCorpus(uri, docs, _vectors(uri, vecs, len(docs)), model,
                       {"store": "lancedb", "distance": ""})


def _column(uri: StoreURI, cols: list[str], name: str | None, defaults: tuple[str, ...], what: str) -> str:
    for c in ((name,) if name else defaults):
        if c in cols:
            return c
    raise StoreError(f"{uri.text}: no {what} column ({', '.join((name,) if name else defaults)}); columns: "
                     f"{', '.join(cols)} (choose one with &{what}=COLUMN)")


def _is_vector(t: Any) -> bool:
    import pyarrow as pa

    return bool((pa.types.is_fixed_size_list(t) or pa.types.is_list(t)) and pa.types.is_floating(t.value_type))


def _plain(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__

