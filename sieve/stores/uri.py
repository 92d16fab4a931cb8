"""The store source syntax shared by every face (``sieve audit``, the library, the service).

A store source names a collection (a table for LanceDB) of a vector store that a RAG application
reads::

    chroma:///abs/path/to/dir?collection=NAME      Chroma, persistent (embedded) client on a directory
    chroma:relative/dir?collection=NAME            the same, path relative to the working directory
    chroma://HOST:PORT?collection=NAME             Chroma's HTTP server (``chroma run``)
    qdrant:///abs/path?collection=NAME             Qdrant's local mode on a directory
    qdrant://HOST:PORT?collection=NAME             a Qdrant server, through the same client
    lancedb:///abs/path?table=NAME                 LanceDB, embedded

Options (query string, all optional but the collection/table):

* ``model=NAME`` — the embedding model that wrote the stored vectors (a Sieve model name such as
  ``all-mpnet-base-v2``); with it Sieve checks agreement on a sample and then uses the stored
  vectors instead of re-embedding (sieve/stores/vectors.py);
* ``text=FIELD`` — payload key (Qdrant) or column (LanceDB) holding the passage text (defaults:
  ``text``, ``document``, ``page_content``, ``content``);
* ``id=FIELD`` — payload key / column holding the document id (default: ``id``, ``doc_id``, else the
  store's own id);
* ``vector=NAME`` — the named vector (Qdrant) or vector column (LanceDB) when there are several;
* ``batch=N`` — rows read per call (default 1,000).

Parsing never opens anything; :func:`parse_store_uri` raises :class:`StoreError` with one line
naming what is wrong and the accepted forms.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote

#: scheme → (client module, name option, extra of sieve-rag that installs the client)
SCHEMES: dict[str, tuple[str, str, str]] = {
    "chroma": ("chromadb", "collection", "chroma"),
    "qdrant": ("qdrant_client", "collection", "qdrant"),
    "lancedb": ("lancedb", "table", "lancedb"),
}
OPTIONS = ("model", "text", "id", "vector", "batch")
DEFAULT_BATCH = 1000
FORMS = ("chroma:///path?collection=NAME, chroma://HOST:PORT?collection=NAME, qdrant:///path?collection=NAME, "
         "qdrant://HOST:PORT?collection=NAME, lancedb:///path?table=NAME")


class StoreError(ValueError):
    """A store source that cannot be read (bad URI, missing store or collection, missing client
    package, unreadable rows). The message is one line for users."""


@dataclass(frozen=True)
class StoreURI:
    """A parsed store source. ``path`` for embedded stores, ``server`` (``host:port``) for servers."""

    scheme: str
    name: str
    path: Path | None = None
    server: str | None = None
    options: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    text: str = ""          # the source as given

    @property
    def kind(self) -> str:
        return self.scheme

    @property
    def extra(self) -> str:
        return f"sieve-rag[{SCHEMES[self.scheme][2]}]"

    @property
    def model(self) -> str | None:
        return self.options.get("model") or None

    @property
    def batch(self) -> int:
        return int(self.options.get("batch", DEFAULT_BATCH))

    @property
    def label(self) -> str:
        """A short name for reports and ledger corpus ids: ``chroma:NAME``."""
        return f"{self.scheme}:{self.name}"

    def canonical(self) -> str:
        """The source with an absolute path and no options but the collection: the identity of
        the store's corpus (snapshots in the ledger are keyed by it)."""
        key = SCHEMES[self.scheme][1]
        where = f"//{self.server}" if self.server else f"//{self.path}"
        return f"{self.scheme}:{where}?{key}={self.name}"


def is_store_uri(text: object) -> bool:
    """True when ``text`` is written in a store scheme (``chroma:``, ``qdrant:``, ``lancedb:``)."""
    if not isinstance(text, str) or ":" not in text:
        return False
    return text.split(":", 1)[0].lower() in SCHEMES


def parse_store_uri(text: str) -> StoreURI:
    """Parse a store source (module docstring); :class:`StoreError` on anything malformed."""
    if not is_store_uri(text):
        raise StoreError(f"{text!r} is not a store source; use one of: {FORMS}")
    scheme, rest = text.split(":", 1)
    scheme = scheme.lower()
    key = SCHEMES[scheme][1]
    rest, _, query = rest.partition("?")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise StoreError(f"{text}: malformed options {query!r}; write ?{key}=NAME[&model=MODEL]") from None
    opts: dict[str, str] = {}
    for k, v in pairs:
        if k in opts:
            raise StoreError(f"{text}: option {k!r} given twice")
        opts[k] = v
    name = opts.pop(key, "")
    other = "table" if key == "collection" else "collection"
    if other in opts:
        raise StoreError(f"{text}: {scheme} names a {key}, not a {other}: write ?{key}=NAME")
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise StoreError(f"{text}: unknown option {unknown[0]!r}; options: {key}, {', '.join(OPTIONS)}")
    if not name.strip():
        raise StoreError(f"{text}: no {key} named; write {scheme}:///path?{key}=NAME")
    if "batch" in opts and (not opts["batch"].isdigit() or int(opts["batch"]) < 1):
        raise StoreError(f"{text}: batch must be a positive integer (got {opts['batch']!r})")
    path: Path | None = None
    server: str | None = None
    if rest.startswith("///"):
        path = Path(unquote(rest[2:]))
    elif rest.startswith("//"):
        server = rest[2:].rstrip("/")
        if not server or "/" in server:
            raise StoreError(f"{text}: write {scheme}:///abs/path (three slashes) for a directory or "
                             f"{scheme}://HOST:PORT for a server")
        if scheme == "lancedb":
            raise StoreError(f"{text}: LanceDB is embedded: write lancedb:///path/to/dir?table=NAME")
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise StoreError(f"{text}: a server is HOST:PORT (e.g. 127.0.0.1:8000); got {server!r}")
    elif rest:
        path = Path(unquote(rest))
    else:
        raise StoreError(f"{text}: no path; use one of: {FORMS}")
    if path is not None:
        path = path.expanduser().resolve()
    return StoreURI(scheme, name, path, server, opts, text)
