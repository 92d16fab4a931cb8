"""The corpus version: one content hash over the documents in order (used by index manifests)."""
from __future__ import annotations

import hashlib
from typing import Iterable

from sieve.types import Document


def corpus_hash(documents: Iterable[Document]) -> str:
    """sha256 (hex) over ids, titles and texts in order: the corpus version used by index manifests.

    Equal prefixes give equal hashes of the prefix, which lets an index detect appended documents.
    """
    h = hashlib.sha256()
    for d in documents:
        for part in (d.id, d.title, d.text):
            b = part.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()
